//! Gemma (1) (`config.json` `model_type = "gemma"`), lowered from
//! safetensors with Hugging Face tensor names.
//!
//! Per layer (HF `GemmaDecoderLayer`): `x + attn(input_layernorm(x))`, then
//! `x + mlp(post_attention_layernorm(x))`. Gemma's RMSNorm scales by
//! `1 + weight` (the checkpoint stores the offset-free weight; unlike
//! llama.cpp's GGUF converter, HF does not fold the `1` in), so each norm
//! weight gets `+ 1` in the graph. The embedding is scaled by
//! `sqrt(hidden)` rounded to f32; attention is NeoX RoPE with GQA/MQA and
//! scale `1/sqrt(head_dim)`; the MLP is GeGLU with `hidden_activation`
//! (`gelu_pytorch_tanh`: the tanh form; `gelu`: the erf form); the output
//! is tied to the embedding.
//!
//! The context length is `max_position_embeddings`, read from the config
//! and required (8192 for the gemma-2b/7b configs): engines that fell back
//! to a built-in default served Gemma at the wrong length.

use super::hf::{rope_theta, HeadDim, HfDims};
use super::{batch, seq, Builder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NodeId, NormKind, Op, RopeScaling, RopeStyle, UnaryOp};

pub const MODEL_TYPE: &str = "gemma";

/// Gemma's RMSNorm, `x / rms(x) * (1 + w)`, of the `[d]` weight `weight`.
pub(crate) fn one_plus_norm(b: &mut Builder, x: NodeId, weight: &str, d: usize, eps: f32) -> Result<NodeId, Diagnostic> {
    let mut w = b.weight(weight, Some(&[d]))?;
    if !b.norms_include_one {
        let one = scalar(b, 1.0);
        w = b.binary(BinaryOp::Add, w, one);
    }
    Ok(b.op(Op::Norm { kind: NormKind::Rms, eps }, &[x, w]))
}

/// The embedding of Gemma's HF families (`model.embed_tokens`, also the
/// tied head) and the step's tokens' rows of it scaled by `sqrt(hidden)`
/// rounded to f32, as transformers scales them.
pub(crate) fn scaled_embedding(b: &mut Builder, tokens: NodeId, (vocab, d): (usize, usize)) -> Result<(NodeId, NodeId), Diagnostic> {
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let x = b.op(Op::Gather, &[embd, tokens]);
    let scale = scalar(b, (d as f64).sqrt() as f32);
    Ok((embd, b.binary(BinaryOp::Mul, x, scale)))
}

/// One Gemma 2 / Gemma 3 decoder layer with HF names (`model.layers.L.`),
/// its attention and MLP each between two `1 + w` norms:
/// `x + post_attention_layernorm(attn(input_layernorm(x)))`, then
/// `x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))`;
/// Q and K normed per head (`self_attn.q_norm`, `k_norm`) when `qk_norm`.
pub(crate) fn sandwich_layer(
    b: &mut Builder,
    l: usize,
    (x, positions): (NodeId, NodeId),
    cfg: &super::AttentionCfg,
    qk_norm: bool,
    (ffn, act, eps): (usize, UnaryOp, f32),
) -> Result<NodeId, Diagnostic> {
    let d = cfg.d;
    let w = |s: &str| format!("model.layers.{l}.{s}.weight");
    let h = one_plus_norm(b, x, &w("input_layernorm"), d, eps)?;
    let names = [&w("self_attn.q_proj"), &w("self_attn.k_proj"), &w("self_attn.v_proj"), &w("self_attn.o_proj")];
    let (q_norm, k_norm) = (w("self_attn.q_norm"), w("self_attn.k_norm"));
    let norms = qk_norm.then_some((q_norm.as_str(), k_norm.as_str()));
    let o = b.attention(h, positions, names.map(|s| s.as_str()), norms, cfg)?;
    let o = one_plus_norm(b, o, &w("post_attention_layernorm"), d, eps)?;
    let x = b.binary(BinaryOp::Add, x, o);
    let h = one_plus_norm(b, x, &w("pre_feedforward_layernorm"), d, eps)?;
    let down = b.gated_mlp(h, (&w("mlp.gate_proj"), &w("mlp.up_proj"), &w("mlp.down_proj")), (ffn, d), act)?;
    let down = one_plus_norm(b, down, &w("post_feedforward_layernorm"), d, eps)?;
    Ok(b.binary(BinaryOp::Add, x, down))
}

/// The tied head of Gemma's HF families: each row's last token, the final
/// `1 + w` norm (`model.norm`), times the embedding `embd`.
pub(crate) fn tied_head(b: &mut Builder, (x, last_rows, embd): (NodeId, NodeId, NodeId), d: usize, eps: f32) -> Result<NodeId, Diagnostic> {
    let flat = b.reshape(x, vec![batch().mul(&seq()), d.into()]);
    let last = b.op(Op::Gather, &[flat, last_rows]);
    let h = one_plus_norm(b, last, "model.norm.weight", d, eps)?;
    Ok(b.matmul(h, embd))
}

/// Whether `st` is a GGUF seen through HF names, whose norm weights hold the `1 +`.
pub(crate) fn norms_include_one(st: &SafetensorsFile) -> bool {
    st.config.get(crate::gguf_hf::NORMS_INCLUDE_ONE).and_then(|v| v.as_bool()) == Some(true)
}

/// The plan fact saying where the `1 +` of the norm weights is.
pub(crate) fn norm_offset_fact(included: bool) -> String {
    if included { "1, in the weights (GGUF: the converter added it)" } else { "1 (HF stores w; Gemma scales by 1 + w)" }.to_string()
}

/// A `[1]` f32 constant.
pub(crate) fn scalar(b: &mut Builder, value: f32) -> NodeId {
    b.scalar(value)
}

/// The GeGLU activation named by `hidden_activation` (or `hidden_act`).
pub(crate) fn gelu_kind(st: &SafetensorsFile) -> Result<UnaryOp, Diagnostic> {
    let key = if st.config.get("hidden_activation").is_some_and(|v| !v.is_null()) { "hidden_activation" } else { "hidden_act" };
    match st.config_value(key)?.as_str() {
        Some("gelu_pytorch_tanh") => Ok(UnaryOp::GeluTanh),
        Some("gelu") => Ok(UnaryOp::GeluErf),
        other => Err(Diagnostic::new(&st.config_path, format!("`{key}` is {other:?}; expected \"gelu_pytorch_tanh\" or \"gelu\""))),
    }
}

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::Key, false)?;
    let HfDims { d, n_layers, head_dim: hd, ffn, vocab, context, .. } = dims;
    let eps = st.config_float("rms_norm_eps")? as f32;
    let theta = rope_theta(st)?;
    let act = gelu_kind(st)?;
    let mut b = Builder::new("gemma", st);
    b.norms_include_one = norms_include_one(st);
    let (tokens, positions, last_rows) = b.inputs();
    let (embd, mut x) = scaled_embedding(&mut b, tokens, (vocab, d))?;
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let gemma_norm = |b: &mut Builder, x: NodeId, weight: &str| one_plus_norm(b, x, weight, d, eps);
    let cfg = dims.attention(norm.clone(), Op::Rope { style: RopeStyle::Neox, rotary_dim: hd, theta, scaling: RopeScaling::None });
    for l in 0..n_layers {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("model.layers.{l}.{s}.weight");
        let h = gemma_norm(&mut b, x, &w("input_layernorm"))?;
        let names = [&w("self_attn.q_proj"), &w("self_attn.k_proj"), &w("self_attn.v_proj"), &w("self_attn.o_proj")];
        let o = b.attention(h, positions, names.map(|s| s.as_str()), None, &cfg)?;
        x = b.binary(BinaryOp::Add, x, o);
        let h = gemma_norm(&mut b, x, &w("post_attention_layernorm"))?;
        let down = b.gated_mlp(h, (&w("mlp.gate_proj"), &w("mlp.up_proj"), &w("mlp.down_proj")), (ffn, d), act)?;
        x = b.binary(BinaryOp::Add, x, down);
    }
    b.layer = None;
    // The final norm, then the tied head.
    let flat = b.reshape(x, vec![batch().mul(&seq()), d.into()]);
    let last = b.op(Op::Gather, &[flat, last_rows]);
    let h = gemma_norm(&mut b, last, "model.norm.weight")?;
    let logits = b.matmul(h, embd);
    b.op(Op::Output { name: graphc_ir::io::LOGITS.into() }, &[logits]);
    let facts = [
        ("norm_eps", format!("{eps:?}")),
        ("norm_weight_offset", norm_offset_fact(b.norms_include_one)),
        ("rope_theta", format!("{theta:?}")),
        ("mlp_activation", format!("{act:?}")),
        ("context_length", format!("{context} (config.json max_position_embeddings)")),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts.to_vec()].concat()))
}
