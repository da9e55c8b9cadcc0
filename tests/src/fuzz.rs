//! The bodies of graphc's fuzz targets (`fuzz/`, run by `bash fuzz/run.sh`).
//!
//! Each takes arbitrary bytes and feeds them through what a user's file
//! goes through: read, build the tokenizer, lower, verify, optimize, and for
//! what compiles, run two tokens on the reference executor and on the fast
//! backend. Any outcome but a clear error or a result is a bug: a panic, an
//! abort, an out-of-bounds read (the fuzzer runs under AddressSanitizer), a
//! hang, or an allocation sized by an unchecked header field (libFuzzer's
//! `-rss_limit_mb`/`-malloc_limit_mb`). The bodies live in this library so
//! `tests/tests/fuzz_regressions.rs` replays every saved crash, and the
//! seeds, through the same code in CI.

use crate::GgufWriter;
use graphc::{CompileOptions, Kernels, Model, SessionOptions};
use graphc_frontends::{Checkpoint, GgufFile, SafetensorsFile, Tokenizer};
use std::path::Path;

/// The fuzz targets, by name (the folder names under `fuzz/corpus/` and
/// `tests/fuzz-regressions/`).
pub const TARGETS: &[&str] = &["gguf", "safetensors", "plan", "ir_text", "tokenizer", "json_mode", "tool_calls", "reasoning"];

/// Run `target`'s body on `data`.
pub fn run(target: &str, data: &[u8]) {
    match target {
        "gguf" => gguf(data),
        "safetensors" => safetensors(data),
        "plan" => plan(data),
        "ir_text" => ir_text(data),
        "tokenizer" => tokenizer(data),
        "json_mode" => json_mode(data),
        "tool_calls" => tool_calls(data),
        "reasoning" => reasoning(data),
        other => panic!("unknown fuzz target `{other}`; targets: {}", TARGETS.join(", ")),
    }
}

/// Caches bounded so a file claiming a 2^40-token context still runs two
/// tokens in a few bytes of cache.
fn small_cache() -> CompileOptions {
    CompileOptions { max_seq: Some(16), ..Default::default() }
}

/// Compile an opened checkpoint and, where it compiles, run two tokens on
/// the reference executor and the fast backend.
fn compile_and_run(checkpoint: impl Fn() -> Option<Checkpoint>, label: &str) {
    let Some(ck) = checkpoint() else { return };
    let model = match Model::compile_checkpoint(ck, label, &small_cache(), None) {
        Ok(m) => m,
        // A context shorter than 16 tokens: compile at its own length.
        Err(graphc::Error::Option(_)) => match checkpoint().map(|ck| Model::compile_checkpoint(ck, label, &CompileOptions::default(), None)) {
            Some(Ok(m)) => m,
            _ => return,
        },
        Err(_) => return,
    };
    run_two_tokens(&model);
}

fn run_two_tokens(model: &Model) {
    // Keep each execution fast: a fuzzed file can claim a big model.
    if model.weights_bytes() > 4 << 20 {
        return;
    }
    for kernels in [Kernels::Reference, Kernels::parse("fast").expect("fast always parses")] {
        let opts = SessionOptions { threads: Some(1), kernels: Some(kernels), check_finite: true, ..Default::default() };
        if let Ok(mut s) = model.session(&opts) {
            if s.prefill(&[0, 1]).is_ok() {
                let _ = s.decode(1);
            }
        }
    }
}

/// A GGUF file: header, metadata, tensor infos, tokenizer, lowering.
pub fn gguf(data: &[u8]) {
    compile_and_run(|| GgufFile::from_bytes("fuzz.gguf", data.to_vec()).ok().and_then(|g| Checkpoint::from_gguf(g).ok()), "fuzz.gguf");
    if let Ok(Ok(ck)) = GgufFile::from_bytes("fuzz.gguf", data.to_vec()).map(Checkpoint::from_gguf) {
        if let Some(t) = &ck.tokenizer {
            exercise_tokenizer(t, b"Hello, world! <|im_start|> 123 \xe2\x96\x81\xf0\x9f\x98\x80");
        }
    }
}

/// Where the `config.json` ends and the safetensors bytes begin in a
/// `safetensors` fuzz input: `[config length: u16 LE][config][safetensors]`.
pub fn split_safetensors_input(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = u16::from_le_bytes(data.get(..2)?.try_into().ok()?) as usize;
    let config = data.get(2..2 + n)?;
    Some((config, &data[2 + n..]))
}

/// A safetensors file and its `config.json`.
pub fn safetensors(data: &[u8]) {
    let Some((config, tensors)) = split_safetensors_input(data) else { return };
    let config = String::from_utf8_lossy(config);
    let open = || {
        SafetensorsFile::from_bytes("fuzz.safetensors", tensors.to_vec(), "config.json", &config)
            .ok()
            .and_then(|st| Checkpoint::from_safetensors(st).ok())
    };
    compile_and_run(open, "fuzz.safetensors");
}

/// The checkpoint a fuzzed plan is loaded against: the tiny llama.
fn plan_checkpoint() -> Checkpoint {
    Checkpoint::from_gguf(GgufFile::from_bytes("tiny.gguf", GgufWriter::tiny_llama().to_bytes()).expect("the tiny GGUF reads"))
        .expect("the tiny GGUF opens")
}

/// A plan file. The fuzzed plan's checkpoint reference is pointed at the
/// tiny llama's size and checksum (which a mutation would almost never
/// hit), so the fuzzer reaches what follows: the graph, the manifest, the
/// options, and running it.
pub fn plan(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(mut plan) = graphc_ir::plan::Plan::from_json(text, "fuzz.plan") else { return };
    let ck = plan_checkpoint();
    plan.checkpoint.bytes = ck.len();
    plan.checkpoint.checksum = ck.checksum(|_| {});
    if let Ok(model) = Model::from_plan(plan, "fuzz.plan", ck, None) {
        run_two_tokens(&model);
    }
}

/// The IR text form: parse, verify, print, parse again (the text form must
/// round-trip), and run the pass pipeline.
pub fn ir_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(mut graph) = graphc_ir::text::parse(text) else { return };
    if graphc_ir::verify(&mut graph).is_err() {
        return;
    }
    let printed = graphc_ir::text::print(&graph);
    let mut again = graphc_ir::text::parse(&printed).unwrap_or_else(|e| panic!("printed IR does not parse: {e}\n{printed}"));
    graphc_ir::verify(&mut again).unwrap_or_else(|e| panic!("printed IR does not verify: {e}\n{printed}"));
    assert_eq!(graphc_ir::text::print(&again), printed, "print(parse(print(g))) != print(g)");
    let _ = graphc_passes::PassManager::default().run(&mut graph, &[]);
}

/// The real tokenizers (SmolLM2's BPE, Gemma 3's SentencePiece), loaded
/// once from the checkpoints `tools/setup.sh` fetches.
fn real_tokenizers() -> &'static [Tokenizer] {
    static TOKENIZERS: std::sync::OnceLock<Vec<Tokenizer>> = std::sync::OnceLock::new();
    TOKENIZERS.get_or_init(|| {
        ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]
            .iter()
            .map(|f| {
                let p = crate::model(f);
                let g = GgufFile::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                Tokenizer::from_gguf(&g).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            })
            .collect()
    })
}

/// Arbitrary bytes as text and as token ids through a real tokenizer
/// (the first byte picks which).
pub fn tokenizer(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else { return };
    let toks = real_tokenizers();
    exercise_tokenizer(&toks[pick as usize % toks.len()], rest);
}

/// JSON mode's automaton against serde_json on the same bytes: what it
/// accepts whole and calls closed is a JSON object; a JSON object (within
/// its nesting and whitespace caps) it accepts and calls closed; and every
/// prefix of what it accepts it accepts. A disagreement is a silent wrong
/// answer in JSON mode (a token masked that was valid, or let through that
/// was not).
pub fn json_mode(data: &[u8]) {
    use graphc::json_mode::{JsonPrefix, MAX_BLANK_RUN, MAX_DEPTH};
    let mut state = JsonPrefix::default();
    let mut accepted = 0;
    for &b in data {
        if !state.feed(&[b]) {
            break;
        }
        accepted += 1;
    }
    let whole = accepted == data.len();
    // (Ignored, not built: serde_json refuses numbers past f64 when it
    // builds them, which JSON's grammar allows.)
    let starts_object = data.iter().find(|b| !b" \t\n\r".contains(b)) == Some(&b'{');
    // (And UTF-8 checked here: serde_json does not check an ignored string's.)
    let object = starts_object && std::str::from_utf8(data).is_ok() && serde_json::from_slice::<serde::de::IgnoredAny>(data).is_ok();
    if whole && state.is_done() {
        assert!(object, "the automaton closed an object serde_json rejects: {:?}", String::from_utf8_lossy(data));
    }
    if object && within_caps(data, MAX_DEPTH, MAX_BLANK_RUN as usize) {
        // serde_json allows trailing whitespace; the automaton ends at the close.
        let trimmed = data.len() - data.iter().rev().take_while(|b| b" \t\n\r".contains(b)).count();
        let mut s = JsonPrefix::default();
        assert!(s.feed(&data[..trimmed]) && s.is_done(), "a JSON object the automaton refuses: {:?}", String::from_utf8_lossy(data));
    }
}

/// A model's answer read back for function calls, in each format, and
/// streamed a character at a time: no panic; what streaming lets out is a
/// whole-character prefix of the text, never less than it let out before;
/// and where the whole answer holds calls, nothing streamed reaches into
/// them (a call's text sent as content would be a silent wrong answer).
pub fn tool_calls(data: &[u8]) {
    use graphc::tool_calls::ToolFormat;
    let text = String::from_utf8_lossy(data);
    let known = ["get_weather".to_string(), "scale".to_string()];
    for format in [ToolFormat::Hermes, ToolFormat::QwenXml, ToolFormat::Llama3Json, ToolFormat::Mistral, ToolFormat::Granite] {
        for marker_first in [false, true] {
            let whole = format.parse(&text, marker_first, &known);
            // The most any prefix may stream: up to the first call's opening.
            let limit = match (whole.calls.is_empty(), format) {
                (true, _) => text.len(),
                (false, ToolFormat::Hermes | ToolFormat::QwenXml) => text.find("<tool_call>").unwrap_or(0),
                (false, _) => 0,
            };
            let mut sent = 0;
            for end in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
                let n = format.streamable(&text[..end], marker_first).max(sent);
                assert!(n <= end && text.is_char_boundary(n), "{format:?}: streamable {n} of {end} bytes of {text:?}");
                assert!(n <= limit, "{format:?}: {n} bytes streamed of {text:?}, whose calls start at {limit}");
                sent = n;
            }
        }
    }
}

/// A thinking model's answer split into reasoning and content, streamed
/// in pieces the input's first byte sizes (1 to 8 characters), opened by
/// the prompt or not: the pieces join to the whole split, and nothing
/// released as content is ever later claimed as reasoning (what streamed
/// is a prefix of the whole content at every step).
pub fn reasoning(data: &[u8]) {
    use graphc_frontends::reasoning::ThinkSplit;
    let Some((&size, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let chars: Vec<char> = text.chars().collect();
    for opened in [false, true] {
        let whole = ThinkSplit::split(&text, opened);
        let mut s = ThinkSplit::new(opened);
        let (mut r, mut c) = (String::new(), String::new());
        for piece in chars.chunks(1 + size as usize % 8) {
            let (a, b) = s.push(&piece.iter().collect::<String>());
            r.push_str(&a);
            c.push_str(&b);
            assert!(whole.0.starts_with(&r) && whole.1.starts_with(&c), "{text:?}: streamed ({r:?}, {c:?}) is not a prefix of {whole:?}");
        }
        let (a, b) = s.finish();
        r.push_str(&a);
        c.push_str(&b);
        assert_eq!((r, c), whole, "{text:?}, opened {opened}");
    }
}

/// Whether `data` nests at most `depth` deep and has no run of more than
/// `blank` whitespace bytes outside strings (the automaton's caps).
fn within_caps(data: &[u8], depth: usize, blank: usize) -> bool {
    let (mut d, mut run, mut in_string, mut escape) = (0usize, 0usize, false, false);
    for &b in data {
        if in_string {
            match (escape, b) {
                (true, _) => escape = false,
                (false, b'\\') => escape = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        run = if b" \t\n\r".contains(&b) { run + 1 } else { 0 };
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => d += 1,
            b'}' | b']' => d = d.saturating_sub(1),
            _ => {}
        }
        if d > depth || run > blank {
            return false;
        }
    }
    true
}

fn exercise_tokenizer(t: &Tokenizer, data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(ids) = t.encode(&text) {
        let _ = t.decode(&ids);
    }
    let _ = t.apply_chat_template(&[graphc::Message::system(&text), graphc::Message::user(&text)], &graphc::ChatOptions::default());
    // The same bytes as ids: out-of-vocabulary ones must be an error.
    let ids: Vec<u32> = data.chunks(4).map(|c| c.iter().fold(0u32, |a, &b| a << 8 | b as u32) % 300_000).collect();
    let _ = t.decode(&ids);
}

/// Write each target's seed corpus under `dir/<target>/`: the small
/// synthetic checkpoints whole, the real checkpoints' headers (their first
/// 64 KiB: magic, counts, the start of the metadata), plans and IR.
pub fn write_seeds(dir: &Path) -> std::io::Result<()> {
    let put = |target: &str, name: &str, bytes: &[u8]| -> std::io::Result<()> {
        let d = dir.join(target);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join(name), bytes)
    };
    let tiny = GgufWriter::tiny_llama().to_bytes();
    put("gguf", "tiny_llama.gguf", &tiny)?;
    for f in ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"] {
        let p = crate::models_dir().join(f);
        if let Ok(bytes) = std::fs::read(&p) {
            put("gguf", &format!("{f}.head"), &bytes[..bytes.len().min(64 << 10)])?;
        }
    }
    let tmp = dir.join("_scratch");
    std::fs::create_dir_all(&tmp)?;
    let st_dir = crate::fused_kv_checkpoint(&tmp.join("fused_kv"));
    let config = std::fs::read(st_dir.join("config.json"))?;
    let tensors = std::fs::read(st_dir.join("model.safetensors"))?;
    let mut st = (config.len() as u16).to_le_bytes().to_vec();
    st.extend_from_slice(&config);
    st.extend_from_slice(&tensors);
    put("safetensors", "fused_kv", &st)?;
    // The parity fixtures of the safetensors families (tests/fixtures/families/).
    for family in walk_dirs(&crate::repo_root().join("tests/fixtures/families"))? {
        let config = std::fs::read(family.join("config.json"))?;
        let tensors = std::fs::read(family.join("model.safetensors"))?;
        let mut st = (config.len() as u16).to_le_bytes().to_vec();
        st.extend_from_slice(&config);
        st.extend_from_slice(&tensors);
        put("safetensors", &family.file_name().unwrap().to_string_lossy(), &st)?;
    }
    let ck = GgufWriter::tiny_llama().write(&tmp, "tiny.gguf");
    let model = Model::compile(&ck, &CompileOptions::default(), None).map_err(std::io::Error::other)?;
    put("plan", "tiny_llama.plan", model.plan().to_json().as_bytes())?;
    put("ir_text", "tiny_llama_optimized.gir", model.plan().graph.as_bytes())?;
    if let Some(lowered) = model.lowered_graph() {
        put("ir_text", "tiny_llama_lowered.gir", graphc_ir::text::print(lowered).as_bytes())?;
    }
    for entry in walk(&crate::repo_root().join("tests/filetests"))? {
        if entry.extension().is_some_and(|e| e == "gir") {
            let name = entry.file_name().unwrap().to_string_lossy().to_string();
            put("ir_text", &name, &std::fs::read(&entry)?)?;
        }
    }
    for (i, text) in ["The capital of France is", "Hello, world!\n\n  tabs\tand 🙂 emoji", "<|im_start|>user\nhi<|im_end|>"].iter().enumerate() {
        for pick in 0..2u8 {
            let mut bytes = vec![pick];
            bytes.extend_from_slice(text.as_bytes());
            put("tokenizer", &format!("text{i}_{pick}"), &bytes)?;
        }
    }
    let objects = [
        "{}",
        "{\"name\": \"Ada\", \"age\": 36, \"tags\": [\"x\", \"y\\n\\u00e9\"], \"ok\": true, \"none\": null, \"f\": -0.5e+10}",
        "{\n  \"nested\": {\"deep\": [[], {}, [1, 2.25, -3E2]]},\n  \"unicode\": \"日本 ✓\"\n}",
        "{\"a\": 01}",
        "[1, 2]",
    ];
    for (i, text) in objects.iter().enumerate() {
        put("json_mode", &format!("doc{i}"), text.as_bytes())?;
    }
    let answers = [
        "Paris is sunny.",
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"scale\", \"arguments\": {\"x\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"scale\", \"arguments\": \"{\\\"x\\\": 3}\"}",
        "```json\n{\"name\": \"scale\", \"arguments\": {\"x\": 1}}\n```",
        " {\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": \"東京\"}}",
        "[TOOL_CALLS][{\"name\": \"scale\", \"arguments\": {\"x\": 3}}]",
        "a <tool_c",
        "<tool_call>{\"name\": \"rm\", \"arguments\": {}}",
        "On it.\n<tool_call>\n<function=scale>\n<parameter=x>\n3\n</parameter>\n</function>\n</tool_call>",
    ];
    for (i, text) in answers.iter().enumerate() {
        put("tool_calls", &format!("answer{i}"), text.as_bytes())?;
    }
    let thoughts = ["<think>\nAdd them.\n</think>\n\n4.", "  <think></think>ok", "Hmm.</think> x <think>", "<thi", "no block </think>"];
    for (i, text) in thoughts.iter().enumerate() {
        put("reasoning", &format!("answer{i}"), &[&[i as u8][..], text.as_bytes()].concat())?;
    }
    std::fs::remove_dir_all(&tmp)
}

fn walk_dirs(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut out: Vec<_> = std::fs::read_dir(dir)?.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()).collect();
    out.sort();
    Ok(out)
}

fn walk(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            out.extend(walk(&p)?);
        } else {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}
