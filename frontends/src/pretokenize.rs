//! How byte-level BPE text is split before merging, by the vocabulary's
//! `tokenizer.ggml.pre` (the value llama.cpp's converter writes): each the
//! split of that model's Hugging Face `tokenizer.json`, written as the same
//! `tokenizers` pre-tokenizers. A value not here is refused: text split
//! another way gives other ids without any error.
//!
//! Every `Split` is `Isolated` (matches and the text between them are each a
//! piece), and a sequence re-splits every piece of the step before, as
//! Hugging Face's `Sequence` and llama.cpp's regex lists both do.

use crate::error::Diagnostic;
use crate::gguf::GgufFile;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

/// GPT-2's split (Hugging Face `ByteLevel(use_regex=true)`), without its
/// final `|\s+` (the isolated split keeps what no alternative matches).
const GPT2_SPLIT: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's (`llama-bpe`): digits in runs of up to three, a letter run may
/// take one leading non-letter. The pattern of tiktoken's cl100k, so also
/// that of the `tokenizer.json`s llama.cpp's converter names `dbrx` (cl100k
/// vocabularies: DBRX, OLMo 2, Phi-4), `smaug-bpe` (Llama 3 vocabularies
/// without its BOS rule: Smaug, SmolLM3) and `falcon3`, for which its
/// `llama-vocab.cpp` uses this one regex.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: as Llama 3's, with single digits.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen3.5's (`qwen35`): Qwen2's, with combining marks (`\p{M}`) inside
/// letter runs and out of punctuation runs (its `tokenization_qwen3_5.py`).
const QWEN35_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Mistral's Tekken (Mistral Nemo, Pixtral): case runs split, `/` kept
/// with a punctuation run's newlines.
const TEKKEN_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-4o's o200k (`gpt-4o`: gpt-oss, Phi-4-mini): Tekken's case runs, each
/// taking a following contraction (`'s`, `'LL`, ...), digits in runs of up
/// to three. The pattern of those models' `tokenizer.json` (as llama.cpp
/// quotes it for its `gpt-4o` pre-tokenizer).
const O200K_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// llama.cpp's `default` for a BPE vocabulary: punctuation runs first,
/// then GPT-2's split, then digit runs cut in threes from the left.
const DEFAULT_SPLITS: [&str; 4] = [r"[\p{P}\$\+<=>\^~\|]+", GPT2_SPLIT, r"\p{N}+", r"[0-9][0-9][0-9]"];
/// DeepSeek LLM's and DeepSeek Coder's classes (their `tokenizer.json`).
const DEEPSEEK_LETTERS: &str = r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{01BA}\x{01BC}-\x{01BF}\x{01C4}-\x{0293}\x{0295}-\x{02AF}\x{0370}-\x{0373}\x{0376}\x{0377}\x{037B}-\x{037D}\x{037F}\x{0386}\x{0388}-\x{038A}\x{038C}\x{038E}-\x{03A1}\x{03A3}-\x{03F5}\x{03F7}-\x{0481}\x{048A}-\x{052F}\x{0531}-\x{0556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+";
const DEEPSEEK_PUNCT: &str = r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+";
const DEEPSEEK_CJK: &str = r"[\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+";

/// The `tokenizer.ggml.pre` values graphc splits as their Hugging Face
/// tokenizers do (`gpt2`: the converter's model name, accepted as `gpt-2`).
/// Names that share a split (the list llama.cpp's `llama-vocab.cpp` gives
/// each): `phi-2` is GPT-2's; `refact` (Granite 3) is StarCoder's and
/// SmolLM's; `dbrx`, `smaug-bpe` and `falcon3` are Llama 3's.
pub const KNOWN_PRE: &[&str] = &[
    "default",
    "gpt-2",
    "gpt2",
    "phi-2",
    "smollm",
    "starcoder",
    "refact",
    "qwen2",
    "qwen35",
    "deepseek-r1-qwen",
    "llama-bpe",
    "dbrx",
    "smaug-bpe",
    "falcon3",
    "tekken",
    "gpt-4o",
    "deepseek-llm",
    "deepseek-coder",
];

/// The pre-tokenizer of a byte-level BPE vocabulary, by its
/// `tokenizer.ggml.pre` (absent: GPT-2's, as transformers builds a `gpt2`
/// GGUF vocabulary).
pub fn pre_tokenizer(g: &GgufFile) -> Result<PreTokenizerWrapper, Diagnostic> {
    let split = |pattern: &str| -> Result<PreTokenizerWrapper, Diagnostic> {
        Split::new(SplitPattern::Regex(pattern.into()), SplitDelimiterBehavior::Isolated, false)
            .map(Into::into)
            .map_err(|e| Diagnostic::new(&g.path, format!("cannot build the pre-tokenizer: {e}")))
    };
    // The splits, then bytes to their byte-level characters (no more regex).
    let then_bytes = |mut steps: Vec<PreTokenizerWrapper>| -> PreTokenizerWrapper {
        steps.push(ByteLevel::new(false, false, false).into());
        Sequence::new(steps).into()
    };
    let gpt2 = || ByteLevel::new(false, true, true).into();
    match g.get("tokenizer.ggml.pre").and_then(|v| v.as_str()) {
        None | Some("gpt-2" | "gpt2" | "phi-2") => Ok(gpt2()),
        Some("default") => Ok(then_bytes(DEFAULT_SPLITS.iter().map(|p| split(p)).collect::<Result<_, _>>()?)),
        // Each digit its own pre-token, then GPT-2's split (their tokenizer.json).
        Some("smollm" | "starcoder" | "refact") => Ok(Sequence::new(vec![Digits::new(true).into(), gpt2()]).into()),
        // DeepSeek-R1's Qwen distills: Qwen2's split (llama.cpp's
        // `deepseek-r1-qwen` is its `qwen2`); see `requires_nfc`.
        Some("qwen2" | "deepseek-r1-qwen") => Ok(then_bytes(vec![split(QWEN2_SPLIT)?])),
        Some("qwen35") => Ok(then_bytes(vec![split(QWEN35_SPLIT)?])),
        Some("llama-bpe" | "dbrx" | "smaug-bpe" | "falcon3") => Ok(then_bytes(vec![split(LLAMA3_SPLIT)?])),
        Some("tekken") => Ok(then_bytes(vec![split(TEKKEN_SPLIT)?])),
        Some("gpt-4o") => Ok(then_bytes(vec![split(O200K_SPLIT)?])),
        Some("deepseek-llm") => Ok(then_bytes(vec![
            split(r"[\r\n]")?,
            split(DEEPSEEK_LETTERS)?,
            split(DEEPSEEK_PUNCT)?,
            split(r"\s+$")?,
            split(DEEPSEEK_CJK)?,
            Digits::new(true).into(),
        ])),
        Some("deepseek-coder") => {
            Ok(then_bytes(vec![split(r"[\r\n]")?, split(r"\s?\p{L}+")?, split(r"\s?\p{P}+")?, split(DEEPSEEK_CJK)?, Digits::new(true).into()]))
        }
        Some(other) => {
            Err(Diagnostic::new(&g.path, format!("`tokenizer.ggml.pre` = `{other}` is not implemented: its text would be split differently"))
                .note(format!("graphc splits byte-level BPE text for {}", KNOWN_PRE.join(", "))))
        }
    }
}

/// The normalizer the model's own `tokenizer.json` runs before the split,
/// which a GGUF does not record: Qwen2's and Qwen3.5's compose text to NFC
/// (a decomposed `é` is one character to them).
pub fn normalizer(g: &GgufFile) -> Option<NormalizerWrapper> {
    match g.get("tokenizer.ggml.pre").and_then(|v| v.as_str()) {
        Some("qwen2" | "qwen35") => Some(NFC.into()),
        _ => None,
    }
}

/// Whether text must already be in NFC: DeepSeek-R1's Qwen distills split
/// as Qwen2 (llama.cpp reads them so), but whether their `tokenizer.json`
/// composes text to NFC first, as Qwen2's does, could not be checked; on
/// text NFC leaves alone both readings agree, and other text is refused
/// (`Tokenizer::encode_text`) instead of split one of two ways.
pub fn requires_nfc(g: &GgufFile) -> bool {
    g.get("tokenizer.ggml.pre").and_then(|v| v.as_str()) == Some("deepseek-r1-qwen")
}
