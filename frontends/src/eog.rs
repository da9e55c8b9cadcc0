//! End of generation: the token ids after which a generation stops, the
//! set llama.cpp builds (`special_eog_ids` in its vocabulary loader) so a
//! checkpoint stops where users of llama.cpp see it stop.
//!
//! - the ids the metadata names: `tokenizer.ggml.eos_token_id`,
//!   `eot_token_id`, `eom_token_id`, and the fill-in-the-middle padding,
//!   repository and file-separator tokens (by key or by text);
//! - every token whose text is one of `EOG_TEXTS`, whatever the metadata
//!   says: a Llama 3 Instruct file whose `eos` is `<|end_of_text|>` ends its
//!   turns with `<|eot_id|>`, a Qwen2 file's `<|endoftext|>` ends a plain
//!   completion, Gemma marks only `<eos>` and ends a turn with
//!   `<end_of_turn>`.

use crate::error::Diagnostic;
use crate::gguf::GgufFile;

/// The metadata keys naming end-of-generation ids.
pub const EOG_KEYS: &[&str] = &["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"];

/// Token texts that end a generation wherever they are in a vocabulary
/// (llama.cpp's list).
pub const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>",
    "[e~[",
];

/// Fill-in-the-middle tokens that also end a generation (a code model's
/// padding, repository and file separators): each by its key, or else the
/// first id whose text is one of the list.
const FIM_EOG: &[(&str, &[&str])] = &[
    ("tokenizer.ggml.fim_pad_token_id", &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"]),
    ("tokenizer.ggml.fim_rep_token_id", &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"]),
    ("tokenizer.ggml.fim_sep_token_id", &["<|file_sep|>"]),
];

/// The end-of-generation ids of the GGUF vocabulary `tokens`, sorted; a
/// named id past the vocabulary is an error naming its key.
pub fn eog_ids(g: &GgufFile, tokens: &[String]) -> Result<Vec<u32>, Diagnostic> {
    let named = |key: &str| -> Result<Option<u32>, Diagnostic> {
        match g.get(key).and_then(|v| v.as_u64()) {
            Some(id) if id as usize >= tokens.len() => {
                Err(Diagnostic::new(&g.path, format!("`{key}` = {id} is past the vocabulary of {} tokens", tokens.len())))
            }
            id => Ok(id.map(|id| id as u32)),
        }
    };
    let mut ends = Vec::new();
    for key in EOG_KEYS {
        ends.extend(named(key)?);
    }
    let fim = [named(FIM_EOG[0].0)?, named(FIM_EOG[1].0)?, named(FIM_EOG[2].0)?];
    Ok(eog_set(tokens, &ends, fim))
}

/// The end-of-generation set of a vocabulary (`tokens[id]` is id's text)
/// given the ids its metadata names as ends and as the three
/// fill-in-the-middle tokens (`FIM_EOG`'s keys, `None` where unnamed).
pub fn eog_set(tokens: &[String], named_ends: &[u32], fim: [Option<u32>; 3]) -> Vec<u32> {
    // One pass: every id whose text ends a generation, and the first id of
    // each text any rule below looks up.
    let mut ids = Vec::new();
    let mut first = std::collections::HashMap::<&str, u32>::new();
    for (i, t) in tokens.iter().enumerate() {
        let eog = EOG_TEXTS.contains(&t.as_str());
        if eog {
            ids.push(i as u32);
        }
        if eog || FIM_EOG.iter().any(|(_, texts)| texts.contains(&t.as_str())) {
            first.entry(t.as_str()).or_insert(i as u32);
        }
    }
    let by_text = |texts: &[&str]| texts.iter().filter_map(|t| first.get(t).copied()).min();
    for ((_, texts), named) in FIM_EOG.iter().zip(fim) {
        ids.extend(named.or_else(|| by_text(texts)));
    }
    ids.extend_from_slice(named_ends);
    let has = |t: &str| first.contains_key(t);
    // gpt-oss's tool-call turns: `<|end|>` ends a message, not the answer.
    if (has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>")) {
        if let Some(end) = by_text(&["<|end|>"]) {
            ids.retain(|&i| i != end);
        }
    }
    if has("<|tool_response>") {
        if let Some(eos) = by_text(&["</s>"]) {
            ids.retain(|&i| i != eos);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}
