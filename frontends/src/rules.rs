//! No silent wrong answers: what each family reads from a checkpoint, and
//! the refusal of everything it would otherwise ignore.
//!
//! Three rules, checked for every checkpoint before and after lowering:
//! - a GGUF metadata key of the model's architecture (`{arch}.…`) that the
//!   family does not read is refused, unless its value is the one that
//!   changes nothing (`expert_count` 0, `rope.dimension_count` equal to the
//!   head size, ...);
//! - a math-relevant `config.json` key (`MATH_KEYS`: RoPE scaling, sliding
//!   windows, soft-caps, biases, activations, experts, quantization...) that
//!   the family does not read is refused unless its value is neutral;
//! - a tensor that no weight of the lowered graph reads is refused (a
//!   `rope_freqs` or an extra bias would otherwise be dropped on the floor).
//!
//! Each error names the key or tensor, the family, and what it supports.

use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::gguf::{GgufFile, MetaValue};
use crate::safetensors::SafetensorsFile;
use serde_json::{Map, Value};

/// The `{arch}.` keys each GGUF family reads (llama.cpp's names). Keys
/// every family reads or checks are in `GGUF_COMMON`.
const GGUF_READS: &[(&str, &[&str])] = &[
    ("llama", LLAMA_KEYS),
    (
        "mistral3",
        &[
            "rope.scaling.type",
            "rope.scaling.factor",
            "rope.scaling.original_context_length",
            "rope.scaling.yarn_beta_fast",
            "rope.scaling.yarn_beta_slow",
            "rope.scaling.yarn_attn_factor",
            "rope.scaling.yarn_log_multiplier",
            "attention.temperature_scale",
        ],
    ),
    ("gemma3", &["attention.sliding_window", "rope.scaling.type", "rope.scaling.factor"]),
    ("smollm3", YARN_KEYS),
    ("granite", &crate::families::granite::GGUF_KEYS),
    ("granitemoe", &["embedding_scale", "residual_scale", "attention.scale", "logit_scale", "expert_count", "expert_used_count"]),
    ("qwen2", YARN_KEYS),
    ("qwen2moe", &["expert_count", "expert_used_count", "expert_feed_forward_length", "expert_shared_feed_forward_length"]),
    ("qwen3", YARN_KEYS),
    (
        "qwen3moe",
        &[
            "expert_count",
            "expert_used_count",
            "expert_feed_forward_length",
            "rope.scaling.type",
            "rope.scaling.factor",
            "rope.scaling.original_context_length",
            "rope.scaling.yarn_beta_fast",
            "rope.scaling.yarn_beta_slow",
            "rope.scaling.yarn_attn_factor",
        ],
    ),
    ("qwen35", QWEN3_5_MOE_KEYS.split_at(10).0),
    ("qwen35moe", &QWEN3_5_MOE_KEYS),
    (
        "qwen3next",
        &[
            "nextn_predict_layers",
            "attention.recurrent_layers",
            "ssm.conv_kernel",
            "ssm.group_count",
            "ssm.inner_size",
            "ssm.state_size",
            "ssm.time_step_rank",
            "full_attention_interval",
            "rope.dimension_count",
            "expert_count",
            "expert_used_count",
            "expert_feed_forward_length",
            "expert_shared_feed_forward_length",
        ],
    ),
    ("gemma", &[]),
    ("glm4", &["rope.dimension_count"]),
    ("lfm2", &["shortconv.l_cache", "vocab_size"]),
    (
        "gemma4",
        &[
            "attention.sliding_window",
            "attention.sliding_window_pattern",
            "attention.key_length_swa",
            "attention.value_length",
            "attention.value_length_swa",
            "attention.shared_kv_layers",
            "embedding_length_per_layer_input",
            "final_logit_softcapping",
            "rope.freq_base_swa",
            "rope.dimension_count",
            "rope.dimension_count_swa",
            "expert_count",
            "expert_used_count",
            "expert_feed_forward_length",
        ],
    ),
    ("ernie4_5", &[]),
    (
        "olmo2",
        &[
            "attention.sliding_window",
            "attention.sliding_window_pattern",
            "rope.freq_base_swa",
            "rope.scaling.type",
            "rope.scaling.factor",
            "rope.scaling.original_context_length",
            "rope.scaling.yarn_beta_fast",
            "rope.scaling.yarn_beta_slow",
            "rope.scaling.yarn_attn_factor",
        ],
    ),
    ("gemma2", &["attention.sliding_window", "attn_logit_softcapping", "final_logit_softcapping"]),
    ("phi2", &["attention.layer_norm_epsilon", "rope.dimension_count"]),
    ("phi3", &["rope.scaling.attn_factor", "rope.scaling.original_context_length", "attention.sliding_window", "rope.dimension_count"]),
    ("phimoe", &["rope.scaling.attn_factor", "rope.scaling.original_context_length", "expert_count", "expert_used_count"]),
    (
        "gpt-oss",
        &[
            "expert_count",
            "expert_used_count",
            "expert_feed_forward_length",
            "attention.sliding_window",
            "rope.scaling.type",
            "rope.scaling.factor",
            "rope.scaling.original_context_length",
            "rope.scaling.yarn_beta_fast",
            "rope.scaling.yarn_beta_slow",
            "rope.scaling.yarn_attn_factor",
        ],
    ),
];

/// The RoPE scaling keys the HF view reads (`gguf_hf::rope_scaling`).
const YARN_KEYS: &[&str] = &[
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    "rope.scaling.yarn_attn_factor",
];

/// Qwen3.5-MoE's: Qwen3-Next's linear layers, M-RoPE sections, MTP blocks,
/// then the experts' (Qwen3.5's: the first ten).
const QWEN3_5_MOE_KEYS: [&str; 14] = [
    "ssm.conv_kernel",
    "ssm.group_count",
    "ssm.inner_size",
    "ssm.state_size",
    "ssm.time_step_rank",
    "full_attention_interval",
    "attention.recurrent_layers",
    "rope.dimension_count",
    "rope.dimension_sections",
    "nextn_predict_layers",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_shared_feed_forward_length",
];

/// llama's: YaRN's, Mistral's sliding window, Mixtral's experts.
const LLAMA_KEYS: &[&str] = &[
    "expert_count",
    "expert_used_count",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    "rope.scaling.yarn_attn_factor",
    "attention.sliding_window",
];

/// Keys every GGUF family reads: the dimensions and the norm epsilon.
const GGUF_COMMON: &[&str] = &[
    "block_count",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "rope.freq_base",
    "attention.layer_norm_rms_epsilon",
];

/// Whether a key the family does not read holds the value that changes
/// nothing (`head_dim`: the family's head size; `context`: its
/// `context_length`).
fn gguf_neutral(suffix: &str, v: &MetaValue, head_dim: Option<u64>, context: Option<u64>) -> bool {
    match suffix {
        // Checked against the embedding's rows by every family.
        "vocab_size" => true,
        // Informational: whether the checkpoint was fine-tuned at its scaled length.
        "rope.scaling.finetuned" => true,
        // 0: no window (llama.cpp's phi3 converter writes 0 for none); a
        // window as long as the context slides nothing.
        "attention.sliding_window" => v.as_u64() == Some(0) || matches!((v.as_u64(), context), (Some(w), Some(c)) if w >= c),
        "expert_count" | "expert_used_count" => v.as_u64() == Some(0),
        "rope.dimension_count" | "attention.value_length" => head_dim.is_some() && v.as_u64() == head_dim,
        "rope.scaling.type" => v.as_str() == Some("none"),
        "rope.scaling.factor" => v.as_f64() == Some(1.0),
        "attention.causal" => matches!(v, MetaValue::Bool(true)),
        _ => false,
    }
}

/// Refuse a GGUF whose `{arch}.` keys hold something the family `arch`
/// does not read.
pub fn check_gguf_keys(g: &GgufFile, arch: &str) -> Result<(), Diagnostic> {
    // A multimodal architecture's text model reads its text architecture's keys and its own few.
    let family_arch = crate::multimodal::gguf_text_arch(arch).unwrap_or(arch);
    let family_reads = GGUF_READS.iter().find(|(a, _)| *a == family_arch).map(|(_, r)| *r).unwrap_or(&[]);
    let reads: Vec<&str> = family_reads.iter().chain(crate::multimodal::gguf_extra_keys(arch)).copied().collect();
    let prefix = format!("{arch}.");
    let head_dim = match (
        g.get(&format!("{arch}.attention.key_length")).and_then(|v| v.as_u64()),
        g.get(&format!("{arch}.embedding_length")),
        g.get(&format!("{arch}.attention.head_count")),
    ) {
        (Some(k), _, _) => Some(k),
        (None, Some(d), Some(h)) => d.as_u64().zip(h.as_u64()).filter(|&(_, h)| h > 0).map(|(d, h)| d / h),
        _ => None,
    };
    for (key, v) in &g.metadata {
        let Some(suffix) = key.strip_prefix(&prefix) else { continue };
        let context = g.get(&format!("{arch}.context_length")).and_then(|c| c.as_u64());
        if GGUF_COMMON.contains(&suffix) || reads.contains(&suffix) || gguf_neutral(suffix, v, head_dim, context) {
            continue;
        }
        let mut read: Vec<&str> = GGUF_COMMON.iter().chain(&reads).copied().collect();
        read.sort();
        return Err(Diagnostic::new(
            &g.path,
            format!("GGUF key `{key}` = {} is not implemented by the {arch} family: graphc would ignore it", show(v)),
        )
        .note(format!("the {arch} family reads `{prefix}` {}", read.join(", "))));
    }
    Ok(())
}

fn show(v: &MetaValue) -> String {
    match v {
        MetaValue::Array(a) => format!("[{} values]", a.len()),
        MetaValue::Str(s) => format!("{s:?}"),
        other => match (other.as_u64(), other.as_f64()) {
            (Some(u), _) => u.to_string(),
            (_, Some(f)) => f.to_string(),
            _ => format!("{other:?}"),
        },
    }
}

/// The `config.json` keys that change a model's arithmetic. A family that
/// does not read one refuses it unless `config_neutral` says its value
/// changes nothing.
pub const MATH_KEYS: &[&str] = &[
    "rope_scaling",
    "rope_parameters",
    "partial_rotary_factor",
    "sliding_window",
    "use_sliding_window",
    "layer_types",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "query_pre_attn_scalar",
    "attention_bias",
    "mlp_bias",
    "use_bias",
    "qk_layernorm",
    "use_qk_norm",
    "hidden_act",
    "hidden_activation",
    "head_dim",
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "quantization_config",
    "embedding_multiplier",
    "residual_multiplier",
    "attention_multiplier",
    "logits_scaling",
    "logit_scale",
    "rope_local_base_freq",
    "no_rope_layers",
    "use_bidirectional_attention",
    "sliding_window_pattern",
    "swiglu_alpha",
    "swiglu_limit",
    "attention_k_eq_v",
    "num_kv_shared_layers",
    "hidden_size_per_layer_input",
    "use_double_wide_mlp",
    "enable_moe_block",
    "per_layer_config",
    "global_head_dim",
    "num_global_key_value_heads",
];

/// The math keys each safetensors family reads (by `model_type`).
fn config_reads(family: &str) -> &'static [&'static str] {
    crate::families::registry::by_model_type(family).map_or(&[], |f| f.config_reads)
}

/// Whether `config[key]` (a key the family does not read) changes nothing.
fn config_neutral(key: &str, v: &Value, config: &Map<String, Value>, reads: &[&str]) -> bool {
    let default_rope = |p: &Value| {
        let kind = p.get("rope_type").or_else(|| p.get("type")).and_then(|t| t.as_str()).unwrap_or("default");
        let partial = p.get("partial_rotary_factor").and_then(|f| f.as_f64());
        kind == "default" && (partial.is_none_or(|f| f == 1.0) || reads.contains(&"partial_rotary_factor"))
    };
    match key {
        _ if v.is_null() => true,
        "rope_scaling" | "rope_parameters" => default_rope(v),
        "partial_rotary_factor" => v.as_f64() == Some(1.0),
        // Qwen configs carry a window that applies only with
        // `use_sliding_window`; and a window as long as the context slides
        // nothing (Phi-3.5-MoE's 131072 of 131072).
        "sliding_window" => {
            let context = config.get("max_position_embeddings").and_then(|c| c.as_u64());
            config.get("use_sliding_window").and_then(|u| u.as_bool()) == Some(false) || matches!((v.as_u64(), context), (Some(w), Some(c)) if w >= c)
        }
        "use_sliding_window"
        | "attention_bias"
        | "mlp_bias"
        | "use_bias"
        | "qk_layernorm"
        | "use_qk_norm"
        | "use_bidirectional_attention"
        | "attention_k_eq_v"
        | "use_double_wide_mlp"
        | "enable_moe_block" => v.as_bool() == Some(false),
        "num_kv_shared_layers" | "hidden_size_per_layer_input" => v.as_u64() == Some(0),
        "layer_types" => v.as_array().is_some_and(|a| a.iter().all(|t| t.as_str() == Some("full_attention"))),
        // The SwiGLU families: transformers' `silu`.
        "hidden_act" => v.as_str() == Some("silu"),
        "head_dim" => {
            let (d, h) = (config.get("hidden_size").and_then(|x| x.as_u64()), config.get("num_attention_heads").and_then(|x| x.as_u64()));
            matches!((d, h, v.as_u64()), (Some(d), Some(h), Some(hd)) if h > 0 && d == h * hd)
        }
        "num_experts" | "num_local_experts" | "n_routed_experts" => v.as_u64() == Some(0),
        // Every layer rotates.
        "no_rope_layers" => v.as_array().is_some_and(|a| a.iter().all(|f| f.as_u64() == Some(1))),
        "embedding_multiplier" | "residual_multiplier" | "attention_multiplier" | "logits_scaling" | "logit_scale" => v.as_f64() == Some(1.0),
        _ => false,
    }
}

/// Refuse a `config.json` with a math-relevant key its family ignores.
pub fn check_config_keys(st: &SafetensorsFile, family: &str) -> Result<(), Diagnostic> {
    let Some(config) = st.config.as_object() else { return Ok(()) };
    let reads = config_reads(family);
    for &key in MATH_KEYS {
        let Some(v) = config.get(key) else { continue };
        if reads.contains(&key) || config_neutral(key, v, config, reads) {
            continue;
        }
        let read = if reads.is_empty() { "none of them".to_string() } else { reads.join(", ") };
        return Err(Diagnostic::new(
            &st.config_path,
            format!("config key `{key}` = {v} is not implemented by the {family} family: graphc would ignore it"),
        )
        .note(format!("of the keys that change the arithmetic, the {family} family reads {read}")));
    }
    Ok(())
}

/// Refuse a checkpoint with a tensor that the lowered graph never reads.
/// `read_at_lowering` are tensors whose values the lowering folded into the
/// graph (`rope_freqs.weight`); `gguf_names` gives a renamed tensor's name
/// in its file, for the message.
pub fn check_tensors_used(source: &dyn crate::TensorSource, lowered: &Lowered, family: &str) -> Result<(), Diagnostic> {
    // A set: a MoE checkpoint has tens of thousands of expert tensors.
    let read: std::collections::HashSet<&str> =
        lowered.manifest.iter().map(|w| w.name.as_str()).chain(lowered.read_at_lowering.iter().map(String::as_str)).collect();
    for t in source.tensors() {
        if !read.contains(t.name.as_str()) {
            let name = source.file_name(&t.name);
            return Err(Diagnostic::new(source.path(), format!("tensor `{name}` is not read by the {family} family: graphc would ignore it"))
                .note("a tensor no rule consumes is refused, never dropped (an unknown bias, scale or RoPE table changes the answer)"));
        }
    }
    Ok(())
}
