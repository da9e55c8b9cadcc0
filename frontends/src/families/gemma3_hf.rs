//! Gemma 3's text model from safetensors (`config.json` `model_type =
//! "gemma3_text"`: Gemma 3 270M and 1B), lowered with Hugging Face tensor
//! names; also the language model of Gemma 3 4B, 12B and 27B's multimodal
//! checkpoints (`crate::multimodal`). (Gemma 3 GGUFs go through `gemma3.rs`.)
//!
//! Per layer (HF `Gemma3DecoderLayer`): `x + post_attention_layernorm(attn(input_layernorm(x)))`,
//! then `x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))`,
//! every norm Gemma's `1 + w` RMSNorm, Q and K RMS-normed per head
//! (`q_norm`, `k_norm`, also `1 + w`). Layers slide or attend globally by
//! `layer_types` (older configs: every `sliding_window_pattern`-th layer
//! global); each kind has its own RoPE: transformers 5's
//! `rope_parameters.{sliding_attention, full_attention}` (base, and `linear`
//! scaling: Gemma 3 4B+'s factor 8 on the global layers), or the Hub's
//! `rope_theta` and `rope_scaling` (global) beside `rope_local_base_freq`
//! (local; 10000, HF's default, when absent). Attention scale
//! `query_pre_attn_scalar^-1/2`; no soft-caps (a config that sets one is
//! refused: no Gemma 3 does). The
//! embedding is scaled by `sqrt(hidden)`, the MLP is GeGLU, the output tied.

use super::gemma::{gelu_kind, sandwich_layer, scaled_embedding, tied_head};
use super::hf::{HeadDim, HfDims};
use super::{AttentionCfg, Builder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{NormKind, Op, RopeScaling, RopeStyle};

pub const MODEL_TYPE: &str = "gemma3_text";

/// The `config.json` keys the family reads.
pub const CONFIG_READS: &[&str] = &[
    "head_dim",
    "hidden_act",
    "hidden_activation",
    "sliding_window",
    "layer_types",
    "query_pre_attn_scalar",
    "rope_scaling",
    "rope_parameters",
    "rope_local_base_freq",
    "sliding_window_pattern",
];

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::Key, false)?;
    let HfDims { d, n_layers, head_dim: hd, ffn, vocab, context, .. } = dims;
    let path = &st.config_path;
    let window = st.config_uint("sliding_window")?;
    if window == 0 {
        return Err(Diagnostic::new(path, "sliding_window is 0"));
    }
    if st.config.get("use_bidirectional_attention").and_then(|v| v.as_bool()) == Some(true) {
        return Err(Diagnostic::new(path, "`use_bidirectional_attention` is true: graphc lowers causal Gemma 3 only"));
    }
    let eps = st.config_float("rms_norm_eps")? as f32;
    let act = gelu_kind(st)?;
    let query_scalar = st.config_float("query_pre_attn_scalar")?;
    let sliding = layer_kinds(st, n_layers)?;
    let (local, global) = (rope(st, false)?, rope(st, true)?);
    let mut b = Builder::new(MODEL_TYPE, st);
    b.norms_include_one = super::gemma::norms_include_one(st);
    let (tokens, positions, last_rows) = b.inputs();
    let (embd, mut x) = scaled_embedding(&mut b, tokens, (vocab, d))?;
    for (l, &slides) in sliding.iter().enumerate() {
        b.layer = Some(l as u32);
        let (theta, scaling) = if slides { local.clone() } else { global.clone() };
        let cfg = AttentionCfg {
            scale: (1.0 / query_scalar.sqrt()) as f32,
            window: slides.then_some(window),
            qk_norm_one_plus: !b.norms_include_one,
            ..dims.attention(Op::Norm { kind: NormKind::Rms, eps }, Op::Rope { style: RopeStyle::Neox, rotary_dim: hd, theta, scaling })
        };
        x = sandwich_layer(&mut b, l, (x, positions), &cfg, true, (ffn, act, eps))?;
    }
    b.layer = None;
    let logits = tied_head(&mut b, (x, last_rows, embd), d, eps)?;
    b.op(Op::Output { name: graphc_ir::io::LOGITS.into() }, &[logits]);
    let globals: Vec<String> = (0..n_layers).filter(|&l| !sliding[l]).map(|l| l.to_string()).collect();
    let facts = [
        ("norm_weight_offset", super::gemma::norm_offset_fact(b.norms_include_one)),
        ("sliding_window", window.to_string()),
        ("global_layers", globals.join(",")),
        ("rope_local", format!("theta {:?}, {:?}", local.0, local.1)),
        ("rope_global", format!("theta {:?}, {:?}", global.0, global.1)),
        ("attention_scale", format!("query_pre_attn_scalar {query_scalar}^-1/2")),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts.to_vec()].concat()))
}

/// Which layers slide: `layer_types` when the config lists them, else
/// Gemma 3's pattern (the Hub configs saved before transformers 4.53):
/// every `sliding_window_pattern`-th layer global (6 when absent, HF's
/// default), never Gemma 2's alternation.
fn layer_kinds(st: &SafetensorsFile, n_layers: usize) -> Result<Vec<bool>, Diagnostic> {
    if st.config.get("layer_types").is_some_and(|v| !v.is_null()) {
        return super::gemma2::layer_kinds(st, n_layers);
    }
    let pattern = st.config_uint_or("sliding_window_pattern", 6)?;
    if pattern == 0 {
        return Err(Diagnostic::new(&st.config_path, "`sliding_window_pattern` is 0"));
    }
    Ok((0..n_layers).map(|l| !(l + 1).is_multiple_of(pattern)).collect())
}

/// The RoPE base and scaling of the global (`full`) or the sliding layers.
fn rope(st: &SafetensorsFile, full: bool) -> Result<(f32, RopeScaling), Diagnostic> {
    let path = &st.config_path;
    let kind = if full { "full_attention" } else { "sliding_attention" };
    let per_kind = st.config.get("rope_parameters").and_then(|p| p.get(kind));
    let (theta, params) = match per_kind {
        Some(p) => (p.get("rope_theta").and_then(|t| t.as_f64()), Some(p)),
        None if full => (st.config.get("rope_theta").and_then(|t| t.as_f64()), st.config.get("rope_scaling").filter(|s| !s.is_null())),
        None => (Some(st.config.get("rope_local_base_freq").and_then(|t| t.as_f64()).unwrap_or(10_000.0)), None),
    };
    let key = if per_kind.is_some() {
        format!("rope_parameters.{kind}")
    } else if full {
        "rope_theta".into()
    } else {
        "rope_local_base_freq".into()
    };
    let theta = theta.ok_or_else(|| Diagnostic::new(path, format!("missing the {kind} layers' RoPE base (`{key}`)")))? as f32;
    let Some(p) = params else { return Ok((theta, RopeScaling::None)) };
    match p.get("rope_type").or_else(|| p.get("type")).and_then(|t| t.as_str()).unwrap_or("default") {
        "default" => Ok((theta, RopeScaling::None)),
        "linear" => match p.get("factor").and_then(|f| f.as_f64()) {
            Some(factor) if factor > 0.0 => Ok((theta, RopeScaling::Linear { factor: factor as f32 })),
            _ => Err(Diagnostic::new(path, format!("the {kind} layers' linear RoPE scaling has no positive `factor`"))),
        },
        other => Err(Diagnostic::new(path, format!("the {kind} layers' RoPE scaling `{other}` is not implemented by the gemma3_text family"))
            .note("graphc lowers Gemma 3's RoPE `default` and `linear`")),
    }
}
