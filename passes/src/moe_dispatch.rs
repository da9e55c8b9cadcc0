//! Sparse MoE dispatch: a routed MoE layer's dense sum, every expert run on
//! every row and weighted (0 for the experts a row's router did not
//! choose), becomes one `moe_experts` op that runs each expert only on the
//! rows routed to it.
//!
//! Rewrite (the frontends' `moe::moe_block` form, `E` experts):
//! ```text
//! %g_e = matmul %h, %w_gate_e        %u_e = matmul %h, %w_up_e
//! %a_e = mul (silu %g_e), %u_e       %y_e = matmul %a_e, %w_down_e
//! %t_e = mul %y_e, (narrow{axis=last, start=e, len=1} %weights)
//! %out = add(... add(add(%t_0, %t_1), %t_2) ..., %t_{E-1})
//! ```
//! becomes
//! ```text
//! %out = moe_experts{act=silu} %h, %weights, %w_gate_0, %w_up_0, %w_down_0, ...
//! ```
//!
//! Legal when: the terms are experts `0..E` in order, summed left to right
//! (the op's sum is in that order), `E` is the routing weights' last
//! dimension, every expert reads the same `%h` and `%weights`, and each
//! folded value has its one reader in the pattern. A row's term for an
//! expert weighted 0 is `y · 0`, a zero that leaves a sum's bits as they
//! are, so skipping it changes no bit (unless that expert's output was
//! infinite or NaN, which the dense form would have spread to the row).
//!
//! gpt-oss's experts (`gpt_oss::experts_block`) are matched too, each
//! term `mul(add(matmul(%a_e, %w_down_e), %b_down_e), narrow(..))` with
//! `%a_e = mul(add(clamp{±l}(add(matmul(%h, %w_up_e), %b_up_e)), 1),
//! mul(%g_e, sigmoid(mul(%g_e, alpha))))`, `%g_e =
//! clamp{max=l}(add(matmul(%h, %w_gate_e), %b_gate_e))`: they become
//! `moe_experts{act=sigmoid, bias, alpha, limit=l}` with each expert's
//! weights and biases, under the same conditions (every expert the same
//! `alpha` and `l`).
//!
//! CPU plans only: the GPU targets have no kernel for the op yet and run
//! the dense form.
//!
//! Counts: MoE layers dispatched (the qwen3_moe fixture: 1, its other
//! layer being dense; mixtral, phimoe, gpt_oss: 2; qwen3_next: 4).

use crate::cost::CostModel;
use crate::pass::Pass;
use graphc_ir::{BinaryOp, Graph, NodeId, Op, UnaryOp};

pub struct MoeDispatch {
    /// Dispatch in a plan counted in passes over memory (the CPU's).
    pub cost: CostModel,
}

/// One matched layer: its `h`, routing weights, the op it becomes (its
/// activation and form), each expert's weights (and biases), and the
/// nodes the op replaces.
struct Matched {
    h: NodeId,
    weights: NodeId,
    op: Op,
    experts: Vec<Vec<NodeId>>,
    replaced: Vec<NodeId>,
}

/// What one term gave: its `h`, routing weights, op, and the expert's inputs.
type Term = (NodeId, NodeId, Op, Vec<NodeId>);

/// The single reader of `id`, if it has exactly one.
fn only_user(g: &Graph, id: NodeId) -> Option<NodeId> {
    let users = g.users(id);
    (users.len() == 1).then(|| users[0])
}

fn is_weight(g: &Graph, id: NodeId) -> bool {
    matches!(g.node(id).op, Op::Weight { .. })
}

/// Term `e` (`mul(y_e, narrow(weights, e))`): its weights, and expert `e`'s
/// `h`, activation and three weights; the nodes it folds go to `replaced`.
fn term(g: &Graph, t: NodeId, e: usize, replaced: &mut Vec<NodeId>) -> Option<Term> {
    let binary = |id: NodeId, op: BinaryOp| (g.node(id).op == Op::Binary(op)).then(|| g.inputs(id)).map(|i| (i[0], i[1]));
    let (y, pick) = binary(t, BinaryOp::Mul)?;
    let Op::Narrow { axis, start, len } = &g.node(pick).op else { return None };
    let weights = g.inputs(pick)[0];
    let rank = g.ty(weights).shape.len();
    if *axis + 1 != rank || start.as_const() != Some(e as i64) || !len.is_const(1) {
        return None;
    }
    if g.node(y).op != Op::MatMul {
        return clamped_swiglu(g, y, weights, pick, replaced);
    }
    let (a, w_down) = (g.inputs(y)[0], g.inputs(y)[1]);
    let (act_out, up) = binary(a, BinaryOp::Mul)?;
    let Op::Unary(act) = g.node(act_out).op else { return None };
    let gate = g.inputs(act_out)[0];
    if g.node(gate).op != Op::MatMul || g.node(up).op != Op::MatMul {
        return None;
    }
    let (h, w_gate) = (g.inputs(gate)[0], g.inputs(gate)[1]);
    let (h_up, w_up) = (g.inputs(up)[0], g.inputs(up)[1]);
    let folded = [pick, y, a, act_out, gate, up];
    let single = folded.iter().all(|&n| only_user(g, n).is_some()) && only_user(g, t).is_some();
    if h != h_up || !single || ![w_gate, w_up, w_down].iter().all(|&w| is_weight(g, w)) {
        return None;
    }
    replaced.extend(folded);
    Some((h, weights, Op::MoeExperts { act, bias: false, alpha: None, limit: None }, vec![w_gate, w_up, w_down]))
}

/// A gpt-oss term's expert, `y` its biased down projection (see the top).
fn clamped_swiglu(g: &Graph, y: NodeId, weights: NodeId, pick: NodeId, replaced: &mut Vec<NodeId>) -> Option<Term> {
    let binary = |id: NodeId, op: BinaryOp| (g.node(id).op == Op::Binary(op)).then(|| g.inputs(id)).map(|i| (i[0], i[1]));
    let constant = |id: NodeId| match g.node(id).op {
        Op::Const { value, .. } if g.ty(id).shape.iter().all(|d| d.is_const(1)) => Some(value),
        _ => None,
    };
    // `add(matmul(x, w), b)`: its x, w and b, and the two nodes.
    let linear = |id: NodeId| -> Option<(NodeId, NodeId, NodeId, [NodeId; 2])> {
        let (product, b) = binary(id, BinaryOp::Add)?;
        (g.node(product).op == Op::MatMul).then_some(())?;
        Some((g.inputs(product)[0], g.inputs(product)[1], b, [id, product]))
    };
    let (a, w_down, b_down, down) = linear(y)?;
    let (up1, glu) = binary(a, BinaryOp::Mul)?;
    let (up_clamped, one) = binary(up1, BinaryOp::Add)?;
    let Op::Clamp { min: Some(low), max: Some(limit) } = g.node(up_clamped).op else { return None };
    let (gate, sig) = binary(glu, BinaryOp::Mul)?;
    let Op::Unary(UnaryOp::Sigmoid) = g.node(sig).op else { return None };
    let slope = g.inputs(sig)[0];
    let (gate_again, alpha) = binary(slope, BinaryOp::Mul)?;
    let (Some(1.0), Some(alpha)) = (constant(one), constant(alpha)) else { return None };
    if gate_again != gate || low != -limit || g.node(gate).op != (Op::Clamp { min: None, max: Some(limit) }) {
        return None;
    }
    let (h, w_gate, b_gate, gate_nodes) = linear(g.inputs(gate)[0])?;
    let (h_up, w_up, b_up, up_nodes) = linear(g.inputs(up_clamped)[0])?;
    let folded = [&[pick, a, up1, up_clamped, glu, sig, slope][..], &down, &gate_nodes, &up_nodes].concat();
    // The clamped gate is read twice, by the slope and the glu; every other node once.
    let mut gate_users = g.users(gate);
    gate_users.sort();
    let mut want = vec![slope, glu];
    want.sort();
    let single = folded.iter().all(|&n| only_user(g, n).is_some()) && gate_users == want;
    let inputs = vec![w_gate, b_gate, w_up, b_up, w_down, b_down];
    if h != h_up || !single || !inputs.iter().all(|&w| is_weight(g, w)) {
        return None;
    }
    replaced.extend(folded);
    replaced.push(gate);
    Some((h, weights, Op::MoeExperts { act: UnaryOp::Sigmoid, bias: true, alpha: Some(alpha), limit: Some(limit) }, inputs))
}

/// The layer whose sum ends at `root`, if it is one.
fn layer(g: &Graph, root: NodeId) -> Option<Matched> {
    // The terms, last first: `add(acc, t)` down to the first term.
    let (mut terms, mut sums, mut n) = (vec![], vec![root], root);
    while g.node(n).op == Op::Binary(BinaryOp::Add) {
        let inputs = g.inputs(n);
        terms.push(inputs[1]);
        n = inputs[0];
        if g.node(n).op == Op::Binary(BinaryOp::Add) {
            only_user(g, n)?;
            sums.push(n);
        }
    }
    terms.push(n);
    terms.reverse();
    let mut replaced = sums;
    replaced.extend(&terms);
    let mut first = None;
    let mut experts = Vec::new();
    for (e, &t) in terms.iter().enumerate() {
        let (h, weights, op, w) = term(g, t, e, &mut replaced)?;
        if *first.get_or_insert((h, weights, op.clone())) != (h, weights, op) {
            return None;
        }
        experts.push(w);
    }
    let (h, weights, op) = first?;
    let n_experts = g.ty(weights).shape.last()?.as_const()?;
    (experts.len() >= 2 && n_experts == experts.len() as i64).then_some(Matched { h, weights, op, experts, replaced })
}

impl Pass for MoeDispatch {
    fn name(&self) -> &'static str {
        "moe_dispatch"
    }

    fn run(&self, g: &mut Graph) -> u64 {
        if self.cost != CostModel::Passes {
            return 0;
        }
        let Ok(order) = g.topo_order() else { return 0 };
        // Outermost sums first: a sum inside a matched one is folded with it.
        let mut taken = std::collections::HashSet::new();
        let mut layers = Vec::new();
        for &root in order.iter().rev() {
            if taken.contains(&root) || g.node(root).op != Op::Binary(BinaryOp::Add) {
                continue;
            }
            if let Some(m) = layer(g, root) {
                taken.extend(m.replaced.iter().copied());
                layers.push((root, m));
            }
        }
        let count = layers.len() as u64;
        let mut removed = vec![];
        for (root, m) in layers {
            let mut inputs = vec![m.h, m.weights];
            inputs.extend(m.experts.iter().flatten());
            let op = g.add(m.op, &inputs, g.node(root).layer);
            g.node_mut(op).ty = g.node(root).ty.clone();
            g.take_place(op, root);
            g.replace_uses(root, op);
            removed.extend(m.replaced);
        }
        for n in removed {
            g.remove(n);
        }
        count
    }
}
