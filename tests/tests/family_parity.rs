//! Parity of the safetensors families against transformers, on the tiny
//! random-initialized checkpoints `tools/make_family_fixtures.py` wrote to
//! `tests/fixtures/families/<family>/` (with the transformers version that
//! made them in `reference.json`'s `made_by`).
//!
//! For every fixture, on the reference executor and the fast backend:
//! logits at every position of every prompt within 1e-4 of transformers'
//! (f32 both sides: the gap is summation order, ~1e-6 here); 16 greedy
//! tokens equal; a ragged batch of the three prompts gives each row the
//! logits at its own last token. Each check shows its input separates right
//! from a likely wrong answer: the fixture's controls (the same model with a
//! plausible mistake patched in) sit at least 10× outside the bound, and reading a
//! short row at the batch's `max_len - 1` gives a different answer.

use graphc::{CompileOptions, Kernels, Model, SessionOptions};
use serde_json::Value;

const TOL: f32 = 1e-4;

fn fixture(family: &str) -> (std::path::PathBuf, Value) {
    let dir = graphc_tests::repo_root().join("tests/fixtures/families").join(family);
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    (dir, serde_json::from_str(&text).unwrap())
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn kernels() -> [Kernels; 2] {
    [Kernels::Reference, Kernels::parse("fast").unwrap()]
}

/// Logits at every position of `prompt`: the first token prefilled, the
/// rest decoded one by one (so the in-place cache is on the path too).
fn logits_at_every_position(model: &Model, k: Kernels, prompt: &[u32]) -> Vec<Vec<f32>> {
    let mut s = model.session(&SessionOptions { threads: Some(2), kernels: Some(k), ..Default::default() }).unwrap();
    let mut out = vec![s.prefill(&prompt[..1]).unwrap()];
    for &t in &prompt[1..] {
        out.push(s.decode(t).unwrap());
    }
    out
}

/// `model` (a fixture's GGUF) against the reference's logits at every
/// position of every prompt, on the fast backend; the logits' bits.
fn gguf_matches_reference(model: &Model, r: &Value, what: &str) -> Vec<u32> {
    let mut bits = Vec::new();
    for (p, prompt) in r["prompts"].as_array().unwrap().iter().enumerate() {
        let got = logits_at_every_position(model, Kernels::parse("fast").unwrap(), &ids(prompt));
        for (pos, (g, w)) in got.iter().zip(r["logits"][p].as_array().unwrap()).enumerate() {
            let d = max_diff(g, &floats(w));
            assert!(d <= TOL, "{what} prompt {p} position {pos}: max |Δlogit| {d}");
        }
        bits.extend(got.into_iter().flatten().map(f32::to_bits));
    }
    bits
}

fn check_family(family: &str) {
    check_family_file(family, None)
}

/// `check_family` on the fixture's checkpoint `file` (its GGUF) where given.
fn check_family_file(family: &str, file: Option<&str>) {
    let (dir, r) = fixture(family);
    println!("{family}: {}", r["made_by"]);
    let path = file.map_or(dir.clone(), |f| dir.join(f));
    let model = Model::compile(&path, &CompileOptions::default(), None).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(model.plan().family, config["model_type"].as_str().unwrap());
    let prompts: Vec<Vec<u32>> = r["prompts"].as_array().unwrap().iter().map(ids).collect();
    let want: Vec<Vec<Vec<f32>>> = r["logits"].as_array().unwrap().iter().map(|p| p.as_array().unwrap().iter().map(floats).collect()).collect();

    // The fixture separates: each control (a plausible mistake) is far off.
    for (name, control) in r["controls"].as_object().unwrap() {
        let control: Vec<Vec<f32>> = control.as_array().unwrap().iter().map(floats).collect();
        let gap = want[0].iter().zip(&control).map(|(a, b)| max_diff(a, b)).fold(0.0, f32::max);
        assert!(gap > 10.0 * TOL, "{family}: control `{name}` is only {gap} from the reference: the fixture does not separate it");
        println!("{family}: control `{name}` is {gap:.3} from the reference");
    }

    for k in kernels() {
        // Every position of every prompt.
        let mut worst = 0f32;
        for (p, prompt) in prompts.iter().enumerate() {
            let got = logits_at_every_position(&model, k, prompt);
            for (pos, (g, w)) in got.iter().zip(&want[p]).enumerate() {
                let d = max_diff(g, w);
                assert!(d <= TOL, "{family} {k:?}: prompt {p} position {pos}: max |Δlogit| {d}");
                worst = worst.max(d);
            }
        }
        println!("{family} {k:?}: max |Δlogit| over every position of every prompt: {worst:e}");
        // 16 greedy tokens.
        let mut s = model.session(&SessionOptions { threads: Some(2), kernels: Some(k), ..Default::default() }).unwrap();
        let mut logits = s.prefill(&prompts[0]).unwrap();
        let mut tokens = Vec::new();
        for _ in 0..16 {
            let t = graphc::sampling::argmax(&logits);
            tokens.push(t);
            logits = s.decode(t).unwrap();
        }
        assert_eq!(tokens, ids(&r["greedy"]), "{family} {k:?}: greedy tokens");
        // A ragged batch: each row's logits at its own last token.
        let ragged: Vec<Vec<f32>> = r["ragged_last_logits"].as_array().unwrap().iter().map(floats).collect();
        let mut batch = model.batch_session(3, &SessionOptions { threads: Some(2), kernels: Some(k), ..Default::default() }).unwrap();
        let rows: Vec<&[u32]> = prompts.iter().map(|p| &p[..]).collect();
        let got = batch.prefill_rows(&rows).unwrap();
        for (i, (g, w)) in got.iter().zip(&ragged).enumerate() {
            let d = max_diff(g, w);
            assert!(d <= TOL, "{family} {k:?}: ragged row {i}: max |Δlogit| {d}");
        }
    }

    // Reading a short row at `max_len - 1` (its last token repeated up to
    // the longest row) would give another answer.
    let max_len = prompts.iter().map(|p| p.len()).max().unwrap();
    let short = &prompts[1];
    let mut padded = short.clone();
    padded.resize(max_len, *short.last().unwrap());
    let wrong = logits_at_every_position(&model, Kernels::Reference, &padded).pop().unwrap();
    let right = want[1].last().unwrap();
    let gap = max_diff(&wrong, right);
    assert!(gap > 100.0 * TOL, "{family}: reading max_len - 1 is only {gap} off");
}

#[test]
fn qwen3_matches_transformers() {
    check_family("qwen3");
}

#[test]
fn qwen3_plan_records_gqa_and_qk_norm() {
    let (dir, _) = fixture("qwen3");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let facts = &model.plan().model.facts;
    assert_eq!((facts["n_heads"].as_str(), facts["n_kv_heads"].as_str()), ("4", "2"));
    // Two per-head norms (q, k) per layer, each fused with its rope
    // (the `norm-rope` rule), beside the two block norms (ops of their own
    // in a CPU plan: q/k/v, and gate/up, read each), and the final norm,
    // formed by the output head (`norm-matmul`).
    let count = |f: fn(&graphc_ir::Op) -> bool| model.graph().nodes().filter(|n| f(&n.op)).count();
    assert_eq!(count(|op| matches!(op, graphc_ir::Op::NormRope { .. })), 2 * 2);
    assert_eq!(count(|op| matches!(op, graphc_ir::Op::Norm { .. })), 2 * 2);
    assert_eq!(count(|op| matches!(op, graphc_ir::Op::NormMatMul { .. })), 1);
    assert_eq!(model.plan().model.context_length, 512, "from config.json's max_position_embeddings");
}

#[test]
fn qwen3_ir_snapshots_and_kv_append_on_and_off() {
    let (dir, r) = fixture("qwen3");
    let on = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let fired = on.plan().passes.iter().find(|p| p.name == "kv_append").unwrap().rewrites;
    assert_eq!(fired, 4, "K and V of both layers append in place");
    insta::assert_snapshot!("qwen3_lowered_layer0", graphc_ir::text::print_filtered(on.lowered_graph().unwrap(), |l| l == 0));
    insta::assert_snapshot!("qwen3_optimized_layer0", graphc_ir::text::print_filtered(on.graph(), |l| l == 0));
    let off_opts = CompileOptions { disabled_passes: vec!["kv_append".into()], ..Default::default() };
    let off = Model::compile(&dir, &off_opts, None).unwrap();
    let prompt = ids(&r["prompts"][0]);
    // No arithmetic changed: the same bits with the pass on and off.
    for k in kernels() {
        let a = logits_at_every_position(&on, k, &prompt);
        let b = logits_at_every_position(&off, k, &prompt);
        let bits = |v: &Vec<Vec<f32>>| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b), "{k:?}: logits differ with kv_append off");
    }
    // The ragged batch with the pass off (rows stepped one by one).
    let prompts: Vec<Vec<u32>> = r["prompts"].as_array().unwrap().iter().map(ids).collect();
    let rows: Vec<&[u32]> = prompts.iter().map(|p| &p[..]).collect();
    let mut batch = off.batch_session(3, &SessionOptions::default()).unwrap();
    for (i, (g, w)) in batch.prefill_rows(&rows).unwrap().iter().zip(r["ragged_last_logits"].as_array().unwrap()).enumerate() {
        assert!(max_diff(g, &floats(w)) <= TOL, "ragged row {i} with kv_append off");
    }
}

#[test]
fn gemma_matches_transformers() {
    check_family("gemma");
}

#[test]
fn gemma_context_length_is_read_from_the_config_never_defaulted() {
    let (dir, _) = fixture("gemma");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    // gemma-2b/7b configs say 8192; the plan must carry that, not a default.
    assert_eq!(model.plan().model.context_length, 8192);
    assert_eq!(model.plan().options.max_seq, 8192);
    assert_eq!(model.plan().options.max_seq_source, graphc_ir::plan::Source::Checkpoint);
    // Without the key the compile fails naming it.
    let tmp = graphc_tests::temp_dir("gemma-no-context");
    std::fs::copy(dir.join("model.safetensors"), tmp.join("model.safetensors")).unwrap();
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("max_position_embeddings");
    std::fs::write(tmp.join("config.json"), config.to_string()).unwrap();
    let e = Model::compile(&tmp, &CompileOptions::default(), None).err().expect("compiled without a context length").to_string();
    assert!(e.contains("missing key `max_position_embeddings`") && e.contains("config.json"), "{e}");
}

#[test]
fn gemma_optimized_ir_snapshot() {
    let (dir, _) = fixture("gemma");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let fired = model.plan().passes.iter().find(|p| p.name == "kv_append").unwrap().rewrites;
    assert_eq!(fired, 4, "K and V of both layers append in place");
    insta::assert_snapshot!("gemma_optimized_layer0", graphc_ir::text::print_filtered(model.graph(), |l| l == 0));
}

#[test]
fn phi2_matches_transformers() {
    check_family("phi2");
}

/// The phi2 fixture with its config edited by `edit`, in a fresh folder.
fn phi2_with_config(tag: &str, edit: impl Fn(&mut serde_json::Map<String, Value>)) -> std::path::PathBuf {
    config_copy("phi2", tag, edit)
}

/// A copy of fixture `family` with its config.json edited by `edit`.
fn config_copy(family: &str, tag: &str, edit: impl Fn(&mut serde_json::Map<String, Value>)) -> std::path::PathBuf {
    let (dir, _) = fixture(family);
    let tmp = graphc_tests::temp_dir(tag);
    std::fs::copy(dir.join("model.safetensors"), tmp.join("model.safetensors")).unwrap();
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    edit(config.as_object_mut().unwrap());
    std::fs::write(tmp.join("config.json"), config.to_string()).unwrap();
    tmp
}

#[test]
fn phi2_reads_the_layernorm_epsilon_under_either_spelling_and_names_both_when_missing() {
    let (dir, r) = fixture("phi2");
    let want = floats(&r["logits"][0].as_array().unwrap().last().unwrap().clone());
    let original = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    assert_eq!(original.plan().model.facts["norm"], "layer, eps 1e-5");
    for spelling in ["layer_norm_epsilon", "layer_norm_rms_epsilon"] {
        let tmp = phi2_with_config(&format!("phi2-{spelling}"), |c| {
            let eps = c.remove("layer_norm_eps").unwrap();
            c.insert(spelling.into(), eps);
        });
        let m = Model::compile(&tmp, &CompileOptions::default(), None).unwrap();
        assert_eq!(m.plan().model.facts["norm"], "layer, eps 1e-5", "{spelling}");
        let prompt = ids(&r["prompts"][0]);
        let got = m.session(&SessionOptions::default()).unwrap().prefill(&prompt).unwrap();
        assert!(max_diff(&got, &want) <= TOL, "{spelling}");
    }
    let tmp = phi2_with_config("phi2-no-eps", |c| {
        c.remove("layer_norm_eps");
    });
    let e = Model::compile(&tmp, &CompileOptions::default(), None).err().expect("compiled without an epsilon").to_string();
    for key in ["layer_norm_eps", "layer_norm_epsilon", "layer_norm_rms_epsilon"] {
        assert!(e.contains(&format!("`{key}`")), "names `{key}`: {e}");
    }
}

#[test]
fn phi2_optimized_ir_snapshot() {
    let (dir, _) = fixture("phi2");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    insta::assert_snapshot!("phi2_optimized_layer0", graphc_ir::text::print_filtered(model.graph(), |l| l == 0));
}

#[test]
fn phi3_matches_transformers() {
    check_family("phi3");
}

#[test]
fn phi3_splits_its_fused_weights_and_names_bad_rope_scaling() {
    let (dir, _) = fixture("phi3");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    // One product per fused weight, narrowed: 3 slices of qkv and 2 of gate_up per layer.
    let narrows = model.graph().nodes().filter(|n| matches!(n.op, graphc_ir::Op::Narrow { .. })).count();
    assert_eq!(narrows, 2 * 5);
    insta::assert_snapshot!("phi3_optimized_layer0", graphc_ir::text::print_filtered(model.graph(), |l| l == 0));
    let with_scaling = |tag: &str, scaling: Value| {
        let tmp = graphc_tests::temp_dir(tag);
        std::fs::copy(dir.join("model.safetensors"), tmp.join("model.safetensors")).unwrap();
        let mut config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        config["rope_scaling"] = scaling;
        std::fs::write(tmp.join("config.json"), config.to_string()).unwrap();
        Model::compile(&tmp, &CompileOptions::default(), None).err().expect("compiled").to_string()
    };
    // A Hub-style longrope config with one factor where 8 are needed.
    let e = with_scaling("phi3-short-factors", serde_json::json!({"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}));
    assert!(e.contains("`short_factor` has 1 entries; 8 numbers are needed"), "{e}");
    let e = with_scaling("phi3-yarn", serde_json::json!({"type": "yarn", "factor": 4.0}));
    assert!(e.contains("RoPE scaling `yarn`"), "{e}");
}

/// Phi-3's 128k LongRoPE on a tiny model whose original length is 4: every
/// prompt (5-13 tokens) and the greedy run use the long factors and the
/// attention factor sqrt(1 + ln 16 / ln 4). The controls — short factors
/// kept past the original length, no attention factor — are far off.
#[test]
fn phi3_longrope_matches_transformers() {
    check_family("phi3_longrope");
    let (dir, _) = fixture("phi3_longrope");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let fact = &model.plan().model.facts["rope_scaling"];
    assert!(fact.starts_with("longrope, long factors (max_seq 64 > original_max_position_embeddings 4)"), "{fact}");
    insta::assert_snapshot!("phi3_longrope_optimized_layer0", graphc_ir::text::print_filtered(model.graph(), |l| l == 0));
}

/// With `max_seq` at the original length, the short factors: transformers'
/// choice for a sequence that short (graphc picks the set once, by max_seq).
/// Phi-4-mini's shape: phi3 with 12 of each head's 16 features rotated
/// (`partial_rotary_factor` 0.75), LongRoPE over those 6 pairs, a tied
/// output; from its GGUF too (`phi3.rope.dimension_count`, in
/// `gguf_families.rs`). Controls: every feature rotated, no attention factor.
#[test]
fn phi4_mini_partial_rotary_matches_transformers() {
    check_family("phi4_mini");
    let (dir, _) = fixture("phi4_mini");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    assert_eq!(model.plan().model.facts["rotary_dim"], "12");
}

#[test]
fn phi3_longrope_short_factors_up_to_the_original_length() {
    let (dir, r) = fixture("phi3_longrope");
    let prompt = ids(&r["short_prompt"]);
    let want: Vec<Vec<f32>> = r["short_logits"].as_array().unwrap().iter().map(floats).collect();
    let short = Model::compile(&dir, &CompileOptions { max_seq: Some(4), ..Default::default() }, None).unwrap();
    assert!(short.plan().model.facts["rope_scaling"].starts_with("longrope, short factors"));
    let long = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    for k in kernels() {
        let got = logits_at_every_position(&short, k, &prompt);
        for (pos, (g, w)) in got.iter().zip(&want).enumerate() {
            let d = max_diff(g, w);
            assert!(d <= TOL, "{k:?}: short factors, position {pos}: max |Δlogit| {d}");
        }
        // The long factors on the same tokens are another answer: the
        // input separates the two sets.
        let other = logits_at_every_position(&long, k, &prompt);
        let gap = other.iter().zip(&want).map(|(a, b)| max_diff(a, b)).fold(0.0, f32::max);
        assert!(gap > 10.0 * TOL, "{k:?}: long vs short factors only {gap} apart");
    }
}

#[test]
fn gemma2_matches_transformers_past_its_window() {
    // The fixture's window is 4 tokens and its prompts 5 to 13: every
    // prompt reads past the window on the sliding layer.
    check_family("gemma2");
}

#[test]
fn gemma2_alternates_sliding_and_global_layers() {
    let (dir, _) = fixture("gemma2");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let windows: Vec<Option<usize>> = model
        .graph()
        .nodes()
        .filter_map(|n| match n.op {
            graphc_ir::Op::Attention { window, softcap, .. } => {
                assert_eq!(softcap, Some(5.0), "every attention soft-caps its scores");
                Some(window)
            }
            _ => None,
        })
        .collect();
    assert_eq!(windows, vec![Some(4), None], "layer 0 slides, layer 1 is global");
    assert_eq!(model.plan().model.facts["sliding_layers"], "0");
    insta::assert_snapshot!("gemma2_optimized", graphc_ir::text::print(model.graph()));
}

/// The sliding layer's K and V become rings of `window + step - 1` rows
/// (`window_cache`); the global layer's stay at capacity: half the caches.
/// A sequence of 29 tokens wraps the 7-row ring 4 times, and the logits at
/// every position are those of the full-length caches.
#[test]
fn gemma2_keeps_window_caches_only_on_its_sliding_layer() {
    let (dir, r) = fixture("gemma2");
    let on = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let kv = &on.plan().kv_cache;
    assert_eq!((kv.caches, kv.window_caches), (4, 2), "K and V of the sliding layer only: half, not all");
    assert_eq!(kv.window_bytes, 2 * 2 * 7 * 16 * 4, "2 caches of 2 kv heads x 7 rows x 16 floats");
    let fired = on.plan().passes.iter().find(|p| p.name == "window_cache").unwrap().rewrites;
    assert_eq!(fired, 2);
    let shape = |name: &str| {
        on.graph()
            .nodes()
            .find_map(|n| match &n.op {
                graphc_ir::Op::State { name: s, ty } if s == name => Some(ty.to_string()),
                _ => None,
            })
            .unwrap()
    };
    assert_eq!(shape("k.0"), "f32[batch, 2, 7, 16]", "window 4 + step 4 - 1 rows");
    assert_eq!(shape("v.1"), "f32[batch, 2, cap, 16]", "the global layer keeps its capacity");
    let session = on.session(&SessionOptions::default()).unwrap();
    assert_eq!(session.step_rows(), 4, "a forward appends at most cap - window + 1 rows to the ring");

    let off_opts = CompileOptions { disabled_passes: vec!["window_cache".into()], ..Default::default() };
    let off = Model::compile(&dir, &off_opts, None).unwrap();
    assert_eq!(off.plan().kv_cache.window_caches, 0);
    let mut sequence = ids(&r["prompts"][0]);
    sequence.extend(ids(&r["greedy"]));
    assert!(sequence.len() > 4 * 7, "the sequence wraps the ring several times");
    for k in kernels() {
        let a = logits_at_every_position(&on, k, &sequence);
        let b = logits_at_every_position(&off, k, &sequence);
        if k == Kernels::Reference {
            // The reference reads the same keys in the same order from the ring.
            let bits = |v: &Vec<Vec<f32>>| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "reference: logits differ with window_cache off");
        } else {
            // The fast kernel scores a wrapped window in two runs of rows:
            // the same sums, blocked differently.
            let d = a.iter().zip(&b).map(|(x, y)| max_diff(x, y)).fold(0.0, f32::max);
            assert!(d <= 1e-5, "{k:?}: window_cache on vs off differ by {d}");
        }
        // A whole prompt in one call runs in chunks of 4 on the ring.
        let mut s = on.session(&SessionOptions { kernels: Some(k), ..Default::default() }).unwrap();
        let last = s.prefill(&sequence).unwrap();
        assert!(max_diff(&last, a.last().unwrap()) <= TOL, "{k:?}: chunked prefill on the ring");
    }
}

#[test]
fn qwen3_moe_matches_transformers() {
    check_family("qwen3_moe");
}

/// Qwen2-MoE (Qwen1.5-MoE's shape): Qwen2's biased attention, routed
/// experts not renormalized, a sigmoid-gated shared expert; its GGUF gives
/// the same bits (`gguf_families.rs`). Controls: renormalized, top-1, no
/// q/k/v biases.
#[test]
fn qwen2_moe_matches_transformers() {
    check_family("qwen2_moe");
}

/// OLMo 2: norms after attention and the MLP only, Q and K normed over
/// the whole projection before the heads split; its GGUF gives the same
/// bits (`gguf_families.rs`). Controls: no q/k norm, q/k normed per head.
#[test]
fn olmo2_matches_transformers() {
    check_family("olmo2");
}

/// OLMo 3: OLMo 2's layers, three of four sliding (window shrunk to 5)
/// and the fourth global with YaRN (factor 8 over 8192), plain RoPE on the
/// sliding ones; from safetensors and from its GGUF as llama.cpp's
/// converter writes OLMo 3 (arch `olmo2`, `attention.sliding_window`,
/// `attention.sliding_window_pattern`, YaRN keys). Controls: the window
/// ignored, YaRN on no layer, YaRN on every layer.
#[test]
fn olmo3_slides_three_layers_of_four_with_yarn_on_the_global_one() {
    check_family("olmo3");
    let (dir, r) = fixture("olmo3");
    for path in [dir.clone(), dir.join("model.gguf")] {
        let model = Model::compile(&path, &CompileOptions::default(), None).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let facts = &model.plan().model.facts;
        assert_eq!(model.plan().family, "olmo3", "{}", path.display());
        assert_eq!((facts["sliding_layers"].as_str(), facts["sliding_window"].as_str()), ("0,1,2", "5"));
        assert!(facts["rope_scaling"].as_str().starts_with("Yarn { factor: 8.0"), "{facts:?}");
        assert_eq!(facts["rope_sliding"], "theta 500000.0, None");
        gguf_matches_reference(&model, &r, &path.display().to_string());
    }
    // OLMo 2 has no windows: its config's are refused, not read.
    let olmo2 = config_copy("olmo2", "window", |c| drop(c.insert("sliding_window".into(), serde_json::json!(5))));
    let e = Model::compile(&olmo2, &CompileOptions::default(), None).err().unwrap().to_string();
    assert!(e.contains("`sliding_window`") && e.contains("olmo2"), "{e}");
}

/// GLM-4: sandwich norms, biased q/k/v, GPT-J RoPE on half of each head,
/// a fused gate/up projection; its GGUF gives the same bits
/// (`gguf_families.rs`). Controls: the rotated half read as NeoX pairs, no
/// norm after attention, no norm after the MLP.
#[test]
fn glm4_matches_transformers() {
    check_family("glm4");
    let (dir, _) = fixture("glm4");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    assert_eq!(model.plan().model.facts["rotary_dim"], "8 (GPT-J pairs)");
}

/// ERNIE 4.5 (dense): Llama's layers with RoPE on adjacent pairs, tied
/// output; its GGUF gives the same bits (`gguf_families.rs`). Controls: the
/// pairs read as NeoX halves, GQA heads tiled. `use_bias` (which biases the
/// MLP too) is refused.
#[test]
fn ernie4_5_matches_transformers() {
    check_family("ernie4_5");
    let biased = config_copy("ernie4_5", "ernie-bias", |c| drop(c.insert("use_bias".into(), serde_json::json!(true))));
    let e = Model::compile(&biased, &CompileOptions::default(), None).err().unwrap().to_string();
    assert!(e.contains("`use_bias`") && e.contains("ernie4_5"), "{e}");
}

#[test]
fn qwen3_moe_routes_layer_0_and_keeps_layer_1_dense() {
    let (dir, _) = fixture("qwen3_moe");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    assert_eq!(model.plan().model.facts["moe_layers"], "0", "mlp_only_layers = [1]");
    let masks: Vec<(Option<u32>, usize)> = model
        .graph()
        .nodes()
        .filter_map(|n| match n.op {
            graphc_ir::Op::TopKMask { k, .. } => Some((n.layer, k)),
            _ => None,
        })
        .collect();
    assert_eq!(masks, vec![(Some(0), 2)], "one top-2 router, in layer 0");
    insta::assert_snapshot!("qwen3_moe_optimized_layer0", graphc_ir::text::print_filtered(model.graph(), |l| l == 0));
}

/// Qwen3-Next: 3 Gated DeltaNet layers then gated full attention, MoE with
/// a shared expert. The controls — no q/k L2 norm in the delta rule, no
/// state decay, no output gate on full attention — are far off.
#[test]
fn qwen3_next_matches_transformers() {
    check_family("qwen3_next");
}

/// Qwen3.5's text model (`qwen3_5_text`): Qwen3-Next's layers with its
/// separate `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`, dense
/// MLPs, interleaved M-RoPE over a quarter of each head (RoPE on text). The
/// controls — value heads reading key heads tiled (llama.cpp's GGUF order)
/// instead of grouped, b and a swapped, plain `w` norms — are far off.
#[test]
fn qwen3_5_matches_transformers() {
    check_family("qwen3_5");
    let (dir, _) = fixture("qwen3_5");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let facts = &model.plan().model.facts;
    assert_eq!((facts["experts"].as_str(), facts["rotary_dim"].as_str()), ("none (dense MLPs)", "8"));
    assert_eq!(facts["mrope"], "sections [2, 1, 1]: on text alone every position is the token's index, RoPE");
}

/// Qwen3.5's MoE text model (`qwen3_5_moe_text`): as Qwen3.5 with every
/// MLP 4 routed experts (2 a token, always renormalized) and a gated
/// shared expert.
#[test]
fn qwen3_5_moe_matches_transformers() {
    check_family("qwen3_5_moe");
    let (dir, _) = fixture("qwen3_5_moe");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    assert_eq!(model.plan().model.facts["experts"], "4, 2 per token, norm_topk_prob true, shared expert of 48");
}

/// The recurrent state is loop-carried state (a conv state and a delta-rule
/// state per linear layer, not KV caches), and every linear layer's host
/// read of `new_lengths` becomes one read per forward (`hoist_sync`: 3 → 1;
/// with the pass off, 3 stay).
#[test]
fn qwen3_next_layers_states_and_one_host_read() {
    let (dir, _) = fixture("qwen3_next");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let facts = &model.plan().model.facts;
    assert_eq!(facts["full_attention_layers"], "3");
    assert_eq!(facts["linear_attention_layers"], "0,1,2");
    let kv = &model.plan().kv_cache;
    assert_eq!((kv.caches, kv.recurrent_states), (8, 6), "K, V of layer 3; conv and ssm states of layers 0-2");
    assert_eq!(kv.recurrent_bytes, 3 * (3 * 128 + 4 * 16 * 16) * 4, "per row: 3 x (conv 3 x 128 + ssm 4 x 16 x 16) floats");
    let reads = |m: &Model| m.graph().nodes().filter(|n| matches!(n.op, graphc_ir::Op::ToHost { .. })).map(|n| n.layer).collect::<Vec<_>>();
    assert_eq!(reads(&model), vec![None], "one host read, before the layer loop");
    let fired = model.plan().passes.iter().find(|p| p.name == "hoist_sync").unwrap().rewrites;
    assert_eq!(fired, 3);
    let off = Model::compile(&dir, &CompileOptions { disabled_passes: vec!["hoist_sync".into()], ..Default::default() }, None).unwrap();
    assert_eq!(reads(&off), vec![Some(0), Some(1), Some(2)]);
    insta::assert_snapshot!("qwen3_next_optimized_layers_0_and_3", graphc_ir::text::print_filtered(model.graph(), |l| l == 0 || l == 3));
}

/// PhiMoE: the sparsemixer router (top-2 with a jitter band), biased
/// attention and head, LayerNorms. The controls — only the first expert, a
/// plain softmax top-2 router — are far off.
#[test]
fn phimoe_matches_transformers() {
    check_family("phimoe");
    let (dir, _) = fixture("phimoe");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let mixers = model.graph().nodes().filter(|n| matches!(n.op, graphc_ir::Op::SparseMixer { .. })).count();
    assert_eq!(mixers, 2, "one sparsemixer router per layer");
    insta::assert_snapshot!("phimoe_optimized_layer0", graphc_ir::text::print_filtered(model.graph(), |l| l == 0));
}

/// HF writes the sparsemixer's scale as `scores.abs().clamp(min=t)`, which
/// is `max(|s|, t)`. On router scores inside the band where `min(|s|, t)`
/// would mask expert 1 and `max` keeps it, graphc's op gives HF's own
/// weights (recorded by the fixture script), and the `min` reading gives
/// another answer.
#[test]
fn sparsemixer_clamp_min_is_max_inside_the_band() {
    let (_, r) = fixture("phimoe");
    let band = &r["sparsemixer_band"];
    let scores = floats(&band["scores"]);
    let eps = band["jitter_eps"].as_f64().unwrap() as f32;
    let want = floats(&band["weights"]);
    let op = graphc_ir::Op::SparseMixer { jitter_eps: eps };
    let x = graphc_backends::Tensor::f32(vec![1, scores.len()], scores.clone());
    let got = graphc_backends::cpu::reference::eval_op(&op, &[x]).unwrap();
    let got = got.as_f32().unwrap();
    assert!(max_diff(got, &want) <= 1e-6, "sparse_mixer {got:?} vs HF {want:?}");
    // The band: t1 (1 - 2 eps) <= s < t1 / (1 + 2 eps), here with t1 = 1.
    let (t1, s) = (scores[0], scores[1]);
    assert!(t1 * (1.0 - 2.0 * eps) <= s && s < t1 / (1.0 + 2.0 * eps), "the input is inside the band");
    // Reading clamp(min = t) as min(|s|, t) masks expert 1 out of the first softmax: weight 1, not ~0.505.
    let masked_by_min = (t1 - s) / s.abs().min(t1) > 2.0 * eps;
    let masked_by_max = (t1 - s) / s.abs().max(t1) > 2.0 * eps;
    assert!(masked_by_min && !masked_by_max);
    assert!((got[0] - 0.5).abs() < 0.01, "expert 0 shares the first softmax with expert 1: {}", got[0]);
}

/// Weight-only values are computed once per session, not per step
/// (DESIGN.md: "weight-only subgraphs are folded once, at load"): Gemma's
/// five `1 + w` norm weights (each an `add` of a weight and a `const`),
/// their constants and the embedding scale, with the same logits, bit for
/// bit, as a session that folds nothing.
#[test]
fn gemma_folds_its_one_plus_w_norm_weights_once() {
    let (dir, r) = fixture("gemma");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let adds_of_weights = model
        .graph()
        .node_ids()
        .filter(|&n| {
            matches!(model.graph().node(n).op, graphc_ir::Op::Binary(graphc_ir::BinaryOp::Add))
                && model
                    .graph()
                    .inputs(n)
                    .iter()
                    .all(|&i| matches!(model.graph().node(i).op, graphc_ir::Op::Weight { .. } | graphc_ir::Op::Const { .. }))
        })
        .count();
    assert_eq!(adds_of_weights, 5, "input and post-attention norms of 2 layers, and the final norm");
    let prompt = ids(&r["prompts"][0]);
    for k in kernels() {
        let on = model.session(&SessionOptions { kernels: Some(k), ..Default::default() }).unwrap();
        let off = model.session(&SessionOptions { kernels: Some(k), fold_weights: Some(false), ..Default::default() }).unwrap();
        assert_eq!(off.folded_nodes(), 0);
        // The 5 adds, their 5 constants, and the embedding scale.
        assert_eq!(on.folded_nodes(), 11, "{k:?}");
        drop((on, off));
        let a = logits_at_every_position(&model, k, &prompt);
        let mut s = model.session(&SessionOptions { kernels: Some(k), fold_weights: Some(false), ..Default::default() }).unwrap();
        let mut b = vec![s.prefill(&prompt[..1]).unwrap()];
        for &t in &prompt[1..] {
            b.push(s.decode(t).unwrap());
        }
        let bits = |v: &Vec<Vec<f32>>| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b), "{k:?}: folding changed the arithmetic");
    }
}

#[test]
fn qwen2_matches_transformers() {
    check_family("qwen2");
}

/// YaRN (factor 4 over 32768 positions, Qwen2.5's long-context setting):
/// the fixture's controls are the unscaled rope, YaRN without its attention
/// factor, and every pair slowed by the factor.
#[test]
fn qwen2_yarn_matches_transformers() {
    check_family("qwen2_yarn");
    let model = Model::compile(&graphc_tests::repo_root().join("tests/fixtures/families/qwen2_yarn"), &CompileOptions::default(), None).unwrap();
    assert!(model.plan().graph.contains("yarn_factor=4.0, original_context=32768, beta_fast=32.0, beta_slow=1.0"), "the plan's rope");
}

/// Phi-3-mini-4k's sliding window (2047 there, 5 in the fixture), from its
/// config and from its GGUF (`phi3.attention.sliding_window`); the controls
/// are full attention and a window of 6.
#[test]
fn phi3_window_matches_transformers_past_its_window() {
    check_family("phi3_window");
    let (dir, _) = fixture("phi3_window");
    for path in [dir.clone(), dir.join("model.gguf")] {
        let model = Model::compile(&path, &CompileOptions::default(), None).unwrap();
        assert!(model.plan().graph.contains("window=5"), "{}: the plan's attention window", path.display());
    }
}

/// YaRN on a Llama (factor 4, theta 10000), from config.json and from its
/// GGUF (llama.cpp's Q/K row order and `rope.scaling.*` keys), every
/// position of every prompt; the fixture's control: YaRN without its
/// attention factor.
#[test]
fn llama_yarn_matches_transformers_from_safetensors_and_gguf() {
    check_family("llama_yarn");
    let (dir, r) = fixture("llama_yarn");
    let gguf = Model::compile(&dir.join("model.gguf"), &CompileOptions::default(), None).unwrap();
    assert!(gguf.plan().graph.contains("yarn_factor=4.0, original_context=32768"), "the GGUF plan's rope");
    gguf_matches_reference(&gguf, &r, "llama_yarn GGUF");
}

/// YaRN on Qwen3-MoE (Qwen3-30B-A3B's 128K setting; control: without the
/// attention factor).
#[test]
fn qwen3_moe_yarn_matches_transformers() {
    check_family("qwen3_moe_yarn");
}

/// YaRN on Qwen3 (factor 4; the fixture's control: the unscaled rope).
#[test]
fn qwen3_yarn_matches_transformers() {
    check_family("qwen3_yarn");
}

/// YaRN's `mscale` / `mscale_all_dim` pair sets the attention factor to
/// their `yarn_get_mscale` ratio, as transformers does (checked against it
/// on the ministral3 fixture), and `mscale` alone leaves YaRN's default;
/// llama.cpp's `yarn_log_multiplier` is refused on a qwen2 GGUF, naming it
/// (only Ministral 3's `mistral3` reads it).
#[test]
fn qwen2_yarn_reads_the_mscale_pair_and_refuses_what_it_does_not_read() {
    let (dir, _) = fixture("qwen2_yarn");
    let tmp = graphc_tests::temp_dir("qwen2-yarn-mscale");
    std::fs::copy(dir.join("model.safetensors"), tmp.join("model.safetensors")).unwrap();
    let base: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let attention_factor = |pair: &[(&str, f64)]| {
        let mut config = base.clone();
        for (k, v) in pair {
            config["rope_parameters"][*k] = (*v).into();
        }
        std::fs::write(tmp.join("config.json"), config.to_string()).unwrap();
        let model = Model::compile(&tmp, &CompileOptions::default(), None).unwrap();
        let fact = model.plan().model.facts["rope_scaling"].clone();
        let at = fact.find("attention_factor: ").expect("a YaRN fact") + "attention_factor: ".len();
        fact[at..].split([',', ' ']).next().unwrap().parse::<f32>().unwrap()
    };
    let default = attention_factor(&[]);
    assert!((default - (0.1 * 4f32.ln() + 1.0)).abs() < 1e-6, "{default}");
    assert_eq!(attention_factor(&[("mscale", 0.707)]), default);
    assert_eq!(attention_factor(&[("mscale", 0.707), ("mscale_all_dim", 0.707)]), 1.0);
    // The GGUF with a YaRN key llama.cpp reads and graphc does not.
    let key = "qwen2.rope.scaling.yarn_log_multiplier";
    let path = graphc_tests::gguf_with_keys(&dir.join("model.gguf"), &tmp.join("model.gguf"), &[(key, graphc_tests::Meta::F32(0.1))]);
    let err = Model::compile(&path, &CompileOptions::default(), None).err().expect("refused").to_string();
    assert!(err.contains(key), "{err}");
}

/// Mistral's sliding window (shrunk to 5 tokens in the fixture, so the
/// 13-token prompt's later positions see only the window); the controls are
/// full attention and windows of 6 and 4.
/// From its GGUF too (`llama.attention.sliding_window`, llama.cpp's Q/K row
/// order), at every position of every prompt.
#[test]
fn mistral_matches_transformers_past_its_window() {
    check_family("mistral");
    let (dir, r) = fixture("mistral");
    for path in [dir.clone(), dir.join("model.gguf")] {
        let model = Model::compile(&path, &CompileOptions::default(), None).unwrap();
        assert!(model.plan().graph.contains("window=5"), "{}: the plan's attention window", path.display());
    }
    let gguf = Model::compile(&dir.join("model.gguf"), &CompileOptions::default(), None).unwrap();
    gguf_matches_reference(&gguf, &r, "mistral GGUF");
}

/// Mixtral (4 experts, 2 per token, renormalized) from safetensors, and
/// from both GGUF layouts llama.cpp writes for arch `llama`: the experts
/// stacked (`ffn_*_exps`, read a slice per expert) and one tensor per
/// expert (its layout before April 2024). Every position of every prompt;
/// the two GGUF layouts give the same bits. The controls (in the
/// reference): top-1, all four experts, the top two not renormalized, and
/// NeoX RoPE read as GPT-J.
#[test]
fn mixtral_matches_transformers_from_safetensors_and_both_gguf_layouts() {
    check_family("mixtral");
    let (dir, r) = fixture("mixtral");
    let mut layouts = Vec::new();
    for file in ["model.gguf", "model_split_experts.gguf"] {
        let gguf = Model::compile(&dir.join(file), &CompileOptions::default(), None).unwrap();
        assert_eq!(gguf.plan().family, "llama", "{file}");
        assert_eq!(gguf.plan().model.facts["experts"], "4, 2 per token, renormalized", "{file}");
        layouts.push(gguf_matches_reference(&gguf, &r, &format!("mixtral {file}")));
    }
    assert!(layouts[0] == layouts[1], "the stacked and per-expert GGUF layouts differ");
}

/// SmolLM3: llama with no rotation on every fourth layer (`no_rope_layers`;
/// the fixture's layer 3 of 4), tied output. From its GGUF too (arch
/// `smollm3`, llama.cpp's Q/K order, the NoPE layers hard-coded as
/// llama.cpp has them). Controls: every layer rotated, the NoPE layer
/// counted from 0.
#[test]
fn smollm3_skips_rope_on_its_nope_layers_from_safetensors_and_gguf() {
    check_family("smollm3");
    let (dir, r) = fixture("smollm3");
    let gguf = Model::compile(&dir.join("model.gguf"), &CompileOptions::default(), None).unwrap();
    assert_eq!(gguf.plan().family, "smollm3");
    for model in [&gguf, &Model::compile(&dir, &CompileOptions::default(), None).unwrap()] {
        assert_eq!(model.plan().model.facts["no_rope_layers"], "3");
        let ropes = model.graph().nodes().filter(|n| matches!(n.op, graphc_ir::Op::Rope { .. } | graphc_ir::Op::NormRope { .. })).count();
        assert_eq!(ropes, 2 * 3, "q and k rotated on three layers of four");
    }
    gguf_matches_reference(&gguf, &r, "smollm3 GGUF");
}

/// Granite 3: llama with its four scales (embeddings, residual branches,
/// attention scores, logits); from its GGUF too (arch `granite`,
/// `granite.embedding_scale`, ...). Controls: each scale left out.
#[test]
fn granite_matches_transformers_from_safetensors_and_gguf() {
    check_family("granite");
    let (dir, r) = fixture("granite");
    let gguf = Model::compile(&dir.join("model.gguf"), &CompileOptions::default(), None).unwrap();
    assert_eq!(gguf.plan().family, "granite");
    assert_eq!(gguf.plan().model.facts["logits_scaling"], "3.0");
    gguf_matches_reference(&gguf, &r, "granite GGUF");
}

/// Gemma 3's text model from safetensors (`gemma3_text`, transformers 5's
/// per-layer-kind `rope_parameters`): five sliding layers (window shrunk to
/// 4) then a global one, local RoPE base 1e4, global 1e6 with 4B+'s linear
/// scaling by 8. Controls: the global base on local layers, the scaling on
/// every layer, no window, no scaling.
/// A multimodal checkpoint (`tests/fixtures/{name}/`, written by
/// `tools/make_family_fixtures.py {name}`: the `text_family` fixture's
/// weights as its language model under the Hub's names, beside a vision
/// tower and projector; transformers' text logits are the text model's to
/// the bit) read as its language model: every position of every prompt
/// within the bound of the text fixture's reference on both executors, the
/// text fixture's own logit bits and greedy tokens; the `vision` tensors
/// left out and said so in the plan, none in its manifest. Refused by
/// name: the config without `text_config` (where it has one), and a tensor
/// of neither part.
fn check_multimodal(name: &str, text_family: &str, vision: usize) {
    let (text_dir, r) = fixture(text_family);
    let dir = graphc_tests::repo_root().join("tests/fixtures").join(name);
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap_or_else(|e| panic!("{name}: {e}"));
    let text = Model::compile(&text_dir, &CompileOptions::default(), None).unwrap();
    assert_eq!(model.plan().family, text.plan().family);
    let facts = &model.plan().model.facts;
    assert!(facts["vision_tower"].as_str().starts_with(&format!("{vision} tensors not read")), "{name}: {facts:?}");
    assert!(model.plan().manifest.iter().all(|w| !w.name.contains("vision") && !w.name.contains("projector")));
    let names = |m: &Model| m.plan().manifest.iter().map(|w| w.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&model), names(&text), "{name}: the text model's weights");
    for (p, prompt) in r["prompts"].as_array().unwrap().iter().enumerate() {
        for k in kernels() {
            let got = logits_at_every_position(&model, k, &ids(prompt));
            for (pos, (g, w)) in got.iter().zip(r["logits"][p].as_array().unwrap()).enumerate() {
                let d = max_diff(g, &floats(w));
                assert!(d <= TOL, "{name} {k:?} prompt {p} position {pos}: max |Δlogit| {d}");
            }
            let same = got == logits_at_every_position(&text, k, &ids(prompt));
            assert!(same, "{name} {k:?} prompt {p}: logits differ from the text fixture's");
        }
    }
    let mut s = model.session(&SessionOptions { threads: Some(2), ..Default::default() }).unwrap();
    let mut logits = s.prefill(&ids(&r["prompts"][0])).unwrap();
    let mut tokens = vec![];
    for _ in 0..16 {
        let t = graphc::sampling::argmax(&logits);
        tokens.push(t);
        logits = s.decode(t).unwrap();
    }
    assert_eq!(tokens, ids(&r["greedy"]), "{name}: greedy tokens");

    let copy = |tag: &str, edit: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let tmp = graphc_tests::temp_dir(&format!("{name}-{tag}"));
        std::fs::copy(dir.join("model.safetensors"), tmp.join("model.safetensors")).unwrap();
        let mut config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        edit(config.as_object_mut().unwrap());
        std::fs::write(tmp.join("config.json"), config.to_string()).unwrap();
        tmp
    };
    let nested = serde_json::from_str::<Value>(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap().get("text_config").is_some();
    if nested {
        let e = Model::compile(&copy("no-text", &|c| drop(c.remove("text_config"))), &CompileOptions::default(), None).err().unwrap();
        // Qwen2/2.5-VL may keep the text model at the top level: there, its missing M-RoPE is named.
        assert!(e.to_string().contains("without a `text_config`") || e.to_string().contains("mrope_section"), "{name}: {e}");
    }
    // The control: the unedited copy compiles.
    assert!(Model::compile(&copy("control", &|_| {}), &CompileOptions::default(), None).is_ok());
    // A tensor of neither part is kept under its own name, and refused as unread.
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let extra = [0u8; 16];
    let mut views: Vec<(String, safetensors::tensor::TensorView)> = file.tensors();
    views.push(("language_model.lm_scale".into(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4], &extra).unwrap()));
    let tmp = copy("extra", &|_| {});
    safetensors::serialize_to_file(views, None, &tmp.join("model.safetensors")).unwrap();
    let e = Model::compile(&tmp, &CompileOptions::default(), None).err().unwrap().to_string();
    assert!(e.contains("tensor `language_model.lm_scale` is not read by the"), "{name}: {e}");
}

/// Gemma 3 4B+'s checkpoint shape (`model_type: gemma3`,
/// Gemma3ForConditionalGeneration: `language_model.model.*`, a SigLIP
/// `vision_tower.vision_model.*`, the output tied).
#[test]
fn gemma3_multimodal_checkpoint_runs_its_language_model() {
    check_multimodal("gemma3_multimodal", "gemma3_text", 23);
}

/// Mistral Small 3.1 / 3.2's checkpoint shape (`model_type: mistral3`,
/// Mistral3ForConditionalGeneration: `language_model.model.*`,
/// `language_model.lm_head.weight`, a Pixtral `vision_tower.*`), its
/// language model the mistral fixture (a sliding window).
#[test]
fn mistral3_multimodal_checkpoint_runs_its_language_model() {
    check_multimodal("mistral3_multimodal", "mistral", 15);
}

/// A Qwen-VL checkpoint (`tools/make_family_fixtures.py {name}`) read as
/// its language model, as `check_multimodal` checks it, its M-RoPE read as
/// RoPE (on text alone every section's position is the token's index) and
/// recorded in the plan. The control, from transformers: the same model
/// with a text token's height and width positions 0 (`controls.json`), ≥
/// 100× the bound away. Sections that do not cover the head's pairs, or
/// none (but for Qwen3.5, whose transformers has a default), are refused
/// naming `mrope_section`. Its GGUF where it has one
/// (`make_gguf_fixtures.py`: llama.cpp's `qwen2vl` / `qwen3vl` text model)
/// gives the same logit bits, and a fourth, non-zero section or sections
/// that do not cover the head are refused naming the key.
fn check_qwen_vl(name: &str, text_family: &str, vision: usize) {
    check_multimodal(name, text_family, vision);
    let (text_dir, r) = fixture(text_family);
    let dir = graphc_tests::repo_root().join("tests/fixtures").join(name);
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    assert!(model.plan().model.facts["mrope"].as_str().starts_with("sections ["), "{name}: {:?}", model.plan().model.facts);
    let controls: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("controls.json")).unwrap()).unwrap();
    assert_eq!(controls["prompt"], r["prompts"][0]);
    let reference: Vec<Vec<f32>> = r["logits"][0].as_array().unwrap().iter().map(floats).collect();
    let control: Vec<Vec<f32>> = controls["hw_positions_at_zero"].as_array().unwrap().iter().map(floats).collect();
    let far = reference.iter().zip(&control).map(|(a, b)| max_diff(a, b)).fold(0.0, f32::max);
    assert!(far >= 100.0 * TOL, "{name}: the control is only {far} away");

    let config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let rope_path: Vec<&str> = match config.get("text_config") {
        Some(t) if t.get("rope_parameters").is_some() => vec!["text_config", "rope_parameters"],
        Some(_) => vec!["text_config", "rope_scaling"],
        None => vec!["rope_scaling"],
    };
    // Qwen3.5's transformers defaults its sections ([11, 11, 10]); the others have none to fall back on.
    let defaults = name.starts_with("qwen3_5");
    for (tag, sections) in [("short", Some(serde_json::json!([2, 3, 2]))), ("none", None)] {
        let tmp = graphc_tests::temp_dir(&format!("{name}-mrope-{tag}"));
        std::fs::copy(dir.join("model.safetensors"), tmp.join("model.safetensors")).unwrap();
        let mut c = config.clone();
        let rope = rope_path.iter().fold(&mut c, |v, k| &mut v[*k]).as_object_mut().unwrap();
        match &sections {
            Some(s) => drop(rope.insert("mrope_section".into(), s.clone())),
            None => drop(rope.remove("mrope_section")),
        }
        std::fs::write(tmp.join("config.json"), c.to_string()).unwrap();
        match Model::compile(&tmp, &CompileOptions::default(), None) {
            Ok(m) if defaults && sections.is_none() => assert_eq!(
                m.plan().model.facts["mrope"],
                "sections [11, 11, 10] (transformers' default): on text alone every position is the token's index, RoPE"
            ),
            Ok(_) => panic!("{name} {tag}: compiled"),
            Err(e) => assert!(!(defaults && sections.is_none()) && e.to_string().contains("mrope_section"), "{name} {tag}: {e}"),
        }
    }

    let gguf = dir.join("model.gguf");
    if !gguf.exists() {
        return;
    }
    let text_gguf = Model::compile(&text_dir.join("model.gguf"), &CompileOptions::default(), None).unwrap();
    let vl_gguf = Model::compile(&gguf, &CompileOptions::default(), None).unwrap_or_else(|e| panic!("{name} GGUF: {e}"));
    assert!(vl_gguf.plan().model.facts["mrope"].as_str().starts_with("sections ["), "{name} GGUF");
    let bits = gguf_matches_reference(&vl_gguf, &r, &format!("{name} GGUF"));
    assert_eq!(bits, gguf_matches_reference(&text_gguf, &r, &format!("{text_family} GGUF")), "{name}: the text GGUF's bits");
    let arch = graphc_frontends::gguf::GgufFile::open(&gguf).unwrap().str("general.architecture").unwrap().to_string();
    let key = format!("{arch}.rope.dimension_sections");
    for (tag, sections) in [("fourth", vec![2, 3, 2, 1]), ("short", vec![2, 3, 2, 0]), ("control", vec![3, 2, 3, 0])] {
        let tmp = graphc_tests::temp_dir(&format!("{name}-gguf-{tag}"));
        let path = graphc_tests::gguf_with_keys(&gguf, &tmp.join("model.gguf"), &[(&key, graphc_tests::Meta::I32Array(sections))]);
        match Model::compile(&path, &CompileOptions::default(), None) {
            Ok(_) => assert_eq!(tag, "control", "{name}: {tag} sections compiled"),
            Err(e) => assert!(tag != "control" && e.to_string().contains(&key), "{name} {tag}: {e}"),
        }
    }
}

/// Qwen2-VL as transformers 5 saves it (`text_config` of `qwen2_vl_text`,
/// `model.language_model.*`, `model.visual.*`): the qwen2 fixture.
#[test]
fn qwen2_vl_checkpoint_runs_its_language_model() {
    check_qwen_vl("qwen2_vl_multimodal", "qwen2", 19);
}

/// Qwen2.5-VL as the Hub has it (the text model's keys at the top level,
/// `rope_scaling: {type: mrope}`, `model.*`, `visual.*`), and its GGUF
/// text model (arch `qwen2vl`): the qwen2 fixture.
#[test]
fn qwen2_5_vl_checkpoint_runs_its_language_model() {
    check_qwen_vl("qwen2_5_vl_multimodal", "qwen2", 18);
}

/// Qwen3-VL as the Hub has it (`text_config` of `qwen3_vl_text` with
/// interleaved M-RoPE, a DeepStack merger in `model.visual.*`), and its
/// GGUF text model (arch `qwen3vl`, `n_deepstack_layers`): the qwen3 fixture.
#[test]
fn qwen3_vl_checkpoint_runs_its_language_model() {
    check_qwen_vl("qwen3_vl_multimodal", "qwen3", 27);
}

/// Qwen3.5 as the Hub has it (Qwen3_5ForConditionalGeneration: `text_config`
/// of `qwen3_5_text`, `model.language_model.*`, `model.visual.*`, and a
/// multi-token-prediction head `mtp.*`): the qwen3_5 fixture; the 7 MTP
/// tensors left out and said so, as transformers ignores them.
#[test]
fn qwen3_5_checkpoint_runs_its_language_model() {
    check_qwen_vl("qwen3_5_multimodal", "qwen3_5", 21);
    let dir = graphc_tests::repo_root().join("tests/fixtures/qwen3_5_multimodal");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    assert!(model.plan().model.facts["mtp"].as_str().starts_with("7 tensors not read"), "{:?}", model.plan().model.facts);
}

#[test]
fn gemma3_text_matches_transformers() {
    check_family("gemma3_text");
    let (dir, r) = fixture("gemma3_text");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let facts = &model.plan().model.facts;
    assert_eq!((facts["global_layers"].as_str(), facts["sliding_window"].as_str()), ("5", "4"));
    assert_eq!(facts["rope_global"], "theta 1000000.0, Linear { factor: 8.0 }");
    // A Hub config from before `layer_types` (Gemma 3 1B's, transformers
    // 4.50) says `sliding_window_pattern` instead; absent, it is HF's 6.
    // Gemma 2's even-odd alternation would be a silent wrong answer.
    let bits =
        |m: &Model| logits_at_every_position(m, Kernels::Reference, &ids(&r["prompts"][0])).concat().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let want = bits(&model);
    for (tag, pattern) in [("pattern6", Some(6)), ("no-pattern", None)] {
        let old = config_copy("gemma3_text", tag, |c| {
            c.remove("layer_types");
            if let Some(p) = pattern {
                c.insert("sliding_window_pattern".into(), serde_json::json!(p));
            }
        });
        let old = Model::compile(&old, &CompileOptions::default(), None).unwrap();
        assert_eq!(old.plan().model.facts["global_layers"], "5", "{tag}");
        assert!(bits(&old) == want, "{tag}: logits differ from layer_types'");
    }
    let two = Model::compile(
        &config_copy("gemma3_text", "pattern2", |c| {
            c.remove("layer_types");
            c.insert("sliding_window_pattern".into(), serde_json::json!(2));
        }),
        &CompileOptions::default(),
        None,
    )
    .unwrap();
    assert_eq!(two.plan().model.facts["global_layers"], "1,3,5");
}

/// GraniteMoE (Granite 3's MoE), from its GGUF only (arch `granitemoe`:
/// Granite's scales, Mixtral's experts; the fixture under
/// `tests/fixtures/gguf_only/`): every position of every prompt, the 16
/// greedy tokens, on both CPU backends. transformers takes the softmax of
/// the top-2 router logits, graphc (as llama.cpp) the top 2 of the softmax
/// renormalized: the same weights, within the bound. Control: top-1.
#[test]
fn granitemoe_gguf_matches_transformers() {
    let dir = graphc_tests::repo_root().join("tests/fixtures/gguf_only/granitemoe");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    let want: Vec<Vec<f32>> = r["logits"][0].as_array().unwrap().iter().map(floats).collect();
    for (name, control) in r["controls"].as_object().unwrap() {
        let control: Vec<Vec<f32>> = control.as_array().unwrap().iter().map(floats).collect();
        let gap = want.iter().zip(&control).map(|(a, b)| max_diff(a, b)).fold(0.0, f32::max);
        assert!(gap > 10.0 * TOL, "granitemoe: control `{name}` is only {gap} away");
    }
    let model = Model::compile(&dir.join("model.gguf"), &CompileOptions::default(), None).unwrap();
    assert_eq!(model.plan().family, "granitemoe");
    assert_eq!(model.plan().model.facts["experts"], "4, 2 per token, renormalized");
    gguf_matches_reference(&model, &r, "granitemoe GGUF");
    for k in kernels() {
        let mut s = model.session(&SessionOptions { threads: Some(2), kernels: Some(k), ..Default::default() }).unwrap();
        let mut logits = s.prefill(&ids(&r["prompts"][0])).unwrap();
        let mut tokens = Vec::new();
        for _ in 0..16 {
            let t = graphc::sampling::argmax(&logits);
            tokens.push(t);
            logits = s.decode(t).unwrap();
        }
        assert_eq!(tokens, ids(&r["greedy"]), "granitemoe {k:?}: greedy tokens");
    }
}

#[test]
fn qwen2_tied_matches_transformers() {
    check_family("qwen2_tied");
}

#[test]
fn qwen2_reads_qkv_biases_but_no_output_bias() {
    let model = Model::compile(&graphc_tests::repo_root().join("tests/fixtures/families/qwen2"), &CompileOptions::default(), None).unwrap();
    let weights: Vec<&str> = model.plan().manifest.iter().map(|w| w.name.as_str()).collect();
    for b in ["q_proj", "k_proj", "v_proj"] {
        assert!(weights.contains(&format!("model.layers.0.self_attn.{b}.bias").as_str()), "{b} bias not read");
    }
    assert!(!weights.iter().any(|w| w.contains("o_proj.bias")));
    assert_eq!(model.plan().model.facts["tied_output"], "false");
    let tied = Model::compile(&graphc_tests::repo_root().join("tests/fixtures/families/qwen2_tied"), &CompileOptions::default(), None).unwrap();
    assert_eq!(tied.plan().model.facts["tied_output"], "true");
}

#[test]
fn llama3_matches_transformers() {
    check_family("llama3");
}

/// The logits at each of `positions` of `prompt`, prefilled up to each in
/// turn (chunked prefills appending to one cache).
pub fn logits_at(model: &Model, k: Kernels, prompt: &[u32], positions: &[usize]) -> Vec<Vec<f32>> {
    let mut s = model.session(&SessionOptions { threads: Some(2), kernels: Some(k), ..Default::default() }).unwrap();
    let mut start = 0;
    let mut out = Vec::new();
    for &p in positions {
        out.push(s.forward(&prompt[start..=p]).unwrap());
        start = p + 1;
    }
    out
}

/// Llama 3's RoPE scaling (`rope_type: llama3`, Llama 3.2's values) against
/// transformers on a 1200-token prompt, from safetensors (HF's formula)
/// and from the GGUF (the converter's `rope_freqs` factors, its Q/K
/// permutation): past position 1024 the scaled frequencies move the logits
/// by ~1, and the same model without scaling (the control) is ≥ 10× the
/// bound away there.
#[test]
fn llama3_rope_scaling_matches_transformers_past_1024() {
    let (dir, r) = fixture("llama3");
    let prompt = ids(&r["long_prompt"]);
    let positions: Vec<usize> = ids(&r["long_positions"]).into_iter().map(|p| p as usize).collect();
    let want: Vec<Vec<f32>> = r["long_logits"].as_array().unwrap().iter().map(floats).collect();
    let control: Vec<Vec<f32>> = r["long_controls"]["no_rope_scaling"].as_array().unwrap().iter().map(floats).collect();
    for ((p, w), c) in positions.iter().zip(&want).zip(&control) {
        if *p >= 1024 {
            let gap = max_diff(w, c);
            assert!(gap > 10.0 * TOL, "position {p}: the unscaled control is only {gap} away");
        }
    }
    let opts = CompileOptions { max_seq: Some(1280), ..Default::default() };
    for path in [dir.clone(), dir.join("model.gguf")] {
        let model = Model::compile(&path, &opts, None).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(model.plan().model.facts.contains_key("rope_scaling"), "{}: no rope scaling recorded", path.display());
        for k in kernels() {
            let got = logits_at(&model, k, &prompt, &positions);
            for ((p, g), w) in positions.iter().zip(&got).zip(&want) {
                let d = max_diff(g, w);
                assert!(d <= TOL, "{} {k:?}: position {p}: max |Δlogit| {d}", path.display());
            }
            let mut s = model.session(&SessionOptions { threads: Some(2), kernels: Some(k), ..Default::default() }).unwrap();
            let mut logits = s.prefill(&prompt).unwrap();
            let mut tokens = Vec::new();
            for _ in 0..ids(&r["long_greedy"]).len() {
                let t = graphc::sampling::argmax(&logits);
                tokens.push(t);
                logits = s.decode(t).unwrap();
            }
            assert_eq!(tokens, ids(&r["long_greedy"]), "{} {k:?}: greedy tokens after the long prompt", path.display());
            println!("{} {k:?}: long prompt within {TOL}", path.display());
        }
    }
}

/// gpt-oss, from the GGUF llama.cpp's converter writes (its experts in
/// MXFP4, exactly the fixture's values): attention sinks, alternating
/// sliding and full layers, Q/K/V/O biases, untruncated YaRN, a biased
/// router softmaxed over its top 2, clamped "swiglu" experts with biases.
/// The controls — no sinks, no window or the window on the other layers,
/// gate/up read as halves instead of interleaved, no `+ 1` on up, no clamp,
/// the router's softmax before its top-k unrenormalized, YaRN's range
/// truncated (llama.cpp's arithmetic), no YaRN — are each far outside the bound.
#[test]
fn gpt_oss_gguf_matches_transformers() {
    check_family_file("gpt_oss", Some("model.gguf"));
    let (dir, _) = fixture("gpt_oss");
    let model = Model::compile(&dir.join("model.gguf"), &CompileOptions::default(), None).unwrap();
    let facts = &model.plan().model.facts;
    println!("{facts:?}");
    assert_eq!(facts["sliding_window"], "5 on layers 0");
    assert_eq!(facts["experts"], "4, 2 per token, swiglu limit 7.0, alpha 1.702");
    // Each layer's attention carries its sinks; only layer 0's a window.
    let attentions: Vec<(Option<u32>, Option<usize>, bool)> = model
        .graph()
        .nodes()
        .filter_map(|n| match n.op {
            graphc_ir::Op::Attention { window, sinks, .. } => Some((n.layer, window, sinks)),
            _ => None,
        })
        .collect();
    assert_eq!(attentions, vec![(Some(0), Some(5), true), (Some(1), None, true)]);
}

/// gpt-oss's own safetensors layout (experts fused, input-major,
/// interleaved) is refused naming the tensor, never misread.
#[test]
fn gpt_oss_safetensors_layout_is_refused_by_name() {
    let (dir, _) = fixture("gpt_oss");
    let err = Model::compile(&dir, &CompileOptions::default(), None).err().expect("refused").to_string();
    assert!(err.contains("mlp.experts.gate_up_proj") && err.contains("GGUF"), "{err}");
}

/// Gemma 4 (dense): sliding layers of one head size and global ones of
/// another with values that are their keys, unscaled V norms, proportional
/// RoPE on the global layers, the last two layers reading earlier layers'
/// caches with double-wide MLPs, per-layer inputs, layer scalars and a
/// final soft-cap, all in one fixture. Controls: V not normed, every global
/// pair turning, the turning pairs' exponents over their own width, no
/// layer scalar, no per-layer inputs, no soft-cap, no window.
#[test]
fn gemma4_matches_transformers() {
    check_family("gemma4");
    let (dir, _) = fixture("gemma4");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let facts = &model.plan().model.facts;
    assert_eq!(facts["kv_shared_layers"], "4<-3,5<-2");
    assert_eq!(facts["mlp_sizes"], "96,96,96,96,192,192");
    assert!(facts["rope_global"].contains("Proportional { rotated_pairs: 4 }"), "{facts:?}");
    // Only the layers that compute keys keep caches: the shared ones add none.
    assert_eq!(model.plan().kv_cache.caches, 8, "{:?}", model.plan().kv_cache);
    // MoE layers need their shape (`gemma4_moe_matches_transformers`).
    let moe = config_copy("gemma4", "gemma4-moe", |c| drop(c.insert("enable_moe_block".into(), serde_json::json!(true))));
    let e = Model::compile(&moe, &CompileOptions::default(), None).err().unwrap().to_string();
    assert!(e.contains("`num_experts`"), "{e}");
    // What no Gemma 4 sets and graphc does not lower is refused by name.
    let refused = |tag: &str, key: &str, value: Value, named: &str| {
        let p = config_copy("gemma4", tag, |c| match key.split_once('.') {
            Some((outer, inner)) => drop(c[outer].as_object_mut().unwrap().insert(inner.into(), value.clone())),
            None => drop(c.insert(key.into(), value.clone())),
        });
        let e = Model::compile(&p, &CompileOptions::default(), None).err().unwrap().to_string();
        assert!(e.contains(named), "{tag}: {e}");
    };
    refused("gemma4-bias", "attention_bias", serde_json::json!(true), "`attention_bias`");
    refused("gemma4-bidi", "use_bidirectional_attention", serde_json::json!("all"), "`use_bidirectional_attention`");
    let yarn = serde_json::json!({"rope_type": "yarn", "rope_theta": 1e6});
    refused("gemma4-yarn", "rope_parameters.full_attention", yarn, "`rope_parameters.full_attention` (rope_type \"yarn\"");
    let scaled = serde_json::json!({"rope_type": "proportional", "partial_rotary_factor": 0.25, "factor": 8.0, "rope_theta": 1e6});
    refused("gemma4-factor", "rope_parameters.full_attention", scaled, "`rope_parameters.full_attention.factor`");
}

/// Gemma 4's checkpoint shape (`model_type: gemma4`,
/// Gemma4ForConditionalGeneration: `model.language_model.*`, vision and
/// audio towers and their embedders, the output tied), its language model
/// the gemma4 fixture.
#[test]
fn gemma4_multimodal_checkpoint_runs_its_language_model() {
    check_multimodal("gemma4_multimodal", "gemma4", 86);
}

/// Gemma 4's MoE (26B-A4B's shape): a dense MLP beside routed GeGLU
/// experts on every layer, the router on the residual stream with its own
/// scales, the experts as transformers stores them (3D `gate_up_proj` and
/// `down_proj`, read a slice an expert). Controls: no per-expert scale, no
/// router scale, no dense MLP. On the CPU the
/// experts run sparse (`moe_dispatch`, asserted).
#[test]
fn gemma4_moe_matches_transformers() {
    check_family("gemma4_moe");
    let (dir, _) = fixture("gemma4_moe");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let dispatched = model.plan().passes.iter().find(|p| p.name == "moe_dispatch").map_or(0, |p| p.rewrites);
    assert_eq!(dispatched, 6, "{:?}", model.plan().passes);
}

/// Ministral 3: Mistral's layers with YaRN whose attention factor is the
/// `mscale` / `mscale_all_dim` ratio (1 here, not YaRN's default 1.28), and
/// Llama 4's attention temperature, 1 before the pretraining length (8 in
/// the fixture) and not computed by graphc past it: the plan's context is
/// capped there, every position before it matches transformers, and one
/// more token is refused; so is its GGUF and its multimodal checkpoint.
/// Controls: YaRN's default attention factor, no YaRN, and no temperature
/// (equal before position 8, 0.17 away after: why the cap).
#[test]
fn ministral3_matches_transformers_up_to_its_pretraining_length() {
    let (dir, r) = fixture("ministral3");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    assert_eq!(model.plan().family, "ministral3");
    assert_eq!(model.plan().model.context_length, 8);
    assert!(model.plan().model.facts["attention_temperature"].contains("capped at 8"), "{:?}", model.plan().model.facts);
    let want: Vec<Vec<f32>> = r["logits"][0].as_array().unwrap().iter().map(floats).collect();
    for (name, control) in r["controls"].as_object().unwrap() {
        let control: Vec<Vec<f32>> = control.as_array().unwrap().iter().map(floats).collect();
        let gap = want.iter().zip(&control).map(|(a, b)| max_diff(a, b)).fold(0.0, f32::max);
        assert!(gap > 10.0 * TOL, "ministral3: control `{name}` is only {gap} from the reference");
    }
    for k in kernels() {
        for (p, prompt) in r["prompts"].as_array().unwrap().iter().enumerate() {
            let prompt = ids(prompt);
            let got = logits_at_every_position(&model, k, &prompt[..prompt.len().min(8)]);
            for (pos, g) in got.iter().enumerate() {
                let d = max_diff(g, &floats(&r["logits"][p][pos]));
                assert!(d <= TOL, "ministral3 {k:?} prompt {p} position {pos}: max |Δlogit| {d}");
            }
        }
    }
    // Ministral 3's multimodal checkpoint (`mistral3` with a `ministral3`
    // text model, transformers 5's names): the same model, bit for bit.
    let mm = Model::compile(&graphc_tests::repo_root().join("tests/fixtures/ministral3_multimodal"), &CompileOptions::default(), None).unwrap();
    assert_eq!(mm.plan().family, "ministral3");
    assert!(mm.plan().model.facts["vision_tower"].starts_with("15 tensors not read"), "{:?}", mm.plan().model.facts);
    let prompt = ids(&r["prompts"][0]);
    let k = Kernels::parse("fast").unwrap();
    assert_eq!(logits_at_every_position(&mm, k, &prompt[..8]), logits_at_every_position(&model, k, &prompt[..8]));
    // Its GGUF (arch `mistral3`: llama's permuted rows, the YaRN log
    // multiplier and `attention.temperature_scale`): capped alike, within the bound.
    let gguf = Model::compile(&dir.join("model.gguf"), &CompileOptions::default(), None).unwrap();
    assert_eq!((gguf.plan().family.as_str(), gguf.plan().model.context_length), ("mistral3", 8));
    for (p, prompt) in r["prompts"].as_array().unwrap().iter().enumerate() {
        let prompt = ids(prompt);
        for (pos, g) in logits_at_every_position(&gguf, k, &prompt[..prompt.len().min(8)]).iter().enumerate() {
            let d = max_diff(g, &floats(&r["logits"][p][pos]));
            assert!(d <= TOL, "ministral3 GGUF prompt {p} position {pos}: max |Δlogit| {d}");
        }
    }
    // A ninth position is refused, not computed without its temperature.
    let mut s = model.session(&SessionOptions { threads: Some(2), ..Default::default() }).unwrap();
    s.prefill(&prompt[..8]).unwrap();
    assert!(s.decode(prompt[8]).is_err());
}

/// LFM2: short-conv layers (`in_proj` to B, C, x; a 3-tap causal conv of
/// `B * x` carried across steps; gated by C) beside GQA attention layers
/// with per-head q/k norms, SwiGLU of HF's adjusted size, `embedding_norm`
/// last, tied. Controls: the conv not gated by C, no q/k norms, no final norm.
#[test]
fn lfm2_matches_transformers() {
    check_family("lfm2");
    let (dir, _) = fixture("lfm2");
    let model = Model::compile(&dir, &CompileOptions::default(), None).unwrap();
    let facts = &model.plan().model.facts;
    assert_eq!((facts["attention_layers"].as_str(), facts["conv_layers"].as_str()), ("1", "0,2,3"));
    // 128 = 32 * ceil(2/3 * 192 / 32): the adjusted size, not the configured one.
    assert!(facts["mlp_size"].starts_with("128 "), "{facts:?}");
    // The Hub's spellings (LiquidAI/LFM2-1.2B's config.json): the same model.
    let hub = config_copy("lfm2", "lfm2-hub", |c| {
        let ff = c.remove("intermediate_size").unwrap();
        c.insert("block_ff_dim".into(), ff);
        c.remove("tie_word_embeddings");
        c.insert("tie_embedding".into(), serde_json::json!(true));
        c.remove("layer_types");
        c.insert("full_attn_idxs".into(), serde_json::json!([1]));
    });
    let hub = Model::compile(&hub, &CompileOptions::default(), None).unwrap();
    let k = Kernels::parse("fast").unwrap();
    let prompt = [17, 201, 3, 88, 140];
    assert_eq!(logits_at_every_position(&hub, k, &prompt), logits_at_every_position(&model, k, &prompt));
    // Conv biases (no released LFM2 has them) are refused by name.
    let biased = config_copy("lfm2", "lfm2-conv-bias", |c| drop(c.insert("conv_bias".into(), serde_json::json!(true))));
    let e = Model::compile(&biased, &CompileOptions::default(), None).err().unwrap().to_string();
    assert!(e.contains("`conv_bias`"), "{e}");
}
