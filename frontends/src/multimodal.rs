//! Multimodal checkpoints read as their language model: Gemma 3 4B+
//! (`model_type: gemma3`, Gemma3ForConditionalGeneration) and Mistral
//! Small 3.1 / 3.2 (`mistral3`, Mistral3ForConditionalGeneration), each
//! the text checkpoint it holds (`gemma3_text`, `mistral`).
//!
//! The view: the config's `text_config`, and the language model's tensors
//! under their text-model names (the Hub's `language_model.model.*` and
//! `language_model.lm_head.*`, or transformers 5's `model.language_model.*`
//! and `lm_head.*`). The vision tower and its projector (`vision_tower.*`,
//! `multi_modal_projector.*`) are left out and counted: they read images
//! only, which graphc does not take (the server refuses them), so text
//! runs as the multimodal model runs it on text alone. Any other tensor
//! stays under its own name and is refused as unread.

use crate::error::Diagnostic;
use crate::safetensors::SafetensorsFile;
use serde_json::Value;

/// Each multimodal `model_type` read here and the text `model_type` of its language model.
const LANGUAGE_MODELS: &[(&str, &str)] = &[("gemma3", "gemma3_text"), ("mistral3", "mistral")];

/// A config key (not HF's) naming how many vision tensors the view left out.
pub const VISION_TENSORS_LEFT: &str = "graphc_vision_tensors_not_read";

/// The text `model_type` of multimodal `model_type`, where graphc reads its language model.
pub fn text_model_type(model_type: &str) -> Option<&'static str> {
    LANGUAGE_MODELS.iter().find(|(m, _)| *m == model_type).map(|(_, t)| *t)
}

/// `st` (a multimodal checkpoint whose language model is a `text_type`
/// checkpoint) as that text checkpoint.
pub fn language_model_view(st: SafetensorsFile, text_type: &str) -> Result<SafetensorsFile, Diagnostic> {
    let path = st.config_path.clone();
    let Some(text) = st.config.get("text_config").and_then(|t| t.as_object()) else {
        return Err(Diagnostic::new(&path, "a multimodal config without a `text_config` object"));
    };
    let mut config = text.clone();
    match config.get("model_type").and_then(|m| m.as_str()) {
        None => {}
        Some(t) if t == text_type => {}
        Some(other) => return Err(Diagnostic::new(&path, format!("`text_config.model_type` is `{other}`, not `{text_type}`"))),
    }
    config.insert("model_type".into(), Value::from(text_type));
    if let Some(tie) = st.config.get("tie_word_embeddings") {
        config.entry("tie_word_embeddings").or_insert(tie.clone());
    }
    let renames = [("language_model.model.", "model."), ("model.language_model.", "model."), ("language_model.lm_head.", "lm_head.")];
    let vision = ["vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."];
    let mut tensors = Vec::with_capacity(st.tensors.len());
    let mut file_names = st.file_names.clone();
    let mut left = 0;
    for mut t in st.tensors {
        if let Some(name) = renames.iter().find_map(|(from, to)| t.name.strip_prefix(from).map(|rest| format!("{to}{rest}"))) {
            file_names.insert(name.clone(), t.name.clone());
            t.name = name;
        } else if vision.iter().any(|p| t.name.starts_with(p)) {
            left += 1;
            continue;
        }
        tensors.push(t);
    }
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    config.insert(VISION_TENSORS_LEFT.into(), Value::from(left));
    Ok(SafetensorsFile {
        path: st.path,
        config_path: format!("{path} (its `text_config`)"),
        config: Value::Object(config),
        tensors,
        data: st.data,
        file_names,
    })
}

/// The plan's fact for a view's left-out vision tensors, where `config` is a view's.
pub fn vision_fact(config: &Value) -> Option<(String, String)> {
    let n = config.get(VISION_TENSORS_LEFT)?.as_u64()?;
    Some(("vision_tower".into(), format!("{n} tensors not read: text only, images refused")))
}
