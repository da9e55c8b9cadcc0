//! The real checkpoints end to end on a GPU device: wgpu (lavapipe in CI),
//! CUDA with `GRAPHC_TEST_DEVICE=cuda` and `GRAPHC_CUDA=1`
//! (`tools/gpu-check`), or Metal with `GRAPHC_TEST_DEVICE=metal` and
//! `GRAPHC_METAL=1` (`tools/metal-check`, on a Mac).
//! SmolLM2-135M-Instruct (Q4_1): the three shorter reference prompts as one
//! ragged batch (rows of 5, 6 and 40 tokens, each at its own positions and
//! cache offset), their last-prompt-position logits against the reference
//! files, and each row's `n_stable` leading greedy tokens. Gemma 3 270M
//! (Q4_K_M: q4_k/q6_k/q8_0 weights, a 178 MB embedding split over bindings,
//! sliding-window ring caches, norm_rope, GeGLU): prompt p1's logits and
//! greedy tokens. (The ~840-token prompts are left to the CPU tests:
//! lavapipe runs a SmolLM2 token in ~0.5 s on two cores.)
//!
//! Without a Vulkan adapter this prints that it skipped, unless
//! `GRAPHC_REQUIRE_WGPU=1` (set by `.ci/run`, which installs lavapipe).

use graphc::sampling::argmax;
use graphc::{CompileOptions, Model};
use graphc_tests::{compare, device_session, gpu, reference_json, reference_logits, smollm2};

/// Why 5e-4 (the CPU tests' bound): the GPU path computes in f32 over the
/// same dequantized weights as the reference, in another summation order
/// (8-way partial sums per output, tree reductions, an online softmax);
/// measured on lavapipe it is 3.1e-5..3.8e-5 on logits of magnitude ~20
/// (printed), so 5e-4 leaves 10x room. llama.cpp, which quantizes
/// activations, is off by 0.6..0.8 on these prompts, so the bound tells an
/// exact path from a lossy one by three orders of magnitude.
const MAX_ABS_LOGIT_DIFF: f32 = 5e-4;

/// `wgpu`, or what `GRAPHC_TEST_DEVICE` names.
fn test_device() -> String {
    std::env::var("GRAPHC_TEST_DEVICE").unwrap_or_else(|_| "wgpu".into())
}

fn have_device() -> bool {
    if test_device() != "wgpu" {
        return true; // a named device must work: compiling for it says why not
    }
    match graphc_gpu::wgpu_rt::WgpuDevice::new(&gpu()) {
        Ok(_) => true,
        Err(e) if std::env::var("GRAPHC_REQUIRE_WGPU").as_deref() == Ok("1") => panic!("GRAPHC_REQUIRE_WGPU=1 but {e}"),
        Err(e) => {
            eprintln!("SKIPPED: no wgpu adapter on this machine ({e})");
            false
        }
    }
}

#[test]
fn gemma3_on_the_gpu_matches_the_reference() {
    if !have_device() {
        return;
    }
    let reference = reference_json("gemma3-270m-q4_k_m");
    let p = &reference["prompts"][0];
    let ids: Vec<u32> = p["prompt_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let n_stable = p["n_stable"].as_u64().unwrap() as usize;
    let want: Vec<u32> = p["generated_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let opts = CompileOptions { device: Some(test_device()), max_seq: Some(64), gpu: gpu(), ..Default::default() };
    let model = Model::compile(&graphc_tests::model("gemma-3-270m-q4_k_m.gguf"), &opts, None).unwrap();
    let mut session = model.session(&device_session()).unwrap();
    let mut logits = session.prefill(&ids).unwrap();
    let (max, cos) = compare(&logits, &reference_logits(p["logits_file"].as_str().unwrap()));
    println!("gemma3 p1: max |Δlogit| = {max:.3e}, cosine = {cos:.9}");
    assert!(max <= MAX_ABS_LOGIT_DIFF, "gemma3 p1: max |Δlogit| {max} > {MAX_ABS_LOGIT_DIFF}");
    // GeGLU over q5_0 gate and up projections with their pre-norm: one
    // `norm_matmul_glu` op a layer (the `matmul-glu` and `norm-matmul-glu`
    // rules), one kernel each.
    assert_eq!(count_ops(&model, |op| matches!(op, graphc_ir::Op::NormMatMulGlu { .. })), 18, "one gated MLP a layer is fused");
    // Sandwich norms: each post-norm and its residual add are one
    // `norm_add` op (the `norm-add` rules), the attention's with the output
    // projection split by head (`attention_project`: `add_partials{eps}`,
    // formed by its readers, the MLP and the next post-norm); each pre-norm
    // is formed by the projections that read it (q/k/v, the MLP, the output
    // matrix), so no norm is a launch of its own and no residual add is
    // left to a norm.
    assert_eq!(count_ops(&model, |op| matches!(op, graphc_ir::Op::NormAdd { .. })), 18, "the MLP's post-norms fused");
    assert_eq!(count_ops(&model, |op| matches!(op, graphc_ir::Op::AddPartials { eps: Some(_) })), 18, "the attention's post-norms by head");
    assert_eq!(session.kernel_counts()["device_partials_in_readers"], 18, "each formed by its readers");
    assert_eq!(
        count_ops(&model, |op| matches!(op, graphc_ir::Op::Norm { .. } | graphc_ir::Op::Binary(graphc_ir::BinaryOp::Add))),
        0,
        "no norm or add left"
    );
    assert_eq!(session.kernel_counts()["device_fused_residual_norms"], 0, "no residual add left to a norm's kernel");
    // q, k and v (norm_matmuls of one norm) stack in every layer: all three q5_0 (9 layers), or q5_0
    // q and k beside a q8_0 v (the other 9; one block size, each weight
    // decoded as its own type).
    assert_eq!(session.kernel_counts()["device_stacked_matmuls"], 18 * 2, "q/k/v stacked");
    // q/k norm + rope and the K/V appends run in the attention's kernel
    // (`norm_rope_attention`): nothing left to pair.
    assert_eq!(session.kernel_counts()["device_normed_attentions"], 18, "each layer's attention norms, rotates and appends");
    assert_eq!(session.kernel_counts()["device_paired_ops"], 0, "no norm_rope or kv_append pairs left");
    // Its q/k norms need a whole head's sum before rotating (`norm_rope`),
    // so no layer head runs as `matmul_qkv_rope`.
    assert_eq!(session.kernel_counts()["device_qkv_rope_heads"], 0, "Gemma 3 rotates in norm_rope");
    let mut tokens = vec![];
    while tokens.len() < n_stable {
        let t = argmax(&logits);
        tokens.push(t);
        if tokens.len() < n_stable {
            logits = session.decode(t).unwrap();
        }
    }
    assert_eq!(tokens[..], want[..n_stable], "gemma3 p1: the first {n_stable} greedy tokens on {}", test_device());
    // Five launches a layer (the stacked normed q/k/v, the attention
    // norming and rotating q and k, appending k and v and projecting by
    // head, the normed gated MLP forming the post-normed sum, the down
    // projection, the MLP's post-norm with its add, forming that sum too),
    // then the embedding's gather, its scale, the last position's gather
    // and the normed output matrix: the embedding and the output matrix
    // (one 178 MB tensor) one launch each, or two where one binding cannot
    // hold it (lavapipe's 128 MiB).
    let launches = session.kernel_counts()["device_launches_last_step"];
    println!("gemma3: {launches} launches a decode step");
    assert!((18 * 5 + 4..=18 * 5 + 6).contains(&launches), "gemma3: {launches} launches a decode step");
}

#[test]
fn smollm2_on_the_gpu_matches_the_reference_as_a_ragged_batch() {
    if !have_device() {
        return;
    }
    let reference = reference_json("smollm2-135m-q4_1");
    let prompts: Vec<&serde_json::Value> = reference["prompts"].as_array().unwrap().iter().take(3).collect();
    let ids: Vec<Vec<u32>> =
        prompts.iter().map(|p| p["prompt_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect()).collect();
    let n_stable: Vec<usize> = prompts.iter().map(|p| p["n_stable"].as_u64().unwrap() as usize).collect();

    let opts = CompileOptions { device: Some(test_device()), max_seq: Some(128), gpu: gpu(), ..Default::default() };
    let model = Model::compile(&smollm2(), &opts, None).unwrap();
    assert_eq!(model.plan().options.device, test_device());
    let mut session = model.batch_session(ids.len(), &device_session()).unwrap();
    println!("kernels: {}", session.resolved().kernels);
    assert!(session.resolved().kernels.starts_with(&test_device()), "{}", session.resolved().kernels);

    let rows: Vec<&[u32]> = ids.iter().map(|v| v.as_slice()).collect();
    let mut logits = session.prefill_rows(&rows).unwrap();
    let launches = session.kernel_counts()["device_launches_last_step"];
    assert!(launches > 100, "the device ran only {launches} kernels for a 30-layer forward");
    assert_eq!(session.kernel_counts()["device_aliased_permutes"], 0, "a prefill's head permutes move data");
    // Each layer's FFN norm, gate and up projections and their SwiGLU are
    // one `norm_matmul_glu` op (the `matmul-glu` and `norm-matmul-glu`
    // rules), one kernel; the MLP's residual add is in the down
    // projection's epilogue (`matmul_add`), the attention's output
    // projection is split by head into the attention's kernel
    // (`attention_project`) and its sum with the residual formed where the
    // MLP and the down projection read it, and the attention norm is
    // formed in the layer head's kernel: four launches a layer.
    assert_eq!(count_ops(&model, |op| matches!(op, graphc_ir::Op::NormMatMulGlu { .. })), 30, "one gated MLP a layer is fused");
    assert_eq!(count_ops(&model, |op| matches!(op, graphc_ir::Op::MatMulAdd)), 30, "the MLP's residual add fused");
    assert_eq!(count_ops(&model, |op| matches!(op, graphc_ir::Op::AttentionProject { .. })), 30, "one attention projected by head a layer");
    assert_eq!(session.kernel_counts()["device_partials_in_readers"], 30, "each layer's sum formed by its readers");
    assert_eq!(
        count_ops(&model, |op| matches!(op, graphc_ir::Op::Norm { .. } | graphc_ir::Op::Binary(graphc_ir::BinaryOp::Add))),
        0,
        "no norm or add left"
    );
    assert_eq!(session.kernel_counts()["device_fused_residual_norms"], 0, "no residual add left to a norm's kernel");
    // Each layer's q/k/v projections, q and k rotations and K and V
    // appends run as one kernel (`matmul_qkv_rope`), so none is left to
    // stack or pair.
    assert_eq!(session.kernel_counts()["device_qkv_rope_heads"], 30, "one layer head a layer is fused");
    assert_eq!(session.kernel_counts()["device_stacked_matmuls"], 0, "q/k/v are in the layer head's kernel");
    assert_eq!(session.kernel_counts()["device_paired_ops"], 0, "ropes and appends are in the layer head's kernel");
    for (p, l) in prompts.iter().zip(&logits) {
        let want = reference_logits(p["logits_file"].as_str().unwrap());
        let (max, cos) = compare(l, &want);
        let llama_cpp = p["llama_cpp"]["last_logits_vs_transformers"]["max_abs_diff"].as_f64().unwrap_or(f64::NAN);
        println!("{}: max |Δlogit| = {max:.3e}, cosine = {cos:.9} (llama.cpp: {llama_cpp:.3})", p["name"]);
        assert!(max <= MAX_ABS_LOGIT_DIFF, "{}: max |Δlogit| {max} > {MAX_ABS_LOGIT_DIFF}", p["name"]);
    }

    let mut tokens: Vec<Vec<u32>> = vec![vec![]; ids.len()];
    let longest = *n_stable.iter().max().unwrap();
    let mut allocations_after_first_decode = None;
    let mut bindings_after_first_decode = None;
    for step in 0..longest {
        if step == 2 {
            allocations_after_first_decode = Some(session.kernel_counts()["device_result_allocations"]);
            bindings_after_first_decode = Some(session.kernel_counts()["device_bindings_built"]);
        }
        let next: Vec<u32> = logits.iter().map(|l| argmax(l)).collect();
        for (row, &t) in next.iter().enumerate() {
            tokens[row].push(t);
        }
        if step + 1 < longest {
            logits = session.decode_rows(&next).unwrap();
        }
    }
    // The buffer plan: once a decode step has run, later ones reuse its
    // result buffers and allocate none.
    let allocations = session.kernel_counts()["device_result_allocations"];
    assert_eq!(Some(allocations), allocations_after_first_decode, "decode steps kept allocating result buffers");
    // A decode step of the three rows forms each layer's sum in the MLP's
    // prologue (one tile of three staged rows); a prefill sums it into
    // scratch first, a launch more a layer. No permute is left (the one after attention went with the
    // projection; the three before it are in the layer head's kernel).
    let decode_launches = session.kernel_counts()["device_launches_last_step"];
    let aliased = session.kernel_counts()["device_aliased_permutes"];
    println!("decode: {decode_launches} launches a step (prefill {launches}), {aliased} permutes run as no copy");
    assert_eq!(aliased, 0, "no permute left");
    assert_eq!(decode_launches, 30 * 4 + 3, "four launches a decode layer");
    assert_eq!(decode_launches + 30, launches, "a prefill sums each layer's shares in a launch of its own");
    println!("result buffers allocated in all: {allocations} (for {launches} launches a step)");
    // Step inputs are rewritten in their buffers and RoPE's frequencies
    // uploaded once, so the bind groups built for the first decode step
    // serve every later one: the host builds none per step.
    let bindings = session.kernel_counts()["device_bindings_built"];
    assert_eq!(Some(bindings), bindings_after_first_decode, "decode steps kept building bind groups");
    // The first decode step is recorded; every later one replays it.
    let replayed = session.kernel_counts()["device_replayed_steps"];
    assert_eq!(replayed, longest as u64 - 2, "decode steps replayed");
    for (row, p) in prompts.iter().enumerate() {
        let want: Vec<u32> = p["generated_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        assert_eq!(tokens[row][..n_stable[row]], want[..n_stable[row]], "{}: the first {} greedy tokens", p["name"], n_stable[row]);
        println!("{}: {} stable greedy tokens equal on {}", p["name"], n_stable[row], test_device());
    }
}

/// `tools/device-check`'s comparison (`graphc_tests::device_parity`), here
/// on SmolLM2 and lavapipe: the device against the CPU oracle and fast
/// kernels, teacher-forced,
/// so the example device-check runs is exercised in CI.
#[test]
fn device_parity_holds_on_smollm2() {
    if !have_device() {
        return;
    }
    let r = graphc_tests::device_parity::run(&smollm2(), &test_device(), 12, 4).unwrap_or_else(|e| panic!("{e}"));
    println!("device_parity on {}: {:.2e} (decode {:.1} tok/s)", r.sides.1, r.worst, r.decode_tok_s);
    assert!(r.sides.1.starts_with(&test_device()) && r.sides.0.starts_with("fast"), "{:?}", r.sides);
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert!(r.worst > 0.0 && r.worst <= graphc_tests::device_parity::MAX_RELATIVE_DIFF, "{}", r.worst);
    // The oracle ran: the fast CPU's distance from it is measured, not 0.
    assert!(r.tightest.fast_vs_oracle > 0.0 && r.tightest.device_vs_oracle > 0.0, "{:?}", r.tightest);
    // The report carries the device's counters: the first decode step is
    // recorded, the other three replay it (on every target).
    assert!(r.device_counts["device_launches_last_step"] > 0, "the report names the device's launches");
    assert_eq!(r.device_counts["device_replayed_steps"], 3, "decode steps replayed");
}

/// The tiny HF family fixtures (`tests/fixtures/families/`, transformers
/// f32 logits) on the GPU: logits at every position of every prompt, fed
/// one token at a time through the in-place caches, and a ragged batch's
/// last-token logits, within the CPU tests' 1e-4 — the MoE ones with their
/// routers (`top_k_mask`, `sparse_mixer`) and Qwen3-Next with its
/// convolution and delta-rule recurrences on the device.
#[test]
fn family_fixtures_on_the_gpu_match_transformers() {
    if !have_device() {
        return;
    }
    const TOL: f32 = 1e-4;
    let max_diff = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let floats = |v: &serde_json::Value| -> Vec<f32> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect() };
    let ids = |v: &serde_json::Value| -> Vec<u32> { v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect() };
    // 64 rows of cache (the smallest context here): the prompts are short, and llama3's 131072-token
    // context would allocate its caches at that length.
    let opts = CompileOptions { device: Some(test_device()), max_seq: Some(64), gpu: gpu(), ..Default::default() };
    for family in [
        "qwen2",
        "qwen2_yarn",
        "llama3",
        "mistral",
        "mixtral",
        "smollm3",
        "granite",
        "qwen3",
        "gemma",
        "gemma2",
        "gemma3_text",
        "gemma4",
        "gemma4_moe",
        "phi2",
        "phi3",
        "phi3_longrope",
        "phi3_window",
        "phi4_mini",
        "qwen3_moe",
        "qwen2_moe",
        "olmo2",
        "olmo3",
        "glm4",
        "ernie4_5",
        "lfm2",
        "phimoe",
        "qwen3_next",
        "qwen3_5",
        "qwen3_5_moe",
        "qwen3_5 GGUF",
        "gpt_oss",
    ] {
        // Qwen3.5's GGUF: its value heads tiled over the key heads (q and k repeated on the device).
        let (family, gguf) = family.strip_suffix(" GGUF").map_or((family, false), |f| (f, true));
        let dir = graphc_tests::repo_root().join("tests/fixtures/families").join(family);
        let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
        // gpt-oss is read from its GGUF (experts in MXFP4; its safetensors layout is refused).
        let path = if family == "gpt_oss" || gguf { dir.join("model.gguf") } else { dir.clone() };
        let model = Model::compile(&path, &opts, None).unwrap_or_else(|e| panic!("{family}: {e}"));
        let prompts: Vec<Vec<u32>> = r["prompts"].as_array().unwrap().iter().map(ids).collect();
        let mut worst = 0f32;
        // HF checkpoints store Gemma's norm weights without their `+ 1` and
        // Qwen3-Next's `A_log` before `-exp`: weight-only values the device
        // computes in the first step only (and these logits check them).
        let folded = model.session(&device_session()).unwrap().kernel_counts()["device_folded_nodes"];
        if matches!(family, "gemma" | "gemma2" | "qwen3_next" | "qwen3_5" | "qwen3_5_moe") {
            assert!(folded > 0, "{family}: no weight-only node folded on the device");
        }
        for (p, prompt) in prompts.iter().enumerate() {
            let want: Vec<Vec<f32>> = r["logits"][p].as_array().unwrap().iter().map(floats).collect();
            let mut s = model.session(&device_session()).unwrap();
            let mut got = vec![s.prefill(&prompt[..1]).unwrap()];
            for &t in &prompt[1..] {
                got.push(s.decode(t).unwrap());
            }
            for (pos, (g, w)) in got.iter().zip(&want).enumerate() {
                let d = max_diff(g, w);
                assert!(d <= TOL, "{family}: prompt {p} position {pos}: max |Δlogit| {d}");
                worst = worst.max(d);
            }
        }
        let ragged: Vec<Vec<f32>> = r["ragged_last_logits"].as_array().unwrap().iter().map(floats).collect();
        let mut batch = model.batch_session(prompts.len(), &device_session()).unwrap();
        let rows: Vec<&[u32]> = prompts.iter().map(|p| &p[..]).collect();
        for (i, (g, w)) in batch.prefill_rows(&rows).unwrap().iter().zip(&ragged).enumerate() {
            let d = max_diff(g, w);
            assert!(d <= TOL, "{family}: ragged row {i}: max |Δlogit| {d}");
        }
        let heads = batch.kernel_counts()["device_qkv_rope_heads"];
        // Gemma 1/2 rotate by halves with no q/k norm: their layer heads
        // run as `matmul_qkv_rope` (and these logits check it).
        if matches!(family, "gemma" | "gemma2") {
            assert!(heads > 0, "{family}: no layer head fused on the device");
        }
        println!("{family} on {}: max |Δlogit| over every position of every prompt {worst:e}; {folded} weight-only nodes folded; {heads} layer heads fused", test_device());
    }
}

/// `Session::set_profiling` on a GPU (what `graphc bench --device D
/// --profile` prints, and `tools/device-check` runs on CUDA): every launch
/// of every step timed on its own, under `kernel NAME`, as many as the
/// step's launches; the same kernels on the same buffers, so no bit of the
/// logits changes (profiled steps are never replayed, and still equal the
/// unprofiled session's replayed ones).
#[test]
fn kernel_timing_counts_every_launch_and_changes_no_bit() {
    if !have_device() {
        return;
    }
    let opts = CompileOptions { device: Some(test_device()), max_seq: Some(64), gpu: gpu(), ..Default::default() };
    let model = Model::compile(&smollm2(), &opts, None).unwrap();
    let run = |profile: bool| {
        let mut s = model.session(&device_session()).unwrap();
        s.set_profiling(profile).unwrap();
        let mut bits: Vec<u32> = s.prefill(&[1, 54, 34, 28]).unwrap().iter().map(|v| v.to_bits()).collect();
        let mut launches = s.kernel_counts()["device_launches_last_step"];
        for t in [42, 7, 9] {
            bits.extend(s.decode(t).unwrap().iter().map(|v| v.to_bits()));
            launches += s.kernel_counts()["device_launches_last_step"];
        }
        (bits, s.profile(), launches, s.kernel_counts()["device_replayed_steps"])
    };
    let (plain, none, _, replayed) = run(false);
    assert!(none.is_none());
    assert_eq!(replayed, 2, "the unprofiled session replays its later decode steps");
    let (timed, profile, launches, replayed) = run(true);
    assert!(plain == timed, "timing each launch changed the logits' bits");
    assert_eq!(replayed, 0, "profiled steps are not replayed");
    let profile = profile.unwrap();
    assert_eq!(profile.forwards, 4);
    let calls: u64 = profile.classes.values().map(|c| c.calls).sum();
    assert_eq!(calls, launches, "one timed call a launch");
    assert!(profile.classes.keys().all(|k| k.starts_with("kernel ")), "{:?}", profile.classes.keys());
    assert!(profile.classes.values().all(|c| c.secs > 0.0));
    println!("{} launches timed in {} kernels on {}", calls, profile.classes.len(), test_device());
}

/// How many nodes of the model's optimized graph `pick` selects.
fn count_ops(model: &graphc::Model, pick: impl Fn(&graphc_ir::Op) -> bool) -> usize {
    model.graph().nodes().filter(|n| pick(&n.op)).count()
}

/// Gemma 3 with its attentions made `norm_rope_attention` (the default)
/// and without (the q/k `norm_rope`s, the appends and `attention_project`
/// as their own kernels): logits of a prefill (appended first, then
/// attended) and of decode steps (each appended by the attention's own
/// kernel) are identical bit for bit.
#[test]
fn normed_attention_changes_no_logit_bit_on_gemma3() {
    if !have_device() {
        return;
    }
    let opts = CompileOptions { device: Some(test_device()), max_seq: Some(64), gpu: gpu(), ..Default::default() };
    let off = CompileOptions { disabled_passes: vec!["norm_rope_attention".to_string()], ..opts.clone() };
    let path = graphc_tests::model("gemma-3-270m-q4_k_m.gguf");
    let (on, plain) = (Model::compile(&path, &opts, None).unwrap(), Model::compile(&path, &off, None).unwrap());
    assert_eq!(count_ops(&on, |op| matches!(op, graphc_ir::Op::NormRopeAttention { .. })), 18, "one a layer");
    assert_eq!(count_ops(&plain, |op| matches!(op, graphc_ir::Op::NormRopeAttention { .. })), 0, "none with the pass off");
    let bits = |model: &Model| -> Vec<u32> {
        let mut s = model.session(&device_session()).unwrap();
        let mut out: Vec<u32> = s.prefill(&[2, 818, 5279, 529, 7001, 563]).unwrap().iter().map(|v| v.to_bits()).collect();
        for t in [5, 7, 9] {
            out.extend(s.decode(t).unwrap().iter().map(|v| v.to_bits()));
        }
        out
    };
    assert!(bits(&on) == bits(&plain), "gemma3: logits differ in their bits with norm_rope_attention");
}

/// The optimizer changes no bit on the GPU: with every fusion on (the
/// `fuse` pass's rules and the `attention_head`, `residual_norm` and
/// `elementwise_chain` passes, each fused op one launch) and off (the same
/// values by the unfused kernels), logits of a prefill and two decode steps
/// are identical bit for bit, on every family fixture, SmolLM2 and
/// Gemma 3. `attention_project` is off in both: it sums the output
/// projection by head, in another order, and says so (its logits are held
/// to the reference's bound in the tests above). Where a model has them, its layer heads (llama3 rotates by
/// pairs, gemma2 by halves), chains (gemma2's logit soft-cap, phi2's biases,
/// qwen3_moe's expert sums) and residual norms (phi2) are counted, so the
/// comparison is not between two equal graphs; with the passes off no
/// fused op is left.
#[test]
fn the_optimizer_changes_no_logit_bit_on_the_gpu() {
    if !have_device() {
        return;
    }
    let bits = |model: &Model, prompt: &[u32]| -> Vec<u32> {
        let mut s = model.session(&device_session()).unwrap();
        let mut out: Vec<u32> = s.prefill(prompt).unwrap().iter().map(|v| v.to_bits()).collect();
        for t in [5, 7] {
            out.extend(s.decode(t).unwrap().iter().map(|v| v.to_bits()));
        }
        out
    };
    let opts = CompileOptions { device: Some(test_device()), max_seq: Some(64), gpu: gpu(), ..Default::default() };
    let opts = CompileOptions { disabled_passes: vec!["attention_project".to_string()], ..opts };
    let passes = ["fuse", "attention_head", "residual_norm", "elementwise_chain", "attention_project"];
    let off = CompileOptions { disabled_passes: passes.map(String::from).to_vec(), ..opts.clone() };
    let dir = graphc_tests::repo_root().join("tests/fixtures/families");
    let mut checkpoints: Vec<(std::path::PathBuf, Vec<u32>)> =
        std::fs::read_dir(&dir).unwrap().map(|e| (e.unwrap().path(), vec![1, 9, 4, 2, 7])).collect();
    checkpoints.sort();
    // gpt-oss is read from its GGUF.
    for (path, _) in &mut checkpoints {
        if path.ends_with("gpt_oss") {
            *path = path.join("model.gguf");
        }
    }
    assert!(checkpoints.len() >= 12, "the family fixtures");
    checkpoints.push((smollm2(), vec![1, 54, 34, 28, 46, 31]));
    checkpoints.push((graphc_tests::model("gemma-3-270m-q4_k_m.gguf"), vec![2, 818, 5279, 529, 7001, 563]));
    // (layer heads, chains, residual norms) where a model has any.
    let expected = |name: &str| match name {
        "llama3" => (2, 0, 0),
        // Biased heads (Qwen2's q/k/v biases).
        "qwen2" | "qwen2_tied" => (2, 0, 0),
        "gemma2" => (2, 1, 0),
        "phi2" => (2, 4, 1),
        "qwen3_moe" => (0, 1, 0),
        // Its experts' clamped SwiGLUs (a product read through `exp`: the
        // chain whose bits lavapipe once changed), their weighted sum, the
        // attention's output bias and residual: 2 layers of 6.
        "gpt_oss" => (2, 12, 0),
        "SmolLM2-135M-Instruct.Q4_1.gguf" => (30, 0, 0),
        _ => (usize::MAX, usize::MAX, usize::MAX),
    };
    for (path, prompt) in &checkpoints {
        let what = match path.file_name().unwrap().to_string_lossy().to_string() {
            gguf if gguf == "model.gguf" => path.parent().unwrap().file_name().unwrap().to_string_lossy().to_string(),
            name => name,
        };
        // Ministral 3's context is capped at its pretraining length (8 in the fixture).
        let limit = |o: &CompileOptions| CompileOptions { max_seq: if what == "ministral3" { Some(8) } else { o.max_seq }, ..o.clone() };
        let on = Model::compile(path, &limit(&opts), None).unwrap();
        let plain = Model::compile(path, &limit(&off), None).unwrap();
        let counts = (
            count_ops(&on, |op| matches!(op, graphc_ir::Op::QkvRope { .. })),
            count_ops(&on, |op| matches!(op, graphc_ir::Op::Chain { .. })),
            count_ops(&on, |op| matches!(op, graphc_ir::Op::AddNorm { .. })),
        );
        if expected(&what).0 != usize::MAX {
            assert_eq!(counts, expected(&what), "{what}: (layer heads, chains, residual norms)");
        }
        assert!(count_ops(&on, |op| op.is_fused()) > 0, "{what}: nothing fused, so the comparison shows nothing");
        assert_eq!(count_ops(&plain, |op| op.is_fused()), 0, "{what}: a fused op with the passes off");
        assert!(bits(&on, prompt) == bits(&plain, prompt), "{what}: logits differ with the optimizer off");
        println!(
            "{what}: the same logit bits with {} fused ops on and none off; (layer heads, chains, residual norms) {counts:?}",
            count_ops(&on, |op| op.is_fused())
        );
    }
}
