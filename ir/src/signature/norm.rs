//! Normalization over the last axis, the sandwich norm's residual add
//! the `norm-add` rules fuse into it, and the residual add before a norm
//! the `residual_norm` pass fuses into it (two results).

use super::attr::{word_attr, Attr, AttrValue, Attributes};
use super::check::{arity, need_float, need_rank, other_kind, same_dim, same_operand};
use crate::op::{NormKind, Op};
use crate::shape::TensorType;

const NORM_KINDS: [(NormKind, &str); 2] = [(NormKind::Rms, "rms"), (NormKind::Layer, "layer")];

impl AttrValue for NormKind {
    fn to_attr(&self) -> Attr {
        Attr::Token(NORM_KINDS.iter().find(|(k, _)| k == self).map_or("?", |(_, w)| *w).into())
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        word_attr(&NORM_KINDS, attr, "norm kind")
    }
}

pub(super) fn prototypes() -> Vec<Op> {
    vec![Op::Norm { kind: NormKind::Rms, eps: 0.0 }, Op::NormAdd { eps: 0.0 }, Op::AddNorm { kind: NormKind::Rms, eps: 0.0 }]
}

pub(super) fn attributes<A: Attributes>(op: &mut Op, a: &mut A) -> Result<(), String> {
    match op {
        Op::Norm { kind, eps } => {
            a.name("norm")?;
            a.value("kind", kind)?;
            a.value("eps", eps)
        }
        Op::NormAdd { eps } => {
            a.name("norm_add")?;
            a.value("eps", eps)
        }
        Op::AddNorm { kind, eps } => {
            a.name("add_norm")?;
            a.value("kind", kind)?;
            a.value("eps", eps)
        }
        _ => other_kind(op),
    }
}

pub(super) fn infer(op: &Op, tys: &[TensorType]) -> Result<TensorType, String> {
    let t = |i: usize| &tys[i];
    match op {
        Op::Norm { kind, eps } => {
            arity(tys, 2..=3)?;
            need_float("norm input", t(0))?;
            if eps.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || !eps.is_finite() {
                return Err(format!("norm eps must be a positive number, found {eps:?}"));
            }
            let d = t(0).shape.last().ok_or("norm of a scalar")?;
            for (i, what) in [(1, "weight"), (2, "bias")] {
                if let Some(w) = tys.get(i) {
                    need_rank(&format!("norm {what}"), w, 1)?;
                    same_dim(&format!("norm {what} length differs from the normalized axis"), &w.shape[0], d)?;
                }
            }
            if *kind == NormKind::Rms && tys.len() == 3 {
                return Err("rms norm takes no bias".into());
            }
            Ok(t(0).clone())
        }
        Op::NormAdd { eps } => {
            // Typed as what it replaces: the norm of `o`, then the add.
            arity(tys, 3..=3)?;
            let normed = infer(&Op::Norm { kind: NormKind::Rms, eps: *eps }, &tys[1..])?;
            same_operand("norm_add residual", t(0), &normed)
        }
        Op::AddNorm { .. } => Ok(add_norm_results(op, tys)?.swap_remove(0)),
        _ => other_kind(op),
    }
}

/// `add_norm`'s two results (the normed sum, the sum), typed as the add
/// (of one shape: no broadcast) and the norm it replaces.
pub(super) fn add_norm_results(op: &Op, tys: &[TensorType]) -> Result<Vec<TensorType>, String> {
    let &Op::AddNorm { kind, eps } = op else { other_kind(op) };
    arity(tys, 3..=4)?;
    let sum = same_operand("add_norm's b", &tys[1], &tys[0])?;
    let mut norm_operands = vec![sum.clone()];
    norm_operands.extend_from_slice(&tys[2..]);
    Ok(vec![infer(&Op::Norm { kind, eps }, &norm_operands)?, sum])
}
