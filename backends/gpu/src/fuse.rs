//! Launch packing: which nodes of a graph run as one kernel on the GPU,
//! each group formed by one function below that states its pattern, when
//! it is legal, and what it saves. Every fusion is an IR op made by a pass
//! (the `fuse` pass's rules, `attention_head`, `residual_norm`,
//! `elementwise_chain`, `attention_project`); what is decided here is how
//! many launches they become: independent ops of one kind side by side in
//! one launch (stacked projections, paired ropes and appends), an op of
//! several results (`qkv_rope`, `add_norm`) as its one kernel that writes
//! them all, and an `add_partials` formed by each of its readers. Every
//! group computes each value with the expressions the kernels use alone,
//! so results are bit for bit the same (`backends/gpu/tests/gpu_parity.rs`).
//! A group runs where its root stands in the step's order; nodes it writes
//! besides the root (`also`) take their values there. A SmolLM2 decode
//! step launches 123 kernels instead of 514 (asserted in
//! `tools/tests/cli.rs`; each group's count on SmolLM2 and Gemma 3 in
//! `tests/tests/gpu_models.rs`).

use crate::device::BindingLimits;
use graphc_ir::{Graph, NodeId, Op};
use std::collections::{HashMap, HashSet};

/// The groups of `graph` (in topological `order`).
pub fn groups(graph: &Graph, order: &[NodeId], limits: BindingLimits) -> Groups {
    // Each node's place in `order`, which the legality checks compare.
    let position: Positions = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut groups = further_results(graph, order);
    groups.extend(stacked_matmuls(graph, order, &position, limits));
    groups.extend(paired_ops(graph, order, &position, &groups));
    groups.extend(partials_in_readers(graph, order, &groups));
    groups
}

/// The `add_partials` nodes every reader forms itself (`Group::Partials`):
/// they launch nothing and have no value of their own.
pub fn formed_in_readers(graph: &Graph, groups: &Groups) -> HashSet<NodeId> {
    groups
        .iter()
        .filter_map(|(&reader, g)| match g.group {
            Group::Partials { operand, .. } => Some(graph.inputs(reader)[operand]),
            _ => None,
        })
        .collect()
}

/// The node whose launch computes `id`: its group's root for a node a
/// group writes besides its root (`written_at`), else itself.
pub fn launched_by(written_at: &HashMap<NodeId, NodeId>, id: NodeId) -> NodeId {
    written_at.get(&id).copied().unwrap_or(id)
}

/// What a fused group's one kernel computes.
#[derive(Clone, Debug)]
pub enum Group {
    /// Two or three matmuls of one `x` (`stacked_matmuls`): leaves `x`,
    /// the co-produced matmuls' weights, then the root's (the root is the
    /// first of them in order; its weight's result is the main one). With
    /// `norm`, they are `norm_matmul`s of one norm (its epsilon), whose
    /// weight is the leaf after `x`.
    Stacked { norm: Option<f32> },
    /// An op of several results (`further_results`): leaves its operands,
    /// its `result` nodes co-produced.
    Results,
    /// Two independent ops of one kind, as one stacked launch
    /// (`paired_ops`, `stack`): leaves the root's operands (`root_inputs`
    /// of them), then the co-produced node's.
    Pair { root_inputs: usize },
    /// An op whose operand `operand` is an `add_partials{eps}` it forms
    /// itself (`partials_in_readers`): leaves its operands with that one
    /// given as the sum's (residual, shares, and with `eps` the post-norm's
    /// weight).
    Partials { operand: usize, eps: Option<f32> },
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
fn stacked_matmuls(graph: &Graph, order: &[NodeId], position: &Positions, limits: BindingLimits) -> Groups {
    let mut fused: Groups = HashMap::new();
    for &x in order {
        // x's projections by source and weight block size, in order.
        let mut by_block: Vec<(StackKey, Vec<(NodeId, NodeId)>)> = vec![];
        let mut users = graph.users(x);
        users.sort_by_key(|u| position[u]);
        users.dedup();
        for m in users {
            let Some((source, w)) = projection_of(graph, m) else { continue };
            if source.0 != x || !weight_in_one_binding(graph, w, limits) {
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
fn paired_ops(graph: &Graph, order: &[NodeId], position: &Positions, groups: &Groups) -> Groups {
    let written_at: HashMap<NodeId, NodeId> = groups.iter().flat_map(|(&root, g)| g.also.iter().map(move |&n| (n, root))).collect();
    let runs_at = |id: NodeId| position[&launched_by(&written_at, id)];
    let stackable = |id: NodeId| matches!(graph.node(id).op, Op::Rope { .. } | Op::NormRope { .. } | Op::KvAppend { .. });
    let free = |id: NodeId| !groups.contains_key(&id) && !written_at.contains_key(&id);
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

/// Shares summed where they are read: an `add_partials` (a residual plus
/// the heads' shares of an `attention_project`, through a post-norm where
/// it has one) whose every reader can form it is formed by each reader: a
/// matmul reading it as its `x` (the next MLP, normed or not: in the
/// prologue, its rows staged), a `matmul_add` as its residual (the down
/// projection: in the epilogue, each stored element's own; without a
/// post-norm), a `norm_add` as its `a` (Gemma's next post-norm: a staged
/// row, before its own norm). Its launch goes, and nothing it computes
/// reaches memory. Legal when no reader is in another group (nor forms
/// another sum) and none reads it twice, and a row fits the workgroup
/// memory that stages it;
/// each reader forms the sum with the expressions of the `add_partials`
/// kernels, so its bits are the same.
fn partials_in_readers(graph: &Graph, order: &[NodeId], groups: &Groups) -> Groups {
    let mut fused: Groups = HashMap::new();
    for &sum in order {
        let Op::AddPartials { eps } = graph.node(sum).op else { continue };
        let features = graph.ty(sum).shape.last().and_then(|d| d.as_const());
        let stageable = features.is_some_and(|n| n as u64 <= crate::kernels::MAX_STAGED_X as u64);
        let readers = graph.users(sum);
        let role = |reader: NodeId| -> Option<usize> {
            let inputs = graph.inputs(reader);
            let at = inputs.iter().position(|&i| i == sum)?;
            let once = inputs.iter().filter(|&&i| i == sum).count() == 1;
            let forms = match graph.node(reader).op {
                Op::MatMulAdd => at == 2 && eps.is_none(),
                Op::MatMul | Op::NormMatMul { .. } | Op::MatMulGlu { .. } | Op::NormMatMulGlu { .. } => at == 0,
                Op::NormAdd { .. } => at == 0 && stageable,
                _ => false,
            };
            // (A reader forms one sum at most, its group naming one operand:
            // each op forms a sum at one operand only, so this holds anyway.)
            (once && forms && !groups.contains_key(&reader) && !fused.contains_key(&reader)).then_some(at)
        };
        let Some(roles) = readers.iter().map(|&r| role(r)).collect::<Option<Vec<usize>>>() else { continue };
        if readers.is_empty() {
            continue;
        }
        let operands = graph.inputs(sum);
        for (&reader, operand) in readers.iter().zip(roles) {
            let mut leaves = graph.inputs(reader);
            leaves.splice(operand..=operand, operands.iter().copied());
            fused.insert(reader, Fused { group: Group::Partials { operand, eps }, leaves, also: vec![] });
        }
    }
    fused
}

/// Ops of several results (`qkv_rope`, `add_norm`) run as their one kernel
/// where they stand, their leaves their operands; their `result` nodes are
/// co-produced (in index order, as the kernel's further results are). An
/// op whose further results are not all read keeps no group, and the
/// executor refuses it.
fn further_results(graph: &Graph, order: &[NodeId]) -> Groups {
    let mut groups: Groups = HashMap::new();
    for &id in order {
        let results = graph.node(id).op.results();
        if results < 2 {
            continue;
        }
        let result = |index: usize| graph.users(id).into_iter().find(|&u| graph.node(u).op == Op::Result { index });
        if let Some(also) = (1..results).map(result).collect::<Option<Vec<NodeId>>>() {
            groups.insert(id, Fused { group: Group::Results, leaves: graph.inputs(id), also });
        }
    }
    groups
}
