//! The expression of a `chain` op (`Op::Chain`): unary and binary
//! elementwise ops over the op's operands, computed in one pass, each op
//! with its own arithmetic. Its text form is the ops' own names, e.g.
//! `mul(tanh(div(in0, in1)), in1)`, where `inN` is operand `N`.

use crate::op::{BinaryOp, UnaryOp};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ChainExpr {
    /// Operand `i`, read with numpy broadcasting.
    Input(usize),
    Unary(UnaryOp, Box<ChainExpr>),
    Binary(BinaryOp, Box<ChainExpr>, Box<ChainExpr>),
}

impl ChainExpr {
    /// How many ops the expression computes.
    pub fn ops(&self) -> usize {
        match self {
            ChainExpr::Input(_) => 0,
            ChainExpr::Unary(_, a) => 1 + a.ops(),
            ChainExpr::Binary(_, a, b) => 1 + a.ops() + b.ops(),
        }
    }

    /// The largest operand index it reads, if any.
    pub fn max_input(&self) -> Option<usize> {
        match self {
            ChainExpr::Input(i) => Some(*i),
            ChainExpr::Unary(_, a) => a.max_input(),
            ChainExpr::Binary(_, a, b) => a.max_input().max(b.max_input()),
        }
    }

    pub fn text(&self) -> String {
        match self {
            ChainExpr::Input(i) => format!("in{i}"),
            ChainExpr::Unary(u, a) => format!("{}({})", u.name(), a.text()),
            ChainExpr::Binary(b, x, y) => format!("{}({}, {})", b.name(), x.text(), y.text()),
        }
    }

    /// Reads `text` back (what `text` writes), or says where it stopped.
    pub fn parse(text: &str) -> Result<ChainExpr, String> {
        let mut rest = text.trim();
        let expr = parse_expr(&mut rest).map_err(|why| format!("chain expression `{text}`: {why}"))?;
        if !rest.trim().is_empty() {
            return Err(format!("chain expression `{text}`: unexpected `{}` at its end", rest.trim()));
        }
        Ok(expr)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_reads_back() {
        let softcap = "mul(tanh(div(in0, in1)), in1)";
        let e = ChainExpr::parse(softcap).unwrap();
        assert_eq!(e.text(), softcap);
        assert_eq!((e.ops(), e.max_input()), (3, Some(1)));
        assert!(ChainExpr::parse("mul(in0)").unwrap_err().contains("expected `,`"));
        assert!(ChainExpr::parse("pow(in0, in1)").unwrap_err().contains("`pow` is not a unary or binary op"));
        assert!(ChainExpr::parse("tanh(in0) in1").unwrap_err().contains("at its end"));
    }
}
