//! The text form derived from the signatures: every op is found by its
//! name, and every attribute survives print → parse.

use graphc_ir::op::{BinaryOp, ChainExpr, NormKind, Op, ReduceOp, RopeScaling, RopeStyle, UnaryOp};
use graphc_ir::signature::prototypes;
use graphc_ir::{text, DType, Graph};
use graphc_ir::{Dim, TensorType};
use std::collections::HashSet;

/// `op` printed as a one-node graph and parsed back.
fn through_text(op: &Op) -> Op {
    let mut g = Graph::new("one op");
    let id = g.add(op.clone(), &[], None);
    g.node_mut(id).ty = op.declared_type().cloned();
    let printed = text::print(&g);
    let parsed = text::parse(&printed).unwrap_or_else(|e| panic!("{printed}: {e}"));
    let op = parsed.nodes().next().unwrap().op.clone();
    op
}

#[test]
fn every_prototype_has_its_own_name_and_parses_back() {
    let mut names = HashSet::new();
    for op in prototypes() {
        let name = op.mnemonic();
        assert!(!name.is_empty(), "{op:?} states no name");
        assert!(names.insert(name.clone()), "two ops are named `{name}`");
        assert_eq!(through_text(&op), op, "`{name}`");
    }
    // Every unary, binary and reduction is its own name.
    assert!(names.contains("gelu_erf") && names.contains("min") && names.contains("reduce_mean"));
}

/// Ops whose every attribute is set away from its prototype's default (a
/// `Some`, a `true`, a non-zero), so an attribute the printer or the parser
/// dropped would come back different.
fn ops_with_every_attribute_set() -> Vec<Op> {
    let ty = TensorType::new(DType::Q4K, vec![Dim::sym("n"), Dim::konst(256)]);
    let rope = |scaling| Op::Rope { style: RopeStyle::GptJ, rotary_dim: 6, theta: 1e4, scaling };
    vec![
        Op::Input { name: "a \"quoted\"\n name".into(), ty: ty.clone() },
        Op::Weight { name: "blk.0.w".into(), ty: ty.clone() },
        Op::State { name: "k.0".into(), ty: ty.clone() },
        Op::StateOut { name: "k.0".into() },
        Op::Output { name: "logits".into() },
        Op::Const { value: -0.1, ty },
        Op::ToHost { nonempty: true, bound: Some(8) },
        Op::Reshape { shape: vec![Dim::sym("batch").mul(&Dim::sym("seq")), Dim::konst(576)] },
        Op::Permute { perm: vec![0, 2, 1, 3] },
        Op::Narrow { axis: 2, start: Dim::sym("past"), len: Dim::sym("seq").add(&Dim::konst(1)) },
        Op::Concat { axis: 3 },
        Op::Cast { dtype: DType::I32 },
        Op::Unary(UnaryOp::Softplus),
        Op::Binary(BinaryOp::Max),
        Op::Reduce { op: ReduceOp::Max, axis: 1 },
        Op::Clamp { min: Some(-1.5), max: Some(1e-7) },
        Op::Clamp { min: None, max: Some(3.0) },
        Op::Glu { act: UnaryOp::GeluTanh },
        Op::Softmax { axis: 3, softcap: Some(50.0) },
        Op::TopKMask { axis: 2, k: 2 },
        Op::SparseMixer { jitter_eps: 0.01 },
        Op::MatMulGlu { act: UnaryOp::GeluErf },
        Op::NormMatMul { eps: 1e-6 },
        Op::NormMatMulGlu { act: UnaryOp::GeluTanh, eps: 1e-5 },
        Op::Norm { kind: NormKind::Layer, eps: 1e-5 },
        Op::NormAdd { eps: 1e-6 },
        rope(RopeScaling::None),
        rope(RopeScaling::Linear { factor: 4.0 }),
        rope(RopeScaling::FreqFactors { factors: vec![1.0, 2.5, 1.0 / 3.0], attention_factor: 1.2 }),
        rope(RopeScaling::Llama3 { factor: 32.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_context: 8192 }),
        rope(RopeScaling::Yarn {
            factor: 4.0,
            original_context: 32768,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: 1.1386294,
            truncate: true,
        }),
        rope(RopeScaling::Yarn { factor: 40.0, original_context: 4096, beta_fast: 16.0, beta_slow: 2.0, attention_factor: 1.0, truncate: false }),
        rope(RopeScaling::Proportional { rotated_pairs: 2 }),
        Op::NormRope { eps: 1e-6, style: RopeStyle::Neox, rotary_dim: 64, theta: 5e5, scaling: RopeScaling::Linear { factor: 2.0 } },
        Op::Attention { n_heads: 8, n_kv_heads: 2, scale: 0.125, causal: true, window: Some(512), softcap: Some(30.0), ring: true, sinks: false },
        Op::KvAppend { axis: 2, cap: Dim::sym("cap"), window: Some(512) },
        Op::QkvRope {
            eps: Some(1e-5),
            bias: true,
            style: RopeStyle::GptJ,
            rotary_dim: 32,
            theta: 5e5,
            scaling: RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_context: 8192 },
            cap: Dim::konst(600),
            window: Some(512),
        },
        Op::NormRopeAttention {
            eps: 1e-6,
            style: RopeStyle::Neox,
            rotary_dim: 256,
            theta: 1e4,
            scaling: RopeScaling::Linear { factor: 8.0 },
            n_heads: 4,
            n_kv_heads: 1,
            scale: 0.0625,
            causal: true,
            window: Some(512),
            softcap: Some(50.0),
            ring: true,
            cap: Dim::konst(767),
        },
        Op::Result { index: 2 },
        Op::Chain {
            expr: ChainExpr::Binary(
                BinaryOp::Mul,
                Box::new(ChainExpr::Unary(
                    UnaryOp::Tanh,
                    Box::new(ChainExpr::Binary(BinaryOp::Div, Box::new(ChainExpr::Input(0)), Box::new(ChainExpr::Input(1)))),
                )),
                Box::new(ChainExpr::Input(1)),
            ),
        },
        Op::CausalConv1d { kernel: 4 },
    ]
}

#[test]
fn every_attribute_survives_the_text_form() {
    let ops = ops_with_every_attribute_set();
    for op in &ops {
        assert_eq!(&through_text(op), op);
    }
    // Each op with attributes differs from its prototype, so the list
    // checks attributes and not only names.
    for op in ops.iter().filter(|op| !matches!(op, Op::Unary(_) | Op::Binary(_) | Op::Reduce { .. } | Op::Concat { .. })) {
        let prototype = prototypes().into_iter().find(|p| p.mnemonic() == op.mnemonic()).unwrap();
        assert_ne!(&prototype, op, "`{}` is its prototype", op.mnemonic());
    }
}

#[test]
fn a_line_with_a_key_the_signature_does_not_name_is_refused() {
    let line = |attrs: &str| format!("graph \"g\" {{\n  %0 = norm{{{attrs}}}\n}}\n");
    assert!(text::parse(&line("kind=rms, eps=1e-5")).is_ok());
    let err = |attrs: &str| text::parse(&line(attrs)).unwrap_err().to_string();
    assert_eq!(err("kind=rms, eps=1e-5, bias=true"), "line 2: `norm` has no attribute `bias`");
    assert_eq!(err("kind=rms"), "line 2: `norm` needs attribute `eps`");
    assert_eq!(err("kind=group, eps=1e-5"), "line 2: `norm` attribute `kind`: unknown norm kind `group` (one of `rms`, `layer`)");
    assert_eq!(err("kind=rms, eps=small"), "line 2: `norm` attribute `eps`: cannot read `small`");
    let rope = "graph \"g\" {\n  %0 = rope{style=neox, rotary_dim=4, theta=1.0, linear_factor=2.0, llama3_factor=8.0}\n}\n";
    assert!(text::parse(rope).unwrap_err().to_string().contains("at most one of"));
    let chain = |expr: &str| text::parse(&format!("graph \"g\" {{\n  %0 = chain{{expr=\"{expr}\"}}\n}}\n")).map(|_| ()).map_err(|e| e.to_string());
    assert!(chain("mul(tanh(div(in0, in1)), in1)").is_ok());
    assert!(chain("mul(in0)").unwrap_err().contains("expected `,` after `in0`"));
    assert!(chain("pow(in0, in1)").unwrap_err().contains("`pow` is not a unary or binary op"));
    assert!(chain("tanh(in0) in1").unwrap_err().contains("unexpected `in1` at its end"));
}
