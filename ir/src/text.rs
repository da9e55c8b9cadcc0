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
use crate::op::Op;
use crate::shape::{Dim, TensorType};
use crate::signature::{self, Attr, AttrValue, Attributes};
use crate::DType;
use std::collections::HashMap;
use std::fmt::Write;

/// Reads an op's attributes off it, in its signature's order.
struct Printer(Vec<(&'static str, Attr)>);

impl Attributes for Printer {
    fn name(&mut self, _: &'static str) -> Result<(), String> {
        Ok(())
    }
    fn value<T: AttrValue>(&mut self, key: &'static str, value: &mut T) -> Result<(), String> {
        self.0.push((key, value.to_attr()));
        Ok(())
    }
    fn optional<T: AttrValue>(&mut self, key: &'static str, value: &mut Option<T>) -> Result<(), String> {
        if let Some(v) = value {
            self.value(key, v)?;
        }
        Ok(())
    }
    fn flag(&mut self, key: &'static str, value: &mut bool) -> Result<(), String> {
        if *value {
            self.value(key, value)?;
        }
        Ok(())
    }
    fn declared_type(&mut self, _: &mut TensorType) -> Result<(), String> {
        Ok(()) // printed after `:` with every node's type
    }
    fn given(&self, _: &str) -> Option<bool> {
        None
    }
}

fn op_attrs(op: &Op) -> Vec<(&'static str, Attr)> {
    let mut printer = Printer(Vec::new());
    // Reading attributes off an op cannot fail.
    let _ = signature::attributes(&mut op.clone(), &mut printer);
    printer.0
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

/// Writes an op's attributes from a parsed line: each key the signature
/// names is taken from the line, and a key it does not name is an error.
struct Reader {
    map: Vec<(String, Attr)>,
    op: String,
    ty: Option<TensorType>,
}

impl Reader {
    fn take(&mut self, key: &str) -> Option<Attr> {
        let i = self.map.iter().position(|(k, _)| k == key)?;
        Some(self.map.remove(i).1)
    }
    fn finish(self) -> Result<(), String> {
        if let Some((k, _)) = self.map.first() {
            return Err(format!("`{}` has no attribute `{k}`", self.op));
        }
        Ok(())
    }
}

impl Attributes for Reader {
    fn name(&mut self, _: &'static str) -> Result<(), String> {
        Ok(())
    }
    fn value<T: AttrValue>(&mut self, key: &'static str, value: &mut T) -> Result<(), String> {
        let mut read = None;
        self.optional(key, &mut read)?;
        *value = read.ok_or_else(|| format!("`{}` needs attribute `{key}`", self.op))?;
        Ok(())
    }
    fn optional<T: AttrValue>(&mut self, key: &'static str, value: &mut Option<T>) -> Result<(), String> {
        *value = match self.take(key) {
            None => None,
            Some(attr) => Some(T::from_attr(attr).map_err(|e| format!("`{}` attribute `{key}`: {e}", self.op))?),
        };
        Ok(())
    }
    fn flag(&mut self, key: &'static str, value: &mut bool) -> Result<(), String> {
        let mut read = None;
        self.optional(key, &mut read)?;
        *value = read.unwrap_or(false);
        Ok(())
    }
    fn declared_type(&mut self, ty: &mut TensorType) -> Result<(), String> {
        *ty = self.ty.clone().ok_or_else(|| format!("`{}` must declare its type after `:`", self.op))?;
        Ok(())
    }
    fn given(&self, key: &str) -> Option<bool> {
        Some(self.map.iter().any(|(k, _)| k == key))
    }
}

/// The op a line names, its attributes read by its signature.
fn build_op(mnemonic: &str, mut reader: Reader) -> Result<Op, String> {
    static PROTOTYPES: std::sync::OnceLock<HashMap<String, Op>> = std::sync::OnceLock::new();
    let prototypes = PROTOTYPES.get_or_init(|| signature::prototypes().into_iter().map(|op| (op.mnemonic(), op)).collect());
    let mut op = prototypes.get(mnemonic).cloned().ok_or_else(|| format!("unknown op `{mnemonic}`"))?;
    signature::attributes(&mut op, &mut reader)?;
    reader.finish()?;
    Ok(op)
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
        let mut attrs = Reader { map: Vec::new(), op: mnemonic.clone(), ty: None };
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
        attrs.ty = ty.clone();
        let op = build_op(&mnemonic, attrs).map_err(perr)?;
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
