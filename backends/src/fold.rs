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
//! scaled copy of an embedding table is never kept.

use crate::cpu::exec::FOLD_MAX_ELEMS;
use graphc_ir::{Graph, NodeId, Op};
use std::collections::{HashMap, HashSet};

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
    }
    let frontier = frontier(&constant);
    let weight_only = order.iter().copied().filter(|id| constant[id] && !is_weight(*id)).collect();
    Folding { weight_only, frontier }
}
