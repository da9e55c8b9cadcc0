//! Continuous batching (`graphc::batcher`): requests queue for slots, take
//! them between steps, prefill in chunks beside the others' decoding, and
//! each gets the tokens it gets alone.

use graphc::batcher::{Batcher, BatcherOptions, Event, FinishReason, Request, Sink};
use graphc::{CompileOptions, Model, Sampling, SessionOptions};
use graphc_tests::{serve_prompts, smollm2};
use std::sync::{Arc, Mutex};

static PROMPTS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(serve_prompts);

fn model() -> Model {
    Model::compile(&smollm2(), &CompileOptions { max_seq: Some(256), ..Default::default() }, None).unwrap()
}

/// What `graphc run` does: the prompt alone in a one-row session.
fn alone(m: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = m.session(&SessionOptions::default()).unwrap();
    s.generate(prompt, n, &Sampling::greedy(), |_| ()).unwrap().tokens
}

type Log = Arc<Mutex<Vec<Event>>>;

fn request(prompt: Vec<u32>, max_tokens: usize) -> (Request, Log) {
    let log: Log = Arc::default();
    let l = log.clone();
    let sink: Sink = Box::new(move |e| {
        l.lock().unwrap().push(e);
        true
    });
    (Request { prompt, max_tokens, sampling: Sampling::greedy(), stop: vec![], logprobs: None, sink }, log)
}

fn tokens(log: &Log) -> Vec<u32> {
    log.lock().unwrap().iter().filter_map(|e| if let Event::Token { id, .. } = e { Some(*id) } else { None }).collect()
}

fn done(log: &Log) -> Option<(FinishReason, usize, usize)> {
    log.lock().unwrap().iter().find_map(|e| match e {
        Event::Done { finish, prompt_tokens, completion_tokens, .. } => Some((*finish, *prompt_tokens, *completion_tokens)),
        _ => None,
    })
}

fn run(b: &mut Batcher) -> usize {
    let mut steps = 0;
    while !b.is_idle() {
        b.step();
        steps += 1;
        assert!(steps < 10_000);
    }
    steps
}

#[test]
fn eight_requests_through_three_slots_get_the_tokens_each_gets_alone() {
    let m = model();
    const N: usize = 10;
    let prompts: Vec<Vec<u32>> = PROMPTS.iter().map(|p| m.encode(p).unwrap()).collect();
    // A small prefill chunk so prompts take several steps beside the others' decoding.
    let mut b = Batcher::new(&m, &BatcherOptions { slots: 3, prefill_chunk: Some(4), ..Default::default() }).unwrap();
    let logs: Vec<Log> = prompts
        .iter()
        .map(|p| {
            let (r, log) = request(p.clone(), N);
            b.submit(r).unwrap();
            log
        })
        .collect();
    assert_eq!(b.queued(), 8);
    let first = b.step();
    assert_eq!((first.admitted, first.decode_tokens), (3, 0));
    assert!(first.prefill_tokens <= 12, "chunked: {first:?}");
    let mut mixed = false;
    while !b.is_idle() {
        let r = b.step();
        mixed |= r.prefill_tokens > 0 && r.decode_tokens > 0;
    }
    assert!(mixed, "some step prefills one request while others decode");
    // The last requests ran with slots free: those rows were left out of the matmuls.
    let skipped = b.session().kernel_counts().get("matmul_idle_rows_skipped").copied().unwrap_or(0);
    assert!(skipped > 0, "free slots skipped in the matmuls");
    for (i, (p, log)) in prompts.iter().zip(&logs).enumerate() {
        let want = alone(&m, p, N);
        assert_eq!(tokens(log), want, "prompt {i} {:?}", PROMPTS[i]);
        let (finish, pt, ct) = done(log).unwrap();
        assert_eq!((pt, ct), (p.len(), want.len()));
        assert_eq!(finish, if want.len() < N { FinishReason::Stop } else { FinishReason::Length });
    }
}

#[test]
fn a_client_that_goes_away_frees_its_slot_and_the_others_keep_their_tokens() {
    let m = model();
    let prompts: Vec<Vec<u32>> = PROMPTS[..3].iter().map(|p| m.encode(p).unwrap()).collect();
    let mut b = Batcher::new(&m, &BatcherOptions { slots: 2, ..Default::default() }).unwrap();
    // Request 0's client leaves after its third token.
    let seen = Arc::new(Mutex::new(0));
    let s2 = seen.clone();
    let sink: Sink = Box::new(move |e| {
        if matches!(e, Event::Token { .. }) {
            *s2.lock().unwrap() += 1;
        }
        *s2.lock().unwrap() < 3
    });
    b.submit(Request { prompt: prompts[0].clone(), max_tokens: 50, sampling: Sampling::greedy(), stop: vec![], logprobs: None, sink }).unwrap();
    let (r1, log1) = request(prompts[1].clone(), 8);
    // A client that leaves while its request waits: never prefilled.
    let gone = Request { prompt: vec![1; 40], max_tokens: 8, sampling: Sampling::greedy(), stop: vec![], logprobs: None, sink: Box::new(|_| false) };
    let (r2, log2) = request(prompts[2].clone(), 8);
    b.submit(r1).unwrap();
    b.submit(gone).unwrap();
    b.submit(r2).unwrap();
    let (mut cancelled, mut prefilled) = (0, 0);
    while !b.is_idle() {
        let r = b.step();
        cancelled += r.cancelled;
        prefilled += r.prefill_tokens + r.reused_tokens;
    }
    assert_eq!(cancelled, 2);
    assert_eq!(prefilled, prompts[..3].iter().map(Vec::len).sum::<usize>(), "the gone request's 40 tokens were not run");
    assert_eq!(*seen.lock().unwrap(), 3, "no token after the client left");
    // Request 2 waited for a slot and got request 0's, reset.
    assert_eq!(tokens(&log1), alone(&m, &prompts[1], 8));
    assert_eq!(tokens(&log2), alone(&m, &prompts[2], 8));
}

#[test]
fn stop_strings_end_the_text_before_them_and_logprobs_describe_the_chosen_token() {
    let m = model();
    let prompt = m.encode(&PROMPTS[3]).unwrap();
    let want = alone(&m, &prompt, 12);
    let text = m.decode(&want).unwrap();
    // Stop at the second comma of the greedy continuation (" 5, 6, ...").
    let stop = ",".to_string();
    let before = &text[..text.find(',').expect("the continuation has a comma")];
    let mut b = Batcher::new(&m, &BatcherOptions { slots: 1, ..Default::default() }).unwrap();
    let (mut r, log) = request(prompt.clone(), 12);
    r.stop = vec![stop];
    r.logprobs = Some(3);
    b.submit(r).unwrap();
    run(&mut b);
    let events = log.lock().unwrap().clone();
    let mut out = String::new();
    for e in &events {
        match e {
            Event::Token { text, logprobs: Some((chosen, top)), id } => {
                out.push_str(text);
                assert_eq!(chosen.id, *id);
                assert_eq!(top.len(), 3);
                // Greedy: the chosen token is the most likely.
                assert_eq!(top[0].id, *id);
                assert!(top[0].logprob >= top[1].logprob && top[1].logprob >= top[2].logprob && chosen.logprob < 0.0);
            }
            Event::Done { text, finish, .. } => {
                out.push_str(text);
                assert_eq!(*finish, FinishReason::Stop);
            }
            Event::Admitted => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(out, before);
}

#[test]
fn a_prompt_the_context_cannot_hold_is_refused_before_it_queues() {
    let m = Model::compile(&smollm2(), &CompileOptions { max_seq: Some(16), ..Default::default() }, None).unwrap();
    let mut b = Batcher::new(&m, &BatcherOptions { slots: 1, ..Default::default() }).unwrap();
    let (r, _) = request(vec![1; 16], 4);
    let err = b.submit(r).unwrap_err().to_string();
    assert!(err.contains("16 tokens") && err.contains("holds 16"), "{err}");
    let (r, _) = request(vec![49_152], 4);
    assert!(b.submit(r).unwrap_err().to_string().contains("outside the vocabulary"));
    assert_eq!(b.queued(), 0);
    // max_tokens past the context: cut to what fits, finish `length`.
    let (r, log) = request(vec![1; 12], 100);
    b.submit(r).unwrap();
    run(&mut b);
    let (finish, _, completion) = done(&log).unwrap();
    assert!(completion <= 4, "12 + {completion} > 16");
    if completion == 4 {
        assert_eq!(finish, FinishReason::Length);
    }
}

/// `alone`'s tokens as a request streams them: an end-of-generation token
/// ends the request without being sent.
fn streamed(m: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut t = alone(m, prompt, n);
    if t.last().is_some_and(|id| m.plan().model.stop_ids.contains(id)) {
        t.pop();
    }
    t
}

/// One request through a one-slot batcher: its tokens and what its first
/// step reused and prefilled.
fn through(b: &mut Batcher, prompt: &[u32], n: usize) -> (Vec<u32>, usize, usize) {
    let (r, log) = request(prompt.to_vec(), n);
    b.submit(r).unwrap();
    let first = b.step();
    run(b);
    let cached = log.lock().unwrap().iter().find_map(|e| if let Event::Done { cached_tokens, .. } = e { Some(*cached_tokens) } else { None });
    assert_eq!(cached, Some(first.reused_tokens), "the usage reports what the slot reused");
    (tokens(&log), first.reused_tokens, first.prefill_tokens)
}

/// The prompt cache: a request repeating what a slot last ran (a chat's
/// next turn: the conversation so far, then more) prefills only what is
/// new, and one that departs from it part way has the cache cut back to
/// where they part; each gets the tokens it gets alone. The control: had
/// the cache not been cut back, the model would have seen the first
/// prompt's later tokens before the second's own, and that prompt's
/// greedy tokens differ from the right ones.
#[test]
fn a_slot_reuses_the_cached_prefix_of_a_prompt_and_cuts_back_where_they_part() {
    let m = model();
    const N: usize = 8;
    let mut b = Batcher::new(&m, &BatcherOptions { slots: 1, ..Default::default() }).unwrap();
    assert!(b.prompt_cache(), "on by default where the caches can be cut back");
    let first = m.encode(&PROMPTS[0]).unwrap();
    let (got, reused, _) = through(&mut b, &first, N);
    assert_eq!((got.clone(), reused), (streamed(&m, &first, N), 0));
    assert_eq!(got.len(), N, "the test wants a request that ran its whole budget");
    // The next turn: everything the slot ran (the prompt and all generated
    // tokens but the last, which was only sampled), then the last and more.
    let next: Vec<u32> = [&first[..], &got[..], &m.encode(" Then").unwrap()[..]].concat();
    let (got_next, reused, prefilled) = through(&mut b, &next, N);
    assert_eq!(reused, first.len() + got.len() - 1, "the slot's whole cache is a prefix of the prompt");
    assert_eq!(prefilled, next.len() - reused);
    assert!(!got_next.is_empty());
    assert_eq!(got_next, streamed(&m, &next, N));
    // A prompt that shares only its first `k` ids with what the slot holds.
    let k = first.len() / 2;
    let parted: Vec<u32> = [&first[..k], &m.encode(" purple elephants").unwrap()[..]].concat();
    assert_ne!(parted[k], next[k]);
    let (got_parted, reused, _) = through(&mut b, &parted, N);
    assert_eq!(reused, k);
    let want = streamed(&m, &parted, N);
    assert!(!want.is_empty());
    assert_eq!(got_parted, want);
    // The control: the uncut cache (the slot's ids past `k` left in front
    // of the new ones) answers otherwise.
    let uncut: Vec<u32> = [&next[..], &parted[k..]].concat();
    assert_ne!(streamed(&m, &uncut, N), want, "the control must tell an uncut cache from a cut one");
}

/// Off when asked (every prompt prefilled whole). With window rings
/// (Gemma 3's window of 512 keys: rings of 767 positions, the window and a
/// prefill chunk's slack), on: a slot whose row is no longer than its
/// rings reuses its prefix; one whose rings have wrapped (their first
/// positions overwritten) starts from empty, and each gets the tokens it
/// gets alone (a planted cut of a wrapped ring answers otherwise).
#[test]
fn the_prompt_cache_is_off_when_asked_and_starts_over_where_a_window_ring_wrapped() {
    let m = model();
    let mut b = Batcher::new(&m, &BatcherOptions { slots: 1, prompt_cache: Some(false), ..Default::default() }).unwrap();
    assert!(!b.prompt_cache());
    let p = m.encode(&PROMPTS[1]).unwrap();
    let (got, _, _) = through(&mut b, &p, 4);
    let (again, reused, prefilled) = through(&mut b, &p, 4);
    assert_eq!((reused, prefilled, &again), (0, p.len(), &got));

    let gemma = Model::compile(&graphc_tests::model("gemma-3-270m-q4_k_m.gguf"), &CompileOptions { max_seq: Some(1024), ..Default::default() }, None)
        .unwrap();
    assert!(gemma.plan().kv_cache.window_caches > 0, "the test wants window rings");
    let mut b = Batcher::new(&gemma, &BatcherOptions { slots: 1, ..Default::default() }).unwrap();
    assert!(b.prompt_cache());
    const N: usize = 4;
    let short = gemma.encode(&PROMPTS[2]).unwrap();
    let (got, _, _) = through(&mut b, &short, N);
    let next: Vec<u32> = [&short[..], &got[..], &gemma.encode(" Next,").unwrap()[..]].concat();
    let (got_next, reused, _) = through(&mut b, &next, N);
    assert!(reused >= short.len(), "an unwrapped ring is cut back and reused: {reused}");
    assert_eq!(got_next, streamed(&gemma, &next, N));
    // A prompt past the rings' positions, then one parting from it early.
    let long: Vec<u32> = short.iter().copied().cycle().take(800).collect();
    through(&mut b, &long, 2);
    let parted: Vec<u32> = [&long[..100], &gemma.encode(" purple elephants").unwrap()[..]].concat();
    let (got_parted, reused, prefilled) = through(&mut b, &parted, N);
    assert_eq!((reused, prefilled), (0, parted.len()), "a wrapped ring starts from empty");
    assert_eq!(got_parted, streamed(&gemma, &parted, N));
}

/// Requests that share a system prompt: the second, admitted into the
/// other slot while the first still runs, finds the shared prefix in the
/// first's cache and copies it (prefilling only its own rest), and each
/// gets the tokens it gets alone. Off with the prompt cache.
#[test]
fn a_slot_copies_the_prefix_another_slot_holds() {
    let m = model();
    const N: usize = 8;
    let system = m.encode(&format!("{} {}", PROMPTS[0], PROMPTS[1])).unwrap();
    let a: Vec<u32> = [&system[..], &m.encode(" The first").unwrap()[..]].concat();
    let c: Vec<u32> = [&system[..], &m.encode(" Something else:").unwrap()[..]].concat();
    let common = a.iter().zip(&c).take_while(|(x, y)| x == y).count();
    assert!(common >= system.len() - 1 && common < c.len(), "the prompts share the system prompt: {common}");
    for prompt_cache in [true, false] {
        let mut b = Batcher::new(&m, &BatcherOptions { slots: 2, prompt_cache: Some(prompt_cache), ..Default::default() }).unwrap();
        let (ra, la) = request(a.clone(), N);
        b.submit(ra).unwrap();
        b.step();
        assert_eq!(b.busy_slots(), 1, "the first request still runs when the second comes");
        let (rc, lc) = request(c.clone(), N);
        b.submit(rc).unwrap();
        let r = b.step();
        let want = if prompt_cache { common } else { 0 };
        assert_eq!((r.copied_tokens, r.reused_tokens), (want, want), "prompt cache {prompt_cache}");
        assert_eq!(r.prefill_tokens, c.len() - want, "only the rest of the second prompt is run");
        run(&mut b);
        assert_eq!(tokens(&la), streamed(&m, &a, N));
        assert_eq!(tokens(&lc), streamed(&m, &c, N), "prompt cache {prompt_cache}");
        let cached = lc.lock().unwrap().iter().find_map(|e| if let Event::Done { cached_tokens, .. } = e { Some(*cached_tokens) } else { None });
        assert_eq!(cached, Some(want), "the usage reports the copied prefix");
    }
}

/// `Session::copy_row_prefix`: row 1 holding the first `k` positions of
/// row 0 continues as a session that prefilled the prompt itself (logits
/// within 1e-4); the control, a copy one position short, is far from it.
/// A device session refuses (nothing copied), as does a wrapped ring.
#[test]
fn a_cache_prefix_copied_between_rows_continues_as_the_prompt_would() {
    let m = model();
    let p = m.encode(&PROMPTS[1]).unwrap();
    let k = p.len() / 2;
    let mut alone = m.session(&SessionOptions::default()).unwrap();
    let want = alone.prefill(&p).unwrap();
    let copied = |len: usize| {
        let mut s = m.batch_session(2, &SessionOptions::default()).unwrap();
        s.forward_slots(&[&p[..], &[]]).unwrap();
        s.copy_row_prefix(0, 1, len).unwrap();
        assert_eq!(s.lens(), [p.len(), len]);
        s.forward_slots(&[&[], &p[len..]]).unwrap().remove(1)
    };
    let diff = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let got = copied(k);
    assert!(diff(&got, &want) < 1e-4, "max |Δlogit| {}", diff(&got, &want));
    // The control: one position short, the row misses a token of the prompt.
    let short = {
        let mut s = m.batch_session(2, &SessionOptions::default()).unwrap();
        s.forward_slots(&[&p[..], &[]]).unwrap();
        s.copy_row_prefix(0, 1, k - 1).unwrap();
        s.forward_slots(&[&[], &p[k..]]).unwrap().remove(1)
    };
    assert!(diff(&short, &want) > 1e-2, "the control must be far: {}", diff(&short, &want));
    let mut s = m.batch_session(2, &SessionOptions::default()).unwrap();
    let e = s.copy_row_prefix(0, 1, 1).unwrap_err().to_string();
    assert!(e.contains("holds 0"), "{e}");
    assert!(s.copy_row_prefix(0, 0, 0).is_err() && s.copy_row_prefix(0, 2, 0).is_err());
}
