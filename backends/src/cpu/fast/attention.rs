//! Attention over the cache in place: each (batch row, head, query) reads
//! only the key rows it can see (`0..=p`, or the last `window` of them), so a
//! cache allocated at capacity costs nothing for its empty rows. A window's
//! ring cache (position `x` in row `x % keys`) is read as at most two runs of
//! rows, in position order. GQA is
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
    /// K/V are rings of `keys` rows: position `x` is in row `x % keys`.
    pub ring: bool,
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
        let base = (bi * sh.n_kv_heads + hi / group) * t;
        let qrow = &q[r * d..(r + 1) * d];
        // The visible keys as (first row, rows) segments of the cache, in
        // position order: one segment, or two where a ring wraps.
        let segments: [(usize, usize); 2] = match pr.window {
            Some(w) if pr.ring => {
                let lo = (p - w as i64 + 1).max(0);
                let n = (p - lo + 1).max(0) as usize;
                let first = (lo.max(0) as usize) % t;
                let head = n.min(t - first);
                [(first, head), (0, n - head)]
            }
            _ => {
                let hi_key = if pr.causal { (p + 1).clamp(0, t as i64) as usize } else { t };
                let lo_key = pr.window.map_or(0, |w| (p - w as i64 + 1).clamp(0, hi_key as i64) as usize);
                [(lo_key, hi_key.saturating_sub(lo_key)), (0, 0)]
            }
        };
        let n = segments[0].1 + segments[1].1;
        if n == 0 {
            return;
        }
        let mut scores = vec![0f32; n];
        let mut at = 0;
        for &(first, rows) in &segments {
            let keys = &k[(base + first) * d..(base + first + rows) * d];
            simd::scores(isa, qrow, keys, pr.scale, &mut scores[at..at + rows]);
            at += rows;
        }
        softmax_in_place(&mut scores, pr.softcap);
        let mut at = 0;
        for &(first, rows) in &segments {
            simd::weighted_sum(isa, &scores[at..at + rows], &v[(base + first) * dv..(base + first + rows) * dv], o);
            at += rows;
        }
    });
    out
}
