//! Loop-invariant sync hoisting.
//!
//! Rewrite: every `to_host` read inside the layer loop whose operand no layer
//! writes (the operand and everything it depends on lie outside every layer)
//! is replaced by one read of that operand placed before the first layer.
//! Reads with the same operand and the same checks (`nonempty`, `bound`)
//! become one node, so the checks run once too, before the loop, with it.
//! Reads of values a layer computes stay where they are.
//!
//! Legal because a `to_host` of a value nobody writes during the forward
//! returns the same bytes wherever it runs, and its checks are part of the
//! node (`Op::ToHost`), so they cannot be left behind or duplicated.
//!
//! Counts: reads removed from the layer loop (a Qwen3-Next-shaped graph with
//! 36 linear-attention layers reading the same state indices: 36, leaving 1).
//! Does not use `egg`: value identity in an SSA graph is node identity, and
//! the loop-invariance test is a reachability walk, not a rewrite system.

use crate::pass::Pass;
use graphc_ir::{Graph, NodeId, Op};
use std::collections::{BTreeMap, HashMap};

pub struct HoistSync;

/// Whether `id` and all it depends on lie outside every layer.
fn invariant(g: &Graph, id: NodeId, memo: &mut HashMap<NodeId, bool>) -> bool {
    if let Some(&v) = memo.get(&id) {
        return v;
    }
    let v = g.node(id).layer.is_none() && g.inputs(id).into_iter().all(|i| invariant(g, i, memo));
    memo.insert(id, v);
    v
}

impl Pass for HoistSync {
    fn name(&self) -> &'static str {
        "hoist_sync"
    }

    fn run(&self, g: &mut Graph) -> u64 {
        let mut memo = HashMap::new();
        // (operand, nonempty, bound) → reads inside layers, in id order.
        let mut groups: BTreeMap<(NodeId, bool, Option<u64>), Vec<NodeId>> = BTreeMap::new();
        let mut ids: Vec<NodeId> = g.node_ids().collect();
        ids.sort();
        for id in ids {
            let node = g.node(id);
            let Op::ToHost { nonempty, bound } = node.op else { continue };
            if node.layer.is_none() {
                continue;
            }
            let operand = g.inputs(id)[0];
            if invariant(g, operand, &mut memo) {
                groups.entry((operand, nonempty, bound)).or_default().push(id);
            }
        }
        let mut fired = 0;
        for ((operand, nonempty, bound), reads) in groups {
            let hoisted = g.add(Op::ToHost { nonempty, bound }, &[operand], None);
            // Printed right after its operand: before the loop.
            g.take_place(hoisted, operand);
            for r in reads {
                g.replace_uses(r, hoisted);
                g.remove(r);
                fired += 1;
            }
        }
        fired
    }
}
