//! The family registry: one row per family — the names a checkpoint calls
//! it by (a GGUF `general.architecture`, a `config.json` `model_type`), the
//! `config.json` keys its lowering reads (every other math key is refused
//! unless neutral, `rules::check_config_keys`), and its lowering. Adding a
//! family is one row here and its lowering file.

use super::*;
use crate::gguf::GgufFile;
use crate::safetensors::SafetensorsFile;
use crate::Diagnostic;
use llama::Lowered;

/// How a family is lowered.
pub enum Lower {
    /// From a GGUF's own metadata keys and tensor names.
    Gguf(fn(&GgufFile) -> Result<Lowered, Diagnostic>),
    /// From HF names: a safetensors checkpoint, or a GGUF of `gguf_arch`
    /// seen through them (`gguf_hf`). Given the `model_type` and the
    /// session limit the user set (Phi-3's LongRoPE picks its factors by it).
    Hf(fn(&SafetensorsFile, &str, Option<usize>) -> Result<Lowered, Diagnostic>),
}

pub struct Family {
    /// `config.json`'s `model_type`, for a family lowered from HF names.
    pub model_type: Option<&'static str>,
    /// The GGUF `general.architecture` it is read from, if any.
    pub gguf_arch: Option<&'static str>,
    /// The `config.json` keys its lowering reads.
    pub config_reads: &'static [&'static str],
    pub lower: Lower,
    /// Named to users in what-is-supported lists (graphc's own test family is not).
    pub listed: bool,
}

const fn gguf(arch: &'static str, lower: fn(&GgufFile) -> Result<Lowered, Diagnostic>) -> Family {
    Family { model_type: None, gguf_arch: Some(arch), config_reads: &[], lower: Lower::Gguf(lower), listed: true }
}

const fn hf(
    model_type: &'static str,
    gguf_arch: Option<&'static str>,
    config_reads: &'static [&'static str],
    lower: fn(&SafetensorsFile, &str, Option<usize>) -> Result<Lowered, Diagnostic>,
) -> Family {
    Family { model_type: Some(model_type), gguf_arch, config_reads, lower: Lower::Hf(lower), listed: true }
}

/// The math keys Qwen3-Next and Qwen3.5 read.
const QWEN3_NEXT_READS: &[&str] = &["head_dim", "layer_types", "partial_rotary_factor", "num_experts", "num_local_experts"];

pub const FAMILIES: &[Family] = &[
    gguf("llama", llama::lower),
    gguf("smollm3", llama::lower),
    gguf("granite", llama::lower),
    gguf("granitemoe", llama::lower),
    gguf("gemma3", gemma3::lower),
    hf(llama_hf::LLAMA, None, llama_hf::CONFIG_READS, |st, t, _| llama_hf::lower(st, t)),
    hf(llama_hf::MISTRAL, None, llama_hf::CONFIG_READS, |st, t, _| llama_hf::lower(st, t)),
    hf(llama_hf::MINISTRAL3, None, llama_hf::CONFIG_READS, |st, t, _| llama_hf::lower(st, t)),
    hf(llama_hf::MIXTRAL, None, llama_hf::MIXTRAL_READS, |st, t, _| llama_hf::lower(st, t)),
    hf(llama_hf::SMOLLM3, None, llama_hf::SMOLLM3_READS, |st, t, _| llama_hf::lower(st, t)),
    hf(granite::MODEL_TYPE, None, llama_hf::GRANITE_READS, |st, t, _| llama_hf::lower(st, t)),
    hf(qwen2::MODEL_TYPE, Some("qwen2"), qwen2::CONFIG_READS, |st, _, _| qwen2::lower(st)),
    hf(qwen2_moe::MODEL_TYPE, Some("qwen2moe"), qwen2_moe::CONFIG_READS, |st, _, _| qwen2_moe::lower(st)),
    hf(qwen3::MODEL_TYPE, Some("qwen3"), &["use_sliding_window", "head_dim", "rope_scaling", "rope_parameters"], |st, _, _| qwen3::lower(st)),
    hf(qwen3_moe::MODEL_TYPE, Some("qwen3moe"), &["head_dim", "num_experts", "num_local_experts", "rope_scaling", "rope_parameters"], |st, _, _| {
        qwen3_moe::lower(st)
    }),
    hf(qwen3_next::MODEL_TYPE, Some("qwen3next"), QWEN3_NEXT_READS, |st, t, _| qwen3_next::lower(st, t)),
    hf(qwen3_next::QWEN3_5, Some("qwen35"), QWEN3_NEXT_READS, |st, t, _| qwen3_next::lower(st, t)),
    hf(qwen3_next::QWEN3_5_MOE, Some("qwen35moe"), QWEN3_NEXT_READS, |st, t, _| qwen3_next::lower(st, t)),
    hf(gemma::MODEL_TYPE, Some("gemma"), &["head_dim", "hidden_act", "hidden_activation"], |st, _, _| gemma::lower(st)),
    hf(
        gemma2::MODEL_TYPE,
        Some("gemma2"),
        &[
            "head_dim",
            "hidden_act",
            "hidden_activation",
            "sliding_window",
            "layer_types",
            "attn_logit_softcapping",
            "final_logit_softcapping",
            "query_pre_attn_scalar",
        ],
        |st, _, _| gemma2::lower(st),
    ),
    hf(gemma3_hf::MODEL_TYPE, None, gemma3_hf::CONFIG_READS, |st, _, _| gemma3_hf::lower(st)),
    hf(gemma4::MODEL_TYPE, Some("gemma4"), gemma4::CONFIG_READS, |st, _, _| gemma4::lower(st)),
    hf(llama_hf::ERNIE4_5, Some("ernie4_5"), llama_hf::ERNIE4_5_READS, |st, t, _| llama_hf::lower(st, t)),
    hf(glm4::MODEL_TYPE, Some("glm4"), glm4::CONFIG_READS, |st, _, _| glm4::lower(st)),
    hf(olmo2::MODEL_TYPE, Some("olmo2"), olmo2::CONFIG_READS, |st, t, _| olmo2::lower(st, t)),
    hf(olmo2::OLMO3, None, olmo2::OLMO3_READS, |st, t, _| olmo2::lower(st, t)),
    hf(lfm2::MODEL_TYPE, Some("lfm2"), lfm2::CONFIG_READS, |st, _, _| lfm2::lower(st)),
    hf(phi2::MODEL_TYPE, Some("phi2"), &["hidden_act", "partial_rotary_factor"], |st, _, _| phi2::lower(st)),
    hf(phi3::MODEL_TYPE, Some("phi3"), &["rope_scaling", "rope_parameters", "sliding_window", "partial_rotary_factor"], |st, _, max_seq| {
        phi3::lower(st, max_seq)
    }),
    hf(phimoe::MODEL_TYPE, Some("phimoe"), &["rope_scaling", "rope_parameters", "attention_bias", "num_local_experts"], |st, _, max_seq| {
        phimoe::lower(st, max_seq)
    }),
    hf(gpt_oss::MODEL_TYPE, Some("gpt-oss"), gpt_oss::CONFIG_READS, |st, _, _| gpt_oss::lower(st)),
    // Ministral 3's GGUF: llama's rows (permuted by the converter), its own keys.
    gguf("mistral3", llama::lower),
    Family { listed: false, ..hf(fused_kv::MODEL_TYPE, None, &["head_dim"], |st, _, _| fused_kv::lower(st)) },
];

/// The family a GGUF of `arch` is read as.
pub fn by_gguf_arch(arch: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.gguf_arch == Some(arch))
}

/// The family lowered from HF names for `model_type`.
pub fn by_model_type(model_type: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.model_type == Some(model_type))
}

/// Every GGUF architecture graphc reads, in table order.
pub fn gguf_architectures() -> Vec<&'static str> {
    FAMILIES.iter().filter_map(|f| f.gguf_arch).collect()
}

/// Every `model_type` a user may give (graphc's test family left out).
pub fn model_types() -> Vec<&'static str> {
    FAMILIES.iter().filter(|f| f.listed).filter_map(|f| f.model_type).collect()
}
