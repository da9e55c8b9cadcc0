//! Loop-invariant sync hoisting on a Qwen3-Next-shaped graph: 48 layers,
//! full attention every 4th, and each of the 36 linear-attention layers
//! reading the same recurrent-state indices to the host (the per-layer
//! `to_vec1` of one real engine). The 36 reads become 1; the 12 reads of
//! values the full-attention layers compute stay; outputs are unchanged on
//! bit patterns; the bounds check still fires, before the loop.
//!
//! Guard: `hoist_sync_makes_36_reads_one` fails with the pass off
//! (`GRAPHC_DISABLE_PASSES=hoist_sync cargo test --test hoist_sync`).

use graphc_backends::cpu::reference;
use graphc_backends::Tensor;
use graphc_ir::{BinaryOp, DType, Dim, Graph, Op, TensorType, UnaryOp};
use graphc_passes::PassManager;
use graphc_tests::NoWeights;
use std::collections::HashMap;

const LAYERS: u32 = 48;
const SLOTS: u64 = 4;

/// The shape of Qwen3-Next's layer loop, reduced to what the pass sees.
fn qwen3_next_shaped() -> Graph {
    let mut g = Graph::new("qwen3_next_shaped");
    let f32t = |s: &[usize]| TensorType::new(DType::F32, s.iter().map(|&d| Dim::from(d)).collect());
    let x0 = g.add(Op::Input { name: "x".into(), ty: f32t(&[2, 8]) }, &[], None);
    let table = g.add(Op::Input { name: "recurrent".into(), ty: f32t(&[SLOTS as usize, 8]) }, &[], None);
    let idx = g.add(Op::Input { name: "state_indices".into(), ty: TensorType::new(DType::I32, vec![Dim::from(2usize)]) }, &[], None);
    let mut x = x0;
    for l in 0..LAYERS {
        let layer = Some(l);
        if l % 4 == 3 {
            // Full attention: a read of a value this layer computes (stays).
            let h = g.add(Op::Unary(UnaryOp::Tanh), &[x], layer);
            let read = g.add(Op::ToHost { nonempty: true, bound: None }, &[h], layer);
            x = g.add(Op::Binary(BinaryOp::Add), &[x, read], layer);
        } else {
            // Linear attention: reads the state indices (no layer writes them).
            let read = g.add(Op::ToHost { nonempty: true, bound: Some(SLOTS) }, &[idx], layer);
            let rows = g.add(Op::Gather, &[table, read], layer);
            let mixed = g.add(Op::Binary(BinaryOp::Mul), &[x, rows], layer);
            x = g.add(Op::Unary(UnaryOp::Tanh), &[mixed], layer);
        }
    }
    g.add(Op::Output { name: "y".into() }, &[x], None);
    graphc_ir::verify(&mut g).unwrap();
    g
}

fn to_host_reads(g: &Graph) -> (usize, usize) {
    let reads: Vec<_> = g.nodes().filter(|n| matches!(n.op, Op::ToHost { .. })).collect();
    (reads.len(), reads.iter().filter(|n| n.layer.is_some()).count())
}

fn optimized(disabled: &[&str]) -> (Graph, u64) {
    let mut g = qwen3_next_shaped();
    let disabled = graphc_tests::disabled_passes(disabled);
    let report = PassManager::default().run(&mut g, &disabled).unwrap();
    (g, report.rewrites("hoist_sync").unwrap())
}

fn run(g: &Graph, indices: [i32; 2]) -> Result<Vec<u32>, String> {
    let inputs: HashMap<String, Tensor> = [
        ("x".to_string(), Tensor::f32(vec![2, 8], (0..16).map(|i| i as f32 * 0.1 - 0.7).collect())),
        ("recurrent".to_string(), Tensor::f32(vec![4, 8], (0..32).map(|i| 1.0 + (i % 5) as f32 * 0.05).collect())),
        ("state_indices".to_string(), Tensor::i32(vec![2], indices.to_vec())),
    ]
    .into();
    let out = reference::run(g, &inputs, HashMap::new(), &NoWeights).map_err(|e| e.to_string())?;
    Ok(out.outputs["y"].as_f32().unwrap().iter().map(|v| v.to_bits()).collect())
}

#[test]
fn hoist_sync_makes_36_reads_one() {
    let before = qwen3_next_shaped();
    assert_eq!(to_host_reads(&before), (48, 48), "36 linear-attention reads + 12 per-layer reads");
    let (after, fired) = optimized(&[]);
    assert_eq!(fired, 36);
    assert_eq!(to_host_reads(&after), (13, 12), "1 hoisted read before the loop + the 12 per-layer reads");
}

#[test]
fn outputs_are_bit_identical_with_the_pass_on_and_off() {
    let (on, _) = optimized(&[]);
    let (off, fired_off) = optimized(&["hoist_sync"]);
    assert_eq!(fired_off, 0);
    assert_eq!(run(&on, [1, 3]), run(&off, [1, 3]));
    // Control: the indices matter, so equal outputs above are not vacuous.
    assert_ne!(run(&on, [1, 3]), run(&on, [0, 2]));
}

#[test]
fn the_bounds_check_moves_with_the_read() {
    let (on, _) = optimized(&[]);
    let (off, _) = optimized(&["hoist_sync"]);
    for g in [&on, &off] {
        let e = run(g, [1, 9]).unwrap_err();
        assert!(e.contains("to_host: value 9 at index 1 is outside 0..4"), "{e}");
    }
    // Hoisted, it fails at the read before layer 0, not inside a layer.
    let hoisted = on.nodes().find(|n| matches!(n.op, Op::ToHost { bound: Some(_), .. })).unwrap();
    assert_eq!(hoisted.layer, None);
}
