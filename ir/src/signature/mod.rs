//! Each op's signature, declared once: its text name, its attributes in
//! text order, and its type rule. The printer and the parser (`text.rs`)
//! both walk `attributes`, and the verifier (`verify.rs`) calls `infer`, so
//! neither keeps its own table of ops. An op's semantics is its doc comment
//! in `op.rs` and its reference kernel in the CPU backend.
//!
//! The ops are grouped by kind (`Op::kind`), one file each. Adding an op
//! means a variant in `op.rs` (with its kind) and, in its kind's file, a
//! prototype, its attributes and its type rule.

mod attention;
mod attr;
mod check;
mod elementwise;
mod layout;
mod matmul;
mod norm;
mod recurrent;
mod rope;
mod source;

pub(crate) use attr::{Attr, AttrValue, Attributes};

use crate::op::{Op, OpKind};
use crate::shape::TensorType;

/// Every op once, with default attributes: what the parser looks a name up
/// in (`Unary`, `Binary` and `Reduce` once per name).
pub fn prototypes() -> Vec<Op> {
    [
        source::prototypes(),
        layout::prototypes(),
        elementwise::prototypes(),
        matmul::prototypes(),
        norm::prototypes(),
        rope::prototypes(),
        attention::prototypes(),
        recurrent::prototypes(),
    ]
    .concat()
}

/// Walk `op`'s name and attributes (see `Attributes`).
pub(crate) fn attributes<A: Attributes>(op: &mut Op, a: &mut A) -> Result<(), String> {
    match op.kind() {
        OpKind::Source => source::attributes(op, a),
        OpKind::Layout => layout::attributes(op, a),
        OpKind::Elementwise => elementwise::attributes(op, a),
        OpKind::MatMul => matmul::attributes(op, a),
        OpKind::Norm => norm::attributes(op, a),
        OpKind::Rope => rope::attributes(op, a),
        OpKind::Attention => attention::attributes(op, a),
        OpKind::Recurrent => recurrent::attributes(op, a),
    }
}

/// The type `op` produces from inputs of types `tys`, or what is wrong.
pub fn infer(op: &Op, tys: &[TensorType]) -> Result<TensorType, String> {
    match op.kind() {
        OpKind::Source => source::infer(op, tys),
        OpKind::Layout => layout::infer(op, tys),
        OpKind::Elementwise => elementwise::infer(op, tys),
        OpKind::MatMul => matmul::infer(op, tys),
        OpKind::Norm => norm::infer(op, tys),
        OpKind::Rope => rope::infer(op, tys),
        OpKind::Attention => attention::infer(op, tys),
        OpKind::Recurrent => recurrent::infer(op, tys),
    }
}

/// Every result of `op` (its own value first, then those `result{index}`
/// nodes read) from inputs of types `tys`.
pub fn results(op: &Op, tys: &[TensorType]) -> Result<Vec<TensorType>, String> {
    match op {
        Op::QkvRope { .. } => attention::qkv_rope_results(op, tys),
        Op::NormRopeAttention { .. } => attention::norm_rope_attention_results(op, tys),
        Op::AddNorm { .. } => norm::add_norm_results(op, tys),
        _ => Ok(vec![infer(op, tys)?]),
    }
}

impl Op {
    /// The op's name in the text form, as its signature states it.
    pub fn mnemonic(&self) -> String {
        struct NameOf(&'static str);
        impl Attributes for NameOf {
            fn name(&mut self, name: &'static str) -> Result<(), String> {
                self.0 = name;
                // Nothing past the name is needed.
                Err(String::new())
            }
            fn value<T: AttrValue>(&mut self, _: &'static str, _: &mut T) -> Result<(), String> {
                Ok(())
            }
            fn optional<T: AttrValue>(&mut self, _: &'static str, _: &mut Option<T>) -> Result<(), String> {
                Ok(())
            }
            fn flag(&mut self, _: &'static str, _: &mut bool) -> Result<(), String> {
                Ok(())
            }
            fn declared_type(&mut self, _: &mut TensorType) -> Result<(), String> {
                Ok(())
            }
            fn given(&self, _: &str) -> Option<bool> {
                None
            }
        }
        let mut name = NameOf("");
        let _ = attributes(&mut self.clone(), &mut name);
        name.0.into()
    }
}
