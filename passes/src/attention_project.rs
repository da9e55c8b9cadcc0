//! Attention outputs projected by head: an attention, its heads laid side
//! by side and the output projection with its residual add become each
//! head's share of the projection (`attention_project`) and their sum
//! added to the residual (`add_partials`). A GPU computes a head's share
//! in the workgroup that computed the head, and forms the sum where its
//! readers read it (the next MLP's prologue, the down projection's
//! epilogue), so a decode layer's output projection is no launch of its
//! own: a llama layer is four launches instead of five.
//!
//! Rewrite, with `A = attention{attrs} %q, %k, %v, %pos` of `dv`-sized heads:
//! ```text
//! %a = permute{perm=[0, 2, 1, 3]} A
//! %f = reshape{shape=[b, s, n_heads·dv]} %a
//! %y = matmul_add %f, %w, %r
//! ```
//! becomes
//! ```text
//! %p = attention_project{attrs} %q, %k, %v, %pos, %w
//! %y = add_partials %r, %p
//! ```
//! and a projection under a sandwich post-norm (Gemma's), `%o = matmul
//! %f, %w` read only by `%y = norm_add{eps} %r, %o, %g`, becomes `%y =
//! add_partials{eps} %r, %p, %g` (a Gemma decode layer: two launches fewer,
//! the projection's and the post-norm's).
//!
//! The shares are summed in another order than the one projection's dot
//! products (each head's `dv` terms, then the heads), so logits change in
//! their last bits (within the parity bounds, as any GPU kernel's order):
//! a GPU plan's rewrite only (the CPU keeps the one projection, which its
//! kernels run faster).
//!
//! Legal when: the attention has no sinks; the attention, the permute and the reshape each have their
//! one reader in the pattern; the reshape joins the heads of each
//! position (`[b, s, n_heads, dv]` → `[b, s, n_heads·dv]`); `w` is a weight
//! whose rows are `n_heads·dv` long; and no operand is computed from a
//! replaced node. Launch packing asks more, checked here because only a
//! GPU plan runs this pass: a head's columns of `w` start and end on a
//! boundary of the weight's scale groups (`DType::scale_group_elems`),
//! so a workgroup decodes whole groups of its head, and `dv` fits the
//! attention kernel's workgroup memory (`MAX_HEAD_DIM`); under a
//! post-norm, a row of the sum fits the workgroup memory its kernels
//! stage it in (`MAX_STAGED_ROW`).
//!
//! Counts: attentions projected by head (SmolLM2-135M: 30, Gemma 3 270M:
//! 18; one a layer).

use crate::cost::CostModel;
use crate::pass::Pass;
use graphc_ir::{Graph, NodeId, Op};

pub struct AttentionProject {
    /// Formed for a plan counted in launches (a GPU's).
    pub cost: CostModel,
}

/// The largest value head the GPU's attention kernels hold (its
/// `attention::MAX_HEAD_DIM`).
const MAX_HEAD_DIM: i64 = 512;

/// Largest row of a post-normed sum the GPU's kernels stage (its
/// `kernels::MAX_STAGED_X`).
const MAX_STAGED_ROW: i64 = 3072;

fn only_user(g: &Graph, id: NodeId) -> Option<NodeId> {
    match g.users(id)[..] {
        [user] => Some(user),
        _ => None,
    }
}

/// The rewrite at `attention`.
struct Rewrite {
    /// The `attention_project` and its operands.
    op: Op,
    operands: Vec<NodeId>,
    /// The sum (`add_partials{eps}`) and what it reads besides the shares:
    /// the residual, then the post-norm's weight.
    sum: Op,
    residual: NodeId,
    norm_weight: Option<NodeId>,
    /// The nodes replaced, the one the sum stands for last.
    replaced: Vec<NodeId>,
}

fn find(g: &Graph, attention: NodeId) -> Option<Rewrite> {
    // `attention_project` has no sinks input: an attention with sinks stays.
    let Op::Attention { n_heads, n_kv_heads, scale, causal, window, softcap, ring, sinks: false } = g.node(attention).op.clone() else { return None };
    let permute = only_user(g, attention)?;
    (g.node(permute).op == Op::Permute { perm: vec![0, 2, 1, 3] }).then_some(())?;
    let reshape = only_user(g, permute)?;
    let Op::Reshape { .. } = g.node(reshape).op else { return None };
    let project = only_user(g, reshape)?;
    let inputs = g.inputs(project);
    let (sum, w, residual, norm_weight, last) = match (&g.node(project).op, &inputs[..]) {
        (Op::MatMulAdd, &[x, w, r]) if x == reshape => (Op::AddPartials { eps: None }, w, r, None, None),
        (Op::MatMul, &[x, w]) if x == reshape => {
            // Under a post-norm: `norm_add{eps}(r, o, g)` reading `o` alone.
            let post = only_user(g, project)?;
            let Op::NormAdd { eps } = g.node(post).op else { return None };
            let [r, o, weight] = g.inputs(post)[..] else { return None };
            let row = g.ty(post).shape.last()?.as_const()?;
            (o == project && r != project && row <= MAX_STAGED_ROW).then_some(())?;
            (Op::AddPartials { eps: Some(eps) }, w, r, Some(weight), Some(post))
        }
        _ => return None,
    };
    let (heads, joined) = (&g.ty(permute).shape, &g.ty(reshape).shape);
    let dv = heads.get(3)?.as_const()?;
    let joins_heads = heads.len() == 4
        && joined.len() == 3
        && joined[..2] == heads[..2]
        && heads[2].as_const() == Some(n_heads as i64)
        && joined[2].as_const() == Some(n_heads as i64 * dv);
    let weight = g.ty(w);
    let whole_groups = matches!(g.node(w).op, Op::Weight { .. })
        && weight.shape.len() == 2
        && weight.shape[1].as_const() == Some(n_heads as i64 * dv)
        && dv % weight.dtype.scale_group_elems() as i64 == 0;
    if !(joins_heads && whole_groups && dv <= MAX_HEAD_DIM) {
        return None;
    }
    let mut operands = g.inputs(attention);
    operands.push(w);
    let op = Op::AttentionProject { n_heads, n_kv_heads, scale, causal, window, softcap, ring };
    let mut replaced = vec![attention, permute, reshape, project];
    replaced.extend(last);
    Some(Rewrite { op, operands, sum, residual, norm_weight, replaced })
}

impl Pass for AttentionProject {
    fn name(&self) -> &'static str {
        "attention_project"
    }

    fn run(&self, g: &mut Graph) -> u64 {
        if self.cost != CostModel::Launches {
            return 0;
        }
        let Ok(order) = g.topo_order() else { return 0 };
        let mut formed = 0;
        for attention in order {
            if !g.contains(attention) || !matches!(g.node(attention).op, Op::Attention { .. }) {
                continue;
            }
            let Some(Rewrite { op, operands, sum, residual, norm_weight, replaced }) = find(g, attention) else { continue };
            let mut read = operands.clone();
            read.push(residual);
            read.extend(norm_weight);
            if crate::reach::computed_from(g, &read, &replaced) {
                continue;
            }
            let last = *replaced.last().expect("the projection");
            let shares = g.add(op, &operands, g.node(attention).layer);
            g.take_place(shares, attention);
            let mut sum_operands = vec![residual, shares];
            sum_operands.extend(norm_weight);
            let sum = g.add(sum, &sum_operands, g.node(last).layer);
            g.node_mut(sum).ty = g.node(last).ty.clone();
            g.take_place(sum, last);
            g.replace_uses(last, sum);
            for n in replaced {
                g.remove(n);
            }
            formed += 1;
        }
        formed
    }
}
