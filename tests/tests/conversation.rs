//! A conversation keeps its cache between turns: the second turn prefills
//! only what its prompt adds, and gives the logits a fresh prefill of the
//! whole conversation gives. A cache is cut back only where that is sound.

use graphc::{ChatOptions, CompileOptions, Conversation, Message, Model, Sampling, SessionOptions};
use graphc_tests::{compare, model, smollm2};

/// Both the same f32 arithmetic over the same cache, in other chunks: the
/// difference is summation order (measured ~1e-5); the other-prompt control
/// below is off by whole units.
const MAX_ABS_LOGIT_DIFF: f32 = 5e-4;

#[test]
fn the_second_turn_prefills_only_the_new_turn() {
    let m = Model::compile(&smollm2(), &CompileOptions::default(), None).unwrap();
    let mut conv = Conversation::new(&m, &SessionOptions::default(), Some("Answer briefly.".into())).unwrap();
    let t1 = conv.send("What is the capital of France?", 8, &Sampling::greedy(), |_| {}).unwrap();
    assert_eq!(t1.reused, 0);
    let first_prompt =
        m.chat_prompt(&[Message::system("Answer briefly."), Message::user("What is the capital of France?")], &ChatOptions::default()).unwrap();
    assert_eq!(t1.prefilled, first_prompt.len());

    // Turn two: its prompt is the whole conversation; the cache holds turn
    // one's prompt and answer (all but the last answer token, never run).
    let mut logits_after_prefill = Vec::new();
    let mut first = true;
    let t2 = conv
        .send("And of Germany?", 1, &Sampling::greedy(), |_| {
            first = false;
        })
        .unwrap();
    assert!(!first);
    let full = m.chat_prompt(&conv.messages()[..4], &ChatOptions::default()).unwrap();
    assert_eq!(t2.reused + t2.prefilled, full.len());
    assert!(t2.reused >= first_prompt.len(), "turn one's prompt came from the cache: {} of {}", t2.reused, full.len());
    assert!(t2.prefilled < full.len() / 2, "only the new turn was prefilled: {} of {}", t2.prefilled, full.len());

    // Its next-token logits are a fresh prefill's of the whole conversation.
    let mut fresh = m.session(&SessionOptions::default()).unwrap();
    let want = fresh.prefill(&full).unwrap();
    let mut s = m.session(&SessionOptions::default()).unwrap();
    s.prefill(&full[..t2.reused]).unwrap();
    logits_after_prefill.extend(s.forward(&full[t2.reused..]).unwrap());
    let (diff, _) = compare(&logits_after_prefill, &want);
    assert!(diff <= MAX_ABS_LOGIT_DIFF, "cached + new vs fresh: {diff}");
    assert_eq!(graphc::sampling::argmax(&want), t2.tokens[0]);
    // The control: the same prefix with another last turn is far off.
    let other = m.chat_prompt(&[Message::system("Answer briefly."), Message::user("Name a color.")], &ChatOptions::default()).unwrap();
    let (control, _) = compare(&fresh.prefill(&other).unwrap(), &want);
    assert!(control > 100.0 * MAX_ABS_LOGIT_DIFF, "another prompt must be told apart: {control}");
}

#[test]
fn a_cache_is_cut_back_where_sound_and_refused_where_not() {
    let m = Model::compile(&smollm2(), &CompileOptions::default(), None).unwrap();
    let ids = m.encode("The capital of France is Paris. The capital of Germany is").unwrap();
    let other = m.encode("The capital of France is Paris. My favourite color is").unwrap();
    let common = ids.iter().zip(&other).take_while(|(a, b)| a == b).count();
    let mut s = m.session(&SessionOptions::default()).unwrap();
    s.prefill(&ids).unwrap();
    s.truncate(common).unwrap();
    assert_eq!(s.len(), common);
    let cut = s.forward(&other[common..]).unwrap();
    let want = m.session(&SessionOptions::default()).unwrap().prefill(&other).unwrap();
    let (diff, _) = compare(&cut, &want);
    assert!(diff <= MAX_ABS_LOGIT_DIFF, "cut back and refilled vs fresh: {diff}");
    assert!(s.truncate(s.len() + 1).is_err());

    // Gemma 3's window rings (767 positions) hold every position until
    // they wrap: cut back before that, refused after, naming why.
    let g = Model::compile(&model("gemma-3-270m-q4_k_m.gguf"), &CompileOptions { max_seq: Some(1024), ..Default::default() }, None).unwrap();
    let mut s = g.session(&SessionOptions::default()).unwrap();
    let (ids, other) = (
        g.encode("The capital of France is Paris. The capital of Germany is").unwrap(),
        g.encode("The capital of France is Paris. My favourite color is").unwrap(),
    );
    let common = ids.iter().zip(&other).take_while(|(a, b)| a == b).count();
    s.prefill(&ids).unwrap();
    s.truncate(common).unwrap();
    let cut = s.forward(&other[common..]).unwrap();
    let want = g.session(&SessionOptions::default()).unwrap().prefill(&other).unwrap();
    let (diff, _) = compare(&cut, &want);
    assert!(diff <= MAX_ABS_LOGIT_DIFF, "Gemma 3 cut back and refilled vs fresh: {diff}");
    let long: Vec<u32> = ids.iter().copied().cycle().take(800).collect();
    s.prefill(&long).unwrap();
    let e = s.truncate(2).unwrap_err().to_string();
    assert!(e.contains("window rings hold 767 positions"), "{e}");
    s.truncate(800).unwrap();
}

/// A ragged step writes every row to its width: a row of 760 tokens
/// decoding one beside a 20-token prefill has its padding written at
/// positions up to 779, past Gemma 3's rings of 767, which wraps them
/// though the row's own length stays under. Cutting it back is then
/// refused (its early positions are overwritten), where a row whose
/// writes stayed under the rings is cut back.
#[test]
fn a_ring_wrapped_by_a_ragged_steps_padding_is_not_cut_back() {
    let g = Model::compile(&model("gemma-3-270m-q4_k_m.gguf"), &CompileOptions { max_seq: Some(1024), ..Default::default() }, None).unwrap();
    let text = g.encode("The capital of France is Paris. The capital of Germany is Berlin.").unwrap();
    let long: Vec<u32> = text.iter().copied().cycle().take(760).collect();
    let mut s = g.batch_session(2, &SessionOptions::default()).unwrap();
    for chunk in long.chunks(s.step_rows()) {
        s.forward_slots(&[chunk, &[]]).unwrap();
    }
    s.forward_slots(&[&[], &long[..8]]).unwrap();
    s.truncate_row(1, 4).expect("row 1 wrote 8 positions and more padding, far under the rings");
    s.forward_slots(&[&long[..1], &long[..20]]).unwrap();
    assert_eq!(s.lens()[0], 761);
    let e = s.truncate_row(0, 50).unwrap_err().to_string();
    assert!(e.contains("window rings hold 767 positions and 780 have been written"), "{e}");
}
