//! Continuous batching: a batch session's rows are slots; requests wait in a
//! queue and take a free slot at a step boundary; each step runs every busy
//! slot's next tokens together (`Session::forward_slots`): a prompt in
//! chunks of `prefill_chunk` tokens, so a long one does not stall the
//! others' decoding, and one token for each slot that is generating. A slot
//! is freed the step its request finishes, or the step its sink says the
//! client is gone.
//!
//! A slot keeps what its last request left in its cache (the prompt cache):
//! a new request takes the free slot that holds the longest prefix of its
//! prompt, the cache is cut back to that prefix and only the rest is
//! prefilled, as a chat client's next turn repeats the whole conversation
//! so far. Where another slot, busy or free, holds more of the prompt
//! (requests that share a system prompt), its positions are copied into
//! the chosen slot's rows instead (on the CPU; `Session::copy_row_prefix`).
//! Where a window ring has wrapped since, the slot starts from empty
//! instead; off for recurrent states (which hold no earlier state) and
//! when asked.
//!
//! The batcher is synchronous and owns no thread: a server steps it on a
//! thread of its own and hands it requests between steps. A request's
//! tokens do not depend on what else is in the batch (each row's
//! arithmetic is its own; only the summation order inside a step's matmuls
//! follows the batch, within 1e-4 of the logits, `tests/tests/slots.rs`).

use crate::error::Error;
use crate::model::Model;
use crate::sampling::{logprobs, Sampler, Sampling, TokenLogprob};
use crate::session::{Session, SessionOptions};
use graphc_frontends::detokenize::Detokenizer;
use std::collections::VecDeque;

/// What a request is told; returning `false` from the sink means its
/// client is gone, and the request is dropped.
pub type Sink = Box<dyn FnMut(Event) -> bool + Send>;

pub struct Request {
    pub prompt: Vec<u32>,
    /// At most this many tokens (fewer where the context ends first).
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Stop strings: the text ends before the first one generated.
    pub stop: Vec<String>,
    /// `Some(n)`: each token's log-probability and the `n` most likely.
    pub logprobs: Option<usize>,
    pub sink: Sink,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The request left the queue for a slot; a sink that returns `false`
    /// here (its client left while it waited) is dropped before its
    /// prompt is run.
    Admitted,
    /// One generated token and the text it completes (may be empty: part
    /// of a character, or text that may begin a stop string).
    Token { id: u32, text: String, logprobs: Option<(TokenLogprob, Vec<TokenLogprob>)> },
    /// The end: text held back until now, and the counts (`cached_tokens`:
    /// of the prompt's, those its slot's cache held).
    Done { finish: FinishReason, text: String, prompt_tokens: usize, cached_tokens: usize, completion_tokens: usize },
    /// The step failed (every request in it is ended this way).
    Failed(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens`, or the context is full.
    Length,
}

impl FinishReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// What a request must fit, known before it is queued.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub vocab_size: usize,
    /// Prompt plus output, per slot.
    pub max_seq: usize,
}

impl Limits {
    pub fn check(&self, prompt: &[u32]) -> Result<(), Error> {
        if prompt.is_empty() {
            return Err(Error::Input("the prompt is empty: at least one token is needed".into()));
        }
        if let Some(t) = prompt.iter().find(|&&t| t as usize >= self.vocab_size) {
            return Err(Error::Input(format!("token id {t} is outside the vocabulary of {}", self.vocab_size)));
        }
        if prompt.len() >= self.max_seq {
            return Err(Error::Input(format!(
                "the prompt is {} tokens; the context holds {} (prompt and output together)",
                prompt.len(),
                self.max_seq
            )));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Default)]
pub struct BatcherOptions {
    /// Requests run at once (the session's rows).
    pub slots: usize,
    /// Most prompt tokens a slot runs in one step; `None` = 128 (or the
    /// session's step limit where smaller).
    pub prefill_chunk: Option<usize>,
    /// Reuse a slot's cached prefix of a new prompt (see the module
    /// comment); `None` = on where the caches can be cut back (all but
    /// recurrent states), else off. `Some(true)` where they cannot is
    /// refused, naming why.
    pub prompt_cache: Option<bool>,
    pub session: SessionOptions,
}

/// What one step did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepReport {
    /// Requests that left the queue: for a slot, or dropped because their
    /// client had gone (counted in `cancelled` too).
    pub admitted: usize,
    pub prefill_tokens: usize,
    /// Prompt tokens the admitted requests found in their slot's cache
    /// (not run again).
    pub reused_tokens: usize,
    /// Of those, the ones copied from another slot's cache.
    pub copied_tokens: usize,
    pub decode_tokens: usize,
    /// Requests that ended (finished, failed or dropped by their client).
    pub ended: usize,
    /// Of those, dropped because the client went away.
    pub cancelled: usize,
}

struct Active<'m> {
    req: Request,
    sampler: Sampler,
    detok: Detokenizer<'m>,
    /// Tokens to run next: what is left of the prompt, or the last sampled one.
    next: Vec<u32>,
    prefilling: bool,
    /// Prompt ids found in the slot's cache.
    reused: usize,
    generated: usize,
    /// `max_tokens`, cut to what the context has room for.
    budget: usize,
}

pub struct Batcher<'m> {
    model: &'m Model,
    session: Session<'m>,
    slots: Vec<Option<Active<'m>>>,
    queue: VecDeque<Request>,
    prefill_chunk: usize,
    stop_ids: Vec<u32>,
    prompt_cache: bool,
    /// Each slot's cached ids, in order (kept when its request ends).
    cached: Vec<Vec<u32>>,
}

impl<'m> Batcher<'m> {
    pub fn new(model: &'m Model, opts: &BatcherOptions) -> Result<Batcher<'m>, Error> {
        model.tokenizer()?;
        if model.plan().kv_cache.recurrent_states > 0 {
            return Err(Error::Option("continuous batching of recurrent states is not implemented (a slot cannot be reset on its own)".into()));
        }
        let session = model.batch_session(opts.slots, &opts.session)?;
        let prefill_chunk = opts.prefill_chunk.unwrap_or(128).clamp(1, session.step_rows());
        let stop_ids = model.plan().model.stop_ids.clone();
        let prompt_cache = match (opts.prompt_cache, session.cannot_truncate()) {
            (Some(true), Some(why)) => return Err(Error::Option(format!("the prompt cache needs caches that can be cut back: {why}"))),
            (asked, why) => asked.unwrap_or(true) && why.is_none(),
        };
        Ok(Batcher {
            model,
            slots: (0..opts.slots).map(|_| None).collect(),
            session,
            queue: VecDeque::new(),
            prefill_chunk,
            stop_ids,
            prompt_cache,
            cached: vec![Vec::new(); opts.slots],
        })
    }

    /// Whether a slot's cached prefix of a prompt is reused.
    pub fn prompt_cache(&self) -> bool {
        self.prompt_cache
    }

    pub fn session(&self) -> &Session<'m> {
        &self.session
    }

    pub fn limits(&self) -> Limits {
        Limits { vocab_size: self.model.plan().model.vocab_size, max_seq: self.session.resolved().max_seq }
    }

    pub fn prefill_chunk(&self) -> usize {
        self.prefill_chunk
    }

    /// Queue a request; it is refused (and its sink never called) if it
    /// does not fit `limits()`.
    pub fn submit(&mut self, req: Request) -> Result<(), Error> {
        self.limits().check(&req.prompt)?;
        self.queue.push_back(req);
        Ok(())
    }

    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    pub fn busy_slots(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Nothing running and nothing waiting.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.busy_slots() == 0
    }

    /// Admit waiting requests into free slots, run one step, and tell each
    /// request what it got.
    pub fn step(&mut self) -> StepReport {
        let mut report = StepReport::default();
        self.admit(&mut report);
        if self.busy_slots() == 0 {
            return report;
        }
        let news: Vec<Vec<u32>> = self
            .slots
            .iter_mut()
            .map(|slot| match slot {
                Some(a) => {
                    let n = if a.prefilling { a.next.len().min(self.prefill_chunk) } else { a.next.len() };
                    a.next.drain(..n).collect()
                }
                None => Vec::new(),
            })
            .collect();
        for ((slot, new), cached) in self.slots.iter().zip(&news).zip(&mut self.cached) {
            cached.extend_from_slice(new);
            match slot {
                Some(a) if a.prefilling => report.prefill_tokens += new.len(),
                Some(_) => report.decode_tokens += new.len(),
                None => {}
            }
        }
        let rows: Vec<&[u32]> = news.iter().map(|n| &n[..]).collect();
        let logits = match self.session.forward_slots(&rows) {
            Ok(l) => l,
            Err(e) => {
                self.fail_all(&e.to_string(), &mut report);
                return report;
            }
        };
        for (i, logits) in logits.into_iter().enumerate() {
            let Some(a) = self.slots[i].as_mut() else { continue };
            if a.prefilling && !a.next.is_empty() {
                continue; // more of the prompt next step
            }
            a.prefilling = false;
            if let Some(ended) = Self::emit(a, &logits, &self.stop_ids) {
                report.ended += 1;
                report.cancelled += usize::from(ended == Ended::Cancelled);
                self.slots[i] = None;
            }
        }
        report
    }

    fn admit(&mut self, report: &mut StepReport) {
        let tokenizer = self.model.tokenizer().expect("checked in Batcher::new");
        let max_seq = self.session.resolved().max_seq;
        while self.slots.iter().any(Option::is_none) {
            // Skip requests whose client left while they waited.
            let req = loop {
                let Some(mut req) = self.queue.pop_front() else { break None };
                report.admitted += 1;
                if (req.sink)(Event::Admitted) {
                    break Some(req);
                }
                report.ended += 1;
                report.cancelled += 1;
            };
            let Some(mut req) = req else { break };
            let mut sampler = match self.model.sampler(&req.sampling) {
                Ok(s) => s,
                Err(e) => {
                    (req.sink)(Event::Failed(e.to_string()));
                    report.ended += 1;
                    continue;
                }
            };
            // The free slot holding the longest prefix of the prompt (the
            // first free one without the prompt cache); at least one
            // prompt id is run, for its logits.
            let common = |cached: &[u32]| cached.iter().zip(&req.prompt).take_while(|(a, b)| a == b).count().min(req.prompt.len() - 1);
            let free = (0..self.slots.len()).filter(|&i| self.slots[i].is_none());
            let chosen = match self.prompt_cache {
                true => free.map(|i| (i, common(&self.cached[i]))).max_by_key(|&(i, common)| (common, usize::MAX - i)),
                false => free.min().map(|i| (i, 0)),
            };
            let (i, own) = chosen.expect("a free slot (the loop's condition)");
            // Another slot, busy or free, that holds more of the prompt
            // (a system prompt every request starts with) lends its
            // positions: copied into this slot's rows, where they can be.
            let donor = (0..self.slots.len())
                .filter(|&j| self.prompt_cache && j != i)
                .map(|j| (j, common(&self.cached[j])))
                .max_by_key(|&(j, common)| (common, usize::MAX - j))
                .filter(|&(_, common)| common > own);
            let reused = match donor {
                Some((j, common)) if self.session.copy_row_prefix(j, i, common).is_ok() => {
                    self.cached[i] = self.cached[j][..common].to_vec();
                    report.copied_tokens += common;
                    common
                }
                _ => {
                    // A wrapped window ring cannot be cut back: start from empty.
                    let reused = if own > 0 && self.session.truncate_row(i, own).is_ok() { own } else { 0 };
                    let cut = if reused > 0 { Ok(()) } else { self.session.reset_row(i) };
                    if let Err(e) = cut {
                        self.cached[i].clear();
                        (req.sink)(Event::Failed(e.to_string()));
                        report.ended += 1;
                        continue;
                    }
                    self.cached[i].truncate(reused);
                    reused
                }
            };
            report.reused_tokens += reused;
            sampler.seen(&req.prompt);
            let budget = req.max_tokens.min(max_seq - req.prompt.len());
            let detok = Detokenizer::new(tokenizer, false, &req.stop);
            let next = req.prompt[reused..].to_vec();
            self.slots[i] = Some(Active { req, sampler, detok, next, prefilling: true, reused, generated: 0, budget });
        }
    }

    /// Sample a slot's next token and tell its client; `Some` when the
    /// request ended.
    fn emit(a: &mut Active<'m>, logits: &[f32], stop_ids: &[u32]) -> Option<Ended> {
        let id = a.sampler.sample(logits);
        a.generated += 1;
        let done = |a: &mut Active<'m>, finish, text| {
            let (prompt_tokens, cached_tokens, completion_tokens) = (a.req.prompt.len(), a.reused, a.generated);
            (a.req.sink)(Event::Done { finish, text, prompt_tokens, cached_tokens, completion_tokens });
            Some(Ended::Finished)
        };
        if stop_ids.contains(&id) {
            let tail = a.detok.finish();
            return done(a, FinishReason::Stop, tail);
        }
        let emitted = a.detok.push(id);
        let lp = a.req.logprobs.map(|n| logprobs(logits, id, n));
        if !(a.req.sink)(Event::Token { id, text: emitted.text, logprobs: lp }) {
            return Some(Ended::Cancelled);
        }
        if emitted.stopped {
            return done(a, FinishReason::Stop, String::new());
        }
        if a.generated >= a.budget {
            let tail = a.detok.finish();
            return done(a, FinishReason::Length, tail);
        }
        a.next = vec![id];
        None
    }

    fn fail_all(&mut self, why: &str, report: &mut StepReport) {
        for slot in self.slots.iter_mut() {
            if let Some(mut a) = slot.take() {
                (a.req.sink)(Event::Failed(why.to_string()));
                report.ended += 1;
            }
        }
        // A failed step leaves the caches where they were: start clean.
        self.session.reset();
        self.cached.iter_mut().for_each(Vec::clear);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Finished,
    Cancelled,
}
