//! Attention over the cache in place: each (batch row, head, query) reads
//! only the key rows it can see (`0..=p`, or the last `window` of them), so a
//! cache allocated at capacity costs nothing for its empty rows. A window's
//! ring cache (position `x` in row `x % keys`) is read as at most two runs of
//! rows, in position order. GQA is
//! native: query head `h` reads kv head `h / (n_heads / n_kv_heads)`, with
//! no repeated K/V copy. Positions are per row, so a ragged batch runs the
//! same kernel as a uniform one. The query heads of one GQA group at one
//! position share their keys: their scores are register tiles (the
//! prefill GEMM's), each key row read once for the group.

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
    let (nh, nkv, s, d, t, dv) = (sh.n_heads, sh.n_kv_heads, sh.seq, sh.head_dim, sh.keys, sh.v_dim);
    let group = nh / nkv;
    let (mr, nr) = simd::tile_shape(isa);
    // One task per (batch row, kv head, query position): the `group` query
    // heads reading that kv head there see the same keys, so their scores
    // come from register tiles of up to `mr` queries × `nr` keys, each key
    // row loaded once for all of them. Results land as [b, kvh, s, group, dv].
    // Too few (batch row, kv head, position) triples to keep every thread
    // busy (decode: often one): split each group's heads over tasks instead.
    let per_task = if sh.batch * nkv * s >= 4 * pool.threads() { group } else { 1 };
    let splits = group / per_task;
    let mut grouped = vec![0f32; sh.batch * nh * s * dv];
    for_each_chunk_mut(pool, &mut grouped, per_task * dv, |task, out| {
        let (sub, task) = (task % splits, task / splits);
        let (bi, kvh, si) = (task / (nkv * s), (task / s) % nkv, task % s);
        let first_head = kvh * group + sub * per_task;
        let p = pos[bi * s + si] as i64;
        let base = (bi * nkv + kvh) * t;
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
        let mut qbuf = vec![0f32; mr * d];
        let mut scores = vec![0f32; per_task * n];
        let mut acc: simd::Tile = [[0f32; 4]; 8];
        for h0 in (0..per_task).step_by(mr) {
            let rows = mr.min(per_task - h0);
            for r in 0..rows {
                let src = ((bi * nh + first_head + h0 + r) * s + si) * d;
                qbuf[r * d..(r + 1) * d].copy_from_slice(&q[src..src + d]);
            }
            qbuf[rows * d..].fill(0.0);
            let mut at = 0;
            // A tile mostly of padding rows costs more than row-by-row dots.
            if 2 * rows < mr {
                for &(first, len) in &segments {
                    let keys = &k[(base + first) * d..(base + first + len) * d];
                    for r in 0..rows {
                        let dst = (h0 + r) * n + at;
                        simd::scores(isa, &qbuf[r * d..(r + 1) * d], keys, pr.scale, &mut scores[dst..dst + len]);
                    }
                    at += len;
                }
                continue;
            }
            for &(first, len) in &segments {
                let keys = &k[(base + first) * d..(base + first + len) * d];
                let mut j = 0;
                while j + nr <= len {
                    simd::tile(isa, &qbuf, d, &keys[j * d..], d, d, &mut acc);
                    for r in 0..rows {
                        for c in 0..nr {
                            scores[(h0 + r) * n + at + j + c] = acc[r][c] * pr.scale;
                        }
                    }
                    j += nr;
                }
                for jj in j..len {
                    for r in 0..rows {
                        scores[(h0 + r) * n + at + jj] = simd::dot_f32(isa, &qbuf[r * d..(r + 1) * d], &keys[jj * d..(jj + 1) * d]) * pr.scale;
                    }
                }
                at += len;
            }
        }
        for row in scores.chunks_exact_mut(n) {
            softmax_in_place(row, pr.softcap);
        }
        let mut at = 0;
        for &(first, len) in &segments {
            if len > 0 {
                simd::weighted_sum_rows(isa, &scores[at..], n, len, &v[(base + first) * dv..(base + first + len) * dv], out);
            }
            at += len;
        }
    });
    if group == 1 {
        return grouped; // [b, nkv = nh, s, 1, dv] is already [b, nh, s, dv]
    }
    let mut out = vec![0f32; grouped.len()];
    for (task, rows) in grouped.chunks_exact(group * dv).enumerate() {
        let (bi, kvh, si) = (task / (nkv * s), (task / s) % nkv, task % s);
        for (g, row) in rows.chunks_exact(dv).enumerate() {
            let dst = ((bi * nh + kvh * group + g) * s + si) * dv;
            out[dst..dst + dv].copy_from_slice(row);
        }
    }
    out
}
