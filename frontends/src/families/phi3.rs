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
//! (see `hf::rope_theta`), `tie_word_embeddings` (optional, false).

use super::hf::{rope_theta, rotary_dim, tied, HeadDim, HfDims};
use super::{Builder, Projections};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NormKind, Op, RopeScaling, RopeStyle, UnaryOp};

pub const MODEL_TYPE: &str = "phi3";

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::HiddenOverHeads, false)?;
    let HfDims { d, n_layers, head_dim: hd, ffn, vocab, context, .. } = dims;
    if let Some(scaling) = st.config.get("rope_scaling").filter(|v| !v.is_null()) {
        let kind = scaling.get("type").or_else(|| scaling.get("rope_type")).and_then(|v| v.as_str()).unwrap_or("?");
        return Err(Diagnostic::new(&st.config_path, format!("`rope_scaling` is `{kind}`: phi3's scaled RoPE (longrope) is not lowered yet"))
            .note("the 4k-context phi3 configs, without rope_scaling, are supported"));
    }
    // HF's Phi3Config defaults the factor to 1 (the whole head rotates);
    // phi-4-mini's config sets 0.75.
    let rotary_dim = rotary_dim(st, hd, Some(1.0))?;
    let eps = st.config_float("rms_norm_eps")? as f32;
    let theta = rope_theta(st)?;
    let tied = tied(st);
    let mut b = Builder::new("phi3", st);
    let (tokens, positions, last_rows) = b.inputs();
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let cfg = dims.attention(norm.clone(), Op::Rope { style: RopeStyle::Neox, rotary_dim, theta, scaling: RopeScaling::None });
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
    let facts = [
        ("rotary_dim", rotary_dim.to_string()),
        ("norm_eps", format!("{eps:?}")),
        ("rope_theta", format!("{theta:?}")),
        ("fused_weights", "qkv_proj split q,k,v; gate_up_proj split gate,up".to_string()),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts.to_vec()].concat()))
}
