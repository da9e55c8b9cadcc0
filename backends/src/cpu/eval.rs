//! What the run loop hands each op and what an executor answers with:
//! values (a host tensor or a checkpoint weight in place), operands
//! borrowed or owned, the dims bound for the run, and the `Evaluator` each
//! CPU executor implements.

use crate::tensor::{Tensor, WeightRef};
use graphc_ir::op::Op;
use std::collections::HashMap;

/// Values of the symbolic dims (`batch`, `seq`, `past`, `cap`) for one run.
pub type Env = HashMap<String, i64>;

/// A value in the executor: a host tensor, or a checkpoint weight in place.
pub enum Val<'w> {
    T(Tensor),
    W(WeightRef<'w>),
}

impl Val<'_> {
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Val::T(t) => t.shape().to_vec(),
            Val::W(w) => w.shape.to_vec(),
        }
    }
    /// f32 values (weights dequantized: used for small weights like norm scales).
    pub fn f32s(&self) -> Result<std::borrow::Cow<'_, [f32]>, String> {
        match self {
            Val::T(Tensor::F32 { data, .. }) => Ok(std::borrow::Cow::Borrowed(data)),
            Val::T(Tensor::I32 { .. }) => Err("expected f32 values, found i32".into()),
            Val::W(w) => {
                let mut out = vec![0f32; w.shape.iter().product()];
                if w.dtype.is_int() {
                    return Err(format!("weight of integer type {}", w.dtype));
                }
                graphc_ir::quant::dequantize(w.dtype, w.bytes, &mut out);
                Ok(std::borrow::Cow::Owned(out))
            }
        }
    }
    pub fn i32s(&self) -> Result<&[i32], String> {
        match self {
            Val::T(Tensor::I32 { data, .. }) => Ok(data),
            _ => Err("expected i32 values".into()),
        }
    }
}

/// An operand: borrowed, or owned when this node is its last user (the
/// kernel may then reuse its buffer).
pub enum Arg<'v, 'w> {
    Ref(&'v Val<'w>),
    Own(Val<'w>),
}

impl<'w> Arg<'_, 'w> {
    pub fn val(&self) -> &Val<'w> {
        match self {
            Arg::Ref(v) => v,
            Arg::Own(v) => v,
        }
    }
    /// The operand as a dense tensor: moved when owned, copied otherwise.
    pub fn into_tensor(self) -> Result<Tensor, String> {
        match self {
            Arg::Own(Val::T(t)) => Ok(t),
            other => dense(other.val()),
        }
    }
}

/// What an executor computes for each op.
pub trait Evaluator: Sync {
    fn eval(&self, op: &Op, args: Vec<Arg<'_, '_>>, env: &Env) -> Result<Tensor, String>;
}

/// A value as a dense tensor (a weight dequantized).
pub(crate) fn dense(v: &Val) -> Result<Tensor, String> {
    match v {
        Val::T(t) => Ok(t.clone()),
        Val::W(w) => Ok(Tensor::f32(w.shape.to_vec(), v.f32s()?.into_owned())),
    }
}
