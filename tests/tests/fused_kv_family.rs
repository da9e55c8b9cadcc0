//! The synthetic fused-KV family (`frontends/src/families/fused_kv.rs`),
//! lowered from a generated safetensors checkpoint: one latent read as both
//! K and V through two identical `narrow().contiguous()` views. On its plan
//! the K/V alias dedupe leaves one cache per layer (half the buffers and half
//! the KV bytes per token) and changes no arithmetic: logits with the pass on
//! and off are equal on bit patterns, for one sequence and for a ragged batch
//! of three whose rows each equal their own run.
//!
//! Guard: `fused_kv_plan_keeps_one_cache_per_layer` fails with
//! `GRAPHC_DISABLE_PASSES=kv_alias`.

use graphc::{CompileOptions, Kernels, Model, SessionOptions};
use graphc_backends::cpu::simd::Isa;
use graphc_tests::{fused_kv_checkpoint, temp_dir};

fn compile(tag: &str, disabled: &[&str]) -> Model {
    let dir = fused_kv_checkpoint(&temp_dir(tag));
    let opts = CompileOptions { disabled_passes: graphc_tests::disabled_passes(disabled), ..Default::default() };
    Model::compile(&dir, &opts, None).unwrap()
}

fn rewrites(m: &Model, pass: &str) -> u64 {
    m.plan().passes.iter().find(|p| p.name == pass).unwrap().rewrites
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A prefill then greedy decode steps; every step's logits.
fn run(m: &Model, kernels: Kernels, prompt: &[u32], steps: usize) -> Vec<Vec<f32>> {
    let mut s = m.session(&SessionOptions { threads: Some(2), kernels: Some(kernels), ..Default::default() }).unwrap();
    let mut out = vec![s.prefill(prompt).unwrap()];
    for _ in 1..steps {
        let t = graphc::sampling::argmax(out.last().unwrap());
        out.push(s.decode(t).unwrap());
    }
    out
}

const PROMPTS: [&[u32]; 3] = [&[5, 17, 3, 60, 2, 9, 41], &[7, 7, 30], &[1, 2, 3, 4, 5]];

#[test]
fn fused_kv_plan_keeps_one_cache_per_layer() {
    let on = compile("fkv-on", &[]);
    let off = compile("fkv-off", &["kv_alias"]);
    assert_eq!(on.plan().family, "graphc_fused_kv");
    // Per layer: the V-side narrow and contiguous merge into the K side's, and the V cache into the K cache.
    assert_eq!(rewrites(&on, "kv_alias"), 2 * 3);
    assert_eq!(rewrites(&off, "kv_alias"), 0);
    let (a, b) = (&on.plan().kv_cache, &off.plan().kv_cache);
    assert_eq!((a.caches, b.caches), (2, 4), "one cache per layer instead of K and V");
    // 2 layers x 1 head x 8 dims x 4 bytes, against twice that.
    assert_eq!((a.bytes_per_token, b.bytes_per_token), (64, 128), "KV bytes per token halved");
    // The remaining cache is still appended in place.
    assert_eq!(rewrites(&on, "kv_append"), 2);
    assert_eq!(rewrites(&off, "kv_append"), 4);
}

#[test]
fn fused_kv_logits_are_bit_identical_with_the_alias_dedupe_on_and_off() {
    let (on, off) = (compile("fkv-bits-on", &[]), compile("fkv-bits-off", &["kv_alias"]));
    for kernels in [Kernels::Reference, Kernels::Fast(Isa::best())] {
        let (a, b) = (run(&on, kernels, PROMPTS[0], 6), run(&off, kernels, PROMPTS[0], 6));
        for (step, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(bits(x), bits(y), "{} step {step}", kernels.name());
        }
        // Not vacuous: the logits move from step to step.
        assert_ne!(bits(&a[0]), bits(&a[1]));
    }
}

#[test]
fn fused_kv_ragged_batch_rows_equal_their_own_runs() {
    // With every pass on, and with each of the cache passes off.
    for disabled in [&[][..], &["kv_alias"][..], &["kv_append"][..]] {
        let m = compile(&format!("fkv-ragged-{}", disabled.join("-")), disabled);
        let steps = 4;
        let alone: Vec<_> = PROMPTS.iter().map(|p| run(&m, Kernels::Reference, p, steps)).collect();
        let mut s = m.batch_session(3, &SessionOptions { threads: Some(2), kernels: Some(Kernels::Reference), ..Default::default() }).unwrap();
        let mut logits = s.prefill_rows(&PROMPTS).unwrap();
        for step in 0..steps {
            for (row, (got, own)) in logits.iter().zip(&alone).enumerate() {
                assert_eq!(bits(got), bits(&own[step]), "{disabled:?} row {row} step {step}");
            }
            let next: Vec<u32> = logits.iter().map(|l| graphc::sampling::argmax(l)).collect();
            logits = s.decode_rows(&next).unwrap();
        }
        // The control: the rows are different sequences, so their logits differ.
        assert_ne!(bits(&alone[0][0]), bits(&alone[1][0]));
    }
}

#[test]
fn fused_kv_checkpoint_errors_name_the_file_and_key() {
    let dir = fused_kv_checkpoint(&temp_dir("fkv-bad"));
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("head_dim");
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let e = Model::compile(&dir, &CompileOptions::default(), None).err().unwrap().to_string();
    assert!(e.contains("missing key `head_dim`") && e.contains("config.json"), "{e}");
    std::fs::remove_file(dir.join("config.json")).unwrap();
    let e = Model::compile(&dir, &CompileOptions::default(), None).err().unwrap().to_string();
    assert!(e.contains("cannot read the checkpoint's config") && e.contains("config.json"), "{e}");
    // No tokenizer: text is refused with a clear message, ids work.
    let m = compile("fkv-notok", &[]);
    let e = m.encode("hello").unwrap_err().to_string();
    assert!(e.contains("carries no tokenizer"), "{e}");
}

#[test]
fn fused_kv_ir_snapshots_lowered_and_optimized() {
    // What the alias dedupe does, as a reviewer reads it: lowered, two views
    // and two caches per layer; optimized, one view, one cache appended in
    // place, and attention reading it as both K and V.
    let m = compile("fkv-snap", &[]);
    insta::assert_snapshot!("fused_kv_lowered_layer0", graphc_ir::text::print_filtered(m.lowered_graph().unwrap(), |l| l == 0));
    insta::assert_snapshot!("fused_kv_optimized_layer0", graphc_ir::text::print_filtered(m.graph(), |l| l == 0));
}
