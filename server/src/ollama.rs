//! Ollama's API beside OpenAI's, for the clients written against it:
//! `POST /api/chat`, `POST /api/generate` (streamed by default, as
//! newline-delimited JSON, one object a token, then one with `done: true`
//! and the counts), `GET /api/tags`, `POST /api/show`, `GET /api/version`.
//! The request runs
//! through the same batcher; its fields are read as Ollama documents them,
//! and one graphc does not implement is refused naming it (`images`, an
//! `options` key such as `mirostat`, a schema keyword outside the subset
//! `json_schema` compiles). `tools` (chat) are OpenAI's list; calls come
//! back in `message.tool_calls`, their arguments objects.

use crate::api::{self, Generate, Input};
use crate::error::ApiError;
use crate::routes::{AppState, InFlight};
use crate::tools::ToolState;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use graphc_frontends::chat::Message;
use graphc_frontends::reasoning::ThinkSplit;
use graphc_runtime::batcher::{Event, FinishReason};
use graphc_runtime::json_schema::Schema;
use graphc_runtime::sampling::{Format, Penalties, Sampling};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Which endpoint a request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Generate,
}

const CHAT: &[&str] = &["model", "messages", "stream", "format", "options", "keep_alive", "tools", "think"];
const GENERATE: &[&str] = &["model", "prompt", "system", "raw", "stream", "format", "options", "keep_alive", "think"];
/// `options` keys read (`num_ctx` only where the context holds it).
const OPTIONS: &[&str] = &[
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "seed",
    "num_predict",
    "stop",
    "repeat_penalty",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
    "num_ctx",
];

/// A request read: what to generate, and whether to stream it.
pub struct Request {
    pub generate: Generate,
    pub stream: bool,
    /// `think`: whether a thinking model thinks (its template's
    /// `enable_thinking`); unset, it thinks as its template does by default.
    pub think: Option<bool>,
}

pub fn parse(kind: Kind, body: &[u8], max_seq: usize) -> Result<Request, ApiError> {
    let obj = api::object(body, if kind == Kind::Chat { CHAT } else { GENERATE })?;
    let input = match kind {
        Kind::Chat => Input::Messages(api::messages(&obj)?),
        Kind::Generate => {
            let prompt = api::required::<String>(&obj, "prompt")?;
            match api::field::<bool>(&obj, "raw")?.unwrap_or(false) {
                true => Input::Text(prompt),
                false => {
                    let system = api::field::<String>(&obj, "system")?;
                    let mut messages: Vec<Message> = system.iter().map(|s| Message::system(s)).collect();
                    messages.push(Message::user(&prompt));
                    Input::Messages(messages)
                }
            }
        }
    };
    let format = match obj.get("format") {
        None | Some(Value::Null) => Format::Text,
        Some(Value::String(s)) if s == "json" => Format::JsonObject,
        Some(Value::String(s)) if s.is_empty() => Format::Text,
        Some(schema @ Value::Object(_)) => Format::JsonSchema(Arc::new(Schema::compile(schema, "format")?)),
        Some(_) => return Err(ApiError::field("format", "\"json\" (JSON mode) or a JSON schema")),
    };
    let options = match obj.get("options") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(_) => return Err(ApiError::field("options", "must be an object")),
    };
    let named = |e: ApiError| ApiError { param: e.param.map(|p| format!("options.{p}")), ..e };
    if let Some(k) = options.keys().find(|k| !OPTIONS.contains(&k.as_str())) {
        return Err(ApiError::field(&format!("options.{k}"), "graphc does not implement this option"));
    }
    if let Some(n) = api::field::<u64>(&options, "num_ctx").map_err(named)?.filter(|&n| n as usize > max_seq) {
        return Err(ApiError::field("options.num_ctx", format!("{n} tokens asked; this server's context holds {max_seq}")));
    }
    let opt = |name: &str| api::field::<f32>(&options, name).map_err(named);
    let penalties = Penalties {
        presence: opt("presence_penalty")?.unwrap_or(0.0),
        frequency: opt("frequency_penalty")?.unwrap_or(0.0),
        repeat: opt("repeat_penalty")?.unwrap_or(1.0),
        repeat_last_n: api::field::<usize>(&options, "repeat_last_n").map_err(named)?.unwrap_or(64),
    };
    if penalties.repeat <= 0.0 {
        return Err(ApiError::field("options.repeat_penalty", format!("{} must be positive (1 is off)", penalties.repeat)));
    }
    let sampling = Sampling {
        // Ollama's default temperature.
        temperature: opt("temperature")?.unwrap_or(0.8).max(0.0),
        top_k: api::field::<usize>(&options, "top_k").map_err(named)?.filter(|&k| k > 0),
        top_p: opt("top_p")?.filter(|&p| p < 1.0),
        min_p: opt("min_p")?.filter(|&p| p > 0.0),
        seed: api::field::<u64>(&options, "seed").map_err(named)?.unwrap_or_else(api::fresh_seed),
        penalties,
        format,
        logit_bias: vec![],
    };
    // `num_predict`: -1 (or absent) is "until the context is full".
    let max_tokens = match api::field::<i64>(&options, "num_predict").map_err(named)? {
        None | Some(-1) => None,
        Some(n) if n > 0 => Some(n as usize),
        Some(n) => return Err(ApiError::field("options.num_predict", format!("{n}: at least 1, or -1 for no limit"))),
    };
    let stop = match options.get("stop") {
        None | Some(Value::Null) => vec![],
        Some(Value::String(s)) => vec![s.clone()],
        Some(v) => serde_json::from_value::<Vec<String>>(v.clone()).map_err(|e| ApiError::field("options.stop", e.to_string()))?,
    };
    // `think`: true or false; or, as Ollama takes it for gpt-oss, a level:
    // thinking on at that `reasoning_effort`.
    let (think, effort) = match obj.get("think") {
        None | Some(Value::Null) => (None, None),
        Some(Value::Bool(b)) => (Some(*b), None),
        Some(Value::String(level)) if matches!(level.as_str(), "low" | "medium" | "high") => (Some(true), Some(level.clone())),
        Some(other) => return Err(ApiError::field("think", format!("{other}: true, false, or a level `low`, `medium`, `high`"))),
    };
    let mut template_kwargs: serde_json::Map<String, Value> = think.iter().map(|&t| ("enable_thinking".to_string(), json!(t))).collect();
    if let Some(level) = &effort {
        template_kwargs.insert("reasoning_effort".into(), json!(level));
    }
    let generate = Generate {
        model: api::field::<String>(&obj, "model")?,
        input,
        max_tokens,
        sampling,
        stop,
        logprobs: None,
        stream: false,
        include_usage: false,
        tools: if kind == Kind::Chat { crate::tools::parse(&obj, "tools")? } else { None },
        n: 1,
        template_kwargs,
        reasoning_effort: effort,
        // Thinking comes back as `thinking`, apart from the content, unless turned off.
        split_reasoning: think != Some(false),
    };
    Ok(Request { generate, stream: api::field::<bool>(&obj, "stream")?.unwrap_or(true), think })
}

pub async fn chat(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(&st, &headers, Kind::Chat, &body).await.unwrap_or_else(|e| st.refused(e))
}

pub async fn generate(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(&st, &headers, Kind::Generate, &body).await.unwrap_or_else(|e| st.refused(e))
}

/// `GET /api/tags`: the one model served.
pub async fn tags(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(e) = st.authorize(&headers) {
        return st.refused(e);
    }
    let mut m = listed(&st);
    m["modified_at"] = json!(created_at());
    Json(json!({ "models": [m] })).into_response()
}

/// The served model as `/api/tags` and `/api/ps` list it.
fn listed(st: &AppState) -> Value {
    json!({"name": st.model_name, "model": st.model_name, "details": {"family": st.model.plan().family, "format": "gguf"}})
}

/// `GET /api/ps`: the models loaded — the one served, held until the
/// server stops (Ollama's `expires_at` a far date), its weights' bytes.
pub async fn ps(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(e) = st.authorize(&headers) {
        return st.refused(e);
    }
    let mut m = listed(&st);
    m["size"] = json!(st.model.weights_bytes());
    m["size_vram"] = json!(0);
    m["expires_at"] = json!("9999-12-31T23:59:59Z");
    Json(json!({ "models": [m] })).into_response()
}

/// `POST /api/show {"model": NAME}`: what Ollama's clients read of a
/// model: its family, context length, chat template, parameter count, and
/// what it can do.
pub async fn show(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let run = || -> Result<Response, ApiError> {
        st.authorize(&headers)?;
        let obj = api::object(&body, &["model", "name", "verbose"])?;
        let name = api::field::<String>(&obj, "model")?.or(api::field::<String>(&obj, "name")?);
        if let Some(name) = name.filter(|n| *n != st.model_name) {
            return Err(ApiError::field("model", format!("model `{name}` is not served here; this server serves `{}`", st.model_name)));
        }
        let plan = st.model.plan();
        let parameters: u64 = plan.manifest.iter().map(|w| w.shape.iter().product::<usize>() as u64).sum();
        let template = st.model.tokenizer().ok().and_then(|t| t.template().map(str::to_string)).unwrap_or_default();
        let info = json!({
            "general.architecture": plan.family,
            "general.parameter_count": parameters,
            format!("{}.context_length", plan.family): st.limits.max_seq,
        });
        let details =
            json!({"format": "gguf", "family": plan.family, "families": [plan.family], "parameter_size": format!("{:.1}M", parameters as f64 / 1e6)});
        // `tools` where the template shows the model tools graphc reads calls back from.
        let capabilities: Vec<&str> =
            std::iter::once("completion").chain(st.model.tool_format().map(|_| "tools")).chain(st.thinks().then_some("thinking")).collect();
        Ok(Json(json!({"template": template, "details": details, "model_info": info, "capabilities": capabilities, "modified_at": created_at()}))
            .into_response())
    };
    run().unwrap_or_else(|e| st.refused(e))
}

/// `GET /api/version`.
pub async fn version() -> Response {
    Json(json!({ "version": env!("CARGO_PKG_VERSION") })).into_response()
}

async fn answer(st: &Arc<AppState>, headers: &HeaderMap, kind: Kind, body: &[u8]) -> Result<Response, ApiError> {
    st.authorize(headers)?;
    let Request { generate: mut g, stream, think } = parse(kind, body, st.limits.max_seq)?;
    if think.is_some() && !st.thinks() {
        return Err(ApiError::field("think", "this model's chat template does not think (it writes no <think> blocks)"));
    }
    let tools = st.tool_plan(&mut g, "tools")?;
    let prompt = st.prompt_of(&g, tools.as_ref())?;
    let thinking = st.think_split(&g, &prompt);
    let room = st.limits.max_seq - prompt.len();
    let max_tokens = g.max_tokens.unwrap_or(room).min(room);
    let rx = st.submit(prompt, &g, max_tokens)?;
    let reply = Reply {
        st: st.clone(),
        kind,
        started: Instant::now(),
        first: None,
        tools: tools.map(ToolState::new),
        thinking,
        reasoning: String::new(),
        _in_flight: InFlight::new(&st.metrics),
    };
    if !stream {
        let mut reply = reply;
        let mut rx = rx;
        let mut text = String::new();
        while let Some(event) = rx.recv().await {
            match event {
                Event::Admitted => {}
                Event::Token { id, text: t, .. } => {
                    reply.on_token();
                    let t = reply.think(id, &t);
                    if let Some(tools) = &mut reply.tools {
                        tools.on_token(id, &t);
                    }
                    text.push_str(&t);
                }
                Event::Done { finish, text: tail, prompt_tokens, cached_tokens, completion_tokens } => {
                    let tail = reply.think_last(&tail);
                    // With tools, `done` reads the text from their state.
                    let text = if reply.tools.is_some() { tail } else { text + &tail };
                    let done = reply.done(&text, finish, prompt_tokens, cached_tokens, completion_tokens);
                    return Ok(Json(done).into_response());
                }
                Event::Failed(why) => return Err(st.engine_failed(&why)),
            }
        }
        return Err(st.engine_failed("the engine stopped"));
    }
    // One JSON object a line: a token each, then the last with the counts.
    let lines = futures_util::stream::unfold(Some((reply, rx)), |state| async move {
        let (mut reply, mut rx) = state?;
        loop {
            let line = match rx.recv().await {
                Some(Event::Admitted) => continue,
                Some(Event::Token { id, text, .. }) => {
                    reply.on_token();
                    let text = reply.think(id, &text);
                    let text = match &mut reply.tools {
                        Some(tools) => {
                            tools.on_token(id, &text);
                            tools.streamable()
                        }
                        None => text,
                    };
                    let thinking = std::mem::take(&mut reply.reasoning);
                    if text.is_empty() && thinking.is_empty() {
                        continue;
                    }
                    reply.with_text(&text, &thinking, false)
                }
                Some(Event::Done { finish, text, prompt_tokens, cached_tokens, completion_tokens }) => {
                    let text = reply.think_last(&text);
                    let last = reply.done(&text, finish, prompt_tokens, cached_tokens, completion_tokens);
                    return Some((Ok::<_, std::convert::Infallible>(format!("{last}\n")), None));
                }
                Some(Event::Failed(why)) => {
                    let e = reply.st.engine_failed(&why);
                    return Some((Ok(format!("{}\n", json!({"error": e.message}))), None));
                }
                None => {
                    let e = reply.st.engine_failed("the engine stopped");
                    return Some((Ok(format!("{}\n", json!({"error": e.message}))), None));
                }
            };
            return Some((Ok(format!("{line}\n")), Some((reply, rx))));
        }
    });
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response())
}

/// What every object of one answer shares.
struct Reply {
    st: Arc<AppState>,
    kind: Kind,
    started: Instant,
    first: Option<Instant>,
    tools: Option<ToolState>,
    /// A thinking model's reasoning, split from its content, and what of
    /// it is not sent yet.
    thinking: Option<ThinkSplit>,
    reasoning: String,
    _in_flight: InFlight,
}

impl Reply {
    fn on_token(&mut self) {
        if self.first.is_none() {
            self.first = Some(Instant::now());
            self.st.metrics.observe_ttft(self.started.elapsed().as_secs_f64());
        }
    }

    /// `text` through the reasoning split: its reasoning kept to send,
    /// its content returned.
    fn think(&mut self, id: u32, text: &str) -> String {
        match &mut self.thinking {
            Some(split) => {
                let piece = split.push_token(id, text);
                self.keep(piece)
            }
            None => text.to_string(),
        }
    }

    /// The answer's last text through the split, and what it held back.
    fn think_last(&mut self, text: &str) -> String {
        match &mut self.thinking {
            Some(split) => {
                let piece = split.push_last(text);
                self.keep(piece)
            }
            None => text.to_string(),
        }
    }

    /// The reasoning kept to send, the content returned.
    fn keep(&mut self, (reasoning, content): (String, String)) -> String {
        self.reasoning.push_str(&reasoning);
        content
    }

    /// An object carrying `text` (and `thinking`, where there is some):
    /// the chat's message or the generation's response.
    fn with_text(&self, text: &str, thinking: &str, done: bool) -> Value {
        let mut v = json!({"model": self.st.model_name, "created_at": created_at(), "done": done});
        match self.kind {
            Kind::Chat => v["message"] = json!({"role": "assistant", "content": text}),
            Kind::Generate => v["response"] = json!(text),
        }
        if !thinking.is_empty() {
            match self.kind {
                Kind::Chat => v["message"]["thinking"] = json!(thinking),
                Kind::Generate => v["thinking"] = json!(thinking),
            }
        }
        v
    }

    /// The last object: the rest of the text, why it ended, and Ollama's
    /// counts and durations (nanoseconds).
    fn done(&self, text: &str, finish: FinishReason, prompt_tokens: usize, cached_tokens: usize, completion_tokens: usize) -> Value {
        self.st.count_done(prompt_tokens, cached_tokens, completion_tokens);
        let ns = |d: std::time::Duration| d.as_nanos() as u64;
        let first = self.first.unwrap_or_else(Instant::now);
        let mut v = self.with_text(text, &self.reasoning, true);
        if let Some(tools) = &self.tools {
            // The calls, and what was not streamed of the rest.
            let mut all = tools.text.clone();
            all.push_str(text);
            let done = ToolState { text: all, ..tools.clone() };
            match done.finish(&tools.text[..tools.sent], self.st.model.tokenizer().ok()) {
                Some((calls, rest)) => {
                    v["message"]["content"] = json!(rest.unwrap_or_default());
                    v["message"]["tool_calls"] = crate::tools::ollama_calls(&calls);
                }
                None => v["message"]["content"] = json!(&done.text[tools.sent..]),
            }
        }
        v["done_reason"] = json!(match finish {
            FinishReason::Length => "length",
            _ => "stop",
        });
        v["total_duration"] = json!(ns(self.started.elapsed()));
        v["load_duration"] = json!(0);
        v["prompt_eval_count"] = json!(prompt_tokens - cached_tokens);
        v["prompt_eval_duration"] = json!(ns(first - self.started));
        v["eval_count"] = json!(completion_tokens);
        v["eval_duration"] = json!(ns(first.elapsed()));
        v
    }
}

/// Now as RFC 3339 in UTC (`2026-12-07T04:10:00.123Z`).
fn created_at() -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let (secs, millis) = (now.as_secs() as i64, now.subsec_millis());
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn created_at_is_rfc3339_utc() {
        let t = super::created_at();
        assert_eq!(t.len(), 24, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z') && &t[10..11] == "T", "{t}");
    }
}
