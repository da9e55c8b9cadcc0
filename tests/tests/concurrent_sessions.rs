//! A loaded model is `Send + Sync`: many sessions share one copy of the
//! weights (the checkpoint's mmap) across threads. 8 sessions on 4 threads,
//! each a different prompt, each stepped a bounded number of tokens, must give
//! exactly the tokens (and logits, on bit patterns) of the same session run
//! alone on one thread.

use graphc::{CompileOptions, Kernels, Model, SessionOptions};
use graphc_tests::{reference_json, smollm2};

fn assert_send_sync<T: Send + Sync>() {}

const STEPS: usize = 6;

/// Greedy tokens and the bits of every step's logits.
fn run(m: &Model, prompt: &[u32]) -> (Vec<u32>, Vec<Vec<u32>>) {
    // One kernel thread per session: the concurrency under test is between sessions.
    let opts = SessionOptions { threads: Some(1), kernels: Some(Kernels::Fast(graphc_backends::cpu::simd::Isa::best())), ..Default::default() };
    let mut s = m.session(&opts).unwrap();
    let mut logits = s.prefill(prompt).unwrap();
    let (mut tokens, mut bits) = (Vec::new(), Vec::new());
    for _ in 0..STEPS {
        let t = graphc::sampling::argmax(&logits);
        tokens.push(t);
        bits.push(logits.iter().map(|x| x.to_bits()).collect());
        logits = s.decode(t).unwrap();
    }
    (tokens, bits)
}

#[test]
fn eight_sessions_on_four_threads_equal_their_single_threaded_runs() {
    assert_send_sync::<Model>();
    let m = Model::compile(&smollm2(), &CompileOptions::default(), None).unwrap();
    let reference = reference_json("smollm2-135m-q4_1");
    let p1: Vec<u32> = reference["prompts"][0]["prompt_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    // Eight different sequences: the first prompt cut at eight lengths, and
    // each with a different first token.
    let prompts: Vec<Vec<u32>> = (0..8)
        .map(|i| {
            let mut p = p1[..1 + i % p1.len()].to_vec();
            p[0] = p1[0] + i as u32;
            p
        })
        .collect();
    let alone: Vec<_> = prompts.iter().map(|p| run(&m, p)).collect();
    let together: Vec<_> = std::thread::scope(|scope| {
        let m = &m;
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let mine: Vec<(usize, &Vec<u32>)> = prompts.iter().enumerate().filter(|(i, _)| i % 4 == t).collect();
                scope.spawn(move || mine.into_iter().map(|(i, p)| (i, run(m, p))).collect::<Vec<_>>())
            })
            .collect();
        let mut all: Vec<_> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, r)| r).collect()
    });
    for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a.0, b.0, "session {i}: tokens");
        assert_eq!(a.1, b.1, "session {i}: logits bits");
    }
    // Not vacuous: the sessions really are different sequences.
    assert!(alone.iter().any(|r| r.0 != alone[0].0));
}
