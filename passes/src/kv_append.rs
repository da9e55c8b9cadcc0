//! concat-into-cache → in-place `KvAppend`.
//!
//! Rewrite:
//! ```text
//! %s   = state{name=N} : f32[batch, h, past, d]
//! %all = concat{axis=A} %s, %new              # an O(context) copy per token
//! %o   = state_out{name=N} %all
//! ```
//! becomes
//! ```text
//! %s   = state{name=N} : f32[batch, h, cap, d]    # allocated once at capacity
//! %all = kv_append{axis=A, cap=cap} %s, %new, %kv_lengths
//! %o   = state_out{name=N} %all
//! ```
//! where `kv_lengths : i32[batch]` (a new graph input) is each row's current
//! length: row `b` writes its new rows at its own offset, so batch > 1 and
//! ragged batches append in place too. The stride is the per-sequence
//! capacity `cap`, independent of the current length.
//!
//! Legal when: the state feeds only this concat, as its first operand; the
//! concat is along the state's `past` axis; and every other user of the
//! concat is a causal `Attention` reading it as K or V. Causal masking
//! (key `j` visible iff `j <= position`) is what makes the rows past each
//! row's length invisible, so attention over the whole capacity reads
//! exactly what it read from the concat. Anything else keeps its concat.
//!
//! Counts: one rewrite per cache (SmolLM2: 30 layers × K and V = 60).
//! Does not use `egg`: the pattern is a fixed three-node shape anchored on a
//! named state, matched directly; there is nothing to saturate.

use crate::pass::Pass;
use graphc_ir::{DType, Dim, Graph, NodeId, Op, TensorType};

pub struct KvAppend;

/// The capacity symbol, bound at session creation to `max_seq`.
pub const CAP: &str = "cap";
/// The per-row lengths input the rewrite adds.
pub const LENGTHS_INPUT: &str = graphc_ir::io::KV_LENGTHS;

fn legal_site(g: &Graph, state: NodeId) -> Option<(NodeId, usize)> {
    let Op::State { ty, .. } = &g.node(state).op else { return None };
    let users = g.users(state);
    let [concat] = users[..] else { return None };
    let Op::Concat { axis } = g.node(concat).op else { return None };
    let ins = g.inputs(concat);
    if ins.len() != 2 || ins[0] != state || ins[1] == state {
        return None;
    }
    if ty.shape.get(axis) != Some(&Dim::sym("past")) || ty.shape.first() != Some(&Dim::sym("batch")) || axis == 0 {
        return None;
    }
    let mut writes = 0;
    for u in g.users(concat) {
        match &g.node(u).op {
            Op::StateOut { name } if Some(name) == state_name(g, state) => writes += 1,
            Op::Attention { causal: true, .. } => {
                let ai = g.inputs(u);
                if ai[0] == concat || ai[3] == concat {
                    return None;
                }
            }
            _ => return None,
        }
    }
    (writes == 1).then_some((concat, axis))
}

fn state_name(g: &Graph, n: NodeId) -> Option<&String> {
    match &g.node(n).op {
        Op::State { name, .. } => Some(name),
        _ => None,
    }
}

impl Pass for KvAppend {
    fn name(&self) -> &'static str {
        "kv_append"
    }

    fn run(&self, g: &mut Graph) -> u64 {
        let mut states: Vec<NodeId> = g.node_ids().filter(|&n| matches!(g.node(n).op, Op::State { .. })).collect();
        states.sort();
        let mut lengths: Option<NodeId> = g.find_input(LENGTHS_INPUT);
        let mut fired = 0;
        for s in states {
            let Some((concat, axis)) = legal_site(g, s) else { continue };
            let lengths = *lengths.get_or_insert_with(|| {
                let input = g.add(Op::Input { name: LENGTHS_INPUT.into(), ty: TensorType::new(DType::I32, vec![Dim::sym("batch")]) }, &[], None);
                g.take_place(input, s);
                input
            });
            let layer = g.node(concat).layer;
            let new = g.inputs(concat)[1];
            if let Op::State { ty, .. } = &mut g.node_mut(s).op {
                ty.shape[axis] = Dim::sym(CAP);
                let ty = ty.clone();
                g.node_mut(s).ty = Some(ty);
            }
            let append = g.add(Op::KvAppend { axis, cap: Dim::sym(CAP), window: None }, &[s, new, lengths], layer);
            g.take_place(append, concat);
            g.replace_uses(concat, append);
            g.remove(concat);
            fired += 1;
        }
        fired
    }
}
