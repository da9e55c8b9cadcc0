//! gpt-oss (OpenAI's gpt-oss-20b and -120b; `config.json` `model_type =
//! "gpt_oss"`, GGUF `general.architecture = "gpt-oss"`), read from GGUF
//! through the HF view (`gguf_hf`), which presents each layer's stacked
//! experts one expert at a time.
//!
//! Per layer (HF `GptOssDecoderLayer`): `x + attn(input_layernorm(x))`,
//! then `x + moe(post_attention_layernorm(x))`, every norm RMS. Attention:
//! Q/K/V/O with biases, NeoX RoPE with YaRN, GQA, scale `1/sqrt(head_dim)`,
//! a learned sink logit per head in each softmax's denominator
//! (`self_attn.sinks`), and a sliding window on the layers `layer_types`
//! names `sliding_attention` (the even ones in the released models).
//!
//! The MoE (HF `GptOssMLP`): router logits `h·W + b`, the `top_k` largest
//! kept and softmaxed among themselves (the same weights as a softmax over
//! all, masked and renormalized, which is how it is lowered), and each
//! expert `down((up + 1) · g · sigmoid(alpha · g))` with `g = min(gate,
//! limit)` and `up` clamped to `±limit`, every projection with its bias.
//! `swiglu_alpha` and `swiglu_limit` (1.702 and 7; GGUF has no key for
//! them and llama.cpp hard-codes those values) are read from the config.
//!
//! The released safetensors keep each layer's experts as one fused,
//! input-major `gate_up_proj` (`[experts, d, 2·ffn]`, gate and up
//! interleaved) in MXFP4: that layout is refused by name; llama.cpp's
//! converter splits it into the GGUF tensors read here.

use super::hf::{rope_theta, HeadDim, HfDims};
use super::moe::{add_weighted, routing_weights};
use super::qwen3::{lower_decoder, Decoder};
use super::Builder;
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NodeId, Op, UnaryOp};

pub const MODEL_TYPE: &str = "gpt_oss";

/// The `config.json` keys of the arithmetic this family reads.
pub const CONFIG_READS: &[&str] = &[
    "head_dim",
    "rope_scaling",
    "rope_parameters",
    "sliding_window",
    "layer_types",
    "attention_bias",
    "num_local_experts",
    "swiglu_alpha",
    "swiglu_limit",
];

/// A gpt-oss MoE layer's shape and activation constants.
struct Experts {
    n_experts: usize,
    top_k: usize,
    ffn: usize,
    d: usize,
    alpha: f32,
    limit: f32,
}

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let path = &st.config_path;
    if let Some(t) = st.tensors.iter().find(|t| t.name.ends_with("mlp.experts.gate_up_proj") || t.name.ends_with("mlp.experts.gate_up_proj_blocks")) {
        return Err(Diagnostic::new(
            &st.path,
            format!(
                "tensor `{}`: gpt-oss's safetensors layout (each layer's experts fused into one input-major, interleaved `gate_up_proj`) is not read",
                t.name
            ),
        )
        .note("graphc reads gpt-oss from GGUF: llama.cpp's convert_hf_to_gguf.py splits the experts"));
    }
    let dims = HfDims::read(st, HeadDim::Key, false)?;
    if st.config.get("attention_bias").and_then(|b| b.as_bool()) != Some(true) {
        return Err(Diagnostic::new(path, "`attention_bias` is not true: every gpt-oss checkpoint has Q/K/V/O biases, and graphc lowers only that"));
    }
    let n_layers = dims.n_layers;
    let window = st.config_uint("sliding_window")?;
    let types = st.config.get("layer_types").and_then(|t| t.as_array()).ok_or_else(|| Diagnostic::new(path, "`layer_types` is missing"))?;
    if types.len() != n_layers {
        return Err(Diagnostic::new(path, format!("`layer_types` lists {} layers of {n_layers}", types.len())));
    }
    let sliding = types
        .iter()
        .map(|t| match t.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            _ => Err(Diagnostic::new(path, format!("`layer_types` holds {t}: graphc lowers `sliding_attention` and `full_attention`"))),
        })
        .collect::<Result<Vec<bool>, _>>()?;
    let experts = Experts {
        n_experts: st.config_uint("num_local_experts")?,
        top_k: st.config_uint("num_experts_per_tok")?,
        ffn: dims.ffn,
        d: dims.d,
        alpha: st.config_float("swiglu_alpha")? as f32,
        limit: st.config_float("swiglu_limit")? as f32,
    };
    let Experts { n_experts, top_k, alpha, limit, .. } = experts;
    if n_experts == 0 || top_k == 0 || top_k > n_experts {
        return Err(Diagnostic::new(path, format!("{top_k} experts per token of {n_experts} is not a MoE")));
    }
    if !(limit.is_finite() && limit > 0.0 && alpha.is_finite()) {
        return Err(Diagnostic::new(path, format!("`swiglu_limit` {limit} / `swiglu_alpha` {alpha}: not a clamp and a slope")));
    }
    let decoder = Decoder {
        qkv_bias: true,
        out_bias: true,
        scaling: super::hf::rope_scaling(st, MODEL_TYPE)?,
        window: Some(window),
        sliding_layers: Some(sliding.clone()),
        sinks: true,
        ..Decoder::plain(rope_theta(st)?)
    };
    let mut mlp = |b: &mut Builder, l: usize, h: NodeId| experts_block(b, &format!("model.layers.{l}.mlp"), h, &experts);
    let sliding_layers: Vec<String> = (0..n_layers).filter(|&l| sliding[l]).map(|l| l.to_string()).collect();
    let facts = vec![
        ("experts", format!("{n_experts}, {top_k} per token, swiglu limit {limit:?}, alpha {alpha:?}")),
        ("sliding_window", format!("{window} on layers {}", sliding_layers.join(","))),
        ("attention_sinks", "per head".to_string()),
    ];
    lower_decoder(st, MODEL_TYPE, dims, &decoder, &mut mlp, facts)
}

/// The routed experts of one layer under `prefix`: the router
/// `PREFIX.router.{weight,bias}`, expert `E`'s
/// `PREFIX.experts.E.{gate,up,down}_proj.{weight,bias}`.
fn experts_block(b: &mut Builder, prefix: &str, h: NodeId, ex: &Experts) -> Result<NodeId, Diagnostic> {
    let Experts { n_experts, top_k, ffn, d, alpha, limit } = *ex;
    let linear = |b: &mut Builder, x: NodeId, name: &str, (rows, cols): (usize, usize)| -> Result<NodeId, Diagnostic> {
        let w = b.weight(&format!("{name}.weight"), Some(&[rows, cols]))?;
        let bias = b.weight(&format!("{name}.bias"), Some(&[rows]))?;
        let y = b.matmul(x, w);
        Ok(b.binary(BinaryOp::Add, y, bias))
    };
    let logits = linear(b, h, &format!("{prefix}.router"), (n_experts, d))?;
    let weights = routing_weights(b, logits, top_k, true);
    let (one, alpha) = (b.scalar(1.0), b.scalar(alpha));
    let mut out = None;
    for e in 0..n_experts {
        let name = |p: &str| format!("{prefix}.experts.{e}.{p}");
        let gate = linear(b, h, &name("gate_proj"), (ffn, d))?;
        let up = linear(b, h, &name("up_proj"), (ffn, d))?;
        let gate = b.op(Op::Clamp { min: None, max: Some(limit) }, &[gate]);
        let up = b.op(Op::Clamp { min: Some(-limit), max: Some(limit) }, &[up]);
        let slope = b.binary(BinaryOp::Mul, gate, alpha);
        let sig = b.unary(UnaryOp::Sigmoid, slope);
        let glu = b.binary(BinaryOp::Mul, gate, sig);
        let up1 = b.binary(BinaryOp::Add, up, one);
        let a = b.binary(BinaryOp::Mul, up1, glu);
        let y = linear(b, a, &name("down_proj"), (d, ffn))?;
        out = Some(add_weighted(b, out, y, weights, e));
    }
    Ok(out.expect("at least one expert"))
}
