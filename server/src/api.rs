//! The OpenAI request bodies, read field by field so an error names the
//! field (`max_tokens`, `messages[1].content`). A field graphc does not
//! implement is refused, not ignored: a client that asks for `echo`
//! must not get an answer that silently lacks it.

use crate::error::ApiError;
use crate::tools::{self, Tools};
use graphc_frontends::chat::{FunctionCall, Message, ToolCall};
use graphc_runtime::json_schema::Schema;
use graphc_runtime::sampling::{Format, Penalties, Sampling};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::sync::Arc;

/// Which endpoint a request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

/// Fields both endpoints read (`user` is an end-user id for the caller's
/// own bookkeeping: accepted, with no effect on the answer).
const COMMON: &[&str] = &[
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "stream",
    "stream_options",
    "n",
    "user",
    "logprobs",
    "logit_bias",
];
const CHAT: &[&str] = &[
    "messages",
    "max_completion_tokens",
    "top_logprobs",
    "response_format",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "chat_template_kwargs",
    "reasoning_format",
    "reasoning_effort",
];
const COMPLETION: &[&str] = &["prompt", "echo", "suffix"];

/// A request, read and checked; the prompt is still to be tokenized.
#[derive(Clone, Debug)]
pub struct Generate {
    pub model: Option<String>,
    pub input: Input,
    /// `None`: until the context is full (chat), 16 (completions, as OpenAI).
    pub max_tokens: Option<usize>,
    pub sampling: Sampling,
    pub stop: Vec<String>,
    /// `Some(n)`: log-probabilities of each token and the `n` most likely.
    pub logprobs: Option<usize>,
    pub stream: bool,
    pub include_usage: bool,
    /// Functions the model may (or must) call (chat).
    pub tools: Option<Tools>,
    /// Choices to answer with (`n`): as many requests, seeds `seed + i`.
    pub n: usize,
    /// Variables for the chat template (`chat_template_kwargs`, as
    /// transformers' `apply_chat_template(**kwargs)`: `enable_thinking`).
    pub template_kwargs: Map<String, Value>,
    /// `reasoning_effort`, where the request set it (a template that does
    /// not read it refuses the field).
    pub reasoning_effort: Option<String>,
    /// Whether a thinking model's `<think>` block is returned apart from
    /// its content (`reasoning_content`; Ollama's `thinking`).
    pub split_reasoning: bool,
}

#[derive(Clone, Debug)]
pub enum Input {
    Messages(Vec<Message>),
    Text(String),
    Ids(Vec<u32>),
}

/// Most choices a request may ask for (`n`): each takes a slot's turn.
pub const MAX_CHOICES: usize = 16;

/// Most alternatives `top_logprobs` / `logprobs` may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<Generate, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::bad_request(None, format!("the request body is not UTF-8 (invalid byte at offset {})", e.valid_up_to())))?;
    let value: Value = serde_json::from_str(text).map_err(|e| ApiError::bad_request(None, format!("the request body is not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(ApiError::bad_request(None, "the request body must be a JSON object"));
    };
    let extra = match endpoint {
        Endpoint::Chat => CHAT,
        Endpoint::Completion => COMPLETION,
    };
    if let Some(k) = obj.keys().find(|k| !COMMON.contains(&k.as_str()) && !extra.contains(&k.as_str())) {
        return Err(ApiError::field(k, "graphc does not implement this field"));
    }
    let n = field::<u64>(&obj, "n")?.unwrap_or(1);
    if !(1..=MAX_CHOICES as u64).contains(&n) {
        return Err(ApiError::field("n", format!("{n} choices asked; 1 to {MAX_CHOICES}")));
    }
    if n > 1 && field::<bool>(&obj, "stream")? == Some(true) {
        return Err(ApiError::field("n", "more than one choice is not implemented with `stream`"));
    }
    let input = match endpoint {
        Endpoint::Chat => Input::Messages(messages(&obj)?),
        Endpoint::Completion => prompt(&obj)?,
    };
    let max_tokens = match endpoint {
        Endpoint::Chat => field::<u64>(&obj, "max_completion_tokens")?.map(|v| ("max_completion_tokens", v)),
        Endpoint::Completion => None,
    }
    .or(field::<u64>(&obj, "max_tokens")?.map(|v| ("max_tokens", v)));
    if let Some((name, 0)) = max_tokens {
        return Err(ApiError::field(name, "must be at least 1"));
    }
    let max_tokens = max_tokens.map(|(_, v)| usize::try_from(v).unwrap_or(usize::MAX));
    let logprobs = match endpoint {
        Endpoint::Chat => match field::<bool>(&obj, "logprobs")? {
            Some(true) => Some(field::<usize>(&obj, "top_logprobs")?.unwrap_or(0)),
            _ => {
                if obj.get("top_logprobs").is_some_and(|v| !v.is_null()) {
                    return Err(ApiError::field("top_logprobs", "needs `logprobs: true`"));
                }
                None
            }
        },
        Endpoint::Completion => field::<usize>(&obj, "logprobs")?,
    };
    if let Some(n) = logprobs.filter(|&n| n > MAX_TOP_LOGPROBS) {
        let name = if endpoint == Endpoint::Chat { "top_logprobs" } else { "logprobs" };
        return Err(ApiError::field(name, format!("{n} alternatives asked; at most {MAX_TOP_LOGPROBS}")));
    }
    if endpoint == Endpoint::Completion {
        if field::<bool>(&obj, "echo")? == Some(true) {
            return Err(ApiError::field("echo", "echoing the prompt is not implemented"));
        }
        if field::<String>(&obj, "suffix")?.is_some() {
            return Err(ApiError::field("suffix", "insertion (a suffix) is not implemented"));
        }
    }
    let stop = match obj.get("stop") {
        None | Some(Value::Null) => vec![],
        Some(Value::String(s)) => vec![s.clone()],
        Some(v @ Value::Array(_)) => serde_json::from_value::<Vec<String>>(v.clone()).map_err(|e| ApiError::field("stop", e.to_string()))?,
        Some(_) => return Err(ApiError::field("stop", "must be a string or an array of strings")),
    };
    let include_usage = match obj.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => {
            if let Some(k) = o.keys().find(|k| *k != "include_usage") {
                return Err(ApiError::field(&format!("stream_options.{k}"), "graphc does not implement this field"));
            }
            field::<bool>(o, "include_usage").map_err(|e| ApiError::field("stream_options.include_usage", e.message))?.unwrap_or(false)
        }
        Some(_) => return Err(ApiError::field("stream_options", "must be an object")),
    };
    let sampling = Sampling { format: response_format(&obj)?, ..sampling(&obj)? };
    let tools = match endpoint {
        Endpoint::Chat => tools::parse(&obj, "tools")?,
        Endpoint::Completion => None,
    };
    if tools.is_some() && logprobs.is_some() {
        return Err(ApiError::field("logprobs", "log-probabilities are not implemented together with `tools`"));
    }
    let mut template_kwargs = match obj.get("chat_template_kwargs") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(_) => return Err(ApiError::field("chat_template_kwargs", "must be an object of template variables")),
    };
    // OpenAI's `reasoning_effort`: the template variable gpt-oss's template reads.
    let reasoning_effort = field::<String>(&obj, "reasoning_effort")?;
    if let Some(effort) = &reasoning_effort {
        if !matches!(effort.as_str(), "low" | "medium" | "high") {
            return Err(ApiError::field("reasoning_effort", format!("`{effort}`: `low`, `medium` or `high`")));
        }
        template_kwargs.insert("reasoning_effort".into(), Value::String(effort.clone()));
    }
    // llama.cpp's names: `deepseek` (and `auto`) split a `<think>` block off, `none` leaves it in the content.
    let split_reasoning = match field::<String>(&obj, "reasoning_format")?.as_deref() {
        None | Some("auto" | "deepseek") => true,
        Some("none") => false,
        Some(other) => return Err(ApiError::field("reasoning_format", format!("`{other}`: `auto`, `deepseek` or `none`"))),
    };
    Ok(Generate {
        model: field::<String>(&obj, "model")?,
        input,
        max_tokens,
        sampling,
        stop,
        logprobs,
        stream: field::<bool>(&obj, "stream")?.unwrap_or(false),
        include_usage,
        tools,
        n: n as usize,
        template_kwargs,
        reasoning_effort,
        split_reasoning,
    })
}

/// A request body that is a JSON object of only the `known` fields (the
/// small endpoints': `/tokenize`, `/detokenize`).
pub fn object(body: &[u8], known: &[&str]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ApiError::bad_request(None, format!("the request body is not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(ApiError::bad_request(None, "the request body must be a JSON object"));
    };
    if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ApiError::field(k, "graphc does not implement this field"));
    }
    Ok(obj)
}

/// `obj[name]` as a `T`, which must be there.
pub fn required<T: DeserializeOwned>(obj: &Map<String, Value>, name: &str) -> Result<T, ApiError> {
    field(obj, name)?.ok_or_else(|| ApiError::field(name, "is required"))
}

/// `obj[name]` as a `T`; absent or `null` is `None`.
pub fn field<T: DeserializeOwned>(obj: &Map<String, Value>, name: &str) -> Result<Option<T>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| ApiError::field(name, e.to_string())),
    }
}

fn in_range(name: &str, v: Option<f32>, lo: f32, hi: f32) -> Result<Option<f32>, ApiError> {
    match v {
        Some(x) if !(lo..=hi).contains(&x) => Err(ApiError::field(name, format!("{x} is outside [{lo}, {hi}]"))),
        _ => Ok(v),
    }
}

fn sampling(obj: &Map<String, Value>) -> Result<Sampling, ApiError> {
    // OpenAI's defaults: temperature 1, no top-p cut.
    let temperature = in_range("temperature", field(obj, "temperature")?, 0.0, 2.0)?.unwrap_or(1.0);
    let top_p = in_range("top_p", field(obj, "top_p")?, 0.0, 1.0)?.filter(|&p| p < 1.0);
    let min_p = in_range("min_p", field(obj, "min_p")?, 0.0, 1.0)?.filter(|&p| p > 0.0);
    let top_k = field::<usize>(obj, "top_k")?.filter(|&k| k > 0);
    let seed = match obj.get("seed") {
        None | Some(Value::Null) => fresh_seed(),
        Some(v) => v.as_i64().map(|s| s as u64).or(v.as_u64()).ok_or_else(|| ApiError::field("seed", "must be an integer"))?,
    };
    let penalties = Penalties {
        presence: in_range("presence_penalty", field(obj, "presence_penalty")?, -2.0, 2.0)?.unwrap_or(0.0),
        frequency: in_range("frequency_penalty", field(obj, "frequency_penalty")?, -2.0, 2.0)?.unwrap_or(0.0),
        repeat: match field::<f32>(obj, "repeat_penalty")? {
            Some(r) if r <= 0.0 => return Err(ApiError::field("repeat_penalty", format!("{r} must be positive (1 is off)"))),
            r => r.unwrap_or(1.0),
        },
        ..Default::default()
    };
    Ok(Sampling { temperature, top_k, top_p, min_p, seed, penalties, format: Format::Text, logit_bias: logit_bias(obj)? })
}

/// `logit_bias`: token ids (as strings, OpenAI's keys) to a bias in
/// [-100, 100]; ids are checked against the vocabulary when the request
/// is submitted.
fn logit_bias(obj: &Map<String, Value>) -> Result<Vec<(u32, f32)>, ApiError> {
    let map = match obj.get("logit_bias") {
        None | Some(Value::Null) => return Ok(vec![]),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(ApiError::field("logit_bias", "must be an object of token ids to biases")),
    };
    let mut out = Vec::with_capacity(map.len());
    for (id, bias) in map {
        let name = format!("logit_bias.{id}");
        let id: u32 = id.parse().map_err(|_| ApiError::field(&name, "a key must be a token id"))?;
        let bias = bias.as_f64().ok_or_else(|| ApiError::field(&name, "the bias must be a number"))? as f32;
        in_range(&name, Some(bias), -100.0, 100.0)?;
        out.push((id, bias));
    }
    Ok(out)
}

/// `response_format`: `{"type": "text"}` (any text), `{"type":
/// "json_object"}` (JSON mode: a JSON object), or `{"type": "json_schema",
/// "json_schema": {"schema": ...}}` (a value the schema admits: the
/// subset `json_schema` compiles; anything else in it refused naming where).
fn response_format(obj: &Map<String, Value>) -> Result<Format, ApiError> {
    let rf = match obj.get("response_format") {
        None | Some(Value::Null) => return Ok(Format::Text),
        Some(Value::Object(rf)) => rf,
        Some(_) => return Err(ApiError::field("response_format", "must be an object with a `type`")),
    };
    let ty = rf.get("type").and_then(Value::as_str);
    let known: &[&str] = if ty == Some("json_schema") { &["type", "json_schema"] } else { &["type"] };
    if let Some(k) = rf.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ApiError::field(&format!("response_format.{k}"), "graphc does not implement this field"));
    }
    match ty {
        Some("text") => Ok(Format::Text),
        Some("json_object") => Ok(Format::JsonObject),
        Some("json_schema") => {
            let Some(Value::Object(js)) = rf.get("json_schema") else {
                return Err(ApiError::field("response_format.json_schema", "is required: an object with the `schema`"));
            };
            if let Some(k) = js.keys().find(|k| !["name", "schema", "strict", "description"].contains(&k.as_str())) {
                return Err(ApiError::field(&format!("response_format.json_schema.{k}"), "graphc does not implement this field"));
            }
            let schema = js.get("schema").ok_or_else(|| ApiError::field("response_format.json_schema.schema", "is required"))?;
            Ok(Format::JsonSchema(Arc::new(Schema::compile(schema, "response_format.json_schema.schema")?)))
        }
        Some(other) => Err(ApiError::field("response_format.type", format!("`{other}` is not a format (`text` or `json_object`)"))),
        None => Err(ApiError::field("response_format.type", "is required (`text` or `json_object`)")),
    }
}

/// A seed for a request that names none (sampled requests differ, as OpenAI's do).
pub(crate) fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    t ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
}

pub(crate) fn messages(obj: &Map<String, Value>) -> Result<Vec<Message>, ApiError> {
    let Some(list) = obj.get("messages") else {
        return Err(ApiError::field("messages", "is required"));
    };
    let Value::Array(list) = list else {
        return Err(ApiError::field("messages", "must be an array of messages"));
    };
    if list.is_empty() {
        return Err(ApiError::field("messages", "is empty"));
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let at = |f: &str| format!("messages[{i}]{f}");
            let Value::Object(m) = m else {
                return Err(ApiError::field(&at(""), "must be an object with `role` and `content`"));
            };
            const FIELDS: [&str; 7] = ["role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", "thinking"];
            if let Some(k) = m.keys().find(|k| !FIELDS.contains(&k.as_str())) {
                return Err(ApiError::field(&at(&format!(".{k}")), "graphc does not implement this field"));
            }
            let tool_calls = match m.get("tool_calls") {
                None | Some(Value::Null) => vec![],
                Some(Value::Array(calls)) => {
                    calls.iter().enumerate().map(|(j, c)| tool_call(c, &at(&format!(".tool_calls[{j}]")))).collect::<Result<_, _>>()?
                }
                Some(_) => return Err(ApiError::field(&at(".tool_calls"), "must be an array of tool calls")),
            };
            // An earlier answer's reasoning (OpenAI-style servers' `reasoning_content`, Ollama's `thinking`).
            let mut reasoning_content = None;
            for key in ["reasoning_content", "thinking"] {
                match m.get(key) {
                    None | Some(Value::Null) => {}
                    Some(Value::String(r)) => reasoning_content = Some(r.clone()),
                    Some(_) => return Err(ApiError::field(&at(&format!(".{key}")), "must be a string")),
                }
            }
            let tool_call_id = match m.get("tool_call_id") {
                None | Some(Value::Null) => None,
                Some(Value::String(id)) => Some(id.clone()),
                Some(_) => return Err(ApiError::field(&at(".tool_call_id"), "must be a string")),
            };
            let role = match m.get("role") {
                Some(Value::String(r)) => r.clone(),
                _ => return Err(ApiError::field(&at(".role"), "must be a string (system, user, assistant)")),
            };
            let content = match m.get("content") {
                Some(Value::String(c)) => Some(c.clone()),
                // Content parts: text only.
                Some(Value::Array(parts)) => {
                    let mut text = String::new();
                    for (j, p) in parts.iter().enumerate() {
                        match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                            (Some("text"), Some(t)) => text.push_str(t),
                            _ => {
                                return Err(ApiError::field(
                                    &at(&format!(".content[{j}]")),
                                    "only text parts (`{\"type\": \"text\", \"text\": ...}`) are supported",
                                ))
                            }
                        }
                    }
                    Some(text)
                }
                // An assistant's turn that only calls functions.
                None | Some(Value::Null) if !tool_calls.is_empty() => None,
                _ => return Err(ApiError::field(&at(".content"), "must be a string or an array of text parts")),
            };
            Ok(Message { role, content, tool_calls, tool_call_id, reasoning_content })
        })
        .collect()
}

/// One of an assistant turn's `tool_calls`: `{id, type: "function",
/// function: {name, arguments}}`, the arguments a JSON object's text (as
/// OpenAI sends them) or the object; templates are given the object.
fn tool_call(c: &Value, at: &str) -> Result<ToolCall, ApiError> {
    let f = |k: &str| format!("{at}.{k}");
    let Value::Object(c) = c else { return Err(ApiError::field(at, "must be an object")) };
    if let Some(k) = c.keys().find(|k| !["id", "type", "function", "index"].contains(&k.as_str())) {
        return Err(ApiError::field(&f(k), "graphc does not implement this field"));
    }
    let id = match c.get("id") {
        None => String::new(),
        Some(Value::String(id)) => id.clone(),
        Some(_) => return Err(ApiError::field(&f("id"), "must be a string")),
    };
    if !matches!(c.get("type"), None | Some(Value::String(_))) || c.get("type").is_some_and(|t| t != "function") {
        return Err(ApiError::field(&f("type"), "must be \"function\""));
    }
    let Some(Value::Object(func)) = c.get("function") else {
        return Err(ApiError::field(&f("function"), "must be an object with `name` and `arguments`"));
    };
    let Some(Value::String(name)) = func.get("name") else { return Err(ApiError::field(&f("function.name"), "must be a string")) };
    let arguments = match func.get("arguments") {
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => v,
            _ => return Err(ApiError::field(&f("function.arguments"), "must be the text of a JSON object")),
        },
        Some(v @ Value::Object(_)) => v.clone(),
        _ => return Err(ApiError::field(&f("function.arguments"), "must be the text of a JSON object")),
    };
    Ok(ToolCall { id, kind: "function".into(), function: FunctionCall { name: name.clone(), arguments } })
}

fn prompt(obj: &Map<String, Value>) -> Result<Input, ApiError> {
    let one = "one prompt per request: a string, an array of token ids, or an array holding one of these";
    match obj.get("prompt") {
        None | Some(Value::Null) => Err(ApiError::field("prompt", "is required")),
        Some(Value::String(s)) => Ok(Input::Text(s.clone())),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) && !a.is_empty() => serde_json::from_value::<Vec<u32>>(Value::Array(a.clone()))
            .map(Input::Ids)
            .map_err(|e| ApiError::field("prompt", format!("token ids: {e}"))),
        Some(Value::Array(a)) if a.len() == 1 => match &a[0] {
            Value::String(s) => Ok(Input::Text(s.clone())),
            v @ Value::Array(_) => {
                serde_json::from_value::<Vec<u32>>(v.clone()).map(Input::Ids).map_err(|e| ApiError::field("prompt[0]", format!("token ids: {e}")))
            }
            _ => Err(ApiError::field("prompt[0]", one)),
        },
        Some(_) => Err(ApiError::field("prompt", one)),
    }
}
