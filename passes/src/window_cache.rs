//! A sliding-window layer's cache at capacity → a ring of the window's size.
//!
//! Rewrite (after `kv_append`):
//! ```text
//! %s = state{name=N} : f32[batch, h, cap, d]
//! %a = kv_append{axis=2, cap=cap} %s, %new, %kv_lengths
//! %o = attention{..., window=W} %q, %a, ...
//! ```
//! becomes
//! ```text
//! %s = state{name=N} : f32[batch, h, R, d]          # R = W + step - 1 rows
//! %a = kv_append{axis=2, cap=R, window=W} %s, %new, %kv_lengths
//! %o = attention{..., window=W, ring=true} %q, %a, ...
//! ```
//! A query sees only the last `W` positions, so a layer whose every reader
//! is windowed never needs older keys: its cache holds `R` rows whatever
//! the context (Gemma 3: 767 rows instead of 32768 on 15 of its 18 layers).
//! `step = min(MAX_STEP, W)` is the most rows one forward may append
//! (`kv_append` refuses more; the session chunks prompts to it): `R` rows
//! keep every key any query of that step can see, since the step's own
//! later rows overwrite only positions older than `lengths - W`.
//!
//! Legal when: every user of the append other than its `state_out` is a
//! causal `Attention` with the same `window = W`, reading the append as K
//! or V; and `R` is smaller than nothing else (the pass does not know
//! `max_seq`, so a model compiled with `max_seq < R` keeps a slightly larger
//! ring than its whole context: still correct). A cache that any global
//! layer reads keeps its capacity (Gemma 2/3 global layers).
//!
//! Counts: one rewrite per cache (Gemma 3 270M: 15 local layers × K and V = 30).

use crate::pass::Pass;
use graphc_ir::{Dim, Graph, NodeId, Op};

pub struct WindowCache;

/// The most rows one forward appends to a window cache, in the largest
/// case (the session's prefill chunk).
pub const MAX_STEP: usize = 256;

/// Ring rows for a window of `w`: `w + step - 1` with `step = min(MAX_STEP, w)`.
pub fn ring_rows(w: usize) -> usize {
    w + MAX_STEP.min(w) - 1
}

/// The window every reader of `append` uses, if they all agree.
fn common_window(g: &Graph, append: NodeId) -> Option<usize> {
    let mut window = None;
    for u in g.users(append) {
        match &g.node(u).op {
            Op::StateOut { .. } => {}
            Op::Attention { causal: true, window: Some(w), ring: false, .. } => {
                let ins = g.inputs(u);
                if ins[0] == append || ins[3] == append || window.is_some_and(|x| x != *w) {
                    return None;
                }
                window = Some(*w);
            }
            _ => return None,
        }
    }
    window
}

impl Pass for WindowCache {
    fn name(&self) -> &'static str {
        "window_cache"
    }

    fn run(&self, g: &mut Graph) -> u64 {
        let mut appends: Vec<(NodeId, usize)> = g
            .node_ids()
            .filter(|&n| matches!(g.node(n).op, Op::KvAppend { window: None, .. }))
            .filter(|&n| g.users(g.inputs(n)[0]).len() == 1 && matches!(g.node(g.inputs(n)[0]).op, Op::State { .. }))
            .filter_map(|n| common_window(g, n).map(|w| (n, w)))
            .collect();
        appends.sort();
        // An attention's K and V turn into rings together or not at all:
        // drop a candidate whose reader also reads a cache that stays whole.
        loop {
            let before = appends.len();
            let chosen: Vec<NodeId> = appends.iter().map(|a| a.0).collect();
            appends.retain(|&(a, _)| {
                g.users(a).into_iter().filter(|&u| matches!(g.node(u).op, Op::Attention { .. })).all(|u| {
                    let ins = g.inputs(u);
                    chosen.contains(&ins[1]) && chosen.contains(&ins[2])
                })
            });
            if appends.len() == before {
                break;
            }
        }
        for &(append, w) in &appends {
            let Op::KvAppend { axis, .. } = g.node(append).op else { continue };
            let state = g.inputs(append)[0];
            let rows = Dim::konst(ring_rows(w) as i64);
            if let Op::State { ty, .. } = &mut g.node_mut(state).op {
                ty.shape[axis] = rows.clone();
                let ty = ty.clone();
                g.node_mut(state).ty = Some(ty);
            }
            g.node_mut(append).op = Op::KvAppend { axis, cap: rows, window: Some(w) };
            for u in g.users(append) {
                if let Op::Attention { ring, .. } = &mut g.node_mut(u).op {
                    *ring = true;
                }
            }
        }
        appends.len() as u64
    }
}
