//! Function calling: a request's `tools` and `tool_choice` (OpenAI's; the
//! Ollama API's `tools` the same list), and the calls read back from the
//! model's answer.
//!
//! The tools are shown to the model by the checkpoint's chat template,
//! which also says how the model writes a call (`tool_calls::ToolFormat`);
//! a template that shows none is refused (`tools`), not ignored.
//! `tool_choice`: `auto` (the default: the model may answer or call),
//! `none` (tools left out of the prompt, no call read back), `required`
//! and `{"type": "function", "function": {"name": ...}}` (a call is forced:
//! the call's opening is put in the prompt and its JSON is generated under
//! the schema of the functions' names and parameters, so it parses and
//! its arguments are the parameters' shape). `parallel_tool_calls: false`
//! allows one call: the answer stops at the end of the first (`<tool_call>`
//! blocks), a forced Mistral array holds one.

use crate::error::ApiError;
use graphc_frontends::tool_calls::{ParsedCall, ToolFormat};
use graphc_runtime::json_schema::Schema;
use graphc_runtime::{Format, Model};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// A request's tools, read and checked.
#[derive(Clone, Debug)]
pub struct Tools {
    /// The `tools` entries as sent (the template prints them).
    pub list: Vec<Value>,
    /// Each function's name and parameters schema.
    pub functions: Vec<(String, Value)>,
    pub choice: Choice,
    /// Several calls in one answer (`parallel_tool_calls`, default true).
    pub parallel: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Choice {
    Auto,
    Required,
    /// This function, by its place in `functions`.
    Function(usize),
}

/// `tools` and `tool_choice` of a request body; `None` where there are no
/// tools or the choice is `none`.
pub fn parse(obj: &Map<String, Value>, tools_key: &str) -> Result<Option<Tools>, ApiError> {
    let list = match obj.get(tools_key) {
        None | Some(Value::Null) => {
            if obj.get("tool_choice").is_some_and(|c| !c.is_null() && c != "none" && c != "auto") {
                return Err(ApiError::field("tool_choice", "asks for a call, but the request lists no `tools`"));
            }
            return Ok(None);
        }
        Some(Value::Array(list)) => list,
        Some(_) => return Err(ApiError::field(tools_key, "must be an array of tools")),
    };
    let mut functions: Vec<(String, Value)> = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = |k: &str| format!("{tools_key}[{i}]{k}");
        let Value::Object(t) = t else { return Err(ApiError::field(&at(""), "must be an object")) };
        if let Some(k) = t.keys().find(|k| !["type", "function"].contains(&k.as_str())) {
            return Err(ApiError::field(&at(&format!(".{k}")), "graphc does not implement this field"));
        }
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(ApiError::field(&at(".type"), "must be \"function\" (the only kind of tool)"));
        }
        let Some(Value::Object(f)) = t.get("function") else {
            return Err(ApiError::field(&at(".function"), "must be an object with the function's `name`"));
        };
        if let Some(k) = f.keys().find(|k| !["name", "description", "parameters", "strict"].contains(&k.as_str())) {
            return Err(ApiError::field(&at(&format!(".function.{k}")), "graphc does not implement this field"));
        }
        let name = match f.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() && n.len() <= 64 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') => n,
            _ => return Err(ApiError::field(&at(".function.name"), "must be 1 to 64 letters, digits, `_` or `-`")),
        };
        if functions.iter().any(|(n, _)| n == name) {
            return Err(ApiError::field(&at(".function.name"), format!("`{name}` is listed twice")));
        }
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => return Err(ApiError::field(&at(".function.parameters"), "must be a JSON schema (an object)")),
        };
        functions.push((name.to_string(), parameters));
    }
    if functions.is_empty() {
        return Err(ApiError::field(tools_key, "is empty"));
    }
    let choice = match obj.get("tool_choice") {
        None | Some(Value::Null) => Choice::Auto,
        Some(Value::String(c)) => match c.as_str() {
            "auto" => Choice::Auto,
            "none" => return Ok(None),
            "required" => Choice::Required,
            other => return Err(ApiError::field("tool_choice", format!("`{other}` is not a choice (`auto`, `none`, `required` or a function)"))),
        },
        Some(Value::Object(c)) => {
            let name = c.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
            if c.get("type").and_then(Value::as_str) != Some("function") || name.is_none() {
                return Err(ApiError::field("tool_choice", "must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}"));
            }
            let name = name.expect("checked");
            match functions.iter().position(|(n, _)| n == name) {
                Some(i) => Choice::Function(i),
                None => return Err(ApiError::field("tool_choice.function.name", format!("`{name}` is not among the request's tools"))),
            }
        }
        Some(_) => return Err(ApiError::field("tool_choice", "must be a string or an object naming a function")),
    };
    let parallel = match obj.get("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::field("parallel_tool_calls", "must be true or false")),
    };
    Ok(Some(Tools { list: list.clone(), functions, choice, parallel }))
}

/// How a request's tools are used with this model.
#[derive(Clone, Debug)]
pub struct ToolPlan {
    pub format: ToolFormat,
    /// The call's opening, already in the prompt where a call is forced.
    pub prefix: &'static str,
    pub names: Vec<String>,
    /// Mistral's `[TOOL_CALLS]` token, where the vocabulary has it.
    pub marker: Option<u32>,
}

impl Tools {
    /// The plan for `model`; a forced call sets `format` (the sampler's)
    /// to its schema, which must not be set already; one call only adds
    /// the end of a call to the `stop` strings where that ends it.
    pub fn plan(&self, model: &Model, tools_key: &str, format: &mut Format, stop: &mut Vec<String>) -> Result<ToolPlan, ApiError> {
        let fmt = model.tool_format().ok_or_else(|| {
            ApiError::field(
                tools_key,
                "this checkpoint's chat template does not show the model tools in a form graphc reads calls back from \
                 (`<tool_call>` blocks, Llama 3's JSON or Mistral's [TOOL_CALLS])",
            )
        })?;
        let forced: Vec<(String, Value)> = match self.choice {
            Choice::Auto => vec![],
            Choice::Required => self.functions.clone(),
            Choice::Function(i) => vec![self.functions[i].clone()],
        };
        let mut prefix = "";
        if !forced.is_empty() {
            if *format != Format::Text {
                return Err(ApiError::field("tool_choice", "a forced call cannot be combined with a `response_format`"));
            }
            // Each function's parameters compiled on their own first, so a
            // refusal names the tool's own path.
            for (name, params) in &forced {
                let i = self.functions.iter().position(|(n, _)| n == name).expect("a listed function");
                Schema::compile(params, &format!("{tools_key}[{i}].function.parameters"))?;
            }
            let schema = Schema::compile(&fmt.call_schema(&forced, self.parallel), "tool_choice")?;
            *format = Format::JsonSchema(Arc::new(schema));
            prefix = fmt.call_prefix();
        }
        if !self.parallel {
            match (fmt, forced.is_empty()) {
                (ToolFormat::Hermes, _) => stop.push("</tool_call>".into()),
                // One object, or a forced array of one.
                (ToolFormat::Llama3Json, _) | (ToolFormat::Mistral, false) => {}
                (ToolFormat::Mistral, true) => {
                    return Err(ApiError::field(
                        "parallel_tool_calls",
                        "false is not implemented for this template's call format unless a call is forced",
                    ))
                }
            }
        }
        let marker = model
            .tokenizer()
            .ok()
            .and_then(|t| t.encode_text(graphc_frontends::tool_calls::MISTRAL_MARKER, true).ok())
            .filter(|ids| ids.len() == 1 && fmt == ToolFormat::Mistral)
            .map(|ids| ids[0]);
        Ok(ToolPlan { format: fmt, prefix, names: self.functions.iter().map(|(n, _)| n.clone()).collect(), marker })
    }
}

impl ToolPlan {
    /// The calls in an answer (`text`: the visible text generated;
    /// `first_id`: the first token generated), and what else it said.
    pub fn read(&self, text: &str, first_id: Option<u32>) -> (String, Vec<ParsedCall>) {
        let marker_first = first_id.is_some() && first_id == self.marker;
        let p = self.format.parse(&format!("{}{text}", self.prefix), marker_first || !self.prefix.is_empty(), &self.names);
        (p.content, p.calls)
    }

    /// How much of `text` (visible, so far) may be streamed as content.
    pub fn streamable(&self, text: &str, first_id: Option<u32>) -> usize {
        if !self.prefix.is_empty() {
            return 0;
        }
        self.format.streamable(text, first_id.is_some() && first_id == self.marker)
    }
}

/// OpenAI's `tool_calls` of a message: ids unique in the answer, of the
/// form the model's template accepts back (`ToolFormat::call_id`), the
/// arguments as a JSON object's text.
pub fn openai_calls(format: ToolFormat, calls: &[ParsedCall], answer_id: &str) -> Value {
    let answer = answer_id.trim_start_matches("chatcmpl-");
    Value::Array(
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"id": format.call_id(c, answer, i), "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments.to_string()}})
            })
            .collect(),
    )
}

/// An answer that may call functions: the visible text so far, its first
/// token, and how much of it was streamed as content.
#[derive(Clone)]
pub(crate) struct ToolState {
    pub plan: ToolPlan,
    pub text: String,
    pub first_id: Option<u32>,
    pub sent: usize,
}

impl ToolState {
    pub fn new(plan: ToolPlan) -> ToolState {
        ToolState { plan, text: String::new(), first_id: None, sent: 0 }
    }

    pub fn on_token(&mut self, id: u32, text: &str) {
        self.first_id.get_or_insert(id);
        self.text.push_str(text);
    }

    /// Text that may be streamed now as content (none that may begin a call).
    pub fn streamable(&mut self) -> String {
        let upto = self.plan.streamable(&self.text, self.first_id).max(self.sent);
        let out = self.text[self.sent..upto].to_string();
        self.sent = upto;
        out
    }

    /// The calls of the finished answer and the content not yet
    /// `streamed` beside them; `None` where it called nothing.
    pub fn finish(&self, streamed: &str) -> Option<(Vec<ParsedCall>, Option<String>)> {
        let (content, calls) = self.plan.read(&self.text, self.first_id);
        if calls.is_empty() {
            return None;
        }
        let rest = content.strip_prefix(streamed.trim()).unwrap_or(&content).trim().to_string();
        Some((calls, (!rest.is_empty()).then_some(rest)))
    }
}

/// Ollama's `tool_calls` of a message: the arguments as an object.
pub fn ollama_calls(calls: &[ParsedCall]) -> Value {
    Value::Array(calls.iter().map(|c| json!({"function": {"name": c.name, "arguments": c.arguments}})).collect())
}
