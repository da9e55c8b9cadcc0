//! The `norm-rope` rule (passes/src/rules/attention.rs):
//! `rope(permute(norm(x)))` → `norm_rope`. It fires on every q and k of the families with q/k norms
//! (Gemma 3 270M for real; the qwen3 and qwen3-next fixtures, the latter with
//! partial rotary and `1 + w` norm weights), the fast backend's fused kernel
//! runs (the path engaged), and no arithmetic changes: logits are
//! bit-identical with the rule on and off, on the reference executor and on
//! every instruction set this CPU has.

use graphc::{CompileOptions, Kernels, Model, SessionOptions};
use graphc_backends::cpu::simd::Isa;
use std::collections::BTreeMap;

fn run(model: &Model, kernels: Kernels, prompt: &[u32]) -> (Vec<u32>, BTreeMap<&'static str, u64>) {
    let mut s = model.session(&SessionOptions { threads: Some(2), kernels: Some(kernels), ..Default::default() }).unwrap();
    let mut bits: Vec<u32> = s.prefill(prompt).unwrap().iter().map(|v| v.to_bits()).collect();
    for t in [42, 7] {
        bits.extend(s.decode(t).unwrap().iter().map(|v| v.to_bits()));
    }
    (bits, s.kernel_counts())
}

/// How often the rule fired (each firing is kept: nothing else fuses a norm_rope).
fn fused(model: &Model) -> u64 {
    let fuse = model.plan().passes.iter().find(|p| p.name == "fuse").unwrap();
    fuse.rules.iter().find(|r| r.name == "norm-rope").unwrap().fired
}

fn check(path: &std::path::Path, rewrites: u64, prompt: &[u32], kernels: &[Kernels]) {
    let on = Model::compile(path, &CompileOptions::default(), None).unwrap();
    assert_eq!(fused(&on), rewrites, "{}", path.display());
    let in_graph = on.graph().nodes().filter(|n| matches!(n.op, graphc_ir::Op::NormRope { .. })).count();
    assert_eq!(in_graph as u64, rewrites);
    let off = Model::compile(path, &CompileOptions { disabled_passes: vec!["norm-rope".into()], ..Default::default() }, None).unwrap();
    assert_eq!(fused(&off), 0);
    for &k in kernels {
        let (a, counts) = run(&on, k, prompt);
        let (b, counts_off) = run(&off, k, prompt);
        assert!(a == b, "{}: {k:?}: logits differ with norm-rope off", path.display());
        if k != Kernels::Reference {
            // Three steps (prefill, two decodes), every fused pair each step.
            assert!(counts.get("norm_rope").copied().unwrap_or(0) >= 3 * rewrites, "{k:?}: {counts:?}");
            assert_eq!(counts_off.get("norm_rope"), None);
        }
    }
}

fn every_kernel_set() -> Vec<Kernels> {
    let mut k = vec![Kernels::Reference];
    k.extend(Isa::ALL.into_iter().filter(|i| i.available()).map(Kernels::Fast));
    k
}

#[test]
fn qwen3_fixture_fuses_q_and_k_of_every_layer_bit_identically() {
    let dir = graphc_tests::repo_root().join("tests/fixtures/families/qwen3");
    check(&dir, 4, &[1, 54, 34, 28, 46, 31, 9, 200], &every_kernel_set());
}

#[test]
fn qwen3_next_fixture_fuses_its_full_attention_layers_bit_identically() {
    // Partial rotary (rotary_dim < head_dim) and `1 + w` norm weights; the
    // linear-attention layers' q/k norms are not followed by rope.
    // One full-attention layer (layer 3 of 4): its q and k.
    let dir = graphc_tests::repo_root().join("tests/fixtures/families/qwen3_next");
    check(&dir, 2, &[1, 54, 34, 28, 46, 31, 9, 200], &every_kernel_set());
}

#[test]
fn gemma3_fuses_36_pairs_with_no_bit_changes() {
    // 18 layers, q and k each: the real checkpoint, on the default kernels.
    let path = graphc_tests::model("gemma-3-270m-q4_k_m.gguf");
    check(&path, 36, &[2, 818, 5279, 529, 7001, 563], &[Kernels::parse("fast").unwrap()]);
}
