//! Sparse MoE dispatch (the `moe_dispatch` pass, CPU plans): on every MoE
//! fixture, logits with the pass on are the logits with it off (every
//! expert run on every row), bit for bit, on the fast backend and the
//! reference: a 13-token prefill (the tiled products), decode steps, a
//! ragged batch, and a batch with an idle slot. The pass fired once per
//! MoE layer, and a decode step ran `top_k` expert products a MoE layer,
//! not one per expert.

use graphc::{CompileOptions, Kernels, Model, SessionOptions};
use graphc_ir::Op;

const PROMPT: [u32; 13] = [17, 201, 3, 88, 140, 9, 254, 31, 77, 5, 120, 66, 199];

fn opts(k: Kernels) -> SessionOptions {
    SessionOptions { threads: Some(2), kernels: Some(k), ..Default::default() }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A prefill, two decode steps, and a ragged batch of three rows.
fn logit_bits(model: &Model, k: Kernels) -> Vec<u32> {
    let mut s = model.session(&opts(k)).unwrap();
    let mut out = bits(&s.prefill(&PROMPT).unwrap());
    for t in [5, 7] {
        out.extend(bits(&s.decode(t).unwrap()));
    }
    let mut batch = model.batch_session(3, &opts(k)).unwrap();
    for row in batch.prefill_rows(&[&PROMPT[..], &PROMPT[..5], &PROMPT[4..9]]).unwrap() {
        out.extend(bits(&row));
    }
    out
}

fn moe_ops(model: &Model) -> usize {
    model.graph().nodes().filter(|n| matches!(n.op, Op::MoeExperts { .. })).count()
}

#[test]
fn dispatching_experts_only_where_routed_changes_no_logit_bit() {
    let dir = graphc_tests::repo_root().join("tests/fixtures/families");
    // (checkpoint, MoE layers, experts a token).
    let cases = [
        ("qwen3_moe", 1, 2),
        ("qwen3_moe_yarn", 1, 2),
        ("mixtral", 2, 2),
        ("mixtral/model.gguf", 2, 2),
        ("phimoe", 2, 2),
        ("qwen3_next", 4, 2),
        ("gpt_oss/model.gguf", 2, 2),
    ];
    let off = CompileOptions { disabled_passes: vec!["moe_dispatch".into()], ..Default::default() };
    for (name, layers, top_k) in cases {
        let path = dir.join(name);
        let sparse = Model::compile(&path, &CompileOptions::default(), None).unwrap();
        let dense = Model::compile(&path, &off, None).unwrap();
        assert_eq!(moe_ops(&sparse), layers, "{name}: moe_experts ops");
        assert_eq!(moe_ops(&dense), 0, "{name}: moe_experts with the pass off");
        for k in [Kernels::Reference, Kernels::parse("fast").unwrap()] {
            assert!(logit_bits(&sparse, k) == logit_bits(&dense, k), "{name} {k:?}: logits differ with moe_dispatch off");
        }
        // One decode step: top_k products a MoE layer.
        let mut s = sparse.session(&opts(Kernels::parse("fast").unwrap())).unwrap();
        s.prefill(&PROMPT).unwrap();
        let before = s.kernel_counts()["moe_expert_rows"];
        s.decode(5).unwrap();
        assert_eq!(s.kernel_counts()["moe_expert_rows"] - before, (layers * top_k) as u64, "{name}: expert products in a decode step");
        println!("{name}: {layers} MoE layer(s) dispatched, the same bits as dense");
    }
}

/// A server's free slot (`forward_slots` with an empty row), and a
/// shorter row's padding in a ragged step, are left out of the routed
/// products as they are of the dense ones: the busy rows keep their bits.
#[test]
fn an_idle_slot_is_not_routed_and_the_busy_rows_keep_their_bits() {
    let path = graphc_tests::repo_root().join("tests/fixtures/families/mixtral");
    let sparse = Model::compile(&path, &CompileOptions::default(), None).unwrap();
    let off = CompileOptions { disabled_passes: vec!["moe_dispatch".into()], ..Default::default() };
    let dense = Model::compile(&path, &off, None).unwrap();
    let fast = Kernels::parse("fast").unwrap();
    let run = |model: &Model| {
        let mut batch = model.batch_session(3, &opts(fast)).unwrap();
        let mut out: Vec<u32> = batch.forward_slots(&[&PROMPT[..], &[], &PROMPT[2..8]]).unwrap().iter().flat_map(|r| bits(r)).collect();
        out.extend(batch.forward_slots(&[&[9], &[], &[4]]).unwrap().iter().flat_map(|r| bits(r)));
        (out, batch.kernel_counts())
    };
    let ((sparse_bits, counts), (dense_bits, _)) = (run(&sparse), run(&dense));
    assert!(sparse_bits == dense_bits, "the busy rows' logits differ with moe_dispatch off");
    assert!(counts.get("matmul_idle_rows_skipped").is_some_and(|&n| n > 0), "no step left the idle slot out");
    // The two busy rows' real tokens (13 and 6; the shorter row's 7
    // padding positions are not routed), then one each; 2 layers of 2
    // experts a row. The idle slot would add 14 rows, the padding 7.
    assert_eq!(counts["moe_expert_rows"], (13 + 6 + 2) * 2 * 2, "the idle slot or the padding was routed");
}

struct Weights(std::collections::HashMap<String, Vec<u8>>);

impl graphc_backends::WeightSource for Weights {
    fn weight(&self, name: &str) -> Option<graphc_backends::WeightRef<'_>> {
        const GATE_UP: [usize; 2] = [32, 64];
        const DOWN: [usize; 2] = [64, 32];
        let shape: &'static [usize] = if name.ends_with("down") { &DOWN } else { &GATE_UP };
        self.0.get(name).map(|bytes| graphc_backends::WeightRef { dtype: graphc_ir::DType::Q8_0, shape, bytes })
    }
}

/// `moe_experts` on its own, against its definition (the dense sum of the
/// pass's input form), on the reference and the fast backend at every
/// instruction set: four q8_0 experts, rows routed to 1, 2, 3 or all 4 of
/// them (three terms or more, so the order of the sum shows), 1, 3 and 13
/// rows (the row-dot and tiled paths). The fast arm ran, and computed only
/// the routed (row, expert) pairs.
#[test]
fn moe_experts_is_its_dense_sum_bit_for_bit() {
    use graphc_backends::cpu::{fast::Fast, reference, simd::Isa};
    let mut head = String::from("  %0 = input{name=\"x\"} : f32[M, 64]\n  %1 = input{name=\"w\"} : f32[M, 4]\n");
    let mut weights = std::collections::HashMap::new();
    for e in 0..4 {
        for (i, p) in ["gate", "up", "down"].iter().enumerate() {
            head.push_str(&format!("  %{} = weight{{name=\"{e}.{p}\"}} : q8_0[{}]\n", 2 + 3 * e + i, if *p == "down" { "64, 32" } else { "32, 64" }));
            weights.insert(format!("{e}.{p}"), graphc_tests::q8_0_weights(32, 64, (10 * e + i + 1) as u64));
        }
    }
    let weights = Weights(weights);
    let fused = "  %20 = moe_experts{act=silu} %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13\n  %21 = output{name=\"y\"} %20\n";
    let mut parts = String::new();
    for e in 0..4 {
        let (g, u, d) = (2 + 3 * e, 3 + 3 * e, 4 + 3 * e);
        let n = 30 + 10 * e;
        parts.push_str(&format!(
            "  %{n} = matmul_glu{{act=silu}} %0, %{g}, %{u}\n  %{} = matmul %{n}, %{d}\n  %{} = narrow{{axis=1, start={e}, len=1}} %1\n  %{} = mul %{}, %{}\n",
            n + 1,
            n + 2,
            n + 3,
            n + 1,
            n + 2
        ));
        if e > 0 {
            let acc = if e == 1 { 33 } else { 30 + 10 * (e - 1) + 4 };
            parts.push_str(&format!("  %{} = add %{acc}, %{}\n", n + 4, n + 3));
        }
    }
    parts.push_str("  %99 = output{name=\"y\"} %64\n");
    let graph = |m: usize, body: &str| {
        let mut g = graphc_ir::text::parse(&format!("graph \"g\" {{\n{}{body}}}\n", head.replace('M', &m.to_string()))).unwrap();
        graphc_ir::verify(&mut g).unwrap();
        g
    };
    for m in [1, 3, 13] {
        let x: Vec<f32> = (0..m * 64).map(|i| ((i * 7919 % 2001) as f32 / 1000.0) - 1.0).collect();
        // Row r routed to 1 + r % 4 experts, starting at expert r % 3.
        let mut w = vec![0f32; m * 4];
        let mut routed = 0;
        for r in 0..m {
            for j in 0..1 + r % 4 {
                w[r * 4 + (r % 3 + j) % 4] = 0.1 + 0.2 * j as f32 + 0.01 * r as f32;
                routed += 1;
            }
        }
        let inputs = std::collections::HashMap::from([
            ("x".to_string(), graphc_backends::Tensor::f32(vec![m, 64], x)),
            ("w".to_string(), graphc_backends::Tensor::f32(vec![m, 4], w)),
        ]);
        let (op, dense) = (graph(m, fused), graph(m, &parts));
        let y = |out: graphc_backends::cpu::exec::StepOutput| bits(out.outputs["y"].as_f32().unwrap());
        let run_ref = |g| y(reference::run(g, &inputs, Default::default(), &weights).unwrap());
        assert!(run_ref(&op) == run_ref(&dense), "reference m={m}: moe_experts differs from its dense sum");
        for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
            let fast = Fast::new(isa, 2).unwrap();
            let want = y(fast.run(&dense, &inputs, Default::default(), &weights).unwrap());
            let got = y(fast.run(&op, &inputs, Default::default(), &weights).unwrap());
            assert!(got == want, "{isa:?} m={m}: moe_experts differs from its dense sum");
            let counts = fast.kernel_counts();
            assert_eq!((counts["moe_experts"], counts["moe_expert_rows"]), (1, routed as u64), "{isa:?} m={m}: the fast arm, routed pairs only");
        }
    }
}
