//! A session: one sequence's loop-carried state (its KV cache) over a loaded
//! model, stepped by prefill and decode on the reference CPU executor.

use crate::error::Error;
use crate::model::Model;
use crate::sampling::{Sampler, Sampling};
use graphc_backends::cpu::reference;
use graphc_backends::Tensor;
use graphc_ir::{Dim, Op};
use std::collections::HashMap;
use std::time::Instant;

/// Session options; `None` is resolved once in `Session::new` (see `resolved`).
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// Worker threads; `None` = the machine's cores.
    pub threads: Option<usize>,
}

/// What `SessionOptions` resolved to, with where each value came from.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ResolvedSession {
    pub threads: usize,
    pub threads_source: &'static str,
    pub device: String,
    pub max_seq: usize,
}

pub struct Session<'m> {
    model: &'m Model,
    pool: rayon::ThreadPool,
    resolved: ResolvedSession,
    states: HashMap<String, Tensor>,
    len: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub stopped_on_eos: bool,
    pub prefill_secs: f64,
    pub decode_secs: f64,
}

impl<'m> Session<'m> {
    pub(crate) fn new(model: &'m Model, opts: &SessionOptions) -> Result<Session<'m>, Error> {
        let (threads, threads_source) = match opts.threads {
            Some(0) => return Err(Error::Option("--threads must be at least 1".into())),
            Some(n) => (n, "option"),
            None => (std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1), "machine"),
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| Error::Option(format!("cannot start {threads} threads: {e}")))?;
        let plan = model.plan();
        let resolved = ResolvedSession {
            threads,
            threads_source,
            device: plan.options.device.clone(),
            max_seq: plan.options.max_seq,
        };
        let mut s = Session { model, pool, resolved, states: HashMap::new(), len: 0 };
        s.reset();
        Ok(s)
    }

    pub fn resolved(&self) -> &ResolvedSession {
        &self.resolved
    }

    /// Tokens held in the cache.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forget the sequence: every state back to empty (`batch` 1, `past` 0).
    pub fn reset(&mut self) {
        let env: HashMap<String, i64> = [("batch".to_string(), 1), ("past".to_string(), 0)].into();
        self.states.clear();
        for n in self.model.graph().g.node_weights() {
            if let Op::State { name, ty } = &n.op {
                let shape: Vec<usize> = ty.shape.iter().map(|d: &Dim| d.eval(&env).unwrap_or(0) as usize).collect();
                let numel = shape.iter().product();
                self.states.insert(name.clone(), Tensor::f32(shape, vec![0.0; numel]));
            }
        }
        self.len = 0;
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<(), Error> {
        let vocab = self.model.plan().model.vocab_size;
        if tokens.is_empty() {
            return Err(Error::Input("empty prompt: at least one token is needed".into()));
        }
        if let Some((i, t)) = tokens.iter().enumerate().find(|(_, &t)| t as usize >= vocab) {
            return Err(Error::Input(format!("token id {t} at position {i} is outside the vocabulary of {vocab}")));
        }
        let max_seq = self.resolved.max_seq;
        if self.len + tokens.len() > max_seq {
            return Err(Error::Input(format!(
                "{} tokens ({} in the cache + {} new) exceed max_seq {max_seq}",
                self.len + tokens.len(),
                self.len,
                tokens.len()
            )));
        }
        Ok(())
    }

    /// Run `tokens` through the model after what the cache holds; returns the
    /// logits at the last of them.
    pub fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, Error> {
        self.check_tokens(tokens)?;
        let n = tokens.len();
        let inputs: HashMap<String, Tensor> = [
            ("tokens".to_string(), Tensor::i32(vec![1, n], tokens.iter().map(|&t| t as i32).collect())),
            ("positions".to_string(), Tensor::i32(vec![1, n], (self.len..self.len + n).map(|p| p as i32).collect())),
            ("last_rows".to_string(), Tensor::i32(vec![1], vec![n as i32 - 1])),
        ]
        .into();
        let model = self.model;
        let states = &self.states;
        let out = self.pool.install(|| reference::run(model.graph(), &inputs, states, model))?;
        self.states = out.states;
        self.len += n;
        let logits = out.outputs.get("logits").ok_or_else(|| Error::Input("the plan has no `logits` output".into()))?;
        Ok(logits.as_f32().unwrap_or_default().to_vec())
    }

    /// Prefill a prompt from an empty cache.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>, Error> {
        self.reset();
        self.forward(prompt)
    }

    /// One decode step.
    pub fn decode(&mut self, token: u32) -> Result<Vec<f32>, Error> {
        self.forward(&[token])
    }

    /// Prefill `prompt`, then generate up to `max_new` tokens, calling
    /// `on_token` for each; stops after a stop id (which is the last token).
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        sampling: &Sampling,
        mut on_token: impl FnMut(u32),
    ) -> Result<Generation, Error> {
        let stop = self.model.plan().model.stop_ids.clone();
        let mut sampler = Sampler::new(sampling);
        let t0 = Instant::now();
        let mut logits = self.prefill(prompt)?;
        let prefill_secs = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut tokens = Vec::new();
        let mut stopped_on_eos = false;
        for step in 0..max_new {
            let t = sampler.sample(&logits);
            tokens.push(t);
            on_token(t);
            if stop.contains(&t) {
                stopped_on_eos = true;
                break;
            }
            if step + 1 == max_new || self.len >= self.resolved.max_seq {
                break;
            }
            logits = self.decode(t)?;
        }
        Ok(Generation { tokens, stopped_on_eos, prefill_secs, decode_secs: t1.elapsed().as_secs_f64() })
    }
}
