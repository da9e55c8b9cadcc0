//! Residual-add rules: the add of a block's output into the residual
//! stream done by the op that forms that output, as it writes it.
//!
//! Each rule has a twin for the add's other operand order: IEEE addition
//! is commutative bit for bit, so `add(a, b)` and `add(b, a)` are one
//! value and one fused op serves both.
//!
//! Counts on SmolLM2-135M: `matmul-add` fires 60 times (the attention and
//! MLP outputs of 30 layers); on Gemma 3 270M, whose outputs are normed
//! before they are added, `norm-add` fires 36 times (its post-norms).

use super::{fusion, Match};
use egg::{Rewrite, SymbolLang};
use graphc_ir::{signature::infer, NormKind, Op};

pub fn rules() -> Vec<Rewrite<SymbolLang, crate::egraph::Facts>> {
    vec![
        // r + x·Wᵀ = matmul_add(x, W, r): the residual added in the projection's epilogue.
        fusion("matmul-add", "(add ?r (matmul ?x ?w))", "(matmul_add ?op ?x ?w ?r)", matmul_add),
        // x·Wᵀ + r = r + x·Wᵀ.
        fusion("matmul-add-commuted", "(add (matmul ?x ?w) ?r)", "(matmul_add ?op ?x ?w ?r)", matmul_add),
        // a + rms_norm(o, g) = norm_add(a, o, g): a sandwich post-norm and its residual add in one pass.
        fusion("norm-add", "(add ?a (norm ?n ?o ?g))", "(norm_add ?op ?a ?o ?g)", norm_add),
        // rms_norm(o, g) + a = a + rms_norm(o, g).
        fusion("norm-add-commuted", "(add (norm ?n ?o ?g) ?a)", "(norm_add ?op ?a ?o ?g)", norm_add),
    ]
}

/// A checkpoint weight, and a residual of exactly the product's type (no
/// broadcast: the epilogue adds element by element).
fn matmul_add(m: &Match) -> Option<Op> {
    let product = infer(&Op::MatMul, &[m.ty("?x")?.clone(), m.ty("?w")?.clone()]).ok()?;
    (m.is_weight("?w") && m.ty("?r") == Some(&product)).then_some(Op::MatMulAdd)
}

/// An RMS norm without bias, and a residual of the normed value's type.
fn norm_add(m: &Match) -> Option<Op> {
    let &Op::Norm { kind: NormKind::Rms, eps } = m.attrs("?n") else { return None };
    (m.ty("?a").is_some() && m.ty("?a") == m.ty("?o")).then_some(Op::NormAdd { eps })
}
