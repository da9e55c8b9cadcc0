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

use crate::chat::{self, ChatError, ChatOptions, Message, TemplateTokens};
use crate::error::Diagnostic;
use crate::gguf::{GgufFile, MetaValue};
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::BPE;
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

/// How text becomes ids.
pub(crate) enum Engine {
    /// A `tokenizers` tokenizer: a GGUF `gpt2` vocabulary rebuilt as
    /// byte-level BPE, or a checkpoint's own `tokenizer.json`; how its
    /// pieces become bytes; and, made on first use, a copy that reads
    /// special tokens' text as text (`encode_text(.., false)`).
    Hf { tokenizer: Box<HfTokenizer>, pieces: Pieces, plain: std::sync::OnceLock<Box<HfTokenizer>> },
    /// SentencePiece-style (`llama` vocabularies with scores), `spm.rs`.
    Spm(crate::spm::Spm),
}

/// How a `tokenizers` vocabulary entry spells bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pieces {
    /// GPT-2's byte-to-unicode characters.
    ByteLevel,
    /// SentencePiece's: `▁` for a space, `<0xNN>` for a byte.
    Metaspace,
}

pub struct Tokenizer {
    pub(crate) inner: Engine,
    /// Control tokens (`<|im_end|>`, ...: not printed as text unless
    /// asked), sorted. They and user-defined tokens are never split.
    pub(crate) control_ids: Vec<u32>,
    /// The ids that end a generation (`eog.rs`), sorted.
    pub eog_ids: Vec<u32>,
    /// A chat format to use when the checkpoint has no `tokenizer.chat_template`
    /// (a Jinja template, and where it comes from); set by the family.
    pub chat_fallback: Option<(String, &'static str)>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    pub add_bos: bool,
    pub chat_template: Option<String>,
    pub vocab_size: usize,
    /// Text must already be in Unicode NFC (`pretokenize::requires_nfc`).
    pub(crate) requires_nfc: bool,
}

/// gpt-oss's harmony markup that the visible text shows, as llama.cpp
/// shows it (it marks them user-defined in a vocabulary that has
/// `<|return|>` and `<|call|>`), so a raw answer reads
/// `<|channel|>analysis<|message|>…<|start|>assistant<|channel|>final<|message|>…`,
/// not `analysis…assistantfinal…`. They stay special for encoding.
const SHOWN_MARKUP: [&str; 4] = ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// `control_ids` without the shown markup, in a harmony vocabulary.
fn shown_markup_removed(inner: &Engine, mut control_ids: Vec<u32>) -> Vec<u32> {
    let id = |text: &str| match inner {
        Engine::Hf { tokenizer, .. } => tokenizer.token_to_id(text),
        Engine::Spm(_) => None,
    };
    if id("<|return|>").is_some() && id("<|call|>").is_some() {
        let shown: Vec<u32> = SHOWN_MARKUP.iter().filter_map(|t| id(t)).collect();
        control_ids.retain(|i| !shown.contains(i));
    }
    control_ids
}

/// GGUF `tokenizer.ggml.token_type` values.
const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

fn strings(g: &GgufFile, key: &str) -> Result<Vec<String>, Diagnostic> {
    g.array(key)?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str().map(str::to_string).ok_or_else(|| Diagnostic::new(&g.path, format!("`{key}`[{i}] is a {}, expected a string", v.type_name())))
        })
        .collect()
}

/// The special tokens of a SentencePiece vocabulary that take the
/// whitespace after them, which a GGUF does not record: Phi-3's and
/// Phi-3.5's (architecture `phi3` with a SentencePiece vocabulary; Phi-4-mini's
/// o200k is byte-level BPE) mark every added token `rstrip` but
/// `<|endoftext|>`, and `</s>` too (their `tokenizer_config.json`'s
/// `added_tokens_decoder`), so the `\n` their template writes after each
/// tag is never a token. llama.cpp sets the same by `general.name`.
fn rstrip_ids(g: &GgufFile, tokens: &[String], special_ids: &[u32]) -> Vec<u32> {
    if g.get("general.architecture").and_then(|v| v.as_str()) != Some("phi3") {
        return vec![];
    }
    let text = |id: u32| tokens.get(id as usize).map_or("", |t| t.as_str());
    let mut ids: Vec<u32> = special_ids.iter().copied().filter(|&id| !matches!(text(id), "<unk>" | "<s>" | "<|endoftext|>")).collect();
    ids.extend(tokens.iter().position(|t| t == "</s>").map(|i| i as u32));
    ids
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
        let control_ids: Vec<u32> = types.iter().enumerate().filter(|(_, &t)| t == TOKEN_CONTROL).map(|(i, _)| i as u32).collect();
        let vocab_size = tokens.len();
        let eog_ids = crate::eog::eog_ids(g, &tokens)?;
        // Each engine keeps the one copy of the vocabulary (peak memory
        // counts: the issue-6 bound on SmolLM2 leaves no room for two).
        let inner = match model {
            "gpt2" => Engine::Hf {
                tokenizer: Box::new(Self::byte_level_bpe(g, &tokens, &special_ids, &control_ids)?),
                pieces: Pieces::ByteLevel,
                plain: Default::default(),
            },
            "llama" => {
                let scores: Vec<f32> = g.array("tokenizer.ggml.scores")?.iter().map(|v| v.as_f64().unwrap_or(0.0) as f32).collect();
                if scores.len() != tokens.len() {
                    return Err(Diagnostic::new(&g.path, format!("{} scores for {} tokens", scores.len(), tokens.len())));
                }
                let unk = g.get("tokenizer.ggml.unknown_token_id").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
                let rstrip = rstrip_ids(g, &tokens, &special_ids);
                Engine::Spm(crate::spm::Spm::new(tokens, scores, special_ids.clone(), &control_ids, &rstrip, unk, add_space_prefix(g)))
            }
            other => {
                return Err(Diagnostic::new(&g.path, format!("tokenizer model `{other}` is not supported yet"))
                    .note("graphc builds `gpt2` (byte-level BPE) and `llama` (SentencePiece) tokenizers from GGUF metadata"))
            }
        };
        let control_ids = shown_markup_removed(&inner, control_ids);
        let id = |key: &str| g.get(key).and_then(|v| v.as_u64()).map(|v| v as u32);
        let bos_id = id("tokenizer.ggml.bos_token_id");
        let add_bos = match g.get("tokenizer.ggml.add_bos_token") {
            Some(MetaValue::Bool(b)) => *b,
            _ => false,
        };
        // An EOS after every prompt changes the ids; graphc never appends one.
        if matches!(g.get("tokenizer.ggml.add_eos_token"), Some(MetaValue::Bool(true))) {
            return Err(Diagnostic::new(&g.path, "`tokenizer.ggml.add_eos_token` = true is not implemented")
                .note("graphc puts no EOS after a prompt; a vocabulary that asks for one is refused"));
        }
        Ok(Tokenizer {
            inner,
            control_ids,
            eog_ids,
            chat_fallback: None,
            bos_id,
            eos_id: id("tokenizer.ggml.eos_token_id"),
            add_bos: add_bos && bos_id.is_some(),
            chat_template: g.get("tokenizer.chat_template").and_then(|v| v.as_str()).map(str::to_string),
            vocab_size,
            requires_nfc: crate::pretokenize::requires_nfc(g),
        })
    }

    fn byte_level_bpe(g: &GgufFile, tokens: &[String], special_ids: &[u32], control_ids: &[u32]) -> Result<HfTokenizer, Diagnostic> {
        let merges_raw = strings(g, "tokenizer.ggml.merges")?;
        let mut merges = Vec::with_capacity(merges_raw.len());
        for (i, m) in merges_raw.iter().enumerate() {
            let (a, b) = m
                .split_once(' ')
                .ok_or_else(|| Diagnostic::new(&g.path, format!("`tokenizer.ggml.merges`[{i}] = {m:?} is not two tokens separated by a space")))?;
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
        inner.with_normalizer(crate::pretokenize::normalizer(g));
        inner.with_pre_tokenizer(Some(crate::pretokenize::pre_tokenizer(g)?));
        inner.with_decoder(Some(ByteLevel::default()));
        // Control tokens are special (read as text when special-token
        // parsing is off); user-defined ones are always matched whole, as
        // llama.cpp and transformers both do.
        let (control, user): (Vec<u32>, Vec<u32>) = special_ids.iter().partition(|&&i| control_ids.binary_search(&i).is_ok());
        let added = |ids: &[u32], special: bool| -> Vec<AddedToken> {
            ids.iter().filter_map(|&i| tokens.get(i as usize)).map(|t| AddedToken::from(t.clone(), special).normalized(false)).collect()
        };
        inner.add_special_tokens(&added(&control, true));
        inner.add_tokens(&added(&user, false));
        Ok(inner)
    }

    /// Token ids of `text` (special tokens in the text are recognized), with
    /// the BOS in front when the checkpoint asks for one.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let mut ids = Vec::new();
        if self.add_bos {
            ids.extend(self.bos_id);
        }
        ids.extend(self.encode_text(text, true)?);
        Ok(ids)
    }

    /// Token ids of `text` alone (no BOS); with `parse_special` false, text
    /// that spells a special token (`<|im_end|>`) is tokenized as text.
    pub fn encode_text(&self, text: &str, parse_special: bool) -> Result<Vec<u32>, String> {
        if self.requires_nfc {
            if let Some(at) = first_not_nfc(text) {
                return Err(format!(
                    "the text is not in Unicode NFC (byte {at} starts a character NFC composes or reorders); whether this \
                     vocabulary's tokenizer (`tokenizer.ggml.pre` = deepseek-r1-qwen) composes text to NFC first, as Qwen2's does, \
                     is unverified, so such text is refused rather than split one of two ways: compose it to NFC first"
                ));
            }
        }
        match &self.inner {
            Engine::Hf { tokenizer, plain, .. } => {
                let t = if parse_special {
                    tokenizer
                } else {
                    plain.get_or_init(|| {
                        let mut t = tokenizer.clone();
                        t.set_encode_special_tokens(true);
                        t
                    })
                };
                Ok(t.encode(text, false).map_err(|e| e.to_string())?.get_ids().to_vec())
            }
            Engine::Spm(t) => Ok(t.encode(text, parse_special)),
        }
    }

    /// Text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, String> {
        if let Some(id) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(format!("token id {id} is past the vocabulary of {} tokens", self.vocab_size));
        }
        match &self.inner {
            Engine::Hf { pieces: Pieces::ByteLevel, .. } => Ok(String::from_utf8_lossy(&self.decode_bytes(ids, true)).into_owned()),
            // Without the space a SentencePiece text starts with.
            Engine::Hf { pieces: Pieces::Metaspace, tokenizer, .. } => tokenizer.decode(ids, false).map_err(|e| e.to_string()),
            Engine::Spm(t) => Ok(t.decode(ids)),
        }
    }

    /// The bytes `ids` spell, special tokens' text left out unless
    /// `show_special` (a token may end inside a UTF-8 character: see
    /// `Detokenizer`).
    pub fn decode_bytes(&self, ids: &[u32], show_special: bool) -> Vec<u8> {
        let keep = |id: &&u32| show_special || !self.is_control(**id);
        match &self.inner {
            Engine::Hf { tokenizer, pieces, .. } => {
                let mut out = Vec::new();
                for &id in ids.iter().filter(keep) {
                    let Some(piece) = tokenizer.id_to_token(id) else { continue };
                    match pieces {
                        // As the byte-level decoder: a token with a character
                        // outside the byte table (an added token's raw text)
                        // is its own UTF-8.
                        Pieces::ByteLevel => match piece.chars().map(byte_of_char).collect::<Option<Vec<u8>>>() {
                            Some(bytes) => out.extend(bytes),
                            None => out.extend_from_slice(piece.as_bytes()),
                        },
                        Pieces::Metaspace => crate::spm::piece_bytes(&piece, &mut out),
                    }
                }
                out
            }
            Engine::Spm(t) => t.decode_bytes(&ids.iter().copied().filter(|id| keep(&id)).collect::<Vec<_>>()),
        }
    }

    /// Whether `id` is a control token (`<|im_end|>`, `<eos>`, ...).
    pub fn is_control(&self, id: u32) -> bool {
        self.control_ids.binary_search(&id).is_ok()
    }

    /// The vocabulary entry of `id` as stored (byte-level BPE entries in
    /// their byte-to-unicode spelling).
    pub fn token_text(&self, id: u32) -> Option<String> {
        match &self.inner {
            Engine::Hf { tokenizer, .. } => tokenizer.id_to_token(id),
            Engine::Spm(t) => t.token(id).map(str::to_string),
        }
    }

    /// The checkpoint's chat template (or the family's fallback).
    pub fn template(&self) -> Option<&str> {
        self.chat_template.as_deref().or(self.chat_fallback.as_ref().map(|(t, _)| t.as_str()))
    }

    /// The prompt text of a conversation under the checkpoint's chat template.
    pub fn apply_chat_template(&self, messages: &[Message], opts: &ChatOptions) -> Result<String, ChatError> {
        let template = self.template().ok_or(ChatError::NoTemplate)?;
        let tok = |id: Option<u32>| id.and_then(|i| self.token_text(i)).unwrap_or_default();
        let tokens = TemplateTokens { bos_token: tok(self.bos_id), eos_token: tok(self.eos_id) };
        chat::render(template, messages, &tokens, opts)
    }
}

/// Where `text` first differs from its NFC form (the byte offset of the
/// first character that differs), if it does.
fn first_not_nfc(text: &str) -> Option<usize> {
    use tokenizers::normalizers::unicode::NFC;
    use tokenizers::{NormalizedString, Normalizer};
    let mut n = NormalizedString::from(text);
    NFC.normalize(&mut n).ok()?;
    let composed = n.get();
    if composed == text {
        return None;
    }
    let mut at = text.bytes().zip(composed.bytes()).take_while(|(a, b)| a == b).count();
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    Some(at)
}

/// GPT-2's byte-to-unicode table, inverted: the byte a byte-level BPE
/// character stands for.
fn byte_of_char(c: char) -> Option<u8> {
    static TABLE: std::sync::OnceLock<[Option<u8>; 324]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        // Printable Latin-1 bytes stand for themselves; the others, in
        // order, are U+0100 + n.
        let printable = |b: usize| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let mut t = [None; 324];
        let mut n = 0;
        for b in 0..256 {
            if printable(b) {
                t[b] = Some(b as u8);
            } else {
                t[256 + n] = Some(b as u8);
                n += 1;
            }
        }
        t
    });
    table.get(c as usize).copied().flatten()
}

/// `tokenizer.ggml.add_space_prefix`: whether SentencePiece text gets a
/// leading space (llama.cpp's default when the key is absent: yes).
fn add_space_prefix(g: &GgufFile) -> bool {
    !matches!(g.get("tokenizer.ggml.add_space_prefix"), Some(MetaValue::Bool(false)))
}
