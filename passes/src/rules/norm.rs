//! Norm-into-projection rules: an RMS norm formed where the projections
//! that read it read their input, so it is no kernel of its own and its
//! values never reach memory.
//!
//! These rules recompute: a norm read by several projections (a layer's
//! q, k and v) is formed by each of them, a pass over `d` values beside
//! each product's `n·d`. The node matched below the root may therefore have
//! other readers (`fusion_recomputing`); extraction prefers the fused form
//! where it costs no more launches (`egraph.rs`), and the norm goes once
//! none of its readers is left.
//!
//! Counts on SmolLM2-135M: the graph keeps 91 `norm_matmul` (q, k, v of
//! 30 layers and the output head) and 30 `norm_matmul_glu`, and no norm
//! (`norm-matmul` also fires on the gate and up projections, before
//! `matmul-glu` takes them).

use super::{fusion_recomputing, Match};
use egg::{Rewrite, SymbolLang};
use graphc_ir::{NormKind, Op};

pub fn rules() -> Vec<Rewrite<SymbolLang, crate::egraph::Facts>> {
    vec![
        // matmul(rms_norm(x, g), W) = norm_matmul(x, g, W): the norm formed as the product reads x.
        fusion_recomputing("norm-matmul", "(matmul (norm ?n ?x ?g) ?w)", "(norm_matmul ?op ?x ?g ?w)", norm_matmul),
        // matmul_glu(rms_norm(x, g), Wg, Wu) = norm_matmul_glu(x, g, Wg, Wu): the MLP's input norm too.
        fusion_recomputing("norm-matmul-glu", "(matmul_glu ?a (norm ?n ?x ?g) ?wg ?wu)", "(norm_matmul_glu ?op ?x ?g ?wg ?wu)", norm_matmul_glu),
    ]
}

/// The norm's epsilon, where it is an RMS norm without bias (the
/// pattern's two operands).
fn rms_eps(m: &Match) -> Option<f32> {
    match *m.attrs("?n") {
        Op::Norm { kind: NormKind::Rms, eps } => Some(eps),
        _ => None,
    }
}

/// An RMS norm, and a checkpoint weight (a kernel decodes it where it reads x).
fn norm_matmul(m: &Match) -> Option<Op> {
    let eps = rms_eps(m)?;
    m.is_weight("?w").then_some(Op::NormMatMul { eps })
}

/// An RMS norm before a fused gated MLP.
fn norm_matmul_glu(m: &Match) -> Option<Op> {
    let eps = rms_eps(m)?;
    let &Op::MatMulGlu { act } = m.attrs("?a") else { return None };
    Some(Op::NormMatMulGlu { act, eps })
}
