//! Weight-only values, computed once (DESIGN.md: "weight-only subgraphs
//! are folded once, at load"), by every executor from the same analysis:
//! the `1 + w` norm weights of Gemma's HF checkpoints (GGUF stores them
//! with the 1 added) and Qwen3-Next's `-exp(A_log)`. The CPU schedule
//! (`cpu::exec::Schedule::fold`) computes them when a session starts; the
//! GPU executor in its first step, by the same kernels, so results are bit
//! for bit what they were, and launches none of them again.
//!
//! A node is weight-only when it reads only weights, fixed-shape constants
//! and other weight-only nodes, and its own shape is fixed. The frontier is
//! what a step reads of them; a frontier value larger than
//! `FOLD_MAX_ELEMS` stays per step (its operands join the frontier), so a
//! scaled copy of an embedding table is never kept; and so does every
//! node that reads it, however small.

use graphc_ir::{Graph, NodeId, Op};
use std::collections::{HashMap, HashSet};

/// The largest weight-only value `fold` keeps (elements): folding must not
/// turn a quantized matrix into an f32 copy of it.
pub const FOLD_MAX_ELEMS: usize = 1 << 20;

pub struct Folding {
    /// Weight-only nodes (weights themselves excluded): computed once.
    pub weight_only: HashSet<NodeId>,
    /// Those a step reads: their values are kept.
    pub frontier: HashSet<NodeId>,
}

/// `order` is the graph's topological order; `operands` gives what a
/// launched node reads (on the GPU a chain root's leaves; else its
/// inputs); `launched` whether a node runs on its own (not inside a GPU
/// elementwise chain).
pub fn plan(graph: &Graph, order: &[NodeId], operands: &dyn Fn(NodeId) -> Vec<NodeId>, launched: &dyn Fn(NodeId) -> bool) -> Folding {
    let fixed = |id: NodeId| graph.node(id).ty.as_ref().is_some_and(|t| t.shape.iter().all(|d| d.as_const().is_some()));
    let elems = |id: NodeId| graph.node(id).ty.as_ref().map_or(0, |t| t.shape.iter().filter_map(|d| d.as_const()).product::<i64>() as usize);
    let mut constant: HashMap<NodeId, bool> = HashMap::new();
    for &id in order {
        let node = graph.node(id);
        let c = match &node.op {
            Op::Weight { .. } => true,
            Op::Const { .. } => fixed(id),
            Op::Input { .. } | Op::State { .. } | Op::ToHost { .. } | Op::KvAppend { .. } | Op::Output { .. } | Op::StateOut { .. } => false,
            _ => {
                let inputs = graph.inputs(id);
                !inputs.is_empty() && inputs.iter().all(|i| constant[i]) && fixed(id)
            }
        };
        constant.insert(id, c);
    }
    let is_weight = |id: NodeId| matches!(graph.node(id).op, Op::Weight { .. });
    // What steps read of the folded values: operands of launched nodes that
    // are not folded, and what outputs and states take.
    let frontier = |constant: &HashMap<NodeId, bool>| -> HashSet<NodeId> {
        let mut f = HashSet::new();
        for &id in order {
            if constant[&id] {
                continue;
            }
            let reads = match &graph.node(id).op {
                Op::Output { .. } | Op::StateOut { .. } | Op::Reshape { .. } | Op::ToHost { .. } => graph.inputs(id),
                _ if launched(id) => operands(id),
                _ => vec![],
            };
            f.extend(reads.into_iter().filter(|r| constant[r] && !is_weight(*r)));
        }
        f
    };
    loop {
        let big: Vec<NodeId> = frontier(&constant).into_iter().filter(|&id| elems(id) > FOLD_MAX_ELEMS).collect();
        if big.is_empty() {
            break;
        }
        for id in big {
            constant.insert(id, false);
        }
        // What read an unkept value runs per step too: folding it would
        // need the value the fold no longer computes.
        for &id in order {
            if constant[&id] && graph.inputs(id).iter().any(|i| !constant[i]) {
                constant.insert(id, false);
            }
        }
    }
    let frontier = frontier(&constant);
    let weight_only = order.iter().copied().filter(|id| constant[id] && !is_weight(*id)).collect();
    Folding { weight_only, frontier }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::exec::{run_scheduled, Schedule};
    use crate::cpu::reference::Reference;
    use crate::tensor::{Tensor, WeightRef, WeightSource};
    use graphc_ir::DType;

    /// A scaled embedding table too big to keep (rows × cols >
    /// `FOLD_MAX_ELEMS`), read per step by a gather and, once reduced to
    /// one number per row, by a small node that alone would be
    /// weight-only. The small node must then run per step too: folding it
    /// would need the big value the fold no longer computes.
    const ROWS: usize = 2048;
    const COLS: usize = 1024;
    fn graph() -> Graph {
        let src = format!(
            r#"graph "big_scaled_table" {{
  %0 = input{{name="ids"}} : i32[seq]
  %1 = weight{{name="table"}} : f32[{ROWS}, {COLS}]
  %2 = const{{value=0.5}} : f32[1]
  %3 = mul %1, %2
  %4 = gather %3, %0
  %5 = reduce_sum{{axis=1}} %3
  %6 = output{{name="rows"}} %4
  %7 = output{{name="row_sums"}} %5
}}"#
        );
        let mut graph = graphc_ir::text::parse(&src).unwrap();
        graphc_ir::verify::verify(&mut graph).unwrap();
        graph
    }

    struct Table(Vec<u8>, Vec<usize>);
    impl WeightSource for Table {
        fn weight(&self, name: &str) -> Option<WeightRef<'_>> {
            (name == "table").then_some(WeightRef { dtype: DType::F32, shape: &self.1, bytes: &self.0 })
        }
    }

    #[test]
    fn a_value_read_from_an_unkept_big_value_is_not_folded() {
        const { assert!(ROWS * COLS > FOLD_MAX_ELEMS, "the table must be too big to keep") };
        let graph = graph();
        let order = graph.topo_order().unwrap();
        let folding = plan(&graph, &order, &|id| graph.inputs(id), &|_| true);
        // Every folded node's operands are weights or folded themselves.
        for &id in &folding.weight_only {
            for i in graph.inputs(id) {
                let weight = matches!(graph.node(i).op, Op::Weight { .. } | Op::Const { .. });
                assert!(weight || folding.weight_only.contains(&i), "{id:?} is folded but reads {i:?}, which is not");
            }
        }
        assert!(folding.frontier.iter().all(|&id| elems_of(&graph, id) <= FOLD_MAX_ELEMS));

        let values: Vec<f32> = (0..ROWS * COLS).map(|i| ((i % 977) as f32 - 488.0) / 97.0).collect();
        let table = Table(values.iter().flat_map(|v| v.to_le_bytes()).collect(), vec![ROWS, COLS]);
        let inputs = HashMap::from([("ids".to_string(), Tensor::i32(vec![3], vec![5, 0, 2047]))]);
        let plain = run_scheduled(&Schedule::new(&graph).unwrap(), &Reference, &graph, &inputs, HashMap::new(), &table).unwrap();
        let mut folded = Schedule::new(&graph).unwrap();
        folded.fold(&graph, &Reference, &table).unwrap();
        let run = run_scheduled(&folded, &Reference, &graph, &inputs, HashMap::new(), &table).unwrap();
        for name in ["rows", "row_sums"] {
            let (a, b) = (plain.outputs[name].as_f32().unwrap(), run.outputs[name].as_f32().unwrap());
            assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "`{name}` differs when folded");
        }
        // Row 5's sum, by hand: the run computed what the graph says.
        let want: f32 = values[5 * COLS..6 * COLS].iter().map(|v| v * 0.5).sum();
        assert!((run.outputs["row_sums"].as_f32().unwrap()[5] - want).abs() < 1e-3);
    }

    fn elems_of(graph: &Graph, id: NodeId) -> usize {
        graph.node(id).ty.as_ref().map_or(0, |t| t.shape.iter().filter_map(|d| d.as_const()).product::<i64>() as usize)
    }
}
