//! Llama 1/2/3.x and Mistral from safetensors (`config.json` `model_type =
//! "llama"` or `"mistral"`), lowered with Hugging Face tensor names. (Llama
//! GGUFs go through `llama.rs`, whose rows the converter permuted.)
//!
//! Per layer (HF `LlamaDecoderLayer`): `x + attn(input_layernorm(x))`, then
//! `x + mlp(post_attention_layernorm(x))`, every norm RMS. Attention: NeoX
//! RoPE (HF `rotate_half`) with Llama 3's frequency scaling where the
//! config asks for it, GQA, scale `1/sqrt(head_dim)`, biases on all four
//! projections when `attention_bias`; Mistral's `sliding_window` (each
//! token sees itself and the `window - 1` before it). The MLP is SwiGLU.
//!
//! config.json keys: the dimensions (`head_dim` where given, else hidden /
//! heads), `rms_norm_eps`, the RoPE base and `rope_scaling` (`default`,
//! `linear`, `llama3`; others refused), `tie_word_embeddings`, `hidden_act`
//! (`silu`), `attention_bias`, `mlp_bias` (must be false), and for mistral
//! `sliding_window` (null or a window).

use super::hf::{require_act, rope_scaling, rope_theta, HeadDim, HfDims};
use super::qwen3::{dense_mlp, lower_decoder, Decoder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;

pub const LLAMA: &str = "llama";
pub const MISTRAL: &str = "mistral";

/// The math-relevant `config.json` keys these families read.
pub const CONFIG_READS: &[&str] = &["rope_scaling", "rope_parameters", "hidden_act", "attention_bias", "mlp_bias", "sliding_window"];

pub fn lower(st: &SafetensorsFile, model_type: &str) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::KeyOrHiddenOverHeads, false)?;
    require_act(st, model_type, "silu")?;
    let flag = |k: &str| -> Result<bool, Diagnostic> {
        match st.config.get(k) {
            None | Some(serde_json::Value::Null) => Ok(false),
            Some(v) => v.as_bool().ok_or_else(|| Diagnostic::new(&st.config_path, format!("`{k}` is not a boolean"))),
        }
    };
    if flag("mlp_bias")? {
        return Err(Diagnostic::new(&st.config_path, format!("`mlp_bias` is true: biased MLPs are not lowered for the {model_type} family yet")));
    }
    let window = match st.config.get("sliding_window") {
        None | Some(serde_json::Value::Null) => None,
        Some(_) if model_type == LLAMA => {
            return Err(Diagnostic::new(&st.config_path, "`sliding_window` is set on a llama config: transformers' Llama has no sliding window")
                .note("a Mistral checkpoint says `model_type: \"mistral\"`"))
        }
        Some(_) => super::hf::sliding_window(st, dims.context)?,
    };
    let bias = flag("attention_bias")?;
    let decoder = Decoder { qkv_bias: bias, out_bias: bias, scaling: rope_scaling(st, model_type)?, window, ..Decoder::plain(rope_theta(st)?) };
    let mut facts = vec![("attention_bias", bias.to_string())];
    if let Some(w) = window {
        facts.push(("sliding_window", w.to_string()));
    }
    lower_decoder(st, model_type, dims, &decoder, &mut |b, l, h| dense_mlp(b, &dims, l, h), facts)
}
