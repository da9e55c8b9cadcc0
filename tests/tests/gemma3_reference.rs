//! Gemma 3 270M (Q4_K_M: q5_0, q8_0, q4_k and q6_k blocks) against the
//! reference outputs (`tests/reference/gemma3-270m-q4_k_m.json`:
//! transformers f32 on the dequantized weights), from the reference's prompt
//! ids: last-position logits and the `n_stable` leading greedy tokens of
//! every prompt, on the fast backend; and the 833-token prompt, longer than
//! the 512-token sliding window, on which ignoring the window changes the
//! answer.

use graphc::sampling::argmax;
use graphc::{CompileOptions, Model, SessionOptions};
use graphc_ir::Op;
use graphc_tests::{compare, model, reference_json, reference_logits};

fn gemma3() -> std::path::PathBuf {
    model("gemma-3-270m-q4_k_m.gguf")
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Why 5e-4: both sides are f32 over the same dequantized weights in
/// different summation orders, through 18 layers and a 262144-row output;
/// llama.cpp, which quantizes activations, is off by ~1 on the same prompts
/// (its `last_logits_vs_transformers`, printed beside ours). Measured here:
/// 2e-5 (p1) and 1.6e-5 (p4).
const MAX_ABS_LOGIT_DIFF: f32 = 5e-4;

#[test]
fn gemma3_matches_the_reference_logits_and_greedy_tokens() {
    let reference = reference_json("gemma3-270m-q4_k_m");
    let m = Model::compile(&gemma3(), &CompileOptions::default(), None).unwrap();
    assert_eq!(m.plan().family, "gemma3");
    assert_eq!(m.plan().model.stop_ids, ids(&reference["stop_ids"]), "stop on <eos> and <end_of_turn>");
    let mut s = m.session(&SessionOptions::default()).unwrap();
    for p in reference["prompts"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let prompt = ids(&p["prompt_ids"]);
        let n_stable = p["n_stable"].as_u64().unwrap() as usize;
        let want = ids(&p["generated_ids"]);
        let mut logits = s.prefill(&prompt).unwrap();
        if let Some(file) = p["logits_file"].as_str() {
            let (max, cos) = compare(&logits, &reference_logits(file));
            let lc = p["llama_cpp"]["last_logits_vs_transformers"]["max_abs_diff"].as_f64().unwrap_or(f64::NAN);
            println!("{name}: max |Δlogit| = {max:.3e}, cosine = {cos:.9} (llama.cpp: max |Δ| = {lc:.3})");
            assert!(max <= MAX_ABS_LOGIT_DIFF, "{name}: max |Δlogit| {max}");
        }
        let mut got = Vec::new();
        while got.len() < n_stable {
            let t = argmax(&logits);
            got.push(t);
            if got.len() < n_stable {
                logits = s.decode(t).unwrap();
            }
        }
        assert_eq!(got[..], want[..n_stable], "{name}: the first {n_stable} greedy tokens");
        println!("{name}: {} prompt tokens, {n_stable} greedy tokens equal", prompt.len());
    }
}

#[test]
fn gemma3_layer_pattern_and_rope_bases_are_derived() {
    let m = Model::compile(&gemma3(), &CompileOptions::default(), None).unwrap();
    let g = m.graph();
    let mut windows = Vec::new();
    let mut thetas = Vec::new();
    for n in g.g.node_indices() {
        let node = g.node(n);
        match &node.op {
            Op::Attention { window, .. } => windows.push((node.layer.unwrap(), *window)),
            Op::Rope { theta, .. } => thetas.push((node.layer.unwrap(), *theta)),
            _ => {}
        }
    }
    windows.sort();
    let global: Vec<u32> = windows.iter().filter(|(_, w)| w.is_none()).map(|(l, _)| *l).collect();
    assert_eq!(global, [5, 11, 17], "5 local layers, then 1 global");
    assert!(windows.iter().all(|(l, w)| global.contains(l) || *w == Some(512)));
    for (l, theta) in thetas {
        let want = if global.contains(&l) { 1e6 } else { 1e4 };
        assert_eq!(theta, want, "layer {l}'s rope base");
    }
}

#[test]
fn gemma3_ignoring_the_sliding_window_changes_the_long_prompts_answer() {
    // p4 is 833 tokens, past the 512-token window: the window matters there.
    let reference = reference_json("gemma3-270m-q4_k_m");
    let p4 = &reference["prompts"][3];
    let prompt = ids(&p4["prompt_ids"]);
    assert!(prompt.len() > 512);
    let want = reference_logits(p4["logits_file"].as_str().unwrap());
    let m = Model::compile(&gemma3(), &CompileOptions::default(), None).unwrap();
    let with_window = m.session(&SessionOptions::default()).unwrap().prefill(&prompt).unwrap();
    // The same plan with every attention's window removed.
    let mut plan = m.plan().clone();
    plan.graph = plan.graph.replace(", window=512", "");
    assert_ne!(plan.graph, m.plan().graph);
    let dir = graphc_tests::temp_dir("gemma3-nowindow");
    let path = dir.join("nowindow.plan");
    std::fs::write(&path, plan.to_json()).unwrap();
    let no_window = Model::load(&path, None).unwrap();
    let without = no_window.session(&SessionOptions::default()).unwrap().prefill(&prompt).unwrap();
    let (ok, _) = compare(&with_window, &want);
    let (bad, _) = compare(&without, &want);
    println!("p4: max |Δlogit| with the window {ok:.3e}, without {bad:.3}");
    assert!(ok <= MAX_ABS_LOGIT_DIFF);
    assert!(bad > 100.0 * MAX_ABS_LOGIT_DIFF, "ignoring the window must change the logits");
    assert_ne!(argmax(&without), argmax(&want), "and the greedy answer");
}
