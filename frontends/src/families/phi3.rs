//! Phi-3 (`config.json` `model_type = "phi3"`), lowered from safetensors
//! with Hugging Face tensor names.
//!
//! A llama-shaped decoder (RMSNorm, NeoX RoPE, GQA, SwiGLU) whose weights
//! are fused: `self_attn.qkv_proj` holds the rows of Q, then K, then V, and
//! `mlp.gate_up_proj` the rows of the gate, then the up projection (HF
//! `Phi3MLP`: `gate, up = chunk(2)`). The graph multiplies by each fused
//! weight once and narrows the product; a split in the wrong order or at
//! the wrong row is what the parity fixture's controls catch.
//!
//! RoPE scaling: the 4k-context configs have none (`rope_scaling` null, or
//! `rope_parameters.rope_type = "default"`); the 128k configs' `longrope`
//! is refused with an error naming it (not lowered yet).
//!
//! config.json keys: `hidden_size`, `num_hidden_layers`,
//! `num_attention_heads`, `num_key_value_heads`, `intermediate_size`,
//! `vocab_size`, `rms_norm_eps`, `max_position_embeddings`, the RoPE base
//! (see `qwen3::rope_theta`), `tie_word_embeddings` (optional, false).

use super::{batch, seq, AttentionCfg, Builder, Projections};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::families::qwen3::rope_theta;
use crate::safetensors::SafetensorsFile;
use graphc_ir::plan::ModelMeta;
use graphc_ir::{BinaryOp, DType, NormKind, Op, RopeScaling, RopeStyle, UnaryOp};
use std::collections::BTreeMap;

pub const MODEL_TYPE: &str = "phi3";

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let u = |k: &str| st.config_uint(k);
    let (d, n_layers, nh, nkv) = (u("hidden_size")?, u("num_hidden_layers")?, u("num_attention_heads")?, u("num_key_value_heads")?);
    let (ffn, vocab, context) = (u("intermediate_size")?, u("vocab_size")?, u("max_position_embeddings")?);
    if nh == 0 || nkv == 0 || nh % nkv != 0 || d % nh != 0 {
        return Err(Diagnostic::new(&st.config_path, format!("{nh} heads on {nkv} kv heads do not divide hidden_size {d}")));
    }
    let hd = d / nh;
    if let Some(scaling) = st.config.get("rope_scaling").filter(|v| !v.is_null()) {
        let kind = scaling.get("type").or_else(|| scaling.get("rope_type")).and_then(|v| v.as_str()).unwrap_or("?");
        return Err(Diagnostic::new(&st.config_path, format!("`rope_scaling` is `{kind}`: phi3's scaled RoPE (longrope) is not lowered yet"))
            .note("the 4k-context phi3 configs, without rope_scaling, are supported"));
    }
    // HF's Phi3Config defaults the factor to 1 (the whole head rotates);
    // phi-4-mini's config sets 0.75.
    let has_factor = st.config.get("partial_rotary_factor").is_some()
        || st.config.get("rope_parameters").and_then(|p| p.get("partial_rotary_factor")).is_some();
    let factor = if has_factor { crate::families::phi2::partial_rotary_factor(st)? } else { 1.0 };
    let rotary_dim = (hd as f64 * factor) as usize;
    if rotary_dim == 0 || rotary_dim > hd || rotary_dim % 2 != 0 {
        return Err(Diagnostic::new(&st.config_path, format!("partial_rotary_factor {factor} of head_dim {hd} gives {rotary_dim} rotary features, not an even number in 2..={hd}")));
    }
    let eps = st.config_float("rms_norm_eps")? as f32;
    let theta = rope_theta(st)?;
    let tied = st.config.get("tie_word_embeddings").and_then(|v| v.as_bool()).unwrap_or(false);
    let mut b = Builder::new("phi3", st);
    let tokens = b.input("tokens", DType::I32, vec![batch(), seq()]);
    let positions = b.input("positions", DType::I32, vec![batch(), seq()]);
    let last_rows = b.input("last_rows", DType::I32, vec![batch()]);
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let cfg = AttentionCfg {
        d,
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
        norm: norm.clone(),
        rope: Op::Rope { style: RopeStyle::Neox, rotary_dim, theta, scaling: RopeScaling::None },
        scale: 1.0 / (hd as f32).sqrt(),
        window: None,
        softcap: None,
        biases: false,
    };
    for l in 0..n_layers {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("model.layers.{l}.{s}.weight");
        let ln = b.weight(&w("input_layernorm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, ln]);
        let o = b.attention_from(h, positions, Projections::Fused(&w("self_attn.qkv_proj")), &w("self_attn.o_proj"), None, &cfg)?;
        x = b.binary(BinaryOp::Add, x, o);
        let ln = b.weight(&w("post_attention_layernorm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, ln]);
        // The fused gate/up product, split: the gate is the first half.
        let wgu = b.weight(&w("mlp.gate_up_proj"), Some(&[2 * ffn, d]))?;
        let wd = b.weight(&w("mlp.down_proj"), Some(&[d, ffn]))?;
        let gu = b.matmul(h, wgu);
        let gate = b.op(Op::Narrow { axis: 2, start: 0usize.into(), len: ffn.into() }, &[gu]);
        let up = b.op(Op::Narrow { axis: 2, start: ffn.into(), len: ffn.into() }, &[gu]);
        let gate = b.unary(UnaryOp::Silu, gate);
        let a = b.binary(BinaryOp::Mul, gate, up);
        let down = b.matmul(a, wd);
        x = b.binary(BinaryOp::Add, x, down);
    }
    b.layer = None;
    let out = if tied { Ok(embd) } else { Err(("lm_head.weight", vocab)) };
    b.logits_head((x, d), last_rows, (norm, "model.norm.weight"), out)?;
    let facts: BTreeMap<String, String> = [
        ("layers", n_layers.to_string()),
        ("hidden", d.to_string()),
        ("n_heads", nh.to_string()),
        ("n_kv_heads", nkv.to_string()),
        ("head_dim", hd.to_string()),
        ("rotary_dim", rotary_dim.to_string()),
        ("norm_eps", format!("{eps:?}")),
        ("rope_theta", format!("{theta:?}")),
        ("fused_weights", "qkv_proj split q,k,v; gate_up_proj split gate,up".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let meta = ModelMeta { vocab_size: vocab, context_length: context, bos_id: None, add_bos: false, stop_ids: vec![], facts };
    Ok(Lowered { graph: b.g, manifest: b.manifest, meta })
}
