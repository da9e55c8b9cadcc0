//! The checks the type rules share.

use crate::op::Op;
use crate::shape::{shape_to_string, Dim, Shape, TensorType};
use crate::DType;

/// A kind's file was handed an op of another kind (`Op::kind` and the
/// file disagree).
pub(super) fn other_kind(op: &Op) -> ! {
    unreachable!("{op:?} is not of kind {:?}", op.kind())
}

/// The op's operand count is in `want` (the verifier's error names the op).
pub(super) fn arity(tys: &[TensorType], want: std::ops::RangeInclusive<usize>) -> Result<(), String> {
    if !want.contains(&tys.len()) {
        let w = if want.start() == want.end() { want.start().to_string() } else { format!("{}..={}", want.start(), want.end()) };
        return Err(format!("takes {w} input(s), found {}", tys.len()));
    }
    Ok(())
}

pub(super) fn need_float(what: &str, t: &TensorType) -> Result<(), String> {
    if t.dtype != DType::F32 {
        return Err(format!("{what} must be f32, found {t}"));
    }
    Ok(())
}

pub(super) fn need_rank(what: &str, t: &TensorType, rank: usize) -> Result<(), String> {
    if t.shape.len() != rank {
        return Err(format!("{what} must have rank {rank}, found {t}"));
    }
    Ok(())
}

pub(super) fn need_axis(axis: usize, t: &TensorType) -> Result<&Dim, String> {
    t.shape.get(axis).ok_or_else(|| format!("axis {axis} out of range for {t}"))
}

pub(super) fn same_dim(what: &str, a: &Dim, b: &Dim) -> Result<(), String> {
    if a != b {
        return Err(format!("{what}: {a} != {b}"));
    }
    Ok(())
}

pub(super) fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n].clone() } else { Dim::konst(1) };
        let db = if i + b.len() >= n { b[i + b.len() - n].clone() } else { Dim::konst(1) };
        out.push(if da == db || db.is_const(1) {
            da
        } else if da.is_const(1) {
            db
        } else {
            return Err(format!("shapes {} and {} do not broadcast", shape_to_string(a), shape_to_string(b)));
        });
    }
    Ok(out)
}

/// A fused op's residual operand: exactly the type of the value it is
/// added to (no broadcast: the fused kernels add element by element).
pub(super) fn same_operand(what: &str, residual: &TensorType, value: &TensorType) -> Result<TensorType, String> {
    if residual != value {
        return Err(format!("{what} {residual} is not of the sum's type {value}"));
    }
    Ok(value.clone())
}
