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
//!
//! Two paths take over where they apply: prefill on the outer-product
//! kernel (`prefill_panels`: keys laid out once per step, a block of
//! positions × heads per task) and decode over long caches split along the
//! keys (`decode_split`); `per_position` serves the rest.

use crate::cpu::pool::{for_each_chunk_mut, SpinPool};
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
/// `pos i32[b, s]`, and where the attention has them `sinks [h]`, one
/// logit per query head in each softmax's denominator.
pub struct AttentionInputs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub pos: &'a [i32],
    pub sinks: Option<&'a [f32]>,
}

pub fn attention(pool: &SpinPool, isa: Isa, sh: &AttentionShape, pr: &AttentionParams, inp: &AttentionInputs<'_>) -> Vec<f32> {
    let grouped = match prefill_panels(pool, isa, sh, pr, inp) {
        Some(g) => g,
        None => match decode_split(pool, isa, sh, pr, inp) {
            Some(g) => g,
            None => per_position(pool, isa, sh, pr, inp),
        },
    };
    let (nh, nkv, s, dv) = (sh.n_heads, sh.n_kv_heads, sh.seq, sh.v_dim);
    let group = nh / nkv;
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

/// The key positions `[lo, hi)` a causal query at position `p` sees: up
/// to itself (a full cache also stops at its `t` rows), the last `window`
/// of them where there is one. Positions, not cache rows: a ring holds
/// position `x` in row `x % t`.
fn visible_positions(pr: &AttentionParams, t: usize, p: i32) -> (usize, usize) {
    let p = p as i64;
    let hi = if pr.ring { (p + 1).max(0) } else { (p + 1).clamp(0, t as i64) };
    let lo = pr.window.map_or(0, |w| (p - w as i64 + 1).clamp(0, hi));
    (lo as usize, hi as usize)
}

/// Query positions per task of the prefill path: enough that the task's
/// (position, head) rows fill the outer-product kernel's `OUTER_ROWS`
/// twice (GQA groups of 3 or 4 heads divide 12 evenly).
fn positions_per_block(group: usize) -> usize {
    (2 * simd::OUTER_ROWS / group).max(1)
}

/// Prefill attention on the outer-product kernel (`simd::outer_tile`), in
/// the grouped layout `[b, kvh, s, group, dv]`; `None` where it does not
/// apply (no kernel at this ISA, a single query row, not causal, `dv` not a
/// multiple of `simd::PANEL`, or a ring too short to hold every key the
/// step's queries see). Per (batch row, kv head), the keys visible to any
/// query of the step are laid out once in position order: K as k-major
/// panels of `PANEL` keys, V as rows. A task takes a block of query
/// positions with all their heads (up to `OUTER_ROWS` rows), scores them
/// against the panels covering the block's keys, masks each row to its own
/// visible keys (zero weight elsewhere), and multiplies by V, `PANEL`
/// value columns at a time. Per row the same softmax over the same keys as
/// the reference; the dot products are FMA chains in key order.
pub fn prefill_panels(pool: &SpinPool, isa: Isa, sh: &AttentionShape, pr: &AttentionParams, inp: &AttentionInputs<'_>) -> Option<Vec<f32>> {
    const P: usize = simd::PANEL;
    let AttentionInputs { q, k, v, pos, sinks } = *inp;
    let (b, nh, nkv, s, d, t, dv) = (sh.batch, sh.n_heads, sh.n_kv_heads, sh.seq, sh.head_dim, sh.keys, sh.v_dim);
    if !simd::has_outer(isa) || s < 2 || !pr.causal || !dv.is_multiple_of(P) || d == 0 || t == 0 {
        return None;
    }
    let group = nh / nkv;
    let visible = |bi: usize, si: usize| visible_positions(pr, t, pos[bi * s + si]);
    // Per batch row: the union of its queries' visible keys.
    let spans: Vec<(usize, usize)> = (0..b)
        .map(|bi| (0..s).map(|si| visible(bi, si)).fold((usize::MAX, 0), |(l, h), (lo, hi)| (l.min(lo), h.max(hi))))
        .map(|(l, h)| if l >= h { (0, 0) } else { (l, h) })
        .collect();
    if pr.ring && spans.iter().any(|&(l, h)| h - l > t) {
        return None; // some key the queries see has been overwritten: the per-position path reads what is there
    }
    // Keys in position order, per (batch row, kv head): K panels [panel][d][P], V rows [key][dv], zero-padded.
    let cache_row = |x: usize| if pr.ring { x % t } else { x };
    let layouts: Vec<(Vec<f32>, Vec<f32>)> = (0..b * nkv)
        .map(|bk| {
            let (lo, hi) = spans[bk / nkv];
            let n = (hi - lo).div_ceil(P) * P;
            let (mut kp, mut vp) = (vec![0f32; n * d], vec![0f32; n * dv]);
            let key = |x: usize| &k[(bk * t + cache_row(x)) * d..][..d];
            for (panel, first) in (lo..hi).step_by(P).enumerate() {
                let rows: Vec<&[f32]> = (first..(first + P).min(hi)).map(key).collect();
                simd::pack_panel(isa, &rows, d, &mut kp[panel * d * P..(panel + 1) * d * P]);
            }
            for x in lo..hi {
                let (j, row) = (x - lo, bk * t + cache_row(x));
                vp[j * dv..(j + 1) * dv].copy_from_slice(&v[row * dv..(row + 1) * dv]);
            }
            (kp, vp)
        })
        .collect();
    let pb = positions_per_block(group);
    let blocks = s.div_ceil(pb);
    let mut grouped = vec![0f32; b * nh * s * dv];
    // One task per (batch row, kv head, block of positions): its rows are
    // contiguous in the grouped layout. The last block of each (bi, kvh)
    // may be short, so tasks are cut by hand rather than by equal chunks.
    let tasks: Vec<(usize, usize, usize)> = (0..b * nkv).flat_map(|bk| (0..blocks).map(move |blk| (bk, blk * pb, ((blk + 1) * pb).min(s)))).collect();
    let starts: Vec<usize> = tasks.iter().map(|&(bk, s0, _)| (bk * s + s0) * group * dv).collect();
    crate::cpu::pool::for_each_range_mut(pool, &mut grouped, &starts, |task, out| {
        let (bk, s0, s1) = tasks[task];
        let (bi, kvh) = (bk / nkv, bk % nkv);
        let (lo, _) = spans[bi];
        let (kp, vp) = &layouts[bk];
        // Rows (si, g) in grouped order, in chunks the kernel takes at once.
        let rows: Vec<(usize, usize)> = (s0..s1).flat_map(|si| (0..group).map(move |g| (si, g))).collect();
        for (c, chunk) in rows.chunks(simd::OUTER_ROWS).enumerate() {
            let vis: Vec<(usize, usize)> = chunk.iter().map(|&(si, _)| visible(bi, si)).collect();
            let c_lo = vis.iter().filter(|(l, h)| l < h).map(|v| v.0).min();
            let c_hi = vis.iter().map(|v| v.1).max().unwrap_or(0);
            let out_rows = &mut out[c * simd::OUTER_ROWS * dv..][..chunk.len() * dv];
            let Some(c_lo) = c_lo else {
                out_rows.fill(0.0);
                continue;
            };
            let (p0, p1) = ((c_lo - lo) / P, (c_hi - lo).div_ceil(P));
            let (base, ncols) = (lo + p0 * P, (p1 - p0) * P);
            let mut qbuf = vec![0f32; chunk.len() * d];
            for (r, &(si, g)) in chunk.iter().enumerate() {
                let src = ((bi * nh + kvh * group + g) * s + si) * d;
                qbuf[r * d..(r + 1) * d].copy_from_slice(&q[src..src + d]);
            }
            let mut scores = vec![0f32; chunk.len() * ncols];
            for pi in p0..p1 {
                simd::outer_tile(isa, &qbuf, d, chunk.len(), &kp[pi * d * P..], P, d, &mut scores[(pi - p0) * P..], ncols);
            }
            for (r, row) in scores.chunks_exact_mut(ncols).enumerate() {
                let (l, h) = vis[r];
                if l >= h {
                    row.fill(0.0);
                    continue;
                }
                let (a, z) = (l - base, h - base);
                row[a..z].iter_mut().for_each(|x| *x *= pr.scale);
                let g = chunk[r].1;
                simd::softmax_sink(isa, &mut row[a..z], pr.softcap, sinks.map(|s| s[kvh * group + g]));
                row[..a].fill(0.0);
                row[z..].fill(0.0);
            }
            let mut tile = [0f32; simd::OUTER_ROWS * P];
            for col in (0..dv).step_by(P) {
                simd::outer_tile(isa, &scores, ncols, chunk.len(), &vp[(base - lo) * dv + col..], dv, ncols, &mut tile, P);
                for (r, o) in out_rows.chunks_exact_mut(dv).enumerate() {
                    o[col..col + P].copy_from_slice(&tile[r * P..(r + 1) * P]);
                }
            }
        }
    });
    Some(grouped)
}

/// The most keys in a chunk of the split decode path (`decode_split`):
/// fixed, so the split (which depends on a row's keys alone), and with it
/// the arithmetic, does not depend on the thread count.
pub const SPLIT_KEYS: usize = 128;

/// Decode (one query position per row) over long caches, split along the
/// keys: a row's visible keys go to `⌈n / SPLIT_KEYS⌉` chunks of equal
/// size (±1; equal so two chunks of 129 keys are 65 and 64, not 128 and
/// 1, which left one thread all the work), and a task takes one chunk of one (batch row, kv head)
/// for all the GQA group's query heads, reading each key and value row once
/// for the group, and returns per head its running max, its sum of
/// `exp(score - max)` and its unnormalized weighted sum of values; the
/// chunks are then merged (each rescaled by `exp(max_c - max)`). `None`
/// where it does not apply: more than one query position per row, not
/// causal, every row's keys fitting one chunk (the per-position path is
/// then as good), or a ring missing keys the queries see.
pub fn decode_split(pool: &SpinPool, isa: Isa, sh: &AttentionShape, pr: &AttentionParams, inp: &AttentionInputs<'_>) -> Option<Vec<f32>> {
    const C: usize = SPLIT_KEYS;
    let AttentionInputs { q, k, v, pos, sinks } = *inp;
    let (b, nh, nkv, d, t, dv) = (sh.batch, sh.n_heads, sh.n_kv_heads, sh.head_dim, sh.keys, sh.v_dim);
    if sh.seq != 1 || !pr.causal || t == 0 {
        return None;
    }
    let group = nh / nkv;
    let spans: Vec<(usize, usize)> = pos[..b].iter().map(|&p| visible_positions(pr, t, p)).collect();
    if spans.iter().all(|&(l, h)| h - l <= C) || (pr.ring && spans.iter().any(|&(l, h)| h - l > t)) {
        return None;
    }
    // Per row: its chunk count and the keys in each chunk.
    let chunking: Vec<(usize, usize)> = spans
        .iter()
        .map(|&(l, h)| {
            let chunks = (h - l).div_ceil(C);
            (chunks, (h - l).div_ceil(chunks.max(1)))
        })
        .collect();
    // Tasks: (batch row, kv head, chunk); each writes `group` rows of
    // [weighted values (dv), max, sum].
    let tasks: Vec<(usize, usize, usize)> = (0..b * nkv).flat_map(|bk| (0..chunking[bk / nkv].0).map(move |c| (bk / nkv, bk % nkv, c))).collect();
    let width = dv + 2;
    let mut partial = vec![0f32; tasks.len() * group * width];
    for_each_chunk_mut(pool, &mut partial, group * width, |task, out| {
        let (bi, kvh, c) = tasks[task];
        let (lo, hi) = spans[bi];
        let size = chunking[bi].1;
        let (x0, x1) = (lo + c * size, (lo + (c + 1) * size).min(hi));
        let n = x1 - x0;
        let base = (bi * nkv + kvh) * t;
        // The chunk's keys as runs of cache rows, in position order.
        let runs: [(usize, usize); 2] = if pr.ring {
            let first = x0 % t;
            let head = n.min(t - first);
            [(first, head), (0, n - head)]
        } else {
            [(x0, n), (0, 0)]
        };
        let mut scores = vec![0f32; group * n];
        for g in 0..group {
            let qrow = &q[(bi * nh + kvh * group + g) * d..][..d];
            let mut at = 0;
            for &(first, len) in &runs {
                simd::scores(isa, qrow, &k[(base + first) * d..(base + first + len) * d], pr.scale, &mut scores[g * n + at..g * n + at + len]);
                at += len;
            }
        }
        let stats: Vec<(f32, f32)> = scores.chunks_exact_mut(n).map(|row| simd::softmax_terms(isa, row, pr.softcap)).collect();
        let mut o = vec![0f32; group * dv];
        let mut at = 0;
        for &(first, len) in &runs {
            if len > 0 {
                simd::weighted_sum_rows(isa, &scores[at..], n, len, &v[(base + first) * dv..(base + first + len) * dv], &mut o);
            }
            at += len;
        }
        for (g, row) in out.chunks_exact_mut(width).enumerate() {
            row[..dv].copy_from_slice(&o[g * dv..(g + 1) * dv]);
            (row[dv], row[dv + 1]) = stats[g];
        }
    });
    // Merge each (batch row, kv head)'s chunks, in chunk order.
    let mut grouped = vec![0f32; b * nh * dv];
    let mut first_task = 0;
    for bk in 0..b * nkv {
        let chunks = chunking[bk / nkv].0;
        for g in 0..group {
            let row = |c: usize| &partial[((first_task + c) * group + g) * width..][..width];
            // A sink joins the merge as one more chunk of weight and no value.
            let sink = sinks.map(|s| s[(bk % nkv) * group + g]);
            let m = (0..chunks).map(|c| row(c)[dv]).fold(sink.unwrap_or(f32::NEG_INFINITY), f32::max);
            let out = &mut grouped[(bk * group + g) * dv..][..dv];
            let mut sum = sink.map_or(0.0, |s| (s - m).exp());
            for c in 0..chunks {
                let r = row(c);
                let w = (r[dv] - m).exp();
                sum += r[dv + 1] * w;
                out.iter_mut().zip(&r[..dv]).for_each(|(o, x)| *o += x * w);
            }
            if chunks > 0 {
                out.iter_mut().for_each(|o| *o /= sum);
            }
        }
        first_task += chunks;
    }
    Some(grouped)
}

/// Attention one query position per task (decode, and ISAs without the
/// outer-product kernel), in the grouped layout `[b, kvh, s, group, dv]`.
fn per_position(pool: &SpinPool, isa: Isa, sh: &AttentionShape, pr: &AttentionParams, inp: &AttentionInputs<'_>) -> Vec<f32> {
    let AttentionInputs { q, k, v, pos, sinks } = *inp;
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
        for (h, row) in scores.chunks_exact_mut(n).enumerate() {
            simd::softmax_sink(isa, row, pr.softcap, sinks.map(|s| s[first_head + h]));
        }
        let mut at = 0;
        for &(first, len) in &segments {
            if len > 0 {
                simd::weighted_sum_rows(isa, &scores[at..], n, len, &v[(base + first) * dv..(base + first + len) * dv], out);
            }
            at += len;
        }
    });
    grouped
}
