//! The HTTP side: each handler reads its request (`api`), tokenizes it,
//! hands it to the engine thread with a channel for its events, and turns
//! the events into OpenAI's JSON, or server-sent events when streaming.
//! A client that disconnects drops its channel; the engine sees the next
//! send fail and frees the slot.

use crate::api::{self, Endpoint, Generate, Input};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::tools::{self, ToolPlan, ToolState};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use graphc_frontends::chat::ChatOptions;
use graphc_frontends::reasoning::{self, ThinkSplit};
use graphc_runtime::batcher::{Event, FinishReason, Limits, Request};
use graphc_runtime::sampling::{Sampling, TokenLogprob};
use graphc_runtime::Model;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

pub struct AppState {
    pub model: Arc<Model>,
    pub model_name: String,
    pub jobs: Mutex<Option<mpsc::Sender<Request>>>,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
    pub api_key: Option<String>,
    pub max_queue: usize,
    pub next_id: AtomicU64,
}

pub(crate) async fn chat_completions(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(&st, &headers, Endpoint::Chat, &body).await.unwrap_or_else(|e| st.refused(e))
}

pub(crate) async fn completions(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(&st, &headers, Endpoint::Completion, &body).await.unwrap_or_else(|e| st.refused(e))
}

pub(crate) async fn models(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(e) = st.authorize(&headers) {
        return st.refused(e);
    }
    Json(json!({"object": "list", "data": [model_object(&st)]})).into_response()
}

/// `POST /tokenize {"content": TEXT, "add_special": false}` → `{"tokens":
/// [ids]}`, as llama.cpp's server: special tokens' text in `content` is
/// parsed to their ids; `add_special` puts the BOS in front where the
/// checkpoint asks for one.
pub(crate) async fn tokenize(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let run = || -> Result<Response, ApiError> {
        st.authorize(&headers)?;
        let obj = api::object(&body, &["content", "add_special"])?;
        let content = api::required::<String>(&obj, "content")?;
        let tok = st.model.tokenizer().map_err(|e| ApiError::field("content", e.to_string()))?;
        let mut ids = tok.encode_text(&content, true).map_err(|e| ApiError::field("content", e))?;
        if api::field::<bool>(&obj, "add_special")?.unwrap_or(false) {
            if let Some(bos) = tok.bos_id.filter(|&b| tok.add_bos && ids.first() != Some(&b)) {
                ids.insert(0, bos);
            }
        }
        Ok(Json(json!({ "tokens": ids })).into_response())
    };
    run().unwrap_or_else(|e| st.refused(e))
}

/// `POST /detokenize {"tokens": [ids]}` → `{"content": TEXT}` (special
/// tokens as their text).
pub(crate) async fn detokenize(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let run = || -> Result<Response, ApiError> {
        st.authorize(&headers)?;
        let obj = api::object(&body, &["tokens"])?;
        let ids = api::required::<Vec<u32>>(&obj, "tokens")?;
        if let Some((i, t)) = ids.iter().enumerate().find(|(_, &t)| t as usize >= st.limits.vocab_size) {
            return Err(ApiError::field(&format!("tokens[{i}]"), format!("token id {t} is outside the vocabulary of {}", st.limits.vocab_size)));
        }
        let content = st.model.decode(&ids).map_err(|e| ApiError::field("tokens", e.to_string()))?;
        Ok(Json(json!({ "content": content })).into_response())
    };
    run().unwrap_or_else(|e| st.refused(e))
}

/// `GET /v1/models/{id}`: the model served, or 404 naming it.
pub(crate) async fn model(State(st): State<Arc<AppState>>, headers: HeaderMap, axum::extract::Path(id): axum::extract::Path<String>) -> Response {
    if let Err(e) = st.authorize(&headers) {
        return st.refused(e);
    }
    if id != st.model_name {
        let message = format!("model `{id}` is not served here; this server serves `{}`", st.model_name);
        return st.refused(ApiError { status: StatusCode::NOT_FOUND, message, param: Some("model".into()), code: "model_not_found" });
    }
    Json(model_object(&st)).into_response()
}

/// The served model as OpenAI's `model` object.
fn model_object(st: &AppState) -> Value {
    json!({"id": st.model_name, "object": "model", "created": 0, "owned_by": "graphc", "context_length": st.limits.max_seq})
}

pub(crate) async fn health(State(st): State<Arc<AppState>>) -> Response {
    let m = &st.metrics;
    Json(json!({
        "status": "ok",
        "slots": m.slots.load(Relaxed),
        "slots_busy": m.slots_busy.load(Relaxed),
        "queue_depth": m.waiting.load(Relaxed),
    }))
    .into_response()
}

pub(crate) async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], st.metrics.render()).into_response()
}

impl AppState {
    pub(crate) fn refused(&self, e: ApiError) -> Response {
        let counter = match e.status.as_u16() {
            429 => &self.metrics.requests_rejected_full,
            400..=499 => &self.metrics.requests_client_error,
            _ => &self.metrics.requests_failed,
        };
        counter.fetch_add(1, Relaxed);
        e.into_response()
    }

    pub(crate) fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(key) = &self.api_key else { return Ok(()) };
        let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(key.as_str()) {
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, "invalid_api_key", "missing or wrong API key (`Authorization: Bearer KEY`)"));
        }
        Ok(())
    }

    /// Queue a request for the engine, unless the queue is full.
    pub(crate) fn submit(&self, prompt: Vec<u32>, g: &Generate, max_tokens: usize) -> Result<UnboundedReceiver<Event>, ApiError> {
        if self.metrics.waiting.fetch_add(1, Relaxed) >= self.max_queue {
            self.metrics.waiting.fetch_sub(1, Relaxed);
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "queue_full",
                format!("{} requests are waiting for a slot; try again later", self.max_queue),
            ));
        }
        let (tx, rx) = unbounded_channel();
        let request = Request {
            prompt,
            max_tokens,
            sampling: g.sampling.clone(),
            stop: g.stop.clone(),
            logprobs: g.logprobs,
            sink: Box::new(move |e| tx.send(e).is_ok()),
        };
        let sent = self.jobs.lock().unwrap().as_ref().map(|jobs| jobs.send(request).is_ok());
        if sent != Some(true) {
            self.metrics.waiting.fetch_sub(1, Relaxed);
            return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", "the server is shutting down"));
        }
        Ok(rx)
    }

    fn token_text(&self, id: u32) -> (String, Vec<u8>) {
        let bytes = self.model.tokenizer().map(|t| t.decode_bytes(&[id], true)).unwrap_or_default();
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }
}

/// Counts a request in flight while it lives (a dropped stream included).
pub(crate) struct InFlight(Arc<Metrics>);

impl InFlight {
    pub(crate) fn new(m: &Arc<Metrics>) -> InFlight {
        m.in_flight.fetch_add(1, Relaxed);
        InFlight(m.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

async fn answer(st: &Arc<AppState>, headers: &HeaderMap, endpoint: Endpoint, body: &[u8]) -> Result<Response, ApiError> {
    st.authorize(headers)?;
    let mut g = api::parse(endpoint, body)?;
    if let Some(name) = g.model.as_deref().filter(|&n| n != st.model_name) {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("model `{name}` is not served here; this server serves `{}`", st.model_name),
            param: Some("model".into()),
            code: "model_not_found",
        });
    }
    let tools = st.tool_plan(&mut g, "tools")?;
    let prompt = st.prompt_of(&g, tools.as_ref())?;
    let think = st.think_split(&g, &prompt);
    let room = st.limits.max_seq - prompt.len();
    let max_tokens = g.max_tokens.unwrap_or(if endpoint == Endpoint::Chat { room } else { 16 }).min(room);
    let started = Instant::now();
    // `n` choices: as many requests, the i-th sampled from seed + i.
    let mut rxs = Vec::with_capacity(g.n);
    for i in 0..g.n {
        let gi = Generate { sampling: Sampling { seed: g.sampling.seed.wrapping_add(i as u64), ..g.sampling.clone() }, ..g.clone() };
        rxs.push(st.submit(prompt.clone(), &gi, max_tokens)?);
    }
    let reply = Reply {
        st: st.clone(),
        endpoint,
        id: st.next_id(endpoint),
        created: unix_now(),
        logprobs: g.logprobs.is_some(),
        started,
        first: None,
        tools: tools.clone().map(ToolState::new),
        thinking: think.clone(),
    };
    if g.stream {
        let rx = rxs.pop().expect("a streamed request has one choice");
        let stream = Streaming {
            reply,
            rx,
            out: VecDeque::new(),
            done: false,
            include_usage: g.include_usage,
            sent: 0,
            _in_flight: InFlight::new(&st.metrics),
        };
        return Ok(Sse::new(stream.into_stream()).into_response());
    }
    let _in_flight = InFlight::new(&st.metrics);
    let mut reply = reply;
    let (mut choices, mut counts) = (Vec::with_capacity(rxs.len()), [0usize; 3]);
    for (i, rx) in rxs.into_iter().enumerate() {
        reply.tools = tools.clone().map(ToolState::new);
        reply.thinking = think.clone();
        let (mut choice, [prompt, cached, completion]) = collect(&mut reply, rx, i).await?;
        choice["index"] = json!(i);
        choices.push(choice);
        // The prompt is counted once (as OpenAI's usage), the choices' tokens summed.
        counts = if i == 0 { [prompt, cached, completion] } else { [counts[0], counts[1], counts[2] + completion] };
    }
    let usage = usage(counts[0], counts[1], counts[2]);
    Ok(Json(reply.object(choices, Some(usage), false)).into_response())
}

/// OpenAI's usage object (with `prompt_tokens_details.cached_tokens`).
fn usage(prompt_tokens: usize, cached_tokens: usize, completion_tokens: usize) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    })
}

impl AppState {
    /// A request's prompt ids (chat messages through the checkpoint's
    /// template), checked against the context and the vocabulary, as its
    /// logit biases.
    pub(crate) fn prompt_of(&self, g: &Generate, tools: Option<&ToolPlan>) -> Result<Vec<u32>, ApiError> {
        let template = self.model.tokenizer().ok().and_then(|t| t.template());
        if g.reasoning_effort.is_some() && !template.is_some_and(|t| t.contains("reasoning_effort")) {
            return Err(ApiError::field("reasoning_effort", "this model's chat template reads no `reasoning_effort` (gpt-oss's does)"));
        }
        let chat = ChatOptions {
            tools: g.tools.as_ref().map(|t| t.list.clone()).unwrap_or_default(),
            assistant_prefix: tools.map(|t| t.prefix.to_string()).unwrap_or_default(),
            variables: g.template_kwargs.clone(),
            ..ChatOptions::default()
        };
        let (prompt, param) = match &g.input {
            Input::Messages(m) => (
                self.model.chat_prompt(m, &chat).map_err(|e| ApiError::field("messages", format!("the chat template refused them: {e}")))?,
                "messages",
            ),
            Input::Text(t) => (self.model.encode(t).map_err(|e| ApiError::field("prompt", e.to_string()))?, "prompt"),
            Input::Ids(ids) => (ids.clone(), "prompt"),
        };
        self.limits.check(&prompt).map_err(|e| ApiError::field(param, e.to_string()))?;
        if let Some(&(id, _)) = g.sampling.logit_bias.iter().find(|(id, _)| *id as usize >= self.limits.vocab_size) {
            return Err(ApiError::field(
                &format!("logit_bias.{id}"),
                format!("token id {id} is outside the vocabulary of {}", self.limits.vocab_size),
            ));
        }
        Ok(prompt)
    }

    /// Whether this checkpoint's chat template thinks in `<think>` blocks.
    pub(crate) fn thinks(&self) -> bool {
        self.model.tokenizer().ok().and_then(|t| t.template()).is_some_and(reasoning::template_thinks)
    }

    /// The split of an answer's reasoning from its content, for a chat
    /// whose request asks for it (the default) with a template that
    /// thinks; opened where the `prompt` ends inside a `<think>` block.
    pub(crate) fn think_split(&self, g: &Generate, prompt: &[u32]) -> Option<ThinkSplit> {
        if !g.split_reasoning || !matches!(g.input, Input::Messages(_)) {
            return None;
        }
        let tok = self.model.tokenizer().ok()?;
        let tail = tok.decode(&prompt[prompt.len().saturating_sub(8)..]).unwrap_or_default();
        reasoning::split_for(tok, reasoning::prompt_opens_thinking(&tail))
    }

    /// How a request's tools are used with this model (a forced call sets
    /// its sampler's format).
    pub(crate) fn tool_plan(&self, g: &mut Generate, tools_key: &str) -> Result<Option<ToolPlan>, ApiError> {
        match &g.tools {
            Some(t) => {
                let conversation = format!("{:?}", g.input);
                t.plan(&self.model, tools_key, &mut g.sampling.format, &mut g.stop, &conversation).map(Some)
            }
            None => Ok(None),
        }
    }

    /// A request that ended well, in the counters.
    pub(crate) fn count_done(&self, prompt_tokens: usize, _cached_tokens: usize, completion_tokens: usize) {
        let m = &self.metrics;
        m.requests_ok.fetch_add(1, Relaxed);
        m.prompt_tokens.fetch_add(prompt_tokens as u64, Relaxed);
        m.completion_tokens.fetch_add(completion_tokens as u64, Relaxed);
    }

    /// A generation that failed, counted, as the error to answer.
    pub(crate) fn engine_failed(&self, why: &str) -> ApiError {
        self.metrics.requests_failed.fetch_add(1, Relaxed);
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "engine_error", format!("generation failed: {why}"))
    }

    fn next_id(&self, endpoint: Endpoint) -> String {
        let n = self.next_id.fetch_add(1, Relaxed);
        match endpoint {
            Endpoint::Chat => format!("chatcmpl-{n}"),
            Endpoint::Completion => format!("cmpl-{n}"),
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// What every answer to one request shares.
struct Reply {
    st: Arc<AppState>,
    endpoint: Endpoint,
    id: String,
    created: u64,
    logprobs: bool,
    started: Instant,
    first: Option<Instant>,
    tools: Option<ToolState>,
    /// A thinking model's reasoning, split from its content.
    thinking: Option<ThinkSplit>,
}

impl Reply {
    fn on_token(&mut self) {
        if self.first.is_none() {
            self.first = Some(Instant::now());
            self.st.metrics.observe_ttft(self.started.elapsed().as_secs_f64());
        }
    }

    /// The usage object (OpenAI's, with `prompt_tokens_details.cached_tokens`).
    fn on_done(&self, prompt_tokens: usize, cached_tokens: usize, completion_tokens: usize) -> Value {
        self.st.count_done(prompt_tokens, cached_tokens, completion_tokens);
        usage(prompt_tokens, cached_tokens, completion_tokens)
    }

    fn failed(&self, why: &str) -> ApiError {
        self.st.engine_failed(why)
    }

    /// One token's log-probabilities in the endpoint's shape.
    fn logprob_entry(&self, chosen: &TokenLogprob, top: &[TokenLogprob]) -> Value {
        let (text, bytes) = self.st.token_text(chosen.id);
        match self.endpoint {
            Endpoint::Chat => {
                let top: Vec<Value> = top
                    .iter()
                    .map(|t| {
                        let (text, bytes) = self.st.token_text(t.id);
                        json!({"token": text, "logprob": t.logprob, "bytes": bytes})
                    })
                    .collect();
                json!({"token": text, "logprob": chosen.logprob, "bytes": bytes, "top_logprobs": top})
            }
            Endpoint::Completion => {
                let top: serde_json::Map<String, Value> = top.iter().map(|t| (self.st.token_text(t.id).0, json!(t.logprob))).collect();
                json!({"token": text, "logprob": chosen.logprob, "top": top})
            }
        }
    }

    /// `logprobs` of a choice from its entries.
    fn logprobs_value(&self, entries: Vec<Value>, text_offsets: Vec<usize>) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        match self.endpoint {
            Endpoint::Chat => json!({"content": entries}),
            Endpoint::Completion => json!({
                "tokens": entries.iter().map(|e| e["token"].clone()).collect::<Vec<_>>(),
                "token_logprobs": entries.iter().map(|e| e["logprob"].clone()).collect::<Vec<_>>(),
                "top_logprobs": entries.iter().map(|e| e["top"].clone()).collect::<Vec<_>>(),
                "text_offset": text_offsets,
            }),
        }
    }

    fn choice(&self, text: &str, logprobs: Value, finish: Option<FinishReason>, first_chunk: bool, streaming: bool) -> Value {
        let finish = finish.map(|f| f.as_str());
        match (self.endpoint, streaming) {
            (Endpoint::Chat, false) => {
                json!({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": logprobs, "finish_reason": finish})
            }
            (Endpoint::Chat, true) => {
                let delta = match (first_chunk, finish) {
                    (true, _) => json!({"role": "assistant", "content": text}),
                    (false, Some(_)) if text.is_empty() => json!({}),
                    _ => json!({"content": text}),
                };
                json!({"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
            }
            (Endpoint::Completion, _) => json!({"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}),
        }
    }

    fn object(&self, choices: Vec<Value>, usage: Option<Value>, streaming: bool) -> Value {
        let object = match (self.endpoint, streaming) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        };
        let mut v = json!({"id": self.id, "object": object, "created": self.created, "model": self.st.model_name, "choices": choices});
        if let Some(u) = usage {
            v["usage"] = u;
        }
        v
    }
}

/// One whole choice (no streaming), the `choice`-th, and its counts
/// (prompt, cached, completion tokens).
async fn collect(reply: &mut Reply, mut rx: UnboundedReceiver<Event>, choice: usize) -> Result<(Value, [usize; 3]), ApiError> {
    let (mut text, mut entries, mut offsets) = (String::new(), Vec::new(), Vec::new());
    let mut reasoning = String::new();
    while let Some(event) = rx.recv().await {
        match event {
            Event::Admitted => {}
            Event::Token { id, text: t, logprobs } => {
                reply.on_token();
                let t = match &mut reply.thinking {
                    Some(split) => {
                        let (r, c) = split.push_token(id, &t);
                        reasoning.push_str(&r);
                        c
                    }
                    None => t,
                };
                if let Some(tools) = &mut reply.tools {
                    tools.on_token(id, &t);
                }
                if let Some((chosen, top)) = logprobs {
                    offsets.push(text.len());
                    entries.push(reply.logprob_entry(&chosen, &top));
                }
                text.push_str(&t);
            }
            Event::Done { finish, text: tail, prompt_tokens, cached_tokens, completion_tokens } => {
                let tail = match &mut reply.thinking {
                    Some(split) => {
                        let (r, c) = split.push_last(&tail);
                        reasoning.push_str(&r);
                        c
                    }
                    None => tail,
                };
                text.push_str(&tail);
                reply.on_done(prompt_tokens, cached_tokens, completion_tokens);
                let mut value = reply.choice(&text, reply.logprobs_value(entries, offsets), Some(finish), false, false);
                if let Some(tools) = &mut reply.tools {
                    tools.text.push_str(&tail);
                    if let Some((calls, content)) = tools.finish("", reply.st.model.tokenizer().ok()) {
                        // Call ids unique across the choices.
                        let id = if choice == 0 { reply.id.clone() } else { format!("{}_{choice}", reply.id) };
                        let calls = tools::openai_calls(tools.plan.format, &calls, &id);
                        value["message"] = json!({"role": "assistant", "content": content, "tool_calls": calls});
                        value["finish_reason"] = json!("tool_calls");
                    }
                }
                if !reasoning.is_empty() {
                    value["message"]["reasoning_content"] = json!(reasoning);
                }
                return Ok((value, [prompt_tokens, cached_tokens, completion_tokens]));
            }
            Event::Failed(why) => return Err(reply.failed(&why)),
        }
    }
    Err(reply.failed("the engine stopped"))
}

/// A streamed answer: server-sent events, one chunk a token, then the
/// finish, the usage if asked, and `[DONE]`.
struct Streaming {
    reply: Reply,
    rx: UnboundedReceiver<Event>,
    out: VecDeque<SseEvent>,
    done: bool,
    include_usage: bool,
    /// Bytes of text sent so far (completions' `text_offset`).
    sent: usize,
    _in_flight: InFlight,
}

impl Streaming {
    fn into_stream(self) -> impl futures_util::Stream<Item = Result<SseEvent, std::convert::Infallible>> {
        futures_util::stream::unfold(self, |mut s| async move {
            loop {
                if let Some(e) = s.out.pop_front() {
                    return Some((Ok(e), s));
                }
                if s.done {
                    return None;
                }
                match s.rx.recv().await {
                    Some(event) => s.on_event(event),
                    None => {
                        let e = s.reply.failed("the engine stopped");
                        s.push(e.body());
                        s.finish();
                    }
                }
            }
        })
    }

    fn push(&mut self, v: Value) {
        self.out.push_back(SseEvent::default().data(v.to_string()));
    }

    fn finish(&mut self) {
        self.out.push_back(SseEvent::default().data("[DONE]"));
        self.done = true;
    }

    fn chunk(&mut self, text: &str, logprobs: Value, finish: Option<FinishReason>) {
        let first = self.reply.first.is_none() && self.reply.endpoint == Endpoint::Chat;
        let choice = self.reply.choice(text, logprobs, finish, first, true);
        let v = self.reply.object(vec![choice], None, true);
        self.push(v);
    }

    /// `text` through the reasoning split: its reasoning sent as a
    /// `reasoning_content` delta, its content returned.
    fn reasoning(&mut self, id: u32, text: String) -> String {
        match &mut self.reply.thinking {
            Some(split) => {
                let piece = split.push_token(id, &text);
                self.reasoning_piece(piece)
            }
            None => text,
        }
    }

    /// The answer's last text through the split, and what it held back.
    fn reasoning_last(&mut self, text: String) -> String {
        match &mut self.reply.thinking {
            Some(split) => {
                let piece = split.push_last(&text);
                self.reasoning_piece(piece)
            }
            None => text,
        }
    }

    fn reasoning_piece(&mut self, (reasoning, content): (String, String)) -> String {
        if !reasoning.is_empty() {
            let mut delta = json!({"reasoning_content": reasoning});
            if self.reply.first.is_none() {
                delta["role"] = json!("assistant");
                delta["content"] = json!("");
            }
            let choice = json!({"index": 0, "delta": delta, "logprobs": Value::Null, "finish_reason": Value::Null});
            let v = self.reply.object(vec![choice], None, true);
            self.push(v);
            self.reply.on_token();
        }
        content
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Admitted => {}
            Event::Token { id, text, logprobs } => {
                let text = self.reasoning(id, text);
                // With tools, text that may begin a call is held back.
                let text = match &mut self.reply.tools {
                    Some(tools) => {
                        tools.on_token(id, &text);
                        tools.streamable()
                    }
                    None => text,
                };
                let lp = match logprobs {
                    Some((chosen, top)) => {
                        let entry = self.reply.logprob_entry(&chosen, &top);
                        self.reply.logprobs_value(vec![entry], vec![self.sent])
                    }
                    None => Value::Null,
                };
                if !text.is_empty() || !lp.is_null() || self.reply.first.is_none() {
                    self.chunk(&text, lp, None);
                }
                self.sent += text.len();
                self.reply.on_token();
            }
            Event::Done { finish, text, prompt_tokens, cached_tokens, completion_tokens } => {
                let mut text = self.reasoning_last(text);
                let usage = self.reply.on_done(prompt_tokens, cached_tokens, completion_tokens);
                if let Some(tools) = &mut self.reply.tools {
                    tools.text.push_str(&text);
                    let streamed = tools.text[..tools.sent].to_string();
                    match tools.finish(&streamed, self.reply.st.model.tokenizer().ok()) {
                        Some((calls, rest)) => {
                            let calls = tools::openai_calls(tools.plan.format, &calls, &self.reply.id);
                            let first = self.reply.first.is_none();
                            let mut delta = json!({"tool_calls": calls.as_array().expect("calls").iter().enumerate().map(|(i, c)| {
                                let mut c = c.clone();
                                c["index"] = json!(i);
                                c
                            }).collect::<Vec<_>>()});
                            if first || streamed.is_empty() {
                                delta["role"] = json!("assistant");
                                delta["content"] = Value::Null;
                            }
                            if let Some(rest) = rest {
                                delta["content"] = json!(rest);
                            }
                            let choice = json!({"index": 0, "delta": delta, "logprobs": Value::Null, "finish_reason": Value::Null});
                            let v = self.reply.object(vec![choice], None, true);
                            self.push(v);
                            let choice = json!({"index": 0, "delta": {}, "logprobs": Value::Null, "finish_reason": "tool_calls"});
                            let v = self.reply.object(vec![choice], None, true);
                            self.push(v);
                            if self.include_usage {
                                let v = self.reply.object(vec![], Some(usage), true);
                                self.push(v);
                            }
                            self.finish();
                            return;
                        }
                        None => text = tools.text[tools.sent..].to_string(),
                    }
                }
                self.chunk(&text, Value::Null, Some(finish));
                if self.include_usage {
                    let v = self.reply.object(vec![], Some(usage), true);
                    self.push(v);
                }
                self.finish();
            }
            Event::Failed(why) => {
                let e = self.reply.failed(&why);
                self.push(e.body());
                self.finish();
            }
        }
    }
}
