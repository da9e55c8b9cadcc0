//! Attention heads: a layer's q/k/v projections, the rotation of q and k
//! and the appends of k and v to their caches become one `qkv_rope` op of
//! three results, which a GPU runs as one kernel (q, k and v never reach
//! memory: a decode layer's head is one launch instead of five).
//!
//! Rewrite, with `p(w) = matmul(x, w)` or `norm_matmul{eps}(x, g, w)` (or,
//! for every projection of the head alike, `add(p(w), b)` with a bias `b`
//! of its features: Qwen2's), and `heads(y) = permute{[0, 2, 1, 3]}(reshape(y))`:
//! ```text
//! %q  = rope %heads(p(w_q)), %pos
//! %kr = rope %heads(p(w_k)), %pos
//! %k2 = kv_append{axis=2, cap=C, window=W} %k_cache, %kr, %len
//! %v2 = kv_append{axis=2, cap=C, window=W} %v_cache, %heads(p(w_v)), %len
//! ```
//! becomes
//! ```text
//! %q  = qkv_rope{eps, bias, <the rope's attributes>, cap=C, window=W} %x, %w_q, %w_k, %w_v, %pos, %k_cache, %v_cache, %len[, %g][, %b_q, %b_k, %b_v]
//! %k2 = result{index=1} %q
//! %v2 = result{index=2} %q
//! ```
//!
//! A structural pass, not an e-graph rule: the op has three results, and an
//! e-class holds one value (extraction could take the fused q with the
//! unfused appends, and a cache would be appended twice).
//!
//! Legal when: the two ropes are one op of one `positions`, and the two
//! appends one op along axis 2 of one `lengths`; the three projections read
//! one `x` (and one norm); each reshape splits `[b, s, h·d]` into
//! `[b, s, h, d]` and k's head size is q's; every projection, reshape,
//! permute and k's rotation has its one reader in the pattern; each cache
//! is read only by its append (it is written in place); and no operand
//! depends on a value the pattern replaces. The op computes each value as
//! those ops do, so logits keep their bits.
//!
//! Launch packing asks two things more, checked here because only a GPU
//! plan runs this pass (the CPU runs the op as its parts, which saves
//! nothing there): the three weights share a block size (one kernel
//! walks their blocks; Qwen2.5's q5_0 q and k beside a q8_0 v are one
//! head, a q4_k q beside a q8_0 v is not), and the head size is even (a
//! rotated pair's two columns sit in one workgroup).
//!
//! Counts: heads formed (SmolLM2-135M: 30, Qwen2.5-0.5B: 24; one a layer).

use crate::cost::CostModel;
use crate::pass::Pass;
use graphc_ir::op::BinaryOp;
use graphc_ir::{Graph, NodeId, Op};

pub struct AttentionHead {
    /// Heads form for a plan counted in launches (a GPU's).
    pub cost: CostModel,
}

/// A projection `p(w)` (or `add(p(w), b)`) under `heads(..)`: what it reads
/// besides the weight (`x`, and the norm's weight and epsilon bits), the
/// weight, its bias, the nodes from the projection up to the permute, and
/// the head size.
struct Projection {
    source: (NodeId, Option<(NodeId, u32)>),
    weight: NodeId,
    bias: Option<NodeId>,
    chain: Vec<NodeId>,
    head_dim: i64,
}

/// `permute{[0, 2, 1, 3]}(reshape(p(w)))`, or with `add(p(w), b)` for a
/// bias `b` of the projection's features, each with one reader.
fn projection(g: &Graph, permute: NodeId) -> Option<Projection> {
    (g.node(permute).op == Op::Permute { perm: vec![0, 2, 1, 3] }).then_some(())?;
    let reshape = g.inputs(permute)[0];
    let Op::Reshape { .. } = g.node(reshape).op else { return None };
    let mut chain = vec![reshape, permute];
    let mut matmul = g.inputs(reshape)[0];
    let mut bias = None;
    if g.node(matmul).op == Op::Binary(BinaryOp::Add) {
        let [projected, b] = g.inputs(matmul)[..] else { return None };
        let features = g.ty(projected).shape.last().cloned();
        let is_bias = g.ty(b).shape.len() == 1 && Some(&g.ty(b).shape[0]) == features.as_ref() && g.ty(b).dtype == graphc_ir::DType::F32;
        (is_bias && only_user(g, projected) == Some(matmul) && only_user(g, matmul) == Some(reshape)).then_some(())?;
        chain.insert(0, matmul);
        bias = Some(b);
        matmul = projected;
    }
    chain.insert(0, matmul);
    let inputs = g.inputs(matmul);
    let (source, weight) = match g.node(matmul).op {
        Op::MatMul => ((inputs[0], None), inputs[1]),
        Op::NormMatMul { eps } => ((inputs[0], Some((inputs[1], eps.to_bits()))), inputs[2]),
        _ => return None,
    };
    let (split, flat) = (&g.ty(reshape).shape, &g.ty(matmul).shape);
    let head_dim = split.get(3)?.as_const()?;
    let splits_heads = split.len() == 4 && flat.len() == 3 && split[..2] == flat[..2] && split[2].as_const().is_some();
    let single = only_user(g, matmul) == Some(chain[1]) && only_user(g, reshape) == Some(permute);
    (splits_heads && single).then_some(Projection { source, weight, bias, chain, head_dim })
}

/// The permute a projection `m` of x reaches through its one reader after
/// another (a bias add, if any, then the reshape); `projection` checks the
/// shape of the chain.
fn heads_of(g: &Graph, m: NodeId) -> Option<NodeId> {
    let mut n = only_user(g, only_user(g, m)?)?;
    if !matches!(g.node(n).op, Op::Permute { .. }) {
        n = only_user(g, n)?;
    }
    Some(n)
}

fn only_user(g: &Graph, id: NodeId) -> Option<NodeId> {
    match g.users(id)[..] {
        [user] => Some(user),
        _ => None,
    }
}

/// One head found: the new op's operands, and the nodes it replaces (q's
/// rotation, k's append, v's append first).
struct Head {
    op: Op,
    operands: Vec<NodeId>,
    replaced: Vec<NodeId>,
}

fn find_head(g: &Graph, q_rope: NodeId) -> Option<Head> {
    let rope_op = &g.node(q_rope).op;
    let Op::Rope { style, rotary_dim, theta, scaling } = rope_op.clone() else { return None };
    let [q_in, positions] = g.inputs(q_rope)[..] else { return None };
    let q = projection(g, q_in)?;
    let x = q.source;
    // k: another projection of x, rotated alike, whose rotation's one reader is an append.
    let (k, k_rope, k_append) = g.users(x.0).into_iter().find_map(|m| {
        let permute = heads_of(g, m)?;
        let k_rope = only_user(g, permute)?;
        let append = only_user(g, k_rope)?;
        let rotated_alike = k_rope != q_rope && g.node(k_rope).op == *rope_op && g.inputs(k_rope) == [permute, positions];
        let appends = matches!(g.node(append).op, Op::KvAppend { axis: 2, .. }) && g.inputs(append)[1] == k_rope;
        let k = projection(g, permute)?;
        (rotated_alike && appends && k.source == x && k.head_dim == q.head_dim).then_some((k, k_rope, append))
    })?;
    let Op::KvAppend { cap, window, .. } = g.node(k_append).op.clone() else { return None };
    let [k_cache, _, lengths] = g.inputs(k_append)[..] else { return None };
    // v: a third projection of x, appended by the same op with the same lengths.
    let (v, v_append, v_cache) = g.users(x.0).into_iter().find_map(|m| {
        let permute = heads_of(g, m)?;
        let append = only_user(g, permute)?;
        let inputs = g.inputs(append);
        let appends = append != k_append && g.node(append).op == g.node(k_append).op && inputs[1] == permute && inputs[2] == lengths;
        let v = projection(g, permute)?;
        (appends && v.source == x).then_some((v, append, inputs[0]))
    })?;
    let block_elems = |w: NodeId| g.ty(w).dtype.block_elems();
    let one_block_size = [k.weight, v.weight].iter().all(|&w| block_elems(w) == block_elems(q.weight));
    let caches_private = [(k_cache, k_append), (v_cache, v_append)].iter().all(|&(c, a)| g.users(c) == [a]);
    let biases = [q.bias, k.bias, v.bias];
    let all_or_none = biases.iter().all(Option::is_some) || biases.iter().all(Option::is_none);
    if !(one_block_size && caches_private && all_or_none && q.head_dim % 2 == 0) {
        return None;
    }
    let mut operands = vec![x.0, q.weight, k.weight, v.weight, positions, k_cache, v_cache, lengths];
    operands.extend(x.1.map(|(norm_weight, _)| norm_weight));
    operands.extend(biases.into_iter().flatten());
    let eps = x.1.map(|(_, bits)| f32::from_bits(bits));
    let op = Op::QkvRope { eps, bias: q.bias.is_some(), style, rotary_dim, theta, scaling, cap, window };
    let mut replaced = vec![q_rope, k_append, v_append, k_rope];
    replaced.extend(q.chain.into_iter().chain(k.chain).chain(v.chain));
    Some(Head { op, operands, replaced })
}

impl Pass for AttentionHead {
    fn name(&self) -> &'static str {
        "attention_head"
    }

    fn run(&self, g: &mut Graph) -> u64 {
        if self.cost != CostModel::Launches {
            return 0;
        }
        let Ok(order) = g.topo_order() else { return 0 };
        let mut formed = 0;
        for q_rope in order {
            if !g.contains(q_rope) || !matches!(g.node(q_rope).op, Op::Rope { .. }) {
                continue;
            }
            let Some(Head { op, operands, replaced }) = find_head(g, q_rope) else { continue };
            // The op would read its own result.
            if crate::reach::computed_from(g, &operands, &replaced) {
                continue;
            }
            crate::results::put_in_place(g, op, &operands, q_rope, &replaced[1..3], &replaced);
            formed += 1;
        }
        formed
    }
}
