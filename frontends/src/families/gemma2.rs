//! Gemma 2 (`config.json` `model_type = "gemma2"`), lowered from
//! safetensors with Hugging Face tensor names.
//!
//! Per layer (HF `Gemma2DecoderLayer`): `x + post_attention_layernorm(attn(input_layernorm(x)))`,
//! then `x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))`,
//! every norm Gemma's `1 + w` RMSNorm. Layers alternate sliding-window and
//! global attention (`layer_types`; when absent, HF's own rule: even layers
//! slide); attention scores are soft-capped, `cap * tanh(s / cap)` with
//! `attn_logit_softcapping`, and so are the final logits
//! (`final_logit_softcapping`); the attention scale is
//! `query_pre_attn_scalar^-1/2`, not `head_dim^-1/2`. Embedding scaled by
//! `sqrt(hidden)`, GeGLU, output tied to the embedding.
//!
//! Every layer keeps a cache at the plan's capacity; sliding layers read
//! only the last `sliding_window` keys of theirs (window-sized ring caches
//! for them are not done yet).

use super::hf::{rope_theta, HeadDim, HfDims};
use super::{AttentionCfg, Builder};
use crate::error::Diagnostic;
use crate::families::gemma::{gelu_kind, sandwich_layer, scalar, scaled_embedding, tied_head};
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NormKind, Op, RopeScaling, RopeStyle, UnaryOp};

pub const MODEL_TYPE: &str = "gemma2";

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::Key, false)?;
    let HfDims { d, n_layers, head_dim: hd, ffn, vocab, context, .. } = dims;
    let window = st.config_uint("sliding_window")?;
    if window == 0 {
        return Err(Diagnostic::new(&st.config_path, "sliding_window is 0"));
    }
    let eps = st.config_float("rms_norm_eps")? as f32;
    let theta = rope_theta(st)?;
    let act = gelu_kind(st)?;
    let query_scalar = st.config_float("query_pre_attn_scalar")?;
    let optional_cap = |key: &str| -> Result<Option<f32>, Diagnostic> {
        match st.config.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(_) => Ok(Some(st.config_float(key)? as f32)),
        }
    };
    let (attn_cap, final_cap) = (optional_cap("attn_logit_softcapping")?, optional_cap("final_logit_softcapping")?);
    let sliding = layer_kinds(st, n_layers)?;
    let mut b = Builder::new("gemma2", st);
    b.norms_include_one = crate::families::gemma::norms_include_one(st);
    let (tokens, positions, last_rows) = b.inputs();
    let (embd, mut x) = scaled_embedding(&mut b, tokens, (vocab, d))?;
    for (l, &slides) in sliding.iter().enumerate() {
        b.layer = Some(l as u32);
        let cfg = AttentionCfg {
            scale: (1.0 / query_scalar.sqrt()) as f32,
            window: slides.then_some(window),
            softcap: attn_cap,
            ..dims.attention(
                Op::Norm { kind: NormKind::Rms, eps },
                Op::Rope { style: RopeStyle::Neox, rotary_dim: hd, theta, scaling: RopeScaling::None },
            )
        };
        x = sandwich_layer(&mut b, l, (x, positions), &cfg, false, (ffn, act, eps))?;
    }
    b.layer = None;
    let mut logits = tied_head(&mut b, (x, last_rows, embd), d, eps)?;
    if let Some(cap) = final_cap {
        // `cap * tanh(logits / cap)`.
        let inv = scalar(&mut b, 1.0 / cap);
        let scaled = b.binary(BinaryOp::Mul, logits, inv);
        let t = b.unary(UnaryOp::Tanh, scaled);
        let cap = scalar(&mut b, cap);
        logits = b.binary(BinaryOp::Mul, t, cap);
    }
    b.op(Op::Output { name: graphc_ir::io::LOGITS.into() }, &[logits]);
    let windowed: Vec<String> = (0..n_layers).filter(|&l| sliding[l]).map(|l| l.to_string()).collect();
    let facts = [
        ("norm_weight_offset", crate::families::gemma::norm_offset_fact(b.norms_include_one)),
        ("sliding_window", window.to_string()),
        ("sliding_layers", windowed.join(",")),
        ("attn_logit_softcapping", format!("{attn_cap:?}")),
        ("final_logit_softcapping", format!("{final_cap:?}")),
        ("attention_scale", format!("query_pre_attn_scalar {query_scalar}^-1/2")),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts.to_vec()].concat()))
}

/// Which layers slide: `layer_types` when the config has it (each
/// `sliding_attention` or `full_attention`), else HF's rule for Gemma 2
/// (even layers slide). Gemma 3's configs always list them.
pub(crate) fn layer_kinds(st: &SafetensorsFile, n_layers: usize) -> Result<Vec<bool>, Diagnostic> {
    let Some(types) = st.config.get("layer_types").filter(|v| !v.is_null()) else {
        return Ok((0..n_layers).map(|l| l % 2 == 0).collect());
    };
    let types = types.as_array().ok_or_else(|| Diagnostic::new(&st.config_path, "`layer_types` is not a list"))?;
    if types.len() != n_layers {
        return Err(Diagnostic::new(&st.config_path, format!("`layer_types` lists {} layers, num_hidden_layers is {n_layers}", types.len())));
    }
    types
        .iter()
        .enumerate()
        .map(|(l, t)| match t.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            other => Err(Diagnostic::new(&st.config_path, format!("`layer_types[{l}]` is {other:?}; expected sliding_attention or full_attention"))),
        })
        .collect()
}
