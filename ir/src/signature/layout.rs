//! Ops that move, pick or convert elements without arithmetic on them:
//! reshape, permute, narrow, concat, contiguous, gather, cast, dequantize.

use super::attr::Attributes;
use super::check::{arity, need_axis, need_rank, other_kind};
use crate::op::Op;
use crate::shape::{numel, shape_to_string, Dim, TensorType};
use crate::DType;

pub(super) fn prototypes() -> Vec<Op> {
    vec![
        Op::Reshape { shape: vec![] },
        Op::Permute { perm: vec![] },
        Op::Narrow { axis: 0, start: Dim::konst(0), len: Dim::konst(0) },
        Op::Concat { axis: 0 },
        Op::Contiguous,
        Op::Gather,
        Op::Cast { dtype: DType::F32 },
        Op::Dequantize,
    ]
}

pub(super) fn attributes<A: Attributes>(op: &mut Op, a: &mut A) -> Result<(), String> {
    match op {
        Op::Reshape { shape } => {
            a.name("reshape")?;
            a.value("shape", shape)
        }
        Op::Permute { perm } => {
            a.name("permute")?;
            a.value("perm", perm)
        }
        Op::Narrow { axis, start, len } => {
            a.name("narrow")?;
            a.value("axis", axis)?;
            a.value("start", start)?;
            a.value("len", len)
        }
        Op::Concat { axis } => {
            a.name("concat")?;
            a.value("axis", axis)
        }
        Op::Contiguous => a.name("contiguous"),
        Op::Gather => a.name("gather"),
        Op::Cast { dtype } => {
            a.name("cast")?;
            a.value("dtype", dtype)
        }
        Op::Dequantize => a.name("dequantize"),
        _ => other_kind(op),
    }
}

pub(super) fn infer(op: &Op, tys: &[TensorType]) -> Result<TensorType, String> {
    let t = |i: usize| &tys[i];
    match op {
        Op::Reshape { shape } => {
            arity(tys, 1..=1)?;
            let (a, b) = (numel(&t(0).shape), numel(shape));
            if a != b {
                return Err(format!("reshape of {} to {} changes the element count ({a} vs {b})", t(0), shape_to_string(shape)));
            }
            Ok(TensorType::new(t(0).dtype, shape.clone()))
        }
        Op::Permute { perm } => {
            arity(tys, 1..=1)?;
            let rank = t(0).shape.len();
            let mut seen = vec![false; rank];
            if perm.len() != rank || perm.iter().any(|&p| p >= rank || std::mem::replace(&mut seen[p], true)) {
                return Err(format!("perm {perm:?} is not a permutation of {rank} axes"));
            }
            Ok(TensorType::new(t(0).dtype, perm.iter().map(|&p| t(0).shape[p].clone()).collect()))
        }
        Op::Narrow { axis, start, len } => {
            arity(tys, 1..=1)?;
            let d = need_axis(*axis, t(0))?;
            if let (Some(d), Some(s), Some(l)) = (d.as_const(), start.as_const(), len.as_const()) {
                if s < 0 || l < 0 || s + l > d {
                    return Err(format!("narrow {s}..{} is outside axis {axis} of length {d}", s + l));
                }
            }
            let mut shape = t(0).shape.clone();
            shape[*axis] = len.clone();
            Ok(TensorType::new(t(0).dtype, shape))
        }
        Op::Concat { axis } => {
            if tys.len() < 2 {
                return Err(format!("concat takes at least 2 inputs, found {}", tys.len()));
            }
            let first = t(0);
            need_axis(*axis, first)?;
            let mut total = Dim::konst(0);
            for (i, x) in tys.iter().enumerate() {
                if x.dtype != first.dtype || x.shape.len() != first.shape.len() {
                    return Err(format!("input {i} is {x}, input 0 is {first}"));
                }
                for (k, (a, b)) in x.shape.iter().zip(&first.shape).enumerate() {
                    if k != *axis && a != b {
                        return Err(format!("input {i} is {x}, input 0 is {first}: axis {k} differs"));
                    }
                }
                total = total.add(&x.shape[*axis]);
            }
            let mut shape = first.shape.clone();
            shape[*axis] = total;
            Ok(TensorType::new(first.dtype, shape))
        }
        Op::Contiguous => {
            arity(tys, 1..=1)?;
            Ok(t(0).clone())
        }
        Op::Gather => {
            arity(tys, 2..=2)?;
            need_rank("gather table", t(0), 2)?;
            if t(1).dtype != DType::I32 {
                return Err(format!("gather ids must be i32, found {}", t(1)));
            }
            let mut shape = t(1).shape.clone();
            shape.push(t(0).shape[1].clone());
            Ok(TensorType::new(DType::F32, shape))
        }
        Op::Cast { dtype } => {
            arity(tys, 1..=1)?;
            if dtype.is_quantized() || t(0).dtype.is_quantized() {
                return Err(format!("cast to or from a quantized type ({} -> {dtype}); use dequantize", t(0)));
            }
            Ok(TensorType::new(*dtype, t(0).shape.clone()))
        }
        Op::Dequantize => {
            arity(tys, 1..=1)?;
            if t(0).dtype.is_int() {
                return Err(format!("dequantize of an integer tensor {}", t(0)));
            }
            Ok(TensorType::new(DType::F32, t(0).shape.clone()))
        }
        _ => other_kind(op),
    }
}
