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
//! its arguments are the parameters' shape; for Mistral's later format,
//! `[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}`, the whole head of a call of
//! the one forced function, with an id made from the conversation, and its arguments under the
//! parameters' schema). `parallel_tool_calls: false` allows one call: the
//! answer stops at the end of the first (`<tool_call>` blocks), a forced
//! Mistral array holds one. Mistral's control tokens must each be one
//! token of the vocabulary (else `tools` is refused), and an answer in the
//! later format is read from its tokens, cut at them.

use crate::error::ApiError;
use graphc_frontends::harmony::{Channels, HarmonyTokens};
use graphc_frontends::tool_calls::{coerce_arguments, Control, ParsedCall, ToolFormat};
use graphc_frontends::Tokenizer;
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
    pub prefix: String,
    /// Each function's name and parameters (`QwenXml` values are typed by them).
    pub functions: Vec<(String, Value)>,
    /// The format's control tokens in this vocabulary (Mistral's).
    pub controls: Vec<(u32, Control)>,
    /// A call forced by the prompt's prefix, where the prefix names its
    /// function (`MistralArgs`, `Harmony`): its function and id (the JSON
    /// generated is its arguments alone).
    pub forced: Option<(String, String)>,
    /// The harmony markup tokens of this vocabulary (`Harmony`).
    pub harmony: Option<HarmonyTokens>,
}

impl Tools {
    /// The plan for `model`; a forced call sets `format` (the sampler's)
    /// to its schema, which must not be set already; one call only adds
    /// the end of a call to the `stop` strings where that ends it.
    /// `conversation` names the request's input: a forced Mistral call's
    /// id is made from it, so the same conversation gets the same prompt.
    pub fn plan(
        &self,
        model: &Model,
        tools_key: &str,
        format: &mut Format,
        stop: &mut Vec<String>,
        conversation: &str,
    ) -> Result<ToolPlan, ApiError> {
        let fmt = model.tool_format().ok_or_else(|| {
            ApiError::field(
                tools_key,
                "this checkpoint's chat template does not show the model tools in a form graphc reads calls back from \
                 (`<tool_call>` blocks, Llama 3's JSON or Mistral's [TOOL_CALLS])",
            )
        })?;
        // Mistral's control tokens, each one token of this vocabulary.
        let mut controls = vec![];
        for &(control, text) in fmt.controls() {
            match model.tokenizer().ok().and_then(|t| t.encode_text(text, true).ok()).as_deref() {
                Some(&[id]) => controls.push((id, control)),
                // The v3 format's calls are read without it (a forced one from its prefix).
                _ if matches!(fmt, ToolFormat::Mistral | ToolFormat::Granite) => {}
                _ => {
                    return Err(ApiError::field(
                        tools_key,
                        format!("the chat template writes calls with {text}, which is not one control token of this vocabulary"),
                    ))
                }
            }
        }
        let harmony = match fmt {
            ToolFormat::Harmony => Some(model.tokenizer().ok().and_then(HarmonyTokens::of).ok_or_else(|| {
                ApiError::field(tools_key, "the chat template writes harmony messages, whose markup tokens are not each one token of this vocabulary")
            })?),
            _ => None,
        };
        let forced: Vec<(String, Value)> = match self.choice {
            Choice::Auto => vec![],
            Choice::Required => self.functions.clone(),
            Choice::Function(i) => vec![self.functions[i].clone()],
        };
        let mut prefix = String::new();
        let mut forced_call = None;
        if !forced.is_empty() {
            if *format != Format::Text {
                return Err(ApiError::field("tool_choice", "a forced call cannot be combined with a `response_format`"));
            }
            if !fmt.can_force() {
                return Err(ApiError::field(
                    "tool_choice",
                    "a forced call is not implemented for this template's call format (<function=...> blocks, which a JSON schema \
                     cannot hold); use `auto`",
                ));
            }
            if forced.len() > 1 && !fmt.forces_a_choice_of_functions() {
                return Err(ApiError::field(
                    "tool_choice",
                    "`required` among several functions is not implemented for this template's call format \
                     ([TOOL_CALLS]name[ARGS]...: the name comes before the arguments); name the function",
                ));
            }
            // Each function's parameters compiled on their own first, so a
            // refusal names the tool's own path.
            for (name, params) in &forced {
                let i = self.functions.iter().position(|(n, _)| n == name).expect("a listed function");
                Schema::compile(params, &format!("{tools_key}[{i}].function.parameters"))?;
            }
            let schema = Schema::compile(&fmt.call_schema(&forced, self.parallel), "tool_choice")?;
            *format = Format::JsonSchema(Arc::new(schema));
            let name = &forced[0].0;
            let id = fmt.call_id(&ParsedCall { name: name.clone(), arguments: json!({}), id: None }, conversation, 0);
            prefix = fmt.call_prefix(name, &id);
            if fmt.prefix_names_the_function() {
                forced_call = Some((name.clone(), id));
            }
        }
        if !self.parallel {
            match (fmt, forced.is_empty()) {
                (ToolFormat::Hermes | ToolFormat::QwenXml, _) => stop.push("</tool_call>".into()),
                // One object, a forced array of one, or one forced call.
                // Harmony: `<|call|>` ends the answer, so one call at most.
                (ToolFormat::Llama3Json | ToolFormat::Harmony, _)
                | (ToolFormat::Mistral | ToolFormat::Granite | ToolFormat::MistralArgs { .. }, false) => {}
                (ToolFormat::Mistral | ToolFormat::Granite | ToolFormat::MistralArgs { .. }, true) => {
                    return Err(ApiError::field(
                        "parallel_tool_calls",
                        "false is not implemented for this template's call format unless a call is forced",
                    ))
                }
            }
        }
        Ok(ToolPlan { format: fmt, prefix, functions: self.functions.clone(), controls, forced: forced_call, harmony })
    }
}

impl ToolPlan {
    fn names(&self) -> Vec<String> {
        self.functions.iter().map(|(n, _)| n.clone()).collect()
    }

    fn control(&self, id: u32) -> Option<Control> {
        self.controls.iter().find(|(c, _)| *c == id).map(|(_, k)| *k)
    }

    /// The calls in an answer (`text`: the visible text generated;
    /// `ids`: its tokens), and what else it said.
    pub fn read(&self, text: &str, ids: &[u32], tok: Option<&Tokenizer>) -> (String, Vec<ParsedCall>) {
        self.read_with(text, ids, &|ids: &[u32]| tok.and_then(|t| t.decode(ids).ok()))
    }

    /// `read`, with `decode` the text of some tokens.
    fn read_with(&self, text: &str, ids: &[u32], decode: &dyn Fn(&[u32]) -> Option<String>) -> (String, Vec<ParsedCall>) {
        let whole = || (text.to_string(), vec![]);
        // A forced call's text is its arguments.
        if let Some((name, id)) = &self.forced {
            return match serde_json::from_str::<Value>(text.trim()) {
                Ok(arguments) if arguments.is_object() => (String::new(), vec![ParsedCall { name: name.clone(), arguments, id: Some(id.clone()) }]),
                _ => whole(),
            };
        }
        if let Some(tokens) = self.harmony {
            // The answer's messages, read by id: runs of plain tokens
            // decoded whole (a character may span tokens).
            let mut channels = Channels::new(tokens);
            let markup = [tokens.start, tokens.end, tokens.message, tokens.channel, tokens.constrain, tokens.ret, tokens.call];
            let mut content = String::new();
            for run in ids.split_inclusive(|i| markup.contains(i)) {
                let (plain, mark) = match run.split_last() {
                    Some((m, plain)) if markup.contains(m) => (plain, Some(*m)),
                    _ => (run, None),
                };
                let Some(t) = decode(plain) else { return whole() };
                content.push_str(&channels.push(&t).1);
                if let Some(m) = mark {
                    channels.push_token(m, "");
                }
            }
            content.push_str(&channels.finish().1);
            let names = self.names();
            let calls: Option<Vec<ParsedCall>> = channels
                .calls()
                .iter()
                .map(|c| c.function().filter(|(name, _)| names.contains(name)).map(|(name, arguments)| ParsedCall { name, arguments, id: None }))
                .collect();
            return match calls {
                Some(calls) => (content.trim().to_string(), calls),
                None => whole(),
            };
        }
        if let ToolFormat::MistralArgs { .. } = self.format {
            // Else the answer cut at its control tokens, each part decoded.
            let first = ids.iter().position(|&i| self.control(i).is_some()).unwrap_or(ids.len());
            let mut pieces: Vec<(Control, Vec<u32>)> = vec![];
            for &i in &ids[first..] {
                match self.control(i) {
                    Some(c) => pieces.push((c, vec![])),
                    None => pieces.last_mut().expect("a control first").1.push(i),
                }
            }
            let pieces: Option<Vec<(Control, String)>> = pieces.into_iter().map(|(c, ids)| Some((c, decode(&ids)?))).collect();
            let (Some(head), Some(pieces)) = (decode(&ids[..first]), pieces) else { return whole() };
            return match self.format.parse_controlled(&head, &pieces, &self.names()) {
                Some(p) => (p.content, p.calls),
                None => whole(),
            };
        }
        let marker_first = ids.first().is_some_and(|&i| self.control(i) == Some(Control::Calls));
        let mut p = self.format.parse(&format!("{}{text}", self.prefix), marker_first || !self.prefix.is_empty(), &self.names());
        if self.format == ToolFormat::QwenXml {
            for call in &mut p.calls {
                if let Some((_, params)) = self.functions.iter().find(|(n, _)| *n == call.name) {
                    coerce_arguments(&mut call.arguments, params);
                }
            }
        }
        (p.content, p.calls)
    }

    /// How much of `text` (visible, so far; `call_at`: its length when a
    /// call's control token came) may be streamed as content.
    pub fn streamable(&self, text: &str, first_id: Option<u32>, call_at: Option<usize>) -> usize {
        if !self.prefix.is_empty() {
            return 0;
        }
        let marker_first = first_id.is_some_and(|i| self.control(i) == Some(Control::Calls));
        self.format.streamable(text, marker_first).min(call_at.unwrap_or(usize::MAX))
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
    /// The tokens generated (Mistral's calls are cut at control tokens).
    pub ids: Vec<u32>,
    /// The visible text's length when a call's control token came.
    pub call_at: Option<usize>,
    pub sent: usize,
}

impl ToolState {
    pub fn new(plan: ToolPlan) -> ToolState {
        ToolState { plan, text: String::new(), ids: vec![], call_at: None, sent: 0 }
    }

    pub fn on_token(&mut self, id: u32, text: &str) {
        if self.call_at.is_none() && self.plan.control(id) == Some(Control::Calls) {
            self.call_at = Some(self.text.len());
        }
        self.ids.push(id);
        self.text.push_str(text);
    }

    /// Text that may be streamed now as content (none that may begin a call).
    pub fn streamable(&mut self) -> String {
        let upto = self.plan.streamable(&self.text, self.ids.first().copied(), self.call_at).max(self.sent);
        let out = self.text[self.sent..upto].to_string();
        self.sent = upto;
        out
    }

    /// The calls of the finished answer and the content not yet
    /// `streamed` beside them; `None` where it called nothing.
    pub fn finish(&self, streamed: &str, tok: Option<&Tokenizer>) -> Option<(Vec<ParsedCall>, Option<String>)> {
        let (content, calls) = self.plan.read(&self.text, &self.ids, tok);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A `MistralArgs` answer (Mistral Small 3.2's format) read from its
    /// tokens: ids 1..=3 the control tokens, every other id a character.
    fn plan(forced: Option<(String, String)>) -> ToolPlan {
        ToolPlan {
            format: ToolFormat::MistralArgs { call_id: true },
            prefix: if forced.is_some() { "[TOOL_CALLS]scale[CALL_ID]a1B2c3D4e[ARGS]".into() } else { String::new() },
            functions: vec![("get_weather".into(), json!({})), ("scale".into(), json!({}))],
            controls: vec![(1, Control::Calls), (2, Control::CallId), (3, Control::Args)],
            forced,
            harmony: None,
        }
    }

    /// A harmony answer (gpt-oss): ids 1..=7 its markup tokens, every other
    /// id a character; the analysis, a preamble and a call.
    #[test]
    fn a_harmony_call_is_read_from_its_messages() {
        let tokens = HarmonyTokens { start: 1, end: 2, message: 3, channel: 4, constrain: 5, ret: 6, call: 7 };
        let plan = ToolPlan {
            format: ToolFormat::Harmony,
            prefix: String::new(),
            functions: vec![("get_weather".into(), json!({}))],
            controls: vec![],
            forced: None,
            harmony: Some(tokens),
        };
        let decode = |ids: &[u32]| -> Option<String> { ids.iter().map(|&i| char::from_u32(i).filter(|_| i > 7)).collect() };
        let ids = |pieces: &[(Option<u32>, &str)]| -> Vec<u32> {
            pieces.iter().flat_map(|(m, t)| m.map(|m| vec![m]).unwrap_or_else(|| t.chars().map(|c| c as u32).collect())).collect()
        };
        let answer = ids(&[
            (Some(4), ""),
            (None, "analysis"),
            (Some(3), ""),
            (None, "Need the weather."),
            (Some(2), ""),
            (Some(1), ""),
            (None, "assistant"),
            (Some(4), ""),
            (None, "commentary"),
            (Some(3), ""),
            (None, "Checking Oslo…"),
            (Some(2), ""),
            (Some(1), ""),
            (None, "assistant"),
            (Some(4), ""),
            (None, "commentary to=functions.get_weather "),
            (Some(5), ""),
            (None, "json"),
            (Some(3), ""),
            (None, "{\"city\": \"Oslo\"}"),
            (Some(7), ""),
        ]);
        let (content, calls) = plan.read_with("", &answer, &decode);
        assert_eq!(content, "Checking Oslo…");
        assert_eq!(calls, vec![ParsedCall { name: "get_weather".into(), arguments: json!({"city": "Oslo"}), id: None }]);
        // A call of a function the request did not list is no call.
        let other = ToolPlan { functions: vec![("scale".into(), json!({}))], ..plan.clone() };
        assert!(other.read_with("", &answer, &decode).1.is_empty());
    }

    fn feed(state: &mut ToolState, pieces: &[(Option<u32>, &str)]) -> String {
        let mut streamed = String::new();
        for (control, text) in pieces {
            match control {
                Some(id) => state.on_token(*id, ""),
                None => text.chars().for_each(|c| state.on_token(c as u32, &c.to_string())),
            }
            streamed.push_str(&state.streamable());
        }
        streamed
    }

    fn decode(ids: &[u32]) -> Option<String> {
        ids.iter().map(|&i| char::from_u32(i).filter(|_| i > 3)).collect()
    }

    #[test]
    fn a_call_is_read_at_its_control_tokens_and_never_streamed() {
        let mut s = ToolState::new(plan(None));
        let streamed = feed(
            &mut s,
            &[
                (None, "Sure. "),
                (Some(1), ""),
                (None, "get_weather"),
                (Some(2), ""),
                (None, "Zz9Yy8Xx7"),
                (Some(3), ""),
                (None, "{\"city\": \"Oslo\"}"),
            ],
        );
        assert_eq!(streamed, "Sure. ");
        let (content, calls) = s.plan.read_with(&s.text, &s.ids, &decode);
        assert_eq!(content, "Sure.");
        assert_eq!(calls, vec![ParsedCall { name: "get_weather".into(), arguments: json!({"city": "Oslo"}), id: Some("Zz9Yy8Xx7".into()) }]);
        assert_eq!(s.plan.format.call_id(&calls[0], "x", 0), "Zz9Yy8Xx7");
        // The same text without the control tokens is content.
        let mut plain = ToolState::new(plan(None));
        let streamed = feed(&mut plain, &[(None, "get_weather{\"city\": \"Oslo\"}")]);
        assert_eq!(streamed, "get_weather{\"city\": \"Oslo\"}");
        assert!(plain.plan.read_with(&plain.text, &plain.ids, &decode).1.is_empty());
    }

    #[test]
    fn a_forced_calls_text_is_its_arguments() {
        let mut s = ToolState::new(plan(Some(("scale".into(), "a1B2c3D4e".into()))));
        assert_eq!(feed(&mut s, &[(None, "{\"x\": 2}")]), "");
        let (_, calls) = s.plan.read_with(&s.text, &s.ids, &decode);
        assert_eq!(calls, vec![ParsedCall { name: "scale".into(), arguments: json!({"x": 2}), id: Some("a1B2c3D4e".into()) }]);
    }
}
