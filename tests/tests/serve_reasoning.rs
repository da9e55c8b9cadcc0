//! Thinking models through `graphc serve`: a `<think>` block that opens
//! the answer comes back apart from the content — OpenAI-style
//! `reasoning_content` (whole and streamed, as llama.cpp's `deepseek`
//! reasoning format), Ollama's `thinking` — equal to the library's greedy
//! text split (`graphc_frontends::reasoning`); `reasoning_format: "none"`
//! and Ollama's `think: false` leave it in the content; the template's
//! variables come from `chat_template_kwargs`; an earlier turn's reasoning
//! reaches the template. On Qwen2.5-Coder's weights wearing DeepSeek-R1's
//! Qwen-distill template (llama.cpp's: with `enable_thinking` its
//! generation prompt opens `<think>`, without it closes the block at
//! once): no thinking model travels here, so the model's words mean
//! nothing and the plumbing is what is tested.

use graphc::{ChatOptions, CompileOptions, Message, Model, Sampling, SessionOptions};
use graphc_frontends::reasoning::{prompt_opens_thinking, ThinkSplit};
use graphc_server::{ServeOptions, Server};
use graphc_tests::http::post_json;
use graphc_tests::smollm2;
use serde_json::{json, Value};
use std::sync::Arc;

/// Words that lead these weights to write `</think>` and go on.
const SYSTEM: &str = "Copy the text below, then say OK.";
const ASK: &str = "France.</think>Paris";
const MAX: usize = 48;

fn qwen_with(template_name: &str) -> Arc<Model> {
    qwen_wearing(template_name, &[])
}

fn qwen_wearing(template_name: &str, renames: &[(u32, &str)]) -> Arc<Model> {
    let path = graphc_tests::qwen_wearing(template_name, renames);
    Arc::new(Model::compile(&path, &CompileOptions { max_seq: Some(1024), ..Default::default() }, None).unwrap())
}

fn turns() -> Vec<Message> {
    vec![Message::system(SYSTEM), Message::user(ASK)]
}

fn messages() -> Value {
    json!([{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK}])
}

/// The library's greedy answer, as text, and its prompt's tail.
fn greedy(m: &Model, opts: &ChatOptions) -> (String, String) {
    let prompt = m.chat_prompt(&turns(), opts).unwrap();
    let mut s = m.session(&SessionOptions::default()).unwrap();
    let g = s.generate(&prompt, MAX, &Sampling::greedy(), |_| ()).unwrap();
    let stop = &m.plan().model.stop_ids;
    let ids: Vec<u32> = g.tokens.iter().copied().filter(|t| !stop.contains(t)).collect();
    let tok = m.tokenizer().unwrap();
    (String::from_utf8(tok.decode_bytes(&ids, false)).unwrap(), tok.decode(&prompt[prompt.len() - 8..]).unwrap())
}

#[test]
fn a_think_block_comes_back_apart_from_the_content() {
    let m = qwen_with("r1_distill_qwen");
    let thinking = json!({"enable_thinking": true});
    let opts = ChatOptions { variables: thinking.as_object().unwrap().clone(), ..Default::default() };
    let (text, tail) = greedy(&m, &opts);
    assert!(prompt_opens_thinking(&tail), "the template's generation prompt opens <think>: {tail:?}");
    let (reasoning, content) = ThinkSplit::split(&text, true);
    println!("greedy {text:?}\n → reasoning {reasoning:?}, content {content:?}");
    // The prompt leads the model to close the block and go on (later
    // `<think>`s are content): both sides of the split are tested.
    assert!(!reasoning.is_empty() && !content.is_empty() && content.contains("<think>"), "{text:?}");

    let server =
        Server::start(m.clone(), ServeOptions { port: Some(0), slots: Some(1), model_name: Some("q".into()), ..Default::default() }).unwrap();
    let addr = server.addr();
    let ask = |extra: Value| {
        let mut v = json!({"messages": messages(), "temperature": 0, "max_tokens": MAX, "chat_template_kwargs": thinking});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    // Whole.
    let v = post_json(addr, "/v1/chat/completions", &ask(json!({}))).json();
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["reasoning_content"].as_str(), Some(reasoning.as_str()), "{v}");
    assert_eq!(msg["content"].as_str(), Some(content.as_str()), "{v}");
    // Streamed: the reasoning deltas, then the content's.
    let r = post_json(addr, "/v1/chat/completions", &ask(json!({"stream": true})));
    let chunks: Vec<Value> = r.events().iter().filter(|e| *e != "[DONE]").map(|e| serde_json::from_str(e).unwrap()).collect();
    let joined = |key: &str| -> String { chunks.iter().filter_map(|c| c["choices"][0]["delta"][key].as_str()).collect() };
    assert_eq!((joined("reasoning_content"), joined("content")), (reasoning.clone(), content.clone()));
    assert_eq!(chunks.iter().filter(|c| c["choices"][0]["delta"]["role"] == "assistant").count(), 1, "{chunks:?}");
    // `none`: all of it content, as generated.
    let v = post_json(addr, "/v1/chat/completions", &ask(json!({"reasoning_format": "none"}))).json();
    assert_eq!(v["choices"][0]["message"]["content"].as_str(), Some(text.as_str()), "{v}");
    assert!(v["choices"][0]["message"].get("reasoning_content").is_none(), "{v}");

    // Ollama: `thinking`, whole and streamed; `think: false` leaves it in the content.
    let ollama = |extra: Value| {
        let mut v = json!({"messages": messages(), "think": true, "options": {"temperature": 0, "num_predict": MAX}});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    let v = post_json(addr, "/api/chat", &ollama(json!({"stream": false}))).json();
    assert_eq!((v["message"]["thinking"].as_str(), v["message"]["content"].as_str()), (Some(reasoning.as_str()), Some(content.as_str())), "{v}");
    let r = post_json(addr, "/api/chat", &ollama(json!({})));
    let lines: Vec<Value> = r.body.lines().filter(|l| !l.is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect();
    let joined = |key: &str| -> String { lines.iter().filter_map(|l| l["message"][key].as_str()).collect() };
    assert_eq!((joined("thinking"), joined("content")), (reasoning.clone(), content.clone()));
    // `think: false`: the template closes the block, the answer is content.
    let (unthought, tail) = greedy(&m, &ChatOptions::default());
    assert!(!prompt_opens_thinking(&tail), "{tail:?}");
    let v = post_json(addr, "/api/chat", &ollama(json!({"stream": false, "think": false}))).json();
    assert_eq!(v["message"]["content"].as_str(), Some(unthought.as_str()), "{v}");
    assert!(v["message"].get("thinking").is_none(), "{v}");
    // `/api/generate` (system + prompt through the template): `thinking` beside `response`.
    let v = post_json(
        addr,
        "/api/generate",
        &json!({"system": SYSTEM, "prompt": ASK, "think": true, "stream": false, "options": {"temperature": 0, "num_predict": MAX}}),
    )
    .json();
    assert_eq!((v["thinking"].as_str(), v["response"].as_str()), (Some(reasoning.as_str()), Some(content.as_str())), "{v}");
    assert!(post_json(addr, "/api/show", &json!({})).json()["capabilities"].as_array().unwrap().contains(&json!("thinking")));
    server.shutdown().unwrap();
}

/// `chat_template_kwargs` reach the template (Qwen3's `enable_thinking:
/// false` writes an empty block into the prompt), and an earlier turn's
/// `reasoning_content` reaches it too: the prompt is the library's.
#[test]
fn template_variables_and_earlier_reasoning_reach_the_template() {
    let m = qwen_with("qwen3");
    let server = Server::start(m.clone(), ServeOptions { port: Some(0), slots: Some(1), ..Default::default() }).unwrap();
    let addr = server.addr();
    let kwargs = json!({"enable_thinking": false});
    let v = post_json(addr, "/v1/chat/completions", &json!({"messages": messages(), "max_tokens": 1, "chat_template_kwargs": kwargs})).json();
    let opts = ChatOptions { variables: kwargs.as_object().unwrap().clone(), ..Default::default() };
    let prompt = m.chat_prompt(&turns(), &opts).unwrap();
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(prompt.len() as u64), "{v}");
    let without = m.chat_prompt(&turns(), &ChatOptions::default()).unwrap();
    assert!(prompt.len() > without.len(), "enable_thinking: false must write the empty block");

    let history = json!([
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": "Yes.", "reasoning_content": "It is."},
        {"role": "user", "content": "And Lyon?"}
    ]);
    let v = post_json(addr, "/v1/chat/completions", &json!({"messages": history, "max_tokens": 1})).json();
    let turns =
        vec![Message::user(ASK), Message { reasoning_content: Some("It is.".into()), ..Message::assistant("Yes.") }, Message::user("And Lyon?")];
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(m.chat_prompt(&turns, &ChatOptions::default()).unwrap().len() as u64), "{v}");
    for (body, param) in [
        (json!({"messages": messages(), "chat_template_kwargs": "x"}), "chat_template_kwargs"),
        (json!({"messages": messages(), "reasoning_format": "raw"}), "reasoning_format"),
        (json!({"messages": [{"role": "assistant", "content": "a", "reasoning_content": 3}]}), "messages[0].reasoning_content"),
    ] {
        let r = post_json(addr, "/v1/chat/completions", &body);
        assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some(param)), "{}", r.body);
    }
    server.shutdown().unwrap();

    // A template that does not think: Ollama's `think` is refused.
    let small = Arc::new(Model::compile(&smollm2(), &CompileOptions { max_seq: Some(256), ..Default::default() }, None).unwrap());
    let server = Server::start(small, ServeOptions { port: Some(0), ..Default::default() }).unwrap();
    let r = post_json(server.addr(), "/api/chat", &json!({"messages": messages(), "think": true}));
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("think")), "{}", r.body);
    server.shutdown().unwrap();
}

/// Mistral's reasoning models think between the control tokens `[THINK]`
/// and `[/THINK]`, which the visible text does not show (their split is
/// unit-tested in `frontends/src/reasoning.rs`): on Qwen2.5's weights
/// wearing Ministral 3 Reasoning's template with two control tokens
/// renamed so, and `[THINK]` made certain by a logit bias, the server's
/// answer is what the library's greedy tokens split to — the first
/// `[THINK]` opens the block, the others show nothing, no stand-in for a
/// control token ever reaches the text.
#[test]
fn mistrals_thinking_control_tokens_never_show() {
    use graphc_frontends::reasoning::split_for;
    const THINK: u32 = 151646;
    let m = qwen_wearing("ministral3_reasoning", &[(THINK, "[THINK]"), (151647, "[/THINK]")]);
    let turns = vec![Message::user("2+2?")];
    let prompt = m.chat_prompt(&turns, &ChatOptions::default()).unwrap();
    let mut s = m.session(&SessionOptions::default()).unwrap();
    let sampling = Sampling { logit_bias: vec![(THINK, 100.0)], ..Sampling::greedy() };
    let g = s.generate(&prompt, 4, &sampling, |_| ()).unwrap();
    assert!(g.tokens.iter().all(|&t| t == THINK), "{:?}", g.tokens);
    let tok = m.tokenizer().unwrap();
    let mut split = split_for(tok, false).expect("the template thinks in [THINK] control tokens");
    let mut parts: Vec<(String, String)> = g.tokens.iter().map(|&id| split.push_token(id, "")).collect();
    parts.push(split.finish());
    assert!(parts.iter().all(|(r, c)| r.is_empty() && c.is_empty()), "{parts:?}");

    let server = Server::start(m.clone(), ServeOptions { port: Some(0), slots: Some(1), ..Default::default() }).unwrap();
    let body = json!({"messages": [{"role": "user", "content": "2+2?"}], "temperature": 0, "max_tokens": 4, "logit_bias": {THINK.to_string(): 100}});
    let r = post_json(server.addr(), "/v1/chat/completions", &body);
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "", "{v}");
    assert!(v["choices"][0]["message"].get("reasoning_content").is_none(), "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 4, "{v}");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r2 = post_json(server.addr(), "/v1/chat/completions", &streamed);
    for body in [&r.body, &r2.body] {
        assert!(!body.contains('\u{FDD0}') && !body.contains("\\ufdd0"), "{body}");
    }
    server.shutdown().unwrap();
}
