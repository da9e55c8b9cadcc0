//! No silent wrong answers (`frontends/src/rules.rs`): every family refuses
//! a checkpoint with a tensor it would not read, and each math-relevant
//! key or value it does not implement, naming the tensor or key and the
//! family; corrupt files the format allows to parse are refused too.
//!
//! Each checkpoint here is a working one (the parity fixtures, the tiny
//! llama GGUF) with one thing added, so the refusal is that thing's.

use graphc::{CompileOptions, Model};
use graphc_frontends::gguf::MetaValue;
use graphc_frontends::GgufFile;
use graphc_tests::{temp_dir, GgufWriter, Meta};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn fixture(family: &str) -> PathBuf {
    graphc_tests::repo_root().join("tests/fixtures/families").join(family)
}

/// The safetensors fixtures (folder name, the family named in errors).
const SAFETENSORS: &[(&str, &str)] = &[
    ("llama3", "llama"),
    ("mixtral", "mixtral"),
    ("ministral3", "ministral3"),
    ("smollm3", "smollm3"),
    ("granite", "granite"),
    ("qwen2", "qwen2"),
    ("qwen2_tied", "qwen2"),
    ("qwen2_moe", "qwen2_moe"),
    ("olmo2", "olmo2"),
    ("olmo3", "olmo3"),
    ("glm4", "glm4"),
    ("lfm2", "lfm2"),
    ("ernie4_5", "ernie4_5"),
    ("qwen3", "qwen3"),
    ("qwen3_moe", "qwen3_moe"),
    ("qwen3_next", "qwen3_next"),
    ("qwen3_5", "qwen3_5_text"),
    ("qwen3_5_moe", "qwen3_5_moe_text"),
    ("gemma", "gemma"),
    ("gemma2", "gemma2"),
    ("gemma3_text", "gemma3_text"),
    ("gemma4", "gemma4_text"),
    ("gemma4_moe", "gemma4_text"),
    ("phi2", "phi"),
    ("phi3", "phi3"),
    ("phi3_longrope", "phi3"),
    ("phi4_mini", "phi3"),
    ("phimoe", "phimoe"),
];

/// A session limit every fixture's context holds (Ministral 3's is capped at 8),
/// so that a refusal is the checkpoint's, never the limit's.
const MAX_SEQ: Option<usize> = Some(8);

fn compile_err(path: &Path) -> String {
    match Model::compile(path, &CompileOptions { max_seq: MAX_SEQ, ..Default::default() }, None) {
        Ok(_) => panic!("{} compiled; it should have been refused", path.display()),
        Err(e) => e.to_string(),
    }
}

fn compiles(path: &Path) -> Model {
    Model::compile(path, &CompileOptions { max_seq: MAX_SEQ, ..Default::default() }, None).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A copy of a safetensors fixture with `edit` applied to its config and
/// `extra` (name, f32 values) appended to its tensors.
fn safetensors_copy(family: &str, tag: &str, edit: impl Fn(&mut serde_json::Map<String, Value>), extra: Option<(&str, usize)>) -> PathBuf {
    let src = fixture(family);
    let dir = temp_dir(&format!("refuse-{family}-{tag}"));
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit(config.as_object_mut().unwrap());
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let out = match extra {
        None => bytes,
        Some((name, n)) => {
            // Header: u64 length, JSON; then the data. Append one f32 tensor.
            let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            let mut header: Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
            let data = &bytes[8 + len..];
            header[name] = json!({"dtype": "F32", "shape": [n], "data_offsets": [data.len(), data.len() + 4 * n]});
            let text = serde_json::to_vec(&header).unwrap();
            let mut out = (text.len() as u64).to_le_bytes().to_vec();
            out.extend_from_slice(&text);
            out.extend_from_slice(data);
            out.extend(std::iter::repeat_n(0u8, 4 * n));
            out
        }
    };
    std::fs::write(dir.join("model.safetensors"), out).unwrap();
    dir
}

/// A GGUF (every tensor f32, as the fixtures are) as a writer, to copy it
/// with changes.
fn gguf_writer(path: &Path) -> GgufWriter {
    let g = GgufFile::open(path).unwrap();
    let mut w = GgufWriter::default();
    for (k, v) in &g.metadata {
        let meta = match v {
            MetaValue::Str(s) => Meta::Str(s.clone()),
            MetaValue::Bool(b) => Meta::Bool(*b),
            MetaValue::F32(f) => Meta::F32(*f),
            MetaValue::F64(f) => Meta::F32(*f as f32),
            MetaValue::Array(a) if a.iter().all(|x| x.as_str().is_some()) => {
                Meta::StrArray(a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
            }
            MetaValue::Array(a) if a.iter().all(|x| matches!(x, MetaValue::Bool(_))) => {
                Meta::BoolArray(a.iter().map(|x| matches!(x, MetaValue::Bool(true))).collect())
            }
            MetaValue::Array(a) => Meta::I32Array(a.iter().map(|x| x.as_u64().unwrap() as i32).collect()),
            other => Meta::U32(other.as_u64().unwrap() as u32),
        };
        w.meta.push((k.clone(), meta));
    }
    for t in &g.tensors {
        // The fixtures' GGUFs are f32 but for gpt-oss's MXFP4 experts.
        let ggml_type = match t.dtype {
            graphc_ir::DType::F32 => 0,
            graphc_ir::DType::MXFP4 => 39,
            other => panic!("{}: {other}", t.name),
        };
        w.tensors.push((t.name.clone(), t.shape.iter().map(|&d| d as u64).collect(), ggml_type, g.tensor_bytes(t).to_vec()));
    }
    w
}

/// A copy of `w` changed by `f`.
fn with(w: &GgufWriter, f: impl FnOnce(&mut GgufWriter)) -> GgufWriter {
    let mut copy = w.clone();
    f(&mut copy);
    copy
}

/// The GGUF checkpoints: the fixtures' conversions and the tiny llama
/// (family named in errors, writer).
fn ggufs() -> Vec<(String, GgufWriter)> {
    let mut all = vec![("llama".to_string(), GgufWriter::tiny_llama())];
    // gpt-oss: GGUF only (its safetensors layout is refused).
    for dir in SAFETENSORS.iter().map(|(dir, _)| *dir).chain(["gpt_oss"]) {
        let g = fixture(dir).join("model.gguf");
        if g.exists() {
            let w = gguf_writer(&g);
            let arch = w.meta.iter().find(|(k, _)| k == "general.architecture").map(|(_, v)| match v {
                Meta::Str(s) => s.clone(),
                _ => unreachable!(),
            });
            all.push((arch.unwrap(), w));
        }
    }
    all
}

#[test]
fn every_family_refuses_a_tensor_it_would_not_read() {
    for (dir, family) in SAFETENSORS {
        // An MLP bias: no family here has one, so no rule reads it.
        let name = "model.layers.0.mlp.down_proj.bias";
        let p = safetensors_copy(dir, "extra", |_| {}, Some((name, 4)));
        let e = compile_err(&p);
        assert!(e.contains(&format!("tensor `{name}` is not read by the {family} family")), "{dir}: {e}");
        // The control: the same copy without the tensor compiles.
        compiles(&safetensors_copy(dir, "plain", |_| {}, None));
    }
    for (arch, w) in ggufs() {
        let dir = temp_dir(&format!("refuse-gguf-{arch}"));
        // A scale no GGUF family here reads.
        let name = "blk.0.ffn_down.scale";
        let p = with(&w, |w| w.tensors.push((name.into(), vec![4], 0, vec![0; 16]))).write(&dir, "extra.gguf");
        let e = compile_err(&p);
        assert!(e.contains(&format!("tensor `{name}`")) && (e.contains("is not read by") || e.contains("has no place")), "{arch}: {e}");
        compiles(&w.write(&dir, "plain.gguf"));
        println!("{arch}: {e}");
    }
}

/// Per family, config.json variants it does not implement: YaRN RoPE
/// scaling, a sliding window, a soft-cap, another activation, quantized
/// weights, a q/k LayerNorm.
#[test]
fn every_family_refuses_each_unimplemented_config_variant() {
    let variants: &[(&str, &str, Value)] = &[
        ("yarn", "rope_scaling", json!({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32})),
        ("dynamic", "rope_scaling", json!({"rope_type": "dynamic", "factor": 2.0})),
        ("softcap", "attn_logit_softcapping", json!(30.0)),
        ("final_softcap", "final_logit_softcapping", json!(30.0)),
        ("quantized", "quantization_config", json!({"quant_method": "awq", "bits": 4})),
        ("act", "hidden_act", json!("relu")),
        ("qk_layernorm", "qk_layernorm", json!(true)),
        ("mlp_bias", "mlp_bias", json!(true)),
    ];
    for (dir, family) in SAFETENSORS {
        for (tag, key, value) in variants {
            // Gemma 2 implements both soft-caps; Gemma's activation key is
            // `hidden_activation` first (a relu there is refused by it).
            if *family == "gemma2" && key.ends_with("softcapping") {
                continue;
            }
            // Gemma 4 implements the final one.
            if *family == "gemma4_text" && *key == "final_logit_softcapping" {
                continue;
            }
            // The decoders of llama, qwen2 and qwen3 implement YaRN
            // (`family_parity.rs` `qwen2_yarn_*`).
            if *tag == "yarn"
                && matches!(
                    *family,
                    "llama"
                        | "mixtral"
                        | "ministral3"
                        | "smollm3"
                        | "granite"
                        | "ernie4_5"
                        | "olmo2"
                        | "olmo3"
                        | "qwen2"
                        | "qwen2_moe"
                        | "qwen3"
                        | "qwen3_moe"
                )
            {
                continue;
            }
            let p = safetensors_copy(
                dir,
                tag,
                |c| {
                    // transformers 5's `rope_parameters` holds the base; the
                    // variant is the Hub's `rope_scaling` beside `rope_theta`.
                    if *key == "rope_scaling" {
                        if let Some(rp) = c.remove("rope_parameters") {
                            // Gemma 3's is one a layer kind: the global one's base,
                            // the local one's as `rope_local_base_freq`.
                            // (OLMo 3's sliding layers take `rope_theta` too.)
                            if let Some(local) = rp.get("sliding_attention").filter(|_| *family == "gemma3_text") {
                                c.insert("rope_local_base_freq".into(), local["rope_theta"].clone());
                            }
                            let rp = rp.get("full_attention").unwrap_or(&rp).clone();
                            c.insert("rope_theta".into(), rp["rope_theta"].clone());
                            if let Some(f) = rp.get("partial_rotary_factor") {
                                c.insert("partial_rotary_factor".into(), f.clone());
                            }
                        }
                    }
                    if *key == "hidden_act" {
                        c.remove("hidden_activation");
                    }
                    c.insert(key.to_string(), value.clone());
                },
                None,
            );
            let e = compile_err(&p);
            let named = e.contains(&format!("`{key}")) || (*key == "rope_scaling" && (e.contains("rope_type") || e.contains("RoPE scaling")));
            assert!(named, "{dir} {tag}: the error does not name `{key}`: {e}");
            assert!(e.contains(family) || e.contains("expected"), "{dir} {tag}: the error does not name the family: {e}");
        }
        // A sliding window where the family has none (Qwen's own switch for
        // the Qwen families, the window itself for the others).
        let (key, value) = match *family {
            "qwen2" | "qwen2_moe" | "qwen3" | "qwen3_moe" => ("use_sliding_window", json!(true)),
            // Implemented (`family_parity.rs` `phi3_window_*`).
            // Mixtral's window is Mistral's (`family_parity.rs` `mistral_*`).
            "gemma2" | "gemma3_text" | "gemma4_text" | "phi3" | "mixtral" | "ministral3" | "smollm3" | "olmo3" => continue,
            _ => ("sliding_window", json!(16)),
        };
        let p = safetensors_copy(
            dir,
            "window",
            |c| {
                c.insert(key.into(), value.clone());
                if key == "sliding_window" {
                    c.remove("use_sliding_window");
                }
            },
            None,
        );
        let e = compile_err(&p);
        assert!(e.contains(&format!("`{key}`")), "{dir} window: {e}");
    }
}

#[test]
fn every_gguf_family_refuses_keys_it_does_not_read() {
    for (arch, w) in ggufs() {
        let dir = temp_dir(&format!("refuse-keys-{arch}"));
        for (tag, suffix, value) in [
            ("yarn", "rope.scaling.type", Meta::Str("yarn".into())),
            ("window", "attention.sliding_window", Meta::U32(16)),
            ("softcap", "attn_logit_softcapping", Meta::F32(30.0)),
            ("experts", "expert_count", Meta::U32(8)),
            ("layernorm", "attention.layer_norm_epsilon", Meta::F32(1e-5)),
            ("partial_rope", "rope.dimension_count", Meta::U32(2)),
        ] {
            let key = format!("{arch}.{suffix}");
            // What a family implements is not a refusal.
            let implemented = matches!(
                (arch.as_str(), suffix),
                ("gemma2", "attention.sliding_window" | "attn_logit_softcapping")
                    | ("phi3", "attention.sliding_window" | "rope.dimension_count")
                    | ("phi2", "attention.layer_norm_epsilon" | "rope.dimension_count")
                    | ("qwen3next" | "qwen35" | "qwen35moe" | "glm4", "rope.dimension_count")
                    | ("qwen3moe" | "phimoe" | "qwen3next" | "qwen35moe" | "llama" | "qwen2moe" | "gemma4", "expert_count")
                    | ("llama", "rope.dimension_count")
                    | ("llama" | "smollm3" | "qwen2" | "qwen3" | "qwen3moe" | "olmo2" | "mistral3", "rope.scaling.type")
                    | ("llama" | "olmo2" | "gemma4", "attention.sliding_window")
                    | ("gpt-oss", "attention.sliding_window" | "expert_count" | "rope.scaling.type")
            );
            if implemented {
                continue;
            }
            let p = with(&w, |w| {
                w.meta.retain(|(k, _)| *k != key);
                w.meta.push((key.clone(), value.clone()));
            });
            let e = compile_err(&p.write(&dir, &format!("{tag}.gguf")));
            assert!(e.contains(&format!("`{key}`")), "{arch} {tag}: {e}");
            println!("{arch} {tag}: {}", e.lines().next().unwrap());
        }
    }
}

/// Three corrupt files the format parses: a special token past the
/// vocabulary, a zero context, a tensor offset off the file's alignment.
#[test]
fn corrupt_metadata_is_refused() {
    let dir = temp_dir("refuse-corrupt");
    let p = GgufWriter::tiny_llama().set_meta("tokenizer.ggml.bos_token_id", Meta::U32(10_000_000)).write(&dir, "bos.gguf");
    let e = compile_err(&p);
    assert!(e.contains("`tokenizer.ggml.bos_token_id` = 10000000 is past the vocabulary of 8 tokens"), "{e}");
    let p = GgufWriter::tiny_llama().set_meta("tokenizer.ggml.eos_token_id", Meta::U32(8)).write(&dir, "eos.gguf");
    let e = compile_err(&p);
    assert!(e.contains("`tokenizer.ggml.eos_token_id` = 8 is past the vocabulary of 8 tokens"), "{e}");
    let p = GgufWriter::tiny_llama().set_meta("llama.context_length", Meta::U32(0)).write(&dir, "ctx.gguf");
    let e = compile_err(&p);
    assert!(e.contains("`llama.context_length` is 0"), "{e}");
    let p = safetensors_copy(
        "qwen2",
        "ctx0",
        |c| {
            c.insert("max_position_embeddings".into(), json!(0));
        },
        None,
    );
    let e = compile_err(&p);
    assert!(e.contains("`max_position_embeddings` is 0"), "{e}");
    // The controls: the unedited tiny llama compiles.
    compiles(&GgufWriter::tiny_llama().write(&dir, "plain.gguf"));
}

/// Llama 3's `rope_freqs.weight` is read (it changes the logits), and one
/// of the wrong length is refused naming it.
#[test]
fn llama_gguf_reads_rope_freqs() {
    let dir = temp_dir("rope-freqs");
    let plain = compiles(&GgufWriter::tiny_llama().write(&dir, "plain.gguf"));
    // head_dim 4: two rotary pairs.
    let scaled = compiles(&GgufWriter::tiny_llama().f32_tensor("rope_freqs.weight", &[2], &[1.0, 8.0]).write(&dir, "freqs.gguf"));
    assert!(scaled.plan().model.facts["rope_scaling"].contains("FreqFactors"), "{:?}", scaled.plan().model.facts);
    let prompt = [3, 4, 5, 6, 7, 3, 4, 5];
    let run = |m: &Model| m.session(&Default::default()).unwrap().prefill(&prompt).unwrap();
    let (a, b) = (run(&plain), run(&scaled));
    assert!(a.iter().zip(&b).any(|(x, y)| (x - y).abs() > 1e-3), "rope_freqs changed nothing: {a:?} {b:?}");
    let e = compile_err(&GgufWriter::tiny_llama().f32_tensor("rope_freqs.weight", &[3], &[1.0, 8.0, 8.0]).write(&dir, "bad.gguf"));
    assert!(e.contains("tensor `rope_freqs.weight` has shape [3], expected [2]"), "{e}");
}

/// A tensor whose data offset is off `general.alignment` (32 here) is
/// refused, naming it; the same file with the offset on it reads.
#[test]
fn a_tensor_offset_off_the_alignment_is_refused() {
    let dir = temp_dir("refuse-align");
    let bytes = GgufWriter::tiny_llama().to_bytes();
    let g = GgufFile::from_bytes("tiny", bytes.clone()).unwrap();
    let second = &g.tensors[1];
    // Find the tensor's relative offset field in the header (a u64 after
    // its name, dims and type) and move it by 4 bytes.
    let data_start = g.tensors[0].offset;
    let rel = second.offset - data_start;
    let name_at = bytes.windows(second.name.len()).position(|w| w == second.name.as_bytes()).unwrap();
    let field = (name_at..bytes.len() - 8).find(|&i| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap()) == rel).unwrap();
    let mut shifted = bytes.clone();
    shifted[field..field + 8].copy_from_slice(&(rel + 4).to_le_bytes());
    let p = dir.join("shifted.gguf");
    std::fs::write(&p, &shifted).unwrap();
    let e = compile_err(&p);
    assert!(e.contains(&format!("tensor `{}` has data offset {}, not a multiple of `general.alignment` = 32", second.name, rel + 4)), "{e}");
    std::fs::write(&p, &bytes).unwrap();
    compiles(&p);
}

/// A byte-level BPE vocabulary whose `tokenizer.ggml.pre` graphc does not
/// split is refused naming the value (splitting it as GPT-2 would give
/// other ids); a known value compiles.
#[test]
fn an_unknown_pre_tokenizer_is_refused() {
    let dir = temp_dir("refuse-pre");
    let p = GgufWriter::tiny_llama().set_meta("tokenizer.ggml.pre", Meta::Str("chatglm-bpe".into())).write(&dir, "chatglm.gguf");
    let e = compile_err(&p);
    assert!(e.contains("`tokenizer.ggml.pre` = `chatglm-bpe` is not implemented"), "{e}");
    compiles(&GgufWriter::tiny_llama().set_meta("tokenizer.ggml.pre", Meta::Str("qwen2".into())).write(&dir, "qwen2.gguf"));
}

/// A vocabulary that asks for an EOS after every prompt is refused naming
/// the key (graphc appends none); `false` compiles.
#[test]
fn add_eos_token_is_refused() {
    let dir = temp_dir("refuse-add-eos");
    let p = GgufWriter::tiny_llama().set_meta("tokenizer.ggml.add_eos_token", Meta::Bool(true)).write(&dir, "eos.gguf");
    let e = compile_err(&p);
    assert!(e.contains("`tokenizer.ggml.add_eos_token` = true is not implemented"), "{e}");
    compiles(&GgufWriter::tiny_llama().set_meta("tokenizer.ggml.add_eos_token", Meta::Bool(false)).write(&dir, "no-eos.gguf"));
}

/// A sliding window as long as the context slides nothing, so a family
/// that has none accepts it (Phi-3.5-MoE's config and GGUF say 131072 of
/// 131072); one token shorter is refused.
#[test]
fn a_window_as_long_as_the_context_is_not_refused() {
    let context = |dir: &str| -> u64 {
        let config: Value = serde_json::from_str(&std::fs::read_to_string(fixture(dir).join("config.json")).unwrap()).unwrap();
        config["max_position_embeddings"].as_u64().unwrap()
    };
    let n = context("gemma");
    for (tag, window, refused) in [("whole", n, false), ("short", n - 1, true)] {
        let p = safetensors_copy("gemma", &format!("window-{tag}"), |c| _ = c.insert("sliding_window".into(), json!(window)), None);
        let got = Model::compile(&p, &CompileOptions { max_seq: Some(64), ..Default::default() }, None);
        assert_eq!(got.is_err(), refused, "gemma, sliding_window {window} of {n}");
    }
    let (arch, w) = ggufs().into_iter().find(|(a, _)| a == "qwen3").unwrap();
    let n = match w.meta.iter().find(|(k, _)| k == "qwen3.context_length").map(|(_, v)| v) {
        Some(Meta::U32(n)) => *n,
        _ => panic!("qwen3.context_length is not a u32"),
    };
    let dir = temp_dir("window-gguf");
    for (tag, window, refused) in [("whole", n, false), ("short", n - 1, true)] {
        let p = with(&w, |w| w.meta.push((format!("{arch}.attention.sliding_window"), Meta::U32(window)))).write(&dir, &format!("{tag}.gguf"));
        let got = Model::compile(&p, &CompileOptions { max_seq: Some(64), ..Default::default() }, None);
        assert_eq!(got.is_err(), refused, "qwen3 GGUF, attention.sliding_window {window} of {n}");
    }
}

/// A RoPE scaling factor with no scaling type (llama.cpp would take it as
/// linear) is refused by every family that reads the factor, naming both
/// keys; a factor of 1 changes nothing and is not.
#[test]
fn a_bare_rope_scaling_factor_is_refused() {
    for (arch, w) in ggufs().into_iter().filter(|(a, _)| matches!(a.as_str(), "llama" | "qwen2" | "qwen3" | "qwen3moe")) {
        let dir = temp_dir(&format!("bare-factor-{arch}"));
        for (tag, factor, refused) in [("four", 4.0, true), ("one", 1.0, false)] {
            let key = format!("{arch}.rope.scaling.factor");
            let p = with(&w, |w| {
                w.meta.retain(|(k, _)| !k.starts_with(&format!("{arch}.rope.scaling.")));
                w.meta.push((key.clone(), Meta::F32(factor)));
            })
            .write(&dir, &format!("{tag}.gguf"));
            match Model::compile(&p, &CompileOptions { max_seq: Some(64), ..Default::default() }, None) {
                Err(e) => {
                    let e = e.to_string();
                    assert!(refused, "{arch}, factor {factor}: refused: {e}");
                    assert!(e.contains(&key) && e.contains(&format!("{arch}.rope.scaling.type")), "{arch}: {e}");
                }
                Ok(_) => assert!(!refused, "{arch}, factor {factor} with no type compiled"),
            }
        }
    }
}

/// Mixtral's expert keys and tensors, held to what they must be: more
/// experts a token than there are, a stacked tensor whose experts the
/// router does not count, and one expert in both of llama.cpp's layouts.
#[test]
fn mixtral_expert_counts_and_layouts_are_checked() {
    let dir = temp_dir("refuse-mixtral");
    let w = gguf_writer(&fixture("mixtral").join("model.gguf"));
    compiles(&w.write(&dir, "plain.gguf"));
    let set = |key: &str, v: u32| with(&w, |w| w.meta.iter_mut().filter(|(k, _)| k == key).for_each(|(_, m)| *m = Meta::U32(v)));
    let e = compile_err(&set("llama.expert_used_count", 5).write(&dir, "used.gguf"));
    assert!(e.contains("`llama.expert_used_count` = 5 is not between 1 and `llama.expert_count` = 4"), "{e}");
    // Three experts counted (and routed), four stacked: the fourth would be dropped.
    let three = with(&set("llama.expert_count", 3), |w| {
        for t in w.tensors.iter_mut().filter(|t| t.0.ends_with("ffn_gate_inp.weight")) {
            t.1 = vec![3, 64];
            t.3.truncate(3 * 64 * 4);
        }
    });
    let e = compile_err(&three.write(&dir, "count.gguf"));
    assert!(e.contains("tensor `blk.0.ffn_down_exps.weight` is not read by the llama family"), "{e}");
    let e = compile_err(&set("llama.expert_count", 3).write(&dir, "count3.gguf"));
    assert!(e.contains("tensor `blk.0.ffn_gate_inp.weight` has shape [4, 64], expected [3, 64]"), "{e}");
    // Expert 0 of layer 0 both stacked and on its own.
    let split = gguf_writer(&fixture("mixtral").join("model_split_experts.gguf"));
    let one = split.tensors.iter().find(|t| t.0 == "blk.0.ffn_up.0.weight").unwrap().clone();
    let e = compile_err(&with(&w, |w| w.tensors.push(one)).write(&dir, "both.gguf"));
    assert!(e.contains("tensor `blk.0.ffn_up.0.weight` is in the file both on its own and as an expert of `blk.0.ffn_up_exps.weight`"), "{e}");
    // From config.json: no expert a token.
    let p = safetensors_copy(
        "mixtral",
        "top0",
        |c| {
            c.insert("num_experts_per_tok".into(), json!(0));
        },
        None,
    );
    let e = compile_err(&p);
    assert!(e.contains("`num_experts_per_tok` = 0 is not between 1 and `num_local_experts` = 4"), "{e}");
}

/// SmolLM3's `no_rope_layers` is read where it means something and refused
/// where it would be ignored: a llama config with a NoPE layer, and a
/// smollm3 one whose list is not one flag a layer.
#[test]
fn no_rope_layers_are_read_by_smollm3_only() {
    let p = safetensors_copy(
        "llama3",
        "nope",
        |c| {
            c.insert("no_rope_layers".into(), json!([1, 0]));
        },
        None,
    );
    let e = compile_err(&p);
    assert!(e.contains("config key `no_rope_layers` = [1,0] is not implemented by the llama family"), "{e}");
    // Every layer rotating is what llama does anyway.
    compiles(&safetensors_copy(
        "llama3",
        "all-rope",
        |c| {
            c.insert("no_rope_layers".into(), json!([1, 1]));
        },
        None,
    ));
    let p = safetensors_copy(
        "smollm3",
        "short",
        |c| {
            c.insert("no_rope_layers".into(), json!([1, 1, 0]));
        },
        None,
    );
    let e = compile_err(&p);
    assert!(e.contains("`no_rope_layers` is not a list of 4 flags"), "{e}");
}
