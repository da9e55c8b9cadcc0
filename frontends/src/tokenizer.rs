//! The tokenizer, rebuilt from a checkpoint's own metadata (never a separate
//! download), and its chat template.
//!
//! `llama` (SentencePiece) vocabularies (Gemma 3) are tokenized by `spm.rs`;
//! `gpt2` GGUF vocabularies (SmolLM2) become a byte-level BPE in the
//! `tokenizers` crate, the same construction transformers' GGUF loader uses;
//! control and user-defined tokens (`<|im_start|>`, ...) are added as special
//! tokens so they are never split. Chat templates are Jinja, rendered with
//! `minijinja` with the settings transformers uses (`trim_blocks`,
//! `lstrip_blocks`).

use crate::error::Diagnostic;
use crate::gguf::{GgufFile, MetaValue};
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

/// The split before byte-level BPE of Llama 3's vocabulary (its
/// `tokenizer.json`'s `Split` pattern; llama.cpp's `llama-bpe`): digits in
/// runs of up to three, a letter run may take one leading non-letter.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's (llama.cpp's `qwen2`): as Llama 3's, with single digits.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The `tokenizer.ggml.pre` values graphc splits as their Hugging Face
/// tokenizers do.
pub const KNOWN_PRE: &[&str] = &["default", "gpt2", "smollm", "starcoder", "qwen2", "llama-bpe"];

/// The pre-tokenizer of a byte-level BPE vocabulary, by its
/// `tokenizer.ggml.pre` (absent: GPT-2's); an unknown value is refused, as
/// splitting text another way gives other ids without any error.
fn pre_tokenizer(g: &GgufFile) -> Result<PreTokenizerWrapper, Diagnostic> {
    let split = |pattern: &str| -> Result<PreTokenizerWrapper, Diagnostic> {
        let split = Split::new(SplitPattern::Regex(pattern.into()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| Diagnostic::new(&g.path, format!("cannot build the pre-tokenizer: {e}")))?;
        Ok(Sequence::new(vec![split.into(), ByteLevel::new(false, false, false).into()]).into())
    };
    match g.get("tokenizer.ggml.pre").and_then(|v| v.as_str()) {
        None | Some("default" | "gpt2") => Ok(ByteLevel::new(false, true, true).into()),
        // Each digit its own pre-token, then GPT-2's split (their tokenizer.json).
        Some("smollm" | "starcoder") => Ok(Sequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, true, true).into()]).into()),
        Some("qwen2") => split(QWEN2_SPLIT),
        Some("llama-bpe") => split(LLAMA3_SPLIT),
        Some(other) => Err(Diagnostic::new(&g.path, format!("`tokenizer.ggml.pre` = `{other}` is not implemented: its text would be split differently"))
            .note(format!("graphc splits byte-level BPE text for {}", KNOWN_PRE.join(", ")))),
    }
}

/// How text becomes ids.
enum Engine {
    /// Byte-level BPE (`gpt2` vocabularies), in the `tokenizers` crate.
    Hf(Box<HfTokenizer>),
    /// SentencePiece-style (`llama` vocabularies with scores), `spm.rs`.
    Spm(crate::spm::Spm),
}

pub struct Tokenizer {
    inner: Engine,
    /// A chat format to use when the checkpoint has no `tokenizer.chat_template`
    /// (a Jinja template, and where it comes from); set by the family.
    pub chat_fallback: Option<(String, &'static str)>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    pub add_bos: bool,
    pub chat_template: Option<String>,
    pub vocab_size: usize,
}

/// GGUF `tokenizer.ggml.token_type` values.
const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

fn strings(g: &GgufFile, key: &str) -> Result<Vec<String>, Diagnostic> {
    g.array(key)?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| Diagnostic::new(&g.path, format!("`{key}`[{i}] is a {}, expected a string", v.type_name())))
        })
        .collect()
}

impl Tokenizer {
    pub fn from_gguf(g: &GgufFile) -> Result<Tokenizer, Diagnostic> {
        let model = g.str("tokenizer.ggml.model")?;
        let tokens = strings(g, "tokenizer.ggml.tokens")?;
        let types: Vec<i64> = match g.get("tokenizer.ggml.token_type") {
            Some(MetaValue::Array(a)) => a.iter().map(|v| v.as_u64().map(|x| x as i64).unwrap_or(1)).collect(),
            _ => vec![],
        };
        let special_ids: Vec<u32> =
            types.iter().enumerate().filter(|(_, &t)| t == TOKEN_CONTROL || t == TOKEN_USER_DEFINED).map(|(i, _)| i as u32).collect();
        let vocab_size = tokens.len();
        // Each engine keeps the one copy of the vocabulary (peak memory
        // counts: the issue-6 bound on SmolLM2 leaves no room for two).
        let inner = match model {
            "gpt2" => Engine::Hf(Box::new(Self::byte_level_bpe(g, &tokens, &special_ids)?)),
            "llama" => {
                let scores: Vec<f32> = g
                    .array("tokenizer.ggml.scores")?
                    .iter()
                    .map(|v| v.as_f64().unwrap_or(0.0) as f32)
                    .collect();
                if scores.len() != tokens.len() {
                    return Err(Diagnostic::new(&g.path, format!("{} scores for {} tokens", scores.len(), tokens.len())));
                }
                let unk = g.get("tokenizer.ggml.unknown_token_id").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
                Engine::Spm(crate::spm::Spm::new(tokens, scores, special_ids, unk))
            }
            other => {
                return Err(Diagnostic::new(&g.path, format!("tokenizer model `{other}` is not supported yet"))
                    .note("graphc builds `gpt2` (byte-level BPE) and `llama` (SentencePiece) tokenizers from GGUF metadata"))
            }
        };
        let id = |key: &str| g.get(key).and_then(|v| v.as_u64()).map(|v| v as u32);
        let bos_id = id("tokenizer.ggml.bos_token_id");
        let add_bos = match g.get("tokenizer.ggml.add_bos_token") {
            Some(MetaValue::Bool(b)) => *b,
            _ => false,
        };
        Ok(Tokenizer {
            inner,
            chat_fallback: None,
            bos_id,
            eos_id: id("tokenizer.ggml.eos_token_id"),
            add_bos: add_bos && bos_id.is_some(),
            chat_template: g.get("tokenizer.chat_template").and_then(|v| v.as_str()).map(str::to_string),
            vocab_size,
        })
    }

    fn byte_level_bpe(g: &GgufFile, tokens: &[String], special_ids: &[u32]) -> Result<HfTokenizer, Diagnostic> {
        let merges_raw = strings(g, "tokenizer.ggml.merges")?;
        let mut merges = Vec::with_capacity(merges_raw.len());
        for (i, m) in merges_raw.iter().enumerate() {
            let (a, b) = m.split_once(' ').ok_or_else(|| {
                Diagnostic::new(&g.path, format!("`tokenizer.ggml.merges`[{i}] = {m:?} is not two tokens separated by a space"))
            })?;
            merges.push((a.to_string(), b.to_string()));
        }
        let vocab: tokenizers::models::bpe::Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        // No word cache: it would hold up to 10k pre-tokenized words for
        // the session's life to speed up re-encoding the same text.
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .cache_capacity(0)
            .build()
            .map_err(|e| Diagnostic::new(&g.path, format!("cannot build the BPE tokenizer: {e}")))?;
        let mut inner = HfTokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre_tokenizer(g)?));
        inner.with_decoder(Some(ByteLevel::default()));
        let special: Vec<AddedToken> =
            special_ids.iter().filter_map(|&i| tokens.get(i as usize)).map(|t| AddedToken::from(t.clone(), true)).collect();
        inner.add_special_tokens(&special);
        Ok(inner)
    }

    /// Token ids of `text` (special tokens in the text are recognized), with
    /// the BOS in front when the checkpoint asks for one.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let mut ids = Vec::new();
        if self.add_bos {
            ids.extend(self.bos_id);
        }
        match &self.inner {
            Engine::Hf(t) => ids.extend_from_slice(t.encode(text, false).map_err(|e| e.to_string())?.get_ids()),
            Engine::Spm(t) => ids.extend(t.encode(text)),
        }
        Ok(ids)
    }

    /// Text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, String> {
        match &self.inner {
            Engine::Hf(t) => t.decode(ids, false).map_err(|e| e.to_string()),
            Engine::Spm(t) => Ok(t.decode(ids)),
        }
    }

    /// The vocabulary entry of `id` as stored (byte-level BPE entries in
    /// their byte-to-unicode spelling).
    pub fn token_text(&self, id: u32) -> Option<String> {
        match &self.inner {
            Engine::Hf(t) => t.id_to_token(id),
            Engine::Spm(t) => t.token(id).map(str::to_string),
        }
    }

    /// The prompt text for one user message under the checkpoint's chat
    /// template, with the generation prompt added.
    pub fn apply_chat_template(&self, user_message: &str) -> Result<String, String> {
        let template = match (&self.chat_template, &self.chat_fallback) {
            (Some(t), _) => t.as_str(),
            (None, Some((t, _))) => t.as_str(),
            (None, None) => return Err("the checkpoint has no `tokenizer.chat_template`".into()),
        };
        let mut env = minijinja::Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_template("chat", template).map_err(|e| format!("chat template does not parse: {e}"))?;
        let tok = |id: Option<u32>| id.and_then(|i| self.token_text(i)).unwrap_or_default();
        let ctx = minijinja::context! {
            messages => vec![minijinja::context! { role => "user", content => user_message }],
            add_generation_prompt => true,
            bos_token => tok(self.bos_id),
            eos_token => tok(self.eos_id),
        };
        env.get_template("chat").unwrap().render(ctx).map_err(|e| format!("chat template failed to render: {e}"))
    }
}
