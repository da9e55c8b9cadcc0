//! PhiMoE (`config.json` `model_type = "phimoe"`, Phi-3.5-MoE), lowered
//! from safetensors in the Hub's layout (`block_sparse_moe.gate` the
//! router, `block_sparse_moe.experts.E.{w1,w3,w2}` each expert's gate, up
//! and down projections).
//!
//! Per layer (HF `PhimoeDecoderLayer`): `x + attn(ln(x))`, then
//! `x + moe(ln(x))`, every norm a LayerNorm with bias (epsilon
//! `rms_norm_eps`, as HF names it). Attention is GQA with NeoX RoPE and, with
//! `attention_bias`, biased Q/K/V/O; RoPE scaling is Phi-3's LongRoPE
//! (`phi3::scaled_rope`), whose cos/sin factor PhiMoE takes from
//! `short_mscale` / `long_mscale` where the config sets them. The router is
//! the sparsemixer (`sparse_mixer` op: top-2 with a jitter band of
//! `router_jitter_noise`), each expert a SwiGLU of `intermediate_size`;
//! lowered dense, as every MoE (`moe.rs`). `lm_head` has a bias with
//! `lm_head_bias`.

use super::hf::{rotary_dim, tied, HeadDim, HfDims};
use super::phi3::scaled_rope;
use super::{batch, bias_name, seq, AttentionCfg, Builder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NodeId, NormKind, Op, RopeScaling, RopeStyle, UnaryOp};

pub const MODEL_TYPE: &str = "phimoe";

pub fn lower(st: &SafetensorsFile, max_seq: Option<usize>) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::HiddenOverHeads, false)?;
    let HfDims { d, n_layers, head_dim: hd, ffn, vocab, context, .. } = dims;
    let path = &st.config_path;
    let eps = st.config_float("rms_norm_eps")? as f32;
    let n_experts = st.config_uint("num_local_experts")?;
    let top_k = st.config_uint("num_experts_per_tok")?;
    if top_k != 2 || n_experts < 2 {
        return Err(Diagnostic::new(path, format!("{top_k} experts per token of {n_experts}: PhiMoE's sparsemixer picks exactly 2")));
    }
    let jitter_eps = st.config_float("router_jitter_noise")? as f32;
    let flag = |key: &str| st.config.get(key).and_then(|v| v.as_bool()).unwrap_or(false);
    let (attention_bias, lm_head_bias) = (flag("attention_bias"), flag("lm_head_bias"));
    let rotary = rotary_dim(st, hd, Some(1.0))?;
    let seq_limit = max_seq.unwrap_or(context);
    let mut rope = scaled_rope(st, rotary, seq_limit, context)?;
    if let RopeScaling::FreqFactors { attention_factor, .. } = &mut rope.scaling {
        let scaling = st.config.get("rope_scaling").filter(|v| !v.is_null()).or_else(|| st.config.get("rope_parameters"));
        let original = st.config.get("original_max_position_embeddings").and_then(|v| v.as_u64()).unwrap_or(0) as usize;
        let key = if rope.fact.contains("long factors") { "long_mscale" } else { "short_mscale" };
        if let Some(m) = scaling.and_then(|s| s.get(key)).and_then(|v| v.as_f64()) {
            *attention_factor = m as f32;
            rope.fact = format!("{}; cos/sin scaled by {key} {m} (original {original})", rope.fact);
        }
    }
    let tied = tied(st);
    let mut b = Builder::new("phimoe", st);
    let (tokens, positions, last_rows) = b.inputs();
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    let layer_norm = |b: &mut Builder, x: NodeId, weight: &str| -> Result<NodeId, Diagnostic> {
        let w = b.weight(weight, Some(&[d]))?;
        let bias = b.weight(&bias_name(weight), Some(&[d]))?;
        Ok(b.op(Op::Norm { kind: NormKind::Layer, eps }, &[x, w, bias]))
    };
    let rope_op = Op::Rope { style: RopeStyle::Neox, rotary_dim: rotary, theta: rope.theta, scaling: rope.scaling.clone() };
    let cfg = AttentionCfg { qkv_bias: attention_bias, out_bias: attention_bias, ..dims.attention(Op::Norm { kind: NormKind::Layer, eps }, rope_op) };
    for l in 0..n_layers {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("model.layers.{l}.{s}.weight");
        let h = layer_norm(&mut b, x, &w("input_layernorm"))?;
        let names = [&w("self_attn.q_proj"), &w("self_attn.k_proj"), &w("self_attn.v_proj"), &w("self_attn.o_proj")];
        let o = b.attention(h, positions, names.map(|s| s.as_str()), None, &cfg)?;
        x = b.binary(BinaryOp::Add, x, o);
        let h = layer_norm(&mut b, x, &w("post_attention_layernorm"))?;
        let router = b.weight(&w("block_sparse_moe.gate"), Some(&[n_experts, d]))?;
        let scores = b.matmul(h, router);
        let weights = b.op(Op::SparseMixer { jitter_eps }, &[scores]);
        let mut out = None;
        for e in 0..n_experts {
            let ew = |s: &str| w(&format!("block_sparse_moe.experts.{e}.{s}"));
            let y = b.gated_mlp(h, (&ew("w1"), &ew("w3"), &ew("w2")), (ffn, d), UnaryOp::Silu)?;
            let we = b.op(Op::Narrow { axis: 2, start: e.into(), len: 1usize.into() }, &[weights]);
            let y = b.binary(BinaryOp::Mul, y, we);
            out = Some(match out {
                None => y,
                Some(acc) => b.binary(BinaryOp::Add, acc, y),
            });
        }
        x = b.binary(BinaryOp::Add, x, out.expect("at least two experts"));
    }
    b.layer = None;
    let flat = b.reshape(x, vec![batch().mul(&seq()), d.into()]);
    let last = b.op(Op::Gather, &[flat, last_rows]);
    let h = layer_norm(&mut b, last, "model.norm.weight")?;
    let out = if tied { embd } else { b.weight("lm_head.weight", Some(&[vocab, d]))? };
    let mut logits = b.matmul(h, out);
    if lm_head_bias {
        let bias = b.weight("lm_head.bias", Some(&[vocab]))?;
        logits = b.binary(BinaryOp::Add, logits, bias);
    }
    b.op(Op::Output { name: graphc_ir::io::LOGITS.into() }, &[logits]);
    let facts = [
        ("experts", format!("{n_experts}, sparsemixer top-2, jitter_eps {jitter_eps}")),
        ("norm", format!("layer, eps {eps:?}")),
        ("rope_scaling", rope.fact.clone()),
        ("biases", format!("attention {attention_bias}, lm_head {lm_head_bias}")),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts.to_vec()].concat()))
}
