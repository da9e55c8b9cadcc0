//! An attention whose q and k heads are normed before their rotation
//! (Gemma 3's q/k norms), with the appends of its new k and v rows, becomes
//! one `norm_rope_attention` op of three results. A GPU runs a decode step
//! of it as one kernel: each workgroup norms and rotates its query head and
//! its kv head's new key itself, takes the new key and value from
//! workgroup memory, and one workgroup of each kv head writes them to the
//! cache. A Gemma decode layer is five launches instead of seven (the
//! paired q/k `norm_rope` and the paired appends go).
//!
//! Rewrite, with `nr(x, g) = norm_rope{attrs} x, g, %pos` and the
//! attention projected by head (the `attention_project` pass's op):
//! ```text
//! %q  = nr(%qx, %g_q)
//! %kr = nr(%kx, %g_k)
//! %k2 = kv_append{axis=2, cap=C, window=W} %k_cache, %kr, %len
//! %v2 = kv_append{axis=2, cap=C, window=W} %v_cache, %v, %len
//! %p  = attention_project{attn} %q, %k2, %v2, %pos, %w
//! ```
//! becomes
//! ```text
//! %p  = norm_rope_attention{eps, <rope attrs>, <attn>, cap=C} %qx, %kx, %v, %g_q, %g_k, %pos, %k_cache, %v_cache, %len, %w
//! %k2 = result{index=1} %p
//! %v2 = result{index=2} %p
//! ```
//!
//! A structural pass, as `attention_head` is: the op has three results.
//!
//! Legal when: the two `norm_rope`s are one op (attributes) of the
//! attention's `positions`, the two appends one op of one `lengths`, and
//! the appends' window is the attention's where it reads a ring (none
//! otherwise: the op states one window); q's rotation has the attention
//! as its one reader and k's its append; each cache is read only by its
//! append (it is written in place); and no operand is computed from a
//! replaced node. The op computes each value as those ops do, so logits
//! keep their bits. Launch packing asks more, checked here because only a
//! GPU plan runs this pass: the head sizes fit the attention kernel's
//! workgroup memory (`MAX_HEAD_DIM`).
//!
//! Counts: attentions formed (Gemma 3 270M: 18, one a layer).

use crate::cost::CostModel;
use crate::pass::Pass;
use graphc_ir::{Graph, NodeId, Op};

pub struct NormRopeAttention {
    /// Formed for a plan counted in launches (a GPU's).
    pub cost: CostModel,
}

/// The largest head the GPU's attention kernels hold in workgroup memory
/// (its `attention::MAX_HEAD_DIM`).
const MAX_HEAD_DIM: i64 = 512;

fn only_user(g: &Graph, id: NodeId) -> Option<NodeId> {
    match g.users(id)[..] {
        [user] => Some(user),
        _ => None,
    }
}

/// One match: the new op, its operands, and the nodes it replaces (the
/// attention, k's append, v's append first).
struct Found {
    op: Op,
    operands: Vec<NodeId>,
    replaced: Vec<NodeId>,
}

fn find(g: &Graph, project: NodeId) -> Option<Found> {
    let Op::AttentionProject { n_heads, n_kv_heads, scale, causal, window, softcap, ring } = g.node(project).op.clone() else { return None };
    let [q, k_append, v_append, positions, w] = g.inputs(project)[..] else { return None };
    let Op::NormRope { eps, style, rotary_dim, theta, scaling } = g.node(q).op.clone() else { return None };
    let [qx, g_q, q_positions] = g.inputs(q)[..] else { return None };
    let Op::KvAppend { axis: 2, cap, window: append_window } = g.node(k_append).op.clone() else { return None };
    let [k_cache, k_rope, lengths] = g.inputs(k_append)[..] else { return None };
    let [v_cache, v, v_lengths] = g.inputs(v_append)[..] else { return None };
    let [kx, g_k, k_positions] = g.inputs(k_rope)[..] else { return None };
    let one_rotation = g.node(k_rope).op == g.node(q).op && q_positions == positions && k_positions == positions;
    let one_append = k_append != v_append && g.node(v_append).op == g.node(k_append).op && v_lengths == lengths;
    let one_window = append_window == window.filter(|_| ring);
    let private = only_user(g, q) == Some(project)
        && only_user(g, k_rope) == Some(k_append)
        && g.users(k_cache) == [k_append]
        && g.users(v_cache) == [v_append];
    let head_dim = |id: NodeId| g.ty(id).shape.get(3).and_then(|d| d.as_const());
    let fits = [k_cache, v_cache].iter().all(|&c| head_dim(c).is_some_and(|d| d <= MAX_HEAD_DIM));
    if !(one_rotation && one_append && one_window && private && fits) {
        return None;
    }
    let op = Op::NormRopeAttention { eps, style, rotary_dim, theta, scaling, n_heads, n_kv_heads, scale, causal, window, softcap, ring, cap };
    let operands = vec![qx, kx, v, g_q, g_k, positions, k_cache, v_cache, lengths, w];
    Some(Found { op, operands, replaced: vec![project, k_append, v_append, q, k_rope] })
}

impl Pass for NormRopeAttention {
    fn name(&self) -> &'static str {
        "norm_rope_attention"
    }

    fn run(&self, g: &mut Graph) -> u64 {
        if self.cost != CostModel::Launches {
            return 0;
        }
        let Ok(order) = g.topo_order() else { return 0 };
        let mut formed = 0;
        for project in order {
            if !g.contains(project) || !matches!(g.node(project).op, Op::AttentionProject { .. }) {
                continue;
            }
            let Some(Found { op, operands, replaced }) = find(g, project) else { continue };
            // The op would read its own result.
            if crate::reach::computed_from(g, &operands, &replaced) {
                continue;
            }
            crate::results::put_in_place(g, op, &operands, project, &replaced[1..3], &replaced);
            formed += 1;
        }
        formed
    }
}
