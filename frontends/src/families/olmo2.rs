//! OLMo 2 (`config.json` `model_type = "olmo2"`, GGUF `olmo2` through the
//! HF view), lowered with Hugging Face tensor names.
//!
//! Per layer (HF `Olmo2DecoderLayer`): no norm before attention or the MLP;
//! `x + post_attention_layernorm(attn(x))`, then
//! `x + post_feedforward_layernorm(mlp(x))`, every norm RMS. Q and K are
//! RMS-normed over the whole projection (`q_norm` of `num_heads *
//! head_dim`) before the heads split, then NeoX RoPE; GQA, scale
//! `1/sqrt(head_dim)`, biases on all four projections when
//! `attention_bias`; the MLP is SwiGLU.

use super::hf::{require_act, rope_scaling, rope_theta, tied, HeadDim, HfDims};
use super::{AttentionCfg, Builder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NormKind, Op, RopeStyle, UnaryOp};

pub const MODEL_TYPE: &str = "olmo2";

/// The math-relevant `config.json` keys this family reads.
pub const CONFIG_READS: &[&str] = &["rope_scaling", "rope_parameters", "hidden_act", "attention_bias"];

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::KeyOrHiddenOverHeads, false)?;
    let HfDims { d, n_layers, head_dim: hd, ffn, vocab, context, .. } = dims;
    require_act(st, MODEL_TYPE, "silu")?;
    let bias = match st.config.get("attention_bias") {
        None | Some(serde_json::Value::Null) => false,
        Some(v) => v.as_bool().ok_or_else(|| Diagnostic::new(&st.config_path, "`attention_bias` is not a boolean"))?,
    };
    let eps = st.config_float("rms_norm_eps")? as f32;
    let (theta, scaling) = (rope_theta(st)?, rope_scaling(st, MODEL_TYPE)?);
    let tied = tied(st);
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let rope = Op::Rope { style: RopeStyle::Neox, rotary_dim: hd, theta, scaling: scaling.clone() };
    let cfg = AttentionCfg { qkv_bias: bias, out_bias: bias, qk_norm_full_width: true, ..dims.attention(norm.clone(), rope) };
    let mut b = Builder::new(MODEL_TYPE, st);
    let (tokens, positions, last_rows) = b.inputs();
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    for l in 0..n_layers {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("model.layers.{l}.{s}.weight");
        let names = [&w("self_attn.q_proj"), &w("self_attn.k_proj"), &w("self_attn.v_proj"), &w("self_attn.o_proj")];
        let (q_norm, k_norm) = (w("self_attn.q_norm"), w("self_attn.k_norm"));
        let o = b.attention(x, positions, names.map(|s| s.as_str()), Some((&q_norm, &k_norm)), &cfg)?;
        let post = b.weight(&w("post_attention_layernorm"), Some(&[d]))?;
        let o = b.op(norm.clone(), &[o, post]);
        x = b.binary(BinaryOp::Add, x, o);
        let down = b.gated_mlp(x, (&w("mlp.gate_proj"), &w("mlp.up_proj"), &w("mlp.down_proj")), (ffn, d), UnaryOp::Silu)?;
        let post = b.weight(&w("post_feedforward_layernorm"), Some(&[d]))?;
        let down = b.op(norm.clone(), &[down, post]);
        x = b.binary(BinaryOp::Add, x, down);
    }
    b.layer = None;
    let out = if tied { Ok(embd) } else { Err(("lm_head.weight", vocab)) };
    b.logits_head((x, d), last_rows, (norm, "model.norm.weight"), out)?;
    let facts = vec![
        ("norm_eps", format!("{eps:?}")),
        ("rope_theta", format!("{theta:?}")),
        ("rope_scaling", format!("{scaling:?}")),
        ("norms", "after attention and the MLP; q/k over the whole projection".to_string()),
        ("attention_bias", bias.to_string()),
        ("tied_output", tied.to_string()),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts].concat()))
}
