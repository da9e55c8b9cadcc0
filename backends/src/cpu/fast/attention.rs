//! Attention over the cache in place: each (batch row, head, query) reads
//! only the key rows it can see (`0..=p`, or the last `window` of them), so a
//! cache allocated at capacity costs nothing for its empty rows. GQA is
//! native: query head `h` reads kv head `h / (n_heads / n_kv_heads)`, with
//! no repeated K/V copy. Positions are per row, so a ragged batch runs the
//! same kernel as a uniform one.

use crate::cpu::pool::{for_each_chunk_mut, SpinPool};
use crate::cpu::reference::softmax_in_place;
use crate::cpu::simd::{self, Isa};

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

/// The operands: `q [b, h, s, d]`, `k [b, kvh, t, d]`, `v [b, kvh, t, dv]`,
/// `pos i32[b, s]`.
pub struct AttentionInputs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub pos: &'a [i32],
}

pub fn attention(pool: &SpinPool, isa: Isa, sh: &AttentionShape, pr: &AttentionParams, inp: &AttentionInputs<'_>) -> Vec<f32> {
    let AttentionInputs { q, k, v, pos } = *inp;
    let (nh, s, d, t, dv) = (sh.n_heads, sh.seq, sh.head_dim, sh.keys, sh.v_dim);
    let group = nh / sh.n_kv_heads;
    let mut out = vec![0f32; sh.batch * nh * s * dv];
    for_each_chunk_mut(pool, &mut out, dv, |r, o| {
        let (bi, hi, si) = (r / (nh * s), (r / s) % nh, r % s);
        let p = pos[bi * s + si] as i64;
        let hi_key = if pr.causal { (p + 1).clamp(0, t as i64) as usize } else { t };
        let lo_key = pr.window.map_or(0, |w| (p - w as i64 + 1).clamp(0, hi_key as i64) as usize);
        let base = (bi * sh.n_kv_heads + hi / group) * t;
        let qrow = &q[r * d..(r + 1) * d];
        let mut scores = vec![0f32; hi_key.saturating_sub(lo_key)];
        if scores.is_empty() {
            return;
        }
        simd::scores(isa, qrow, &k[(base + lo_key) * d..(base + hi_key) * d], pr.scale, &mut scores);
        softmax_in_place(&mut scores, pr.softcap);
        simd::weighted_sum(isa, &scores, &v[(base + lo_key) * dv..(base + hi_key) * dv], o);
    });
    out
}
