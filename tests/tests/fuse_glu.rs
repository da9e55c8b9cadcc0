//! `fuse_glu` (passes/src/fuse_glu.rs): `mul(act(gate), up)` → `glu`.
//! It fires once per layer on SmolLM2 and Gemma 3's gated MLPs, the fast
//! backend's `glu` kernel runs (the fused path engaged), and no arithmetic
//! changes: logits are bit-identical with the pass on and off, on the
//! reference executor and the fast backend.

use graphc::{CompileOptions, Kernels, Model, SessionOptions};
use graphc_tests::smollm2;

fn logits(model: &Model, kernels: Kernels) -> (Vec<u32>, std::collections::BTreeMap<&'static str, u64>) {
    let mut s = model.session(&SessionOptions { threads: Some(2), kernels: Some(kernels), ..Default::default() }).unwrap();
    let mut bits: Vec<u32> = s.prefill(&[1, 54, 34, 28, 46, 31]).unwrap().iter().map(|v| v.to_bits()).collect();
    for t in [42, 7] {
        bits.extend(s.decode(t).unwrap().iter().map(|v| v.to_bits()));
    }
    (bits, s.kernel_counts())
}

#[test]
fn smollm2_fuses_every_layers_glu_and_no_bit_changes() {
    let on = Model::compile(&smollm2(), &CompileOptions::default(), None).unwrap();
    assert_eq!(on.plan().passes.iter().find(|p| p.name == "fuse_glu").unwrap().rewrites, 30);
    let glus = on.graph().g.node_weights().filter(|n| matches!(n.op, graphc_ir::Op::Glu { .. })).count();
    assert_eq!(glus, 30);
    let off_opts = CompileOptions { disabled_passes: vec!["fuse_glu".into()], ..Default::default() };
    let off = Model::compile(&smollm2(), &off_opts, None).unwrap();
    assert_eq!(off.graph().g.node_weights().filter(|n| matches!(n.op, graphc_ir::Op::Glu { .. })).count(), 0);
    for kernels in [Kernels::Reference, Kernels::parse("fast").unwrap()] {
        let (a, counts) = logits(&on, kernels);
        let (b, counts_off) = logits(&off, kernels);
        assert!(a == b, "{kernels:?}: logits differ with fuse_glu off");
        if kernels != Kernels::Reference {
            assert_eq!(counts.get("glu"), Some(&(30 * 3)), "{kernels:?}: the fused kernel ran once per layer per step");
            assert_eq!(counts_off.get("glu"), None);
        }
    }
}

#[test]
fn geglu_fuses_with_no_bit_changes_on_the_gemma_fixture() {
    // GELU's tanh form takes the fast backend's vectorized path: the fused
    // kernel must use it too.
    let dir = graphc_tests::repo_root().join("tests/fixtures/families/gemma");
    let on = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    assert_eq!(on.plan().passes.iter().find(|p| p.name == "fuse_glu").unwrap().rewrites, 2);
    let off = Model::compile(&dir, &CompileOptions { disabled_passes: vec!["fuse_glu".into()], ..Default::default() }, None).unwrap();
    for isa in graphc_backends::cpu::simd::Isa::ALL.into_iter().filter(|i| i.available()) {
        let kernels = Kernels::Fast(isa);
        assert!(logits(&on, kernels).0 == logits(&off, kernels).0, "{kernels:?}: logits differ with fuse_glu off");
    }
}
