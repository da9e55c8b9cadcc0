//! Every real chat template at hand renders multi-turn conversations (with a
//! system message, history, non-ASCII and newlines) byte-identical to
//! transformers' `apply_chat_template`: SmolLM2's and Qwen2.5's (from their
//! GGUFs), Qwen3's official one (Python string methods, `namespace`,
//! `[::-1]`), Llama 3.2's (`strftime_now`, `raise_exception`), Gemma 2's
//! (which refuses a system message), Mistral NeMo's (tools inline, 9-letter
//! call ids), Mistral Small 3.2's (today's date in its system message),
//! Devstral's, Llama 3.1/3.3's, Phi-3.5's, SmolLM3's, Granite 3.3's, QwQ's,
//! DeepSeek-R1's distills' and graphc's Gemma 3 turn format; with tools (function
//! calling) for those that read them: the tools' schemas, an
//! assistant's calls (`content: null`, as OpenAI's clients send it) and
//! the tools' results, printed through Python's `json.dumps` (`tojson`,
//! indented in Llama 3.2's).
//! Expected strings: `tests/fixtures/tokenizer/chat_templates.json`, made by
//! `tools/make_chat_fixtures.py`.

use graphc_frontends::chat::{render, ChatError, ChatOptions, Message, TemplateTokens};
use graphc_tests::repo_root;
use serde_json::Value;
use std::time::{Duration, UNIX_EPOCH};

fn cases() -> Value {
    let p = repo_root().join("tests/fixtures/tokenizer/chat_templates.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn messages(c: &Value) -> Vec<Message> {
    serde_json::from_value(c["messages"].clone()).unwrap()
}

fn options(c: &Value) -> ChatOptions {
    ChatOptions {
        add_generation_prompt: c["add_generation_prompt"].as_bool().unwrap(),
        // The fixture passes `date_string`; a clock is given all the same,
        // so a template that calls `strftime_now` renders one fixed day.
        now: Some(UNIX_EPOCH + Duration::from_secs(1_721_952_000)), // 2024-07-26
        variables: c["template_kwargs"].as_object().cloned().unwrap_or_default(),
        tools: c["tools"].as_array().cloned().unwrap_or_default(),
        assistant_prefix: String::new(),
    }
}

fn tokens(t: &Value) -> TemplateTokens {
    let s = |k: &str| t[k].as_str().unwrap_or("").to_string();
    TemplateTokens { bos_token: s("bos_token"), eos_token: s("eos_token") }
}

#[test]
fn every_template_renders_as_transformers_does() {
    let all = cases();
    let mut rendered = 0;
    let mut refused = 0;
    for (name, t) in all["templates"].as_object().unwrap() {
        let template = t["template"].as_str().unwrap();
        for c in t["cases"].as_array().unwrap() {
            let id = c["id"].as_str().unwrap();
            let got = render(template, &messages(c), &tokens(t), &options(c));
            match (&c["expected"], &c["expected_error"]) {
                (Value::String(want), _) => {
                    let got = got.unwrap_or_else(|e| panic!("{name} {id}: {e}"));
                    assert_eq!(&got, want, "{name} {id}");
                    rendered += 1;
                }
                (_, Value::String(want)) => {
                    let e = got.expect_err(&format!("{name} {id} must be refused"));
                    assert!(matches!(&e, ChatError::Refused(m) if m == want), "{name} {id}: {e} (want {want:?})");
                    refused += 1;
                }
                _ => panic!("{name} {id}: no expectation"),
            }
        }
    }
    println!("{rendered} conversations rendered, {refused} refused by their template");
    assert!(rendered >= 40 && refused >= 3);
}

/// The controls for tools: minijinja's own `tojson` (compact, sorted,
/// HTML-escaped) and tools given in another key order each change what
/// the model reads.
#[test]
fn tools_reach_the_template_in_pythons_bytes_and_order() {
    let all = cases();
    for name in ["qwen25", "llama32"] {
        let t = &all["templates"][name];
        let c = t["cases"].as_array().unwrap().iter().find(|c| c["id"] == "tools_call_result_gen").unwrap();
        let want = c["expected"].as_str().unwrap();
        let template = t["template"].as_str().unwrap();
        assert_eq!(render(template, &messages(c), &tokens(t), &options(c)).unwrap(), want);
        // Keys sorted (what a map without insertion order would give).
        let mut sorted = options(c);
        sorted.tools = sorted.tools.iter().map(|v| serde_json::from_str(&sort_keys(v)).unwrap()).collect();
        let got = render(template, &messages(c), &tokens(t), &sorted).unwrap();
        assert_ne!(got, want, "{name}: tools with sorted keys must print differently");
        // minijinja's own tojson.
        let mut env = minijinja::Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_template("t", template).unwrap();
        let o = options(c);
        let got = env.get_template("t").unwrap().render(minijinja::context! {
            messages => messages(c), add_generation_prompt => true, tools => o.tools,
            bos_token => t["bos_token"].as_str(), ..minijinja::Value::from_serialize(&o.variables)
        });
        assert_ne!(got.ok().as_deref(), Some(want), "{name}: minijinja's tojson must not match");
    }
}

/// `v` with every object's keys sorted, as JSON text.
fn sort_keys(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys.iter().map(|k| format!("{}:{}", Value::String((*k).clone()), sort_keys(&m[*k]))).collect();
            format!("{{{}}}", items.join(","))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(sort_keys).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

/// The controls: plain minijinja (no Python string methods) cannot render
/// Qwen3's template, and Llama 3.2's date comes from `strftime_now`.
#[test]
fn the_python_methods_and_whitespace_settings_are_what_make_them_match() {
    let all = cases();
    let qwen3 = &all["templates"]["qwen3"];
    let c = &qwen3["cases"][1];
    let mut env = minijinja::Environment::new();
    env.add_template("t", qwen3["template"].as_str().unwrap()).unwrap();
    let plain = env.get_template("t").unwrap().render(minijinja::context! { messages => messages(c), add_generation_prompt => true });
    assert!(plain.is_err(), "without the methods Qwen3's template must fail");
    // Llama 3.2's date line: without `date_string` the template calls
    // `strftime_now("%d %b %Y")`, which gives the fixture's text on the
    // fixture's day and another text on another day.
    let llama = &all["templates"]["llama32"];
    let c = &llama["cases"][0];
    let want = c["expected"].as_str().unwrap();
    assert!(want.contains("Today Date: 26 Jul 2024"));
    let mut opts = options(c);
    opts.variables.remove("date_string");
    let got = render(llama["template"].as_str().unwrap(), &messages(c), &tokens(llama), &opts).unwrap();
    assert_eq!(got, want, "strftime_now on 2024-07-26");
    opts.now = Some(UNIX_EPOCH + Duration::from_secs(1_796_482_375)); // 2026-12-05
    let other = render(llama["template"].as_str().unwrap(), &messages(c), &tokens(llama), &opts).unwrap();
    assert_eq!(other, want.replace("26 Jul 2024", "05 Dec 2026"));
}

/// Mistral NeMo: its template's text (rendered as transformers does, the
/// first test), tokenized with its Tekken vocabulary (the GGUF vocabulary
/// written as llama.cpp's converter writes it, `tokenizer_parity.rs`), is
/// token for token what Mistral's own library feeds the model
/// (`mistral_common`'s `encode_chat_completion`, the fixture's
/// `mistral_common_ids`): plain turns, a system message, tools, calls and
/// their results. One case differs in the template itself, recorded by the
/// generator and held here: a conversation ending in tool results, where
/// the template drops the system message and `mistral_common` keeps it.
/// The control: the same text with special tokens read as text. The
/// template's call format is read as Mistral's (`[TOOL_CALLS]`, id 9).
#[test]
fn mistral_nemo_prompts_are_mistral_commons_tokens() {
    use graphc_frontends::tool_calls::ToolFormat;
    use graphc_frontends::{GgufFile, Tokenizer};
    let all = cases();
    let t = &all["templates"]["mistral_nemo"];
    let template = t["template"].as_str().unwrap();
    assert_eq!(ToolFormat::of_template(template), Some(ToolFormat::Mistral));
    let vocab: Value = serde_json::from_str(&std::fs::read_to_string(repo_root().join("tests/fixtures/tokenizer/tekken.json")).unwrap()).unwrap();
    let specials: Vec<String> = serde_json::from_value(vocab["source"]["special_token_names"].clone()).unwrap();
    let tekken: Value = serde_json::from_str(&std::fs::read_to_string(graphc_tests::vocab::tekken_json()).unwrap()).unwrap();
    let (gguf, _) = graphc_tests::vocab::gguf_from_tekken(&tekken, &specials);
    let path = gguf.write(&graphc_tests::temp_dir("chat-nemo"), "tekken-vocab.gguf");
    let tok = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    assert_eq!(tok.encode_text("[TOOL_CALLS]", true).unwrap(), vec![9]);
    let (mut equal, mut differ) = (0, 0);
    for c in t["cases"].as_array().unwrap() {
        let (Some(want), Some(text)) = (c["mistral_common_ids"].as_array(), c["expected"].as_str()) else { continue };
        let want: Vec<u32> = want.iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let id = c["id"].as_str().unwrap();
        let got = render(template, &messages(c), &tokens(t), &options(c)).unwrap();
        assert_eq!(got, text, "{id}");
        let ids = tok.encode_text(&got, true).unwrap();
        if c["template_ids_equal_mistral_common"] == true {
            assert_eq!(ids, want, "{id}");
            equal += 1;
        } else {
            assert_ne!(ids, want, "{id}: the generator found the template and mistral_common apart");
            differ += 1;
        }
        assert_ne!(tok.encode_text(&got, false).unwrap(), want, "{id}: control tokens read as text must differ");
    }
    println!("{equal} conversations are mistral_common's tokens, {differ} differ in the template");
    assert!(equal >= 9 && differ == 1, "{equal} equal, {differ} differ");
}

/// Qwen3.5's template (rendered as transformers does, the first test) is
/// read as what it is: Qwen3-Coder's `<function=...>` calls, and a model
/// that thinks, its generation prompt opening the `<think>` block (so an
/// answer's text up to `</think>` is reasoning) unless `enable_thinking`
/// is false, where it writes the empty block itself.
#[test]
fn qwen35_calls_in_function_blocks_and_thinks_by_default() {
    use graphc_frontends::reasoning::{prompt_opens_thinking, template_thinks};
    use graphc_frontends::tool_calls::ToolFormat;
    let all = cases();
    let t = &all["templates"]["qwen35"];
    let template = t["template"].as_str().unwrap();
    assert_eq!(ToolFormat::of_template(template), Some(ToolFormat::QwenXml));
    assert!(template_thinks(template));
    let c = t["cases"].as_array().unwrap().iter().find(|c| c["add_generation_prompt"] == true).unwrap();
    let thinking = render(template, &messages(c), &tokens(t), &options(c)).unwrap();
    assert_eq!(thinking, c["expected"].as_str().unwrap());
    assert!(prompt_opens_thinking(&thinking), "{thinking:?}");
    let mut off = options(c);
    off.variables.insert("enable_thinking".into(), serde_json::json!(false));
    let plain = render(template, &messages(c), &tokens(t), &off).unwrap();
    assert!(plain.ends_with("<think>\n\n</think>\n\n") && !prompt_opens_thinking(&plain), "{plain:?}");
}
