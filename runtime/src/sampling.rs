//! Token sampling: greedy (temperature 0), or seeded sampling with
//! temperature, top-k and top-p. The generator is splitmix64, written here so
//! a seed gives the same tokens on every machine and every version of a
//! dependency.

#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    /// 0 means greedy.
    pub temperature: f32,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub seed: u64,
}

impl Sampling {
    pub fn greedy() -> Sampling {
        Sampling { temperature: 0.0, top_k: None, top_p: None, seed: 0 }
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

pub struct Sampler {
    cfg: Sampling,
    state: u64,
}

impl Sampler {
    pub fn new(cfg: &Sampling) -> Sampler {
        Sampler { cfg: cfg.clone(), state: cfg.seed }
    }

    fn next_f64(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
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
            let s: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|p| *p /= s);
        }
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

    #[test]
    fn greedy_ties_go_to_the_smaller_id() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_seed_dependent() {
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let cfg = |seed| Sampling { temperature: 1.0, top_k: Some(20), top_p: Some(0.9), seed };
        let run = |seed| {
            let mut s = Sampler::new(&cfg(seed));
            (0..32).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        // top-k = 1 is greedy whatever the temperature.
        let mut s = Sampler::new(&Sampling { temperature: 5.0, top_k: Some(1), top_p: None, seed: 3 });
        assert!((0..10).all(|_| s.sample(&logits) == argmax(&logits)));
    }
}
