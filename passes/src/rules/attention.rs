//! Attention-input rules.
//!
//! Counts on Gemma 3 270M: `norm-rope` fires 36 times (q and k of each of
//! 18 layers); SmolLM2 has no q/k norm and none.

use super::{fusion, Match};
use egg::{Rewrite, SymbolLang};
use graphc_ir::{NormKind, Op};

pub fn rules() -> Vec<Rewrite<SymbolLang, crate::egraph::Facts>> {
    vec![
        // rope(permute{0,2,1,3}(rms_norm(x, w)), pos) = norm_rope(x, w, pos): the per-head q/k norm, the
        // heads-major transpose and the rotation in one pass over each row (qwen3, gemma3).
        fusion("norm-rope", "(rope ?r (permute ?p (norm ?n ?x ?w)) ?pos)", "(norm_rope ?op ?x ?w ?pos)", norm_rope),
    ]
}

/// An RMS norm without bias (the pattern's two operands), and a permute
/// that swaps exactly the sequence and head axes.
fn norm_rope(m: &Match) -> Option<Op> {
    let Op::Rope { style, rotary_dim, theta, scaling } = m.attrs("?r").clone() else { return None };
    let Op::Permute { perm } = m.attrs("?p") else { return None };
    let &Op::Norm { kind: NormKind::Rms, eps } = m.attrs("?n") else { return None };
    (perm[..] == [0, 2, 1, 3]).then_some(Op::NormRope { eps, style, rotary_dim, theta, scaling })
}
