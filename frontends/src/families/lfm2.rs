//! LFM2 (`config.json` `model_type = "lfm2"`: LiquidAI's LFM2 350M, 700M,
//! 1.2B, 2.6B), lowered with Hugging Face tensor names; its GGUF
//! (llama.cpp's `lfm2`) through `crate::gguf_hf`.
//!
//! Per layer (HF `Lfm2DecoderLayer`): `x + op(operator_norm(x))`, then
//! `x + feed_forward(ffn_norm(x))` (SwiGLU `w2(silu(w1 h) * w3 h)`), every
//! norm RMS with a plain weight. `op` is, by `layer_types` (older configs:
//! `full_attn_idxs`), GQA attention with Q and K RMS-normed per head
//! (`q_layernorm`, `k_layernorm`), NeoX RoPE, output `out_proj`; or a short
//! conv (`Lfm2ShortConv`): `in_proj` gives B, C and x, the depthwise causal
//! conv of `conv_L_cache` taps runs over `B * x` (its last inputs are
//! loop-carried state, `conv.L`), and `out_proj(C * conv)`. After the last
//! layer `embedding_norm`; the output tied (`tie_embedding` on the Hub).
//!
//! The MLP's size is HF's: `intermediate_size` (the Hub's `block_ff_dim`),
//! with `block_auto_adjust_ff_dim` two thirds of it times
//! `block_ffn_dim_multiplier`, rounded up to `block_multiple_of`.
//! Refused by name: conv biases (`conv_bias`; no released LFM2 has them).

use super::hf::{rope_theta, HeadDim, HfDims};
use super::{batch, seq, AttentionCfg, Builder, NEW_LENGTHS_INPUT};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, DType, NodeId, NormKind, Op, RopeScaling, RopeStyle, TensorType, UnaryOp};
use serde_json::Value;

pub const MODEL_TYPE: &str = "lfm2";

/// The `config.json` keys the family reads.
pub const CONFIG_READS: &[&str] = &[
    "layer_types",
    "full_attn_idxs",
    "conv_L_cache",
    "conv_bias",
    "block_auto_adjust_ff_dim",
    "block_ffn_dim_multiplier",
    "block_multiple_of",
    "block_ff_dim",
    "tie_embedding",
    "rope_parameters",
    "rope_scaling",
];

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let path = &st.config_path;
    let err = |m: String| Diagnostic::new(path, m);
    // The Hub's `block_ff_dim` is transformers' `intermediate_size`.
    let ffn_key = if st.config.get("intermediate_size").is_some_and(|v| !v.is_null()) { "intermediate_size" } else { "block_ff_dim" };
    let dims = HfDims::read_with_ffn(st, HeadDim::HiddenOverHeads, false, ffn_key)?;
    let HfDims { d, n_layers, vocab, context, .. } = dims;
    if super::hf::config_flag(st, "conv_bias")? {
        return Err(err("`conv_bias` is true: biased short convs are not lowered (no released LFM2 has them)".into()));
    }
    let eps = st.config_float("norm_eps")? as f32;
    let kernel = st.config_uint("conv_L_cache")?;
    if kernel < 2 {
        return Err(err(format!("`conv_L_cache` = {kernel}: a causal conv needs at least 2 taps")));
    }
    let ffn = mlp_size(st, dims.ffn)?;
    let attends = layer_kinds(st, n_layers)?;
    let theta = rope_theta(st)?;
    if super::hf::rope_scaling(st, MODEL_TYPE)? != RopeScaling::None {
        return Err(err("RoPE scaling is not implemented by the lfm2 family".into()));
    }
    let tied = match (st.config.get("tie_word_embeddings"), st.config.get("tie_embedding")) {
        (Some(Value::Bool(t)), _) | (None, Some(Value::Bool(t))) => *t,
        (None, None) => true, // transformers' default for LFM2
        _ => return Err(err("`tie_word_embeddings` / `tie_embedding` is not a boolean".into())),
    };

    let mut b = Builder::new(MODEL_TYPE, st);
    let (tokens, positions, last_rows) = b.inputs();
    let new_lengths = b.input(NEW_LENGTHS_INPUT, DType::I32, vec![batch()]);
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let rope = Op::Rope { style: RopeStyle::Neox, rotary_dim: dims.head_dim, theta, scaling: RopeScaling::None };
    let cfg = AttentionCfg { ..dims.attention(norm.clone(), rope) };
    for (l, &attention) in attends.iter().enumerate() {
        b.layer = Some(l as u32);
        let p = format!("model.layers.{l}");
        let w = |s: &str| format!("{p}.{s}.weight");
        let h = b.normed(x, &w("operator_norm"), d, &norm)?;
        let mixed = if attention {
            let a = |s: &str| format!("{p}.self_attn.{s}.weight");
            let names = [a("q_proj"), a("k_proj"), a("v_proj"), a("out_proj")];
            let (q_norm, k_norm) = (a("q_layernorm"), a("k_layernorm"));
            b.attention(h, positions, names.each_ref().map(|s| s.as_str()), Some((&q_norm, &k_norm)), &cfg)?
        } else {
            short_conv(&mut b, l, h, new_lengths, (d, kernel))?
        };
        x = b.binary(BinaryOp::Add, x, mixed);
        let h = b.normed(x, &w("ffn_norm"), d, &norm)?;
        let f = |s: &str| format!("{p}.feed_forward.{s}.weight");
        let m = b.gated_mlp(h, (&f("w1"), &f("w3"), &f("w2")), (ffn, d), UnaryOp::Silu)?;
        x = b.binary(BinaryOp::Add, x, m);
    }
    b.layer = None;
    let out = if tied { Ok(embd) } else { Err(("lm_head.weight", vocab)) };
    b.logits_head((x, d), last_rows, (norm, "model.embedding_norm.weight"), out)?;
    let list = |f: &dyn Fn(bool) -> bool| attends.iter().enumerate().filter(|(_, &a)| f(a)).map(|(l, _)| l.to_string()).collect::<Vec<_>>().join(",");
    let facts = [
        ("attention_layers", list(&|a| a)),
        ("conv_layers", list(&|a| !a)),
        ("conv_kernel", kernel.to_string()),
        ("mlp_size", format!("{ffn} (from {} {})", ffn_key, dims.ffn)),
        ("rope_theta", format!("{theta:?}")),
        ("tied_output", tied.to_string()),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts.to_vec()].concat()))
}

/// Layer `l`'s short conv on `h [batch, seq, d]` (HF `Lfm2ShortConv`).
fn short_conv(b: &mut Builder, l: usize, h: NodeId, lengths: NodeId, (d, kernel): (usize, usize)) -> Result<NodeId, Diagnostic> {
    let p = format!("model.layers.{l}.conv");
    let w_in = b.weight(&format!("{p}.in_proj.weight"), Some(&[3 * d, d]))?;
    let bcx = b.matmul(h, w_in);
    let part = |b: &mut Builder, i: usize| b.op(Op::Narrow { axis: 2, start: (i * d).into(), len: d.into() }, &[bcx]);
    let (gate_b, gate_c, input) = (part(b, 0), part(b, 1), part(b, 2));
    let bx = b.binary(BinaryOp::Mul, gate_b, input);
    // HF's depthwise Conv1d weight `[d, 1, kernel]`; a GGUF's `[d, kernel]`.
    let conv_name = format!("{p}.conv.weight");
    let conv_w = if b.source.tensor(&conv_name).is_some_and(|t| t.shape.len() == 2) {
        b.weight(&conv_name, Some(&[d, kernel]))?
    } else {
        let w = b.weight(&conv_name, Some(&[d, 1, kernel]))?;
        b.reshape(w, vec![d.into(), kernel.into()])
    };
    let state_name = format!("conv.{l}");
    let state = b.op(Op::State { name: state_name.clone(), ty: TensorType::new(DType::F32, vec![batch(), (kernel - 1).into(), d.into()]) }, &[]);
    let packed = b.op(Op::CausalConv1d { kernel }, &[bx, conv_w, state, lengths]);
    let next = b.op(Op::Narrow { axis: 1, start: seq(), len: (kernel - 1).into() }, &[packed]);
    b.op(Op::StateOut { name: state_name }, &[next]);
    let conv = b.op(Op::Narrow { axis: 1, start: 0usize.into(), len: seq() }, &[packed]);
    let y = b.binary(BinaryOp::Mul, gate_c, conv);
    let w_out = b.weight(&format!("{p}.out_proj.weight"), Some(&[d, d]))?;
    Ok(b.matmul(y, w_out))
}

/// Which layers attend (the others convolve): `layer_types` (`full_attention`
/// or `conv`), else `full_attn_idxs`, else every layer (HF's default).
fn layer_kinds(st: &SafetensorsFile, n_layers: usize) -> Result<Vec<bool>, Diagnostic> {
    let path = &st.config_path;
    if let Some(types) = st.config.get("layer_types").filter(|v| !v.is_null()) {
        let types = types
            .as_array()
            .filter(|a| a.len() == n_layers)
            .ok_or_else(|| Diagnostic::new(path, format!("`layer_types` is not a list of {n_layers}")))?;
        return types
            .iter()
            .enumerate()
            .map(|(l, t)| match t.as_str() {
                Some("full_attention") => Ok(true),
                Some("conv") => Ok(false),
                other => Err(Diagnostic::new(path, format!("`layer_types[{l}]` is {other:?}; expected full_attention or conv"))),
            })
            .collect();
    }
    match st.config.get("full_attn_idxs").filter(|v| !v.is_null()) {
        None => Ok(vec![true; n_layers]),
        Some(v) => {
            let idxs: Vec<usize> = v
                .as_array()
                .and_then(|a| a.iter().map(|i| i.as_u64().map(|i| i as usize).filter(|&i| i < n_layers)).collect())
                .ok_or_else(|| Diagnostic::new(path, format!("`full_attn_idxs` is not a list of layers below {n_layers}")))?;
            Ok((0..n_layers).map(|l| idxs.contains(&l)).collect())
        }
    }
}

/// HF `Lfm2MLP`'s size from the configured one.
fn mlp_size(st: &SafetensorsFile, configured: usize) -> Result<usize, Diagnostic> {
    let get = |k: &str| st.config.get(k).filter(|v| !v.is_null());
    let auto = match get("block_auto_adjust_ff_dim") {
        None => true,
        Some(v) => v.as_bool().ok_or_else(|| Diagnostic::new(&st.config_path, "`block_auto_adjust_ff_dim` is not a boolean"))?,
    };
    if !auto {
        return Ok(configured);
    }
    let mut size = (2.0 * configured as f64 / 3.0) as usize;
    if let Some(m) = get("block_ffn_dim_multiplier") {
        let m = m.as_f64().ok_or_else(|| Diagnostic::new(&st.config_path, "`block_ffn_dim_multiplier` is not a number"))?;
        let multiple = st.config_uint_or("block_multiple_of", 256)?;
        if multiple == 0 {
            return Err(Diagnostic::new(&st.config_path, "`block_multiple_of` is 0"));
        }
        size = (m * size as f64) as usize;
        size = multiple * size.div_ceil(multiple);
    }
    Ok(size)
}
