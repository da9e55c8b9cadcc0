//! Attention over the cache in place: each (batch row, head, query) reads
//! only the key rows it can see (`0..=p`, or the last `window` of them), so a
//! cache allocated at capacity costs nothing for its empty rows. GQA is
//! native: query head `h` reads kv head `h / (n_heads / n_kv_heads)`, with
//! no repeated K/V copy. Positions are per row, so a ragged batch runs the
//! same kernel as a uniform one.

use crate::cpu::reference::softmax_in_place;
use crate::cpu::simd::{self, Isa};
use rayon::prelude::*;

pub struct AttentionShape {
    pub batch: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Query rows per batch row.
    pub seq: usize,
    /// Key rows per (batch row, kv head): the cache's length or capacity.
    pub keys: usize,
    pub head_dim: usize,
    pub v_dim: usize,
}

pub struct AttentionParams {
    pub scale: f32,
    pub causal: bool,
    pub window: Option<usize>,
    pub softcap: Option<f32>,
}

/// `q [b, h, s, d]`, `k [b, kvh, t, d]`, `v [b, kvh, t, dv]`, `pos i32[b, s]`.
pub fn attention(
    isa: Isa,
    sh: &AttentionShape,
    pr: &AttentionParams,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    pos: &[i32],
) -> Vec<f32> {
    let (nh, s, d, t, dv) = (sh.n_heads, sh.seq, sh.head_dim, sh.keys, sh.v_dim);
    let group = nh / sh.n_kv_heads;
    let mut out = vec![0f32; sh.batch * nh * s * dv];
    out.par_chunks_mut(dv).enumerate().for_each_init(Vec::new, |scores, (r, o)| {
        let (bi, hi, si) = (r / (nh * s), (r / s) % nh, r % s);
        let p = pos[bi * s + si] as i64;
        let hi_key = if pr.causal { (p + 1).clamp(0, t as i64) as usize } else { t };
        let lo_key = pr.window.map_or(0, |w| (p - w as i64 + 1).clamp(0, hi_key as i64) as usize);
        let base = (bi * sh.n_kv_heads + hi / group) * t;
        let qrow = &q[r * d..(r + 1) * d];
        scores.clear();
        scores.extend((lo_key..hi_key).map(|j| simd::dot_f32(isa, qrow, &k[(base + j) * d..(base + j + 1) * d]) * pr.scale));
        if scores.is_empty() {
            return;
        }
        softmax_in_place(scores, pr.softcap);
        for (j, &w) in (lo_key..hi_key).zip(scores.iter()) {
            simd::axpy(isa, w, &v[(base + j) * dv..(base + j + 1) * dv], o);
        }
    });
    out
}
