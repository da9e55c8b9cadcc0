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
        g.g.node_weights().find_map(|n| match n.op {
            graphc_ir::Op::Norm { eps, .. } => Some(eps.to_bits()),
            _ => None,
        })
    };
    assert_eq!(eps(&g), Some(1e-5f32.to_bits()));
    assert_eq!(eps(&again), eps(&g));
    assert!(text::print(&g).contains("f32[batch*seq, past+seq]"));
}
