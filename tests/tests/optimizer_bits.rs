//! The fusion rules change no arithmetic: on every family fixture and the
//! three real checkpoints, logits with the `fuse` pass (and `moe_dispatch`,
//! whose op is a fused one too) on are the logits with them off, bit for bit (a prefill and two decode steps), on the fast
//! backend and, for the fixtures, on the reference executor too. The test
//! also asserts that the rules fired where the family has something to
//! fuse, so the comparison is not between two identical graphs.

use graphc::{CompileOptions, Kernels, Model, SessionOptions};

fn logit_bits(model: &Model, kernels: Kernels, prompt: &[u32]) -> Vec<u32> {
    let mut s = model.session(&SessionOptions { threads: Some(2), kernels: Some(kernels), ..Default::default() }).unwrap();
    let mut bits: Vec<u32> = s.prefill(prompt).unwrap().iter().map(|v| v.to_bits()).collect();
    for t in [5, 7] {
        bits.extend(s.decode(t).unwrap().iter().map(|v| v.to_bits()));
    }
    bits
}

fn fused_nodes(model: &Model) -> usize {
    model.graph().nodes().filter(|n| n.op.is_fused()).count()
}

/// Compiles `path` with the fusing passes on and off and compares their logits' bits.
fn check(path: &std::path::Path, prompt: &[u32], kernels: &[Kernels]) -> usize {
    let on = Model::compile(path, &CompileOptions::default(), None).unwrap();
    let off =
        Model::compile(path, &CompileOptions { disabled_passes: vec!["fuse".into(), "moe_dispatch".into()], ..Default::default() }, None).unwrap();
    assert_eq!(fused_nodes(&off), 0, "{}: fused ops with the pass off", path.display());
    for &k in kernels {
        assert!(logit_bits(&on, k, prompt) == logit_bits(&off, k, prompt), "{}: {k:?}: logits differ with fuse off", path.display());
    }
    fused_nodes(&on)
}

#[test]
fn every_family_fixture_has_the_same_logit_bits_with_fusion_off() {
    let dir = graphc_tests::repo_root().join("tests/fixtures/families");
    // gpt-oss is read from its GGUF (its safetensors layout is refused).
    let checkpoint = |p: std::path::PathBuf| if p.ends_with("gpt_oss") { p.join("model.gguf") } else { p };
    let mut families: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| checkpoint(e.unwrap().path())).collect();
    families.sort();
    assert!(families.len() >= 12, "the family fixtures");
    let mut fused = vec![];
    for family in &families {
        let n = check(family, &[1, 9, 4, 2, 7], &[Kernels::Reference, Kernels::parse("fast").unwrap()]);
        fused.push((family.strip_prefix(&dir).unwrap().to_string_lossy().to_string(), n));
    }
    println!("fused ops per fixture: {fused:?}");
    // Every fixture with a gated MLP (all but phi2's plain GELU MLP) fuses it.
    for (family, n) in &fused {
        if family != "phi2" {
            assert!(*n > 0, "{family}: nothing fused, so the comparison shows nothing");
        }
    }
}

#[test]
fn real_checkpoints_have_the_same_logit_bits_with_fusion_off() {
    let fast = [Kernels::parse("fast").unwrap()];
    // CPU plans (their cost is passes over memory: a shared norm stays).
    // SmolLM2: per layer a matmul_glu and two matmul_adds (30 layers), and
    // the output head's norm_matmul.
    assert_eq!(check(&graphc_tests::smollm2(), &[1, 54, 34, 28, 46, 31], &fast), 30 * 3 + 1);
    // Gemma 3: per layer a matmul_glu, q and k norm_ropes and two norm_adds
    // (its post-norms; 18 layers), and the head.
    assert_eq!(check(&graphc_tests::model("gemma-3-270m-q4_k_m.gguf"), &[2, 818, 5279, 529, 7001, 563], &fast), 18 * 5 + 1);
    // Qwen2.5: as SmolLM2 (24 layers).
    assert_eq!(check(&graphc_tests::model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"), &[151644, 872, 198, 3838, 374, 220], &fast), 24 * 3 + 1);
}
