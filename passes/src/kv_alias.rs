//! Aliased K/V dedupe.
//!
//! Rewrite, in two steps:
//! 1. Views and copies (`narrow`, `reshape`, `permute`, `contiguous`) with
//!    the same attributes of the same operand are one value: the later node
//!    is replaced by the earlier, repeatedly, so two identical
//!    `narrow().contiguous()` chains become one chain.
//! 2. Two caches extended by the *same* value — `concat(state_a, x)` and
//!    `concat(state_b, x)` along the same axis, with `state_a` and `state_b`
//!    of one type — are one cache: `state_b`, its concat and its
//!    `state_out` go, and every reader of B's cache reads A's.
//!
//! Legal because both steps merge only values equal by construction (same op,
//! same attributes, same operand; a cache that starts empty and is extended
//! by the same rows every step). Tensors that merely hold equal numbers are
//! never merged: distinct K and V projections stay distinct.
//!
//! Counts: nodes merged in step 1 plus caches merged in step 2 (a fused-KV
//! layer: its V-side view chain and its V cache).
//! Runs before `kv_append`, so the one remaining cache is the one appended in place.
//! Does not use `egg`: hash-consing of a few view ops over an SSA graph is a
//! map lookup; an e-graph would add saturation limits for no extra power here.

use crate::pass::Pass;
use graphc_ir::{Graph, NodeId, Op};
use std::collections::HashMap;

pub struct KvAlias;

fn view_key(g: &Graph, id: NodeId) -> Option<String> {
    let op = &g.node(id).op;
    matches!(op, Op::Narrow { .. } | Op::Reshape { .. } | Op::Permute { .. } | Op::Contiguous).then(|| format!("{op:?}|{:?}", g.inputs(id)))
}

fn merge_views(g: &mut Graph) -> u64 {
    let mut merged = 0;
    loop {
        let mut ids: Vec<NodeId> = g.node_ids().collect();
        ids.sort();
        let mut seen: HashMap<String, NodeId> = HashMap::new();
        let mut changed = false;
        for id in ids {
            let Some(key) = view_key(g, id) else { continue };
            match seen.get(&key) {
                Some(&first) => {
                    g.replace_uses(id, first);
                    g.remove(id);
                    merged += 1;
                    changed = true;
                }
                None => {
                    seen.insert(key, id);
                }
            }
        }
        if !changed {
            return merged;
        }
    }
}

/// `(concat, state_out)` of a state extended by concat, or None.
fn cache_site(g: &Graph, state: NodeId) -> Option<(NodeId, usize, NodeId, NodeId)> {
    let [concat] = g.users(state)[..] else { return None };
    let Op::Concat { axis } = g.node(concat).op else { return None };
    let ins = g.inputs(concat);
    if ins.len() != 2 || ins[0] != state {
        return None;
    }
    let out = g.users(concat).into_iter().find(|&u| matches!(g.node(u).op, Op::StateOut { .. }))?;
    Some((concat, axis, ins[1], out))
}

fn merge_caches(g: &mut Graph) -> u64 {
    let mut states: Vec<NodeId> = g.node_ids().filter(|&n| matches!(g.node(n).op, Op::State { .. })).collect();
    states.sort();
    let mut by_new: HashMap<(NodeId, usize, String), NodeId> = HashMap::new();
    let mut merged = 0;
    for s in states {
        let Some((concat, axis, new, out)) = cache_site(g, s) else { continue };
        let Op::State { ty, .. } = &g.node(s).op else { continue };
        let key = (new, axis, format!("{ty:?}"));
        match by_new.get(&key) {
            Some(&kept_concat) => {
                g.replace_uses(concat, kept_concat);
                // The B cache's state_out now reads A's cache: drop it, its concat and its state.
                g.remove(out);
                g.remove(concat);
                g.remove(s);
                merged += 1;
            }
            None => {
                by_new.insert(key, concat);
            }
        }
    }
    merged
}

impl Pass for KvAlias {
    fn name(&self) -> &'static str {
        "kv_alias"
    }

    fn run(&self, g: &mut Graph) -> u64 {
        merge_views(g) + merge_caches(g)
    }
}
