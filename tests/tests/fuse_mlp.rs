//! The gated-MLP rules (passes/src/rules/mlp.rs): `mul(act(gate), up)` →
//! `glu`, then `glu(matmul(x, w_gate), matmul(x, w_up))` → `matmul_glu`.
//! Both fire once per layer on SmolLM2 and on the Gemma fixture's GeGLU,
//! the graph keeps the `matmul_glu`s, the fast backend's fused arm runs
//! (the path engaged), and no arithmetic changes: logits are bit-identical
//! with the `fuse` pass off, and with `matmul-glu` alone off (the glu
//! form), on the reference executor and the fast backend.

use graphc::{CompileOptions, Kernels, Model, SessionOptions};
use graphc_ir::Op;
use graphc_tests::smollm2;

fn logits(model: &Model, kernels: Kernels) -> (Vec<u32>, std::collections::BTreeMap<&'static str, u64>) {
    let mut s = model.session(&SessionOptions { threads: Some(2), kernels: Some(kernels), ..Default::default() }).unwrap();
    let mut bits: Vec<u32> = s.prefill(&[1, 54, 34, 28, 46, 31]).unwrap().iter().map(|v| v.to_bits()).collect();
    for t in [42, 7] {
        bits.extend(s.decode(t).unwrap().iter().map(|v| v.to_bits()));
    }
    (bits, s.kernel_counts())
}

fn count(model: &Model, pick: fn(&Op) -> bool) -> usize {
    model.graph().nodes().filter(|n| pick(&n.op)).count()
}

fn fired(model: &Model, rule: &str) -> u64 {
    let fuse = model.plan().passes.iter().find(|p| p.name == "fuse").unwrap();
    fuse.rules.iter().find(|r| r.name == rule).unwrap().fired
}

/// Compiled with the rules that fuse around the MLP (its input norm, its
/// residual add: `fuse_residual_norm.rs`) off, and those of `disabled`.
fn compile(path: &std::path::Path, disabled: &[&str]) -> Model {
    let around = ["norm-matmul", "norm-matmul-glu", "matmul-add", "matmul-add-commuted", "norm-add", "norm-add-commuted"];
    let opts = CompileOptions { disabled_passes: disabled.iter().chain(&around).map(|d| d.to_string()).collect(), ..Default::default() };
    Model::compile(path, &opts, None).unwrap()
}

#[test]
fn smollm2_fuses_every_layers_mlp_and_no_bit_changes() {
    let on = compile(&smollm2(), &[]);
    assert_eq!((fired(&on, "glu-silu"), fired(&on, "matmul-glu")), (30, 30));
    assert_eq!(on.plan().passes.iter().find(|p| p.name == "fuse").unwrap().rewrites, 30);
    assert_eq!(count(&on, |op| matches!(op, Op::MatMulGlu { act: graphc_ir::UnaryOp::Silu })), 30);
    assert_eq!(count(&on, |op| matches!(op, Op::Glu { .. })), 0, "every glu became a matmul_glu");
    let glu_only = compile(&smollm2(), &["matmul-glu"]);
    assert_eq!(count(&glu_only, |op| matches!(op, Op::Glu { .. })), 30);
    assert_eq!(count(&glu_only, |op| matches!(op, Op::MatMulGlu { .. })), 0);
    let off = compile(&smollm2(), &["fuse"]);
    assert_eq!(count(&off, |op| matches!(op, Op::Glu { .. } | Op::MatMulGlu { .. })), 0);
    for kernels in [Kernels::Reference, Kernels::parse("fast").unwrap()] {
        let (a, counts) = logits(&on, kernels);
        let (b, counts_glu) = logits(&glu_only, kernels);
        let (c, counts_off) = logits(&off, kernels);
        assert!(a == c, "{kernels:?}: logits differ with the fuse pass off");
        assert!(b == c, "{kernels:?}: logits differ with matmul-glu off");
        if kernels != Kernels::Reference {
            assert_eq!(counts.get("matmul_glu"), Some(&(30 * 3)), "{kernels:?}: the fused arm ran once per layer per step");
            assert_eq!(counts_glu.get("glu"), Some(&(30 * 3)));
            assert_eq!((counts_off.get("glu"), counts_off.get("matmul_glu")), (None, None));
        }
    }
}

#[test]
fn geglu_fuses_with_no_bit_changes_on_the_gemma_fixture() {
    // GELU's tanh form takes the fast backend's vectorized path: the fused
    // arms must use it too; the fixture's f32 weights take the reference's
    // matmul inside `matmul_glu`, as they do alone.
    let dir = graphc_tests::repo_root().join("tests/fixtures/families/gemma");
    let on = compile(&dir, &[]);
    assert_eq!((fired(&on, "glu-gelu-tanh"), fired(&on, "matmul-glu")), (2, 2));
    assert_eq!(count(&on, |op| matches!(op, Op::MatMulGlu { act: graphc_ir::UnaryOp::GeluTanh })), 2);
    let glu_only = compile(&dir, &["matmul-glu"]);
    let off = compile(&dir, &["fuse"]);
    for isa in graphc_backends::cpu::simd::Isa::ALL.into_iter().filter(|i| i.available()) {
        let kernels = Kernels::Fast(isa);
        let c = logits(&off, kernels).0;
        assert!(logits(&on, kernels).0 == c, "{kernels:?}: logits differ with the fuse pass off");
        assert!(logits(&glu_only, kernels).0 == c, "{kernels:?}: logits differ with matmul-glu off");
    }
}
