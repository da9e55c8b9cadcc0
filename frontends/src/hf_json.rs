//! A checkpoint folder's own tokenizer: `tokenizer.json` (the `tokenizers`
//! crate reads it as transformers does) with `tokenizer_config.json` for
//! the special tokens and the chat template, and `config.json` /
//! `generation_config.json` for the ids that end a generation. A safetensors
//! folder that carries them runs text like a GGUF.

use crate::eog;
use crate::error::Diagnostic;
use crate::tokenizer::{Engine, Pieces, Tokenizer};
use serde_json::Value;
use std::path::Path;
use tokenizers::Tokenizer as HfTokenizer;

/// The tokenizer of the checkpoint folder `dir`; `None` where it has no
/// `tokenizer.json`.
pub fn from_dir(dir: &Path) -> Result<Option<Tokenizer>, Diagnostic> {
    let path = dir.join("tokenizer.json");
    if !path.is_file() {
        return Ok(None);
    }
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|e| Diagnostic::new(&shown, format!("cannot read: {e}")))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| Diagnostic::new(&shown, format!("not JSON: {e}")))?;
    let tokenizer = HfTokenizer::from_bytes(text.as_bytes()).map_err(|e| Diagnostic::new(&shown, format!("cannot build the tokenizer: {e}")))?;
    let pieces = pieces(&json["decoder"]).ok_or_else(|| {
        Diagnostic::new(&shown, format!("decoder {} is not supported", json["decoder"]))
            .note("graphc decodes byte-level (`ByteLevel`) and SentencePiece (`Metaspace`, `ByteFallback`) pieces")
    })?;
    let config = read_json(&dir.join("tokenizer_config.json"))?;
    let vocab_size = tokenizer.get_vocab_size(true);
    let mut tokens = vec![String::new(); vocab_size];
    for (t, id) in tokenizer.get_vocab(true) {
        if let Some(slot) = tokens.get_mut(id as usize) {
            *slot = t;
        }
    }
    let control_ids = {
        let mut ids: Vec<u32> = json["added_tokens"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["special"] == true)
            .filter_map(|t| t["id"].as_u64().map(|i| i as u32))
            .collect();
        ids.sort_unstable();
        ids
    };
    // A special token named by its text (`"<|eot_id|>"`, or `{"content": ...}`).
    let special = |key: &str| -> Result<Option<u32>, Diagnostic> {
        let text = match &config[key] {
            Value::String(s) => s.as_str(),
            Value::Object(o) => o.get("content").and_then(Value::as_str).unwrap_or(""),
            _ => return Ok(None),
        };
        tokenizer.token_to_id(text).map(Some).ok_or_else(|| {
            Diagnostic::new(&dir.join("tokenizer_config.json").display().to_string(), format!("`{key}` = {text:?} is not in the vocabulary"))
        })
    };
    let bos_id = special("bos_token")?;
    let eos_id = special("eos_token")?;
    // BOS as the checkpoint's post-processor puts it, unless the config says.
    if config["add_eos_token"] == true {
        return Err(Diagnostic::new(&dir.join("tokenizer_config.json").display().to_string(), "`add_eos_token` = true is not implemented")
            .note("graphc puts no EOS after a prompt; a tokenizer that asks for one is refused"));
    }
    let add_bos = match config["add_bos_token"].as_bool() {
        Some(b) => b,
        None => bos_id.is_some_and(|bos| tokenizer.encode("a", true).is_ok_and(|e| e.get_ids().first() == Some(&bos))),
    };
    let mut ends: Vec<u32> = eos_id.into_iter().collect();
    for file in ["config.json", "generation_config.json"] {
        let v = read_json(&dir.join(file))?;
        match &v["eos_token_id"] {
            Value::Number(n) => ends.extend(n.as_u64().map(|i| i as u32)),
            Value::Array(a) => ends.extend(a.iter().filter_map(Value::as_u64).map(|i| i as u32)),
            _ => {}
        }
    }
    if let Some(id) = ends.iter().find(|&&id| id as usize >= vocab_size) {
        return Err(Diagnostic::new(&dir.display().to_string(), format!("end-of-generation id {id} is past the vocabulary of {vocab_size} tokens")));
    }
    let eog_ids = eog::eog_set(&tokens, &ends, [None; 3]);
    let chat_template = match &config["chat_template"] {
        Value::String(s) => Some(s.clone()),
        // Named templates: the default one.
        Value::Array(named) => named.iter().find(|t| t["name"] == "default").and_then(|t| t["template"].as_str()).map(str::to_string),
        _ => std::fs::read_to_string(dir.join("chat_template.jinja")).ok(),
    };
    Ok(Some(Tokenizer {
        inner: Engine::Hf { tokenizer: Box::new(tokenizer), pieces, plain: Default::default() },
        control_ids,
        eog_ids,
        chat_fallback: None,
        bos_id,
        eos_id,
        add_bos: add_bos && bos_id.is_some(),
        chat_template,
        vocab_size,
        requires_nfc: false,
    }))
}

/// A JSON file beside the checkpoint; `Null` where there is none.
fn read_json(path: &Path) -> Result<Value, Diagnostic> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| Diagnostic::new(&path.display().to_string(), format!("not JSON: {e}"))),
        Err(_) => Ok(Value::Null),
    }
}

/// How the `decoder` of a `tokenizer.json` spells bytes; `None` for one
/// graphc does not implement.
fn pieces(decoder: &Value) -> Option<Pieces> {
    match decoder["type"].as_str()? {
        "ByteLevel" => Some(Pieces::ByteLevel),
        "Metaspace" => Some(Pieces::Metaspace),
        "Sequence" => {
            let kinds: Vec<&str> = decoder["decoders"].as_array()?.iter().filter_map(|d| d["type"].as_str()).collect();
            if kinds.contains(&"ByteLevel") {
                Some(Pieces::ByteLevel)
            } else if kinds.iter().all(|k| matches!(*k, "Replace" | "ByteFallback" | "Fuse" | "Strip" | "Metaspace")) {
                Some(Pieces::Metaspace)
            } else {
                None
            }
        }
        _ => None,
    }
}
