//! Multi-token-prediction (MTP) heads, left out. Qwen3-Next's and Qwen3.5's
//! checkpoints carry one (`mtp.*` on the Hub; in llama.cpp's GGUFs the last
//! `nextn_predict_layers` blocks) that drafts further tokens for
//! speculative decoding. The model's own forward never reads it
//! (transformers ignores `mtp.*` on load; llama.cpp runs it only as a draft
//! model), and graphc decodes without drafts: its tensors are not read,
//! counted, and said so in the plan. Any other unread tensor is still refused.

use crate::safetensors::SafetensorsFile;
use serde_json::Value;

/// The families (`model_type`) whose checkpoints may carry an MTP head.
pub const FAMILIES: &[&str] = &["qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"];

/// A config key (not HF's) naming how many MTP tensors were left out.
pub const MTP_TENSORS_LEFT: &str = "graphc_mtp_tensors_not_read";

/// The Hub's MTP tensor names (transformers 5's multimodal saves put them under `model.`).
fn is_mtp(name: &str) -> bool {
    name.starts_with("mtp.") || name.starts_with("model.mtp.")
}

/// `st` without its MTP tensors, their count recorded where there were any.
pub fn leave_out(mut st: SafetensorsFile) -> SafetensorsFile {
    let before = st.tensors.len();
    st.tensors.retain(|t| !is_mtp(&t.name));
    let left = before - st.tensors.len();
    if let (Value::Object(config), true) = (&mut st.config, left > 0) {
        config.insert(MTP_TENSORS_LEFT.into(), Value::from(left));
    }
    st
}

/// The plan's fact for left-out MTP tensors, where `config` records some.
pub fn fact(config: &Value) -> Option<(String, String)> {
    let n = config.get(MTP_TENSORS_LEFT)?.as_u64()?;
    Some(("mtp".into(), format!("{n} tensors not read: the multi-token-prediction head drafts tokens, which graphc does not")))
}
