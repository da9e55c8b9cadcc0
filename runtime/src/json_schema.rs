//! Structured outputs (OpenAI's `response_format: {"type": "json_schema"}`,
//! Ollama's `format: {schema}`): the sampler may only pick a token whose
//! bytes keep the text a prefix of a JSON value the schema admits, and an
//! end token only once it is complete.
//!
//! The schemas graphc generates for: objects of the properties listed and
//! no others (in any order, each at most once; the `required` ones all),
//! arrays of one item schema (`minItems`, `maxItems`), strings
//! (`minLength`, `maxLength`: characters, as JSON Schema counts them;
//! `pattern`: `json_pattern`'s ECMA-262 subset, each character taken only
//! where the string can still match; `format` `date`, `time`, `date-time`,
//! `uuid`, `ipv4` as the patterns they are), numbers,
//! integers and numbers (`minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum`: each digit taken only where the value can still end
//! in range; a bounded value has no exponent and at most 18 digits each
//! side of the point), booleans, null, `enum` / `const` (each value written as
//! its canonical JSON, each of the `type` beside it), `anyOf`, `oneOf`
//! where no value can be two of its alternatives (a discriminated union:
//! objects that each require one property whose string `const`/`enum`
//! values no other shares; `discriminator` is read as the annotation it
//! is), a list of scalar types (`["string",
//! "null"]`) and local references (`$ref` to `#`, `#/$defs/NAME`,
//! `#/definitions/NAME`: pydantic's nested and recursive models); the root
//! an object or an array (or any of several). Anything else a schema says
//! (an overlapping `oneOf`, another `format`, `multipleOf`, a remote `$ref`, ...) is refused naming
//! where it says it: a keyword ignored would let through values the
//! caller's schema forbids.
//!
//! `anyOf` makes the automaton nondeterministic: the value so far is a set
//! of threads, one for each alternative still alive (forked where a value
//! of an `anyOf` starts, equal threads merged), and a byte continues the
//! value where it continues any thread.

use crate::json_mode::{NumStage, StrLex, StrStep, MAX_BLANK_RUN, MAX_DEPTH};
use crate::json_pattern::{format_pattern, Pattern, PatternState};
use serde_json::Value;

/// A schema compiled for generation: its nodes, the root first.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    nodes: Vec<Node>,
    /// The strings' `pattern`s, which `Node::String` names by index.
    patterns: Vec<Pattern>,
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
    /// Properties: each key's JSON text (quotes included) and its value's
    /// node; `required`, a bit a property.
    Object { props: Vec<(Box<[u8]>, u16)>, required: u64 },
    /// Items of one node, `min..=max` of them (`minItems`, `maxItems`).
    Array { items: u16, min: u16, max: u16 },
    /// `min..=max` characters (`minLength`, `maxLength`), matching
    /// `patterns[pattern]` where set.
    String { min: u16, max: u16, pattern: Option<u16> },
    /// A number in `min..=max` where bounded (in units of 10^-18: `Bounds`).
    Number { bounds: Option<Bounds> },
    /// An integer in `min..=max` where bounded (in units of 1).
    Integer { bounds: Option<Bounds> },
    /// One of these JSON texts (an `enum`, a `const`, `true`/`false`, `null`).
    Literals(Vec<Box<[u8]>>),
    /// A value of any of these nodes.
    AnyOf(Vec<u16>),
}

/// A number's `minimum` / `maximum` (the exclusive ones as the inclusive
/// bounds they are: every value is a whole number of units), in units of
/// `unit`: 1 for an integer, 10^-18 for a number. A bounded value is
/// written in at most 18 integer digits and 18 fraction digits, without
/// an exponent (every value in range can be so written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bounds {
    min: i128,
    max: i128,
}

/// Units of 10^-18 in 1: a bounded number's fraction digits.
const NUMBER_UNIT: i128 = 1_000_000_000_000_000_000;
/// Most integer (and fraction) digits of a bounded number.
const MAX_BOUNDED_DIGITS: u8 = 18;

/// Why a schema is refused: where (a JSON-pointer-like path of keys) and why.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{path}: {why}")]
pub struct SchemaError {
    pub path: String,
    pub why: String,
}

/// Keywords that describe without constraining.
const ANNOTATIONS: &[&str] = &["description", "title", "$schema", "examples", "default"];
/// Most `enum` values (their candidates are a 64-bit set while matching).
const MAX_LITERALS: usize = 64;
/// Longest key or literal value, in bytes of JSON (matched with a u8 count).
const MAX_TEXT: usize = 250;
/// Most properties of one object (the ones written are a 64-bit set).
const MAX_PROPERTIES: usize = 64;
/// Most alternatives of one `anyOf` (each may fork a thread per value).
const MAX_ALTERNATIVES: usize = 16;

impl Schema {
    /// Compile `schema`; `path` names where it sits in the request (for errors).
    pub fn compile(schema: &Value, path: &str) -> Result<Schema, SchemaError> {
        let mut c = Compiler { nodes: vec![], patterns: vec![], root: schema, refs: Default::default() };
        c.node(schema, path, 0)?;
        let s = Schema { nodes: c.nodes, patterns: c.patterns };
        // References that name each other with no object or array between
        // would fork forever.
        for start in 0..s.nodes.len() as u16 {
            let mut seen = vec![start];
            let mut todo = s.alternatives(start).map(<[u16]>::to_vec).unwrap_or_default();
            while let Some(n) = todo.pop() {
                if n == start {
                    return Err(SchemaError { path: path.into(), why: "`$ref`s that name each other with no object or array between".into() });
                }
                if !seen.contains(&n) {
                    seen.push(n);
                    todo.extend(s.alternatives(n).unwrap_or_default());
                }
            }
        }
        if !s.is_container(0) {
            return Err(SchemaError { path: path.into(), why: "the root must be an object or an array".into() });
        }
        Ok(s)
    }

    /// Whether every value of `node` is an object or an array.
    fn is_container(&self, node: u16) -> bool {
        match &self.nodes[node as usize] {
            Node::Object { .. } | Node::Array { .. } => true,
            Node::AnyOf(alts) => alts.iter().all(|&a| self.is_container(a)),
            _ => false,
        }
    }

    /// The alternatives a value of `node` forks into, where it is an `anyOf`.
    /// A number node's bounds, where it has them.
    fn bounds(&self, node: u16) -> Option<Bounds> {
        match self.nodes[node as usize] {
            Node::Number { bounds } | Node::Integer { bounds } => bounds,
            _ => None,
        }
    }

    fn alternatives(&self, node: u16) -> Option<&[u16]> {
        match &self.nodes[node as usize] {
            Node::AnyOf(alts) => Some(alts),
            _ => None,
        }
    }
}

impl Compiler<'_> {
    /// The node `n` stands for, through `$ref`s (one-alternative `anyOf`s).
    fn resolved(&self, mut n: u16) -> &Node {
        while let Node::AnyOf(alts) = &self.nodes[n as usize] {
            match alts[..] {
                [one] => n = one,
                _ => break,
            }
        }
        &self.nodes[n as usize]
    }

    /// Whether every one of `alts` (objects) requires a property, the same
    /// one, whose literal values no two alternatives share: no value is two of them.
    fn has_discriminator(&self, alts: &[u16]) -> bool {
        let objects: Vec<&Node> = alts.iter().map(|&a| self.resolved(a)).collect();
        let Some(Node::Object { props, .. }) = objects.first() else { return false };
        'key: for (key, _) in props {
            let mut seen: Vec<&[u8]> = vec![];
            for object in &objects {
                let Node::Object { props, required } = object else { return false };
                let Some(i) = props.iter().position(|(k, _)| k == key) else { continue 'key };
                let Node::Literals(texts) = self.resolved(props[i].1) else { continue 'key };
                // Strings: their JSON texts are equal exactly where the values are (`1` and `1.0` are one number).
                let strings = texts.iter().all(|t| t.first() == Some(&b'"'));
                if required >> i & 1 == 0 || !strings || texts.iter().any(|t| seen.contains(&&t[..])) {
                    continue 'key;
                }
                seen.extend(texts.iter().map(|t| &t[..]));
            }
            return true;
        }
        false
    }
}

/// A schema being compiled: its nodes so far, the root (which `$ref`s
/// point into) and the node of each reference met.
struct Compiler<'a> {
    nodes: Vec<Node>,
    patterns: Vec<Pattern>,
    root: &'a Value,
    refs: std::collections::HashMap<String, u16>,
}

impl Compiler<'_> {
    fn node(&mut self, v: &Value, path: &str, depth: usize) -> Result<u16, SchemaError> {
        let err = |at: &str, why: &str| SchemaError { path: if at.is_empty() { path.to_string() } else { format!("{path}.{at}") }, why: why.into() };
        let Value::Object(o) = v else { return Err(err("", "a schema must be an object")) };
        // Each level may be a container the generation must be able to open.
        if depth >= MAX_DEPTH {
            return Err(err("", &format!("nests deeper than {MAX_DEPTH} levels")));
        }
        let id = self.nodes.len();
        if id >= u16::MAX as usize {
            return Err(err("", "too many nodes"));
        }
        self.nodes.push(Node::String { min: 0, max: u16::MAX, pattern: None }); // placeholder, set below
        if let Some(r) = o.get("$ref") {
            // A reference: a node of one alternative, the schema it names
            // (compiled once, so a recursive one closes a loop).
            self.nodes.pop();
            let beside = |k: &str| k == "$ref" || ANNOTATIONS.contains(&k) || (depth == 0 && (k == "$defs" || k == "definitions"));
            if let Some(k) = o.keys().find(|k| !beside(k)) {
                return Err(err(k, "a keyword beside `$ref` is not implemented"));
            }
            let Value::String(r) = r else { return Err(err("$ref", "must be a string")) };
            if let Some(&known) = self.refs.get(r) {
                return Ok(known);
            }
            let Some(target) = resolve(self.root, r) else {
                return Err(err("$ref", "names no schema here (references within the schema: `#`, `#/$defs/NAME`, `#/definitions/NAME`)"));
            };
            self.nodes.push(Node::AnyOf(vec![]));
            self.refs.insert(r.clone(), id as u16);
            let inner = self.node(target, &format!("{path}.$ref({r})"), depth)?;
            self.nodes[id] = Node::AnyOf(vec![inner]);
            return Ok(id as u16);
        }
        // A count keyword (`minItems`, `maxLength`, ...), where the schema has it.
        let bound = |k: &str, default: u16| match o.get(k) {
            None => Ok(default),
            Some(v) => v.as_u64().filter(|&n| n < u16::MAX as u64).map(|n| n as u16).ok_or_else(|| err(k, "must be a count below 65535")),
        };
        let literals = |values: Vec<&Value>, at: &str| -> Result<Node, SchemaError> {
            if values.is_empty() || values.len() > MAX_LITERALS {
                return Err(err(at, &format!("1 to {MAX_LITERALS} values")));
            }
            let texts: Vec<Box<[u8]>> = values.iter().map(|v| v.to_string().into_bytes().into_boxed_slice()).collect();
            if texts.iter().any(|t| t.len() > MAX_TEXT) {
                return Err(err(at, &format!("a value of more than {MAX_TEXT} bytes")));
            }
            Ok(Node::Literals(texts))
        };
        let known: &[&str] = match o.get("type") {
            _ if o.contains_key("anyOf") => &["anyOf", "$defs", "definitions"],
            _ if o.contains_key("oneOf") => &["oneOf", "discriminator", "$defs", "definitions"],
            Some(Value::Array(_)) => &["type"],
            Some(Value::String(t)) if t == "object" => &["type", "properties", "required", "additionalProperties", "$defs", "definitions"],
            Some(Value::String(t)) if t == "array" => &["type", "items", "minItems", "maxItems", "$defs", "definitions"],
            Some(Value::String(t)) if t == "string" && (o.contains_key("enum") || o.contains_key("const")) => &["type", "enum", "const"],
            Some(Value::String(t)) if t == "string" => &["type", "minLength", "maxLength", "pattern", "format"],
            Some(Value::String(t)) if t == "integer" && (o.contains_key("enum") || o.contains_key("const")) => &["type", "enum", "const"],
            Some(Value::String(t)) if t == "integer" || t == "number" => &["type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"],
            _ => &["type", "enum", "const"],
        };
        if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str())) {
            return Err(err(k, "this keyword is not implemented"));
        }
        // Definitions are read where a `$ref` names them, from the root.
        if let Some(k) = ["$defs", "definitions"].iter().find(|k| o.contains_key(**k) && depth > 0) {
            return Err(err(k, "definitions are read at the root only"));
        }
        let alternatives = |s: &mut Compiler, schemas: Vec<(Value, String)>, at: &str| -> Result<Node, SchemaError> {
            if schemas.is_empty() || schemas.len() > MAX_ALTERNATIVES {
                return Err(err(at, &format!("1 to {MAX_ALTERNATIVES} alternatives")));
            }
            let alts = schemas.iter().map(|(v, p)| s.node(v, p, depth + 1)).collect::<Result<_, _>>()?;
            Ok(Node::AnyOf(alts))
        };
        // `enum` / `const` beside a `type`: each value must be of it.
        if let (Some(Value::String(t)), Some((key, values))) =
            (o.get("type"), o.get("enum").map(|v| ("enum", v)).or(o.get("const").map(|v| ("const", v))))
        {
            let values: Vec<&Value> = match (key, values) {
                ("enum", Value::Array(a)) => a.iter().collect(),
                ("enum", _) => return Err(err("enum", "must be an array")),
                (_, v) => vec![v],
            };
            let of_type = |v: &Value| match t.as_str() {
                "string" => v.is_string(),
                "integer" => v.is_i64() || v.is_u64(),
                "number" => v.is_number(),
                "boolean" => v.is_boolean(),
                "null" => v.is_null(),
                _ => false,
            };
            if let Some(v) = values.iter().find(|v| !of_type(v)) {
                return Err(err(key, &format!("holds {v}, not of type `{t}`")));
            }
        }
        let node = if let Some(any) = o.get("anyOf") {
            let Value::Array(schemas) = any else { return Err(err("anyOf", "must be an array of schemas")) };
            let schemas = schemas.iter().enumerate().map(|(i, v)| (v.clone(), format!("{path}.anyOf[{i}]"))).collect();
            alternatives(self, schemas, "anyOf")?
        } else if let Some(one) = o.get("oneOf") {
            // Exactly one alternative: read as `anyOf` where no value can be
            // two of them, which a discriminator shows (pydantic's tagged unions).
            let Value::Array(schemas) = one else { return Err(err("oneOf", "must be an array of schemas")) };
            let schemas = schemas.iter().enumerate().map(|(i, v)| (v.clone(), format!("{path}.oneOf[{i}]"))).collect();
            let node = alternatives(self, schemas, "oneOf")?;
            let Node::AnyOf(alts) = &node else { unreachable!("alternatives are an anyOf") };
            if !self.has_discriminator(alts) {
                return Err(err(
                    "oneOf",
                    "alternatives that may overlap are not implemented: each must be an object with a required property (the same one) \
                     whose `const` or `enum` values no other alternative's share",
                ));
            }
            node
        } else if let Some(Value::Array(types)) = o.get("type") {
            // A list of scalar types: a value of any (objects and arrays
            // would need their keywords split among the alternatives).
            let mut schemas = Vec::with_capacity(types.len());
            for (i, t) in types.iter().enumerate() {
                match t.as_str() {
                    Some("string" | "number" | "integer" | "boolean" | "null") => {
                        schemas.push((serde_json::json!({ "type": t }), format!("{path}.type[{i}]")))
                    }
                    _ => return Err(err(&format!("type[{i}]"), "a list of types may name string, number, integer, boolean and null")),
                }
            }
            alternatives(self, schemas, "type")?
        } else if let Some(Value::Array(values)) = o.get("enum") {
            literals(values.iter().collect(), "enum")?
        } else if o.contains_key("enum") {
            return Err(err("enum", "must be an array"));
        } else if let Some(c) = o.get("const") {
            literals(vec![c], "const")?
        } else {
            match o.get("type") {
                Some(Value::String(t)) => match t.as_str() {
                    "object" => {
                        let props = match o.get("properties") {
                            None => serde_json::Map::new(),
                            Some(Value::Object(p)) => p.clone(),
                            Some(_) => return Err(err("properties", "must be an object")),
                        };
                        if props.len() > MAX_PROPERTIES {
                            return Err(err("properties", &format!("more than {MAX_PROPERTIES} properties")));
                        }
                        if !matches!(o.get("additionalProperties"), None | Some(Value::Bool(false))) {
                            return Err(err("additionalProperties", "only false is implemented (the properties listed, and no others)"));
                        }
                        let mut fields = Vec::with_capacity(props.len());
                        for (k, p) in &props {
                            let key = Value::String(k.clone()).to_string().into_bytes().into_boxed_slice();
                            if key.len() > MAX_TEXT {
                                return Err(err(&format!("properties.{k}"), &format!("a key of more than {MAX_TEXT} bytes")));
                            }
                            let child = self.node(p, &format!("{path}.properties.{k}"), depth + 1)?;
                            fields.push((key, child));
                        }
                        // The required ones, by their place among the properties.
                        let mut required = 0u64;
                        match o.get("required") {
                            None => {}
                            Some(Value::Array(names)) => {
                                for (j, name) in names.iter().enumerate() {
                                    let at = name.as_str().and_then(|n| props.keys().position(|k| k == n));
                                    let Some(i) = at else { return Err(err(&format!("required[{j}]"), "names no property of the schema")) };
                                    required |= 1 << i;
                                }
                            }
                            Some(_) => return Err(err("required", "must be an array of property names")),
                        }
                        Node::Object { props: fields, required }
                    }
                    "array" => {
                        let Some(items) = o.get("items") else { return Err(err("items", "an array needs its item schema")) };
                        let (min, max) = (bound("minItems", 0)?, bound("maxItems", u16::MAX)?);
                        if min > max {
                            return Err(err("minItems", "is more than maxItems"));
                        }
                        Node::Array { items: self.node(items, &format!("{path}.items"), depth + 1)?, min, max }
                    }
                    "string" => {
                        let (min, max) = (bound("minLength", 0)?, bound("maxLength", u16::MAX)?);
                        if min > max {
                            return Err(err("minLength", "is more than maxLength"));
                        }
                        let source = match (o.get("pattern"), o.get("format")) {
                            (Some(_), Some(_)) => return Err(err("format", "a `format` beside a `pattern` is not implemented")),
                            (None, None) => None,
                            (Some(Value::String(p)), None) => Some((p.clone(), "pattern")),
                            (None, Some(Value::String(f))) => {
                                let p = format_pattern(f).ok_or_else(|| {
                                    err("format", &format!("`{f}` is not implemented (graphc writes date, time, date-time, uuid and ipv4)"))
                                })?;
                                Some((p, "format"))
                            }
                            (Some(_), None) => return Err(err("pattern", "must be a string")),
                            (None, Some(_)) => return Err(err("format", "must be a string")),
                        };
                        let pattern = match source {
                            None => None,
                            Some((p, key)) => {
                                self.patterns.push(Pattern::compile(&p).map_err(|why| err(key, &why))?);
                                Some((self.patterns.len() - 1) as u16)
                            }
                        };
                        Node::String { min, max, pattern }
                    }
                    "number" => Node::Number { bounds: bounds(o, false).map_err(|(k, why)| err(k, &why))? },
                    "integer" => Node::Integer { bounds: bounds(o, true).map_err(|(k, why)| err(k, &why))? },
                    "boolean" => literals(vec![&Value::Bool(true), &Value::Bool(false)], "type")?,
                    "null" => literals(vec![&Value::Null], "type")?,
                    other => return Err(err("type", &format!("`{other}` is not a JSON type"))),
                },
                Some(_) => return Err(err("type", "must be a type's name or a list of them")),
                None => return Err(err("", "needs a `type`, an `enum` or a `const`")),
            }
        };
        self.nodes[id] = node;
        Ok(id as u16)
    }
}

/// What the next byte may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// A value of this node (whitespace first).
    Value(u16),
    /// After `{`: the first key, or `}` where none is required.
    ObjectOpen,
    /// After `,` in an object: a key.
    NextKey,
    /// A key of the open object's properties not yet written: `at` bytes
    /// matched, `candidates` still alive.
    Key {
        at: u8,
        candidates: u64,
    },
    /// After a key: `:`.
    Colon,
    /// After `[`: `]`, or an item, a value of this node.
    ArrayFirst(u16),
    /// After a value: what its container takes next.
    AfterValue,
    /// Inside a string of `min..=max` characters, `chars` so far (a
    /// string with no bounds counts none: 0 to `u16::MAX`); its
    /// pattern's index and state where it has one.
    Str {
        lex: StrLex,
        chars: u16,
        min: u16,
        max: u16,
        pattern: Option<(u16, PatternState)>,
    },
    /// Inside a number of `node` (`integer`: no fraction or exponent);
    /// where it is bounded, its magnitude so far in its units, whether
    /// it is negative, and its integer and fraction digits.
    Num {
        stage: NumStage,
        integer: bool,
        node: u16,
        magnitude: i128,
        negative: bool,
        int_digits: u8,
        frac_digits: u8,
    },
    /// Matching a `Literals` node's texts: `at` bytes, `candidates` still alive.
    Literal {
        node: u16,
        at: u8,
        candidates: u64,
    },
    Done,
}

/// An open container: its node, and how far it is (the property being
/// written and those written, or the items so far).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct Frame {
    node: u16,
    index: u16,
    written: u64,
}

/// A prefix of a JSON value a `Schema` admits, advanced byte by byte: the
/// threads still alive (one but where an `anyOf` forked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaPrefix {
    threads: Vec<Thread>,
}

impl Default for SchemaPrefix {
    fn default() -> Self {
        SchemaPrefix { threads: vec![Thread::default()] }
    }
}

impl SchemaPrefix {
    /// Whether it is one thread inside a free string with nothing pending
    /// (any `json_mode::plain_in_string` bytes keep it so).
    pub fn in_clean_string(&self) -> bool {
        matches!(&self.threads[..], [t] if t.mode == Mode::Str { lex: StrLex::default(), chars: 0, min: 0, max: u16::MAX, pattern: None })
    }

    /// Whether the value may end here (an end token may follow).
    pub fn is_done(&self) -> bool {
        self.threads.iter().any(|t| t.mode == Mode::Done)
    }

    /// Feed `bytes`; `false` (the state unspecified) where one cannot continue.
    pub fn feed(&mut self, schema: &Schema, bytes: &[u8]) -> bool {
        for &b in bytes {
            // One thread that does not fork here: stepped in place.
            if let [t] = &mut self.threads[..] {
                if t.fork(schema).is_none() {
                    if !t.byte(schema, b) {
                        return false;
                    }
                    continue;
                }
            }
            let mut next = Vec::with_capacity(self.threads.len());
            for t in &self.threads {
                t.step_forking(schema, b, &mut |t| {
                    if !next.contains(&t) {
                        next.push(t)
                    }
                });
            }
            if next.is_empty() {
                return false;
            }
            self.threads = next;
        }
        true
    }

    /// Whether `bytes` would continue the value (the state unchanged).
    pub fn accepts(&self, schema: &Schema, bytes: &[u8]) -> bool {
        self.threads.iter().any(|t| t.accepts(schema, bytes))
    }
}

/// One way of reading the value so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Thread {
    frames: [Frame; MAX_DEPTH],
    depth: u8,
    mode: Mode,
    blank_run: u8,
}

impl Default for Thread {
    fn default() -> Self {
        Thread { frames: [Frame::default(); MAX_DEPTH], depth: 0, mode: Mode::Value(0), blank_run: 0 }
    }
}

impl Thread {
    /// Where a value of an `anyOf` starts: the modes of its alternatives.
    fn fork(&self, s: &Schema) -> Option<Vec<Mode>> {
        match self.mode {
            Mode::Value(n) => s.alternatives(n).map(|alts| alts.iter().map(|&a| Mode::Value(a)).collect()),
            Mode::ArrayFirst(n) => s.alternatives(n).map(|alts| alts.iter().map(|&a| Mode::ArrayFirst(a)).collect()),
            _ => None,
        }
    }

    /// Each thread `b` continues this one into (forking at an `anyOf`).
    fn step_forking(&self, s: &Schema, b: u8, out: &mut dyn FnMut(Thread)) {
        if let Some(modes) = self.fork(s) {
            for mode in modes {
                Thread { mode, ..*self }.step_forking(s, b, out);
            }
            return;
        }
        let mut t = *self;
        if t.byte(s, b) {
            out(t);
        }
    }

    /// Whether `bytes` continue this thread (or a fork of it).
    fn accepts(&self, s: &Schema, bytes: &[u8]) -> bool {
        let mut t = *self;
        for (i, &b) in bytes.iter().enumerate() {
            if matches!(t.mode, Mode::Value(n) | Mode::ArrayFirst(n) if s.alternatives(n).is_some()) {
                let mut any = false;
                t.step_forking(s, b, &mut |next| any = any || next.accepts(s, &bytes[i + 1..]));
                return any;
            }
            if !t.byte(s, b) {
                return false;
            }
        }
        true
    }

    fn byte(&mut self, s: &Schema, b: u8) -> bool {
        match self.mode {
            Mode::Str { lex, chars, min, max, pattern } => {
                let bounded = (min, max) != (0, u16::MAX);
                // A character starts where nothing is pending, at any byte but the closing quote.
                let starts = lex == StrLex::default() && b != b'"';
                // With bounds, no `\uD...` escape: a surrogate pair would be
                // two escapes for one character (U+D000..U+D7FF can be written as themselves).
                if bounded && lex.starts_unicode_escape() && matches!(b, b'd' | b'D') {
                    return false;
                }
                let step = lex.step(b);
                // The string's own bytes, unescaped, for its pattern.
                let pattern = match (pattern, &step) {
                    (Some((i, at)), Some(StrStep::Inside(_))) => {
                        let p = &s.patterns[i as usize];
                        let unescaped = match (lex.in_escape(), b) {
                            // No `\u` escape in a patterned string: the character can be written as itself.
                            (true, b'u') => return false,
                            (true, _) => Some(unescape(b)),
                            (false, b'\\') => None,
                            (false, _) => Some(b),
                        };
                        let next = unescaped.map_or(Some(at), |c| p.step(at, &[c]));
                        match next {
                            Some(next) => Some((i, next)),
                            None => return false,
                        }
                    }
                    (Some((i, at)), Some(StrStep::Closed)) if !s.patterns[i as usize].ends_matched(at) => return false,
                    _ => pattern,
                };
                self.mode = match step {
                    Some(StrStep::Inside(lex)) if bounded && starts => {
                        if chars >= max {
                            return false;
                        }
                        Mode::Str { lex, chars: chars + 1, min, max, pattern }
                    }
                    Some(StrStep::Inside(lex)) => Mode::Str { lex, chars, min, max, pattern },
                    Some(StrStep::Closed) if chars < min => return false,
                    Some(StrStep::Closed) => Mode::AfterValue,
                    None => return false,
                };
                return true;
            }
            Mode::Key { at, candidates } => {
                let props = self.properties(s);
                let alive = candidates & props.iter().enumerate().fold(0u64, |m, (i, p)| m | (u64::from(p.0.get(at as usize) == Some(&b)) << i));
                if alive == 0 {
                    return false;
                }
                // A key ends with its closing quote, so a whole one is the only one alive.
                let whole = (0..props.len()).find(|&i| alive >> i & 1 == 1 && props[i].0.len() == at as usize + 1);
                self.mode = match whole {
                    Some(i) => {
                        let f = &mut self.frames[self.depth as usize - 1];
                        f.index = i as u16;
                        f.written |= 1 << i;
                        Mode::Colon
                    }
                    None => Mode::Key { at: at + 1, candidates: alive },
                };
                return true;
            }
            Mode::Literal { node, at, candidates } => {
                let Node::Literals(texts) = &s.nodes[node as usize] else { unreachable!("a literal's node") };
                let next = candidates & texts.iter().enumerate().fold(0u64, |m, (i, t)| m | (u64::from(t.get(at as usize) == Some(&b)) << i));
                if next != 0 {
                    self.mode = Mode::Literal { node, at: at + 1, candidates: next };
                    return true;
                }
                // Ended, where a candidate is whole: `b` follows the value.
                let whole = texts.iter().enumerate().any(|(i, t)| candidates >> i & 1 == 1 && t.len() == at as usize);
                if !whole {
                    return false;
                }
                self.mode = Mode::AfterValue;
            }
            Mode::Num { stage, integer, node, magnitude, negative, int_digits, frac_digits } => {
                let bounds = s.bounds(node);
                if let Some(next) = stage.next(b, integer) {
                    let mut num = Mode::Num { stage: next, integer, node, magnitude, negative, int_digits, frac_digits };
                    if let Some(bounds) = bounds {
                        match bounded_step(num, b) {
                            Some(stepped) if can_end_in(stepped, bounds) => num = stepped,
                            _ => return false,
                        }
                    }
                    self.mode = num;
                    return true;
                }
                if !stage.complete() || bounds.is_some_and(|bounds| !ends_in(self.mode, bounds)) {
                    return false;
                }
                self.mode = Mode::AfterValue;
            }
            _ => {}
        }
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            if self.mode == Mode::Done || self.blank_run >= MAX_BLANK_RUN {
                return false;
            }
            self.blank_run += 1;
            return true;
        }
        self.blank_run = 0;
        match self.mode {
            Mode::Value(node) => self.value_start(s, node, b),
            Mode::ObjectOpen if b == b'}' && self.required(s) == 0 => self.close(),
            Mode::ObjectOpen | Mode::NextKey => self.key_start(s, b),
            Mode::Colon => {
                self.mode = Mode::Value(self.properties(s)[self.top().index as usize].1);
                b == b':'
            }
            Mode::ArrayFirst(_) if b == b']' => self.array_bounds(s).0 == 0 && self.close(),
            Mode::ArrayFirst(items) => self.value_start(s, items, b),
            Mode::AfterValue => {
                let top = self.top();
                match &s.nodes[top.node as usize] {
                    // A comma while a property is left; the close once the required are written.
                    Node::Object { props, required } => match b {
                        b',' if (top.written.count_ones() as usize) < props.len() => {
                            // The next key, whitespace first.
                            self.mode = Mode::NextKey;
                            true
                        }
                        b'}' if top.written & required == *required => self.close(),
                        _ => false,
                    },
                    // `index + 1` items written.
                    Node::Array { items, min, max } => match b {
                        b',' if top.index + 1 < *max => {
                            self.frames[self.depth as usize - 1].index += 1;
                            self.mode = Mode::Value(*items);
                            true
                        }
                        b']' if top.index + 1 >= *min => self.close(),
                        _ => false,
                    },
                    _ => unreachable!("a container's frame"),
                }
            }
            Mode::Done => false,
            Mode::Str { .. } | Mode::Key { .. } | Mode::Literal { .. } | Mode::Num { .. } => unreachable!("handled above"),
        }
    }

    /// The open array's (`minItems`, `maxItems`).
    fn array_bounds(&self, s: &Schema) -> (u16, u16) {
        let Node::Array { min, max, .. } = s.nodes[self.top().node as usize] else { unreachable!("an open array") };
        (min, max)
    }

    fn top(&self) -> Frame {
        self.frames[self.depth as usize - 1]
    }

    /// The open object's properties.
    fn properties<'s>(&self, s: &'s Schema) -> &'s [(Box<[u8]>, u16)] {
        let Node::Object { props, .. } = &s.nodes[self.top().node as usize] else { unreachable!("an open object") };
        props
    }

    /// The open object's required properties, a bit each.
    fn required(&self, s: &Schema) -> u64 {
        let Node::Object { required, .. } = &s.nodes[self.top().node as usize] else { unreachable!("an open object") };
        *required
    }

    /// A key's first byte: any property not yet written.
    fn key_start(&mut self, s: &Schema, b: u8) -> bool {
        let written = self.top().written;
        let candidates =
            self.properties(s).iter().enumerate().fold(0u64, |m, (i, p)| m | (u64::from(written >> i & 1 == 0 && p.0.first() == Some(&b)) << i));
        if candidates == 0 {
            return false;
        }
        self.mode = Mode::Key { at: 1, candidates };
        true
    }

    fn value_start(&mut self, s: &Schema, node: u16, b: u8) -> bool {
        self.mode = match &s.nodes[node as usize] {
            Node::Object { .. } | Node::Array { .. } => {
                let open = if matches!(s.nodes[node as usize], Node::Object { .. }) { b'{' } else { b'[' };
                if b != open || self.depth as usize == MAX_DEPTH {
                    return false;
                }
                self.frames[self.depth as usize] = Frame { node, index: 0, written: 0 };
                self.depth += 1;
                match &s.nodes[node as usize] {
                    Node::Array { items, .. } => Mode::ArrayFirst(*items),
                    _ => Mode::ObjectOpen,
                }
            }
            &Node::String { min, max, pattern } if b == b'"' => {
                let pattern = pattern.map(|i| (i, s.patterns[i as usize].start()));
                Mode::Str { lex: StrLex::default(), chars: 0, min, max, pattern }
            }
            Node::Number { .. } | Node::Integer { .. } => {
                let Some(stage) = NumStage::start(b) else { return false };
                let integer = matches!(s.nodes[node as usize], Node::Integer { .. });
                let start = Mode::Num { stage, integer, node, magnitude: 0, negative: b == b'-', int_digits: 0, frac_digits: 0 };
                match s.bounds(node) {
                    None => start,
                    Some(bounds) => match bounded_step(start, b) {
                        Some(num) if can_end_in(num, bounds) => num,
                        _ => return false,
                    },
                }
            }
            Node::Literals(texts) => {
                let candidates = texts.iter().enumerate().fold(0u64, |m, (i, t)| m | (u64::from(t.first() == Some(&b)) << i));
                if candidates == 0 {
                    return false;
                }
                Mode::Literal { node, at: 1, candidates }
            }
            Node::String { .. } => return false,
            Node::AnyOf(_) => unreachable!("an `anyOf` forks before its value starts"),
        };
        true
    }

    fn close(&mut self) -> bool {
        self.depth -= 1;
        self.mode = if self.depth == 0 { Mode::Done } else { Mode::AfterValue };
        true
    }
}

/// The byte a one-character escape (`\n`, `\"`, ...) stands for, after its `\`.
fn unescape(b: u8) -> u8 {
    match b {
        b'b' => 0x08,
        b'f' => 0x0C,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        other => other, // `"`, `\\`, `/`
    }
}

/// A schema's `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`
/// as `Bounds` in units of 1 (`integer`) or 10^-18; `None` without any.
/// `Err`: the keyword and why.
fn bounds(o: &serde_json::Map<String, Value>, integer: bool) -> Result<Option<Bounds>, (&'static str, String)> {
    let keys = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];
    if keys.iter().all(|k| !o.contains_key(*k)) {
        return Ok(None);
    }
    let limit = 10i128.pow(MAX_BOUNDED_DIGITS as u32) * unit(integer);
    let (mut min, mut max) = (-limit + 1, limit - 1);
    for k in keys {
        let Some(v) = o.get(k) else { continue };
        let Some(x) = v.as_number().and_then(|n| scaled_decimal(&n.to_string())) else {
            return Err((k, format!("must be a number of at most {MAX_BOUNDED_DIGITS} digits before and after the point")));
        };
        // An integer's bound as the integers it admits (`minimum` 1.5 is 2).
        let (floor, ceil) = if integer { (x.div_euclid(NUMBER_UNIT), (x + NUMBER_UNIT - 1).div_euclid(NUMBER_UNIT)) } else { (x, x) };
        match k {
            "minimum" => min = min.max(ceil),
            "exclusiveMinimum" => min = min.max(floor + 1),
            "maximum" => max = max.min(floor),
            _ => max = max.min(ceil - 1),
        }
    }
    if min > max {
        return Err(("minimum", format!("leaves no {} in range (it is above the maximum)", if integer { "integer" } else { "number" })));
    }
    Ok(Some(Bounds { min, max }))
}

/// A JSON number's text as a whole number of 10^-18 units, where it is one
/// below 10^36 (a bound of 18 digits each side of the point at most).
fn scaled_decimal(text: &str) -> Option<i128> {
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = whole.chars().chain(fraction.chars()).collect();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 40 {
        return None;
    }
    let shift = 18 + exponent - fraction.len() as i32;
    let mut value: i128 = digits.parse().ok()?;
    if shift >= 0 {
        value = value.checked_mul(10i128.checked_pow(shift as u32)?)?;
    } else {
        let divisor = 10i128.checked_pow((-shift) as u32)?;
        if value % divisor != 0 {
            return None;
        }
        value /= divisor;
    }
    (value < 10i128.pow(36)).then_some(if negative { -value } else { value })
}

/// A bounded value's unit: 1 for an integer, `NUMBER_UNIT` (10^-18 in 1) for a number.
fn unit(integer: bool) -> i128 {
    if integer {
        1
    } else {
        NUMBER_UNIT
    }
}

/// A bounded number after byte `b` (already taken by its stage): its
/// magnitude and digits counted, or `None` where it may not go on (an
/// exponent, or past 18 digits either side of the point).
fn bounded_step(num: Mode, b: u8) -> Option<Mode> {
    let Mode::Num { stage, integer, node, magnitude, negative, int_digits, frac_digits } = num else { unreachable!("a number") };
    let unit = unit(integer);
    let d = match b {
        b'0'..=b'9' => (b - b'0') as i128,
        b'-' | b'.' => return Some(num),
        _ => return None, // an exponent: a bounded value is written without one
    };
    Some(match stage {
        NumStage::Frac => {
            if frac_digits >= MAX_BOUNDED_DIGITS {
                return None;
            }
            let place = unit / 10i128.pow(frac_digits as u32 + 1);
            Mode::Num { stage, integer, node, magnitude: magnitude + d * place, negative, int_digits, frac_digits: frac_digits + 1 }
        }
        _ => {
            if int_digits >= MAX_BOUNDED_DIGITS {
                return None;
            }
            Mode::Num { stage, integer, node, magnitude: magnitude * 10 + d * unit, negative, int_digits: int_digits + 1, frac_digits }
        }
    })
}

/// Whether a bounded number so far can still end within `bounds`: the
/// magnitudes its next digits reach — after `-`, any; at a leading `0`,
/// 0 (or `0.…` for a number); in the integer digits `p`, `[p·10^j,
/// (p+1)·10^j)` for each count `j` of digits still to come (any fraction
/// beneath them); after the point, `[p, p+1)`; in the fraction, the
/// values its further digits reach — negated after a `-`.
fn can_end_in(num: Mode, bounds: Bounds) -> bool {
    let Mode::Num { stage, integer, magnitude, negative, int_digits, frac_digits, .. } = num else { unreachable!("a number") };
    let unit = unit(integer);
    // Whether some value of magnitude in [lo, hi) is in bounds.
    let meets = |lo: i128, hi: i128| {
        let (low, high) = if negative { (-(hi - 1), -lo) } else { (lo, hi - 1) };
        low <= bounds.max && high >= bounds.min
    };
    let whole = 10i128.pow(MAX_BOUNDED_DIGITS as u32) * unit;
    match stage {
        NumStage::Minus => meets(0, whole),
        // `0`, and a number's `0.…` (an integer's unit is 1: `0` alone).
        NumStage::Zero => meets(0, unit),
        NumStage::Int => (0..=(MAX_BOUNDED_DIGITS - int_digits) as u32).any(|j| {
            let scale = 10i128.pow(j);
            meets(magnitude * scale, (magnitude + unit) * scale)
        }),
        NumStage::Dot => meets(magnitude, magnitude + unit),
        NumStage::Frac => meets(magnitude, magnitude + unit / 10i128.pow(frac_digits as u32)),
        _ => false,
    }
}

/// Whether a bounded number that ends here is within `bounds`.
fn ends_in(num: Mode, bounds: Bounds) -> bool {
    let Mode::Num { magnitude, negative, .. } = num else { unreachable!("a number") };
    let value = if negative { -magnitude } else { magnitude };
    (bounds.min..=bounds.max).contains(&value)
}

/// The schema a local reference names: `#` (the root), `#/$defs/NAME`,
/// `#/definitions/NAME` (JSON-pointer escapes `~0` `~1` read).
fn resolve<'v>(root: &'v Value, r: &str) -> Option<&'v Value> {
    if r == "#" {
        return Some(root);
    }
    let rest = r.strip_prefix("#/")?;
    let (table, name) = rest.split_once('/')?;
    if !matches!(table, "$defs" | "definitions") || name.contains('/') {
        return None;
    }
    root.get(table)?.get(name.replace("~1", "/").replace("~0", "~"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn city() -> Schema {
        let s = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "its name"},
                "population": {"type": "integer"},
                "area": {"type": "number"},
                "capital": {"type": "boolean"},
                "mayor": {"type": "null"},
                "kind": {"enum": ["city", "town", 3]},
                "districts": {"type": "array", "items": {"type": "object", "properties": {"n": {"const": 1}}}}
            },
            "required": ["city", "population", "area", "capital", "mayor", "kind", "districts"],
            "additionalProperties": false
        });
        Schema::compile(&s, "schema").unwrap()
    }

    fn complete(s: &Schema, text: &str) -> bool {
        let mut p = SchemaPrefix::default();
        p.feed(s, text.as_bytes()) && p.is_done()
    }

    #[test]
    fn instances_are_accepted_whole_and_as_prefixes() {
        let s = city();
        let docs = [
            r#"{"population": 3, "kind": "town", "city": "Nîmes", "area": 1, "capital": false, "mayor": null, "districts": []}"#,
            r#"{"city": "Paris", "population": 2100000, "area": 105.4, "capital": true, "mayor": null, "kind": "city", "districts": [{"n": 1}, {"n": 1}]}"#,
            "{\n  \"city\": \"Lyon\",\n  \"population\": -0,\n  \"area\": 4.8e1,\n  \"capital\": false,\n  \"mayor\": null,\n  \"kind\": 3,\n  \"districts\": []\n}",
        ];
        for doc in docs {
            assert!(complete(&s, doc), "{doc}");
            for cut in (0..doc.len()).filter(|&i| doc.is_char_boundary(i)) {
                let mut p = SchemaPrefix::default();
                assert!(p.feed(&s, &doc.as_bytes()[..cut]), "prefix {:?}", &doc[..cut]);
            }
        }
    }

    /// `minLength` / `maxLength` count characters (code points, as JSON
    /// Schema does): a multi-byte character or an escape is one. A string
    /// closed too soon or a character past the bound is refused; with a
    /// bound, no `\uD...` escape (a surrogate pair would be two escapes for
    /// one character). The control: the same strings without bounds.
    #[test]
    fn string_lengths_count_characters() {
        let bounded = Schema::compile(&json!({"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 4}}), "s").unwrap();
        let free = Schema::compile(&json!({"type": "array", "items": {"type": "string"}}), "s").unwrap();
        for ok in [r#"["ab"]"#, r#"["abcd"]"#, "[\"é日\"]", r#"["a\n"]"#, r#"["\u00e9\u00e9\u00e9\u00e9"]"#, r#"["ab", "abc"]"#] {
            assert!(complete(&bounded, ok), "{ok}");
            assert!(complete(&free, ok), "{ok}");
        }
        for bad in [r#"["a"]"#, r#"[""]"#, r#"["abcde"]"#, "[\"日本語の文\"]", r#"["ab\t\t\t"]"#, r#"["\ud83d\ude00x"]"#, r#"["ab", "a"]"#] {
            assert!(!complete(&bounded, bad), "{bad}");
            let mut p = SchemaPrefix::default();
            assert!(p.feed(&free, bad.as_bytes()) && p.is_done(), "the control: {bad}");
        }
        // A prefix that can still grow is kept; the fifth character is not.
        let mut p = SchemaPrefix::default();
        assert!(p.feed(&bounded, br#"["a"#) && !p.accepts(&bounded, b"\"") && p.accepts(&bounded, b"bcd\""));
        assert!(!p.accepts(&bounded, b"bcde"));
        assert!(!p.in_clean_string(), "a bounded string counts its characters: no unchecked fast path");
        let e = Schema::compile(&json!({"type": "array", "items": {"type": "string", "minLength": 3, "maxLength": 2}}), "s").unwrap_err();
        assert_eq!(e.to_string(), "s.items.minLength: is more than maxLength");
    }

    /// A `pattern` (ECMA-262, `json_pattern`): each character taken only
    /// where the string can still match, the closing quote only where it
    /// does; escapes unescaped for it (no `\u` escape in a patterned
    /// string). The control: the same strings without the pattern.
    #[test]
    fn patterns_admit_the_strings_they_match() {
        let dated = Schema::compile(&json!({"type": "array", "items": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"}}), "s").unwrap();
        let free = Schema::compile(&json!({"type": "array", "items": {"type": "string"}}), "s").unwrap();
        assert!(complete(&dated, r#"["2026-12-07", "1999-01-31"]"#));
        for bad in [r#"["2026-12-7"]"#, r#"["2026-12-07 "]"#, r#"["26-12-07"]"#, r#"["2026\u002d12-07"]"#] {
            assert!(!complete(&dated, bad), "{bad}");
            let mut p = SchemaPrefix::default();
            assert!(p.feed(&free, bad.as_bytes()) && p.is_done(), "the control: {bad}");
        }
        let mut p = SchemaPrefix::default();
        assert!(p.feed(&dated, br#"["2026-1"#) && p.accepts(&dated, b"2") && !p.accepts(&dated, b"x") && !p.accepts(&dated, b"\""));
        assert!(!p.in_clean_string(), "a patterned string is checked byte by byte");
        // An escape is the character it stands for: a tab matches `\s`.
        let tabbed = Schema::compile(&json!({"type": "array", "items": {"type": "string", "pattern": "^a\\sb$"}}), "s").unwrap();
        assert!(complete(&tabbed, r#"["a\tb"]"#) && complete(&tabbed, r#"["a b"]"#) && !complete(&tabbed, r#"["a\\b"]"#));
        // A `format` is the pattern it is (`json_pattern::format_pattern`).
        let stamped = Schema::compile(&json!({"type": "array", "items": {"type": "string", "format": "date-time"}}), "s").unwrap();
        assert!(complete(&stamped, r#"["2024-02-29T23:59:59.5+02:00"]"#) && !complete(&stamped, r#"["2026-02-29T00:00:00Z"]"#));
        let e = Schema::compile(&json!({"type": "array", "items": {"type": "string", "pattern": "(?=x)"}}), "s").unwrap_err();
        assert!(e.to_string().starts_with("s.items.pattern: lookarounds"), "{e}");
    }

    /// An array of `kind` items with `bounds` (`{}`: none).
    fn bounded(kind: &str, bounds: Value) -> Schema {
        let mut item = json!({ "type": kind });
        item.as_object_mut().unwrap().extend(bounds.as_object().unwrap().clone());
        Schema::compile(&json!({"type": "array", "items": item}), "s").unwrap()
    }

    /// Each case's good texts admitted and bad ones refused, the bad ones
    /// admitted without the bounds (the control).
    fn admits_within(kind: &str, cases: &[(Value, Vec<&str>, Vec<&str>)]) {
        let free = bounded(kind, json!({}));
        for (bounds, good, bad) in cases {
            let s = bounded(kind, bounds.clone());
            for g in good {
                assert!(complete(&s, g), "{bounds} admits {g}");
            }
            for b in bad {
                assert!(!complete(&s, b), "{bounds} refuses {b}");
                assert!(complete(&free, b), "the control: {b}");
            }
        }
    }

    /// An integer's bounds: each digit is taken only where the integer can
    /// still end in range (a rating 1..5 takes `5` but not `6` or `50`;
    /// `-` only where negatives are admitted), and an integer ends only in
    /// range. `exclusive*` and fractional bounds are the integers they
    /// admit. The control: the same texts without bounds.
    #[test]
    fn integer_bounds_admit_the_integers_in_range() {
        let schema = |bounds: Value| bounded("integer", bounds);
        admits_within(
            "integer",
            &[
                (json!({"minimum": 1, "maximum": 5}), vec!["[1]", "[5]", "[3, 4]"], vec!["[0]", "[6]", "[50]", "[-1]", "[10]"]),
                (json!({"minimum": 10, "maximum": 250}), vec!["[10]", "[99]", "[250]", "[199]"], vec!["[9]", "[1]", "[251]", "[300]", "[1000]"]),
                (json!({"minimum": -20, "maximum": -3}), vec!["[-3]", "[-20]", "[-15]"], vec!["[-2]", "[-21]", "[0]", "[-0]", "[3]"]),
                (json!({"exclusiveMinimum": 0, "exclusiveMaximum": 3}), vec!["[1]", "[2]"], vec!["[0]", "[3]"]),
                (json!({"minimum": 1.5, "maximum": 2.5}), vec!["[2]"], vec!["[1]", "[3]"]),
                (json!({"minimum": 0}), vec!["[0]", "[-0]", "[123456789012]"], vec!["[-1]", "[-5000]"]),
            ],
        );
        // Digit by digit: 1..5 takes `5` and then only the end; 10..250 takes `2` (20..25, 200..250).
        let mut p = SchemaPrefix::default();
        assert!(p.feed(&schema(json!({"minimum": 1, "maximum": 5})), b"[5") && !p.accepts(&schema(json!({"minimum": 1, "maximum": 5})), b"0"));
        let s = schema(json!({"minimum": 10, "maximum": 250}));
        let mut p = SchemaPrefix::default();
        assert!(p.feed(&s, b"[2") && p.accepts(&s, b"5") && p.accepts(&s, b"50") && !p.accepts(&s, b"51") && !p.accepts(&s, b"]"));
        let e = Schema::compile(&json!({"type": "array", "items": {"type": "integer", "minimum": 3, "maximum": 2}}), "s").unwrap_err();
        assert_eq!(e.to_string(), "s.items.minimum: leaves no integer in range (it is above the maximum)");
        let e = Schema::compile(&json!({"type": "array", "items": {"type": "number", "multipleOf": 3}}), "s").unwrap_err();
        assert_eq!(e.to_string(), "s.items.multipleOf: this keyword is not implemented");
    }

    /// pydantic's discriminated union: `oneOf` of objects told apart by a
    /// required `const` property (`discriminator` beside it). Each
    /// alternative admitted whole, no mixture; a `oneOf` whose alternatives
    /// may overlap refused (exactly one must match, which an `anyOf`
    /// reading cannot promise); a `const` of another type than its `type`
    /// refused.
    #[test]
    fn one_of_a_discriminated_union_admits_each_member() {
        let s = json!({
            "type": "object",
            "properties": {"pet": {
                "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
                "discriminator": {"propertyName": "pet_type", "mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"}}
            }},
            "required": ["pet"],
            "additionalProperties": false,
            "$defs": {
                "Cat": {"type": "object", "properties": {"pet_type": {"const": "cat", "type": "string"}, "meows": {"type": "integer"}},
                        "required": ["pet_type", "meows"], "additionalProperties": false},
                "Dog": {"type": "object", "properties": {"pet_type": {"const": "dog", "type": "string"}, "barks": {"type": "number"}},
                        "required": ["pet_type", "barks"], "additionalProperties": false}
            }
        });
        let s = Schema::compile(&s, "schema").unwrap();
        assert!(complete(&s, r#"{"pet": {"pet_type": "cat", "meows": 3}}"#));
        assert!(complete(&s, r#"{"pet": {"barks": 1.5, "pet_type": "dog"}}"#));
        for bad in [r#"{"pet": {"pet_type": "cat", "barks": 1}}"#, r#"{"pet": {"pet_type": "cow", "meows": 1}}"#, r#"{"pet": {"meows": 1}}"#] {
            assert!(!complete(&s, bad), "{bad}");
        }
        for (schema, path) in [
            (json!({"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}}), "s.items.oneOf"),
            (
                json!({"type": "array", "items": {"oneOf": [
                    {"type": "object", "properties": {"k": {"const": "a"}}, "required": ["k"]},
                    {"type": "object", "properties": {"k": {"enum": ["b", "a"]}}, "required": ["k"]}]}}),
                "s.items.oneOf",
            ),
            (
                json!({"type": "array", "items": {"oneOf": [
                    {"type": "object", "properties": {"k": {"const": "a"}}},
                    {"type": "object", "properties": {"k": {"const": "b"}}}]}}),
                "s.items.oneOf",
            ),
            (json!({"type": "array", "items": {"type": "string", "const": 3}}), "s.items.const"),
            (json!({"type": "array", "items": {"type": "string", "enum": ["ab"], "minLength": 3}}), "s.items.minLength"),
        ] {
            let e = Schema::compile(&schema, "s").unwrap_err();
            assert_eq!(e.path, path, "{schema}: {e}");
        }
    }

    /// A number's bounds (a confidence in 0..1, a temperature above -273.15):
    /// each digit taken only where the number can still end in range, no
    /// exponent while bounded, an exclusive bound the values beside it.
    /// The control: the same texts without bounds.
    #[test]
    fn number_bounds_admit_the_numbers_in_range() {
        let schema = |bounds: Value| bounded("number", bounds);
        admits_within(
            "number",
            &[
                (
                    json!({"minimum": 0, "maximum": 1}),
                    vec!["[0]", "[1]", "[0.5]", "[1.0]", "[0.999]", "[-0]", "[1.000]"],
                    vec!["[1.5]", "[-0.1]", "[2]", "[10]", "[1.01]", "[1e-3]"],
                ),
                (json!({"exclusiveMinimum": -273.15}), vec!["[-273.1]", "[-273.149]", "[20.5]", "[0]"], vec!["[-273.15]", "[-273.16]", "[-300]"]),
                (json!({"minimum": 0.25, "exclusiveMaximum": 0.5}), vec!["[0.25]", "[0.3]", "[0.4999]"], vec!["[0.5]", "[0.2]", "[0.24999]", "[0]"]),
            ],
        );
        // 0..1: after `0.` any digit; after `1` only `.0…` or the end; `-` only toward -0.
        let s = schema(json!({"minimum": 0, "maximum": 1}));
        let mut p = SchemaPrefix::default();
        assert!(p.feed(&s, b"[1") && p.accepts(&s, b".000]") && !p.accepts(&s, b".001") && !p.accepts(&s, b"0") && p.accepts(&s, b"]"));
        let mut p = SchemaPrefix::default();
        assert!(p.feed(&s, b"[-") && p.accepts(&s, b"0]") && !p.accepts(&s, b"0.1") && !p.accepts(&s, b"1"));
        // Random bounds and texts: admitted exactly where the value is in range.
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..300 {
            let (a, b) = (next(4000) as f64 / 100.0 - 20.0, next(4000) as f64 / 100.0 - 20.0);
            let (lo, hi) = (a.min(b), a.max(b));
            let s = schema(json!({"minimum": lo, "maximum": hi}));
            for _ in 0..20 {
                let whole = next(30) as i64 - 15;
                let text = match next(3) {
                    0 => format!("{whole}"),
                    1 => format!("{whole}.{}", next(100)),
                    _ => format!("{whole}.{:03}", next(1000)),
                };
                let value: f64 = text.parse().unwrap();
                // Compared exactly, as whole numbers of 10^-18 units (f64 would round).
                let scaled = scaled_decimal(&text).unwrap();
                let (l, h) = (scaled_decimal(&format!("{lo}")).unwrap(), scaled_decimal(&format!("{hi}")).unwrap());
                assert_eq!(complete(&s, &format!("[{text}]")), (l..=h).contains(&scaled), "[{lo}, {hi}] and {text} ({value})");
            }
        }
        let e = Schema::compile(&json!({"type": "array", "items": {"type": "number", "minimum": 2, "maximum": 1.5}}), "s").unwrap_err();
        assert_eq!(e.to_string(), "s.items.minimum: leaves no number in range (it is above the maximum)");
    }

    #[test]
    fn what_the_schema_forbids_is_refused() {
        let s = city();
        let good = r#"{"city": "Paris", "population": 2, "area": 1, "capital": true, "mayor": null, "kind": "town", "districts": []}"#;
        assert!(complete(&s, good));
        for (from, to) in [
            (r#""population": 2"#, r#""population": 2.5"#),         // an integer
            (r#""population": 2"#, r#""population": "2""#),         // a number, not a string
            (r#""city": "Paris", "#, ""),                           // a property missing
            (r#""kind": "town""#, r#""kind": "village""#),          // not in the enum
            (r#""mayor": null"#, r#""mayor": 0"#),                  // null
            (r#""capital": true"#, r#""capital": 1"#),              // a boolean
            (r#""districts": []"#, r#""districts": [{"n": 2}]"#),   // the const
            (r#"{"city""#, r#"{"town""#),                           // another key
            (r#""mayor": null"#, r#""city": "again""#),             // a key twice
            (r#""districts": []}"#, r#""districts": [], "x": 1}"#), // no other properties
        ] {
            let bad = good.replacen(from, to, 1);
            assert_ne!(bad, good);
            assert!(!complete(&s, &bad), "{bad}");
        }
    }

    /// Properties not in `required` may be left out (or written, once);
    /// the required ones may not; a comma never trails.
    #[test]
    fn optional_properties_may_be_left_out() {
        let s =
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "null"}}, "required": ["b"]});
        let s = Schema::compile(&s, "schema").unwrap();
        for good in [r#"{"b": "x"}"#, r#"{"a": 1, "b": "x"}"#, r#"{"b": "x", "c": null, "a": 2}"#] {
            assert!(complete(&s, good), "{good}");
        }
        for bad in [r#"{}"#, r#"{"a": 1}"#, r#"{"b": "x",}"#, r#"{"b": "x", "b": "y"}"#, r#"{"b": "x", "d": 1}"#] {
            assert!(!complete(&s, bad), "{bad}");
        }
        // Without `required`, none is: `{}` too.
        let none = Schema::compile(&json!({"type": "object", "properties": {"a": {"type": "integer"}}}), "schema").unwrap();
        assert!(complete(&none, "{}") && complete(&none, r#"{"a": 1}"#) && !complete(&none, "{,}"));
    }

    /// A tool call's shape: which arguments are admitted depends on the
    /// name written first, so each alternative is its own thread.
    #[test]
    fn any_of_admits_each_alternative_and_no_mixture() {
        let call = |name: &str, args: Value| json!({"type": "object", "properties": {"name": {"const": name}, "arguments": args}, "required": ["name", "arguments"]});
        let s = json!({"anyOf": [
            call("add", json!({"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"]})),
            call("greet", json!({"type": "object", "properties": {"who": {"type": ["string", "null"]}}, "required": ["who"]})),
        ]});
        let s = Schema::compile(&s, "schema").unwrap();
        let docs = [
            r#"{"name": "add", "arguments": {"x": 1, "y": -2}}"#,
            r#"{"arguments": {"who": null}, "name": "greet"}"#,
            r#"{"name": "greet", "arguments": {"who": "Ada"}}"#,
        ];
        for doc in docs {
            assert!(complete(&s, doc), "{doc}");
            for cut in 0..doc.len() {
                let p = SchemaPrefix::default();
                assert!(p.accepts(&s, &doc.as_bytes()[..cut]), "prefix {:?}", &doc[..cut]);
            }
        }
        for bad in [
            r#"{"name": "add", "arguments": {"who": "Ada"}}"#,
            r#"{"name": "greet", "arguments": {"x": 1, "y": 2}}"#,
            r#"{"name": "add", "arguments": {"x": 1}}"#,
            r#"{"name": "greet", "arguments": {"who": 3}}"#,
            r#"{"name": "sub", "arguments": {"x": 1, "y": 2}}"#,
        ] {
            assert!(!complete(&s, bad), "{bad}");
        }
        // Items of several kinds; a fork merges back where the threads agree.
        let items =
            Schema::compile(&json!({"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]}}), "s").unwrap();
        assert!(complete(&items, r#"[1, "a", null, 2]"#) && complete(&items, "[]") && !complete(&items, "[true]"));
        let mut p = SchemaPrefix::default();
        assert!(p.feed(&items, b"[1, \"a\", null, 2,"));
        assert_eq!(p.threads.len(), 1, "threads that agree are merged: {:?}", p.threads.len());
        // Prefixes agree with feeding.
        let mut p = SchemaPrefix::default();
        assert!(p.feed(&s, br#"{"name": "gr"#) && p.accepts(&s, br#"eet""#) && !p.accepts(&s, br#"x""#));
    }

    /// Pydantic's shape: nested models as `$defs` named by `$ref`, a
    /// recursive one, `Optional` as `anyOf` with null; and array bounds.
    #[test]
    fn references_and_array_bounds() {
        let s = json!({
            "$defs": {
                "Address": {"type": "object", "title": "Address", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false},
                "Node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}, "required": ["v", "kids"]}
            },
            "type": "object",
            "properties": {
                "home": {"$ref": "#/$defs/Address"},
                "work": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]},
                "tree": {"$ref": "#/$defs/Node"},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}
            },
            "required": ["home", "work", "tree", "tags"]
        });
        let s = Schema::compile(&s, "schema").unwrap();
        let good = r#"{"home": {"city": "Oslo"}, "work": null, "tree": {"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]}, "tags": ["a"]}"#;
        assert!(complete(&s, good));
        assert!(complete(&s, &good.replace(r#""work": null"#, r#""work": {"city": "Bergen"}"#)));
        assert!(complete(&s, &good.replace(r#"["a"]"#, r#"["a", "b"]"#)));
        for (from, to) in [
            (r#"{"city": "Oslo"}"#, r#"{"town": "Oslo"}"#),          // the referenced model's keys
            (r#""work": null"#, r#""work": 1"#),                     // neither alternative
            (r#"{"v": 4, "kids": []}"#, r#"{"v": 4, "kids": [1]}"#), // the recursion holds deep down
            (r#"["a"]"#, "[]"),                                      // minItems
            (r#"["a"]"#, r#"["a", "b", "c"]"#),                      // maxItems
        ] {
            let bad = good.replacen(from, to, 1);
            assert_ne!(bad, good);
            assert!(!complete(&s, &bad), "{bad}");
        }
    }

    #[test]
    fn schemas_graphc_cannot_honour_are_refused_naming_where() {
        for (schema, path) in [
            (json!({"type": "string"}), "schema"),
            (json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}), "schema.required[0]"),
            (json!({"type": "object", "properties": {}, "additionalProperties": true}), "schema.additionalProperties"),
            (json!({"type": "object", "properties": {"a": {"anyOf": []}}}), "schema.properties.a.anyOf"),
            (json!({"type": "object", "properties": {"a": {"type": ["string", "object"]}}}), "schema.properties.a.type[1]"),
            (json!({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}], "type": "string"}}}), "schema.properties.a.type"),
            (json!({"anyOf": [{"type": "object"}, {"type": "string"}]}), "schema"),
            (
                json!({"type": "object", "properties": {"a": {"anyOf": [{"type": "number", "multipleOf": 3}]}}}),
                "schema.properties.a.anyOf[0].multipleOf",
            ),
            (json!({"type": "array", "items": {"type": "number", "maximum": 1e-19}}), "schema.items.maximum"),
            (json!({"type": "array", "items": {"type": "integer", "multipleOf": 2}}), "schema.items.multipleOf"),
            (json!({"type": "array", "items": {"type": "integer", "minimum": 1e30}}), "schema.items.minimum"),
            (json!({"type": "array", "items": {"type": "string", "pattern": "(a)\\1"}}), "schema.items.pattern"),
            (json!({"type": "array", "items": {"type": "string", "format": "email"}}), "schema.items.format"),
            (json!({"type": "array", "items": {"type": "string", "format": "date", "pattern": "^2"}}), "schema.items.format"),
            (json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}}), "schema.properties.a.$ref"),
            (json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}), "schema.properties.a.$ref"),
            (
                json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/b", "type": "string"}}, "$defs": {"b": {"type": "string"}}}),
                "schema.properties.a.type",
            ),
            (json!({"type": "object", "properties": {"a": {"type": "object", "$defs": {}}}}), "schema.properties.a.$defs"),
            (json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}), "schema"),
            (json!({"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 2}), "schema.minItems"),
        ] {
            let e = Schema::compile(&schema, "schema").unwrap_err();
            assert_eq!(e.path, path, "{schema}: {e}");
        }
        // Deeper than a generation can open containers.
        let deep = (0..40).fold(json!({"type": "integer"}), |inner, _| json!({"type": "array", "items": inner}));
        let e = Schema::compile(&deep, "schema").unwrap_err();
        assert_eq!(e.path, format!("schema{}", ".items".repeat(MAX_DEPTH)), "{e}");
        let shallow = (0..MAX_DEPTH - 1).fold(json!({"type": "integer"}), |inner, _| json!({"type": "array", "items": inner}));
        assert!(Schema::compile(&shallow, "schema").is_ok());
    }
}
