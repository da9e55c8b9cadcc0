//! The text form: a stable, line-oriented rendering of a graph that the
//! parser reads back exactly (round-trip tested). One node per line:
//!
//! ```text
//! graph "llama" {
//!   %0 = input{name="tokens"} : i32[batch, seq]
//!   layer 0 {
//!     %7 = norm{kind=rms, eps=1e-5} %3, %6 : f32[batch, seq, 576]
//!   }
//! }
//! ```
//!
//! Node numbers are positions in the graph's stable topological order, so the
//! same graph always prints the same text. `#` starts a comment.

use crate::graph::{Graph, NodeId};
use crate::op::{BinaryOp, NormKind, Op, ReduceOp, RopeScaling, RopeStyle, UnaryOp};
use crate::shape::{Dim, TensorType};
use crate::DType;
use std::collections::HashMap;
use std::fmt::Write;

/// A rope style as the text form spells it (`style=neox`, `style=gptj`).
pub fn rope_style_name(style: RopeStyle) -> &'static str {
    match style {
        RopeStyle::Neox => "neox",
        RopeStyle::GptJ => "gptj",
    }
}

/// An attribute value in the text form.
#[derive(Clone, Debug, PartialEq)]
enum Attr {
    Str(String),
    Token(String),
    List(Vec<Attr>),
}

fn fmt_f32(x: f32) -> String {
    // `{:?}` is the shortest text that parses back to the same bits.
    format!("{x:?}")
}

fn tok(s: impl ToString) -> Attr {
    Attr::Token(s.to_string())
}

fn push_rope(a: &mut Vec<(&'static str, Attr)>, style: RopeStyle, rotary_dim: usize, theta: f32, scaling: &RopeScaling) {
    a.push(("style", tok(rope_style_name(style))));
    a.push(("rotary_dim", tok(rotary_dim)));
    a.push(("theta", tok(fmt_f32(theta))));
    match scaling {
        RopeScaling::None => {}
        RopeScaling::Linear { factor } => a.push(("linear_factor", tok(fmt_f32(*factor)))),
        RopeScaling::FreqFactors { factors, attention_factor } => {
            a.push(("freq_factors", Attr::List(factors.iter().map(|f| tok(fmt_f32(*f))).collect())));
            a.push(("attention_factor", tok(fmt_f32(*attention_factor))));
        }
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_context } => {
            a.push(("llama3_factor", tok(fmt_f32(*factor))));
            a.push(("low_freq_factor", tok(fmt_f32(*low_freq_factor))));
            a.push(("high_freq_factor", tok(fmt_f32(*high_freq_factor))));
            a.push(("original_context", tok(original_context)));
        }
    }
}

fn op_attrs(op: &Op) -> Vec<(&'static str, Attr)> {
    let mut a: Vec<(&'static str, Attr)> = Vec::new();
    match op {
        Op::Input { name, .. } | Op::Weight { name, .. } | Op::State { name, .. } => a.push(("name", Attr::Str(name.clone()))),
        Op::StateOut { name } | Op::Output { name } => a.push(("name", Attr::Str(name.clone()))),
        Op::Const { value, .. } => a.push(("value", tok(fmt_f32(*value)))),
        Op::Reshape { shape } => a.push(("shape", Attr::List(shape.iter().map(tok).collect()))),
        Op::Permute { perm } => a.push(("perm", Attr::List(perm.iter().map(tok).collect()))),
        Op::Narrow { axis, start, len } => {
            a.push(("axis", tok(axis)));
            a.push(("start", tok(start)));
            a.push(("len", tok(len)));
        }
        Op::Concat { axis } | Op::Reduce { axis, .. } => a.push(("axis", tok(axis))),
        Op::Clamp { min, max } => {
            if let Some(m) = min {
                a.push(("min", tok(fmt_f32(*m))));
            }
            if let Some(m) = max {
                a.push(("max", tok(fmt_f32(*m))));
            }
        }
        Op::Softmax { axis, softcap } => {
            a.push(("axis", tok(axis)));
            if let Some(c) = softcap {
                a.push(("softcap", tok(fmt_f32(*c))));
            }
        }
        Op::Glu { act } | Op::MatMulGlu { act } => a.push(("act", tok(act.name()))),
        Op::NormMatMulGlu { act, eps } => {
            a.push(("act", tok(act.name())));
            a.push(("eps", tok(fmt_f32(*eps))));
        }
        Op::NormMatMul { eps } | Op::NormAdd { eps } => a.push(("eps", tok(fmt_f32(*eps)))),
        Op::TopKMask { axis, k } => {
            a.push(("axis", tok(axis)));
            a.push(("k", tok(k)));
        }
        Op::Cast { dtype } => a.push(("dtype", tok(dtype))),
        Op::Norm { kind, eps } => {
            a.push(("kind", tok(if *kind == NormKind::Rms { "rms" } else { "layer" })));
            a.push(("eps", tok(fmt_f32(*eps))));
        }
        Op::Rope { style, rotary_dim, theta, scaling } => push_rope(&mut a, *style, *rotary_dim, *theta, scaling),
        Op::NormRope { eps, style, rotary_dim, theta, scaling } => {
            a.push(("eps", tok(fmt_f32(*eps))));
            push_rope(&mut a, *style, *rotary_dim, *theta, scaling);
        }
        Op::Attention { n_heads, n_kv_heads, scale, causal, window, softcap, ring } => {
            a.push(("n_heads", tok(n_heads)));
            a.push(("n_kv_heads", tok(n_kv_heads)));
            a.push(("scale", tok(fmt_f32(*scale))));
            a.push(("causal", tok(causal)));
            if let Some(w) = window {
                a.push(("window", tok(w)));
            }
            if let Some(c) = softcap {
                a.push(("softcap", tok(fmt_f32(*c))));
            }
            if *ring {
                a.push(("ring", tok(ring)));
            }
        }
        Op::KvAppend { axis, cap, window } => {
            a.push(("axis", tok(axis)));
            a.push(("cap", tok(cap)));
            if let Some(w) = window {
                a.push(("window", tok(w)));
            }
        }
        Op::ToHost { nonempty, bound } => {
            a.push(("nonempty", tok(nonempty)));
            if let Some(b) = bound {
                a.push(("bound", tok(b)));
            }
        }
        Op::CausalConv1d { kernel } => a.push(("kernel", tok(kernel))),
        Op::SparseMixer { jitter_eps } => a.push(("jitter_eps", tok(fmt_f32(*jitter_eps)))),
        Op::Gather | Op::Contiguous | Op::Unary(_) | Op::Binary(_) | Op::MatMul | Op::MatMulAdd | Op::Dequantize | Op::GatedDeltaRule => {}
    }
    a
}

fn write_attr(out: &mut String, a: &Attr) {
    match a {
        Attr::Str(s) => {
            let _ = write!(out, "{s:?}");
        }
        Attr::Token(t) => out.push_str(t),
        Attr::List(items) => {
            out.push('[');
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_attr(out, it);
            }
            out.push(']');
        }
    }
}

/// The text of one node (without its `%N =` prefix's indentation).
pub fn node_line(graph: &Graph, id: NodeId, names: &HashMap<NodeId, usize>) -> String {
    let node = graph.node(id);
    let mut s = format!("%{} = {}", names[&id], node.op.mnemonic());
    let attrs = op_attrs(&node.op);
    if !attrs.is_empty() {
        s.push('{');
        for (i, (k, v)) in attrs.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            s.push_str(k);
            s.push('=');
            write_attr(&mut s, v);
        }
        s.push('}');
    }
    let inputs = graph.inputs(id);
    for (i, inp) in inputs.iter().enumerate() {
        s.push_str(if i == 0 { " " } else { ", " });
        let _ = write!(s, "%{}", names[inp]);
    }
    if let Some(ty) = &node.ty {
        let _ = write!(s, " : {ty}");
    }
    s
}

/// Print the whole graph.
pub fn print(graph: &Graph) -> String {
    print_filtered(graph, |_| true)
}

/// Print the graph, keeping only layers for which `keep_layer` is true; each
/// run of skipped layers becomes one summary comment.
pub fn print_filtered(graph: &Graph, keep_layer: impl Fn(u32) -> bool) -> String {
    let order = graph.topo_order().expect("cannot print a graph with a cycle");
    let names: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut out = format!("graph {:?} {{\n", graph.name);
    let mut open: Option<u32> = None;
    let mut skipped: Vec<(u32, usize)> = Vec::new(); // (layer, nodes)
    let flush_skipped = |out: &mut String, skipped: &mut Vec<(u32, usize)>| {
        if let (Some(first), Some(last)) = (skipped.first(), skipped.last()) {
            let nodes: usize = skipped.iter().map(|s| s.1).sum();
            let _ = writeln!(out, "  # layers {}..={} elided: {} layer(s), {} nodes", first.0, last.0, skipped.len(), nodes);
        }
        skipped.clear();
    };
    for &id in &order {
        let layer = graph.node(id).layer;
        if layer != open {
            if open.is_some_and(&keep_layer) {
                out.push_str("  }\n");
            }
            open = layer;
            if let Some(l) = layer {
                if keep_layer(l) {
                    flush_skipped(&mut out, &mut skipped);
                    let _ = writeln!(out, "  layer {l} {{");
                } else {
                    skipped.push((l, 0));
                }
            } else {
                flush_skipped(&mut out, &mut skipped);
            }
        }
        match layer {
            Some(l) if !keep_layer(l) => skipped.last_mut().unwrap().1 += 1,
            Some(_) => {
                let _ = writeln!(out, "    {}", node_line(graph, id, &names));
            }
            None => {
                let _ = writeln!(out, "  {}", node_line(graph, id, &names));
            }
        }
    }
    if open.is_some_and(&keep_layer) {
        out.push_str("  }\n");
    }
    flush_skipped(&mut out, &mut skipped);
    out.push_str("}\n");
    out
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected `{}` at column {}", c as char, self.i + 1))
        }
    }
    fn word(&mut self) -> String {
        self.ws();
        let start = self.i;
        while self.i < self.s.len() && !b" \t,{}[]:=\"%".contains(&self.s[self.i]) {
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }
    /// A quoted string with the escapes the printer writes (Rust's `{:?}`
    /// for `str`): `\\ \" \' \n \r \t \0` and `\u{HEX}`.
    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        while self.i < self.s.len() && self.s[self.i] != b'"' {
            if self.s[self.i] != b'\\' {
                out.push(self.s[self.i]);
                self.i += 1;
                continue;
            }
            let escaped = *self.s.get(self.i + 1).ok_or("unterminated string")?;
            self.i += 2;
            let c = match escaped {
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                b'0' => '\0',
                b'\\' | b'"' | b'\'' => escaped as char,
                b'u' => {
                    self.expect(b'{')?;
                    let start = self.i;
                    while self.i < self.s.len() && self.s[self.i].is_ascii_hexdigit() {
                        self.i += 1;
                    }
                    let hex = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
                    let c = u32::from_str_radix(hex, 16).ok().and_then(char::from_u32);
                    self.expect(b'}')?;
                    c.ok_or_else(|| format!("`\\u{{{hex}}}` is not a character"))?
                }
                other => return Err(format!("unknown escape `\\{}` in a string", other as char)),
            };
            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
        }
        if self.i >= self.s.len() {
            return Err("unterminated string".into());
        }
        self.i += 1;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
    fn attr(&mut self) -> Result<Attr, String> {
        match self.peek() {
            Some(b'"') => Ok(Attr::Str(self.string()?)),
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                if !self.eat(b']') {
                    loop {
                        items.push(self.attr()?);
                        if self.eat(b']') {
                            break;
                        }
                        self.expect(b',')?;
                    }
                }
                Ok(Attr::List(items))
            }
            _ => {
                let w = self.word();
                if w.is_empty() {
                    return Err(format!("expected an attribute value at column {}", self.i + 1));
                }
                Ok(Attr::Token(w))
            }
        }
    }
    fn rest_is_empty(&mut self) -> bool {
        self.peek().is_none()
    }
}

/// The attributes `rope` and `norm_rope` share.
fn parse_rope(a: &mut Attrs) -> Result<(RopeStyle, usize, f32, RopeScaling), String> {
    let style: String = a.need("style")?;
    let style = match style.as_str() {
        "neox" => RopeStyle::Neox,
        "gptj" => RopeStyle::GptJ,
        s => return Err(format!("rope style must be `neox` or `gptj`, found `{s}`")),
    };
    let llama3 = a.opt::<f32>("llama3_factor")?;
    if llama3.is_some() && (a.has("linear_factor") || a.has("freq_factors")) {
        return Err("`rope` takes one of `linear_factor`, `freq_factors`, `llama3_factor`".into());
    }
    if let Some(factor) = llama3 {
        let scaling = RopeScaling::Llama3 {
            factor,
            low_freq_factor: a.need("low_freq_factor")?,
            high_freq_factor: a.need("high_freq_factor")?,
            original_context: a.need("original_context")?,
        };
        return Ok((style, a.need("rotary_dim")?, a.need("theta")?, scaling));
    }
    let scaling = match (a.opt::<f32>("linear_factor")?, a.has("freq_factors")) {
        (Some(factor), false) => RopeScaling::Linear { factor },
        (None, true) => {
            let factors = a
                .list("freq_factors")?
                .iter()
                .map(|f| f.parse::<f32>().map_err(|_| format!("`rope` attribute `freq_factors`: cannot read `{f}`")))
                .collect::<Result<Vec<f32>, String>>()?;
            RopeScaling::FreqFactors { factors, attention_factor: a.need("attention_factor")? }
        }
        (None, false) => RopeScaling::None,
        (Some(_), true) => return Err("`rope` takes `linear_factor` or `freq_factors`, not both".into()),
    };
    Ok((style, a.need("rotary_dim")?, a.need("theta")?, scaling))
}

struct Attrs {
    map: Vec<(String, Attr)>,
    op: String,
}

impl Attrs {
    fn take(&mut self, key: &str) -> Option<Attr> {
        let i = self.map.iter().position(|(k, _)| k == key)?;
        Some(self.map.remove(i).1)
    }
    fn has(&self, key: &str) -> bool {
        self.map.iter().any(|(k, _)| k == key)
    }
    fn token(&mut self, key: &str) -> Result<Option<String>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(Attr::Token(t)) => Ok(Some(t)),
            Some(other) => Err(format!("`{}` attribute `{key}` must be a plain value, found {other:?}", self.op)),
        }
    }
    fn need<T: std::str::FromStr>(&mut self, key: &str) -> Result<T, String> {
        self.opt(key)?.ok_or_else(|| format!("`{}` needs attribute `{key}`", self.op))
    }
    fn opt<T: std::str::FromStr>(&mut self, key: &str) -> Result<Option<T>, String> {
        match self.token(key)? {
            None => Ok(None),
            Some(t) => t.parse().map(Some).map_err(|_| format!("`{}` attribute `{key}`: cannot read `{t}`", self.op)),
        }
    }
    fn name(&mut self) -> Result<String, String> {
        match self.take("name") {
            Some(Attr::Str(s)) => Ok(s),
            _ => Err(format!("`{}` needs a string attribute `name`", self.op)),
        }
    }
    fn dim(&mut self, key: &str) -> Result<Dim, String> {
        let t: String = self.need(key)?;
        Dim::parse(&t).ok_or_else(|| format!("`{}` attribute `{key}`: `{t}` is not a dimension", self.op))
    }
    fn list(&mut self, key: &str) -> Result<Vec<String>, String> {
        match self.take(key) {
            Some(Attr::List(items)) => items
                .into_iter()
                .map(|a| match a {
                    Attr::Token(t) => Ok(t),
                    other => Err(format!("`{}` attribute `{key}`: unexpected {other:?}", self.op)),
                })
                .collect(),
            _ => Err(format!("`{}` needs a list attribute `{key}`", self.op)),
        }
    }
    fn finish(self) -> Result<(), String> {
        if let Some((k, _)) = self.map.first() {
            return Err(format!("`{}` has no attribute `{k}`", self.op));
        }
        Ok(())
    }
}

fn parse_type(c: &mut Cursor) -> Result<TensorType, String> {
    let dt = c.word();
    let dtype = DType::from_name(&dt).ok_or_else(|| format!("unknown dtype `{dt}`"))?;
    c.expect(b'[')?;
    let mut shape = Vec::new();
    if !c.eat(b']') {
        loop {
            let w = c.word();
            shape.push(Dim::parse(&w).ok_or_else(|| format!("`{w}` is not a dimension"))?);
            if c.eat(b']') {
                break;
            }
            c.expect(b',')?;
        }
    }
    Ok(TensorType::new(dtype, shape))
}

fn build_op(mnemonic: &str, mut a: Attrs, ty: Option<TensorType>) -> Result<Op, String> {
    let need_ty = |ty: Option<TensorType>| ty.ok_or_else(|| format!("`{mnemonic}` must declare its type after `:`"));
    let op = match mnemonic {
        "input" => Op::Input { name: a.name()?, ty: need_ty(ty)? },
        "weight" => Op::Weight { name: a.name()?, ty: need_ty(ty)? },
        "state" => Op::State { name: a.name()?, ty: need_ty(ty)? },
        "state_out" => Op::StateOut { name: a.name()? },
        "output" => Op::Output { name: a.name()? },
        "const" => Op::Const { value: a.need("value")?, ty: need_ty(ty)? },
        "reshape" => Op::Reshape {
            shape: a.list("shape")?.iter().map(|t| Dim::parse(t).ok_or_else(|| format!("`{t}` is not a dimension"))).collect::<Result<_, _>>()?,
        },
        "permute" => {
            Op::Permute { perm: a.list("perm")?.iter().map(|t| t.parse().map_err(|_| format!("`{t}` is not an axis"))).collect::<Result<_, _>>()? }
        }
        "narrow" => Op::Narrow { axis: a.need("axis")?, start: a.dim("start")?, len: a.dim("len")? },
        "concat" => Op::Concat { axis: a.need("axis")? },
        "gather" => Op::Gather,
        "contiguous" => Op::Contiguous,
        "clamp" => Op::Clamp { min: a.opt("min")?, max: a.opt("max")? },
        "reduce_sum" | "reduce_max" | "reduce_mean" => Op::Reduce {
            op: match mnemonic {
                "reduce_sum" => ReduceOp::Sum,
                "reduce_max" => ReduceOp::Max,
                _ => ReduceOp::Mean,
            },
            axis: a.need("axis")?,
        },
        "softmax" => Op::Softmax { axis: a.need("axis")?, softcap: a.opt("softcap")? },
        "top_k_mask" => Op::TopKMask { axis: a.need("axis")?, k: a.need("k")? },
        "glu" | "matmul_glu" | "norm_matmul_glu" => {
            let act: String = a.need("act")?;
            let act =
                *UnaryOp::ALL.iter().find(|u| u.name() == act).ok_or_else(|| format!("`{mnemonic}` attribute `act`: unknown activation `{act}`"))?;
            match mnemonic {
                "glu" => Op::Glu { act },
                "matmul_glu" => Op::MatMulGlu { act },
                _ => Op::NormMatMulGlu { act, eps: a.need("eps")? },
            }
        }
        "norm_matmul" => Op::NormMatMul { eps: a.need("eps")? },
        "matmul_add" => Op::MatMulAdd,
        "norm_add" => Op::NormAdd { eps: a.need("eps")? },
        "cast" => {
            let d: String = a.need("dtype")?;
            Op::Cast { dtype: DType::from_name(&d).ok_or_else(|| format!("unknown dtype `{d}`"))? }
        }
        "matmul" => Op::MatMul,
        "dequantize" => Op::Dequantize,
        "norm" => {
            let kind: String = a.need("kind")?;
            let kind = match kind.as_str() {
                "rms" => NormKind::Rms,
                "layer" => NormKind::Layer,
                k => return Err(format!("norm kind must be `rms` or `layer`, found `{k}`")),
            };
            Op::Norm { kind, eps: a.need("eps")? }
        }
        "rope" => {
            let (style, rotary_dim, theta, scaling) = parse_rope(&mut a)?;
            Op::Rope { style, rotary_dim, theta, scaling }
        }
        "norm_rope" => {
            let (style, rotary_dim, theta, scaling) = parse_rope(&mut a)?;
            Op::NormRope { eps: a.need("eps")?, style, rotary_dim, theta, scaling }
        }
        "attention" => Op::Attention {
            n_heads: a.need("n_heads")?,
            n_kv_heads: a.need("n_kv_heads")?,
            scale: a.need("scale")?,
            causal: a.need("causal")?,
            window: a.opt("window")?,
            softcap: a.opt("softcap")?,
            ring: a.opt("ring")?.unwrap_or(false),
        },
        "kv_append" => Op::KvAppend { axis: a.need("axis")?, cap: a.dim("cap")?, window: a.opt("window")? },
        "sparse_mixer" => Op::SparseMixer { jitter_eps: a.need("jitter_eps")? },
        "causal_conv1d" => Op::CausalConv1d { kernel: a.need("kernel")? },
        "gated_delta_rule" => Op::GatedDeltaRule,
        "to_host" => Op::ToHost { nonempty: a.opt("nonempty")?.unwrap_or(false), bound: a.opt("bound")? },
        m => {
            if let Some(u) = UnaryOp::ALL.iter().find(|u| u.name() == m) {
                Op::Unary(*u)
            } else if let Some(b) = BinaryOp::ALL.iter().find(|b| b.name() == m) {
                Op::Binary(*b)
            } else {
                return Err(format!("unknown op `{m}`"));
            }
        }
    };
    a.finish()?;
    Ok(op)
}

/// Parse the text form. Types after `:` on non-source nodes are kept and
/// checked by the verifier against what it infers.
pub fn parse(text: &str) -> Result<Graph, ParseError> {
    let mut graph: Option<Graph> = None;
    let mut ids: HashMap<String, NodeId> = HashMap::new();
    let mut layer: Option<u32> = None;
    let mut closed = false;
    for (lineno, raw) in text.lines().enumerate() {
        let line_no = lineno + 1;
        let perr = |message: String| ParseError { line: line_no, message };
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if closed {
            return Err(perr("text after the graph's closing `}`".into()));
        }
        let mut c = Cursor { s: line.as_bytes(), i: 0 };
        if graph.is_none() {
            if c.word() != "graph" {
                return Err(perr("expected `graph \"NAME\" {`".into()));
            }
            let name = c.string().map_err(perr)?;
            c.expect(b'{').map_err(perr)?;
            graph = Some(Graph::new(&name));
            continue;
        }
        let g = graph.as_mut().unwrap();
        if line == "}" {
            if layer.take().is_none() {
                closed = true;
            }
            continue;
        }
        if line.starts_with("layer ") {
            if layer.is_some() {
                return Err(perr("layer blocks do not nest".into()));
            }
            c.word();
            let n = c.word();
            layer = Some(n.parse().map_err(|_| perr(format!("`{n}` is not a layer number")))?);
            c.expect(b'{').map_err(perr)?;
            continue;
        }
        c.expect(b'%').map_err(perr)?;
        let name = c.word();
        if ids.contains_key(&name) {
            return Err(perr(format!("%{name} is defined twice")));
        }
        c.expect(b'=').map_err(perr)?;
        let mnemonic = c.word();
        let mut attrs = Attrs { map: Vec::new(), op: mnemonic.clone() };
        if c.eat(b'{') && !c.eat(b'}') {
            loop {
                let k = c.word();
                c.expect(b'=').map_err(perr)?;
                let v = c.attr().map_err(perr)?;
                if attrs.map.iter().any(|(kk, _)| *kk == k) {
                    return Err(perr(format!("attribute `{k}` given twice")));
                }
                attrs.map.push((k, v));
                if c.eat(b'}') {
                    break;
                }
                c.expect(b',').map_err(perr)?;
            }
        }
        let mut inputs = Vec::new();
        while c.eat(b'%') {
            let n = c.word();
            let id = ids.get(&n).ok_or_else(|| perr(format!("%{n} is used before it is defined")))?;
            inputs.push(*id);
            if !c.eat(b',') {
                break;
            }
        }
        let ty = if c.eat(b':') { Some(parse_type(&mut c).map_err(perr)?) } else { None };
        if !c.rest_is_empty() {
            return Err(perr(format!("unexpected text at column {}", c.i + 1)));
        }
        let op = build_op(&mnemonic, attrs, ty.clone()).map_err(perr)?;
        let id = g.add(op, &inputs, layer);
        if g.node(id).ty.is_none() {
            g.node_mut(id).ty = ty;
        }
        ids.insert(name, id);
    }
    match graph {
        Some(g) if closed => Ok(g),
        Some(_) => Err(ParseError { line: text.lines().count(), message: "missing the graph's closing `}`".into() }),
        None => Err(ParseError { line: 1, message: "empty input: expected `graph \"NAME\" {`".into() }),
    }
}
