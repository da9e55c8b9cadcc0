//! `Session::set_profiling` (what `graphc bench --profile` prints): each
//! computed node of each forward is timed once, under its class (op, and
//! the type and shape of the weight it reads), and timing changes no bit.

use graphc::{Kernels, Model, SessionOptions};
use graphc_ir::{DType, Op};
use graphc_tests::smollm2;

fn run(model: &Model, kernels: Kernels, profile: bool) -> (Vec<u32>, Option<graphc_backends::cpu::exec::Profile>) {
    let mut s = model.session(&SessionOptions { threads: Some(2), kernels: Some(kernels), ..Default::default() }).unwrap();
    s.set_profiling(profile).unwrap();
    let mut bits: Vec<u32> = s.prefill(&[1, 54, 34, 28, 46, 31]).unwrap().iter().map(|v| v.to_bits()).collect();
    for t in [42, 7] {
        bits.extend(s.decode(t).unwrap().iter().map(|v| v.to_bits()));
    }
    (bits, s.profile())
}

#[test]
fn every_node_is_timed_once_a_forward_under_its_class_and_no_bit_changes() {
    let model = Model::compile(&smollm2(), &Default::default(), None).unwrap();
    let g = model.graph();
    // The graph's matmuls by weight type, counted here from the graph itself.
    let matmuls_of = |dtype: DType| {
        g.node_ids()
            .filter(|&n| g.node(n).op.is_matmul() && !matches!(g.node(n).op, Op::MatMulGlu { .. }))
            .filter(|&n| g.inputs(n).iter().any(|&i| matches!(&g.node(i).op, Op::Weight { ty, .. } if ty.dtype == dtype)))
            .count() as u64
    };
    let (q4_1, q8_0) = (matmuls_of(DType::Q4_1), matmuls_of(DType::Q8_0));
    assert_eq!((q4_1, q8_0), (30 * 5, 1), "SmolLM2: five q4_1 projections a layer (gate and up are a matmul_glu), the tied q8_0 output");
    for kernels in [Kernels::Reference, Kernels::parse("fast").unwrap()] {
        let (plain, none) = run(&model, kernels, false);
        assert!(none.is_none());
        let (timed, profile) = run(&model, kernels, true);
        assert!(plain == timed, "{kernels:?}: logits changed with profiling on");
        let p = profile.expect("profiling was on");
        assert_eq!(p.forwards, 3, "a prefill and two decode steps");
        let calls = |prefix: &str| p.classes.iter().filter(|(c, _)| c.starts_with(prefix)).map(|(_, t)| t.calls).sum::<u64>();
        // q, k and v plain matmuls; the output and down projections adding the residual.
        let q4_1_calls = calls("matmul q4_1[") + calls("matmul_add q4_1[");
        assert_eq!(q4_1_calls, 3 * q4_1, "{kernels:?}: {:#?}", p.classes.keys());
        // The output head forms the final norm (its weight a vector: no bytes or flops of its own).
        let output = &p.classes["norm_matmul f32[576] q8_0[49152, 576]"];
        assert_eq!(output.calls, 3);
        assert_eq!(output.weight_bytes, 3 * 49152 * 576 / 32 * 34, "the output matrix's q8_0 bytes, once a forward");
        // Logits of each forward's last row only: 2 · 49152 · 576 flops a forward.
        assert_eq!(output.flops, 3.0 * 2.0 * 49152.0 * 576.0);
        // The down projections: 6 prompt rows, then 1 and 1, at k = 1536.
        assert_eq!(p.classes["matmul_add q4_1[576, 1536]"].flops, 30.0 * 2.0 * (6.0 + 1.0 + 1.0) * 576.0 * 1536.0);
        // Gate and up in one op: two products of 1536 columns at k = 576, and both weights' bytes.
        let mlp = &p.classes["matmul_glu q4_1[1536, 576] q4_1[1536, 576]"];
        assert_eq!((mlp.calls, mlp.flops), (3 * 30, 30.0 * 2.0 * 2.0 * (6.0 + 1.0 + 1.0) * 1536.0 * 576.0));
        assert_eq!(mlp.weight_bytes, 3 * 30 * 2 * 1536 * 576 / 32 * 20, "both weights' q4_1 bytes, once a forward");
        assert_eq!(p.classes["attention"].flops, 0.0);
        // A gather reads rows, not its table: no bytes (no GiB/s) for it.
        assert_eq!(p.classes["gather q8_0[49152, 576]"].weight_bytes, 0);
        assert!(p.classes.values().all(|c| c.secs >= 0.0) && p.total_secs() > 0.0);
    }
}
