//! Gated-MLP fusion.
//!
//! Rewrite: `mul(act(gate), up)` → `glu{act}(gate, up)`, for `act` one of
//! `silu`, `gelu_tanh`, `gelu_erf` (SwiGLU, GeGLU), so a backend computes
//! the activation and the product in one pass over the gate.
//!
//! Legal when the activation's value has no other user (it is not
//! materialized for anyone else), it is `mul`'s *first* operand (the
//! operand order of the product is kept, so no arithmetic changes: every
//! backend's `glu` is `act(gate) * up` with the unfused ops' own
//! functions, and logits are bit-identical with the pass on and off), and
//! gate and up have one shape (no broadcast).
//!
//! Counts: products fused (SmolLM2: 30, one per layer). No e-graph: the
//! pattern is one node deep and has one answer.

use crate::manager::Pass;
use graphc_ir::{BinaryOp, Graph, Op, UnaryOp};

pub struct FuseGlu;

impl Pass for FuseGlu {
    fn name(&self) -> &'static str {
        "fuse_glu"
    }

    fn run(&self, g: &mut Graph) -> u64 {
        let products: Vec<_> = g.g.node_indices().filter(|&n| g.node(n).op == Op::Binary(BinaryOp::Mul)).collect();
        let mut fused = 0;
        for mul in products {
            let [gate_act, up] = g.inputs(mul)[..] else { continue };
            let act = match g.node(gate_act).op {
                Op::Unary(a @ (UnaryOp::Silu | UnaryOp::GeluTanh | UnaryOp::GeluErf)) => a,
                _ => continue,
            };
            if g.users(gate_act) != [mul] {
                continue;
            }
            let gate = g.inputs(gate_act)[0];
            let same_shape = matches!((&g.node(gate).ty, &g.node(up).ty), (Some(a), Some(b)) if a.shape == b.shape);
            if !same_shape {
                continue;
            }
            let layer = g.node(mul).layer;
            let glu = g.add(Op::Glu { act }, &[gate, up], layer);
            g.node_mut(glu).ty = g.node(mul).ty.clone();
            g.take_place(glu, mul);
            g.replace_uses(mul, glu);
            g.remove(mul);
            g.remove(gate_act);
            fused += 1;
        }
        fused
    }
}
