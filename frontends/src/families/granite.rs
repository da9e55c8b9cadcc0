//! IBM Granite 3's four scalars on a llama decoder (HF `GraniteForCausalLM`,
//! `config.json` `model_type = "granite"`; GGUF arch `granite`): the
//! embeddings are multiplied by `embedding_multiplier`, each attention and
//! MLP output by `residual_multiplier` before its residual add, attention
//! scores are scaled by `attention_multiplier` (instead of
//! `1/sqrt(head_dim)`), and the logits divided by `logits_scaling`. GGUF
//! names them `granite.embedding_scale`, `.residual_scale`,
//! `.attention.scale` and `.logit_scale` (llama.cpp's converter).
//! Everything else is llama's (`llama.rs` for the GGUF, `llama_hf.rs`).

use super::Builder;
use crate::error::Diagnostic;
use crate::gguf::GgufFile;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NodeId};

pub const MODEL_TYPE: &str = "granite";

/// The `config.json` keys the family reads beyond llama's.
pub const CONFIG_KEYS: [&str; 4] = ["embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"];

/// The GGUF keys (after `granite.`) that hold them.
pub const GGUF_KEYS: [&str; 4] = ["embedding_scale", "residual_scale", "attention.scale", "logit_scale"];

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scales {
    pub embedding: f32,
    pub residual: f32,
    pub attention: f32,
    /// What the logits are divided by.
    pub logits: f32,
}

impl Scales {
    pub fn from_config(st: &SafetensorsFile) -> Result<Scales, Diagnostic> {
        let f = |k: &str| st.config_float(k).map(|v| v as f32);
        Scales::checked([f(CONFIG_KEYS[0])?, f(CONFIG_KEYS[1])?, f(CONFIG_KEYS[2])?, f(CONFIG_KEYS[3])?], &st.config_path, CONFIG_KEYS)
    }

    pub fn from_gguf(g: &GgufFile, arch: &str) -> Result<Scales, Diagnostic> {
        let f = |k: &str| g.float(&format!("{arch}.{k}")).map(|v| v as f32);
        Scales::checked([f(GGUF_KEYS[0])?, f(GGUF_KEYS[1])?, f(GGUF_KEYS[2])?, f(GGUF_KEYS[3])?], &g.path, GGUF_KEYS)
    }

    fn checked([embedding, residual, attention, logits]: [f32; 4], path: &str, keys: [&str; 4]) -> Result<Scales, Diagnostic> {
        if let Some((k, v)) = keys.iter().zip([embedding, residual, attention, logits]).find(|(_, v)| !(v.is_finite() && *v != 0.0)) {
            return Err(Diagnostic::new(path, format!("`{k}` = {v} is not a finite, nonzero scale")));
        }
        Ok(Scales { embedding, residual, attention, logits })
    }

    /// `x · s` with `s` a `[1]` constant.
    pub fn times(b: &mut Builder, x: NodeId, s: f32) -> NodeId {
        let s = b.scalar(s);
        b.binary(BinaryOp::Mul, x, s)
    }

    /// The facts the plan keeps.
    pub fn facts(&self) -> Vec<(&'static str, String)> {
        vec![
            ("embedding_multiplier", format!("{:?}", self.embedding)),
            ("residual_multiplier", format!("{:?}", self.residual)),
            ("attention_multiplier", format!("{:?}", self.attention)),
            ("logits_scaling", format!("{:?}", self.logits)),
        ]
    }
}
