//! Bad input gets a clear error that names what was wrong and where; never a
//! panic. One test per error class, asserting the message.

use graphc::{CompileOptions, Error, Kernels, Model, SessionOptions};
use graphc_tests::{temp_dir, GgufWriter, Meta};

fn compile_err(path: &std::path::Path) -> String {
    match Model::compile(path, &CompileOptions::default(), None) {
        Ok(_) => panic!("{} compiled, expected an error", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_tiny_checkpoint_itself_compiles_and_runs() {
    // The control for every test below: the unbroken file is fine.
    let dir = temp_dir("bad-control");
    let p = GgufWriter::tiny_llama().write(&dir, "tiny.gguf");
    let m = Model::compile(&p, &CompileOptions::default(), None).unwrap();
    let mut s = m.session(&SessionOptions::default()).unwrap();
    assert_eq!(s.prefill(&[3, 4, 5]).unwrap().len(), 8);
}

#[test]
fn truncated_gguf() {
    let dir = temp_dir("bad-trunc");
    let bytes = GgufWriter::tiny_llama().to_bytes();
    let p = dir.join("t.gguf");
    // Cut inside the tensor infos (past the counts, before the data).
    std::fs::write(&p, &bytes[..700]).unwrap();
    let e = compile_err(&p);
    assert!(e.contains("truncated"), "{e}");
    assert!(e.contains("t.gguf"), "names the file: {e}");
}

#[test]
fn wrong_magic() {
    let dir = temp_dir("bad-magic");
    let mut bytes = GgufWriter::tiny_llama().to_bytes();
    bytes[..4].copy_from_slice(b"GGML");
    let p = dir.join("m.gguf");
    std::fs::write(&p, &bytes).unwrap();
    let e = compile_err(&p);
    assert!(e.contains("not a GGUF file: wrong magic number"), "{e}");
}

#[test]
fn tensor_past_the_end_of_the_file() {
    let dir = temp_dir("bad-past");
    let bytes = GgufWriter::tiny_llama().to_bytes();
    let p = dir.join("short.gguf");
    std::fs::write(&p, &bytes[..bytes.len() - 8]).unwrap();
    let e = compile_err(&p);
    assert!(e.contains("tensor `output_norm.weight` runs past the end of the file"), "{e}");
    assert!(e.contains("> file size"), "gives the numbers: {e}");
}

#[test]
fn absurd_tensor_count_fails_fast() {
    let dir = temp_dir("bad-count");
    let mut bytes = GgufWriter::tiny_llama().to_bytes();
    bytes[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let p = dir.join("count.gguf");
    std::fs::write(&p, &bytes).unwrap();
    let e = compile_err(&p);
    assert!(e.contains("the header claims 1,152,921,504,606,846,976 tensors, more than the file can hold"), "{e}");
}

#[test]
fn unknown_architecture() {
    let dir = temp_dir("bad-arch");
    let p = GgufWriter::tiny_llama().set_meta("general.architecture", Meta::Str("mamba9".into())).write(&dir, "a.gguf");
    let e = compile_err(&p);
    assert!(e.contains("GGUF architecture `mamba9` is not supported"), "{e}");
    assert!(e.contains("graphc lowers the GGUF architectures llama, smollm3, granite, granitemoe, gemma3, qwen2, qwen2moe, qwen3, qwen3moe"), "{e}");
    // The list is what `general.architecture` says, not graphc's internal family names.
    for internal in ["graphc_fused_kv", "qwen3_moe", "`phi`", " phi,"] {
        assert!(!e.contains(internal), "{e}");
    }
}

#[test]
fn missing_metadata_key_is_named() {
    let dir = temp_dir("bad-key");
    let p = GgufWriter::tiny_llama().without_meta("llama.attention.layer_norm_rms_epsilon").write(&dir, "k.gguf");
    let e = compile_err(&p);
    assert!(e.contains("missing metadata key `llama.attention.layer_norm_rms_epsilon`"), "{e}");
}

#[test]
fn plan_from_another_format_version_is_refused() {
    let dir = temp_dir("bad-version");
    let ck = GgufWriter::tiny_llama().write(&dir, "v.gguf");
    let m = Model::compile(&ck, &CompileOptions::default(), None).unwrap();
    let plan = dir.join("v.plan");
    m.write_plan(&plan).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    v["format_version"] = 999.into();
    std::fs::write(&plan, v.to_string()).unwrap();
    let e = Model::load(&plan, None).err().expect("a plan of version 999 loaded").to_string();
    assert!(e.contains("has format version 999, this graphc reads version 1"), "{e}");
}

#[test]
fn plan_whose_checkpoint_changed_is_refused() {
    let dir = temp_dir("bad-changed");
    let ck = GgufWriter::tiny_llama().write(&dir, "c.gguf");
    let m = Model::compile(&ck, &CompileOptions::default(), None).unwrap();
    let plan = dir.join("c.plan");
    m.write_plan(&plan).unwrap();
    drop(m);
    assert!(Model::load(&plan, None).is_ok(), "control: the unchanged checkpoint loads");
    // Same size, one weight byte different.
    let mut bytes = std::fs::read(&ck).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0x40;
    std::fs::write(&ck, &bytes).unwrap();
    let e = Model::load(&plan, None).err().expect("a plan over a changed checkpoint loaded").to_string();
    assert!(e.contains("changed: checksum"), "{e}");
    assert!(e.contains("recompile the plan"), "{e}");
    // A different size is named as such.
    bytes.push(0);
    std::fs::write(&ck, &bytes).unwrap();
    let e = Model::load(&plan, None).err().unwrap().to_string();
    assert!(e.contains(&format!("it was {n} bytes at compile time and is {} now", n + 1)), "{e}");
}

#[test]
fn prompt_longer_than_max_seq_says_both_numbers() {
    let dir = temp_dir("bad-maxseq");
    let ck = GgufWriter::tiny_llama().write(&dir, "s.gguf");
    let opts = CompileOptions { max_seq: Some(4), ..Default::default() };
    let m = Model::compile(&ck, &opts, None).unwrap();
    let mut s = m.session(&SessionOptions::default()).unwrap();
    let e = s.prefill(&[3, 4, 5, 6, 7, 3]).unwrap_err().to_string();
    assert!(e.contains("6 tokens") && e.contains("exceed max_seq 4"), "{e}");
    assert!(s.prefill(&[3, 4, 5, 6]).is_ok(), "exactly max_seq fits");
    let over = CompileOptions { max_seq: Some(65), ..Default::default() };
    let e = Model::compile(&ck, &over, None).err().unwrap().to_string();
    assert!(e.contains("--max-seq 65 exceeds the checkpoint's context length 64"), "{e}");
}

#[test]
fn bad_token_ids_and_empty_prompts() {
    let dir = temp_dir("bad-tokens");
    let ck = GgufWriter::tiny_llama().write(&dir, "t.gguf");
    let m = Model::compile(&ck, &CompileOptions::default(), None).unwrap();
    let mut s = m.session(&SessionOptions::default()).unwrap();
    let e = s.prefill(&[3, 99]).unwrap_err().to_string();
    assert!(e.contains("token id 99 at position 1 is outside the vocabulary of 8"), "{e}");
    let e = s.prefill(&[]).unwrap_err();
    assert!(matches!(e, Error::Input(_)) && e.to_string().contains("empty prompt"), "{e}");
}

#[test]
fn unknown_pass_and_device_are_named() {
    let dir = temp_dir("bad-opts");
    let ck = GgufWriter::tiny_llama().write(&dir, "o.gguf");
    let opts = CompileOptions { disabled_passes: vec!["no_such_pass".into()], ..Default::default() };
    let e = Model::compile(&ck, &opts, None).err().unwrap().to_string();
    assert!(e.contains("unknown pass or rule `no_such_pass`") && e.contains("dead_code") && e.contains("matmul-glu"), "{e}");
    let opts = CompileOptions { device: Some("tpu".into()), ..Default::default() };
    let e = Model::compile(&ck, &opts, None).err().unwrap().to_string();
    assert!(e.contains("device `tpu` is not available: unknown device `tpu`; expected one of cpu, wgpu, cuda, metal"), "{e}");
    // CUDA where it cannot run (no driver, no device, an unverified
    // architecture without GRAPHC_CUDA=1, GRAPHC_CUDA=0) is refused with
    // the reason; machine resolution never picks it then.
    let opts = CompileOptions { device: Some("cuda".into()), ..Default::default() };
    match graphc_gpu::cuda_rt::device_check(&Default::default()) {
        Err(why) => {
            let e = Model::compile(&ck, &opts, None).err().unwrap().to_string();
            assert!(e.contains("device `cuda` is not available") && e.contains(&why.to_string()), "{e}");
            let resolved = Model::compile(&ck, &CompileOptions::default(), None).unwrap();
            assert_eq!(resolved.plan().options.device, "cpu");
        }
        Ok(()) => eprintln!("a CUDA device is present and enabled here"),
    }
    // Never run on real hardware: off unless the settings enable it, and saying so.
    let opts = CompileOptions { device: Some("metal".into()), ..Default::default() };
    let e = Model::compile(&ck, &opts, None).err().unwrap().to_string();
    assert!(e.contains("device `metal` is not available") && e.contains("GRAPHC_METAL=1"), "{e}");
}

/// A plan compiled for a GPU elsewhere (here: a CPU plan with its device
/// rewritten) runs on that GPU's runtime or not at all — never on the CPU in
/// its place. `metal` on Linux is refused with the reason.
#[test]
fn a_plan_for_a_device_this_machine_lacks_is_refused_not_run_on_the_cpu() {
    let tiny = || {
        graphc_frontends::Checkpoint::from_gguf(graphc_frontends::GgufFile::from_bytes("tiny.gguf", GgufWriter::tiny_llama().to_bytes()).unwrap())
            .unwrap()
    };
    let cpu = Model::compile_checkpoint(tiny(), "tiny.gguf", &CompileOptions::default(), None).unwrap();
    let mut plan = cpu.plan().clone();
    plan.options.device = "metal".into();
    let model = Model::from_plan(plan, "p.json", tiny(), None).unwrap();
    let e = model.session(&SessionOptions::default()).err().map(|e| e.to_string()).unwrap_or_default();
    if !cfg!(target_os = "macos") {
        assert!(e.contains("metal"), "a `metal` plan opened a session (or failed without naming it): {e:?}");
    }
    // (An unknown device is refused when the plan is read.)
}

/// The tiny llama with one weight of layer 1's query projection set to +inf.
fn poisoned_llama() -> GgufWriter {
    let mut w = GgufWriter::tiny_llama();
    let q = w.tensors.iter_mut().find(|t| t.0 == "blk.1.attn_q.weight").expect("the tiny llama has blk.1.attn_q");
    q.3[..4].copy_from_slice(&f32::INFINITY.to_le_bytes());
    w
}

#[test]
fn check_finite_names_the_first_node_and_layer_to_produce_nan_or_inf() {
    let dir = temp_dir("bad-finite");
    let ck = poisoned_llama().write(&dir, "inf.gguf");
    let m = Model::compile(&ck, &CompileOptions::default(), None).unwrap();
    for kernels in [Kernels::Reference, Kernels::parse("fast").unwrap()] {
        // Without the check the poison reaches the logits unannounced: what
        // the option exists to catch.
        let mut s = m.session(&SessionOptions { kernels: Some(kernels), ..Default::default() }).unwrap();
        let logits = s.prefill(&[3, 4, 5]).unwrap();
        assert!(logits.iter().any(|v| !v.is_finite()), "{kernels:?}: the poisoned weight must reach the logits");
        let opts = SessionOptions { kernels: Some(kernels), check_finite: true, ..Default::default() };
        let e = m.session(&opts).unwrap().prefill(&[3, 4, 5]).unwrap_err().to_string();
        assert!(e.contains("non-finite value") && e.contains("in layer 1"), "{kernels:?}: {e}");
        assert!(e.contains("matmul"), "{kernels:?}: names the op that produced it: {e}");
    }
    // The control: the clean checkpoint passes the check.
    let clean = GgufWriter::tiny_llama().write(&dir, "clean.gguf");
    let m = Model::compile(&clean, &CompileOptions::default(), None).unwrap();
    let opts = SessionOptions { check_finite: true, ..Default::default() };
    assert!(m.session(&opts).unwrap().prefill(&[3, 4, 5]).is_ok());
}

#[test]
fn a_plan_inconsistent_with_itself_is_refused_with_what_disagrees() {
    let dir = temp_dir("bad-plan-self");
    let ck = GgufWriter::tiny_llama().write(&dir, "p.gguf");
    let m = Model::compile(&ck, &CompileOptions::default(), None).unwrap();
    let path = dir.join("p.plan");
    m.write_plan(&path).unwrap();
    let original: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let edit = |f: &dyn Fn(&mut serde_json::Value)| -> String {
        let mut v = original.clone();
        f(&mut v);
        std::fs::write(&path, v.to_string()).unwrap();
        match Model::load(&path, None) {
            Ok(_) => panic!("the edited plan loaded"),
            Err(e) => e.to_string(),
        }
    };
    let e = edit(&|v| v["manifest"].as_array_mut().unwrap().retain(|w| w["name"] != "blk.1.ffn_down.weight"));
    assert!(e.contains("reads weight `blk.1.ffn_down.weight`, which its manifest lacks"), "{e}");
    let e = edit(&|v| v["model"]["vocab_size"] = 1_000_000.into());
    assert!(e.contains("vocabulary of 1000000") && e.contains("8"), "{e}");
    let e = edit(&|v| v["options"]["max_seq"] = (1u64 << 40).into());
    assert!(e.contains("max_seq 1099511627776 is outside 1..=64"), "{e}");
    let e = edit(&|v| v["graph"] = "graph \"x\" { %0 = bogus }".into());
    assert!(e.contains("its graph does not parse"), "{e}");
    let e = edit(&|v| v["family"] = "gemma3".into());
    assert!(e.contains("`gemma3` plan but its checkpoint is `llama`"), "{e}");
    std::fs::write(&path, original.to_string()).unwrap();
    assert!(Model::load(&path, None).is_ok(), "control: the unedited plan loads");
}

#[test]
fn a_kv_cache_bigger_than_the_machine_is_refused_not_aborted() {
    let dir = temp_dir("bad-huge-cache");
    let ck = GgufWriter::tiny_llama().set_meta("llama.context_length", Meta::U32(u32::MAX)).write(&dir, "h.gguf");
    let m = Model::compile(&ck, &CompileOptions::default(), None).unwrap();
    let e = m.batch_session(1 << 20, &SessionOptions::default()).err().expect("a 2^52-token cache was allocated").to_string();
    assert!(e.contains("needs") && e.contains("more than this machine's") && e.contains("--max-seq"), "{e}");
    // The same checkpoint with a cache that fits runs.
    let opts = CompileOptions { max_seq: Some(32), ..Default::default() };
    let m = Model::compile(&ck, &opts, None).unwrap();
    assert!(m.session(&SessionOptions::default()).unwrap().prefill(&[3, 4]).is_ok());
}

#[test]
fn quantized_rows_that_are_not_whole_blocks_are_refused_by_name() {
    // 4 rows of 8 q8_0 elements: 32 in all, one block's worth of bytes, but
    // no row is a whole 32-element block (found by the gguf fuzz target: it
    // used to pass the reader and panic in the matmul).
    let dir = temp_dir("bad-rows");
    let mut w = GgufWriter::tiny_llama();
    let t = w.tensors.iter_mut().find(|t| t.0 == "blk.0.attn_k.weight").unwrap();
    *t = ("blk.0.attn_k.weight".into(), vec![4, 8], 8, vec![0u8; 34]);
    let e = compile_err(&w.write(&dir, "rows.gguf"));
    assert!(e.contains("tensor `blk.0.attn_k.weight` is q8_0 with rows of 8 elements, not a whole number of 32-element blocks"), "{e}");
}

#[test]
fn a_tensor_of_a_type_graphc_cannot_compute_is_refused_naming_it_and_its_type() {
    // tq2_0 and tq1_0 tensors in an otherwise computable llama: the
    // reader sizes them (GGML defines them), `compile` refuses the file.
    let dir = temp_dir("bad-uncomputable");
    let p = GgufWriter::tiny_llama_with_uncomputable_types().write(&dir, "iq.gguf");
    let e = compile_err(&p);
    assert!(e.contains("tensor `blk.0.attn_extra.weight` is tq2_0 (GGML type 35), which graphc cannot compute"), "{e}");
    assert!(e.contains("iq.gguf"), "names the file: {e}");
    assert!(e.contains("graphc computes: f32, f16, q4_0"), "says what it computes: {e}");
}
