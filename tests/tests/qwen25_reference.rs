//! Qwen2.5-Coder-0.5B-Instruct (Q4_K_M) against its reference outputs
//! (`tests/reference/qwen2.5-coder-0.5b-q4_k_m.json`: transformers f32 on
//! the dequantized GGUF, made by `tests/reference/make_reference.py`):
//! prompt ids, the chat template's text, last-prompt-position logits, and
//! greedy tokens through `n_stable` on all four prompts (one a chat
//! prompt) on the fast CPU backend; on wgpu, the first prompt's logits and
//! first greedy tokens.
//!
//! This file's output matrix is its own `output.weight` (q8_0), not the
//! embedding (q5_0): a lowering that tied them would read other numbers.

use graphc::sampling::argmax;
use graphc::{CompileOptions, Model};
use graphc_tests::{compare, device_session, gpu, model, reference_json, reference_logits};

const LABEL: &str = "qwen2.5-coder-0.5b-q4_k_m";
const FILE: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// Why 1e-3: both sides compute in f32 over the same dequantized weights
/// and differ in summation order; on this model's logits (magnitude ~20,
/// 24 layers) that is measured at the values printed below. A plausible
/// wrong lowering is far outside: dropping the Q/K/V biases moves the
/// logits by whole units (`qwen25_the_bound_separates_plausible_mistakes`).
const MAX_ABS_LOGIT_DIFF: f32 = 1e-3;

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Prefill `ids`, compare the last logits with the reference's file (when
/// kept), then decode `n` greedy tokens; returns them and the max |Δlogit|.
fn greedy(session: &mut graphc::Session, ids: &[u32], n: usize, logits_file: Option<&str>) -> (Vec<u32>, Option<(f32, f64)>) {
    let mut logits = session.prefill(ids).unwrap();
    let diff = logits_file.map(|f| compare(&logits, &reference_logits(f)));
    let mut tokens = Vec::new();
    while tokens.len() < n {
        let t = argmax(&logits);
        tokens.push(t);
        if tokens.len() < n {
            logits = session.decode(t).unwrap();
        }
    }
    (tokens, diff)
}

#[test]
fn qwen25_fast_backend_matches_the_reference_tokens_and_logits() {
    let reference = reference_json(LABEL);
    let model = Model::compile(&model(FILE), &CompileOptions { max_seq: Some(1024), ..Default::default() }, None).unwrap();
    assert_eq!(model.plan().family, "qwen2");
    assert_eq!(model.plan().model.facts["tied_output"], "false", "this GGUF stores output.weight");
    let tok = model.tokenizer().unwrap();
    let mut session = model.session(&device_session()).unwrap();
    println!("kernels: {}", session.resolved().kernels);
    let mut chat_prompts = 0;
    for p in reference["prompts"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let text = p["text"].as_str().unwrap();
        if p["chat"].as_bool() == Some(true) {
            chat_prompts += 1;
            let rendered =
                tok.apply_chat_template(&[graphc::Message::user(p["user_message"].as_str().unwrap())], &graphc::ChatOptions::default()).unwrap();
            assert_eq!(rendered, text, "{name}: chat template rendering");
        }
        let want_ids = ids(&p["prompt_ids"]);
        assert_eq!(tok.encode(text).unwrap(), want_ids, "{name}: prompt ids");
        let n_stable = p["n_stable"].as_u64().unwrap() as usize;
        let (tokens, diff) = greedy(&mut session, &want_ids, n_stable, p["logits_file"].as_str());
        if let Some((max, cos)) = diff {
            println!("{name}: max |Δlogit| = {max:.3e}, cosine = {cos:.9}");
            assert!(max <= MAX_ABS_LOGIT_DIFF, "{name}: max |Δlogit| {max} > {MAX_ABS_LOGIT_DIFF}");
        }
        assert_eq!(tokens[..], ids(&p["generated_ids"])[..n_stable], "{name}: the first {n_stable} greedy tokens");
        println!("{name}: {} prompt tokens, {n_stable} greedy tokens equal", want_ids.len());
    }
    assert_eq!(chat_prompts, 1);
    let counts = session.kernel_counts();
    for k in ["matmul_rows", "matmul_tiled", "attention"] {
        assert!(counts.get(k).copied().unwrap_or(0) > 0, "fast kernel `{k}` never ran: {counts:?}");
    }
}

/// The bound tells right from wrong: the same file with its Q/K/V biases
/// zeroed (what a lowering that ignored them computes) is far outside it
/// on p1.
#[test]
fn qwen25_the_bound_separates_plausible_mistakes() {
    let reference = reference_json(LABEL);
    let p = &reference["prompts"][0];
    let want = reference_logits(p["logits_file"].as_str().unwrap());
    let src = model(FILE);
    let g = graphc_frontends::GgufFile::open(&src).unwrap();
    let bytes = std::fs::read(&src).unwrap();
    let dir = graphc_tests::temp_dir("qwen25-controls");
    // Zero every q/k/v bias (f32 tensors) in a copy of the file.
    let mut no_bias = bytes;
    for t in g.tensors.iter().filter(|t| t.name.ends_with(".bias")) {
        no_bias[t.offset as usize..(t.offset + t.bytes) as usize].fill(0);
    }
    let path = dir.join("no-bias.gguf");
    std::fs::write(&path, &no_bias).unwrap();
    let m = Model::compile(&path, &CompileOptions { max_seq: Some(64), ..Default::default() }, None).unwrap();
    let logits = m.session(&device_session()).unwrap().prefill(&ids(&p["prompt_ids"])).unwrap();
    let (gap, _) = compare(&logits, &want);
    println!("q/k/v biases zeroed: max |Δlogit| = {gap:.3}");
    assert!(gap > 10.0 * MAX_ABS_LOGIT_DIFF, "zeroed biases are only {gap} away");
}

#[test]
fn qwen25_on_wgpu_matches_the_reference_on_p1() {
    let device = std::env::var("GRAPHC_TEST_DEVICE").unwrap_or_else(|_| "wgpu".into());
    if device == "wgpu" {
        if let Err(e) = graphc_gpu::wgpu_rt::WgpuDevice::new(&gpu()) {
            if std::env::var("GRAPHC_REQUIRE_WGPU").as_deref() == Ok("1") {
                panic!("GRAPHC_REQUIRE_WGPU=1 but {e}");
            }
            eprintln!("SKIPPED: no wgpu adapter on this machine ({e})");
            return;
        }
    }
    let reference = reference_json(LABEL);
    let opts = CompileOptions { device: Some(device.clone()), max_seq: Some(64), gpu: gpu(), ..Default::default() };
    let model = Model::compile(&model(FILE), &opts, None).unwrap();
    let mut session = model.session(&device_session()).unwrap();
    // lavapipe runs this model at tens of seconds a token on 2 cores: p1's
    // logits and its first greedy tokens here (its whole 32-token run
    // passed by hand, as the README says).
    let p = &reference["prompts"][0];
    let steps = 4;
    let (tokens, diff) = greedy(&mut session, &ids(&p["prompt_ids"]), steps, p["logits_file"].as_str());
    let (max, cos) = diff.unwrap();
    println!("p1 on {device}: max |Δlogit| = {max:.3e}, cosine = {cos:.9}");
    assert!(max <= MAX_ABS_LOGIT_DIFF, "p1 on {device}: max |Δlogit| {max} > {MAX_ABS_LOGIT_DIFF}");
    assert_eq!(tokens[..], ids(&p["generated_ids"])[..steps], "p1 on {device}: the first {steps} greedy tokens");
    println!("p1 on {device}: {steps} greedy tokens equal");
    // Each layer's head (q5_0 q and k beside a q8_0 v, each with its bias)
    // runs as one `matmul_qkv_rope`.
    assert_eq!(session.kernel_counts()["device_qkv_rope_heads"], 24, "one head a layer");
    // Four launches a layer (the head, attention projected by head, the
    // normed gated MLP forming the sum of the shares and the residual, the
    // down projection with that sum as its residual), then the embedding's gather, the last position's gather and
    // the normed output matrix (one 145 MB tensor: one launch, or two where
    // one binding cannot hold it, as on lavapipe's 128 MiB).
    let launches = session.kernel_counts()["device_launches_last_step"];
    println!("qwen2.5: {launches} launches a decode step");
    assert!((24 * 4 + 3..=24 * 4 + 4).contains(&launches), "qwen2.5: {launches} launches a decode step");
}
