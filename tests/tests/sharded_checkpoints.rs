//! Split checkpoints: sharded safetensors (`model-0000k-of-0000n.safetensors` and
//! `model.safetensors.index.json`, how the Hub ships every checkpoint past
//! a few GB: Llama 3.1 8B, Mistral 7B, Qwen2.5 7B). The fixture is the
//! llama3 family fixture saved in three shards by transformers' own
//! `save_pretrained` (`tools/make_family_fixtures.py llama3_sharded`, which
//! asserts transformers reads it back to the single file's bits), so the
//! llama3 fixture's `reference.json` is its reference.
//!
//! Opened as its folder or its index: the same plan as the single file
//! (every weight, each from its shard), the same logit bits, transformers'
//! logits and greedy tokens; a plan of it reloads against the shards and
//! is refused when one changes. An index and shards that disagree are
//! refused naming the file and tensor.
//!
//! And split GGUFs (llama.cpp's `gguf-split` layout, `PREFIX-0000k-of-0000n.gguf`,
//! how the hubs ship GGUFs past 50 GB: gpt-oss-120b, 70B models at 8 bits):
//! the llama3 fixture's GGUF split in three by gguf-py's writer
//! (`tools/make_gguf_fixtures.py llama3_split`), opened at its first file.

use graphc::{CompileOptions, Kernels, Model, SessionOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn sharded() -> PathBuf {
    graphc_tests::repo_root().join("tests/fixtures/sharded/llama3")
}

fn single() -> PathBuf {
    graphc_tests::repo_root().join("tests/fixtures/families/llama3")
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(single().join("reference.json")).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Logits at every position of each prompt, on `k`.
fn logits(model: &Model, k: Kernels, prompts: &[Vec<u32>]) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    for prompt in prompts {
        let mut s = model.session(&SessionOptions { threads: Some(2), kernels: Some(k), ..Default::default() }).unwrap();
        out.push(s.prefill(&prompt[..1]).unwrap());
        for &t in &prompt[1..] {
            out.push(s.decode(t).unwrap());
        }
    }
    out
}

/// `n` greedy tokens after `prompt`.
fn greedy(model: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = model.session(&SessionOptions { threads: Some(2), ..Default::default() }).unwrap();
    let mut l = s.prefill(prompt).unwrap();
    let mut tokens = vec![];
    for _ in 0..n {
        let t = graphc::sampling::argmax(&l);
        tokens.push(t);
        l = s.decode(t).unwrap();
    }
    tokens
}

/// A copy of the sharded fixture in a fresh folder, its index edited by `edit`.
fn copy_with_index(tag: &str, edit: impl Fn(&mut serde_json::Map<String, Value>)) -> PathBuf {
    let dir = graphc_tests::temp_dir(tag);
    for e in std::fs::read_dir(sharded()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    let index_path = dir.join("model.safetensors.index.json");
    let mut index: Value = serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    edit(index["weight_map"].as_object_mut().unwrap());
    std::fs::write(&index_path, serde_json::to_string_pretty(&index).unwrap()).unwrap();
    dir
}

/// The checkpoint files of `dir` (`.safetensors` or `.gguf`), in name order.
fn shards(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors" || e == "gguf"))
        .collect();
    files.sort();
    files
}

#[test]
fn a_sharded_checkpoint_is_its_single_file_in_three_shards() {
    let r = reference();
    let prompts: Vec<Vec<u32>> = r["prompts"].as_array().unwrap().iter().map(ids).collect();
    let files = shards(&sharded());
    assert_eq!(files.len(), 3, "the fixture's shards: {files:?}");
    assert!(!sharded().join("model.safetensors").exists(), "a sharded fixture has no single file");
    let opts = CompileOptions::default();
    let one = Model::compile(&single(), &opts, None).unwrap();
    let want_bits: Vec<u32> = logits(&one, Kernels::parse("fast").unwrap(), &prompts).into_iter().flatten().map(f32::to_bits).collect();
    for path in [sharded(), sharded().join("model.safetensors.index.json")] {
        // `Model::open` (what `graphc run` and `serve` call) tells an index from a plan.
        let model = Model::open(&path, &opts, None).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // Every weight of the single file's plan, from the shards laid one after another.
        let total: u64 = files.iter().map(|f| std::fs::metadata(f).unwrap().len()).sum();
        assert_eq!(model.plan().checkpoint.bytes, total, "{}: the checkpoint is its shards", path.display());
        let names = |m: &Model| m.plan().manifest.iter().map(|w| (w.name.clone(), w.dtype, w.shape.clone())).collect::<Vec<_>>();
        assert_eq!(names(&model), names(&one), "{}: the same weights as the single file", path.display());
        let firsts: std::collections::BTreeSet<u64> = model.plan().manifest.iter().map(|w| w.offset).collect();
        assert!(*firsts.last().unwrap() > std::fs::metadata(&files[0]).unwrap().len(), "weights read past the first shard");
        for k in [Kernels::Reference, Kernels::parse("fast").unwrap()] {
            let got = logits(&model, k, &prompts);
            let want: Vec<Vec<f32>> = r["logits"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|p| p.as_array().unwrap().iter().map(|row| row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()))
                .collect();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let d = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(d <= 1e-4, "{} {k:?}: row {i}: max |Δlogit| {d}", path.display());
            }
            if k != Kernels::Reference {
                let bits: Vec<u32> = got.into_iter().flatten().map(f32::to_bits).collect();
                assert!(bits == want_bits, "{}: logits differ from the single file's in their bits", path.display());
            }
        }
        assert_eq!(greedy(&model, &prompts[0], 16), ids(&r["greedy"]), "{}: greedy tokens", path.display());
    }
}

/// A plan compiled from the shards reloads against them (checksum over the
/// shards in order) and is refused once one shard's bytes change.
#[test]
fn a_plan_of_a_sharded_checkpoint_reloads_and_notices_a_changed_shard() {
    let dir = copy_with_index("sharded-plan", |_| {});
    let plan = dir.join("model.plan.json");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    std::fs::write(&plan, model.plan().to_json()).unwrap();
    let back = Model::load(&plan, None).unwrap();
    assert_eq!(back.plan().manifest, model.plan().manifest);
    // One byte of the last shard's last tensor changed: same size, another checksum.
    let last = shards(&dir).pop().unwrap();
    let mut bytes = std::fs::read(&last).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x40;
    std::fs::write(&last, bytes).unwrap();
    let e = Model::load(&plan, None).err().expect("a changed shard is noticed").to_string();
    assert!(e.contains("changed") && e.contains("checksum"), "{e}");
}

/// An index and shards that disagree, each refused naming the file and the
/// tensor: a shard the index names that is not there, a tensor put in a
/// shard that does not hold it, a tensor a shard holds that the index
/// leaves out (it would go unread), and a shard named by a path.
#[test]
fn an_index_that_disagrees_with_its_shards_is_refused_by_name() {
    let opts = CompileOptions::default();
    let err = |dir: &Path| Model::compile(dir, &opts, None).err().expect("refused").to_string();
    let tensor = "model.layers.1.mlp.down_proj.weight";
    let moved = |to: &'static str| {
        move |m: &mut serde_json::Map<String, Value>| {
            m.insert(tensor.into(), Value::from(to));
        }
    };

    let e = err(&copy_with_index("sharded-missing", moved("model-00009-of-00009.safetensors")));
    assert!(e.contains("model-00009-of-00009.safetensors") && e.contains(tensor) && e.contains("not beside it"), "{e}");

    let held_by = reference_shard_of(tensor);
    let other = if held_by.contains("00001") { "model-00002-of-00003.safetensors" } else { "model-00001-of-00003.safetensors" };
    let e = err(&copy_with_index("sharded-wrong", moved(other)));
    assert!(e.contains(tensor) && e.contains(&held_by) && e.contains(other), "{e}");

    let e = err(&copy_with_index("sharded-unlisted", |m| {
        m.remove(tensor);
    }));
    assert!(e.contains(tensor) && e.contains("does not list it") && e.contains(&held_by), "{e}");

    let e = err(&copy_with_index("sharded-path", moved("../model-00001-of-00003.safetensors")));
    assert!(e.contains("not a .safetensors file beside the index"), "{e}");

    // The control: the unedited copy compiles.
    assert!(Model::compile(&copy_with_index("sharded-control", |_| {}), &opts, None).is_ok());
}

/// The shard the fixture's index puts `tensor` in.
fn reference_shard_of(tensor: &str) -> String {
    let index: Value = serde_json::from_str(&std::fs::read_to_string(sharded().join("model.safetensors.index.json")).unwrap()).unwrap();
    index["weight_map"][tensor].as_str().unwrap().to_string()
}

fn split_gguf() -> PathBuf {
    graphc_tests::repo_root().join("tests/fixtures/sharded/llama3_gguf")
}

/// A split GGUF opened at its first file: every tensor of the single
/// GGUF from the three files, its plan's weights, its logits' bits, the
/// reference's greedy tokens.
#[test]
fn a_split_gguf_is_its_single_file_in_three_parts() {
    let r = reference();
    let prompts: Vec<Vec<u32>> = r["prompts"].as_array().unwrap().iter().map(ids).collect();
    let opts = CompileOptions::default();
    let one = Model::compile(&single().join("model.gguf"), &opts, None).unwrap();
    let first = split_gguf().join("model-00001-of-00003.gguf");
    let model = Model::open(&first, &opts, None).unwrap_or_else(|e| panic!("{e}"));
    let names = |m: &Model| m.plan().manifest.iter().map(|w| (w.name.clone(), w.dtype, w.shape.clone())).collect::<Vec<_>>();
    assert_eq!(names(&model), names(&one), "the same weights as the single file");
    let files = shards(&split_gguf());
    assert_eq!(files.len(), 3);
    let first_len = std::fs::metadata(&files[0]).unwrap().len();
    assert!(model.plan().manifest.iter().any(|w| w.offset > first_len), "weights read past the first file");
    assert_eq!(model.plan().checkpoint.bytes, files.iter().map(|f| std::fs::metadata(f).unwrap().len()).sum::<u64>());
    let fast = Kernels::parse("fast").unwrap();
    let bits = |m: &Model| logits(m, fast, &prompts).into_iter().flatten().map(f32::to_bits).collect::<Vec<u32>>();
    assert!(bits(&model) == bits(&one), "logits differ from the single GGUF's in their bits");
    assert_eq!(greedy(&model, &prompts[0], 16), ids(&r["greedy"]), "greedy tokens");
}

/// A split GGUF's files that do not fit together are refused naming the
/// file: a later file opened first (named: open the first), a missing
/// file, files out of order (each file's `split.no`), and a first file
/// whose `split.tensors.count` the files do not hold.
#[test]
fn split_gguf_files_that_do_not_fit_are_refused_by_name() {
    use graphc_tests::Meta;
    let opts = CompileOptions::default();
    let err = |p: &Path| Model::compile(p, &opts, None).err().expect("refused").to_string();
    let e = err(&split_gguf().join("model-00002-of-00003.gguf"));
    assert!(e.contains("split 2 of 3") && e.contains("model-00001-of-00003.gguf"), "{e}");

    let dir = graphc_tests::temp_dir("split-gguf");
    let copy = |from: &str, to: &str| std::fs::copy(split_gguf().join(from), dir.join(to)).unwrap();
    copy("model-00001-of-00003.gguf", "model-00001-of-00003.gguf");
    copy("model-00002-of-00003.gguf", "model-00002-of-00003.gguf");
    let first = dir.join("model-00001-of-00003.gguf");
    let e = err(&first);
    assert!(e.contains("model-00003-of-00003.gguf") && e.contains("cannot open"), "{e}");

    copy("model-00002-of-00003.gguf", "model-00003-of-00003.gguf");
    copy("model-00003-of-00003.gguf", "model-00002-of-00003.gguf");
    let e = err(&first);
    assert!(e.contains("model-00002-of-00003.gguf") && e.contains("is not split 2 of 3"), "{e}");

    copy("model-00002-of-00003.gguf", "model-00002-of-00003.gguf");
    copy("model-00003-of-00003.gguf", "model-00003-of-00003.gguf");
    assert!(Model::compile(&first, &opts, None).is_ok(), "the control: the files in order");
    graphc_tests::gguf_with_keys(&split_gguf().join("model-00001-of-00003.gguf"), &first, &[("split.tensors.count", Meta::U32(21))]);
    let e = err(&first);
    assert!(e.contains("`split.tensors.count` is Some(21), but the 3 files hold 22 tensors"), "{e}");
}
