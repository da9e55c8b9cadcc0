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
mod elementwise;
mod layout;
mod matmul;
mod norm;
mod recurrent;
mod rope;
mod source;

use crate::op::{Op, OpKind};
use crate::shape::{shape_to_string, Dim, Shape, TensorType};
use crate::text::Attr;
use crate::DType;

/// What walks an op's attributes: the printer reads each value, the parser
/// writes it. Every attribute is named by its text key.
pub(crate) trait Attributes {
    /// The op's text name (the first thing every signature states).
    fn name(&mut self, name: &'static str) -> Result<(), String>;
    /// A required attribute.
    fn value<T: AttrValue>(&mut self, key: &'static str, value: &mut T) -> Result<(), String>;
    /// An attribute left out of the text when `None`.
    fn optional<T: AttrValue>(&mut self, key: &'static str, value: &mut Option<T>) -> Result<(), String>;
    /// A boolean left out of the text when false.
    fn flag(&mut self, key: &'static str, value: &mut bool) -> Result<(), String>;
    /// A source's declared type (written after `:`, not as an attribute).
    fn declared_type(&mut self, ty: &mut TensorType) -> Result<(), String>;
    /// The parser's view of which keys the text gives, for an attribute
    /// group whose variant its keys decide (rope scaling); `None` when
    /// printing.
    fn given(&self, key: &str) -> Option<bool>;
}

/// A value an attribute holds, and its text form.
pub(crate) trait AttrValue: Sized {
    fn to_attr(&self) -> Attr;
    fn from_attr(attr: Attr) -> Result<Self, String>;
}

fn token(attr: Attr) -> Result<String, String> {
    match attr {
        Attr::Token(t) => Ok(t),
        other => Err(format!("must be a plain value, found {other:?}")),
    }
}

fn parsed<T: std::str::FromStr>(attr: Attr) -> Result<T, String> {
    let t = token(attr)?;
    t.parse().map_err(|_| format!("cannot read `{t}`"))
}

impl AttrValue for f32 {
    fn to_attr(&self) -> Attr {
        // `{:?}` is the shortest text that parses back to the same bits.
        Attr::Token(format!("{self:?}"))
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        parsed(attr)
    }
}

macro_rules! plain_attr_value {
    ($($t:ty),*) => {$(
        impl AttrValue for $t {
            fn to_attr(&self) -> Attr {
                Attr::Token(self.to_string())
            }
            fn from_attr(attr: Attr) -> Result<Self, String> {
                parsed(attr)
            }
        }
    )*};
}
plain_attr_value!(usize, u64, bool);

impl AttrValue for Dim {
    fn to_attr(&self) -> Attr {
        Attr::Token(self.to_string())
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        let t = token(attr)?;
        Dim::parse(&t).ok_or_else(|| format!("`{t}` is not a dimension"))
    }
}

impl AttrValue for String {
    fn to_attr(&self) -> Attr {
        Attr::Str(self.clone())
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        match attr {
            Attr::Str(s) => Ok(s),
            other => Err(format!("must be a quoted string, found {other:?}")),
        }
    }
}

impl AttrValue for DType {
    fn to_attr(&self) -> Attr {
        Attr::Token(self.name().into())
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        let t = token(attr)?;
        DType::from_name(&t).ok_or_else(|| format!("unknown dtype `{t}`"))
    }
}

impl<T: AttrValue> AttrValue for Vec<T> {
    fn to_attr(&self) -> Attr {
        Attr::List(self.iter().map(T::to_attr).collect())
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        match attr {
            Attr::List(items) => items.into_iter().map(T::from_attr).collect(),
            other => Err(format!("must be a list, found {other:?}")),
        }
    }
}

/// An enum attribute spelled by a fixed word per variant.
pub(crate) fn word_attr<T: Copy + PartialEq>(words: &[(T, &str)], attr: Attr, what: &str) -> Result<T, String> {
    let t = token(attr)?;
    words.iter().find(|(_, w)| *w == t).map(|(v, _)| *v).ok_or_else(|| {
        let all: Vec<String> = words.iter().map(|(_, w)| format!("`{w}`")).collect();
        format!("unknown {what} `{t}` (one of {})", all.join(", "))
    })
}

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

/// A kind's file was handed an op of another kind (`Op::kind` and the
/// file disagree).
fn other_kind(op: &Op) -> ! {
    unreachable!("{op:?} is not of kind {:?}", op.kind())
}

// The checks the type rules share.

fn arity(op: &Op, tys: &[TensorType], want: std::ops::RangeInclusive<usize>) -> Result<(), String> {
    if !want.contains(&tys.len()) {
        let w = if want.start() == want.end() { want.start().to_string() } else { format!("{}..={}", want.start(), want.end()) };
        return Err(format!("{} takes {} input(s), found {}", op.mnemonic(), w, tys.len()));
    }
    Ok(())
}

fn need_float(what: &str, t: &TensorType) -> Result<(), String> {
    if t.dtype != DType::F32 {
        return Err(format!("{what} must be f32, found {t}"));
    }
    Ok(())
}

fn need_rank(what: &str, t: &TensorType, rank: usize) -> Result<(), String> {
    if t.shape.len() != rank {
        return Err(format!("{what} must have rank {rank}, found {t}"));
    }
    Ok(())
}

fn need_axis(axis: usize, t: &TensorType) -> Result<&Dim, String> {
    t.shape.get(axis).ok_or_else(|| format!("axis {axis} out of range for {t}"))
}

fn same_dim(what: &str, a: &Dim, b: &Dim) -> Result<(), String> {
    if a != b {
        return Err(format!("{what}: {a} != {b}"));
    }
    Ok(())
}

fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, String> {
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
fn same_operand(what: &str, residual: &TensorType, value: &TensorType) -> Result<TensorType, String> {
    if residual != value {
        return Err(format!("{what} {residual} is not of the sum's type {value}"));
    }
    Ok(value.clone())
}

#[cfg(test)]
mod tests;
