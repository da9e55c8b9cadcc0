//! A safetensors folder that carries `tokenizer.json` and
//! `tokenizer_config.json` runs text like a GGUF: ids by its own BPE (the
//! merges engaged), the chat template and special tokens from its config,
//! the end-of-generation set from the config files and the token texts.

use graphc::{ChatOptions, CompileOptions, Message, Model};
use graphc_tests::vocab::byte_char;
use graphc_tests::{repo_root, temp_dir};
use serde_json::json;
use std::path::{Path, PathBuf};

/// The qwen2 fixture (vocabulary of 256) with a byte-level BPE
/// tokenizer.json: ids 0..250 the bytes 0..250, `he` `ll` `hell` from
/// three merges, then `<|im_start|>` 253, `<|im_end|>` 254,
/// `<|endoftext|>` 255.
fn folder(tag: &str, decoder: serde_json::Value) -> PathBuf {
    let dir = temp_dir(tag);
    let fixture = repo_root().join("tests/fixtures/families/qwen2");
    for f in ["model.safetensors", "config.json"] {
        std::fs::copy(fixture.join(f), dir.join(f)).unwrap();
    }
    let mut vocab = serde_json::Map::new();
    for b in 0..250u8 {
        vocab.insert(byte_char(b).to_string(), json!(b));
    }
    for (t, id) in [("he", 250), ("ll", 251), ("hell", 252)] {
        vocab.insert(t.into(), json!(id));
    }
    let added = |id: u32, content: &str| json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true});
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [added(253, "<|im_start|>"), added(254, "<|im_end|>"), added(255, "<|endoftext|>")],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": decoder,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": ["h e", "l l", "he ll"]}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let config = json!({
        "eos_token": "<|im_end|>",
        "bos_token": null,
        "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content.strip() }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    });
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    dir
}

fn compile(dir: &Path) -> Model {
    Model::compile(dir, &CompileOptions::default(), None).unwrap()
}

#[test]
fn a_safetensors_folder_with_tokenizer_json_runs_text() {
    let dir = folder("tokenizer-json", json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}));
    let m = compile(&dir);
    let tok = m.tokenizer().unwrap();
    // Merges engaged: `hell` is one id, then `o`; a space is `Ġ` (byte 32).
    assert_eq!(m.encode("hello").unwrap(), vec![252, b'o' as u32]);
    assert_eq!(m.encode("hello hello").unwrap(), vec![252, 111, 32, 252, 111]);
    assert_eq!(m.decode(&[252, 111, 32, 252, 111]).unwrap(), "hello hello");
    // `<|im_end|>` (eos in the config) and `<|endoftext|>` (by its text).
    assert_eq!(m.plan().model.stop_ids, vec![254, 255]);
    assert!(!tok.add_bos);
    let ids = m.chat_prompt(&[Message::system(" be brief "), Message::user("hello")], &ChatOptions::default()).unwrap();
    let text = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n";
    assert_eq!(m.decode(&ids).unwrap(), text);
    assert_eq!(ids[0], 253, "special tokens in the template are parsed");
    assert_eq!(ids, m.encode(text).unwrap());
    // Control tokens are hidden in streamed text unless asked.
    let mut d = graphc::Detokenizer::new(tok, false, &[]);
    let shown: String = [252, 111, 254].iter().map(|&t| d.push(t).text).collect();
    assert_eq!(shown, "hello");
    let mut d = graphc::Detokenizer::new(tok, true, &[]);
    let shown: String = [252, 111, 254].iter().map(|&t| d.push(t).text).collect();
    assert_eq!(shown, "hello<|im_end|>");

    // The control: the same folder without tokenizer.json runs from ids only.
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let e = compile(&dir).encode("hello").unwrap_err().to_string();
    assert!(e.contains("carries no tokenizer"), "{e}");
}

#[test]
fn a_tokenizer_json_whose_decoder_graphc_lacks_is_refused_by_name() {
    let dir = folder("tokenizer-json-wordpiece", json!({"type": "WordPiece", "prefix": "##", "cleanup": true}));
    let e = Model::compile(&dir, &CompileOptions::default(), None).err().expect("refused").to_string();
    assert!(e.contains("tokenizer.json") && e.contains("decoder") && e.contains("WordPiece"), "{e}");
}
