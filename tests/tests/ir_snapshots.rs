//! Golden snapshots of the IR graphc emits for SmolLM2, and the text form's
//! round trip on it (print → parse → verify → print is the identity).

use graphc::{CompileOptions, Model};
use graphc_ir::{text, verify};
use graphc_tests::smollm2;

#[test]
fn smollm2_lowered_ir_layer0_and_summary() {
    let m = Model::compile(&smollm2(), &CompileOptions::default(), None).unwrap();
    let lowered = m.lowered_graph().unwrap();
    insta::assert_snapshot!("smollm2_lowered_layer0", text::print_filtered(lowered, |l| l == 0));
    insta::assert_snapshot!("smollm2_optimized_layer0", text::print_filtered(m.graph(), |l| l == 0));
    // A GPU plan's fusion minimizes launches (`passes/src/cost.rs`): the
    // attention norm is formed by q, k and v too, the layer head is one
    // `qkv_rope` (the `attention_head` pass), and the output projection is
    // split by head into the attention (`attention_project`) with its sum
    // (`add_partials`) formed where the MLP and the down projection read
    // it: a layer is five ops, four launches.
    let opts = CompileOptions { device: Some("wgpu".into()), ..Default::default() };
    let gpu = Model::compile(&smollm2(), &opts, None).unwrap();
    insta::assert_snapshot!("smollm2_gpu_optimized_layer0", text::print_filtered(gpu.graph(), |l| l == 0));
}

#[test]
fn text_form_round_trips_on_smollm2() {
    let m = Model::compile(&smollm2(), &CompileOptions::default(), None).unwrap();
    for g in [m.lowered_graph().unwrap(), m.graph()] {
        let printed = text::print(g);
        let mut parsed = text::parse(&printed).unwrap();
        verify(&mut parsed).unwrap();
        assert_eq!(text::print(&parsed), printed);
    }
}

#[test]
fn text_form_keeps_float_bits_and_symbolic_dims() {
    // eps 1e-5 is not exactly representable: the text must carry its exact bits.
    let src = "graph \"g\" {\n  %0 = input{name=\"x\"} : f32[batch*seq, past+seq]\n  %1 = input{name=\"w\"} : f32[past+seq]\n  %2 = norm{kind=rms, eps=1e-5} %0, %1\n  %3 = output{name=\"y\"} %2\n}\n";
    let mut g = text::parse(src).unwrap();
    verify(&mut g).unwrap();
    let again = text::parse(&text::print(&g)).unwrap();
    let eps = |g: &graphc_ir::Graph| {
        g.nodes().find_map(|n| match n.op {
            graphc_ir::Op::Norm { eps, .. } => Some(eps.to_bits()),
            _ => None,
        })
    };
    assert_eq!(eps(&g), Some(1e-5f32.to_bits()));
    assert_eq!(eps(&again), eps(&g));
    assert!(text::print(&g).contains("f32[batch*seq, past+seq]"));
}

#[test]
fn dot_of_a_cache_layer_before_and_after_kv_append() {
    // The Graphviz form a reviewer looks at: a concat into the cache before,
    // a filled in-place `kv_append` after. Snapshotted on a small graph so a
    // change to the drawing is reviewed as a diff.
    let src = r#"graph "cache" {
  %0 = input{name="new"} : f32[batch, 2, seq, 4]
  %1 = input{name="q"} : f32[batch, 2, seq, 4]
  %2 = input{name="positions"} : i32[batch, seq]
  layer 0 {
    %3 = state{name="k.0"} : f32[batch, 2, past, 4]
    %4 = concat{axis=2} %3, %0
    %5 = state_out{name="k.0"} %4
    %6 = attention{n_heads=2, n_kv_heads=2, scale=0.5, causal=true} %1, %4, %4, %2
  }
  %7 = output{name="y"} %6
}
"#;
    let mut g = text::parse(src).unwrap();
    verify(&mut g).unwrap();
    let before = graphc_ir::dot::to_dot(&g, |_| true);
    graphc_passes::PassManager::default().run(&mut g, &[]).unwrap();
    let after = graphc_ir::dot::to_dot(&g, |_| true);
    assert!(before.contains("concat{axis=2}") && !before.contains("kv_append"));
    assert!(after.contains("kv_append{axis=2, cap=cap}") && after.contains("fillcolor") && !after.contains("concat"));
    insta::assert_snapshot!("dot_cache_layer_before", before);
    insta::assert_snapshot!("dot_cache_layer_after", after);
}

#[test]
fn dot_of_smollm2_layer0_shows_every_cache_rewritten() {
    let m = Model::compile(&smollm2(), &CompileOptions::default(), None).unwrap();
    let before = graphc_ir::dot::to_dot(m.lowered_graph().unwrap(), |l| l == 0);
    let after = graphc_ir::dot::to_dot(m.graph(), |l| l == 0);
    assert_eq!(before.matches("= concat{axis=2}").count(), 2, "K and V of layer 0 concatenated before");
    assert_eq!(after.matches("= kv_append{").count(), 2, "and appended in place after");
    assert!(!after.contains("= concat"));
    assert!(!after.contains("cluster_layer1"), "only layer 0 is drawn");
}
