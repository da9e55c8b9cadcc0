//! Where values enter and leave a step: runtime inputs, weights, state and
//! constants (sources, which declare their type), the graph's results, the
//! further results of a node that has several, and the host read with its
//! checks.

use super::attr::Attributes;
use super::check::{arity, other_kind};
use crate::op::Op;
use crate::shape::TensorType;
use crate::DType;

pub(super) fn prototypes() -> Vec<Op> {
    let (name, ty) = (String::new(), TensorType::new(DType::F32, vec![]));
    vec![
        Op::Input { name: name.clone(), ty: ty.clone() },
        Op::Weight { name: name.clone(), ty: ty.clone() },
        Op::State { name: name.clone(), ty: ty.clone() },
        Op::StateOut { name: name.clone() },
        Op::Output { name },
        Op::Const { value: 0.0, ty },
        Op::ToHost { nonempty: false, bound: None },
        Op::Result { index: 1 },
    ]
}

pub(super) fn attributes<A: Attributes>(op: &mut Op, a: &mut A) -> Result<(), String> {
    match op {
        Op::Input { name, ty } => declared(a, "input", name, ty),
        Op::Weight { name, ty } => declared(a, "weight", name, ty),
        Op::State { name, ty } => declared(a, "state", name, ty),
        Op::StateOut { name } => {
            a.name("state_out")?;
            a.value("name", name)
        }
        Op::Output { name } => {
            a.name("output")?;
            a.value("name", name)
        }
        Op::Const { value, ty } => {
            a.name("const")?;
            a.value("value", value)?;
            a.declared_type(ty)
        }
        Op::ToHost { nonempty, bound } => {
            a.name("to_host")?;
            a.flag("nonempty", nonempty)?;
            a.optional("bound", bound)
        }
        Op::Result { index } => {
            a.name("result")?;
            a.value("index", index)
        }
        _ => other_kind(op),
    }
}

/// A named source: its name attribute and its type after `:`.
fn declared<A: Attributes>(a: &mut A, op: &'static str, name: &mut String, ty: &mut TensorType) -> Result<(), String> {
    a.name(op)?;
    a.value("name", name)?;
    a.declared_type(ty)
}

pub(super) fn infer(op: &Op, tys: &[TensorType]) -> Result<TensorType, String> {
    match op {
        Op::Input { ty, .. } | Op::Weight { ty, .. } | Op::State { ty, .. } | Op::Const { ty, .. } => {
            arity(tys, 0..=0)?;
            Ok(ty.clone())
        }
        Op::StateOut { .. } | Op::Output { .. } => {
            arity(tys, 1..=1)?;
            Ok(tys[0].clone())
        }
        Op::ToHost { bound, .. } => {
            arity(tys, 1..=1)?;
            if bound.is_some() && tys[0].dtype != DType::I32 {
                return Err(format!("to_host with a bound check needs i32 values, found {}", tys[0]));
            }
            Ok(tys[0].clone())
        }
        // Its type is its producer's result `index` (`super::results`),
        // which the producer's type alone does not say.
        Op::Result { index } => Err(format!("result{{index={index}}} is typed from its producer's operands (signature::results)")),
        _ => other_kind(op),
    }
}
