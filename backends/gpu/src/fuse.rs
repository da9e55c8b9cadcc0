//! Which nodes of a graph run as one kernel on the GPU: the graph
//! executor's fusion groups, each formed by one function below that states
//! its pattern, when it is legal, and what it saves. Every group computes
//! each of its values with the expressions the unfused kernels use, so
//! results are bit for bit the same (`backends/gpu/tests/gpu_parity.rs`
//! checks each against the unfused kernels); only launches and round trips
//! through memory go away. A group runs where its root stands in the
//! step's order; nodes it writes besides the root (`also`) take their
//! values there.
//!
//! The IR's rules make the other fused ops (`passes/src/rules/`); with
//! both, a SmolLM2 decode step launches 153 kernels instead of 514 (each
//! group's count on SmolLM2 and Gemma 3 is asserted in
//! `tests/tests/gpu_models.rs`).

use crate::device::BindingLimits;
use crate::kernels::elementwise::Chain;
use graphc_ir::{BinaryOp, DType, Graph, NodeId, NormKind, Op};
use std::collections::{HashMap, HashSet};

/// The groups of `graph` (in topological `order`), and the nodes that run
/// inside another's kernel with no value of their own (`inner`).
pub fn groups(graph: &Graph, order: &[NodeId], limits: BindingLimits) -> (Groups, HashSet<NodeId>) {
    // Each node's place in `order`, which the legality checks compare.
    let position: Positions = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let (mut groups, mut inner) = elementwise_chains(graph, order);
    let (attention_inputs, projected) = attention_inputs(graph, order, &position, limits);
    groups.extend(attention_inputs);
    inner.extend(projected);
    groups.extend(residual_norms(graph, order, &position, &groups, &inner));
    groups.extend(stacked_matmuls(graph, order, &position, &inner, limits));
    groups.extend(paired_ops(graph, order, &position, &groups, &inner));
    (groups, inner)
}

/// The node whose launch computes `id`: the root of its chain for an
/// `inner` node (its only user, recursively), its group's root for a node
/// a group writes besides its root (`written_at`), else itself.
pub fn launched_by(graph: &Graph, inner: &HashSet<NodeId>, written_at: &HashMap<NodeId, NodeId>, mut id: NodeId) -> NodeId {
    loop {
        if inner.contains(&id) {
            id = graph.users(id)[0];
        } else if let Some(&root) = written_at.get(&id) {
            id = root;
        } else {
            return id;
        }
    }
}

/// What a fused group's one kernel computes.
#[derive(Clone, Debug)]
pub enum Group {
    /// An elementwise chain (`elementwise_chains`).
    Chain(Chain),
    /// `norm(add(a, b))` that also writes the sum (`residual_norms`):
    /// leaves `a, b, w[, bias]`, the add co-produced.
    AddNorm(NormKind, f32),
    /// Two or three matmuls of one `x` (`stacked_matmuls`): leaves `x`,
    /// the co-produced matmuls' weights, then the root's (the root is the
    /// first of them in order; its weight's result is the main one). With
    /// `norm`, they are `norm_matmul`s of one norm (its epsilon), whose
    /// weight is the leaf after `x`.
    Stacked { norm: Option<f32> },
    /// A llama layer's q/k/v projections, the rotation of q and k and the
    /// appends of k and v (`attention_inputs`): leaves `x, w_q, w_k, w_v,
    /// positions, k_cache, v_cache, lengths`; the root is q's rotation,
    /// the two appends co-produced (in place). With `norm`, the projections
    /// are `norm_matmul`s of one norm (its epsilon), whose weight is a
    /// last leaf.
    QkvRope { norm: Option<f32> },
    /// Two independent ops of one kind, as one stacked launch
    /// (`paired_ops`, `stack`): leaves the root's operands (`root_inputs`
    /// of them), then the co-produced node's.
    Pair { root_inputs: usize },
}

/// A fused group, run as one kernel where its root (the node whose value
/// is the kernel's main result) stands in the order.
#[derive(Clone, Debug)]
pub struct Fused {
    pub group: Group,
    /// What the kernel reads, in its input order.
    pub leaves: Vec<NodeId>,
    /// Nodes before the root whose values the same kernel writes too
    /// (`Arg::ExtraOutput`, in order); each has a buffer of its own, and
    /// every reader of one comes after the root.
    pub also: Vec<NodeId>,
}

/// Group roots → their groups.
pub type Groups = HashMap<NodeId, Fused>;

/// Each node's index in the topological order the groups are formed on.
type Positions = HashMap<NodeId, usize>;

/// Elementwise chains: a unary or binary op whose value has exactly one
/// user, itself unary or binary and of the same shape, is folded into that
/// user's kernel (recursively), so `c * tanh(x / c)` is one launch. The
/// chain keeps each op's own arithmetic; only the rounding to memory
/// between them goes away.
fn elementwise_chains(graph: &Graph, order: &[NodeId]) -> (Groups, HashSet<NodeId>) {
    let elementwise = |id: NodeId| matches!(graph.node(id).op, Op::Unary(_) | Op::Binary(_)) && graph.ty(id).dtype == DType::F32;
    let mut inner = HashSet::new();
    for &id in order {
        let users = graph.users(id);
        if elementwise(id) && users.len() == 1 && elementwise(users[0]) && graph.ty(id).shape == graph.ty(users[0]).shape {
            inner.insert(id);
        }
    }
    fn build(graph: &Graph, id: NodeId, inner: &HashSet<NodeId>, leaves: &mut Vec<NodeId>) -> Chain {
        let mut operand = |input: NodeId| {
            if inner.contains(&input) {
                build(graph, input, inner, leaves)
            } else {
                let i = leaves.iter().position(|&l| l == input).unwrap_or_else(|| {
                    leaves.push(input);
                    leaves.len() - 1
                });
                Chain::Input(i)
            }
        };
        let inputs = graph.inputs(id);
        match graph.node(id).op {
            Op::Unary(u) => Chain::Unary(u, Box::new(operand(inputs[0]))),
            Op::Binary(b) => {
                let x = operand(inputs[0]);
                Chain::Binary(b, Box::new(x), Box::new(operand(inputs[1])))
            }
            _ => unreachable!("chains hold unary and binary ops"),
        }
    }
    let mut chains = HashMap::new();
    for &id in order {
        let roots_a_chain = elementwise(id) && !inner.contains(&id) && graph.inputs(id).iter().any(|i| inner.contains(i));
        if roots_a_chain {
            let mut leaves = vec![];
            let tree = build(graph, id, &inner, &mut leaves);
            chains.insert(id, Fused { group: Group::Chain(tree), leaves, also: vec![] });
        }
    }
    (chains, inner)
}

/// What a projection reads besides its weight: `x`, and the norm it forms
/// (the norm's weight, its epsilon's bits), if any.
type Source = (NodeId, Option<(NodeId, u32)>);

/// What projections must share to stack: a source and a weight block size.
type StackKey = (Source, usize);

/// A projection, `matmul(x, w)` or `norm_matmul{eps}(x, g, w)`: its
/// source and its weight.
fn projection_of(graph: &Graph, m: NodeId) -> Option<(Source, NodeId)> {
    let inputs = graph.inputs(m);
    match graph.node(m).op {
        Op::MatMul => Some(((inputs[0], None), inputs[1])),
        Op::NormMatMul { eps } => Some(((inputs[0], Some((inputs[1], eps.to_bits()))), inputs[2])),
        _ => None,
    }
}

/// The epsilon of the norm a source's projections form (`None`: plain matmuls).
fn source_norm(source: Source) -> Option<f32> {
    source.1.map(|(_, eps)| f32::from_bits(eps))
}

/// Whether `w` is a weight (checkpoint bytes, of constant shape) that one
/// binding holds whole: what a kernel reading several weights needs (a
/// larger one runs as launches over row ranges, alone).
fn weight_in_one_binding(graph: &Graph, w: NodeId, limits: BindingLimits) -> bool {
    let ty = graph.ty(w);
    let elems: Option<i64> = ty.shape.iter().map(|d| d.as_const()).product();
    matches!(graph.node(w).op, Op::Weight { .. })
        && elems.is_some_and(|e| e as u64 / ty.dtype.block_elems() as u64 * ty.dtype.block_bytes() as u64 <= limits.max_bytes)
}

/// Stacked projections: two or three matmuls of the same `x` (a layer's
/// q, k and v; or `norm_matmul`s of the same `x` and norm) whose weights share a block size (so one loop over blocks
/// serves them all; each is decoded as its own type: Gemma 3's q5_0 q and
/// k beside a q8_0 v) and each fit one binding run as one `matmul_stacked`
/// kernel, where the
/// first of them stands in `order`: two launches fewer per q/k/v. Legal
/// whenever no matmul is in another group: all of them read only `x` and
/// weights, which are there at the first one's position. Each output
/// column is summed as `matmul` sums it.
fn stacked_matmuls(graph: &Graph, order: &[NodeId], position: &Positions, inner: &HashSet<NodeId>, limits: BindingLimits) -> Groups {
    let mut fused: Groups = HashMap::new();
    for &x in order {
        // x's projections by source and weight block size, in order.
        let mut by_block: Vec<(StackKey, Vec<(NodeId, NodeId)>)> = vec![];
        let mut users = graph.users(x);
        users.sort_by_key(|u| position[u]);
        users.dedup();
        for m in users {
            let Some((source, w)) = projection_of(graph, m) else { continue };
            if source.0 != x || inner.contains(&m) || !weight_in_one_binding(graph, w, limits) {
                continue;
            }
            let key = (source, graph.ty(w).dtype.block_elems());
            match by_block.iter_mut().find(|(k, _)| *k == key) {
                Some((_, ms)) => ms.push((m, w)),
                None => by_block.push((key, vec![(m, w)])),
            }
        }
        for ((source, _), ms) in by_block {
            for stack in ms.chunks(3).filter(|c| c.len() >= 2) {
                // The first runs the kernel; its weight goes last (the main result).
                let (&(root, root_w), later) = stack.split_first().unwrap();
                let mut leaves = vec![x];
                leaves.extend(source.1.map(|(g, _)| g));
                leaves.extend(later.iter().map(|&(_, w)| w).chain([root_w]));
                let also = later.iter().map(|&(m, _)| m).collect();
                fused.insert(root, Fused { group: Group::Stacked { norm: source_norm(source) }, leaves, also });
            }
        }
    }
    fused
}

/// Paired ops: two ropes (a layer's q and k) or two `kv_append`s (its K
/// and V caches) with equal attributes run as one stacked launch
/// (`stack`), where the later of the two stands in `order`: a launch fewer
/// per pair. Legal when neither is in another group and every reader of
/// the earlier one (bar `state_out` and `output`, which take values once
/// the step's kernels are placed) runs after the later one, so neither
/// reads the other and the earlier one's value exists before it is read.
fn paired_ops(graph: &Graph, order: &[NodeId], position: &Positions, groups: &Groups, inner: &HashSet<NodeId>) -> Groups {
    let written_at: HashMap<NodeId, NodeId> = groups.iter().flat_map(|(&root, g)| g.also.iter().map(move |&n| (n, root))).collect();
    let runs_at = |id: NodeId| position[&launched_by(graph, inner, &written_at, id)];
    let stackable = |id: NodeId| matches!(graph.node(id).op, Op::Rope { .. } | Op::NormRope { .. } | Op::KvAppend { .. });
    let free = |id: NodeId| !groups.contains_key(&id) && !inner.contains(&id) && !written_at.contains_key(&id);
    let mut paired = HashSet::new();
    let mut fused: Groups = HashMap::new();
    for (at, &first) in order.iter().enumerate() {
        if !stackable(first) || !free(first) || paired.contains(&first) {
            continue;
        }
        let op = &graph.node(first).op;
        let Some(&second) = order[at + 1..].iter().find(|&&n| graph.node(n).op == *op && free(n) && !paired.contains(&n)) else { continue };
        let readers_after = graph
            .users(first)
            .iter()
            .filter(|&&r| !matches!(graph.node(r).op, Op::StateOut { .. } | Op::Output { .. }))
            .all(|&r| runs_at(r) > position[&second]);
        if readers_after {
            paired.extend([first, second]);
            let root_inputs = graph.inputs(second).len();
            let leaves = graph.inputs(second).into_iter().chain(graph.inputs(first)).collect();
            fused.insert(second, Fused { group: Group::Pair { root_inputs }, leaves, also: vec![first] });
        }
    }
    fused
}

/// Residual norms: `norm(add(a, b))`, where `a` and `b` have the add's
/// shape, runs as one `add_norm` kernel that writes the sum too (the
/// residual stream's next value, read again by the next residual add): a
/// launch fewer per norm after a residual add, two a layer. Legal when the
/// add is in no other group, reads no weight, and each of its other
/// readers comes after the norm in `order` (the kernel runs where the norm
/// stands). The sum and the norm are formed as the two kernels form them.
///
/// The IR's rules take these first where the norm is RMS: its readers form
/// it (`norm_matmul`) and the add goes into the projection before it
/// (`matmul_add`) or the post-norm's kernel (`norm_add`). What is left
/// here: layer norms (phi2), and graphs compiled with those rules off.
fn residual_norms(graph: &Graph, order: &[NodeId], position: &Positions, groups: &Groups, inner: &HashSet<NodeId>) -> Groups {
    let mut fused: Groups = HashMap::new();
    let mut taken = HashSet::new();
    for &id in order {
        let Op::Norm { kind, eps } = graph.node(id).op else { continue };
        let inputs = graph.inputs(id);
        let add = inputs[0];
        if graph.node(add).op != Op::Binary(BinaryOp::Add) || groups.contains_key(&id) || groups.contains_key(&add) || inner.contains(&add) {
            continue;
        }
        let operands = graph.inputs(add);
        let same_shape = operands.iter().all(|&o| graph.ty(o).shape == graph.ty(add).shape && graph.ty(o).dtype == DType::F32);
        let reads_weight = operands.iter().any(|&o| matches!(graph.node(o).op, Op::Weight { .. } | Op::Const { .. }));
        let readers_after = graph.users(add).iter().all(|u| *u == id || position[u] > position[&id]);
        if !(same_shape && !reads_weight && readers_after && taken.insert(add)) {
            continue;
        }
        let mut leaves = operands;
        leaves.extend(&inputs[1..]);
        fused.insert(id, Fused { group: Group::AddNorm(kind, eps), leaves, also: vec![add] });
    }
    fused
}

/// Attention inputs: `rope(permute(reshape(matmul(x, w_q))))`, the same
/// rotation of `k = matmul(x, w_k)` appended to its cache, and `v =
/// matmul(x, w_v)` appended to its own (a llama, Gemma 1/2 or Qwen2
/// layer's head, rotated by adjacent pairs or by halves) run as one `matmul_qkv_rope`
/// kernel where q's rotation stands: a decode layer's projections,
/// rotations and appends are one launch instead of five (three matmuls
/// stacked, two stacked pairs), and q, k, v and rotated k never reach
/// memory. Legal when each projection, reshape, permute and k's rotation
/// has its one user in the chain; the reshapes split `[b, s, h·d]` into
/// `[b, s, h, d]` and the permutes swap `s` and `h`; both rotations are
/// one op (an even rotary_dim) of one `positions`; both appends are one op along
/// the cache's axis 2 with one `lengths`; the weights share a type and
/// each fits one binding; head sizes are even (a pair's two columns sit
/// in one workgroup); every leaf is a weight, step input or state, or
/// stands before the root; and every reader of the appended caches (but
/// `state_out`) stands after the root. The second value is the nodes
/// that run inside the kernel with no value of their own.
fn attention_inputs(graph: &Graph, order: &[NodeId], position: &Positions, limits: BindingLimits) -> (Groups, Vec<NodeId>) {
    const KERNEL_BUFFERS: u32 = 10;
    let only_user = |id: NodeId| match graph.users(id)[..] {
        [user] => Some(user),
        _ => None,
    };
    // `permute{0,2,1,3}(reshape(matmul(x, w)))` (or of a `norm_matmul`) → (its source, w, [matmul, reshape], head size), each with one user.
    let projection = |permute: NodeId| -> Option<(Source, NodeId, [NodeId; 3], i64)> {
        (graph.node(permute).op == Op::Permute { perm: vec![0, 2, 1, 3] }).then_some(())?;
        let reshape = graph.inputs(permute)[0];
        let matmul = *graph.inputs(reshape).first()?;
        let Op::Reshape { .. } = &graph.node(reshape).op else { return None };
        let (x, w) = projection_of(graph, matmul)?;
        let (split, flat) = (&graph.ty(reshape).shape, &graph.ty(matmul).shape);
        let head_size = split.get(3)?.as_const()?;
        let splits_heads = split.len() == 4 && flat.len() == 3 && split[..2] == flat[..2] && split[2].as_const().is_some() && head_size % 2 == 0;
        let single = only_user(matmul) == Some(reshape) && only_user(reshape) == Some(permute);
        (splits_heads && single && weight_in_one_binding(graph, w, limits)).then_some((x, w, [matmul, reshape, permute], head_size))
    };
    let mut groups: Groups = HashMap::new();
    let mut inner = vec![];
    let mut taken: HashSet<NodeId> = HashSet::new();
    for &q_rope in order {
        let rope_op = &graph.node(q_rope).op;
        if !matches!(rope_op, Op::Rope { rotary_dim, .. } if rotary_dim % 2 == 0) || taken.contains(&q_rope) {
            continue;
        }
        let [q_in, positions] = graph.inputs(q_rope)[..] else { continue };
        let Some((x, w_q, q_chain, d)) = projection(q_in) else { continue };
        // One buffer more where the kernel forms the norm (its weight).
        if limits.max_buffers < KERNEL_BUFFERS + u32::from(x.1.is_some()) {
            continue;
        }
        // k: another projection of x, rotated the same way, whose rotation's one user is an append.
        let k = graph.users(x.0).into_iter().find_map(|m| {
            let permute = only_user(only_user(m)?)?;
            let k_rope = only_user(permute)?;
            let append = only_user(k_rope)?;
            let rotated_alike = graph.node(k_rope).op == *rope_op && k_rope != q_rope && graph.inputs(k_rope) == [permute, positions];
            let appends = matches!(graph.node(append).op, Op::KvAppend { axis: 2, .. }) && graph.inputs(append)[1] == k_rope;
            let (kx, w, chain, kd) = projection(permute)?;
            (rotated_alike && appends && kx == x && kd == d && !taken.contains(&append)).then_some((w, chain, k_rope, append))
        });
        let Some((w_k, k_chain, k_rope, k_append)) = k else { continue };
        let k_append_inputs = graph.inputs(k_append);
        let (k_cache, lengths) = (k_append_inputs[0], k_append_inputs[2]);
        // v: a third projection of x, appended by the same op with the same lengths.
        let v = graph.users(x.0).into_iter().find_map(|m| {
            let permute = only_user(only_user(m)?)?;
            let append = only_user(permute)?;
            let inputs = graph.inputs(append);
            let appends = graph.node(append).op == graph.node(k_append).op && append != k_append && inputs[1] == permute && inputs[2] == lengths;
            let (vx, w, chain, _) = projection(permute)?;
            (appends && vx == x && !taken.contains(&append)).then_some((w, chain, append, inputs[0]))
        });
        let Some((w_v, v_chain, v_append, v_cache)) = v else { continue };
        let one_type = graph.ty(w_k).dtype == graph.ty(w_q).dtype && graph.ty(w_v).dtype == graph.ty(w_q).dtype;
        let mut leaves = vec![x.0, w_q, w_k, w_v, positions, k_cache, v_cache, lengths];
        leaves.extend(x.1.map(|(g, _)| g));
        let at_hand = |leaf: &NodeId| {
            matches!(graph.node(*leaf).op, Op::Weight { .. } | Op::Input { .. } | Op::State { .. }) || position[leaf] < position[&q_rope]
        };
        let readers_after = [k_append, v_append]
            .iter()
            .flat_map(|&a| graph.users(a))
            .all(|r| matches!(graph.node(r).op, Op::StateOut { .. }) || position[&r] > position[&q_rope]);
        // The caches are written in place: nothing else may read their old values.
        let caches_private = [(k_cache, k_append), (v_cache, v_append)].iter().all(|&(c, a)| graph.users(c) == [a]);
        if one_type && leaves.iter().all(at_hand) && readers_after && caches_private {
            taken.extend([q_rope, k_append, v_append]);
            inner.extend(q_chain.into_iter().chain(k_chain).chain(v_chain).chain([k_rope]));
            groups.insert(q_rope, Fused { group: Group::QkvRope { norm: source_norm(x) }, leaves, also: vec![k_append, v_append] });
        }
    }
    (groups, inner)
}
