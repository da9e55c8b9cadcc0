//! Function calls in the words a chat template teaches its model: which
//! format a template's tools section asks for, how a call is written (for
//! a forced call, the text it starts with and the JSON schema of its
//! object), and how a generated text splits into content and calls.
//!
//! Formats, told apart by what the template prints:
//! - `Hermes` (Qwen2.5, Qwen3, SmolLM3, Hermes): `<tool_call>\n{"name":
//!   ..., "arguments": {...}}\n</tool_call>`, one block a call; an answer
//!   that is only such an object (bare, or in a ```json fence), as small
//!   models write it, is read as one call too (as llama.cpp reads it);
//! - `QwenXml` (Qwen3-Coder): `<tool_call>\n<function=NAME>\n<parameter=KEY>\n
//!   value\n</parameter>...</function>\n</tool_call>`, values as text (read
//!   as JSON where the parameter is not a string: `coerce_arguments`);
//!   no forced call (a JSON schema cannot hold it);
//! - `Llama3Json` (Llama 3.1/3.2/3.3): the whole answer one object
//!   `{"name": ..., "parameters": {...}}` (after `<|python_tag|>`, a
//!   control token left out of the text);
//! - `Mistral` (v3 templates: Mistral 7B v0.3, NeMo): the control token
//!   `[TOOL_CALLS]`, then a JSON array of `{"name": ..., "arguments": {...}}`;
//!   `Granite` (Granite 3.x) the same after its `<|tool_call|>`;
//! - `MistralArgs` (Mistral's later templates: Small 3.2, Devstral,
//!   Magistral, Ministral 3): each call `[TOOL_CALLS]name[ARGS]{...}`, with
//!   `[CALL_ID]id` before `[ARGS]` where the template prints call ids — all
//!   three control tokens, so such an answer is read from its token ids,
//!   cut at them (`parse_controlled`), not from its visible text.
//!
//! A template that prints none of these shows the model no tools in a
//! form graphc can read back: tools are refused for it, not ignored.
//! A text that starts a call but does not finish one (malformed JSON, an
//! unknown function) is returned whole as content, as the model wrote it.

use crate::detokenize::tag_prefix_len;
use serde_json::{json, Map, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    Hermes,
    QwenXml,
    Llama3Json,
    Mistral,
    Granite,
    /// `call_id`: the template prints `[CALL_ID]id` in a call.
    MistralArgs {
        call_id: bool,
    },
    /// OpenAI's harmony (gpt-oss): a `commentary` message addressed
    /// `to=functions.NAME`, its body the arguments, read by token id
    /// (`crate::harmony`).
    Harmony,
}

/// A control token a call format is written with (never in the visible text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// `[TOOL_CALLS]`: a call (for `Mistral`, the calls) begins.
    Calls,
    /// `[CALL_ID]`: the call's id follows.
    CallId,
    /// `[ARGS]`: the call's arguments follow.
    Args,
}

/// One call read back from the model's text.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedCall {
    pub name: String,
    /// A JSON object.
    pub arguments: Value,
    /// The call's id where the model wrote one (Mistral's templates show
    /// `"id"` beside each call in the history, so its models write them).
    pub id: Option<String>,
}

/// A generated text, split.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    /// What the model said outside its calls.
    pub content: String,
    pub calls: Vec<ParsedCall>,
}

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const XML_FUNCTION: &str = "<function=";
/// Mistral's call marker: a control token, absent from the visible text.
pub const MISTRAL_MARKER: &str = "[TOOL_CALLS]";
const MISTRAL_CALL_ID: &str = "[CALL_ID]";
/// Granite's call marker, a control token as Mistral's.
const GRANITE_MARKER: &str = "<|tool_call|>";
const MISTRAL_ARGS: &str = "[ARGS]";

impl ToolFormat {
    /// The format `template` teaches, where it reads `tools`.
    pub fn of_template(template: &str) -> Option<ToolFormat> {
        if !template.contains("tools") {
            return None;
        }
        if crate::harmony::template_is_harmony(template) && template.contains("functions.") {
            Some(ToolFormat::Harmony)
        } else if template.contains(HERMES_OPEN) && template.contains(XML_FUNCTION) {
            Some(ToolFormat::QwenXml)
        } else if template.contains(HERMES_OPEN) {
            Some(ToolFormat::Hermes)
        } else if template.contains(MISTRAL_MARKER) && template.contains(MISTRAL_ARGS) {
            Some(ToolFormat::MistralArgs { call_id: template.contains(MISTRAL_CALL_ID) })
        } else if template.contains(MISTRAL_MARKER) {
            Some(ToolFormat::Mistral)
        } else if template.contains(GRANITE_MARKER) {
            Some(ToolFormat::Granite)
        } else if template.contains("\"parameters\": ") || template.contains("<|python_tag|>") {
            Some(ToolFormat::Llama3Json)
        } else {
            None
        }
    }

    /// The text a call starts with, before its JSON (appended to the
    /// prompt where a call is forced); for `MistralArgs`, the whole head of
    /// a call of `function` (with `id` where the format prints ids), its
    /// JSON being the arguments alone.
    pub fn call_prefix(&self, function: &str, id: &str) -> String {
        match self {
            ToolFormat::Hermes | ToolFormat::QwenXml => "<tool_call>\n".into(),
            ToolFormat::Llama3Json => String::new(),
            ToolFormat::Mistral => MISTRAL_MARKER.into(),
            ToolFormat::Granite => GRANITE_MARKER.into(),
            ToolFormat::MistralArgs { call_id: true } => format!("{MISTRAL_MARKER}{function}{MISTRAL_CALL_ID}{id}{MISTRAL_ARGS}"),
            ToolFormat::MistralArgs { call_id: false } => format!("{MISTRAL_MARKER}{function}{MISTRAL_ARGS}"),
            // After the generation prompt's `<|start|>assistant`.
            ToolFormat::Harmony => format!("<|channel|>commentary to=functions.{function} <|constrain|>json<|message|>"),
        }
    }

    /// The control tokens this format writes calls with, by their text.
    pub fn controls(&self) -> &'static [(Control, &'static str)] {
        match self {
            ToolFormat::Mistral => &[(Control::Calls, MISTRAL_MARKER)],
            ToolFormat::Granite => &[(Control::Calls, GRANITE_MARKER)],
            ToolFormat::MistralArgs { .. } => &[(Control::Calls, MISTRAL_MARKER), (Control::CallId, MISTRAL_CALL_ID), (Control::Args, MISTRAL_ARGS)],
            _ => &[],
        }
    }

    /// Whether a call can be forced (generated under a JSON schema).
    pub fn can_force(&self) -> bool {
        !matches!(self, ToolFormat::QwenXml)
    }

    /// Whether one forced call can name any of several functions (for
    /// `MistralArgs` the name is in the prefix, so one function only).
    pub fn forces_a_choice_of_functions(&self) -> bool {
        !matches!(self, ToolFormat::MistralArgs { .. } | ToolFormat::Harmony)
    }

    /// Whether a forced call's prefix names its function, so the JSON
    /// generated is the arguments alone.
    pub fn prefix_names_the_function(&self) -> bool {
        matches!(self, ToolFormat::MistralArgs { .. } | ToolFormat::Harmony)
    }

    /// The key a call's arguments go under.
    fn arguments_key(&self) -> &'static str {
        match self {
            ToolFormat::Llama3Json => "parameters",
            _ => "arguments",
        }
    }

    /// The id a call is answered with (OpenAI's `tool_calls[i].id`), which
    /// the client sends back in the history: Mistral's templates (and
    /// `mistral_common`) refuse any id that is not 9 letters and digits, so
    /// there the model's own id is kept when it is one, else 9 are made
    /// from `answer` and `index`; other formats get `call_{answer}_{index}`.
    pub fn call_id(&self, call: &ParsedCall, answer: &str, index: usize) -> String {
        match self {
            ToolFormat::Mistral | ToolFormat::MistralArgs { .. } => match &call.id {
                Some(id) if id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()) => id.clone(),
                _ => {
                    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
                    // FNV-1a of the answer's id and the index: distinct per call, stable per answer.
                    let mut h = format!("{answer}/{index}").bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3));
                    (0..9)
                        .map(|_| {
                            let c = ALPHABET[(h % 62) as usize] as char;
                            h /= 62;
                            c
                        })
                        .collect()
                }
            },
            _ => format!("call_{answer}_{index}"),
        }
    }

    /// The JSON schema of a forced call's value (after `call_prefix`):
    /// an object naming one of `functions` (name, parameters schema) with
    /// that function's arguments; for Mistral, an array of such calls (one
    /// or more; one only unless `parallel`); for `MistralArgs`, the one
    /// function's parameters.
    pub fn call_schema(&self, functions: &[(String, Value)], parallel: bool) -> Value {
        if let (ToolFormat::MistralArgs { .. } | ToolFormat::Harmony, [(_, parameters)]) = (self, functions) {
            return parameters.clone();
        }
        let mut defs = Map::new();
        let calls: Vec<Value> = functions
            .iter()
            .map(|(name, parameters)| {
                let mut props = Map::new();
                props.insert("name".into(), json!({ "const": name }));
                props.insert(self.arguments_key().into(), relocate(name, parameters, &mut defs));
                json!({"type": "object", "properties": props, "required": ["name", self.arguments_key()], "additionalProperties": false})
            })
            .collect();
        let one = if calls.len() == 1 { calls.into_iter().next().expect("one") } else { json!({ "anyOf": calls }) };
        let mut root = match self {
            ToolFormat::Mistral | ToolFormat::Granite if parallel => json!({"type": "array", "items": one, "minItems": 1}),
            ToolFormat::Mistral | ToolFormat::Granite => json!({"type": "array", "items": one, "minItems": 1, "maxItems": 1}),
            _ => one,
        };
        if !defs.is_empty() {
            root["$defs"] = Value::Object(defs);
        }
        root
    }

    /// Split `text` (what the model wrote after its turn opened, the
    /// forced prefix included; `marker_first`: Mistral's control token was
    /// the first generated) into content and calls of `known` functions.
    pub fn parse(&self, text: &str, marker_first: bool, known: &[String]) -> Parsed {
        let whole = || Parsed { content: text.to_string(), calls: vec![] };
        let call = |v: Value| -> Option<ParsedCall> {
            let Value::Object(mut o) = v else { return None };
            // Llama 3.x models also write `"type": "function"`, and some
            // write `arguments` where the template said `parameters`.
            if o.get("type").is_some_and(|t| t != "function") {
                return None;
            }
            let name = o.get("name")?.as_str()?.to_string();
            let arguments = o.remove(self.arguments_key()).or_else(|| o.remove("arguments"))?;
            // Arguments written as the text of an object are read as it.
            let arguments = match arguments {
                Value::String(s) => serde_json::from_str(&s).ok()?,
                v => v,
            };
            let id = o.get("id").and_then(Value::as_str).map(str::to_string);
            (arguments.is_object() && known.contains(&name)).then_some(ParsedCall { name, arguments, id })
        };
        match self {
            ToolFormat::Hermes => {
                let Some(first) = text.find(HERMES_OPEN) else {
                    return match bare_object(text).and_then(|o| serde_json::from_str(o).ok()).and_then(call) {
                        Some(c) => Parsed { content: String::new(), calls: vec![c] },
                        None => whole(),
                    };
                };
                let mut content = text[..first].to_string();
                let mut calls = vec![];
                let mut rest = &text[first..];
                while let Some(open) = rest.find(HERMES_OPEN) {
                    content.push_str(&rest[..open]);
                    let body = &rest[open + HERMES_OPEN.len()..];
                    let (inner, after) = match body.find(HERMES_CLOSE) {
                        Some(close) => (&body[..close], &body[close + HERMES_CLOSE.len()..]),
                        None => (body, ""),
                    };
                    let Some(c) = serde_json::from_str(inner.trim()).ok().and_then(call) else { return whole() };
                    calls.push(c);
                    rest = after;
                }
                content.push_str(rest);
                Parsed { content: content.trim().to_string(), calls }
            }
            ToolFormat::Llama3Json => {
                let body = text.trim_start().trim_start_matches("<|python_tag|>").trim();
                if !body.starts_with('{') {
                    return whole();
                }
                match serde_json::from_str(body).ok().and_then(call) {
                    Some(c) => Parsed { content: String::new(), calls: vec![c] },
                    None => whole(),
                }
            }
            // Its calls are cut at control tokens, absent from the text.
            ToolFormat::MistralArgs { .. } | ToolFormat::Harmony => whole(),
            ToolFormat::QwenXml => {
                // After any content, `<tool_call>` blocks; or an answer that
                // is only `<function=...>` blocks (a small model dropping the
                // wrapper, as it may drop Hermes' tags).
                let first = match text.find(HERMES_OPEN) {
                    Some(at) => at,
                    None if text.trim_start().starts_with(XML_FUNCTION) => 0,
                    None => return whole(),
                };
                match xml_calls(&text[first..], known) {
                    Some(calls) if !calls.is_empty() => Parsed { content: text[..first].trim().to_string(), calls },
                    _ => whole(),
                }
            }
            ToolFormat::Mistral | ToolFormat::Granite => {
                // Only the control token opens a call (text that spells
                // its name is content); a forced call's text starts with it.
                if !marker_first {
                    return whole();
                }
                let marker = if *self == ToolFormat::Granite { GRANITE_MARKER } else { MISTRAL_MARKER };
                let body = text.strip_prefix(marker).unwrap_or(text);
                let calls: Option<Vec<ParsedCall>> = match serde_json::from_str(body.trim()) {
                    Ok(Value::Array(items)) if !items.is_empty() => items.into_iter().map(call).collect(),
                    _ => None,
                };
                match calls {
                    Some(calls) => Parsed { content: String::new(), calls },
                    None => whole(),
                }
            }
        }
    }

    /// How many bytes of `text` (the visible text so far) may be streamed
    /// as content: none once a call may have begun, and never a tail that
    /// could begin one.
    pub fn streamable(&self, text: &str, marker_first: bool) -> usize {
        match self {
            ToolFormat::QwenXml => {
                if let Some(i) = text.find(HERMES_OPEN) {
                    return i;
                }
                // An answer that may be bare `<function=...>` blocks.
                let t = text.trim_start();
                if t.is_empty() || XML_FUNCTION.starts_with(t) || t.starts_with(XML_FUNCTION) {
                    return 0;
                }
                text.len() - tag_prefix_len(text, HERMES_OPEN)
            }
            ToolFormat::Hermes => {
                if let Some(i) = text.find(HERMES_OPEN) {
                    return i;
                }
                // An answer that may be a bare call object.
                let t = text.trim_start();
                if t.is_empty() || t.starts_with('{') || t.starts_with("```") || "```".starts_with(t) {
                    return 0;
                }
                // A tail that is a beginning of `<tool_call>`.
                text.len() - tag_prefix_len(text, HERMES_OPEN)
            }
            // A call is the whole answer: hold everything that may be one.
            ToolFormat::Llama3Json => {
                let t = text.trim_start();
                if t.is_empty() || t.starts_with('{') {
                    0
                } else {
                    text.len()
                }
            }
            ToolFormat::Mistral | ToolFormat::Granite if marker_first => 0,
            // A call begins with a control token: all text before it is
            // content (harmony's calls never reach the content text).
            ToolFormat::Mistral | ToolFormat::Granite | ToolFormat::MistralArgs { .. } | ToolFormat::Harmony => text.len(),
        }
    }

    /// A `MistralArgs` answer's calls, the answer cut at its control
    /// tokens: `head` the text before the first, `pieces` each control
    /// token with the text after it. Each call is `Calls name [CallId id]
    /// Args {arguments}`, of a `known` function with object arguments;
    /// `None` where the pieces spell anything else (the answer is then
    /// its text, as written).
    pub fn parse_controlled(&self, head: &str, pieces: &[(Control, String)], known: &[String]) -> Option<Parsed> {
        if !matches!(self, ToolFormat::MistralArgs { .. }) || pieces.is_empty() {
            return None;
        }
        let mut calls = vec![];
        let mut rest = pieces;
        while let [(Control::Calls, name), after @ ..] = rest {
            let (id, after) = match after {
                [(Control::CallId, id), after @ ..] => (Some(id.trim().to_string()), after),
                _ => (None, after),
            };
            let [(Control::Args, arguments), after @ ..] = after else { return None };
            let name = name.trim().to_string();
            let arguments: Value = serde_json::from_str(arguments.trim()).ok()?;
            if !arguments.is_object() || !known.contains(&name) {
                return None;
            }
            calls.push(ParsedCall { name, arguments, id });
            rest = after;
        }
        rest.is_empty().then(|| Parsed { content: head.trim().to_string(), calls })
    }
}

/// `QwenXml` calls: `<tool_call>` blocks or bare `<function=...>` blocks,
/// nothing else between or after; `None` where anything else is there.
fn xml_calls(mut rest: &str, known: &[String]) -> Option<Vec<ParsedCall>> {
    let mut calls = vec![];
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return Some(calls);
        }
        let (block, after) = match rest.strip_prefix(HERMES_OPEN) {
            Some(body) => body.split_once(HERMES_CLOSE).unwrap_or((body, "")),
            None if rest.starts_with(XML_FUNCTION) => {
                let end = rest.find("</function>")? + "</function>".len();
                (&rest[..end], &rest[end..])
            }
            None => return None,
        };
        calls.push(xml_call(block).filter(|c| known.contains(&c.name))?);
        rest = after;
    }
}

/// One `<function=NAME>` block of `QwenXml`, its values as strings.
fn xml_call(inner: &str) -> Option<ParsedCall> {
    let body = inner.trim().strip_prefix(XML_FUNCTION)?;
    let (name, body) = body.split_once('>')?;
    let mut body = body.trim_start().strip_suffix("</function>")?.trim();
    let mut arguments = Map::new();
    while let Some(b) = body.strip_prefix("<parameter=") {
        let (key, b) = b.split_once('>')?;
        let (value, b) = b.split_once("</parameter>")?;
        // The value stands on its own lines: one newline each side is the format's.
        let value = value.strip_prefix('\n').unwrap_or(value);
        let value = value.strip_suffix('\n').unwrap_or(value);
        arguments.insert(key.trim().to_string(), Value::String(value.to_string()));
        body = b.trim_start();
    }
    body.is_empty().then(|| ParsedCall { name: name.trim().to_string(), arguments: Value::Object(arguments), id: None })
}

/// A `QwenXml` call's values, written as text, typed by the function's
/// `parameters`: a parameter whose schema is not a string is read as JSON
/// where it parses as JSON (`3` a number, `true` a boolean, `[1]` an array).
pub fn coerce_arguments(arguments: &mut Value, parameters: &Value) {
    let Value::Object(args) = arguments else { return };
    for (key, value) in args.iter_mut() {
        let is_string = parameters["properties"][key.as_str()]["type"] == "string";
        if let (Value::String(text), false) = (&*value, is_string) {
            if let Ok(parsed) = serde_json::from_str::<Value>(text) {
                *value = parsed;
            }
        }
    }
}

/// Function `name`'s `parameters`, to stand inside a call's schema: where
/// they hold references (pydantic's nested models), their definitions and
/// they themselves move to the call schema's `defs` (as `NAME.DEF` and
/// `NAME`), every local `$ref` renamed to match, and a reference to them
/// stands in their place; else they stand as they are.
fn relocate(name: &str, parameters: &Value, defs: &mut Map<String, Value>) -> Value {
    fn refers(v: &Value) -> bool {
        match v {
            Value::Object(o) => o.contains_key("$ref") || o.contains_key("$defs") || o.contains_key("definitions") || o.values().any(refers),
            Value::Array(a) => a.iter().any(refers),
            _ => false,
        }
    }
    fn escape(key: &str) -> String {
        key.replace('~', "~0").replace('/', "~1")
    }
    fn rename(v: &mut Value, name: &str) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(r)) = o.get_mut("$ref") {
                    let local = r.strip_prefix("#/$defs/").or_else(|| r.strip_prefix("#/definitions/"));
                    if r == "#" {
                        *r = format!("#/$defs/{}", escape(name));
                    } else if let Some(def) = local {
                        let def = def.replace("~1", "/").replace("~0", "~");
                        *r = format!("#/$defs/{}", escape(&format!("{name}.{def}")));
                    }
                }
                o.values_mut().for_each(|v| rename(v, name));
            }
            Value::Array(a) => a.iter_mut().for_each(|v| rename(v, name)),
            _ => {}
        }
    }
    if !refers(parameters) {
        return parameters.clone();
    }
    let mut own = parameters.clone();
    if let Value::Object(o) = &mut own {
        for table in ["$defs", "definitions"] {
            if let Some(Value::Object(local)) = o.remove(table) {
                for (def, mut schema) in local {
                    rename(&mut schema, name);
                    defs.insert(format!("{name}.{def}"), schema);
                }
            }
        }
    }
    rename(&mut own, name);
    defs.insert(name.to_string(), own);
    json!({ "$ref": format!("#/$defs/{}", escape(name)) })
}

/// The object a whole answer is, bare or fenced (```json ... ```).
fn bare_object(text: &str) -> Option<&str> {
    let t = text.trim();
    let t = match t.strip_prefix("```") {
        Some(fenced) => fenced.trim_start_matches("json").strip_suffix("```")?.trim(),
        None => t,
    };
    t.starts_with('{').then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<String> {
        vec!["get_weather".into(), "scale".into()]
    }

    #[test]
    fn formats_are_told_by_their_templates() {
        assert_eq!(ToolFormat::of_template("{% if tools %}<tool_call>{% endif %}"), Some(ToolFormat::Hermes));
        assert_eq!(ToolFormat::of_template("{{ tools }} {\"name\": function name, \"parameters\": dictionary"), Some(ToolFormat::Llama3Json));
        assert_eq!(ToolFormat::of_template("{{ tools }}[TOOL_CALLS]"), Some(ToolFormat::Mistral));
        assert_eq!(ToolFormat::of_template("<|im_start|>{{ message.content }}"), None);
        assert_eq!(ToolFormat::of_template("{# tools #}plain"), None);
    }

    #[test]
    fn hermes_calls_split_from_content() {
        let f = ToolFormat::Hermes;
        let text = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"scale\", \"arguments\": \"{\\\"x\\\": 2}\"}\n</tool_call>";
        let p = f.parse(text, false, &known());
        assert_eq!(p.content, "Let me look.");
        assert_eq!(p.calls.len(), 2);
        assert_eq!(p.calls[0], ParsedCall { name: "get_weather".into(), arguments: json!({"city": "Paris"}), id: None });
        assert_eq!(p.calls[1].arguments, json!({"x": 2}));
        // Unclosed at the end: still a call.
        let p = f.parse("<tool_call>\n{\"name\": \"scale\", \"arguments\": {\"x\": 1}}", false, &known());
        assert_eq!(p.calls.len(), 1);
        // Malformed, unknown or no call: the text as content.
        // A bare or fenced object, as small models answer.
        for t in ["{\"name\": \"scale\", \"arguments\": {\"x\": 1}}", "```json\n{\n  \"name\": \"scale\",\n  \"arguments\": {\"x\": 1}\n}\n```"] {
            assert_eq!(f.parse(t, false, &known()).calls, vec![ParsedCall { name: "scale".into(), arguments: json!({"x": 1}), id: None }], "{t}");
        }
        for t in [
            "<tool_call>\n{\"name\": \"scale\", \"arguments\": {\"x\": }\n</tool_call>",
            "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>",
            "Paris is sunny.",
            "{\"name\": \"scale\", \"arguments\": {\"x\": 1}} and more",
            "```python\nprint(1)\n```",
        ] {
            assert_eq!(f.parse(t, false, &known()), Parsed { content: t.into(), calls: vec![] }, "{t}");
        }
    }

    #[test]
    fn llama3_and_mistral_calls() {
        let f = ToolFormat::Llama3Json;
        let p = f.parse(" {\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", false, &known());
        assert_eq!(p.calls, vec![ParsedCall { name: "get_weather".into(), arguments: json!({"city": "Oslo"}), id: None }]);
        assert_eq!(f.parse("{\"a\": 1}", false, &known()).calls, vec![]);
        assert_eq!(f.parse("It is {sunny}.", false, &known()).content, "It is {sunny}.");
        let m = ToolFormat::Mistral;
        let body = "[{\"name\": \"scale\", \"arguments\": {\"x\": 3}}]";
        assert_eq!(m.parse(body, true, &known()).calls.len(), 1);
        // Without the marker it is content, even if it looks like a call.
        assert_eq!(m.parse(body, false, &known()).calls.len(), 0);
        // Granite's: the same array after its own marker.
        let g = ToolFormat::Granite;
        assert_eq!(ToolFormat::of_template("{{ tools }}<|tool_call|>"), Some(g));
        assert_eq!(g.parse(&format!("<|tool_call|>{body}"), true, &known()).calls.len(), 1);
        assert_eq!(g.parse(body, false, &known()).calls.len(), 0);
    }

    /// `[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}`, one or more, after any
    /// text; anything else (no `[ARGS]`, an unknown function, arguments
    /// that are not an object, text after a call's JSON that is not one)
    /// is not a call.
    #[test]
    fn mistral_calls_cut_at_control_tokens() {
        use Control::*;
        let f = ToolFormat::MistralArgs { call_id: true };
        let piece = |c: Control, t: &str| (c, t.to_string());
        let one = [piece(Calls, "get_weather"), piece(CallId, "a1B2c3D4e"), piece(Args, "{\"city\": \"Paris\"}")];
        let p = f.parse_controlled(" Let me look. ", &one, &known()).unwrap();
        assert_eq!(p.content, "Let me look.");
        assert_eq!(p.calls, vec![ParsedCall { name: "get_weather".into(), arguments: json!({"city": "Paris"}), id: Some("a1B2c3D4e".into()) }]);
        let two = [piece(Calls, "scale"), piece(Args, "{\"x\": 2}"), piece(Calls, "get_weather"), piece(Args, "{\"city\": \"Oslo\"}")];
        assert_eq!(f.parse_controlled("", &two, &known()).unwrap().calls.len(), 2);
        for bad in [
            vec![piece(Calls, "get_weather"), piece(CallId, "x")],
            vec![piece(Calls, "nope"), piece(Args, "{}")],
            vec![piece(Calls, "scale"), piece(Args, "[1]")],
            vec![piece(Calls, "scale"), piece(Args, "{\"x\": 1} and then")],
            vec![piece(Args, "{}")],
        ] {
            assert_eq!(f.parse_controlled("", &bad, &known()), None, "{bad:?}");
        }
        // Its visible text alone (no control tokens) is never a call.
        assert!(f.parse("get_weather{\"city\": \"Paris\"}", true, &known()).calls.is_empty());
        assert_eq!(ToolFormat::of_template("{{ tools }}[TOOL_CALLS]{{ n }}[CALL_ID]{{ i }}[ARGS]"), Some(f));
        assert_eq!(ToolFormat::of_template("{{ tools }}[TOOL_CALLS]{{ n }}[ARGS]"), Some(ToolFormat::MistralArgs { call_id: false }));
        assert_eq!(f.call_prefix("scale", "a1B2c3D4e"), "[TOOL_CALLS]scale[CALL_ID]a1B2c3D4e[ARGS]");
    }

    /// Qwen3-Coder's `<function=...>` blocks: values as text, typed by the
    /// parameters; anything malformed, unknown or followed by text is
    /// content; streaming holds back from `<tool_call>` (or a tail that may
    /// begin it); no forced call.
    #[test]
    fn qwen_xml_calls() {
        let f = ToolFormat::QwenXml;
        assert_eq!(ToolFormat::of_template("{{ tools }}<tool_call>\n<function={{ n }}>"), Some(f));
        let one = "Let me look.\n<tool_call>\n<function=scale>\n<parameter=x>\n2.5\n</parameter>\n<parameter=note>\n two\nlines \n</parameter>\n</function>\n</tool_call>";
        let p = f.parse(one, false, &known());
        assert_eq!(p.content, "Let me look.");
        let mut args = p.calls[0].arguments.clone();
        assert_eq!(args, json!({"x": "2.5", "note": " two\nlines "}));
        coerce_arguments(&mut args, &json!({"properties": {"x": {"type": "number"}, "note": {"type": "string"}}}));
        assert_eq!(args, json!({"x": 2.5, "note": " two\nlines "}));
        let two = "<tool_call>\n<function=scale>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>";
        assert_eq!(f.parse(two, false, &known()).calls.len(), 2);
        for bad in [
            "<tool_call>\n{\"name\": \"scale\", \"arguments\": {}}\n</tool_call>",
            "<tool_call>\n<function=rm>\n</function>\n</tool_call>",
            "<tool_call>\n<function=scale>\n<parameter=x>\n1\n</function>\n</tool_call>",
            "<tool_call>\n<function=scale>\n</function>\n</tool_call> and more",
        ] {
            assert!(f.parse(bad, false, &known()).calls.is_empty(), "{bad}");
        }
        assert_eq!(f.streamable("Sure <tool", false), 5);
        assert_eq!(f.streamable("Sure <tool_call>\n<fun", false), 5);
        assert_eq!(f.streamable("{\"a\": 1}", false), 8);
        // An answer of bare function blocks, held back from its start.
        assert_eq!(f.streamable(" <func", false), 0);
        let bare = "<function=scale>\n<parameter=x>\n1\n</parameter>\n</function>";
        assert_eq!(f.parse(bare, false, &known()).calls.len(), 1);
        assert!(f.parse(&format!("So: {bare}"), false, &known()).calls.is_empty());
        assert!(!f.can_force());
    }

    /// Mistral's templates take back only ids of 9 letters and digits: the
    /// model's own where it wrote one, else 9 made per answer and index.
    #[test]
    fn call_ids_are_what_the_template_takes_back() {
        let m = ToolFormat::Mistral;
        let own = m.parse("[{\"name\": \"scale\", \"arguments\": {\"x\": 3}, \"id\": \"a1B2c3D4e\"}]", true, &known());
        assert_eq!(m.call_id(&own.calls[0], "abc", 0), "a1B2c3D4e");
        let plain = ParsedCall { name: "scale".into(), arguments: json!({}), id: Some("call_1".into()) };
        let ids: Vec<String> = (0..3).map(|i| m.call_id(&plain, "abc", i)).collect();
        for id in &ids {
            assert!(id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()), "{id}");
        }
        assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != m.call_id(&plain, "abd", 0));
        assert_eq!(ToolFormat::Hermes.call_id(&plain, "abc", 2), "call_abc_2");
    }

    #[test]
    fn streaming_holds_back_what_may_begin_a_call() {
        let f = ToolFormat::Hermes;
        assert_eq!(f.streamable("Hello", false), 5);
        assert_eq!(f.streamable("Hello <tool", false), 6);
        assert_eq!(f.streamable("Hello <tool_call>\n{", false), 6);
        assert_eq!(f.streamable("a < b", false), 5);
        assert_eq!(f.streamable(" {\"name", false), 0);
        assert_eq!(f.streamable("``", false), 0);
        assert_eq!(f.streamable("Sure: {", false), 7);
        assert_eq!(ToolFormat::Llama3Json.streamable("  {\"na", false), 0);
        assert_eq!(ToolFormat::Llama3Json.streamable("Sure", false), 4);
    }

    #[test]
    fn forced_call_schemas_name_each_function() {
        let fns = vec![("get_weather".to_string(), json!({"type": "object", "properties": {"city": {"type": "string"}}}))];
        let s = ToolFormat::Llama3Json.call_schema(&fns, true);
        assert_eq!(s["properties"]["name"], json!({"const": "get_weather"}));
        assert!(s["properties"]["parameters"].is_object());
        let two = [fns.clone(), vec![("scale".to_string(), json!({"type": "object"}))]].concat();
        assert_eq!(ToolFormat::Hermes.call_schema(&two, true)["anyOf"].as_array().unwrap().len(), 2);
        // Parameters with references keep them, renamed into the call's root.
        let nested = json!({"$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}}}}, "type": "object",
                            "properties": {"place": {"$ref": "#/$defs/Place"}, "next": {"$ref": "#"}}});
        let s = ToolFormat::Hermes.call_schema(&[("f".to_string(), nested)], true);
        assert_eq!(s["properties"]["arguments"], json!({"$ref": "#/$defs/f"}));
        assert_eq!(s["$defs"]["f"]["properties"]["place"], json!({"$ref": "#/$defs/f.Place"}));
        assert_eq!(s["$defs"]["f"]["properties"]["next"], json!({"$ref": "#/$defs/f"}));
        assert!(s["$defs"]["f.Place"].is_object() && s["$defs"]["f"].get("$defs").is_none());
        let m = ToolFormat::Mistral.call_schema(&fns, false);
        assert_eq!((&m["type"], &m["minItems"], &m["maxItems"]), (&json!("array"), &json!(1), &json!(1)));
    }
}
