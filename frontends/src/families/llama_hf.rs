//! Llama 1/2/3.x, Mistral, Mixtral, SmolLM3, Granite and ERNIE 4.5 from
//! safetensors (`config.json` `model_type = "llama"`, `"mistral"`,
//! `"mixtral"`, `"smollm3"`, `"granite"`: its four scales, `granite.rs`, or
//! `"ernie4_5"`: GPT-J's adjacent RoPE pairs, no biases), lowered with Hugging
//! Face tensor names. (Llama GGUFs go through `llama.rs`, whose rows the
//! converter permuted.)
//!
//! Per layer (HF `LlamaDecoderLayer`): `x + attn(input_layernorm(x))`, then
//! `x + mlp(post_attention_layernorm(x))`, every norm RMS. Attention: NeoX
//! RoPE (HF `rotate_half`) with Llama 3's frequency scaling where the
//! config asks for it, GQA, scale `1/sqrt(head_dim)`, biases on all four
//! projections when `attention_bias`; Mistral's `sliding_window` (each
//! token sees itself and the `window - 1` before it). The MLP is SwiGLU;
//! Mixtral's is `moe::moe_block` (HF `MixtralSparseMoeBlock`: router
//! `block_sparse_moe.gate`, experts `block_sparse_moe.experts.E.w1/w3/w2`,
//! the chosen experts' weights renormalized). SmolLM3 does not rotate Q and
//! K on the layers its `no_rope_layers` marks 0 (every fourth).
//!
//! config.json keys: the dimensions (`head_dim` where given, else hidden /
//! heads), `rms_norm_eps`, the RoPE base and `rope_scaling` (`default`,
//! `linear`, `llama3`; others refused), `tie_word_embeddings`, `hidden_act`
//! (`silu`), `attention_bias`, `mlp_bias` (must be false), for mistral and
//! mixtral `sliding_window` (null or a window), and for mixtral
//! `num_local_experts` and `num_experts_per_tok`.

use super::granite;
use super::hf::{require_act, rope_scaling, rope_theta, HeadDim, HfDims};
use super::moe::{moe_block, Moe};
use super::qwen3::{dense_mlp, lower_decoder, Decoder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::RopeStyle;

pub const LLAMA: &str = "llama";
pub const MISTRAL: &str = "mistral";
pub const MIXTRAL: &str = "mixtral";
pub const SMOLLM3: &str = "smollm3";
/// Ministral 3 (3B, 8B, 14B): Mistral with YaRN and Llama 4's attention
/// temperature (`rope_parameters.llama_4_scaling_beta`).
pub const MINISTRAL3: &str = "ministral3";
/// ERNIE 4.5 (dense): Llama with GPT-J's adjacent RoPE pairs and `use_bias`.
pub const ERNIE4_5: &str = "ernie4_5";

/// ERNIE 4.5's keys: Llama's, its one bias switch for every projection.
pub const ERNIE4_5_READS: &[&str] = &["rope_scaling", "rope_parameters", "hidden_act", "use_bias"];

/// The math-relevant `config.json` keys these families read.
pub const CONFIG_READS: &[&str] = &["rope_scaling", "rope_parameters", "hidden_act", "attention_bias", "mlp_bias", "sliding_window"];

/// Granite's: llama's and its four scales.
pub const GRANITE_READS: &[&str] = &[
    "rope_scaling",
    "rope_parameters",
    "hidden_act",
    "attention_bias",
    "mlp_bias",
    "sliding_window",
    "embedding_multiplier",
    "residual_multiplier",
    "attention_multiplier",
    "logits_scaling",
];

/// SmolLM3's: Mistral's and which layers rotate.
pub const SMOLLM3_READS: &[&str] =
    &["rope_scaling", "rope_parameters", "hidden_act", "attention_bias", "mlp_bias", "sliding_window", "no_rope_layers"];

/// Mixtral's: Mistral's and the expert count.
pub const MIXTRAL_READS: &[&str] =
    &["rope_scaling", "rope_parameters", "hidden_act", "attention_bias", "mlp_bias", "sliding_window", "num_local_experts"];

pub fn lower(st: &SafetensorsFile, model_type: &str) -> Result<Lowered, Diagnostic> {
    let mut dims = HfDims::read(st, HeadDim::KeyOrHiddenOverHeads, false)?;
    let mut facts = vec![];
    let scaling = if model_type == MINISTRAL3 {
        let (scaling, limit, fact) = ministral3_rope(st)?;
        if let Some(limit) = limit {
            dims.context = dims.context.min(limit);
        }
        facts.push(("attention_temperature", fact));
        scaling
    } else {
        rope_scaling(st, model_type)?
    };
    require_act(st, model_type, "silu")?;
    let flag = |k: &str| super::hf::config_flag(st, k);
    if flag("mlp_bias")? {
        return Err(Diagnostic::new(&st.config_path, format!("`mlp_bias` is true: biased MLPs are not lowered for the {model_type} family yet")));
    }
    let window = match st.config.get("sliding_window") {
        None | Some(serde_json::Value::Null) => None,
        Some(_) if model_type == LLAMA || model_type == granite::MODEL_TYPE => {
            return Err(Diagnostic::new(&st.config_path, "`sliding_window` is set on a llama config: transformers' Llama has no sliding window")
                .note("a Mistral checkpoint says `model_type: \"mistral\"`"))
        }
        Some(_) => super::hf::sliding_window(st, dims.context)?,
    };
    // ERNIE 4.5's `use_bias` biases the MLP too, which no released one sets.
    if model_type == ERNIE4_5 && flag("use_bias")? {
        return Err(Diagnostic::new(&st.config_path, "`use_bias` is true: biased MLPs are not lowered for the ernie4_5 family yet")
            .note("the released ERNIE 4.5 checkpoints have it false"));
    }
    let bias = flag("attention_bias")?;
    let no_rope_layers = if model_type == SMOLLM3 { no_rope_layers(st, dims.n_layers)? } else { vec![] };
    let decoder = Decoder {
        qkv_bias: bias,
        out_bias: bias,
        scaling,
        window,
        no_rope_layers: no_rope_layers.clone(),
        scales: if model_type == granite::MODEL_TYPE { Some(granite::Scales::from_config(st)?) } else { None },
        rope_style: if model_type == ERNIE4_5 { RopeStyle::GptJ } else { RopeStyle::Neox },
        ..Decoder::plain(rope_theta(st)?)
    };
    facts.push(("attention_bias", bias.to_string()));
    if model_type == SMOLLM3 {
        facts.push(("no_rope_layers", no_rope_layers.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(",")));
    }
    if let Some(w) = window {
        facts.push(("sliding_window", w.to_string()));
    }
    if model_type != MIXTRAL {
        return lower_decoder(st, model_type, dims, &decoder, &mut |b, l, h| dense_mlp(b, &dims, l, h), facts);
    }
    let (n_experts, top_k) = (st.config_uint("num_local_experts")?, st.config_uint("num_experts_per_tok")?);
    if top_k == 0 || top_k > n_experts {
        return Err(Diagnostic::new(
            &st.config_path,
            format!("`num_experts_per_tok` = {top_k} is not between 1 and `num_local_experts` = {n_experts}"),
        ));
    }
    let moe = Moe { n_experts, top_k, ffn: dims.ffn, d: dims.d, norm_topk: true };
    facts.push(("experts", format!("{n_experts}, {top_k} per token, renormalized")));
    let mut mlp = |b: &mut super::Builder, l: usize, h| {
        let p = format!("model.layers.{l}.block_sparse_moe");
        let expert = |e: usize| ["w1", "w3", "w2"].map(|w| format!("{p}.experts.{e}.{w}.weight"));
        moe_block(b, &format!("{p}.gate.weight"), &expert, h, &moe)
    };
    lower_decoder(st, model_type, dims, &decoder, &mut mlp, facts)
}

/// Ministral 3's RoPE: YaRN, and Llama 4's attention temperature, which
/// multiplies the queries at position `p` by `1 + beta · ln(1 + floor(p /
/// original_max_position_embeddings))` (HF `get_llama_4_attn_scale`). That
/// factor is exactly 1 before the pretraining length, and graphc does not
/// compute it past it: with `beta` not 0 the context is capped there
/// (Ministral 3: 16384 of its 262144), so no position where it differs
/// from 1 can run. Returns the scaling, the cap, and the plan fact.
fn ministral3_rope(st: &SafetensorsFile) -> Result<(graphc_ir::RopeScaling, Option<usize>, String), Diagnostic> {
    // transformers 5's `rope_parameters`, or the older `rope_scaling` beside `rope_theta`.
    let key = if st.config.get("rope_parameters").is_some_and(|v| !v.is_null()) { "rope_parameters" } else { "rope_scaling" };
    let params = st.config_value(key)?.as_object().cloned().ok_or_else(|| Diagnostic::new(&st.config_path, format!("`{key}` is not an object")))?;
    let beta = params.get("llama_4_scaling_beta").and_then(|b| b.as_f64()).ok_or_else(|| {
        Diagnostic::new(&st.config_path, format!("`{key}.llama_4_scaling_beta` is missing or not a number (Ministral 3's attention temperature)"))
    })?;
    let original = params.get("original_max_position_embeddings").and_then(|o| o.as_u64()).filter(|&o| o > 0);
    // transformers' RoPE ignores these two (`ignore_keys_at_rope_validation`).
    let mut rope = params.clone();
    rope.remove("llama_4_scaling_beta");
    rope.remove("max_position_embeddings");
    let scaling = super::hf::rope_scaling_of(st, key, &serde_json::Value::Object(rope), MINISTRAL3)?;
    if beta == 0.0 {
        return Ok((scaling, None, "none (llama_4_scaling_beta 0)".into()));
    }
    let original = original.ok_or_else(|| {
        Diagnostic::new(&st.config_path, format!("`{key}.original_max_position_embeddings` is missing: Llama 4's attention temperature needs it"))
    })? as usize;
    Ok((scaling, Some(original), temperature_fact(beta, original)))
}

/// The plan fact of a Llama 4 attention temperature (`beta`, pretraining length `original`).
pub(crate) fn temperature_fact(beta: f64, original: usize) -> String {
    format!("1 + {beta} ln(1 + floor(p / {original})): 1 before position {original}; graphc does not compute it past there, so the context is capped at {original}")
}

/// SmolLM3's `no_rope_layers`: one flag a layer, 0 where Q and K are not
/// rotated. The layers of those zeros.
fn no_rope_layers(st: &SafetensorsFile, n_layers: usize) -> Result<Vec<usize>, Diagnostic> {
    let flags = st.config_value("no_rope_layers")?;
    let flags: Option<Vec<u64>> = flags.as_array().and_then(|a| a.iter().map(|f| f.as_u64().filter(|&f| f <= 1)).collect());
    match flags {
        Some(f) if f.len() == n_layers => Ok(f.iter().enumerate().filter(|(_, &f)| f == 0).map(|(l, _)| l).collect()),
        _ => Err(Diagnostic::new(
            &st.config_path,
            format!("`no_rope_layers` is not a list of {n_layers} flags (1: the layer rotates, 0: it does not)"),
        )),
    }
}
