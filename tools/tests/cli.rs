//! The `graphc` command end to end on the real SmolLM2 checkpoint: what the
//! README tells a user to run prints the reference's tokens and text, and
//! bad input exits with a clear error, never a panic.

use graphc_tests::{reference_json, smollm2, temp_dir};
use std::process::{Command, Output};

fn graphc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_graphc")).args(args).output().expect("graphc runs")
}

fn json_of(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "graphc failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn ids(v: &serde_json::Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

#[test]
fn compile_json_reports_max_seq_and_where_it_came_from() {
    let dir = temp_dir("cli-compile");
    let ck = smollm2();
    let plan = dir.join("smollm2.plan");
    let v = json_of(&graphc(&["compile", ck.to_str().unwrap(), "-o", plan.to_str().unwrap(), "--json"]));
    assert_eq!(v["family"], "llama");
    assert_eq!(v["device"], "cpu");
    assert_eq!(v["max_seq"], 8192);
    assert_eq!(v["max_seq_source"], "checkpoint");
    assert!(v["passes"].get("dead_code").is_some(), "{v}");
    assert_eq!(v["passes"]["kv_append"], 60, "every layer's K and V: {v}");
    assert!(v["weights_bytes"].as_u64().unwrap() > 90_000_000, "{v}");
    println!("compile took {:.3}s", v["compile_secs"].as_f64().unwrap());
    let v = json_of(&graphc(&["compile", ck.to_str().unwrap(), "-o", plan.to_str().unwrap(), "--json", "--max-seq", "512"]));
    assert_eq!(v["max_seq"], 512);
    assert_eq!(v["max_seq_source"], "option");
    let stored: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(stored["options"]["max_seq"], 512, "the resolved value is stored in the plan");
}

#[test]
fn run_json_gives_the_reference_tokens_from_checkpoint_and_plan() {
    let reference = reference_json("smollm2-135m-q4_1");
    let p1 = &reference["prompts"][0];
    let want_prompt = ids(&p1["prompt_ids"]);
    let want_tokens = ids(&p1["generated_ids"]);
    let ck = smollm2();
    let prompt = p1["text"].as_str().unwrap();
    // The README's command: 32 new tokens at most; the reference stops on
    // <|im_end|> (id 2) after 30, and that token is the last of `tokens`.
    let from_ck = json_of(&graphc(&["run", ck.to_str().unwrap(), "--prompt", prompt, "-n", "32", "--json"]));
    assert_eq!(ids(&from_ck["prompt_ids"]), want_prompt);
    assert_eq!(ids(&from_ck["tokens"]), want_tokens, "{from_ck}");
    assert_eq!(*want_tokens.last().unwrap(), 2);
    assert_eq!(from_ck["stopped_on_eos"], true);
    assert_eq!(from_ck["finish"], "stop");
    // The reference text ends in the control token `<|im_end|>`, which the
    // user does not see unless asked.
    let reference_text = p1["generated_text"].as_str().unwrap();
    let shown = reference_text.strip_suffix("<|im_end|>").expect("the reference text ends in <|im_end|>");
    assert_eq!(from_ck["text"], shown, "the user sees the reference text, no special token");
    let with_special = json_of(&graphc(&["run", ck.to_str().unwrap(), "--prompt", prompt, "-n", "32", "--json", "--show-special"]));
    assert_eq!(with_special["text"], reference_text, "--show-special prints it");
    assert_eq!(with_special["tokens"], from_ck["tokens"]);
    assert!(from_ck["decode_tok_s"].as_f64().unwrap() > 0.0);

    let dir = temp_dir("cli-run-plan");
    let plan = dir.join("p.plan");
    assert!(graphc(&["compile", ck.to_str().unwrap(), "-o", plan.to_str().unwrap()]).status.success());
    let from_plan = json_of(&graphc(&["run", plan.to_str().unwrap(), "--prompt", prompt, "-n", "32", "--json"]));
    assert_eq!(from_plan["tokens"], from_ck["tokens"]);
    assert_eq!(from_plan["text"], from_ck["text"]);
}

#[test]
fn run_chat_applies_the_checkpoints_template() {
    let reference = reference_json("smollm2-135m-q4_1");
    let p3 = reference["prompts"].as_array().unwrap().iter().find(|p| p["chat"] == true).unwrap();
    let ck = smollm2();
    let v = json_of(&graphc(&["run", ck.to_str().unwrap(), "--chat", "--prompt", p3["user_message"].as_str().unwrap(), "-n", "3", "--json"]));
    assert_eq!(ids(&v["prompt_ids"]), ids(&p3["prompt_ids"]));
    assert_eq!(ids(&v["tokens"]), ids(&p3["generated_ids"])[..3]);
}

#[test]
fn run_stop_string_ends_the_text_before_it() {
    let reference = reference_json("smollm2-135m-q4_1");
    let p1 = &reference["prompts"][0];
    let full = p1["generated_text"].as_str().unwrap();
    let at = full.find("12:12").expect("the reference answer has a time in it");
    let ck = smollm2();
    let args = ["run", ck.to_str().unwrap(), "--prompt", p1["text"].as_str().unwrap(), "-n", "32", "--json"];
    let v = json_of(&graphc(&[&args[..], &["--stop", "nothing like this", "--stop", "12:12"]].concat()));
    assert_eq!(v["text"], full[..at], "the text up to the stop string, without it");
    assert_eq!(v["finish"], "stop");
    assert_eq!(v["stopped_on_eos"], false);
    let n = v["tokens"].as_array().unwrap().len();
    assert!(n < ids(&p1["generated_ids"]).len(), "generation ended at the stop string: {n} tokens");
    // The plain text output streams the same characters.
    let out = graphc(&[&args[..args.len() - 1], &["--stop", "12:12"]].concat());
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end_matches('\n'), &full[..at]);
}

#[test]
fn run_chat_puts_the_system_message_first() {
    let ck = smollm2();
    let v = json_of(&graphc(&["run", ck.to_str().unwrap(), "--chat", "--system", "You are a pirate.", "--prompt", "Hello", "-n", "1", "--json"]));
    let model = graphc::Model::compile(&ck, &Default::default(), None).unwrap();
    let prompt: Vec<u32> = ids(&v["prompt_ids"]).iter().map(|&i| i as u32).collect();
    let text = model.decode(&prompt).unwrap();
    assert_eq!(text, "<|im_start|>system\nYou are a pirate.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
    let out = graphc(&["run", ck.to_str().unwrap(), "--system", "x", "--prompt", "Hello"]);
    assert!(!out.status.success(), "--system without --chat is refused");
}

#[test]
fn prompt_longer_than_max_seq_is_refused_with_both_numbers() {
    let reference = reference_json("smollm2-135m-q4_1");
    let p4 = &reference["prompts"][3];
    let n_prompt = p4["prompt_ids"].as_array().unwrap().len();
    let dir = temp_dir("cli-maxseq");
    let prompt_file = dir.join("long.txt");
    std::fs::write(&prompt_file, p4["text"].as_str().unwrap()).unwrap();
    let plan = dir.join("short.plan");
    let ck = smollm2();
    assert!(graphc(&["compile", ck.to_str().unwrap(), "-o", plan.to_str().unwrap(), "--max-seq", "64"]).status.success());
    let out = graphc(&["run", plan.to_str().unwrap(), "--prompt-file", prompt_file.to_str().unwrap(), "-n", "4"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("{n_prompt} tokens")) && err.contains("exceed max_seq 64"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_files_exit_1_with_a_message_and_keep_the_old_plan() {
    let dir = temp_dir("cli-bad");
    let junk = dir.join("junk.gguf");
    std::fs::write(&junk, b"definitely not a model").unwrap();
    let out = graphc(&["run", junk.to_str().unwrap(), "--prompt", "hi"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not a GGUF file: wrong magic number") && err.contains("junk.gguf"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // A failed compile leaves an existing plan as it was.
    let plan = dir.join("keep.plan");
    std::fs::write(&plan, b"{\"a good plan\": true}").unwrap();
    let out = graphc(&["compile", junk.to_str().unwrap(), "-o", plan.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read(&plan).unwrap(), b"{\"a good plan\": true}");
}

#[test]
fn inspect_lists_tensors_of_any_ggml_type_and_compile_refuses_them_by_name() {
    // tq2_0 and tq1_0 tensors among a tiny llama's f32 ones.
    let dir = temp_dir("cli-inspect-iq");
    let ck = graphc_tests::GgufWriter::tiny_llama_with_uncomputable_types().write(&dir, "iq.gguf");
    let out = graphc(&["inspect", ck.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("| 22 tensors (2 of types graphc cannot compute)"), "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("token_embd") || l.contains("_extra.")).collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("token_embd.weight") && lines[0].contains(" f32 "), "file order: {lines:?}");
    assert!(
        lines[1].starts_with("blk.0.attn_extra.weight")
            && lines[1].contains(" tq2_0 ")
            && lines[1].contains("[2, 256] (graphc cannot compute this type)"),
        "{lines:?}"
    );
    assert!(lines[2].starts_with("blk.1.ffn_extra.weight") && lines[2].contains(" tq1_0 "), "{lines:?}");
    let out = graphc(&["compile", ck.to_str().unwrap(), "-o", dir.join("iq.plan").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("tensor `blk.0.attn_extra.weight` is tq2_0 (GGML type 35), which graphc cannot compute"), "{err}");
}

#[test]
fn every_subcommand_has_help() {
    for sub in ["compile", "run", "dump", "inspect"] {
        let out = graphc(&[sub, "--help"]);
        assert!(out.status.success(), "{sub} --help");
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: graphc"), "{sub}");
    }
}

#[test]
fn dump_prints_lowered_and_optimized_stages() {
    let ck = smollm2();
    let out = graphc(&["dump", ck.to_str().unwrap(), "--stage", "lowered", "--layers", "0..1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("layer 0 {") && text.contains("# layers 1..=29 elided"), "{text}");
    assert!(!text.contains("layer 1 {"));
    let out = graphc(&["dump", ck.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("layer 29 {") && text.contains("output{name=\"logits\"}"));
}

#[test]
fn dump_dot_draws_a_layer_before_and_after_the_rewrites() {
    let ck = smollm2();
    let dump = |stage: &str| {
        let out = graphc(&["dump", ck.to_str().unwrap(), "--stage", stage, "--layers", "0..1", "--format", "dot"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let (lowered, optimized) = (dump("lowered"), dump("optimized"));
    for d in [&lowered, &optimized] {
        assert!(d.starts_with("digraph \"llama\" {") && d.trim_end().ends_with('}'), "{d}");
        assert!(d.contains("subgraph cluster_layer0"));
    }
    assert!(lowered.contains("= concat{axis=2}") && !lowered.contains("kv_append"));
    assert!(optimized.contains("= kv_append{axis=2, cap=cap}") && !optimized.contains("= concat"));
}

#[test]
fn run_json_reports_kernels_threads_and_peak_memory() {
    let out = graphc(&["run", smollm2().to_str().unwrap(), "--prompt", "Hi", "-n", "2", "--threads", "2", "--json"]);
    let v = json_of(&out);
    assert!(v["kernels"].as_str().unwrap().starts_with("fast-"), "{v}");
    assert_eq!(v["threads"], 2);
    // The checkpoint is mapped and read: resident memory covers at least part of it.
    assert!(v["peak_rss_bytes"].as_u64().unwrap() > 10_000_000, "{v}");
    let bad = graphc(&["run", smollm2().to_str().unwrap(), "--prompt", "Hi", "--kernels", "sse9"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("unknown kernels `sse9`"), "{err}");
}

#[test]
fn gemma3_chat_falls_back_to_its_turn_format_and_says_so() {
    let reference = reference_json("gemma3-270m-q4_k_m");
    let p3 = &reference["prompts"][2];
    let gemma = graphc_tests::model("gemma-3-270m-q4_k_m.gguf");
    let msg = p3["user_message"].as_str().unwrap();
    let out = graphc(&["run", gemma.to_str().unwrap(), "--prompt", msg, "--chat", "-n", "4", "--json"]);
    let v = json_of(&out);
    assert_eq!(ids(&v["prompt_ids"]), ids(&p3["prompt_ids"]), "BOS + Gemma's turn format");
    assert_eq!(ids(&v["tokens"]), ids(&p3["generated_ids"])[..4], "the reference's first greedy tokens");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no chat template: --chat uses gemma3's turn format"), "{err}");
}

/// A machine without a Vulkan driver asked for `--device wgpu` gets an
/// error saying so, exit code 1, never a panic; a plan compiled for wgpu
/// records the device.
#[test]
fn wgpu_without_an_adapter_is_a_clear_error() {
    let dir = temp_dir("cli-wgpu");
    let ck = smollm2();
    let plan = dir.join("smollm2-wgpu.plan");
    let v = json_of(&graphc(&["compile", ck.to_str().unwrap(), "-o", plan.to_str().unwrap(), "--device", "wgpu", "--max-seq", "64", "--json"]));
    assert_eq!(v["device"], "wgpu");
    let out = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(["run", plan.to_str().unwrap(), "--prompt", "Hi", "-n", "1"])
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .env("WGPU_BACKEND", "vulkan")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("wgpu: no device") && !err.contains("panicked"), "{err}");
}

#[test]
fn bench_profile_says_where_a_decode_step_goes() {
    let ids = temp_dir("cli-bench-profile").join("ids.txt");
    std::fs::write(&ids, "1, 54, 34, 28, 46, 31, 42, 7").unwrap();
    let out = graphc(&[
        "bench",
        smollm2().to_str().unwrap(),
        "--contexts",
        "16",
        "--steps",
        "2",
        "--no-ab",
        "--profile",
        "--threads",
        "2",
        "--json",
        "--prefill",
        "8",
        "--prompt-ids-file",
        ids.to_str().unwrap(),
    ]);
    let v = json_of(&out);
    // The prefill's profile: 8 rows through each down projection.
    let prefill = v["prefill"]["profile"]["classes"].as_array().unwrap();
    let down = prefill.iter().find(|c| c["class"] == "matmul_add q4_1[576, 1536]").unwrap();
    assert_eq!(down["calls_per_step"], 30.0);
    assert!(down["gflop_s"].as_f64().unwrap() > 0.0);
    let p = &v["profile"][0];
    assert_eq!(p["context"], 16);
    let classes = p["classes"].as_array().unwrap();
    let class = |name: &str| classes.iter().find(|c| c["class"] == name).unwrap_or_else(|| panic!("no `{name}` in {classes:#?}"));
    // One tied output projection a step (forming the final norm); 30
    // layers' q4_1 down projections (adding the residual).
    let output = "norm_matmul f32[576] q8_0[49152, 576]";
    assert_eq!(class(output)["calls_per_step"], 1.0);
    assert_eq!(class("matmul_add q4_1[576, 1536]")["calls_per_step"], 30.0);
    assert!(class(output)["weight_gib_s"].as_f64().unwrap() > 0.0);
    assert!(class(output)["gflop_s"].as_f64().unwrap() > 0.0);
    assert!(class("attention")["weight_gib_s"].is_null() && class("attention")["gflop_s"].is_null(), "no weight, no GiB/s or GFLOP/s");
    let shares: f64 = classes.iter().map(|c| c["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-9, "shares add up to the step: {shares}");
}

/// `bench --device wgpu`: decode timed on the device (lavapipe in CI), no
/// `kv_append` off column there (a device appends in place), and
/// `--profile` timing each kernel launch. Skipped, saying so, on a machine
/// without a wgpu adapter unless `GRAPHC_REQUIRE_WGPU=1` (`.ci/run`).
#[test]
fn bench_runs_on_wgpu_without_the_off_column() {
    if let Err(e) = graphc_gpu::wgpu_rt::WgpuDevice::new(&graphc_tests::gpu()) {
        assert_ne!(std::env::var("GRAPHC_REQUIRE_WGPU").as_deref(), Ok("1"), "GRAPHC_REQUIRE_WGPU=1 but {e}");
        eprintln!("SKIPPED: no wgpu adapter on this machine ({e})");
        return;
    }
    let ck = smollm2();
    let v = json_of(&graphc(&["bench", ck.to_str().unwrap(), "--device", "wgpu", "--contexts", "8", "--steps", "1", "--json"]));
    assert_eq!(v["device"], "wgpu");
    assert!(v["decode"][0]["decode_tok_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["decode"][0]["kv_append_off_ms"].is_null(), "{v}");
    // A SmolLM2 decode step's launches: per layer (30) its head (norm, q/k/v,
    // rotations, appends), attention with each head's share of the output
    // projection, the normed gated MLP forming the shares' sum with the
    // residual, and the down projection adding that sum; then the
    // embedding's two gathers and the normed output matrix.
    assert_eq!(v["decode"][0]["launches_per_step"], 30 * 4 + 3, "{v}");
    // `--profile` on a device: every launch timed on its own, by kernel.
    let v = json_of(&graphc(&["bench", ck.to_str().unwrap(), "--device", "wgpu", "--contexts", "8", "--steps", "1", "--profile", "--json"]));
    let classes = v["profile"][0]["classes"].as_array().unwrap();
    assert!(classes.iter().all(|c| c["class"].as_str().unwrap().starts_with("kernel ")), "{classes:#?}");
    let calls: f64 = classes.iter().map(|c| c["calls_per_step"].as_f64().unwrap()).sum();
    assert_eq!(calls, 123.0, "{classes:#?}");
    let class = |name: &str| classes.iter().find(|c| c["class"] == name).unwrap_or_else(|| panic!("no `{name}` in {classes:#?}"));
    assert_eq!(class("kernel norm_matmul_qkv_rope_gptj_q4_1")["calls_per_step"], 30.0);
    assert_eq!(class("kernel attention_project_q4_1")["calls_per_step"], 30.0);
    assert_eq!(class("kernel norm_matmul_glu_silu_q4_1_xp")["calls_per_step"], 30.0);
    assert_eq!(class("kernel matmul_add_q4_1_rp")["calls_per_step"], 30.0);
    assert_eq!(class("kernel norm_matmul_q8_0")["calls_per_step"], 1.0);
    let shares: f64 = classes.iter().map(|c| c["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-9, "shares add up to the step: {shares}");
}

/// A device flag is read by value: `GRAPHC_CUDA=2` is refused naming the
/// flag and what it takes, not read as "no CUDA here" (which would quietly
/// resolve the device to the CPU, as it did on the H200 before this test),
/// and no plan is written.
#[test]
fn a_device_flag_that_is_neither_0_nor_1_is_refused() {
    let dir = temp_dir("cli-bad-flag");
    let plan = dir.join("never.plan");
    let out = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .env("GRAPHC_CUDA", "2")
        .args(["compile", smollm2().to_str().unwrap(), "-o", plan.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("GRAPHC_CUDA=\"2\": flags are read by value, 1 (on) or 0 (off)"), "{stderr}");
    assert!(!plan.exists(), "no plan is written");
}

/// `bench --batch N`: a batch's decode step timed beside the one-row step
/// (every row at the context), its tokens a second counting every row; no
/// batch columns without the flag, and an empty batch refused.
#[test]
fn bench_batch_times_a_step_of_every_row() {
    let ck = smollm2();
    let v = json_of(&graphc(&["bench", ck.to_str().unwrap(), "--contexts", "16,40", "--steps", "2", "--no-ab", "--batch", "3", "--json"]));
    assert_eq!(v["batch_rows"], 3);
    for r in v["decode"].as_array().unwrap() {
        let ms = r["batch_ms"].as_f64().unwrap();
        assert!(ms > 0.0, "{r}");
        assert!((r["batch_tok_s"].as_f64().unwrap() - 3.0 * 1e3 / ms).abs() < 1e-6, "3 tokens a step: {r}");
    }
    let v = json_of(&graphc(&["bench", ck.to_str().unwrap(), "--contexts", "16", "--steps", "1", "--no-ab", "--json"]));
    assert!(v["batch_rows"].is_null() && v["decode"][0]["batch_ms"].is_null(), "{v}");
    let out = graphc(&["bench", ck.to_str().unwrap(), "--contexts", "16", "--batch", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--batch must be at least 1 row"));
}

/// A refused checkpoint's error is printed once, with the architectures a
/// user can find in a file's `general.architecture`.
#[test]
fn an_unsupported_architecture_is_named_once() {
    let dir = temp_dir("cli-arch");
    let p =
        graphc_tests::GgufWriter::tiny_llama().set_meta("general.architecture", graphc_tests::Meta::Str("mamba9".into())).write(&dir, "mamba9.gguf");
    let out = graphc(&["compile", p.to_str().unwrap(), "-o", dir.join("x.plan").to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("GGUF architecture `mamba9` is not supported").count(), 1, "{err}");
    assert!(err.contains("llama, smollm3, granite, granitemoe, gemma3, qwen2"), "{err}");
    assert!(!dir.join("x.plan").exists(), "no plan is written for a refused checkpoint");
}

/// `graphc chat` through a pipe: the second turn prefills only what it adds
/// (its prefill count is printed), `/stats` reports the turns, `/system`
/// and `/reset` are commands, not messages, and an unknown command says so.
#[test]
fn chat_keeps_the_cache_between_turns() {
    use std::io::Write;
    let ck = smollm2();
    let mut child = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(["chat", ck.to_str().unwrap(), "-n", "8"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"What is the capital of France?\nAnd of Germany?\n/stats\n/bogus\n/system Be brief.\n/reset\n/quit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    let prefills: Vec<usize> = err.lines().filter_map(|l| l.split("[graphc] prefill ").nth(1)?.split(' ').next()?.parse().ok()).collect();
    assert_eq!(prefills.len(), 2, "two answers: {err}");
    // Turn one: SmolLM2's template with its default system message (37 ids).
    assert_eq!(prefills[0], 37, "{err}");
    assert!(prefills[1] < 20, "turn two prefills only its own turn: {prefills:?}\n{err}");
    assert!(err.contains("2 turns | context"), "{err}");
    assert!(err.contains("unknown command /bogus"), "{err}");
    assert!(err.contains("system message set") && err.contains("conversation cleared"), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Paris"), "{text}");
    assert!(!text.contains("<|im_end|>"), "no control token printed: {text}");
}

/// `graphc chat` with a thinking model (Qwen2.5-Coder's weights wearing
/// DeepSeek-R1's distill template, whose prompt opens `<think>` when
/// thinking is on): the block is printed apart from the answer, between
/// `Thinking...` and `...done thinking.` through a pipe; `/nothink` turns
/// it off for the next turn; `--think` is refused for a model that does not
/// think.
#[test]
fn chat_shows_a_thinking_models_reasoning_apart() {
    use std::io::Write;
    let all: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(graphc_tests::repo_root().join("tests/fixtures/tokenizer/chat_templates.json")).unwrap())
            .unwrap();
    let template = all["templates"]["r1_distill_qwen"]["template"].as_str().unwrap().to_string();
    let dir = temp_dir("cli-chat-think");
    let ck = graphc_tests::gguf_with_keys(
        &graphc_tests::model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
        &dir.join("qwen-r1.gguf"),
        &[("tokenizer.chat_template", graphc_tests::Meta::Str(template))],
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(["chat", ck.to_str().unwrap(), "-n", "12", "--think", "true", "--system", "Copy the text below, then say OK.", "--max-seq", "512"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Words that lead these weights to close the block and go on (as in tests/tests/serve_reasoning.rs).
    child.stdin.take().unwrap().write_all(b"France.</think>Paris\n/nothink\nFrance.</think>Paris\n/quit\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("Thinking...\n"), "{text}");
    let (thought, rest) = text["Thinking...\n".len()..].split_once("\n...done thinking.\n\n").unwrap_or_else(|| panic!("{text}"));
    assert!(!thought.contains("</think>") && rest.starts_with("Paris"), "{text}");
    assert_eq!(text.matches("Thinking...").count(), 1, "the second turn does not think: {text}");
    assert!(err.contains("thinking off"), "{err}");

    let out = graphc(&["chat", smollm2().to_str().unwrap(), "--think", "true"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--think"), "{}", String::from_utf8_lossy(&out.stderr));
}
