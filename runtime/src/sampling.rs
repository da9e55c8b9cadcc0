//! Token sampling: penalties on the logits, then greedy (temperature 0) or
//! seeded sampling with temperature, top-k, top-p and min-p. The generator is
//! splitmix64, written here so a seed gives the same tokens on every machine
//! and every version of a dependency.
//!
//! Order, as llama.cpp's default chain: logit biases, penalties, top-k, softmax at the
//! temperature, top-p, min-p, draw. Penalties apply before greedy too, so
//! a repeat penalty changes greedy tokens as it does in llama.cpp. JSON
//! mode (`Format::JsonObject`) masks the tokens that cannot continue a JSON
//! object after the penalties, before the rest (`json_mode`).

use crate::json_mode::JsonPrefix;
use crate::json_schema::{Schema, SchemaPrefix};
use crate::vocabulary::TokenBytes;
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    /// 0 means greedy.
    pub temperature: f32,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    /// Drop tokens less likely than `min_p` times the most likely one.
    pub min_p: Option<f32>,
    pub seed: u64,
    pub penalties: Penalties,
    /// What the text must be: any (`Text`), or a JSON object
    /// (`JsonObject`: `json_mode`).
    pub format: Format,
    /// Added to a token's logit before anything else (OpenAI's
    /// `logit_bias`: -100 all but bans a token, 100 all but forces it).
    pub logit_bias: Vec<(u32, f32)>,
}

/// The shape the generated text must take.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Format {
    #[default]
    Text,
    /// A JSON object, then an end token (OpenAI's `json_object`).
    JsonObject,
    /// A JSON value this schema admits, then an end token (OpenAI's
    /// `json_schema`, Ollama's `format: {schema}`).
    JsonSchema(Arc<Schema>),
}

/// What a constrained sampler checks each token against: the bytes of
/// every token, the end tokens (allowed once the value is complete), and
/// the value so far (`json_mode`'s object, or a value of a schema).
#[derive(Clone, Debug)]
pub struct Constraint {
    vocabulary: TokenBytes,
    ends: Vec<u32>,
    value: ValuePrefix,
}

/// The value so far, under JSON mode or a schema.
#[derive(Clone, Debug)]
enum ValuePrefix {
    Object(JsonPrefix),
    Schema(Arc<Schema>, SchemaPrefix),
}

impl ValuePrefix {
    /// Feed `bytes` to the value so far (`false`: they cannot continue it).
    fn feed(&mut self, bytes: &[u8]) -> bool {
        match self {
            ValuePrefix::Object(p) => p.feed(bytes),
            ValuePrefix::Schema(schema, p) => p.feed(schema, bytes),
        }
    }

    /// Whether `bytes` would continue the value (on a copy of its state).
    fn accepts(&self, bytes: &[u8]) -> bool {
        match self {
            ValuePrefix::Object(p) => {
                let mut next = *p;
                next.feed(bytes)
            }
            ValuePrefix::Schema(schema, p) => p.accepts(schema, bytes),
        }
    }

    fn is_done(&self) -> bool {
        match self {
            ValuePrefix::Object(p) => p.is_done(),
            ValuePrefix::Schema(_, p) => p.is_done(),
        }
    }
}

impl Constraint {
    /// JSON mode: a JSON object.
    pub fn json_object(vocabulary: TokenBytes, ends: Vec<u32>) -> Constraint {
        Constraint { vocabulary, ends, value: ValuePrefix::Object(JsonPrefix::default()) }
    }

    /// A value `schema` admits.
    pub fn json_schema(vocabulary: TokenBytes, ends: Vec<u32>, schema: Arc<Schema>) -> Constraint {
        Constraint { vocabulary, ends, value: ValuePrefix::Schema(schema, SchemaPrefix::default()) }
    }

    /// Whether token `id` may come next: an end token once the value is
    /// complete; else a token of some bytes (a control token adds none)
    /// that keep the text a prefix of the value.
    pub fn allows(&self, id: u32) -> bool {
        if self.ends.contains(&id) {
            return self.value.is_done();
        }
        match self.vocabulary.get(id as usize) {
            Some(bytes) if !bytes.is_empty() => self.value.accepts(bytes),
            _ => false,
        }
    }

    /// `allows` of every token, found by one walk of the vocabulary's trie.
    pub fn allowed(&self) -> Vec<bool> {
        let mut allowed = vec![false; self.vocabulary.len()];
        match &self.value {
            ValuePrefix::Object(p) => self.vocabulary.walk(p, &|s: &mut JsonPrefix, b| s.feed(&[b]), &JsonPrefix::in_clean_string, &mut allowed),
            ValuePrefix::Schema(schema, p) => {
                self.vocabulary.walk(p, &|s: &mut SchemaPrefix, b| s.feed(schema, &[b]), &SchemaPrefix::in_clean_string, &mut allowed)
            }
        };
        let done = self.value.is_done();
        for &e in &self.ends {
            if let Some(a) = allowed.get_mut(e as usize) {
                *a = done;
            }
        }
        allowed
    }

    /// Take token `id` (one `allows` allowed).
    pub fn advance(&mut self, id: u32) {
        if let Some(bytes) = self.vocabulary.get(id as usize) {
            let fed = self.value.feed(bytes);
            debug_assert!(fed || self.ends.contains(&id), "token {id} continues no value");
        }
    }

    /// The end token a step falls back to where no token is allowed (a
    /// vocabulary that cannot spell what must come next).
    fn fallback(&self) -> Option<u32> {
        self.ends.first().copied()
    }
}

/// Penalties on tokens already seen. All off by default.
#[derive(Clone, Debug, PartialEq)]
pub struct Penalties {
    /// OpenAI's: subtracted once from the logit of every token generated so far.
    pub presence: f32,
    /// OpenAI's: subtracted from a token's logit once per time it was generated.
    pub frequency: f32,
    /// llama.cpp's (and CTRL's): a seen token's positive logit is divided by
    /// it, a negative one multiplied; 1 is off. Seen = the last
    /// `repeat_last_n` tokens of prompt and output.
    pub repeat: f32,
    pub repeat_last_n: usize,
}

impl Default for Penalties {
    fn default() -> Penalties {
        Penalties { presence: 0.0, frequency: 0.0, repeat: 1.0, repeat_last_n: 64 }
    }
}

impl Penalties {
    pub fn is_off(&self) -> bool {
        self.presence == 0.0 && self.frequency == 0.0 && self.repeat == 1.0
    }
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling::greedy()
    }
}

impl Sampling {
    pub fn greedy() -> Sampling {
        Sampling {
            temperature: 0.0,
            top_k: None,
            top_p: None,
            min_p: None,
            seed: 0,
            penalties: Penalties::default(),
            format: Format::Text,
            logit_bias: Vec::new(),
        }
    }
}

/// Index of the largest logit; ties go to the smaller id.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// A token's log-probability under the model (the log-softmax of the raw
/// logits, before penalties and temperature, as OpenAI and vLLM report it).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
}

/// The log-probability of `id` and the `top` most likely tokens (ties to
/// the smaller id), from raw logits.
pub fn logprobs(logits: &[f32], id: u32, top: usize) -> (TokenLogprob, Vec<TokenLogprob>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let log_sum = logits.iter().map(|&l| (l as f64 - max).exp()).sum::<f64>().ln() + max;
    let lp = |i: usize| TokenLogprob { id: i as u32, logprob: (logits[i] as f64 - log_sum) as f32 };
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    let top = top.min(idx.len());
    if top > 0 {
        idx.select_nth_unstable_by(top - 1, |&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        idx.truncate(top);
        idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    } else {
        idx.clear();
    }
    (lp(id as usize), idx.into_iter().map(lp).collect())
}

pub struct Sampler {
    cfg: Sampling,
    state: u64,
    /// Tokens the repeat penalty looks back over (prompt, then output).
    recent: std::collections::VecDeque<u32>,
    /// Times each generated token was generated (presence / frequency).
    counts: std::collections::HashMap<u32, u32>,
    /// JSON mode's or a schema's constraint.
    json: Option<Constraint>,
}

/// Tokens checked in logit order before a greedy JSON-mode step masks the
/// whole vocabulary.
const JSON_GREEDY_CANDIDATES: usize = 64;

impl Sampler {
    /// A sampler of `Format::Text`. Another format needs the model's
    /// vocabulary: `Model::sampler` builds it (`with_json`); asking this
    /// for one is a programming error, and panics rather than sample
    /// unconstrained.
    pub fn new(cfg: &Sampling) -> Sampler {
        assert!(cfg.format == Format::Text, "a {:?} sampler is built by Model::sampler", cfg.format);
        Sampler { cfg: cfg.clone(), state: cfg.seed, recent: Default::default(), counts: Default::default(), json: None }
    }

    /// A constrained sampler (`Format::JsonObject`, `Format::JsonSchema`):
    /// each token it picks keeps the text a prefix of what `constraint`
    /// admits, an end token only once it is complete (the mask applies
    /// before temperature, top-k, top-p, min-p).
    pub fn with_constraint(cfg: &Sampling, constraint: Constraint) -> Sampler {
        let mut s = Sampler::new(&Sampling { format: Format::Text, ..cfg.clone() });
        s.cfg.format = cfg.format.clone();
        s.json = Some(constraint);
        s
    }

    /// Tokens before the first sampled one (the prompt), for the repeat penalty.
    pub fn seen(&mut self, prompt: &[u32]) {
        for &t in prompt {
            self.remember(t);
        }
    }

    fn remember(&mut self, t: u32) {
        if self.cfg.penalties.repeat_last_n == 0 {
            return;
        }
        if self.recent.len() == self.cfg.penalties.repeat_last_n {
            self.recent.pop_front();
        }
        self.recent.push_back(t);
    }

    fn next_f64(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The biased and penalized logits (a copy only when a bias or a
    /// penalty is on).
    fn penalized<'a>(&self, logits: &'a [f32]) -> std::borrow::Cow<'a, [f32]> {
        let p = &self.cfg.penalties;
        if p.is_off() && self.cfg.logit_bias.is_empty() {
            return std::borrow::Cow::Borrowed(logits);
        }
        let mut l = logits.to_vec();
        for &(t, bias) in &self.cfg.logit_bias {
            if let Some(v) = l.get_mut(t as usize) {
                *v += bias;
            }
        }
        if p.repeat != 1.0 {
            let seen: std::collections::HashSet<u32> = self.recent.iter().copied().collect();
            for t in seen {
                if let Some(v) = l.get_mut(t as usize) {
                    *v = if *v > 0.0 { *v / p.repeat } else { *v * p.repeat };
                }
            }
        }
        for (&t, &n) in &self.counts {
            if let Some(v) = l.get_mut(t as usize) {
                *v -= p.presence + p.frequency * n as f32;
            }
        }
        std::borrow::Cow::Owned(l)
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let penalized = self.penalized(logits);
        let t = match self.json.take() {
            None => self.choose(&penalized),
            Some(mut json) => {
                let t = self.choose_json(&json, &penalized);
                json.advance(t);
                self.json = Some(json);
                t
            }
        };
        self.remember(t);
        *self.counts.entry(t).or_default() += 1;
        t
    }

    /// `choose` among the tokens `json` allows: greedy takes the first
    /// allowed of the most likely few, else (or sampling) every disallowed
    /// token's logit is masked to -inf first.
    fn choose_json(&mut self, json: &Constraint, logits: &[f32]) -> u32 {
        if self.cfg.temperature <= 0.0 {
            let mut idx: Vec<usize> = (0..logits.len()).collect();
            let few = JSON_GREEDY_CANDIDATES.min(idx.len());
            if few > 0 {
                idx.select_nth_unstable_by(few - 1, |&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
                idx.truncate(few);
                idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
            }
            if let Some(&t) = idx.iter().find(|&&t| json.allows(t as u32)) {
                return t as u32;
            }
        }
        let allowed = json.allowed();
        let masked: Vec<f32> =
            logits.iter().enumerate().map(|(t, &l)| if allowed.get(t).copied().unwrap_or(false) { l } else { f32::NEG_INFINITY }).collect();
        if masked.iter().all(|l| *l == f32::NEG_INFINITY) {
            // Nothing in the vocabulary continues the object: end.
            return json.fallback().unwrap_or(0);
        }
        self.choose(&masked)
    }

    fn choose(&mut self, logits: &[f32]) -> u32 {
        if self.cfg.temperature <= 0.0 {
            return argmax(logits);
        }
        let mut idx: Vec<usize> = (0..logits.len()).collect();
        idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        if let Some(k) = self.cfg.top_k {
            idx.truncate(k.max(1));
        }
        let t = self.cfg.temperature as f64;
        let m = logits[idx[0]] as f64;
        let mut probs: Vec<f64> = idx.iter().map(|&i| ((logits[i] as f64 - m) / t).exp()).collect();
        let sum: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= sum);
        if let Some(p) = self.cfg.top_p {
            let mut acc = 0.0;
            let mut keep = probs.len();
            for (i, q) in probs.iter().enumerate() {
                acc += q;
                if acc >= p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep);
            idx.truncate(keep);
        }
        if let Some(min_p) = self.cfg.min_p {
            // probs[0] is the most likely token; it always stays.
            let floor = probs[0] * min_p as f64;
            let keep = probs.iter().take_while(|&&q| q >= floor).count().max(1);
            probs.truncate(keep);
            idx.truncate(keep);
        }
        let s: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= s);
        let r = self.next_f64();
        let mut acc = 0.0;
        for (i, q) in probs.iter().enumerate() {
            acc += q;
            if r < acc {
                return idx[i] as u32;
            }
        }
        *idx.last().unwrap() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampling(temperature: f32, top_k: Option<usize>, top_p: Option<f32>, seed: u64) -> Sampling {
        Sampling { temperature, top_k, top_p, seed, ..Sampling::greedy() }
    }

    #[test]
    fn end_tokens_only_once_the_object_is_closed() {
        let vocabulary: TokenBytes =
            Arc::new(crate::vocabulary::Vocabulary::new(["{", "}", "\"a\"", ":", " 1", "", "x"].iter().map(|t| t.as_bytes().into()).collect()));
        let end = 5;
        let mut j = Constraint::json_object(vocabulary, vec![end]);
        let allowed = |j: &Constraint| (0..7).filter(|&t| j.allows(t)).collect::<Vec<u32>>();
        assert_eq!(allowed(&j), [0]);
        j.advance(0);
        assert_eq!(allowed(&j), [1, 2]);
        for t in [2, 3, 4] {
            j.advance(t);
        }
        assert_eq!(allowed(&j), [1]);
        j.advance(1);
        assert_eq!(allowed(&j), [end]);
    }

    #[test]
    fn greedy_ties_go_to_the_smaller_id() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_seed_dependent() {
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let cfg = |seed| sampling(1.0, Some(20), Some(0.9), seed);
        let run = |seed| {
            let mut s = Sampler::new(&cfg(seed));
            (0..32).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        // top-k = 1 is greedy whatever the temperature.
        let mut s = Sampler::new(&sampling(5.0, Some(1), None, 3));
        assert!((0..10).all(|_| s.sample(&logits) == argmax(&logits)));
    }

    #[test]
    fn min_p_keeps_only_tokens_near_the_best() {
        // Token 0 at p ~ 0.58, token 1 at ~ 0.21, the rest far below.
        let logits = [3.0, 2.0, -3.0, -3.0, -3.0, -3.0];
        let draws = |min_p| {
            let mut s = Sampler::new(&Sampling { min_p, ..sampling(1.0, None, None, 11) });
            (0..400).map(|_| s.sample(&logits)).collect::<std::collections::BTreeSet<u32>>()
        };
        assert_eq!(draws(Some(0.3)), [0, 1].into(), "min_p 0.3 keeps p >= 0.3 * p_max");
        assert_eq!(draws(Some(0.9)), [0].into());
        // Control: without min_p the tail is drawn too.
        assert!(draws(None).len() > 2);
    }

    #[test]
    fn penalties_move_greedy_as_defined() {
        let logits = [2.0, 1.9, 1.0, -1.0];
        let greedy = |penalties: Penalties, prompt: &[u32], n| {
            let mut s = Sampler::new(&Sampling { penalties, ..Sampling::greedy() });
            s.seen(prompt);
            (0..n).map(|_| s.sample(&logits)).collect::<Vec<u32>>()
        };
        // Off: always token 0.
        assert_eq!(greedy(Penalties::default(), &[], 3), [0, 0, 0]);
        // Presence 0.2: token 0 drops to 1.8 after one use, below 1.9.
        assert_eq!(greedy(Penalties { presence: 0.2, ..Default::default() }, &[], 3), [0, 1, 0]);
        // Frequency 0.15: 0 (2.0 -> 1.85), 1 (1.9 -> 1.75), 0 (1.85 -> 1.70), 1.
        assert_eq!(greedy(Penalties { frequency: 0.15, ..Default::default() }, &[], 4), [0, 1, 0, 1]);
        // Repeat 1.1 with token 0 in the prompt: 2.0 / 1.1 = 1.82 < 1.9.
        assert_eq!(greedy(Penalties { repeat: 1.1, ..Default::default() }, &[0], 1), [1]);
        // ... but not once the prompt token is out of the window.
        assert_eq!(greedy(Penalties { repeat: 1.1, repeat_last_n: 1, ..Default::default() }, &[0, 3], 1), [0]);
        // A negative logit is multiplied: token 3 goes further down, not up.
        let mut s = Sampler::new(&Sampling { penalties: Penalties { repeat: 2.0, ..Default::default() }, ..Sampling::greedy() });
        s.seen(&[3]);
        assert_eq!(s.penalized(&logits)[3], -2.0);
    }

    #[test]
    fn logprobs_are_a_normalized_log_softmax_with_the_top_tokens_in_order() {
        let logits = [1.0f32, 3.0, 3.0, -2.0];
        let (chosen, top) = logprobs(&logits, 3, 3);
        let total: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        assert!((chosen.logprob as f64 - (-2.0 - total.ln())).abs() < 1e-6);
        assert_eq!(top.iter().map(|t| t.id).collect::<Vec<_>>(), [1, 2, 0]);
        let p: f64 = (0..4).map(|i| (logprobs(&logits, i, 0).0.logprob as f64).exp()).sum();
        assert!((p - 1.0).abs() < 1e-6);
    }
}
