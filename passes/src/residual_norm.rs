//! Residual norms: a norm of a residual add, where the sum is read again
//! (the residual stream), becomes one `add_norm` op of two results, which
//! a GPU runs as one kernel that writes the sum and its norm (a launch
//! fewer per norm after a residual add).
//!
//! Rewrite:
//! ```text
//! %s = add %a, %b
//! %n = norm{kind=K, eps=E} %s, %w[, %bias]
//! ```
//! becomes
//! ```text
//! %n = add_norm{kind=K, eps=E} %a, %b, %w[, %bias]
//! %s = result{index=1} %n
//! ```
//!
//! A structural pass, not an e-graph rule: the op has two results, and an
//! e-class holds one value.
//!
//! Legal when: `a` and `b` are f32 of the add's own shape (no broadcast),
//! computed values (not weights or constants, which are folded at load);
//! the sum has a reader besides the norm (else nothing needs it written);
//! the norm is RMS without a bias or a layer norm with one (the kernel's two
//! forms); and no operand depends on the sum. The op forms the sum and the
//! norm as `add` and `norm` do, so logits keep their bits.
//!
//! Runs after `fuse`, whose rules already fold RMS norms into their readers
//! (`norm_matmul`) and residual adds into their producers (`matmul_add`):
//! what is left are layer norms (phi2). And before `elementwise_chain`, so
//! the norm takes the last add of a sum of several (phi2's parallel
//! attention and MLP) and the rest chain. GPU plans only: on the CPU the op is
//! its parts (`backends/src/cpu/parts.rs`) and saves nothing.
//!
//! Counts: norms formed with their residual add (SmolLM2, Gemma 3: 0).

use crate::cost::CostModel;
use crate::pass::Pass;
use graphc_ir::{BinaryOp, DType, Graph, NormKind, Op};

pub struct ResidualNorm {
    /// Norms form with their add in a plan counted in launches (a GPU's).
    pub cost: CostModel,
}

impl Pass for ResidualNorm {
    fn name(&self) -> &'static str {
        "residual_norm"
    }

    fn run(&self, g: &mut Graph) -> u64 {
        if self.cost != CostModel::Launches {
            return 0;
        }
        let Ok(order) = g.topo_order() else { return 0 };
        let mut formed = 0;
        for norm in order {
            // A node removed above (or its id given to a new one) is skipped.
            if !g.contains(norm) {
                continue;
            }
            let Op::Norm { kind, eps } = g.node(norm).op else { continue };
            let inputs = g.inputs(norm);
            let sum = inputs[0];
            if g.node(sum).op != Op::Binary(BinaryOp::Add) {
                continue;
            }
            let operands = g.inputs(sum);
            let same_shape = operands.iter().all(|&o| g.ty(o).shape == g.ty(sum).shape && g.ty(o).dtype == DType::F32);
            let computed = operands.iter().all(|&o| !matches!(g.node(o).op, Op::Weight { .. } | Op::Const { .. }));
            let read_again = g.users(sum).iter().any(|&u| u != norm);
            let kernel_form = inputs.len() == if kind == NormKind::Layer { 3 } else { 2 };
            let acyclic = !crate::reach::computed_from(g, &inputs[1..], &[sum]);
            if !(same_shape && computed && read_again && kernel_form && acyclic) {
                continue;
            }
            let layer = g.node(norm).layer;
            let mut fused_inputs = operands;
            fused_inputs.extend(&inputs[1..]);
            // Typed as the values they take over, so later matches in this
            // run can read them.
            let fused = g.add(Op::AddNorm { kind, eps }, &fused_inputs, layer);
            g.node_mut(fused).ty = g.node(norm).ty.clone();
            g.take_place(fused, norm);
            g.replace_uses(norm, fused);
            let result = g.add(Op::Result { index: 1 }, &[fused], layer);
            g.node_mut(result).ty = g.node(sum).ty.clone();
            g.take_place(result, sum);
            g.replace_uses(sum, result);
            g.remove(norm);
            g.remove(sum);
            formed += 1;
        }
        formed
    }
}
