//! Multimodal checkpoints read as their language model, each the text
//! checkpoint it holds: Gemma 3 4B+ (`model_type: gemma3`, as
//! `gemma3_text`), Mistral Small 3.1 / 3.2 (`mistral3`, as `mistral`),
//! Qwen2-VL and Qwen2.5-VL (`qwen2_vl`, `qwen2_5_vl`, as `qwen2`) and
//! Qwen3-VL (`qwen3_vl`, as `qwen3`), Qwen3.5 (`qwen3_5`, `qwen3_5_moe`); and
//! the Qwen-VL GGUFs' text models (llama.cpp's `qwen2vl`, `qwen3vl`,
//! `qwen3vlmoe`, whose vision parts are another file). Qwen3-VL-MoE's
//! safetensors are not read: their experts are one input-major 3D tensor.
//!
//! The view: the config's `text_config` (or, in the Hub's Qwen2/2.5-VL
//! configs, the top level without `vision_config`), and the language
//! model's tensors under their text-model names (the Hub's
//! `language_model.model.*` and `language_model.lm_head.*`, or transformers
//! 5's `model.language_model.*` and `lm_head.*`). The vision tower and its
//! projector (`vision_tower.*`, `multi_modal_projector.*`, Qwen's
//! `visual.*`) are left out and counted: they read images only, which
//! graphc does not take (the server refuses them), so text runs as the
//! multimodal model runs it on text alone. Any other tensor stays under its
//! own name and is refused as unread.
//!
//! Qwen-VL's M-RoPE rotates each section of a head's pairs by its own
//! position (time, height, width; Qwen3-VL interleaves the sections). On
//! text alone all three are the token's index, so it is RoPE: the sections
//! are checked to cover the head's pairs and recorded, and the model is
//! lowered with plain RoPE. Qwen3-VL's DeepStack adds image features to the
//! first layers' hidden states, nothing on text alone.

use crate::error::Diagnostic;
use crate::gguf::{GgufFile, MetaValue};
use crate::safetensors::SafetensorsFile;
use serde_json::{Map, Value};

/// A multimodal `model_type` whose language model graphc reads.
struct LanguageModel {
    model_type: &'static str,
    /// The `text_config.model_type` transformers writes for it.
    text_config_type: &'static str,
    /// The text `model_type` its language model is lowered as.
    family: &'static str,
    /// The Hub's configs keep the text model's keys at the top level (Qwen2/2.5-VL's).
    flat_config: bool,
    /// Its RoPE: Qwen-VL's M-RoPE, or plain.
    mrope: Mrope,
}

/// How a language model's config gives its M-RoPE sections.
#[derive(Clone, Copy, PartialEq)]
enum Mrope {
    /// Plain RoPE (no sections).
    No,
    /// `mrope_section` must be given (transformers has no default).
    Sections,
    /// Given, or transformers' default (Qwen3.5's `[11, 11, 10]`).
    SectionsOr([u64; 3]),
}

const LANGUAGE_MODELS: &[LanguageModel] = &[
    LanguageModel { model_type: "gemma3", text_config_type: "gemma3_text", family: "gemma3_text", flat_config: false, mrope: Mrope::No },
    LanguageModel { model_type: "gemma4", text_config_type: "gemma4_text", family: "gemma4_text", flat_config: false, mrope: Mrope::No },
    LanguageModel { model_type: "mistral3", text_config_type: "mistral", family: "mistral", flat_config: false, mrope: Mrope::No },
    // Ministral 3's (3B, 8B, 14B): the same checkpoint shape, its own text model.
    LanguageModel { model_type: "mistral3", text_config_type: "ministral3", family: "ministral3", flat_config: false, mrope: Mrope::No },
    LanguageModel { model_type: "qwen2_vl", text_config_type: "qwen2_vl_text", family: "qwen2", flat_config: true, mrope: Mrope::Sections },
    LanguageModel { model_type: "qwen2_5_vl", text_config_type: "qwen2_5_vl_text", family: "qwen2", flat_config: true, mrope: Mrope::Sections },
    LanguageModel { model_type: "qwen3_vl", text_config_type: "qwen3_vl_text", family: "qwen3", flat_config: false, mrope: Mrope::Sections },
    LanguageModel { model_type: "qwen3_5", text_config_type: "qwen3_5_text", family: "qwen3_5_text", flat_config: false, mrope: QWEN3_5_SECTIONS },
    LanguageModel {
        model_type: "qwen3_5_moe",
        text_config_type: "qwen3_5_moe_text",
        family: "qwen3_5_moe_text",
        flat_config: false,
        mrope: QWEN3_5_SECTIONS,
    },
];

/// Qwen3.5's sections where its config gives none (`Qwen3_5TextRotaryEmbedding`'s default).
const QWEN3_5_SECTIONS: Mrope = Mrope::SectionsOr([11, 11, 10]);

/// The Qwen-VL GGUF architectures (llama.cpp's) and the architecture their text model is read as.
/// Each reads its text architecture's keys and the `{arch}.` keys listed
/// with it (the M-RoPE sections; Qwen3-VL's DeepStack count, images only).
const GGUF_LANGUAGE_MODELS: &[(&str, &str, &[&str])] = &[
    ("qwen2vl", "qwen2", &["rope.dimension_sections"]),
    ("qwen3vl", "qwen3", &["rope.dimension_sections", "n_deepstack_layers"]),
    ("qwen3vlmoe", "qwen3moe", &["rope.dimension_sections", "n_deepstack_layers"]),
];

/// A config key (not HF's) naming how many vision tensors the view left out.
pub const VISION_TENSORS_LEFT: &str = "graphc_vision_tensors_not_read";

/// A config key (not HF's) recording the M-RoPE sections read as RoPE.
pub const MROPE_READ_AS_ROPE: &str = "graphc_mrope_sections_read_as_rope";

/// Whether `model_type` is a multimodal one graphc reads as its language
/// model (`language_model_view` says as which family).
pub fn is_multimodal(model_type: &str) -> bool {
    LANGUAGE_MODELS.iter().any(|m| m.model_type == model_type)
}

/// A text checkpoint of a multimodal model's language model (its
/// `model_type` the `text_config` one, as `Qwen3_5ForCausalLM` saves):
/// read as its family, its M-RoPE as RoPE. `None` for any other `model_type`.
pub fn text_checkpoint_view(mut st: SafetensorsFile, model_type: &str) -> Result<(SafetensorsFile, Option<&'static str>), Diagnostic> {
    let Some(lm) = LANGUAGE_MODELS.iter().find(|m| m.text_config_type == model_type && m.mrope != Mrope::No) else { return Ok((st, None)) };
    let Value::Object(config) = &mut st.config else { return Ok((st, None)) };
    config.insert("model_type".into(), Value::from(lm.family));
    let path = st.config_path.clone();
    mrope_as_rope(config, &path, lm)?;
    Ok((st, Some(lm.family)))
}

/// The multimodal `model_type`s graphc reads as their language model.
pub fn model_types() -> impl Iterator<Item = &'static str> {
    let mut types: Vec<&'static str> = LANGUAGE_MODELS.iter().map(|m| m.model_type).collect();
    types.dedup(); // mistral3's two rows are adjacent
    types.into_iter()
}

/// The architecture a GGUF of multimodal architecture `arch` is read as, where graphc reads its text model.
pub fn gguf_text_arch(arch: &str) -> Option<&'static str> {
    GGUF_LANGUAGE_MODELS.iter().find(|(a, _, _)| *a == arch).map(|(_, t, _)| *t)
}

/// The multimodal GGUF architectures graphc reads.
pub fn gguf_architectures() -> impl Iterator<Item = &'static str> {
    GGUF_LANGUAGE_MODELS.iter().map(|(a, _, _)| *a)
}

/// The `{arch}.` keys a multimodal GGUF architecture reads beyond its text architecture's.
pub fn gguf_extra_keys(arch: &str) -> &'static [&'static str] {
    GGUF_LANGUAGE_MODELS.iter().find(|(a, _, _)| *a == arch).map_or(&[], |(_, _, k)| *k)
}

/// `st` (a multimodal checkpoint of a `model_type` `is_multimodal` knows)
/// as the text checkpoint it holds.
pub fn language_model_view(st: SafetensorsFile, model_type: &str) -> Result<SafetensorsFile, Diagnostic> {
    // The row of this text model where a multimodal type has several (mistral3).
    let text_type = st.config.get("text_config").and_then(|t| t.get("model_type")).and_then(|t| t.as_str());
    let rows = || LANGUAGE_MODELS.iter().filter(|m| m.model_type == model_type);
    let Some(lm) = rows().find(|m| Some(m.text_config_type) == text_type).or_else(|| rows().next()) else {
        return Err(Diagnostic::new(&st.config_path, format!("`{model_type}` is not a multimodal model_type graphc reads")));
    };
    let path = st.config_path.clone();
    let (mut config, config_path) = match st.config.get("text_config") {
        Some(Value::Object(text)) => (text.clone(), format!("{path} (its `text_config`)")),
        None if lm.flat_config => {
            let mut top = st.config.as_object().cloned().unwrap_or_default();
            top.remove("vision_config");
            (top, path.clone())
        }
        _ => return Err(Diagnostic::new(&path, "a multimodal config without a `text_config` object")),
    };
    match config.get("model_type").and_then(|m| m.as_str()) {
        None => {}
        Some(t) if t == lm.text_config_type || t == lm.family || (lm.flat_config && t == lm.model_type) => {}
        Some(other) => return Err(Diagnostic::new(&path, format!("`text_config.model_type` is `{other}`, not `{}`", lm.text_config_type))),
    }
    config.insert("model_type".into(), Value::from(lm.family));
    if let Some(tie) = st.config.get("tie_word_embeddings") {
        config.entry("tie_word_embeddings").or_insert(tie.clone());
    }
    if lm.mrope != Mrope::No {
        mrope_as_rope(&mut config, &config_path, lm)?;
    }
    let renames = [("language_model.model.", "model."), ("model.language_model.", "model."), ("language_model.lm_head.", "lm_head.")];
    // Gemma 4's audio tower and both towers' embedders too.
    let vision = [
        "vision_tower.",
        "multi_modal_projector.",
        "model.vision_tower.",
        "model.multi_modal_projector.",
        "visual.",
        "model.visual.",
        "model.embed_vision.",
        "model.audio_tower.",
        "model.embed_audio.",
    ];
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
    Ok(SafetensorsFile { path: st.path, config_path, config: Value::Object(config), tensors, data: st.data, file_names })
}

/// Qwen-VL's `rope_scaling` / `rope_parameters` (`mrope_section`, Qwen3-VL's
/// `mrope_interleaved`, the Hub's `type: mrope`) as plain RoPE, once the
/// sections are seen to cover the rotated pairs; the sections recorded.
/// Errors name `lm`'s family.
fn mrope_as_rope(config: &mut Map<String, Value>, path: &str, lm: &LanguageModel) -> Result<(), Diagnostic> {
    let err = |m: String| Diagnostic::new(path, format!("{m} (the {} family's M-RoPE sections)", lm.family));
    let key = ["rope_scaling", "rope_parameters"].into_iter().find(|k| config.get(*k).is_some_and(|v| !v.is_null()));
    let head_dim = match config.get("head_dim").and_then(|v| v.as_u64()) {
        Some(h) => h,
        None => {
            let d = config.get("hidden_size").and_then(|v| v.as_u64()).unwrap_or(0);
            d / config.get("num_attention_heads").and_then(|v| v.as_u64()).filter(|&h| h > 0).unwrap_or(1)
        }
    };
    // Qwen3.5 rotates a part of each head (`partial_rotary_factor`, in the rope parameters or beside them).
    let partial = key.and_then(|k| config.get(k)).and_then(|p| p.get("partial_rotary_factor")).or_else(|| config.get("partial_rotary_factor"));
    let rotary_dim = (head_dim as f64 * partial.and_then(|f| f.as_f64()).unwrap_or(1.0)) as u64;
    let params = match key {
        Some(key) => Some((key, config.get_mut(key).and_then(|v| v.as_object_mut()).ok_or_else(|| err(format!("`{key}` is not an object")))?)),
        None => None,
    };
    let given = params.as_ref().and_then(|(_, p)| p.get("mrope_section"));
    let recorded = match (given, lm.mrope) {
        (Some(s), _) => {
            let key = key.unwrap_or("rope_parameters");
            let sections: Option<Vec<u64>> = s.as_array().and_then(|a| a.iter().map(|v| v.as_u64()).collect());
            let sections = sections.ok_or_else(|| err(format!("`{key}.mrope_section` is not a list of whole numbers")))?;
            check_sections(&sections, rotary_dim).map_err(|m| err(format!("`{key}.mrope_section` = {sections:?}: {m}")))?;
            format!("{sections:?}")
        }
        // On text alone the sections change nothing: transformers' default is taken as it is.
        (None, Mrope::SectionsOr(default)) => format!("{default:?} (transformers' default)"),
        (None, _) => return Err(err("`rope_scaling.mrope_section` (or `rope_parameters.mrope_section`) is missing".into())),
    };
    if let Some((key, params)) = params {
        if params.get("mrope_interleaved").is_some_and(|v| !v.is_boolean()) {
            return Err(err(format!("`{key}.mrope_interleaved` is not a boolean")));
        }
        params.remove("mrope_section");
        params.remove("mrope_interleaved");
        for kind in ["type", "rope_type"] {
            if params.get(kind).and_then(|v| v.as_str()) == Some("mrope") {
                params.insert(kind.into(), Value::from("default"));
            }
        }
    }
    config.insert(MROPE_READ_AS_ROPE.into(), Value::from(recorded));
    Ok(())
}

/// M-RoPE's sections (pairs rotated by time, height, width) must cover a
/// head's `rotary_dim / 2` rotated pairs, as transformers and llama.cpp split them.
fn check_sections(sections: &[u64], rotary_dim: u64) -> Result<(), String> {
    let pairs: u64 = sections.iter().sum();
    if sections.len() != 3 || pairs * 2 != rotary_dim {
        return Err(format!("three sections of {} pairs in all expected (half the head's {rotary_dim} rotated features)", rotary_dim / 2));
    }
    Ok(())
}

/// A Qwen-VL GGUF's `{arch}.rope.dimension_sections` (llama.cpp pads the
/// three to four with a 0) checked against the rotated features and
/// recorded as `mrope_as_rope` records them; its `n_deepstack_layers`,
/// which only images fill, said so.
pub fn gguf_mrope_fact(g: &GgufFile, arch: &str, rotary_dim: u64) -> Result<String, Diagnostic> {
    let key = format!("{arch}.rope.dimension_sections");
    let values = g.array(&key)?;
    let sections: Option<Vec<u64>> = values.iter().map(MetaValue::as_u64).collect();
    let err = |m: String| Diagnostic::new(&g.path, format!("`{key}`: {m}"));
    let Some(mut sections) = sections else { return Err(err("not a list of whole numbers".into())) };
    if sections.len() == 4 {
        if sections[3] != 0 {
            return Err(err(format!("{sections:?}: a fourth section graphc does not lower (Qwen-VL has three)")));
        }
        sections.pop();
    }
    check_sections(&sections, rotary_dim).map_err(|m| err(format!("{sections:?}: {m}")))?;
    let mut fact = format!("{sections:?}");
    if let Some(n) = g.get(&format!("{arch}.n_deepstack_layers")).and_then(MetaValue::as_u64).filter(|&n| n > 0) {
        fact.push_str(&format!("; {n} DeepStack layers (image features only)"));
    }
    Ok(fact)
}

/// The plan's facts for a view's left-out vision tensors and M-RoPE, where `config` is a view's.
pub fn facts(config: &Value) -> Vec<(String, String)> {
    let mut facts = vec![];
    if let Some(n) = config.get(VISION_TENSORS_LEFT).and_then(|v| v.as_u64()) {
        facts.push(("vision_tower".into(), format!("{n} tensors not read: text only, images refused")));
    }
    if let Some(s) = config.get(MROPE_READ_AS_ROPE).and_then(|v| v.as_str()) {
        facts.push(("mrope".into(), format!("sections {s}: on text alone every position is the token's index, RoPE")));
    }
    facts
}
