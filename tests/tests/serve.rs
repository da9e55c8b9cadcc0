//! `graphc serve` over HTTP: answers equal `graphc run`'s token by token
//! whatever else is being served, streams end in `[DONE]`, bad requests get
//! a 4xx JSON error naming the field while the others keep their tokens, a
//! full queue gets 429, a client that leaves frees its slot, and shutdown
//! answers what is in flight.

use graphc::{CompileOptions, Model, Sampling, SessionOptions};
use graphc_server::{ServeOptions, Server};
use graphc_tests::http::{self, get, post_json, read_chunk, read_head};
use graphc_tests::{serve_prompts, smollm2};
use serde_json::{json, Value};
use std::io::BufReader;
use std::sync::Arc;

static PROMPTS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(serve_prompts);

fn model() -> Arc<Model> {
    Arc::new(Model::compile(&smollm2(), &CompileOptions { max_seq: Some(256), ..Default::default() }, None).unwrap())
}

fn start(model: &Arc<Model>, opts: ServeOptions) -> Server {
    Server::start(model.clone(), ServeOptions { port: Some(0), model_name: Some("smollm2".into()), ..opts }).unwrap()
}

/// What `graphc run` prints for a prompt: each greedy token's text (control
/// tokens, such as the end of generation, left out).
fn run_tokens(m: &Model, prompt: &str, n: usize) -> Vec<String> {
    let mut s = m.session(&SessionOptions::default()).unwrap();
    let ids = m.encode(prompt).unwrap();
    let g = s.generate(&ids, n, &Sampling::greedy(), |_| ()).unwrap();
    let stop = &m.plan().model.stop_ids;
    let tok = m.tokenizer().unwrap();
    g.tokens.iter().filter(|t| !stop.contains(t)).map(|&t| String::from_utf8_lossy(&tok.decode_bytes(&[t], true)).into_owned()).collect()
}

fn completion(prompt: &str, n: usize) -> Value {
    json!({"model": "smollm2", "prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 0})
}

fn tokens_of(v: &Value) -> Vec<String> {
    v["choices"][0]["logprobs"]["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
}

#[test]
fn eight_concurrent_completions_equal_graphc_run_token_by_token() {
    let m = model();
    const N: usize = 12;
    let server = start(&m, ServeOptions { slots: Some(3), ..Default::default() });
    let addr = server.addr();
    let answers: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = PROMPTS.iter().map(|p| s.spawn(move || post_json(addr, "/v1/completions", &completion(p, N)))).collect();
        handles
            .into_iter()
            .map(|h| {
                let r = h.join().unwrap();
                assert_eq!(r.status, 200, "{}", r.body);
                r.json()
            })
            .collect()
    });
    for (p, a) in PROMPTS.iter().zip(&answers) {
        let want = run_tokens(&m, p, N);
        assert_eq!(tokens_of(a), want, "{p:?} served beside 7 others");
        assert_eq!(a["choices"][0]["text"].as_str().unwrap(), want.concat());
        // Alone on the server too.
        let alone = post_json(addr, "/v1/completions", &completion(p, N)).json();
        assert_eq!(tokens_of(&alone), want, "{p:?} alone");
    }
    let metrics = get(addr, "/metrics").body;
    assert!(metrics.contains("graphc_requests_total{outcome=\"ok\"} 16"), "{metrics}");
    assert!(metrics.contains("graphc_time_to_first_token_seconds_count 16"));
    server.shutdown().unwrap();
}

#[test]
fn a_streamed_chat_is_the_whole_answer_in_pieces_and_ends_with_done() {
    let m = model();
    let server = start(&m, ServeOptions::default());
    let body = |stream| {
        json!({"messages": [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Name three colours."}],
               "max_tokens": 24, "temperature": 0, "stream": stream, "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null }})
    };
    let whole = post_json(server.addr(), "/v1/chat/completions", &body(false)).json();
    let content = whole["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(!content.is_empty());
    let streamed = post_json(server.addr(), "/v1/chat/completions", &body(true));
    assert_eq!(streamed.status, 200);
    assert!(streamed.headers.iter().any(|(k, v)| k == "content-type" && v.starts_with("text/event-stream")));
    let events = streamed.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, content);
    let usage = &chunks.last().unwrap()["usage"];
    for key in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(usage[key], whole["usage"][key], "{key}");
    }
    // The same prompt again: its slot's cache held all of it but the last
    // id (run again for its logits), and the answer is the same.
    let prompt_tokens = whole["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(whole["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], prompt_tokens - 1);
    assert_eq!(chunks[chunks.len() - 2]["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"]);
    // The chat prompt is the checkpoint's template, as `graphc run --chat` renders it.
    let msgs = [graphc::Message::new("system", "You are brief."), graphc::Message::new("user", "Name three colours.")];
    let ids = m.chat_prompt(&msgs, &Default::default()).unwrap();
    assert_eq!(usage["prompt_tokens"], ids.len());
    server.shutdown().unwrap();
}

#[test]
fn bad_requests_get_a_4xx_naming_the_field_and_the_others_keep_their_tokens() {
    let m = model();
    let server = start(&m, ServeOptions { slots: Some(2), ..Default::default() });
    let addr = server.addr();
    let want = run_tokens(&m, &PROMPTS[0], 16);
    // A slow client: it streams and never reads. The engine never waits on
    // a client (each has its own unbounded channel), so it slows no one.
    let slow = json!({"prompt": &PROMPTS[5], "max_tokens": 64, "temperature": 0, "stream": true}).to_string();
    let _slow = http::open(addr, "POST", "/v1/completions", &["Content-Type: application/json"], slow.as_bytes());
    // A request running the whole time, beside the bad ones.
    std::thread::scope(|s| {
        let good = s.spawn(move || post_json(addr, "/v1/completions", &completion(&PROMPTS[0], 16)));
        let long_prompt = "word ".repeat(400);
        let cases: Vec<(Vec<u8>, &str, u16, Option<&str>)> = vec![
            (b"{\"prompt\": \"x\",".to_vec(), "/v1/completions", 400, None),
            (b"[1, 2]".to_vec(), "/v1/completions", 400, None),
            (b"{\"prompt\": \"caf\xff\"}".to_vec(), "/v1/completions", 400, None),
            (json!({"prompt": "x", "max_tokens": 0}).to_string().into_bytes(), "/v1/completions", 400, Some("max_tokens")),
            (json!({"prompt": "x", "max_tokens": "ten"}).to_string().into_bytes(), "/v1/completions", 400, Some("max_tokens")),
            (json!({"prompt": "x", "temperature": 9}).to_string().into_bytes(), "/v1/completions", 400, Some("temperature")),
            (json!({"prompt": long_prompt}).to_string().into_bytes(), "/v1/completions", 400, Some("prompt")),
            (json!({"prompt": [1, 2, 99999999]}).to_string().into_bytes(), "/v1/completions", 400, Some("prompt")),
            (json!({"prompt": "x", "n": 17}).to_string().into_bytes(), "/v1/completions", 400, Some("n")),
            (json!({"prompt": "x", "n": 2, "stream": true}).to_string().into_bytes(), "/v1/completions", 400, Some("n")),
            (json!({"prompt": "x", "stop": 7}).to_string().into_bytes(), "/v1/completions", 400, Some("stop")),
            (json!({"prompt": "x", "logprobs": 50}).to_string().into_bytes(), "/v1/completions", 400, Some("logprobs")),
            (json!({"prompt": "x", "model": "gpt-4"}).to_string().into_bytes(), "/v1/completions", 404, Some("model")),
            (json!({"messages": "hi"}).to_string().into_bytes(), "/v1/chat/completions", 400, Some("messages")),
            (json!({"messages": [{"role": "user"}]}).to_string().into_bytes(), "/v1/chat/completions", 400, Some("messages[0].content")),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "tools": []}).to_string().into_bytes(),
                "/v1/chat/completions",
                400,
                Some("tools"),
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {}}})
                    .to_string()
                    .into_bytes(),
                "/v1/chat/completions",
                400,
                Some("response_format.json_schema.schema"),
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}}).to_string().into_bytes(),
                "/v1/chat/completions",
                400,
                Some("response_format.json_schema"),
            ),
            (
                json!({"prompt": "x", "response_format": {"type": "json_object"}}).to_string().into_bytes(),
                "/v1/completions",
                400,
                Some("response_format"),
            ),
            (json!({"prompt": "x", "logit_bias": {"abc": 1}}).to_string().into_bytes(), "/v1/completions", 400, Some("logit_bias.abc")),
            (json!({"prompt": "x", "logit_bias": {"5": 500}}).to_string().into_bytes(), "/v1/completions", 400, Some("logit_bias.5")),
            (json!({"prompt": "x", "logit_bias": {"99999999": 1}}).to_string().into_bytes(), "/v1/completions", 400, Some("logit_bias.99999999")),
            (b"{}".to_vec(), "/v1/nothing", 404, None),
        ];
        for (body, path, status, param) in cases {
            let r = http::send(addr, "POST", path, &["Content-Type: application/json"], &body);
            assert_eq!(r.status, status, "{} -> {}", String::from_utf8_lossy(&body), r.body);
            let e = &r.json()["error"];
            assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", r.body);
            assert_eq!(e["param"].as_str(), param, "{}", r.body);
        }
        let good = good.join().unwrap();
        assert_eq!(good.status, 200);
        assert_eq!(tokens_of(&good.json()), want);
    });
    // A huge max_tokens is cut to what the context holds: `length`, not an error.
    let huge = post_json(addr, "/v1/completions", &json!({"prompt": &PROMPTS[3], "max_tokens": 1u64 << 40, "temperature": 0, "stop": ["\n\n"]}));
    assert_eq!(huge.status, 200, "{}", huge.body);
    let usage = &huge.json()["usage"];
    assert!(usage["total_tokens"].as_u64().unwrap() <= 256, "{usage}");
    assert_eq!(get(addr, "/health").json()["status"], "ok");
    server.shutdown().unwrap();
}

/// JSON mode (`response_format: {"type": "json_object"}`): the answer is a
/// JSON object (closed, then the end token: `stop`), or, cut by the token
/// budget, the start of one; sampled at four seeds beside a request
/// without it, every sampled answer closed here. The control is the same
/// chat without JSON mode, whose answer (SmolLM2 opens a Markdown code
/// fence) is not one.
#[test]
fn json_mode_answers_a_json_object() {
    let m = model();
    let server = start(&m, ServeOptions { slots: Some(2), ..Default::default() });
    let addr = server.addr();
    let ask = "Give a JSON object with the keys city and population for Paris.";
    let chat = |format: Option<&str>, temperature: f32, seed: u64| {
        let mut body = json!({"messages": [{"role": "user", "content": ask}], "max_tokens": 100, "temperature": temperature, "seed": seed});
        if let Some(f) = format {
            body["response_format"] = json!({"type": f});
        }
        let r = post_json(addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        (v["choices"][0]["message"]["content"].as_str().unwrap().to_string(), v["choices"][0]["finish_reason"].as_str().unwrap().to_string())
    };
    let is_object = |text: &str| serde_json::from_str::<serde_json::Map<String, Value>>(text).is_ok();
    std::thread::scope(|s| {
        let plain = s.spawn(|| chat(None, 0.0, 0));
        for seed in 1..=4 {
            let (text, finish) = chat(Some("json_object"), 0.8, seed);
            assert_eq!(finish, "stop", "seed {seed}: {text}");
            assert!(is_object(&text), "seed {seed}: {text}");
        }
        // Greedy SmolLM2 lists keys until the budget ends: the start of an object.
        let (text, finish) = chat(Some("json_object"), 0.0, 0);
        assert!(finish == "stop" && is_object(&text) || finish == "length" && text.trim_start().starts_with('{'), "greedy ({finish}): {text}");
        let (text, _) = chat(Some("text"), 0.0, 0);
        let (plain, _) = plain.join().unwrap();
        assert_eq!(text, plain, "`text` is no format at all");
        assert!(!is_object(&plain), "the control must not be a JSON object already: {plain}");
    });
    server.shutdown().unwrap();
}

/// Structured outputs (`response_format: {"type": "json_schema"}`): each
/// sampled answer is an object of exactly the schema's properties, of its
/// types. The control: JSON mode alone, at the same seeds, answers with
/// some object the schema rejects (a float population, another key).
#[test]
fn a_json_schema_shapes_the_answer() {
    let m = model();
    let server = start(&m, ServeOptions { slots: Some(2), ..Default::default() });
    let addr = server.addr();
    let ask = json!([{"role": "user", "content": "Give a JSON object with the keys city and population for Paris."}]);
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
        "additionalProperties": false
    });
    let fits = |text: &str| {
        let Ok(v) = serde_json::from_str::<serde_json::Map<String, Value>>(text) else { return false };
        v.len() == 2 && v.get("city").is_some_and(Value::is_string) && v.get("population").is_some_and(|p| p.is_i64() || p.is_u64())
    };
    let answer = |format: Value, seed: u64| {
        let body = json!({"messages": ask, "max_tokens": 60, "temperature": 0.8, "seed": seed, "response_format": format});
        let r = post_json(addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        (v["choices"][0]["message"]["content"].as_str().unwrap().to_string(), v["choices"][0]["finish_reason"].as_str().unwrap().to_string())
    };
    let mut control_fits = true;
    for seed in 1..=4 {
        let (text, finish) = answer(json!({"type": "json_schema", "json_schema": {"name": "city", "strict": true, "schema": schema}}), seed);
        assert!(finish == "stop" && fits(&text), "seed {seed} ({finish}): {text}");
        let (plain, _) = answer(json!({"type": "json_object"}), seed);
        control_fits &= fits(&plain);
    }
    assert!(!control_fits, "the control: JSON mode alone must answer outside the schema at one seed at least");
    // Ollama's `format` takes the schema too.
    let r = post_json(addr, "/api/chat", &json!({"messages": ask, "format": schema, "stream": false, "options": {"seed": 1, "num_predict": 60}}));
    assert!(fits(r.json()["message"]["content"].as_str().unwrap()), "{}", r.body);
    server.shutdown().unwrap();
}

/// A schema's bounds shape the values too: a string of 2 to 3 capitals
/// (`pattern`) and an integer of 1 to 5, where the model asked for Paris and its
/// population would write neither. The control: the same schema without
/// the bounds, at the same seeds, answers outside them at one seed at least.
#[test]
fn a_json_schema_bounds_strings_and_integers() {
    let m = model();
    let server = start(&m, ServeOptions { slots: Some(2), ..Default::default() });
    let addr = server.addr();
    let ask = json!([{"role": "user", "content": "Give a JSON object with the keys city and population for Paris."}]);
    let schema = |bounded: bool| {
        let (mut city, mut population) = (json!({"type": "string"}), json!({"type": "integer"}));
        if bounded {
            city = json!({"type": "string", "minLength": 2, "maxLength": 3, "pattern": "^[A-Z]+$"});
            population = json!({"type": "integer", "minimum": 1, "maximum": 5});
        }
        json!({"type": "object", "properties": {"city": city, "population": population}, "required": ["city", "population"], "additionalProperties": false})
    };
    let in_bounds = |text: &str| {
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let chars = v["city"].as_str().unwrap().chars().count();
        let upper = v["city"].as_str().unwrap().bytes().all(|b| b.is_ascii_uppercase());
        (2..=3).contains(&chars) && upper && v["population"].as_i64().is_some_and(|p| (1..=5).contains(&p))
    };
    let answer = |bounded: bool, seed: u64| {
        let format = json!({"type": "json_schema", "json_schema": {"name": "city", "strict": true, "schema": schema(bounded)}});
        let body = json!({"messages": ask, "max_tokens": 60, "temperature": 0.8, "seed": seed, "response_format": format});
        let r = post_json(addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{}", r.body);
        v["choices"][0]["message"]["content"].as_str().unwrap().to_string()
    };
    let mut control_in_bounds = true;
    for seed in 1..=4 {
        let text = answer(true, seed);
        assert!(in_bounds(&text), "seed {seed}: {text}");
        control_in_bounds &= in_bounds(&answer(false, seed));
    }
    assert!(!control_in_bounds, "the control: without the bounds an answer falls outside them at one seed at least");
    server.shutdown().unwrap();
}

/// `/tokenize` and `/detokenize` (llama.cpp's): a prompt's ids as the
/// model's tokenizer gives them (special tokens' text parsed, the BOS with
/// `add_special`), and back to the text; bad bodies named by field.
#[test]
fn tokenize_and_detokenize_round_trip() {
    let m = model();
    let server = start(&m, ServeOptions { slots: Some(1), ..Default::default() });
    let addr = server.addr();
    let text = format!("<|im_start|>user\n{}<|im_end|>", PROMPTS[2]);
    let r = post_json(addr, "/tokenize", &json!({ "content": text }));
    assert_eq!(r.status, 200, "{}", r.body);
    let ids: Vec<u32> = serde_json::from_value(r.json()["tokens"].clone()).unwrap();
    let tok = m.tokenizer().unwrap();
    assert_eq!(ids, tok.encode_text(&text, true).unwrap());
    assert!(ids.contains(&tok.encode_text("<|im_end|>", true).unwrap()[0]), "special tokens parsed");
    let back = post_json(addr, "/detokenize", &json!({ "tokens": ids }));
    assert_eq!(back.status, 200, "{}", back.body);
    assert_eq!(back.json()["content"], text.as_str());
    for (path, body, param) in [
        ("/tokenize", json!({}), "content"),
        ("/tokenize", json!({"content": "x", "with_pieces": true}), "with_pieces"),
        ("/detokenize", json!({"tokens": [1, 99999999]}), "tokens[1]"),
        ("/detokenize", json!({"tokens": "x"}), "tokens"),
    ] {
        let r = post_json(addr, path, &body);
        assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some(param)), "{path} {body}: {}", r.body);
    }
    server.shutdown().unwrap();
}

/// Ollama's API: `/api/chat` whole and streamed (newline-delimited JSON:
/// the pieces, then `done` with the counts) answers as the OpenAI chat
/// does at temperature 0; `/api/generate` raw as the completion does, and
/// through the template with a system prompt as the chat does; `format:
/// "json"` is JSON mode; `/api/tags` and `/api/ps` name the model; an option, a schema
/// or an image graphc does not implement is refused naming it.
#[test]
fn the_ollama_api_answers_as_the_openai_one() {
    let m = model();
    let server = start(&m, ServeOptions { slots: Some(2), ..Default::default() });
    let addr = server.addr();
    let messages = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": &PROMPTS[0]}]);
    let openai = post_json(addr, "/v1/chat/completions", &json!({"messages": messages, "max_tokens": 12, "temperature": 0}));
    assert_eq!(openai.status, 200, "{}", openai.body);
    let want = openai.json()["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    let options = json!({"temperature": 0, "num_predict": 12});
    let whole = post_json(addr, "/api/chat", &json!({"model": "smollm2", "messages": messages, "stream": false, "options": options}));
    assert_eq!(whole.status, 200, "{}", whole.body);
    let v = whole.json();
    assert_eq!(v["message"]["content"], want.as_str());
    assert_eq!((v["done"].as_bool(), v["message"]["role"].as_str()), (Some(true), Some("assistant")));
    assert!(v["eval_count"].as_u64().is_some_and(|n| (1..=12).contains(&n)) && v["prompt_eval_count"].as_u64().is_some(), "{v}");
    // Streamed by default: one object a line.
    let streamed = post_json(addr, "/api/chat", &json!({"messages": messages, "options": options}));
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    let lines: Vec<Value> = streamed.body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.len() > 2, "{}", streamed.body);
    let text: String = lines.iter().map(|l| l["message"]["content"].as_str().unwrap()).collect();
    assert_eq!(text, want);
    assert!(lines[..lines.len() - 1].iter().all(|l| l["done"] == false) && lines.last().unwrap()["done"] == true);
    // /api/generate: raw is the completion; with a system, the chat.
    let raw = post_json(
        addr,
        "/api/generate",
        &json!({"prompt": &PROMPTS[0], "raw": true, "stream": false, "options": {"temperature": 0, "num_predict": 6}}),
    );
    assert_eq!(raw.json()["response"], run_tokens(&m, &PROMPTS[0], 6).concat().as_str(), "{}", raw.body);
    let templated = post_json(addr, "/api/generate", &json!({"system": "Be brief.", "prompt": &PROMPTS[0], "stream": false, "options": options}));
    assert_eq!(templated.json()["response"], want.as_str());
    // format "json": JSON mode.
    let ask = json!([{"role": "user", "content": "Give a JSON object with the keys city and population for Paris."}]);
    let j = post_json(addr, "/api/chat", &json!({"messages": ask, "format": "json", "stream": false, "options": {"seed": 1, "num_predict": 100}}));
    let content = j.json()["message"]["content"].as_str().unwrap().to_string();
    assert!(serde_json::from_str::<serde_json::Map<String, Value>>(&content).is_ok(), "{content}");
    assert_eq!(get(addr, "/v1/models/smollm2").json()["id"], "smollm2");
    assert_eq!(get(addr, "/v1/models/gpt-4").status, 404);
    let tags = get(addr, "/api/tags").json();
    assert_eq!(tags["models"][0]["name"], "smollm2");
    let ps = get(addr, "/api/ps").json();
    assert_eq!(ps["models"][0]["name"], "smollm2");
    assert!(ps["models"][0]["size"].as_u64().is_some_and(|b| b > 50_000_000), "the weights' bytes: {ps}");
    let show = post_json(addr, "/api/show", &json!({"model": "smollm2"})).json();
    assert_eq!(show["model_info"]["llama.context_length"], 256, "{show}");
    assert!(show["template"].as_str().is_some_and(|t| t.contains("im_start")), "the checkpoint's chat template: {show}");
    assert_eq!(post_json(addr, "/api/show", &json!({"model": "llama3"})).status, 400);
    for (path, body, param) in [
        ("/api/chat", json!({"messages": messages, "options": {"mirostat": 1}}), "options.mirostat"),
        ("/api/chat", json!({"messages": messages, "options": {"num_ctx": 100000}}), "options.num_ctx"),
        ("/api/chat", json!({"messages": messages, "options": {"temperature": "hot"}}), "options.temperature"),
        ("/api/chat", json!({"messages": messages, "format": {"type": "object", "properties": {"a": {"anyOf": []}}}}), "format.properties.a.anyOf"),
        ("/api/chat", json!({"messages": messages, "tools": []}), "tools"),
        ("/api/generate", json!({"prompt": "x", "images": ["aGk="]}), "images"),
        ("/api/generate", json!({}), "prompt"),
    ] {
        let r = post_json(addr, path, &body);
        assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some(param)), "{path} {body}: {}", r.body);
    }
    server.shutdown().unwrap();
}

/// `logit_bias`: -100 on the token greedy decoding would pick first bans
/// it (another comes first), +100 on some other token forces it.
/// `n` choices are as many requests: greedy ones agree with the single
/// answer; sampled ones are the single answers of seeds `seed + i`
/// (distinct, and each reproducible alone); usage counts the prompt once.
#[test]
fn n_choices_are_the_answers_of_successive_seeds() {
    let m = model();
    let server = start(&m, ServeOptions { slots: Some(2), ..Default::default() });
    let addr = server.addr();
    let p = &PROMPTS[0];
    let ask = |extra: Value| {
        let mut body = json!({"prompt": p, "max_tokens": 8});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = post_json(addr, "/v1/completions", &body);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    };
    let texts = |v: &Value| v["choices"].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    let one = ask(json!({"temperature": 0}));
    let three = ask(json!({"temperature": 0, "n": 3}));
    assert_eq!(texts(&three), vec![texts(&one)[0].clone(); 3]);
    let indexes: Vec<u64> = three["choices"].as_array().unwrap().iter().map(|c| c["index"].as_u64().unwrap()).collect();
    assert_eq!(indexes, [0, 1, 2]);
    let u = (&one["usage"], &three["usage"]);
    assert_eq!(u.1["prompt_tokens"], u.0["prompt_tokens"]);
    assert_eq!(u.1["completion_tokens"].as_u64(), u.0["completion_tokens"].as_u64().map(|c| 3 * c));
    let sampled = texts(&ask(json!({"temperature": 1.5, "seed": 40, "n": 3})));
    let alone: Vec<String> = (40..43).map(|seed| texts(&ask(json!({"temperature": 1.5, "seed": seed})))[0].clone()).collect();
    assert_eq!(sampled, alone);
    assert!(alone[0] != alone[1] || alone[1] != alone[2], "three seeds, one answer: {alone:?}");
    server.shutdown().unwrap();
}

#[test]
fn logit_bias_bans_and_forces_tokens() {
    let m = model();
    let server = start(&m, ServeOptions { slots: Some(1), ..Default::default() });
    let addr = server.addr();
    let first = |bias: Value| {
        let r =
            post_json(addr, "/v1/completions", &json!({"prompt": &PROMPTS[0], "max_tokens": 3, "temperature": 0, "logprobs": 0, "logit_bias": bias}));
        assert_eq!(r.status, 200, "{}", r.body);
        tokens_of(&r.json())
    };
    let plain = first(json!({}));
    assert_eq!(plain, run_tokens(&m, &PROMPTS[0], 3));
    let tok = m.tokenizer().unwrap();
    let id_of = |text: &str| (0..tok.vocab_size as u32).find(|&t| String::from_utf8_lossy(&tok.decode_bytes(&[t], true)) == text).unwrap();
    let top = id_of(&plain[0]);
    let banned = first(json!({ top.to_string(): -100 }));
    assert_ne!(banned[0], plain[0], "a banned token is not picked");
    let got = first(json!({ id_of(" banana").to_string(): 100 }));
    assert_eq!(got[0], " banana", "a forced token is picked: {got:?}");
    server.shutdown().unwrap();
}

#[test]
fn a_full_queue_gets_429_and_a_client_that_leaves_frees_its_slot() {
    let m = model();
    let server = start(&m, ServeOptions { slots: Some(1), max_queue: Some(1), ..Default::default() });
    let addr = server.addr();
    let stream_body = json!({"prompt": &PROMPTS[2], "max_tokens": 200, "temperature": 0, "stream": true}).to_string();
    // A takes the slot: its first chunk means it is running.
    let a = http::open(addr, "POST", "/v1/completions", &["Content-Type: application/json"], stream_body.as_bytes());
    let mut a = BufReader::new(a);
    assert_eq!(read_head(&mut a).0, 200);
    assert!(read_chunk(&mut a).is_some());
    // B waits in the queue ...
    let b = std::thread::spawn(move || post_json(addr, "/v1/completions", &completion(&PROMPTS[1], 4)));
    while get(addr, "/health").json()["queue_depth"] != 1 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // ... so C is turned away.
    let c = post_json(addr, "/v1/completions", &completion(&PROMPTS[3], 4));
    assert_eq!(c.status, 429, "{}", c.body);
    assert_eq!(c.json()["error"]["code"], "queue_full");
    // A's client leaves mid-stream: its slot goes to B, which gets its tokens.
    drop(a);
    let b = b.join().unwrap();
    assert_eq!(b.status, 200);
    assert_eq!(tokens_of(&b.json()), run_tokens(&m, &PROMPTS[1], 4));
    let metrics = get(addr, "/metrics").body;
    assert!(metrics.contains("graphc_requests_total{outcome=\"cancelled\"} 1"), "{metrics}");
    assert!(metrics.contains("graphc_requests_total{outcome=\"queue_full\"} 1"));
    server.shutdown().unwrap();
}

#[test]
fn an_api_key_is_required_when_set() {
    let m = model();
    let server = start(&m, ServeOptions { api_key: Some("sesame".into()), ..Default::default() });
    let addr = server.addr();
    let body = completion(&PROMPTS[0], 2).to_string();
    let none = http::send(addr, "POST", "/v1/completions", &[], body.as_bytes());
    assert_eq!(none.status, 401);
    let wrong = http::send(addr, "POST", "/v1/completions", &["Authorization: Bearer open"], body.as_bytes());
    assert_eq!(wrong.status, 401);
    let right = http::send(addr, "POST", "/v1/completions", &["Authorization: Bearer sesame"], body.as_bytes());
    assert_eq!(right.status, 200, "{}", right.body);
    assert_eq!(http::send(addr, "GET", "/v1/models", &[], b"").status, 401);
    assert_eq!(http::send(addr, "POST", "/tokenize", &[], b"{\"content\": \"x\"}").status, 401);
    // Probes stay open for the operator.
    assert_eq!(get(addr, "/health").status, 200);
    server.shutdown().unwrap();
}

#[test]
fn shutdown_answers_the_requests_in_flight_then_stops() {
    let m = model();
    let server = start(&m, ServeOptions::default());
    let addr = server.addr();
    let body = json!({"prompt": &PROMPTS[4], "max_tokens": 24, "temperature": 0, "stream": true}).to_string();
    let mut r = BufReader::new(http::open(addr, "POST", "/v1/completions", &["Content-Type: application/json"], body.as_bytes()));
    assert_eq!(read_head(&mut r).0, 200);
    let mut text = String::from_utf8(read_chunk(&mut r).unwrap()).unwrap();
    let reader = std::thread::spawn(move || {
        while let Some(c) = read_chunk(&mut r) {
            text.push_str(&String::from_utf8(c).unwrap());
        }
        text
    });
    server.shutdown().unwrap();
    let text = reader.join().unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let streamed: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok()?["choices"][0]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(streamed, run_tokens(&m, &PROMPTS[4], 24).concat());
    assert!(std::net::TcpStream::connect(addr).is_err(), "stopped listening");
}
