//! Gated-MLP rules.
//!
//! Counts on SmolLM2-135M: `glu-silu` and `matmul-glu` fire 30 times each
//! (one a layer); the graph keeps the 30 `matmul_glu`.

use super::{fusion, Match};
use egg::{Rewrite, SymbolLang};
use graphc_ir::{Op, UnaryOp};

pub fn rules() -> Vec<Rewrite<SymbolLang, crate::egraph::Facts>> {
    vec![
        // act(g) · u = glu{act}(g, u): the activation and the product in one pass over the gate (SwiGLU).
        fusion("glu-silu", "(mul (silu ?g) ?u)", "(glu ?op ?g ?u)", |m| glu(m, UnaryOp::Silu)),
        // The same with GELU, tanh form (GeGLU: Gemma).
        fusion("glu-gelu-tanh", "(mul (gelu_tanh ?g) ?u)", "(glu ?op ?g ?u)", |m| glu(m, UnaryOp::GeluTanh)),
        // The same with GELU, erf form.
        fusion("glu-gelu-erf", "(mul (gelu_erf ?g) ?u)", "(glu ?op ?g ?u)", |m| glu(m, UnaryOp::GeluErf)),
        // glu(x·Wgᵀ, x·Wuᵀ) = matmul_glu(x, Wg, Wu): both projections of one x and their product, neither projection kept.
        fusion("matmul-glu", "(glu ?a (matmul ?x ?wg) (matmul ?x ?wu))", "(matmul_glu ?op ?x ?wg ?wu)", matmul_glu),
    ]
}

/// Gate and up of one shape (no broadcast).
fn glu(m: &Match, act: UnaryOp) -> Option<Op> {
    m.same_shape("?g", "?u").then_some(Op::Glu { act })
}

/// Both weights checkpoint tensors of one type and shape (one kernel walks their rows together).
fn matmul_glu(m: &Match) -> Option<Op> {
    let &Op::Glu { act } = m.attrs("?a") else { return None };
    let alike = m.is_weight("?wg") && m.is_weight("?wu") && m.ty("?wg") == m.ty("?wu");
    alike.then_some(Op::MatMulGlu { act })
}
