//! Function calling through `graphc serve`, on the real Qwen2.5-Coder
//! 0.5B (its template prints `<tool_call>` blocks): a forced call is a
//! call of a listed function whose arguments have its parameters' shape;
//! the prompt is the template's rendering of the tools plus the call's
//! opening; an `auto` answer is read back as the library reads the same
//! greedy tokens, streamed or whole, OpenAI or Ollama; a conversation that
//! carries calls and results renders as the library renders it; and
//! requests graphc cannot honour are refused naming the field.

use graphc::{ChatOptions, CompileOptions, Message, Model, Sampling, SessionOptions};
use graphc_frontends::chat::{FunctionCall, ToolCall};
use graphc_frontends::tool_calls::ToolFormat;
use graphc_server::{ServeOptions, Server};
use graphc_tests::http::post_json;
use graphc_tests::{model as checkpoint, smollm2};
use serde_json::{json, Value};
use std::sync::Arc;

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "scale", "description": "Multiply a number by a factor.",
            "parameters": {"type": "object", "properties": {"x": {"type": "number"}, "factor": {"type": "number"}}, "required": ["x", "factor"]}}}
    ])
}

const ASK: &str = "What is the weather like in Paris right now?";

fn qwen() -> Arc<Model> {
    let path = checkpoint("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    Arc::new(Model::compile(&path, &CompileOptions { max_seq: Some(1024), ..Default::default() }, None).unwrap())
}

fn start(m: &Arc<Model>) -> Server {
    Server::start(m.clone(), ServeOptions { port: Some(0), slots: Some(2), model_name: Some("qwen".into()), ..Default::default() }).unwrap()
}

fn chat(extra: Value) -> Value {
    let mut v = json!({"messages": [{"role": "user", "content": ASK}], "tools": tools(), "temperature": 0, "max_tokens": 64});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// The arguments of a call, checked against the function's parameters.
fn arguments(call: &Value) -> (String, Value) {
    assert_eq!(call["type"], "function", "{call}");
    assert!(call["id"].as_str().is_some_and(|id| id.starts_with("call_")), "{call}");
    let name = call["function"]["name"].as_str().unwrap().to_string();
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    (name, args)
}

#[test]
fn forced_calls_name_a_listed_function_with_its_parameters_shape() {
    let m = qwen();
    let server = start(&m);
    let addr = server.addr();

    // `required`: some call; the question is about the weather.
    let r = post_json(addr, "/v1/chat/completions", &chat(json!({"tool_choice": "required"})));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    assert!(choice["message"]["content"].is_null(), "{v}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{v}");
    let (name, args) = arguments(&calls[0]);
    assert_eq!(name, "get_weather", "{v}");
    assert!(args["city"].is_string() && args.as_object().unwrap().keys().all(|k| k == "city" || k == "unit"), "{args}");
    // The prompt: the template's rendering of the tools, then `<tool_call>\n`.
    let opts = ChatOptions { tools: tools().as_array().unwrap().clone(), assistant_prefix: "<tool_call>\n".into(), ..Default::default() };
    let prompt = m.chat_prompt(&[Message::user(ASK)], &opts).unwrap();
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(prompt.len() as u64));

    // One call only: the same call.
    let one = post_json(addr, "/v1/chat/completions", &chat(json!({"tool_choice": "required", "parallel_tool_calls": false}))).json();
    assert_eq!(one["choices"][0]["message"]["tool_calls"][0]["function"], calls[0]["function"], "{one}");

    // A named function: `scale`, although the question is about the weather.
    let r = post_json(addr, "/v1/chat/completions", &chat(json!({"tool_choice": {"type": "function", "function": {"name": "scale"}}})));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let (name, args) = arguments(&v["choices"][0]["message"]["tool_calls"][0]);
    assert_eq!(name, "scale", "{v}");
    assert!(args["x"].is_number() && args["factor"].is_number() && args.as_object().unwrap().len() == 2, "{args}");
    server.shutdown().unwrap();
}

/// `auto`: the answer is what the library's greedy tokens say, read back
/// by the template's format; streamed pieces add up to the whole answer;
/// Ollama's `/api/chat` gives the same calls with object arguments.
#[test]
fn auto_answers_are_read_back_as_the_library_reads_them() {
    let m = qwen();
    let opts = ChatOptions { tools: tools().as_array().unwrap().clone(), ..Default::default() };
    let names = vec!["get_weather".to_string(), "scale".to_string()];
    let server = start(&m);
    let addr = server.addr();
    let (mut called, mut answered) = (0, 0);
    for ask in [ASK, "Multiply 3.5 by 4 with the scale tool.", "Write a Python function that reverses a string.", "What is 2 + 2?"] {
        let messages = json!([{"role": "user", "content": ask}]);
        let prompt = m.chat_prompt(&[Message::user(ask)], &opts).unwrap();
        let mut s = m.session(&SessionOptions::default()).unwrap();
        let g = s.generate(&prompt, 64, &Sampling::greedy(), |_| ()).unwrap();
        let stop = &m.plan().model.stop_ids;
        let ids: Vec<u32> = g.tokens.iter().copied().filter(|t| !stop.contains(t)).collect();
        let text = String::from_utf8(m.tokenizer().unwrap().decode_bytes(&ids, false)).unwrap();
        let want = ToolFormat::Hermes.parse(&text, false, &names);
        println!("{ask:?} → {text:?}: {} calls", want.calls.len());
        if want.calls.is_empty() {
            answered += 1;
        } else {
            called += 1;
        }

        let v = post_json(addr, "/v1/chat/completions", &json!({"messages": messages, "tools": tools(), "temperature": 0, "max_tokens": 64})).json();
        let msg = &v["choices"][0]["message"];
        let calls = msg["tool_calls"].as_array().cloned().unwrap_or_default();
        assert_eq!(calls.len(), want.calls.len(), "{ask}: {v} vs {text:?}");
        for (c, w) in calls.iter().zip(&want.calls) {
            assert_eq!(arguments(c), (w.name.clone(), w.arguments.clone()), "{ask}");
        }
        let finish = if want.calls.is_empty() { "stop" } else { "tool_calls" };
        assert_eq!(v["choices"][0]["finish_reason"], finish, "{ask}: {v}");
        assert_eq!(msg["content"].as_str().unwrap_or(""), want.content, "{ask}");

        // Streamed: the content pieces, then the calls, then the finish.
        let r = post_json(
            addr,
            "/v1/chat/completions",
            &json!({"messages": messages, "tools": tools(), "temperature": 0, "max_tokens": 64, "stream": true}),
        );
        let chunks: Vec<Value> = r.events().iter().filter(|e| *e != "[DONE]").map(|e| serde_json::from_str(e).unwrap()).collect();
        let content: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
        let streamed_calls: Vec<Value> = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array()).flatten().cloned().collect();
        assert_eq!(content.trim(), want.content, "{ask}: streamed content");
        assert!(!content.contains("<tool_call>"), "{ask}: a call's text was streamed as content");
        assert_eq!(streamed_calls.len(), want.calls.len(), "{ask}");
        for (c, w) in streamed_calls.iter().zip(&want.calls) {
            assert_eq!(arguments(c), (w.name.clone(), w.arguments.clone()), "{ask}: streamed");
        }
        assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], finish, "{ask}");

        // Ollama: the same calls, arguments as objects.
        let o = post_json(
            addr,
            "/api/chat",
            &json!({"messages": messages, "tools": tools(), "stream": false, "options": {"temperature": 0, "num_predict": 64}}),
        )
        .json();
        let ocalls = o["message"]["tool_calls"].as_array().cloned().unwrap_or_default();
        let got: Vec<(String, Value)> =
            ocalls.iter().map(|c| (c["function"]["name"].as_str().unwrap().to_string(), c["function"]["arguments"].clone())).collect();
        let want_calls: Vec<(String, Value)> = want.calls.iter().map(|c| (c.name.clone(), c.arguments.clone())).collect();
        assert_eq!(got, want_calls, "{ask}: ollama {o}");
        // Streamed (Ollama's default): the pieces hold no call; the last line has the calls.
        let r = post_json(addr, "/api/chat", &json!({"messages": messages, "tools": tools(), "options": {"temperature": 0, "num_predict": 64}}));
        let lines: Vec<Value> = r.body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let last = lines.last().unwrap();
        assert_eq!(last["done"], true, "{ask}: {}", r.body);
        let pieces: String = lines.iter().filter_map(|l| l["message"]["content"].as_str()).collect();
        assert_eq!(pieces.trim(), want.content, "{ask}: ollama streamed content");
        let scalls = last["message"]["tool_calls"].as_array().cloned().unwrap_or_default();
        let got: Vec<(String, Value)> =
            scalls.iter().map(|c| (c["function"]["name"].as_str().unwrap().to_string(), c["function"]["arguments"].clone())).collect();
        assert_eq!(got, want_calls, "{ask}: ollama streamed {}", r.body);
    }
    // The asks were chosen so both kinds of answer are exercised.
    assert!(called >= 1 && answered >= 1, "{called} answers called, {answered} did not");
    server.shutdown().unwrap();
}

/// A conversation carrying a call (its arguments as OpenAI sends them: a
/// JSON object's text) and the tool's result is the prompt the library
/// renders from the same turns, the arguments an object.
#[test]
fn calls_and_results_in_the_history_render_as_the_library_renders_them() {
    let m = qwen();
    let server = start(&m);
    let addr = server.addr();
    let messages = json!([
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "{\"temperature\": 18, \"sky\": \"clear\"}"}
    ]);
    let v = post_json(addr, "/v1/chat/completions", &json!({"messages": messages, "tools": tools(), "temperature": 0, "max_tokens": 4})).json();
    let turns = vec![
        Message::user(ASK),
        Message::tool_calls(vec![ToolCall {
            id: "call_9".into(),
            kind: "function".into(),
            function: FunctionCall { name: "get_weather".into(), arguments: json!({"city": "Paris"}) },
        }]),
        Message { tool_call_id: Some("call_9".into()), ..Message::new("tool", "{\"temperature\": 18, \"sky\": \"clear\"}") },
    ];
    let opts = ChatOptions { tools: tools().as_array().unwrap().clone(), ..Default::default() };
    let text = m.tokenizer().unwrap().apply_chat_template(&turns, &opts).unwrap();
    assert!(text.contains("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"), "{text}");
    assert!(text.contains("<tool_response>\n{\"temperature\": 18, \"sky\": \"clear\"}\n</tool_response>"), "{text}");
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(m.chat_prompt(&turns, &opts).unwrap().len() as u64), "{v}");
    server.shutdown().unwrap();
}

#[test]
fn tool_requests_graphc_cannot_honour_are_refused_naming_the_field() {
    // SmolLM2's template shows the model no tools.
    let small = Arc::new(Model::compile(&smollm2(), &CompileOptions { max_seq: Some(256), ..Default::default() }, None).unwrap());
    let server = Server::start(small, ServeOptions { port: Some(0), ..Default::default() }).unwrap();
    let r = post_json(server.addr(), "/v1/chat/completions", &chat(json!({})));
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("tools")), "{}", r.body);
    let r = post_json(server.addr(), "/api/chat", &json!({"messages": [{"role": "user", "content": "hi"}], "tools": tools()}));
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("tools")), "{}", r.body);
    assert_eq!(post_json(server.addr(), "/api/show", &json!({})).json()["capabilities"], json!(["completion"]));
    server.shutdown().unwrap();

    let m = qwen();
    let server = start(&m);
    let addr = server.addr();
    assert_eq!(post_json(addr, "/api/show", &json!({})).json()["capabilities"], json!(["completion", "tools"]));
    let bad_params = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "string", "format": "email"}}}}}]);
    for (extra, param) in [
        (json!({"tool_choice": {"type": "function", "function": {"name": "rm"}}}), "tool_choice.function.name"),
        (json!({"tool_choice": "sometimes"}), "tool_choice"),
        (json!({"tools": [{"type": "retrieval"}]}), "tools[0].type"),
        (json!({"tools": [{"type": "function", "function": {"name": "a b"}}]}), "tools[0].function.name"),
        (json!({"tools": bad_params, "tool_choice": "required"}), "tools[0].function.parameters.properties.x.format"),
        (json!({"tool_choice": "required", "response_format": {"type": "json_object"}}), "tool_choice"),
        (json!({"logprobs": true}), "logprobs"),
        (json!({"parallel_tool_calls": "no"}), "parallel_tool_calls"),
        (
            json!({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "scale", "arguments": "{x: 1"}}]}]}),
            "messages[1].tool_calls[0].function.arguments",
        ),
        (json!({"messages": [{"role": "user", "content": null}]}), "messages[0].content"),
    ] {
        let r = post_json(addr, "/v1/chat/completions", &chat(extra.clone()));
        assert_eq!(r.status, 400, "{extra}: {}", r.body);
        assert_eq!(r.json()["error"]["param"].as_str(), Some(param), "{extra}: {}", r.body);
    }
    // `none`: tools left out, the answer plain text.
    let v = post_json(addr, "/v1/chat/completions", &chat(json!({"tool_choice": "none", "max_tokens": 8}))).json();
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    let plain = m.chat_prompt(&[Message::user(ASK)], &ChatOptions::default()).unwrap();
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(plain.len() as u64));
    server.shutdown().unwrap();
}

/// Qwen2.5-Coder's weights with Mistral Small 3.2's template and three of
/// its control tokens renamed `[TOOL_CALLS]`, `[CALL_ID]`, `[ARGS]`: what
/// a Mistral Small 3.2 / Devstral GGUF shows the server (none travels
/// here). The model's choices mean nothing; the format does.
/// A call of `get_weather` forced (48 tokens at most): the request's
/// extra fields, the answer, and its one call.
fn forced_get_weather(addr: std::net::SocketAddr) -> (Value, Value, Vec<Value>) {
    let named = json!({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "max_tokens": 48});
    let v = post_json(addr, "/v1/chat/completions", &chat(named.clone())).json();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap().clone();
    assert_eq!(calls.len(), 1, "{v}");
    (named, v, calls)
}

fn qwen_as_mistral(rename: bool) -> Arc<Model> {
    qwen_wearing("mistral_small_32", if rename { &MISTRAL_CONTROLS } else { &[] })
}

fn qwen_wearing(name: &str, renames: &[(u32, &str)]) -> Arc<Model> {
    let path = graphc_tests::qwen_wearing(name, renames);
    Arc::new(Model::compile(&path, &CompileOptions { max_seq: Some(2048), ..Default::default() }, None).unwrap())
}

const MISTRAL_CONTROLS: [(u32, &str); 3] = [(151646, "[TOOL_CALLS]"), (151647, "[CALL_ID]"), (151648, "[ARGS]")];

/// Mistral's later call format, `[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}`
/// (three control tokens; reading an unforced answer at them is
/// unit-tested in `server/src/tools.rs`): a named function is forced by
/// putting the call's whole head — with a 9-character id made from the
/// conversation — after
/// the prompt, as control tokens, and generating the arguments under the
/// parameters' schema; the call comes back with that id, which the
/// template takes back in the history (a `call_…` id it refuses);
/// `required` among several functions cannot name one, and is refused;
/// a vocabulary without the control tokens gets `tools` refused.
#[test]
fn mistral_calls_written_with_control_tokens_are_forced_and_taken_back() {
    let m = qwen_as_mistral(true);
    assert_eq!(m.tool_format(), Some(ToolFormat::MistralArgs { call_id: true }));
    let server = start(&m);
    let addr = server.addr();
    let (named, v, calls) = forced_get_weather(addr);
    let id = calls[0]["id"].as_str().unwrap().to_string();
    assert!(id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()), "{id}");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let args: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string() && args.as_object().unwrap().keys().all(|k| k == "city" || k == "unit"), "{args}");
    // The same request, the same id (made from the conversation).
    let again = post_json(addr, "/v1/chat/completions", &chat(named.clone())).json();
    assert_eq!(again["choices"][0]["message"]["tool_calls"][0]["id"], json!(id), "{again}");
    // The prompt: the template's, then the call's head as control tokens.
    let head = format!("[TOOL_CALLS]get_weather[CALL_ID]{id}[ARGS]");
    let opts = ChatOptions { tools: tools().as_array().unwrap().clone(), assistant_prefix: head.clone(), ..Default::default() };
    let prompt = m.chat_prompt(&[Message::user(ASK)], &opts).unwrap();
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(prompt.len() as u64), "{v}");
    let tail = &prompt[prompt.len() - m.tokenizer().unwrap().encode_text(&head, true).unwrap().len()..];
    for (control, _) in MISTRAL_CONTROLS {
        assert!(tail.contains(&control), "{control} is not in the prompt's tail {tail:?}");
    }

    // Streamed: the same shape, the call in one delta.
    let r = post_json(addr, "/v1/chat/completions", &chat(json!({"tool_choice": named["tool_choice"], "max_tokens": 48, "stream": true})));
    let chunks: Vec<Value> = r.events().iter().filter(|e| *e != "[DONE]").map(|e| serde_json::from_str(e).unwrap()).collect();
    let streamed: Vec<Value> = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array()).flatten().cloned().collect();
    assert_eq!(streamed.len(), 1, "{chunks:?}");
    assert_eq!(streamed[0]["function"]["name"], "get_weather");
    assert!(chunks.iter().all(|c| c["choices"][0]["delta"]["content"].as_str().unwrap_or("").is_empty()), "{chunks:?}");

    // The call and its result in the history: the template takes the id back.
    let history = |call_id: &str| {
        json!({"messages": [
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": null, "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": args.to_string()}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "{\"temperature\": 18}"}
        ], "tools": tools(), "temperature": 0, "max_tokens": 2})
    };
    let r = post_json(addr, "/v1/chat/completions", &history(&id));
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post_json(addr, "/v1/chat/completions", &history("call_1"));
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("messages")), "{}", r.body);

    let r = post_json(addr, "/v1/chat/completions", &chat(json!({"tool_choice": "required"})));
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("tool_choice")), "{}", r.body);
    server.shutdown().unwrap();

    // The same template over a vocabulary without Mistral's control tokens.
    let plain = qwen_as_mistral(false);
    let server = start(&plain);
    let r = post_json(server.addr(), "/v1/chat/completions", &chat(json!({})));
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("tools")), "{}", r.body);
    assert!(r.body.contains("[TOOL_CALLS]"), "{}", r.body);
    server.shutdown().unwrap();
}

/// Qwen3-Coder's call format, `<tool_call>\n<function=NAME>\n<parameter=KEY>\nvalue\n</parameter>...`
/// (its template is told from Hermes' by `<function=`), through the
/// server, on Qwen2.5-Coder's weights wearing Qwen3-Coder's template and
/// led to copy such a call: the answer is read back as the library reads
/// the same greedy tokens — a call of `scale` whose number-typed values
/// are numbers — whole and streamed (nothing of the call streamed as
/// content); a forced call, which a JSON schema cannot hold, is refused.
#[test]
fn qwen3_coder_calls_are_read_from_their_function_blocks() {
    use graphc_frontends::tool_calls::coerce_arguments;
    let m = qwen_wearing("qwen3_coder", &[]);
    assert_eq!(m.tool_format(), Some(ToolFormat::QwenXml));
    let copy = "<tool_call>\n<function=scale>\n<parameter=x>\n3.5\n</parameter>\n<parameter=factor>\n4\n</parameter>\n</function>\n</tool_call>";
    let turns = vec![Message::system("Reply with exactly the text the user sends, nothing else."), Message::user(copy)];
    let messages = json!([{"role": "system", "content": turns[0].content}, {"role": "user", "content": copy}]);
    let opts = ChatOptions { tools: tools().as_array().unwrap().clone(), ..Default::default() };
    let prompt = m.chat_prompt(&turns, &opts).unwrap();
    let mut s = m.session(&SessionOptions::default()).unwrap();
    let g = s.generate(&prompt, 64, &Sampling::greedy(), |_| ()).unwrap();
    let ids: Vec<u32> = g.tokens.iter().copied().filter(|t| !m.plan().model.stop_ids.contains(t)).collect();
    let text = String::from_utf8(m.tokenizer().unwrap().decode_bytes(&ids, false)).unwrap();
    let mut want = ToolFormat::QwenXml.parse(&text, false, &["get_weather".to_string(), "scale".to_string()]);
    for c in &mut want.calls {
        coerce_arguments(&mut c.arguments, &tools()[1]["function"]["parameters"]);
    }
    println!("{text:?} → {want:?}");
    assert_eq!(want.calls.len(), 1, "these weights copy the call: {text:?}");
    assert_eq!(want.calls[0].arguments, json!({"x": 3.5, "factor": 4}));

    let server = start(&m);
    let addr = server.addr();
    let body = json!({"messages": messages, "tools": tools(), "temperature": 0, "max_tokens": 64});
    let v = post_json(addr, "/v1/chat/completions", &body).json();
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().cloned().unwrap_or_default();
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(arguments(&calls[0]), ("scale".to_string(), want.calls[0].arguments.clone()), "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let chunks: Vec<Value> = post_json(addr, "/v1/chat/completions", &streamed)
        .events()
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let content: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert!(!content.contains("<tool_call>") && !content.contains("<function"), "{content:?}");
    let calls: Vec<Value> = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array()).flatten().cloned().collect();
    assert_eq!(calls.len(), 1, "{chunks:?}");
    let mut forced = body.clone();
    forced["tool_choice"] = json!("required");
    let r = post_json(addr, "/v1/chat/completions", &forced);
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("tool_choice")), "{}", r.body);
    server.shutdown().unwrap();
}

/// Granite 3.x's format, `<|tool_call|>` (a control token) then a JSON
/// array of calls, on Qwen2.5-Coder's weights wearing Granite 3.3's
/// template with one of its control tokens renamed `<|tool_call|>`: a
/// forced call is the marker in the prompt and the array generated under
/// the schema, read back as calls.
#[test]
fn granite_calls_follow_their_control_token() {
    let m = qwen_wearing("granite33", &[(151646, "<|tool_call|>")]);
    assert_eq!(m.tool_format(), Some(ToolFormat::Granite));
    let server = start(&m);
    let v = post_json(server.addr(), "/v1/chat/completions", &chat(json!({"tool_choice": "required", "max_tokens": 64}))).json();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{v}");
    let (name, args) = arguments(&calls[0]);
    assert!(name == "get_weather" || name == "scale", "{v}");
    let opts = ChatOptions { tools: tools().as_array().unwrap().clone(), assistant_prefix: "<|tool_call|>".into(), ..Default::default() };
    let prompt = m.chat_prompt(&[Message::user(ASK)], &opts).unwrap();
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(prompt.len() as u64), "{v}");
    assert_eq!(prompt.last(), Some(&151646), "the marker is one control token");
    println!("{name} {args}");
    server.shutdown().unwrap();
}

/// Qwen's unused control tokens renamed to OpenAI's harmony markup.
const HARMONY: [(u32, &str); 7] = [
    (151646, "<|start|>"),
    (151647, "<|end|>"),
    (151648, "<|message|>"),
    (151649, "<|channel|>"),
    (151650, "<|constrain|>"),
    (151651, "<|return|>"),
    (151652, "<|call|>"),
];

/// gpt-oss's harmony format (reading an unforced answer's messages is
/// unit-tested in `server/src/tools.rs` and `frontends/src/harmony.rs`),
/// on Qwen2.5's weights wearing gpt-oss's template with seven control
/// tokens renamed to its markup: a named function is forced by putting the
/// call's header (`<|channel|>commentary to=functions.NAME
/// <|constrain|>json<|message|>`, as control tokens) after the prompt and
/// generating the arguments under the parameters' schema; an `auto`
/// answer's reasoning and content are the library's greedy tokens read as
/// harmony messages, and no markup reaches the text; a vocabulary without
/// the markup tokens gets `tools` refused.
#[test]
fn harmony_calls_are_forced_and_answers_read_as_messages() {
    use graphc_frontends::reasoning::split_for;
    let m = qwen_wearing("gpt_oss", &HARMONY);
    assert_eq!(m.tool_format(), Some(ToolFormat::Harmony));
    let server = start(&m);
    let addr = server.addr();
    let (_, v, calls) = forced_get_weather(addr);
    let (name, args) = arguments(&calls[0]);
    assert_eq!(name, "get_weather", "{v}");
    assert!(args["city"].is_string() && args.as_object().unwrap().keys().all(|k| k == "city" || k == "unit"), "{args}");
    let head = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>";
    let opts = ChatOptions { tools: tools().as_array().unwrap().clone(), assistant_prefix: head.into(), ..Default::default() };
    let prompt = m.chat_prompt(&[Message::user(ASK)], &opts).unwrap();
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(prompt.len() as u64), "{v}");
    let tail = &prompt[prompt.len() - m.tokenizer().unwrap().encode_text(head, true).unwrap().len()..];
    for id in [151649, 151650, 151648] {
        assert!(tail.contains(&id), "{id} is not in the prompt's tail {tail:?}");
    }

    // `auto`: whatever the weights write, read as harmony messages (these
    // weights write plain text: shown as written, the fallback).
    let opts = ChatOptions { tools: tools().as_array().unwrap().clone(), ..Default::default() };
    let prompt = m.chat_prompt(&[Message::user(ASK)], &opts).unwrap();
    let mut s = m.session(&SessionOptions::default()).unwrap();
    let g = s.generate(&prompt, 32, &Sampling::greedy(), |_| ()).unwrap();
    let tok = m.tokenizer().unwrap();
    // The visible text shows the header markup (llama.cpp's rule), not the message ends.
    assert!(!tok.is_control(151649) && !tok.is_control(151648) && tok.is_control(151647) && tok.is_control(151652));
    let mut split = split_for(tok, false).expect("a harmony template thinks in its analysis channel");
    let (mut reasoning, mut content) = (String::new(), String::new());
    // The answer without its end (the server's), control tokens showing no text.
    let stops = &m.plan().model.stop_ids;
    let answer = g.tokens.strip_suffix(&[*g.tokens.last().unwrap()]).filter(|_| stops.contains(g.tokens.last().unwrap())).unwrap_or(&g.tokens);
    for &id in answer {
        let text = if tok.is_control(id) { String::new() } else { tok.decode(&[id]).unwrap() };
        let (r, c) = split.push_token(id, &text);
        reasoning.push_str(&r);
        content.push_str(&c);
    }
    let (r, c) = split.finish();
    reasoning.push_str(&r);
    content.push_str(&c);
    println!("greedy {:?} → reasoning {reasoning:?}, content {content:?}", tok.decode(&g.tokens).unwrap());
    let v = post_json(addr, "/v1/chat/completions", &chat(json!({"max_tokens": 32}))).json();
    let message = &v["choices"][0]["message"];
    assert_eq!(message["content"].as_str().unwrap_or(""), content.trim(), "{v}");
    assert_eq!(message["reasoning_content"].as_str().unwrap_or(""), reasoning, "{v}");
    assert!(!v.to_string().contains("\\ufdd2") && !v.to_string().contains('\u{FDD2}'), "{v}");

    // `reasoning_effort` (Ollama: `think` as a level) reaches the template.
    let mut vars = serde_json::Map::new();
    vars.insert("reasoning_effort".into(), json!("high"));
    let high = m.chat_prompt(&[Message::user(ASK)], &ChatOptions { variables: vars, ..Default::default() }).unwrap();
    let text = m.tokenizer().unwrap().decode(&high).unwrap();
    assert!(text.contains("Reasoning: high"), "{text}");
    let v = post_json(
        addr,
        "/api/chat",
        &json!({"messages": [{"role": "user", "content": ASK}], "stream": false, "think": "high", "options": {"num_predict": 1}}),
    )
    .json();
    assert_eq!(v["done"], true, "{v}");
    let ask = json!({"messages": [{"role": "user", "content": ASK}], "temperature": 0, "max_tokens": 1, "reasoning_effort": "high"});
    let v = post_json(addr, "/v1/chat/completions", &ask).json();
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(high.len() as u64), "{v}");
    // Ollama's request left this very prompt in a slot: all of it reused but the token prefilled anew.
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64(), Some(high.len() as u64 - 1), "{v}");
    let mut bad = ask.clone();
    bad["reasoning_effort"] = json!("extreme");
    let r = post_json(addr, "/v1/chat/completions", &bad);
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("reasoning_effort")), "{}", r.body);
    server.shutdown().unwrap();

    let plain = qwen_wearing("gpt_oss", &[]);
    assert!(plain.tokenizer().unwrap().is_control(151649), "Qwen's own token stays hidden");
    let server = start(&plain);
    let r = post_json(server.addr(), "/v1/chat/completions", &chat(json!({})));
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("tools")), "{}", r.body);
    server.shutdown().unwrap();

    // A template that reads no `reasoning_effort` refuses the field.
    let server = start(&qwen());
    let r = post_json(server.addr(), "/v1/chat/completions", &ask);
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("reasoning_effort")), "{}", r.body);
    server.shutdown().unwrap();
}
