//! The `kv_append` rewrite end to end: it fires for every cache, it changes
//! no arithmetic (logits compared on bit patterns with the pass on and off),
//! ragged batches read their own rows, the cache is written in place, and a
//! write past capacity is a loud error.
//!
//! Guard: `cache_is_written_in_place_from_prefill_through_decode` and
//! `smollm2_kv_append_fires_for_every_k_and_v` fail when the pass is off
//! (`GRAPHC_DISABLE_PASSES=kv_append cargo test --test kv_append`).

use graphc::{CompileOptions, Kernels, Model, SessionOptions};
use graphc_backends::cpu::reference;
use graphc_backends::Tensor;
use graphc_ir::{text, verify, Op};
use graphc_tests::{reference_json, smollm2, temp_dir, GgufWriter, NoWeights};
use std::collections::HashMap;

fn compile(path: &std::path::Path, disabled: &[&str]) -> Model {
    let opts = CompileOptions { disabled_passes: graphc_tests::disabled_passes(disabled), ..Default::default() };
    Model::compile(path, &opts, None).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn kv_append_count(m: &Model) -> u64 {
    m.plan().passes.iter().find(|p| p.name == "kv_append").unwrap().rewrites
}

fn prompt(i: usize) -> Vec<u32> {
    let r = reference_json("smollm2-135m-q4_1");
    r["prompts"][i]["prompt_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect()
}

/// Greedy continuation of `steps` tokens, returning the logits of every step.
fn greedy_logits(m: &Model, prompt: &[u32], steps: usize) -> Vec<Vec<f32>> {
    greedy_logits_on(m, prompt, steps, None)
}

fn greedy_logits_on(m: &Model, prompt: &[u32], steps: usize, kernels: Option<Kernels>) -> Vec<Vec<f32>> {
    let mut s = m.session(&SessionOptions { kernels, ..Default::default() }).unwrap();
    let mut out = vec![s.prefill(prompt).unwrap()];
    for _ in 1..steps {
        let t = graphc::sampling::argmax(out.last().unwrap());
        out.push(s.decode(t).unwrap());
    }
    out
}

#[test]
fn smollm2_kv_append_fires_for_every_k_and_v() {
    let m = compile(&smollm2(), &[]);
    assert_eq!(kv_append_count(&m), 60, "30 layers × (K, V)");
    let g = m.graph();
    let concat_into_cache =
        g.node_ids().any(|n| matches!(g.node(n).op, Op::Concat { .. }) && g.inputs(n).iter().any(|&i| matches!(g.node(i).op, Op::State { .. })));
    assert!(!concat_into_cache, "the optimized graph still concatenates into a cache");
    assert!(text::print(g).contains("kv_append{axis=2, cap=cap}"));
}

#[test]
fn smollm2_logits_are_bit_identical_with_kv_append_on_and_off() {
    let on = compile(&smollm2(), &[]);
    let off = compile(&smollm2(), &["kv_append"]);
    assert_eq!((kv_append_count(&on), kv_append_count(&off)), (60, 0));
    let p = prompt(0);
    let (a, b) = (greedy_logits(&on, &p, 6), greedy_logits(&off, &p, 6));
    for (step, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(bits(x), bits(y), "step {step}");
    }
}

#[test]
fn smollm2_ragged_batch_rows_equal_their_single_runs_with_the_pass_on_and_off() {
    // On the reference executor a row's arithmetic does not depend on the
    // batch around it: bit patterns.
    ragged_batch(Kernels::Reference, |_, _, got, alone| assert_eq!(bits(got), bits(alone)));
}

/// Why 2e-3: the fast backend picks its matmul kernel by the number of
/// activation rows (row dots for a few, dequantized tiles for many), so a row
/// prefilled inside a batch is summed in another order than alone: f32
/// rounding, ~1e-6 relative, on logits of magnitude ~20. Each row's greedy
/// token must still be its own.
const FAST_BATCH_TOLERANCE: f32 = 2e-3;

#[test]
fn smollm2_ragged_batch_on_the_fast_backend_gives_each_row_its_own_tokens() {
    ragged_batch(Kernels::Fast(graphc_backends::cpu::simd::Isa::best()), |row, step, got, alone| {
        let max = got.iter().zip(alone).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(max <= FAST_BATCH_TOLERANCE, "row {row} step {step}: max |Δlogit| {max}");
        assert_eq!(graphc::sampling::argmax(got), graphc::sampling::argmax(alone), "row {row} step {step}");
    });
}

/// Three prompts of different lengths stepped together, each row checked
/// against that prompt run alone by `same(row, step, batch, alone)`.
fn ragged_batch(kernels: Kernels, same: impl Fn(usize, usize, &[f32], &[f32])) {
    let prompts = [prompt(0), prompt(1), prompt(2)];
    let lens: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
    assert!(lens[0] != lens[1] && lens[1] != lens[2], "rows must differ in length: {lens:?}");
    let steps = 5;
    for disabled in [&[][..], &["kv_append"][..]] {
        let m = compile(&smollm2(), disabled);
        let alone: Vec<Vec<Vec<f32>>> = prompts.iter().map(|p| greedy_logits_on(&m, p, steps, Some(kernels))).collect();
        let mut s = m.batch_session(3, &SessionOptions { kernels: Some(kernels), ..Default::default() }).unwrap();
        assert_eq!(s.appends_in_place(), disabled.is_empty());
        let refs: Vec<&[u32]> = prompts.iter().map(|p| &p[..]).collect();
        let mut logits = s.prefill_rows(&refs).unwrap();
        for step in 0..steps {
            for (row, (got, alone)) in logits.iter().zip(&alone).enumerate() {
                same(row, step, got, &alone[step]);
            }
            if step + 1 < steps {
                let next: Vec<u32> = logits.iter().map(|l| graphc::sampling::argmax(l)).collect();
                logits = s.decode_rows(&next).unwrap();
            }
        }
        assert_eq!(s.lens(), &lens.iter().map(|l| l + steps - 1).collect::<Vec<_>>()[..]);
    }
}

#[test]
fn last_token_logits_come_from_each_rows_own_length() {
    // The control for the ragged test: reading row 0 at the batch's longest
    // length (`max_len - 1`, a padding position) gives different logits
    // than its own last token, so a runtime that did so would fail above.
    let m = compile(&smollm2(), &[]);
    let (short, long) = (prompt(0), prompt(2));
    let own = greedy_logits(&m, &short, 1).remove(0);
    let mut padded = short.clone();
    padded.resize(long.len(), *short.last().unwrap());
    let at_max_len = greedy_logits(&m, &padded, 1).remove(0);
    assert_ne!(bits(&own), bits(&at_max_len));
    assert_ne!(graphc::sampling::argmax(&own), graphc::sampling::argmax(&at_max_len));
}

#[test]
fn cache_is_written_in_place_from_prefill_through_decode() {
    let dir = temp_dir("kv-in-place");
    let ck = GgufWriter::tiny_llama().write(&dir, "tiny.gguf");
    let m = compile(&ck, &[]);
    assert_eq!(kv_append_count(&m), 4, "2 layers × (K, V)");
    let mut s = m.session(&SessionOptions::default()).unwrap();
    assert!(s.appends_in_place());
    let ptr = |s: &graphc::Session| s.state("k.1").unwrap().as_f32().unwrap().as_ptr();
    let at_start = ptr(&s);
    let cap = s.state("k.1").unwrap().shape()[2];
    assert_eq!(cap, m.plan().options.max_seq, "allocated once, at capacity");
    s.forward(&[3, 4, 5]).unwrap();
    assert_eq!(ptr(&s), at_start, "prefill wrote into the same buffer");
    for t in [6, 7, 3] {
        s.decode(t).unwrap();
        assert_eq!(ptr(&s), at_start, "decode wrote into the same buffer");
    }
    assert_eq!(s.state("k.1").unwrap().shape()[2], cap, "the cache never grows");
}

#[test]
fn a_write_past_capacity_names_offset_rows_and_capacity() {
    let src = r#"graph "g" {
  %0 = input{name="new"} : f32[batch, 1, seq, 2]
  %1 = input{name="kv_lengths"} : i32[batch]
  %2 = state{name="k"} : f32[batch, 1, cap, 2]
  %3 = kv_append{axis=2, cap=cap} %2, %0, %1
  %4 = state_out{name="k"} %3
}
"#;
    let mut g = text::parse(src).unwrap();
    verify(&mut g).unwrap();
    let run = |len: i32| {
        let inputs: HashMap<String, Tensor> =
            [("new".to_string(), Tensor::f32(vec![2, 1, 2, 2], vec![1.0; 8])), ("kv_lengths".to_string(), Tensor::i32(vec![2], vec![0, len]))].into();
        let states: HashMap<String, Tensor> = [("k".to_string(), Tensor::f32(vec![2, 1, 4, 2], vec![0.0; 16]))].into();
        reference::run(&g, &inputs, states, &NoWeights)
    };
    let ok = run(2).unwrap();
    let k = ok.states["k"].as_f32().unwrap();
    assert_eq!(&k[8..16], &[0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], "row 1 written at its own offset 2");
    let e = run(3).unwrap_err().to_string();
    assert!(e.contains("kv_append past capacity: batch row 1 writes rows 3..5 (offset 3 + 2 rows) but the cache holds 4"), "{e}");
}
