//! The primitives of continuous batching: a batch session's rows as slots
//! that take new sequences at step boundaries (`reset_row`), with free or
//! waiting slots riding along (`forward_slots`), one slot prefilling while
//! the others decode. Every slot's greedy tokens are those of its prompt run
//! alone, and its logits those of its run alone up to summation order (a
//! step's matmuls tile all rows' tokens together, so a row's sums are
//! grouped by the batch it rides in).

use graphc::sampling::argmax;
use graphc::{CompileOptions, Model, SessionOptions};
use graphc_tests::{compare, smollm2};

/// Summation order only: measured ~1e-5 on logits of magnitude ~20.
const MAX_ABS_LOGIT_DIFF: f32 = 1e-4;

/// `prompt` run alone: its first `n` greedy tokens and the logits of each step.
fn alone(m: &Model, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut s = m.session(&SessionOptions::default()).unwrap();
    let mut logits = s.prefill(prompt).unwrap();
    let (mut tokens, mut all) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = argmax(&logits);
        tokens.push(t);
        all.push(logits.clone());
        logits = s.decode(t).unwrap();
    }
    (tokens, all)
}

#[test]
fn slots_take_new_sequences_between_steps_and_match_each_run_alone() {
    let m = Model::compile(&smollm2(), &CompileOptions { max_seq: Some(256), ..Default::default() }, None).unwrap();
    let prompts: Vec<Vec<u32>> = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a land far away,", "1, 2, 3, 4,"]
        .iter()
        .map(|p| m.encode(p).unwrap())
        .collect();
    const N: usize = 6;
    let want: Vec<_> = prompts.iter().map(|p| alone(&m, p, N)).collect();

    // 3 slots; the plan of each step, as a server would schedule it:
    // step 0: prompts 0 and 1 prefill, slot 2 is free;
    // step 2: prompt 2 prefills in slot 2 while 0 and 1 decode;
    // when prompt 0 has its N tokens, slot 0 is reset and takes prompt 3.
    let mut s = m.batch_session(3, &SessionOptions::default()).unwrap();
    let mut slot_prompt: [Option<usize>; 3] = [Some(0), Some(1), None];
    let mut pending: [Vec<u32>; 3] = [prompts[0].clone(), prompts[1].clone(), Vec::new()];
    let mut got: Vec<(Vec<u32>, Vec<Vec<f32>>)> = vec![(Vec::new(), Vec::new()); prompts.len()];
    let mut queue = vec![2usize, 3];
    for step in 0..40 {
        if step == 2 || (slot_prompt[2].is_none() && step > 2) {
            if let Some(p) = queue.first().copied().filter(|_| slot_prompt[2].is_none()) {
                queue.remove(0);
                s.reset_row(2).unwrap();
                slot_prompt[2] = Some(p);
                pending[2] = prompts[p].clone();
            }
        }
        for slot in 0..3 {
            if slot_prompt[slot].is_none() {
                if let Some(p) = queue.first().copied().filter(|_| step > 2) {
                    queue.remove(0);
                    s.reset_row(slot).unwrap();
                    slot_prompt[slot] = Some(p);
                    pending[slot] = prompts[p].clone();
                }
            }
        }
        if slot_prompt.iter().all(Option::is_none) {
            break;
        }
        let news: Vec<&[u32]> = pending.iter().map(|p| &p[..]).collect();
        let logits = s.forward_slots(&news).unwrap();
        for slot in 0..3 {
            let Some(p) = slot_prompt[slot] else {
                assert!(logits[slot].is_empty(), "a free slot has no logits");
                continue;
            };
            let t = argmax(&logits[slot]);
            got[p].0.push(t);
            got[p].1.push(logits[slot].clone());
            if got[p].0.len() == N {
                slot_prompt[slot] = None;
                pending[slot].clear();
            } else {
                pending[slot] = vec![t];
            }
        }
    }
    assert!(queue.is_empty(), "every prompt was served");
    for (p, ((tokens, logits), (want_tokens, want_logits))) in got.iter().zip(&want).enumerate() {
        assert_eq!(tokens, want_tokens, "prompt {p}: its tokens alone");
        for (step, (a, b)) in logits.iter().zip(want_logits).enumerate() {
            let (diff, _) = compare(a, b);
            assert!(diff <= MAX_ABS_LOGIT_DIFF, "prompt {p} step {step}: {diff} from its run alone");
        }
    }
    assert!(s.forward_slots(&[&[], &[], &[]]).is_err(), "a step with no tokens at all is refused");
    assert!(s.reset_row(3).is_err());
}

/// A ragged step's padding (a row of 1 new token beside one of 12 runs on
/// 11 placeholder positions) is left out of every matrix product over
/// tokens, and each row's logits are still those of its run alone. The
/// control: a step whose rows are all of one length leaves nothing out.
#[test]
fn a_ragged_steps_padding_is_left_out_of_the_matrix_products() {
    let m = Model::compile(&smollm2(), &CompileOptions { max_seq: Some(256), ..Default::default() }, None).unwrap();
    let long = m.encode("The quick brown fox jumps over the lazy dog because it").unwrap();
    assert!(long.len() >= 10, "{}", long.len());
    let short = m.encode("Paris is the capital of").unwrap();
    let left_out = |s: &graphc::Session| s.kernel_counts().get("matmul_rows_left_out").copied().unwrap_or(0);
    let mut s = m.batch_session(2, &SessionOptions::default()).unwrap();
    // Both rows prefill (of unequal length), then one decodes beside a
    // prefill of the other's continuation.
    s.reset();
    let first = s.forward_slots(&[&short[..], &short[..]]).unwrap();
    assert_eq!(left_out(&s), 0, "rows of one length: nothing left out");
    let t = argmax(&first[0]);
    let step = s.forward_slots(&[&[t], &long[..]]).unwrap();
    let padding = long.len() - 1;
    let n = left_out(&s);
    assert!(n > 0 && n % padding as u64 == 0, "the 1-token row's {padding} padding positions left out of each product: {n}");
    // Row 0 alone: `short`, then `t`; row 1 alone: `short` then `long`.
    let (_, want0) = alone(&m, &short, 2);
    assert_eq!(argmax(&want0[0]), t);
    let (d0, _) = compare(&step[0], &want0[1]);
    let mut solo = m.session(&SessionOptions::default()).unwrap();
    solo.prefill(&short).unwrap();
    let want1 = solo.forward(&long).unwrap();
    let (d1, _) = compare(&step[1], &want1);
    assert!(d0 <= MAX_ABS_LOGIT_DIFF && d1 <= MAX_ABS_LOGIT_DIFF, "ragged step vs alone: {d0} {d1}");
}
