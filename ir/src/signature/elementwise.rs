//! Ops that compute each element (or each line along an axis) from the same
//! place in their operands: unary and binary math, clamp, the gated
//! product, softmax, reductions, top-k and the sparse-mixer router.

use super::attr::{word_attr, Attr, AttrValue, Attributes};
use super::check::{arity, broadcast, need_axis, need_float, other_kind};
use crate::op::{BinaryOp, ChainExpr, Op, ReduceOp, UnaryOp};
use crate::shape::{Dim, TensorType};
use crate::DType;

impl AttrValue for UnaryOp {
    fn to_attr(&self) -> Attr {
        Attr::Token(self.name().into())
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        let words: Vec<(UnaryOp, &str)> = UnaryOp::ALL.iter().map(|u| (*u, u.name())).collect();
        word_attr(&words, attr, "activation")
    }
}

impl AttrValue for ChainExpr {
    fn to_attr(&self) -> Attr {
        Attr::Str(self.text())
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        match attr {
            Attr::Str(text) => parse_chain(&text),
            other => Err(format!("must be a quoted expression, found {other:?}")),
        }
    }
}

pub(super) fn prototypes() -> Vec<Op> {
    let mut ops: Vec<Op> = UnaryOp::ALL.iter().map(|u| Op::Unary(*u)).collect();
    ops.extend(BinaryOp::ALL.iter().map(|b| Op::Binary(*b)));
    ops.extend([ReduceOp::Sum, ReduceOp::Max, ReduceOp::Mean].map(|op| Op::Reduce { op, axis: 0 }));
    ops.extend([
        Op::Clamp { min: None, max: None },
        Op::Chain { expr: ChainExpr::Input(0) },
        Op::Glu { act: UnaryOp::Silu },
        Op::Softmax { axis: 0, softcap: None },
        Op::TopKMask { axis: 0, k: 0 },
        Op::SparseMixer { jitter_eps: 0.0 },
    ]);
    ops
}

pub(super) fn attributes<A: Attributes>(op: &mut Op, a: &mut A) -> Result<(), String> {
    match op {
        Op::Unary(u) => a.name(u.name()),
        Op::Binary(b) => a.name(b.name()),
        Op::Chain { expr } => {
            a.name("chain")?;
            a.value("expr", expr)
        }
        Op::Clamp { min, max } => {
            a.name("clamp")?;
            a.optional("min", min)?;
            a.optional("max", max)
        }
        Op::Glu { act } => {
            a.name("glu")?;
            a.value("act", act)
        }
        Op::Softmax { axis, softcap } => {
            a.name("softmax")?;
            a.value("axis", axis)?;
            a.optional("softcap", softcap)
        }
        Op::Reduce { op: reduce, axis } => {
            a.name(match reduce {
                ReduceOp::Sum => "reduce_sum",
                ReduceOp::Max => "reduce_max",
                ReduceOp::Mean => "reduce_mean",
            })?;
            a.value("axis", axis)
        }
        Op::TopKMask { axis, k } => {
            a.name("top_k_mask")?;
            a.value("axis", axis)?;
            a.value("k", k)
        }
        Op::SparseMixer { jitter_eps } => {
            a.name("sparse_mixer")?;
            a.value("jitter_eps", jitter_eps)
        }
        _ => other_kind(op),
    }
}

pub(super) fn infer(op: &Op, tys: &[TensorType]) -> Result<TensorType, String> {
    let t = |i: usize| &tys[i];
    match op {
        Op::Unary(_) | Op::Clamp { .. } | Op::Softmax { .. } => {
            arity(tys, 1..=1)?;
            need_float("operand", t(0))?;
            if let Op::Softmax { axis, .. } = op {
                need_axis(*axis, t(0))?;
            }
            if let Op::Clamp { min: Some(lo), max: Some(hi) } = op {
                if lo > hi {
                    return Err(format!("clamp min {lo:?} > max {hi:?}"));
                }
            }
            Ok(t(0).clone())
        }
        Op::Binary(_) => {
            arity(tys, 2..=2)?;
            if t(0).dtype != t(1).dtype {
                return Err(format!("operand dtypes differ: {} vs {}", t(0), t(1)));
            }
            if t(0).dtype.is_quantized() {
                return Err(format!("elementwise math on quantized {} needs a dequantize first", t(0)));
            }
            Ok(TensorType::new(t(0).dtype, broadcast(&t(0).shape, &t(1).shape)?))
        }
        // Typed as the ops it replaces, step by step.
        Op::Chain { expr } => {
            if expr.max_input().map(|i| i + 1) != Some(tys.len()) {
                return Err(format!("`{}` reads {} operand(s), given {}", expr.text(), expr.max_input().map_or(0, |i| i + 1), tys.len()));
            }
            chain_type(expr, tys)
        }
        Op::Glu { .. } => {
            arity(tys, 2..=2)?;
            need_float("gate", t(0))?;
            need_float("up", t(1))?;
            if t(0).shape != t(1).shape {
                return Err(format!("gate {} and up {} differ in shape", t(0), t(1)));
            }
            Ok(t(0).clone())
        }
        Op::Reduce { axis, .. } => {
            arity(tys, 1..=1)?;
            need_float("operand", t(0))?;
            need_axis(*axis, t(0))?;
            let mut shape = t(0).shape.clone();
            shape[*axis] = Dim::konst(1);
            Ok(TensorType::new(DType::F32, shape))
        }
        Op::TopKMask { axis, k } => {
            arity(tys, 1..=1)?;
            need_float("operand", t(0))?;
            let len = need_axis(*axis, t(0))?;
            if *k == 0 || len.as_const().is_some_and(|n| (*k as i64) > n) {
                return Err(format!("k = {k} is not in 1..={len} (the length of axis {axis})"));
            }
            Ok(t(0).clone())
        }
        Op::SparseMixer { jitter_eps } => {
            arity(tys, 1..=1)?;
            need_float("router scores", t(0))?;
            if t(0).shape.last().and_then(|d| d.as_const()).is_none_or(|e| e < 2) {
                return Err(format!("sparse_mixer picks 2 experts: the last axis of {} must be at least 2", t(0)));
            }
            if !(jitter_eps.is_finite() && *jitter_eps >= 0.0) {
                return Err(format!("jitter_eps {jitter_eps} is not a non-negative number"));
            }
            Ok(t(0).clone())
        }
        _ => other_kind(op),
    }
}

fn chain_type(expr: &ChainExpr, tys: &[TensorType]) -> Result<TensorType, String> {
    match expr {
        ChainExpr::Input(i) => Ok(tys[*i].clone()),
        ChainExpr::Unary(u, a) => infer(&Op::Unary(*u), &[chain_type(a, tys)?]),
        ChainExpr::Binary(b, x, y) => infer(&Op::Binary(*b), &[chain_type(x, tys)?, chain_type(y, tys)?]),
    }
}

/// A chain's expression read back from its text (what `ChainExpr::text`
/// writes), or where it stopped.
fn parse_chain(text: &str) -> Result<ChainExpr, String> {
    let mut rest = text.trim();
    let expr = parse_expr(&mut rest).map_err(|why| format!("chain expression `{text}`: {why}"))?;
    if !rest.trim().is_empty() {
        return Err(format!("chain expression `{text}`: unexpected `{}` at its end", rest.trim()));
    }
    Ok(expr)
}

/// One op or operand of a chain's text, and what follows it in `rest`.
fn parse_expr(rest: &mut &str) -> Result<ChainExpr, String> {
    *rest = rest.trim_start();
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
    let (word, after) = rest.split_at(end);
    *rest = after;
    if let Some(i) = word.strip_prefix("in").and_then(|n| n.parse::<usize>().ok()) {
        return Ok(ChainExpr::Input(i));
    }
    let operand = |rest: &mut &str, close: char| -> Result<ChainExpr, String> {
        let e = parse_expr(rest)?;
        *rest = rest.trim_start();
        *rest = rest.strip_prefix(close).ok_or(format!("expected `{close}` after `{}`", e.text()))?;
        Ok(e)
    };
    *rest = rest.trim_start().strip_prefix('(').ok_or(format!("expected `(` after `{word}`"))?;
    if let Some(u) = UnaryOp::ALL.into_iter().find(|u| u.name() == word) {
        return Ok(ChainExpr::Unary(u, Box::new(operand(rest, ')')?)));
    }
    if let Some(b) = BinaryOp::ALL.into_iter().find(|b| b.name() == word) {
        let x = operand(rest, ',')?;
        return Ok(ChainExpr::Binary(b, Box::new(x), Box::new(operand(rest, ')')?)));
    }
    Err(format!("`{word}` is not a unary or binary op"))
}
