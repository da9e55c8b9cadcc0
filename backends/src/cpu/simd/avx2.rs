//! AVX2 + FMA + F16C kernels. Each quantized row dot decodes a block's
//! integers in registers, converts them to f32 and multiplies by f32
//! activations: activations are never quantized (docs/design.md, "Precision
//! contract"). Block layouts are ggml's, as defined in `graphc_ir::quant`.
//!
//! Every function here is `unsafe` for one reason: it must only run on a CPU
//! with AVX2, FMA and F16C, which `simd::dot_row` / `simd::tile` check. Reads
//! stay inside the lengths asserted at each entry.

// Register tiles are indexed like the math they compute.
#![allow(clippy::needless_range_loop)]

use graphc_ir::DType;
use std::arch::x86_64::*;

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// How far ahead of the block being decoded a row dot prefetches its
/// weights (bytes). A prefetch never faults, so running past the row's end
/// is harmless. Shared with `avx512`.
pub(super) const PREFETCH_AHEAD: usize = 1024;

/// Prefetch `PREFETCH_AHEAD` past `p` for a loop that steps `step` bytes at a
/// time: one line every 64 bytes of the step (one line for a step under
/// 64 bytes: consecutive steps then touch every line), so no line of the
/// weight stream is left to the hardware prefetcher, which on some cores
/// follows one stream per thread too slowly to keep a decode step at the
/// memory's pace.
#[inline(always)]
unsafe fn prefetch_ahead(p: *const u8, step: usize) {
    let mut off = 0;
    while off < step {
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD + off) as *const i8);
        off += 64;
    }
}

/// The little-endian f16 at `p`, as f32.
#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = u16::from_le((p as *const u16).read_unaligned());
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// `acc + Σ u8(v[0..8]) * x[0..8] + u8(v[8..16]) * x[8..16]` (lane-wise).
#[inline(always)]
unsafe fn fma16_u8(v: __m128i, x: *const f32, acc: __m256) -> __m256 {
    let a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), _mm256_loadu_ps(x), acc);
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))), _mm256_loadu_ps(x.add(8)), a)
}

/// As `fma16_u8` for signed bytes.
#[inline(always)]
unsafe fn fma16_i8(v: __m128i, x: *const f32, acc: __m256) -> __m256 {
    let a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), _mm256_loadu_ps(x), acc);
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8))), _mm256_loadu_ps(x.add(8)), a)
}

/// Lane sums of `Σ u8(v[i]) * x[i]` for the 32 bytes of `v`.
#[inline(always)]
unsafe fn dot32_u8(v: __m256i, x: *const f32) -> __m256 {
    let a = fma16_u8(_mm256_castsi256_si128(v), x, _mm256_setzero_ps());
    fma16_u8(_mm256_extracti128_si256(v, 1), x.add(16), a)
}

/// One weight row of `dtype` dotted with `x`; `None` for types without an
/// AVX2 kernel (the caller falls back to the portable one).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_row(dtype: DType, row: &[u8], x: &[f32], xsums: &[f32]) -> Option<f32> {
    let mut out = [0f32];
    dot_rows(dtype, row, x, xsums, &mut out).then_some(out[0])
}

/// `dot_row` of each of the `out.len()` consecutive weight rows in `rows`,
/// the lengths checked once for all of them (a short row's dot costs little
/// more than the checks and dispatch around it); `false` (nothing written)
/// for types without an AVX2 kernel.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_rows(dtype: DType, rows: &[u8], x: &[f32], xsums: &[f32], out: &mut [f32]) -> bool {
    if dtype == DType::BF16 || !(dtype.is_float() || dtype.is_quantized()) {
        return false;
    }
    let n = x.len();
    let rb = dtype.storage_bytes(n as u64).map(|b| b as usize);
    assert_eq!(rb.map(|b| b * out.len()), Some(rows.len()), "{dtype}: {} bytes for {} rows of {n} elements", rows.len(), out.len());
    if dtype.is_quantized() {
        assert!(xsums.len() * 32 >= n, "group sums cover {} of {n} elements", xsums.len() * 32);
    }
    let (rb, xp) = (rb.unwrap_or(0), x.as_ptr());
    for (i, o) in out.iter_mut().enumerate() {
        let r = rows.as_ptr().add(i * rb);
        *o = match dtype {
            DType::F32 => dot_f32(r as *const f32, xp, n),
            DType::F16 => dot_f16(r, xp, n),
            DType::Q4_0 => q4::<18, true>(r, xp, xsums, n / 32),
            DType::Q4_1 => q4::<20, false>(r, xp, xsums, n / 32),
            DType::Q5_0 => q5_0(r, xp, n / 32),
            DType::Q8_0 => q8_0(r, xp, n / 32),
            DType::Q4K => q4_k(r, xp, xsums, n / 256),
            DType::Q5K => q5_k(r, xp, xsums, n / 256),
            DType::Q6K => q6_k(r, xp, n / 256),
            DType::Q5_1 => q5_1(r, xp, xsums, n / 32),
            DType::Q2K => q2_k(r, xp, n / 256),
            DType::Q3K => q3_k(r, xp, n / 256),
            DType::IQ4NL => iq4_nl(r, xp, n / 32),
            DType::IQ4XS => iq4_xs(r, xp, n / 256),
            DType::MXFP4 => mxfp4(r, xp, n / 32),
            DType::IQ2XXS => iq2_xxs(r, xp, n / 256),
            DType::IQ2XS => iq2_xs(r, xp, n / 256),
            DType::IQ2S => iq2_s(r, xp, n / 256),
            DType::IQ3XXS => iq3_xxs(r, xp, n / 256),
            DType::IQ3S => iq3_s(r, xp, n / 256),
            DType::IQ1S => iq1_s(r, xp, n / 256),
            DType::IQ1M => iq1_m(r, xp, n / 256),
            _ => unreachable!("{dtype} has no AVX2 kernel (checked above)"),
        };
    }
    true
}

/// f32 dot of `n` elements; `a` may be unaligned.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_f32(a: *const f32, b: *const f32, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (j, a_j) in acc.iter_mut().enumerate() {
            *a_j = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i + 8 * j)), _mm256_loadu_ps(b.add(i + 8 * j)), *a_j);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i)), _mm256_loadu_ps(b.add(i)), acc[0]);
        i += 8;
    }
    let mut s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    while i < n {
        s += a.add(i).read_unaligned() * *b.add(i);
        i += 1;
    }
    s
}

/// `y += alpha * x` over `n` elements.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn axpy(alpha: f32, x: *const f32, y: *mut f32, n: usize) {
    let av = _mm256_set1_ps(alpha);
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(y.add(i), _mm256_fmadd_ps(av, _mm256_loadu_ps(x.add(i)), _mm256_loadu_ps(y.add(i))));
        i += 8;
    }
    while i < n {
        *y.add(i) += alpha * *x.add(i);
        i += 1;
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16(w: *const u8, x: *const f32, n: usize) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        let h = _mm_loadu_si128(w.add(2 * i) as *const __m128i);
        acc = _mm256_fmadd_ps(_mm256_cvtph_ps(h), _mm256_loadu_ps(x.add(i)), acc);
        i += 8;
    }
    let mut s = hsum(acc);
    while i < n {
        s += f16_at(w.add(2 * i)) * *x.add(i);
        i += 1;
    }
    s
}

/// Eight bytes at `p` widened to 32-bit lanes straight from memory (one
/// `vpmovzxbd ymm, m64`): a byte's nibbles are then `v & 15` and `v >> 4`,
/// one instruction each.
#[inline(always)]
unsafe fn u32x8_bytes(p: *const u8) -> __m256i {
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i))
}

/// `dot32_u8` of a q4_0 / q4_1 block's 16 nibble bytes at `qs` (low
/// nibbles are elements 0..16, high ones 16..32): the bytes are widened
/// once and split in 32-bit lanes.
#[inline(always)]
unsafe fn dot32_nibbles(qs: *const u8, x: *const f32) -> __m256 {
    let v = [u32x8_bytes(qs), u32x8_bytes(qs.add(8))];
    let mut s = _mm256_setzero_ps();
    for i in 0..2 {
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v[i], _mm256_set1_epi32(0x0F))), _mm256_loadu_ps(x.add(8 * i)), s);
    }
    for i in 0..2 {
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v[i], 4)), _mm256_loadu_ps(x.add(16 + 8 * i)), s);
    }
    s
}

/// A q4_0 (`BB` = 18, `(nibble - 8) * d`) or q4_1 (`BB` = 20,
/// `nibble * d + m`) block's scale `d` and the factor of its `Σx` term
/// (`-8 d` or `m`); low nibbles are elements 0..16, high 16..32, in its
/// last 16 bytes.
#[inline(always)]
unsafe fn q4_scales<const BB: usize, const Q4_0: bool>(p: *const u8) -> (f32, f32) {
    let d = f16_at(p);
    (d, if Q4_0 { -8.0 * d } else { f16_at(p.add(2)) })
}

/// q4_0 and q4_1 (`q4_scales`): two blocks per iteration into two
/// accumulators (kept in registers) and two offsets, so consecutive blocks
/// do not wait on each other's FMA.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4<const BB: usize, const Q4_0: bool>(r: *const u8, x: *const f32, xsums: &[f32], nb: usize) -> f32 {
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let (mut off0, mut off1) = (0f32, 0f32);
    let mut b = 0;
    while b + 2 <= nb {
        let p = r.add(b * BB);
        prefetch_ahead(p, 2 * BB);
        let ((d0, o0), (d1, o1)) = (q4_scales::<BB, Q4_0>(p), q4_scales::<BB, Q4_0>(p.add(BB)));
        acc0 = fma_scaled(d0, dot32_nibbles(p.add(BB - 16), x.add(b * 32)), acc0);
        acc1 = fma_scaled(d1, dot32_nibbles(p.add(2 * BB - 16), x.add(b * 32 + 32)), acc1);
        off0 += o0 * xsums[b];
        off1 += o1 * xsums[b + 1];
        b += 2;
    }
    if b < nb {
        let p = r.add(b * BB);
        let (d, o) = q4_scales::<BB, Q4_0>(p);
        acc0 = fma_scaled(d, dot32_nibbles(p.add(BB - 16), x.add(b * 32)), acc0);
        off0 += o * xsums[b];
    }
    hsum(_mm256_add_ps(acc0, acc1)) + (off0 + off1)
}

/// Byte `i` of entry `v` is q5_0's `0xF0` where bit `i` of `v` is clear
/// (the high bit that makes a nibble `nibble - 16` as a signed byte), else
/// 0: eight elements' high bits by one lookup.
static Q5_CLEAR_HIGH_BYTES: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut v = 0;
    while v < 256 {
        let mut i = 0;
        while i < 8 {
            if v & (1 << i) == 0 {
                table[v] |= 0xF0 << (8 * i);
            }
            i += 1;
        }
        v += 1;
    }
    table
};

/// The 32 five-bit values of a q5_0 / q5_1 block (`qh`: the 32 high bits,
/// `qs`: the 16 nibble bytes) as bytes, in element order, the high bits as
/// `high` makes them of `Q5_CLEAR_HIGH_BYTES`' entry. Put together in
/// general-purpose registers (nibbles or-ed with one lookup per 8 high
/// bits), which leaves the vector units to the conversions and FMAs
/// (`dot_bytes`): the vector form (bits → bytes by a shuffle and compare)
/// costs about a fifth more a block on a core with 128-bit vector units.
#[inline(always)]
unsafe fn q5_bytes(qh: *const u8, qs: *const u8, high: impl Fn(u64) -> u64) -> [u64; 4] {
    const NIBBLES: u64 = 0x0F0F_0F0F_0F0F_0F0F;
    let (q0, q1) = ((qs as *const u64).read_unaligned(), (qs.add(8) as *const u64).read_unaligned());
    let h = |i: usize| high(Q5_CLEAR_HIGH_BYTES[*qh.add(i) as usize]);
    [(q0 & NIBBLES) | h(0), (q1 & NIBBLES) | h(1), ((q0 >> 4) & NIBBLES) | h(2), ((q1 >> 4) & NIBBLES) | h(3)]
}

/// q5_0's values as signed bytes: `nibble | 0xF0` (`nibble - 16`) where
/// the high bit is clear.
#[inline(always)]
unsafe fn q5_0_bytes(p: *const u8) -> [u64; 4] {
    q5_bytes(p.add(2), p.add(6), |clear| clear)
}

/// Eight bytes at `p` (signed if `SIGNED`), as f32.
#[inline(always)]
unsafe fn f32x8_bytes<const SIGNED: bool>(p: *const u8) -> __m256 {
    let v = _mm_loadl_epi64(p as *const __m128i);
    _mm256_cvtepi32_ps(if SIGNED { _mm256_cvtepi8_epi32(v) } else { _mm256_cvtepu8_epi32(v) })
}

/// `s + Σ q[i] * x[i]` for the `N` bytes at `q` (a multiple of 8), lane
/// `l` of the 8 taking elements `l, l + 8, ...` as `fma16_u8`/`_i8` do.
/// Eight bytes at a time are widened straight from memory (`vpmovsxbd
/// ymm, m64`: one shuffle µop for eight elements on an Intel core, two on
/// a Zen 1 core, as many as two 128-bit halves would take) rather than
/// extracted from a 256-bit register.
#[inline(always)]
unsafe fn dot_bytes<const N: usize, const SIGNED: bool>(q: *const u8, x: *const f32, mut s: __m256) -> __m256 {
    for i in 0..N / 8 {
        s = _mm256_fmadd_ps(f32x8_bytes::<SIGNED>(q.add(8 * i)), _mm256_loadu_ps(x.add(8 * i)), s);
    }
    s
}

/// `dot32_i8` of the 32 signed bytes at `q` (`dot_bytes`).
#[inline(always)]
unsafe fn dot32_i8_bytes(q: *const u8, x: *const f32) -> __m256 {
    dot_bytes::<32, true>(q, x, _mm256_setzero_ps())
}

/// `acc + d * s`.
#[inline(always)]
unsafe fn fma_scaled(d: f32, s: __m256, acc: __m256) -> __m256 {
    _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc)
}

/// q5_0: `((nibble | high bit << 4) - 16) * d`; element `i`'s high bit is bit `i` of `qh`.
/// A clear high bit makes the byte `nibble | 0xF0`, which is `nibble - 16`
/// as a signed byte; a set one leaves `nibble`. Two blocks per iteration
/// into two accumulators, so consecutive blocks do not wait on each other.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0(r: *const u8, x: *const f32, nb: usize) -> f32 {
    #[inline(always)]
    unsafe fn block(p: *const u8, xb: *const f32, acc: __m256) -> __m256 {
        let q = q5_0_bytes(p);
        fma_scaled(f16_at(p), dot32_i8_bytes(q.as_ptr() as *const u8, xb), acc)
    }
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut b = 0;
    while b + 2 <= nb {
        prefetch_ahead(r.add(b * 22), 44);
        acc0 = block(r.add(b * 22), x.add(b * 32), acc0);
        acc1 = block(r.add(b * 22 + 22), x.add(b * 32 + 32), acc1);
        b += 2;
    }
    if b < nb {
        acc0 = block(r.add(b * 22), x.add(b * 32), acc0);
    }
    hsum(_mm256_add_ps(acc0, acc1))
}

/// q8_0: `q * d`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0(r: *const u8, x: *const f32, nb: usize) -> f32 {
    #[inline(always)]
    unsafe fn block(p: *const u8, xb: *const f32, acc: __m256) -> __m256 {
        fma_scaled(f16_at(p), dot32_i8_bytes(p.add(2), xb), acc)
    }
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut b = 0;
    while b + 2 <= nb {
        prefetch_ahead(r.add(b * 34), 68);
        acc0 = block(r.add(b * 34), x.add(b * 32), acc0);
        acc1 = block(r.add(b * 34 + 34), x.add(b * 32 + 32), acc1);
        b += 2;
    }
    if b < nb {
        acc0 = block(r.add(b * 34), x.add(b * 32), acc0);
    }
    hsum(_mm256_add_ps(acc0, acc1))
}

/// The 6-bit scales and mins of a q4_k / q5_k block (`graphc_ir::quant`).
#[inline(always)]
unsafe fn scales_mins_k4(q: *const u8) -> ([u8; 8], [u8; 8]) {
    let q = std::slice::from_raw_parts(q, 12);
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        (sc[j], mn[j]) =
            if j < 4 { (q[j] & 63, q[j + 4] & 63) } else { ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)) };
    }
    (sc, mn)
}

/// q4_k: 8 sub-blocks of 32, each `d*sc * nibble - dmin*m`. Four bytes at
/// a time are widened to 32-bit lanes straight from memory and split into
/// their two nibbles there (an `and` and a shift; a byte's high nibble
/// needs no mask once widened), each half of a 32-byte run feeding its own
/// sub-block's `dot32_u8` chain.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k(r: *const u8, x: *const f32, xsums: &[f32], nb: usize) -> f32 {
    let mask = _mm256_set1_epi32(0x0F);
    let mut acc = _mm256_setzero_ps();
    let mut offset = 0f32;
    for b in 0..nb {
        let p = r.add(b * 144);
        prefetch_ahead(p, 144);
        let (d, dmin) = (f16_at(p), f16_at(p.add(2)));
        let (sc, mn) = scales_mins_k4(p.add(4));
        let qs = p.add(16);
        let xb = x.add(b * 256);
        for c in 0..4 {
            let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let xc = xb.add(64 * c);
            for i in 0..4 {
                let v = u32x8_bytes(qs.add(32 * c + 8 * i));
                lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, mask)), _mm256_loadu_ps(xc.add(8 * i)), lo);
                hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)), _mm256_loadu_ps(xc.add(32 + 8 * i)), hi);
            }
            acc = fma_scaled(d * sc[2 * c] as f32, lo, acc);
            acc = fma_scaled(d * sc[2 * c + 1] as f32, hi, acc);
        }
        for j in 0..8 {
            offset -= dmin * mn[j] as f32 * xsums[b * 8 + j];
        }
    }
    hsum(acc) + offset
}

/// q5_k: q4_k with a fifth bit per element from `qh`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_k(r: *const u8, x: *const f32, xsums: &[f32], nb: usize) -> f32 {
    let mask = _mm256_set1_epi8(0x0F);
    let sixteen = _mm256_set1_epi8(16);
    let mut acc = _mm256_setzero_ps();
    let mut offset = 0f32;
    for b in 0..nb {
        let p = r.add(b * 176);
        prefetch_ahead(p, 176);
        let (d, dmin) = (f16_at(p), f16_at(p.add(2)));
        let (sc, mn) = scales_mins_k4(p.add(4));
        let qh = _mm256_loadu_si256(p.add(16) as *const __m256i);
        let qs = p.add(48);
        let xb = x.add(b * 256);
        for c in 0..4 {
            let q = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
            let (u1, u2) = (_mm256_set1_epi8((1u8 << (2 * c)) as i8), _mm256_set1_epi8((2u8 << (2 * c)) as i8));
            let h1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, u1), u1), sixteen);
            let h2 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, u2), u2), sixteen);
            let lo = _mm256_or_si256(_mm256_and_si256(q, mask), h1);
            let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), h2);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc[2 * c] as f32), dot32_u8(lo, xb.add(64 * c)), acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc[2 * c + 1] as f32), dot32_u8(hi, xb.add(64 * c + 32)), acc);
        }
        for j in 0..8 {
            offset -= dmin * mn[j] as f32 * xsums[b * 8 + j];
        }
    }
    hsum(acc) + offset
}

/// The six-bit values of half `n` (128 elements) of the q6_k block at `p`,
/// minus 32, as four 32-byte vectors: element `32 i + l` of the half is
/// byte `l` of vector `i` (its scale is `sc[8 n + 2 i + l / 16]`). Put
/// together bytewise: each `ql` nibble or-ed with its two `qh` bits.
/// Shared by this module's and `avx512`'s q6_k kernels.
#[inline(always)]
pub(super) unsafe fn q6_k_values(p: *const u8, n: usize) -> [__m256i; 4] {
    let (m4, m2, m32) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(3), _mm256_set1_epi8(32));
    let ql = p.add(64 * n);
    let qh = _mm256_loadu_si256(p.add(128 + 32 * n) as *const __m256i);
    let a = _mm256_loadu_si256(ql as *const __m256i);
    let c = _mm256_loadu_si256(ql.add(32) as *const __m256i);
    let high = |h: __m256i| _mm256_slli_epi16(_mm256_and_si256(h, m2), 4);
    [
        _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(a, m4), high(qh)), m32),
        _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(c, m4), high(_mm256_srli_epi16(qh, 2))), m32),
        _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), high(_mm256_srli_epi16(qh, 4))), m32),
        _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4), high(_mm256_srli_epi16(qh, 6))), m32),
    ]
}

/// q6_k: 16 sub-blocks of 16, each `d * sc * (q - 32)` with 6-bit `q` split
/// into low nibbles (`ql`) and high pairs (`qh`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k(r: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let p = r.add(b * 210);
        prefetch_ahead(p, 210);
        let d = f16_at(p.add(208));
        let sc = p.add(192) as *const i8;
        for n in 0..2 {
            let xn = x.add(b * 256 + 128 * n);
            for (i, qi) in q6_k_values(p, n).into_iter().enumerate() {
                let s0 = fma16_i8(_mm256_castsi256_si128(qi), xn.add(32 * i), _mm256_setzero_ps());
                let s1 = fma16_i8(_mm256_extracti128_si256(qi, 1), xn.add(32 * i + 16), _mm256_setzero_ps());
                let (c0, c1) = (*sc.add(8 * n + 2 * i) as f32, *sc.add(8 * n + 2 * i + 1) as f32);
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d * c0), s0, acc);
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d * c1), s1, acc);
            }
        }
    }
    hsum(acc)
}

/// q5_1: `(nibble | high bit << 4) * d + m`, the high bits as in q5_0; the
/// min goes through the block's `Σx`, as q4_1's does.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_1(r: *const u8, x: *const f32, xsums: &[f32], nb: usize) -> f32 {
    // A block's halves into their own accumulator (as iq4_nl).
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut offset = 0f32;
    for b in 0..nb {
        let p = r.add(b * 24);
        prefetch_ahead(p, 24);
        // A set high bit adds 16: `0x10` where `Q5_CLEAR_HIGH_BYTES` has 0.
        let q = q5_bytes(p.add(4), p.add(8), |clear| !clear & 0x1010_1010_1010_1010);
        let (q, xb, d) = (q.as_ptr() as *const u8, x.add(b * 32), f16_at(p));
        acc0 = fma_scaled(d, dot_bytes::<16, false>(q, xb, _mm256_setzero_ps()), acc0);
        acc1 = fma_scaled(d, dot_bytes::<16, false>(q.add(16), xb.add(16), _mm256_setzero_ps()), acc1);
        offset += f16_at(p.add(2)) * xsums[b];
    }
    hsum(_mm256_add_ps(acc0, acc1)) + offset
}

/// The 16 values `scale * u8(v[i])` of the bytes of `v`, as f32.
#[inline(always)]
unsafe fn scaled_bytes16(v: __m128i, scale: f32) -> [f32; 16] {
    let mut out = [0f32; 16];
    let s = _mm256_set1_ps(scale);
    _mm256_storeu_ps(out.as_mut_ptr(), _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))));
    _mm256_storeu_ps(out.as_mut_ptr().add(8), _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)))));
    out
}

/// q2_k: 16 sub-blocks of 16, each `d*sc * q - dmin*m` with 2-bit `q`:
/// the 32 bytes of half `h` hold, at shift `2j`, the 32 elements from
/// `128h + 32j` (sub-blocks `8h + 2j` and `8h + 2j + 1`). The mins are per 16 elements,
/// finer than `group_sums`' 32, so each weight is put together in
/// registers (`d*sc * q - dmin*m`, one FMA) and multiplied by its
/// activation; the block's 16 scales and mins are converted at once.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_k(r: *const u8, x: *const f32, nb: usize) -> f32 {
    let (three, nibble) = (_mm256_set1_epi8(3), _mm_set1_epi8(0x0F));
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for b in 0..nb {
        let p = r.add(b * 84);
        prefetch_ahead(p, 84);
        let sc = _mm_loadu_si128(p as *const __m128i);
        let dl = scaled_bytes16(_mm_and_si128(sc, nibble), f16_at(p.add(80)));
        let ml = scaled_bytes16(_mm_and_si128(_mm_srli_epi16(sc, 4), nibble), f16_at(p.add(82)));
        for h in 0..2 {
            let q = _mm256_loadu_si256(p.add(16 + 32 * h) as *const __m256i);
            for j in 0..4 {
                let v = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * j as i32)), three);
                let xj = x.add(b * 256 + 128 * h + 32 * j);
                let is = 8 * h + 2 * j;
                for (half, v) in [_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)].into_iter().enumerate() {
                    let (d, m) = (_mm256_set1_ps(dl[is + half]), _mm256_set1_ps(ml[is + half]));
                    let q0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
                    let q1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
                    acc0 = _mm256_fmadd_ps(_mm256_fmsub_ps(d, q0, m), _mm256_loadu_ps(xj.add(16 * half)), acc0);
                    acc1 = _mm256_fmadd_ps(_mm256_fmsub_ps(d, q1, m), _mm256_loadu_ps(xj.add(16 * half + 8)), acc1);
                }
            }
        }
    }
    hsum(_mm256_add_ps(acc0, acc1))
}

/// q3_k's 16 sub-block scales `d * (sc - 32)` from its 12 scale bytes at
/// `s` (`graphc_ir::quant::q3_k_scales`, vectorized): low nibbles of bytes
/// 0..8 then their high nibbles, each or-ed with two bits of bytes 8..12
/// (sub-block `i` takes bits `2 (i / 4)` of byte `8 + i % 4`).
#[inline(always)]
unsafe fn q3_k_scales(s: *const u8, d: f32) -> [f32; 16] {
    let nibble = _mm_set1_epi8(0x0F);
    let low8 = _mm_loadl_epi64(s as *const __m128i);
    let low = _mm_unpacklo_epi64(_mm_and_si128(low8, nibble), _mm_and_si128(_mm_srli_epi16(low8, 4), nibble));
    let h = u32::from_le_bytes([*s.add(8), *s.add(9), *s.add(10), *s.add(11)]);
    let high = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(h as i32), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    let sc = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
    let (dv, mut out) = (_mm256_set1_ps(d), [0f32; 16]);
    _mm256_storeu_ps(out.as_mut_ptr(), _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_storeu_ps(out.as_mut_ptr().add(8), _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
    out
}

/// q3_k: 16 sub-blocks of 16, each `d * (sc - 32) * q` with `q` the 2-bit
/// value laid out as q2_k's, minus 4 where its `hmask` bit is clear (byte
/// `l` of `hmask`, bit `4h + j`, for element `l` of run `(h, j)`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3_k(r: *const u8, x: *const f32, nb: usize) -> f32 {
    let (three, four) = (_mm256_set1_epi8(3), _mm256_set1_epi8(4));
    // Each run's two sub-blocks into their own accumulator.
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for b in 0..nb {
        let p = r.add(b * 110);
        prefetch_ahead(p, 110);
        let dl = q3_k_scales(p.add(96), f16_at(p.add(108)));
        let hmask = _mm256_loadu_si256(p as *const __m256i);
        for h in 0..2 {
            let q = _mm256_loadu_si256(p.add(32 + 32 * h) as *const __m256i);
            for j in 0..4 {
                let low = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * j as i32)), three);
                let bit = _mm256_set1_epi8((1u8 << (4 * h + j)) as i8);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), bit);
                let v = _mm256_sub_epi8(low, _mm256_andnot_si256(set, four));
                let xj = x.add(b * 256 + 128 * h + 32 * j);
                let is = 8 * h + 2 * j;
                let s0 = fma16_i8(_mm256_castsi256_si128(v), xj, _mm256_setzero_ps());
                let s1 = fma16_i8(_mm256_extracti128_si256(v, 1), xj.add(16), _mm256_setzero_ps());
                acc0 = _mm256_fmadd_ps(_mm256_set1_ps(dl[is]), s0, acc0);
                acc1 = _mm256_fmadd_ps(_mm256_set1_ps(dl[is + 1]), s1, acc1);
            }
        }
    }
    hsum(_mm256_add_ps(acc0, acc1))
}

/// The iq4 values of the 16 low nibbles (elements 0..16) and 16 high ones
/// (16..32) of `qs`, as signed bytes: one table lookup (`pshufb`) each.
#[inline(always)]
unsafe fn iq4_values(qs: __m128i) -> (__m128i, __m128i) {
    nibble_values(&graphc_ir::quant::IQ4_VALUES, qs)
}

/// The values in `table` of the 16 low nibbles and 16 high ones of `qs`.
#[inline(always)]
unsafe fn nibble_values(table: &[i8; 16], qs: __m128i) -> (__m128i, __m128i) {
    let table = _mm_loadu_si128(table.as_ptr() as *const __m128i);
    let mask = _mm_set1_epi8(0x0F);
    (_mm_shuffle_epi8(table, _mm_and_si128(qs, mask)), _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(qs, 4), mask)))
}

/// iq4_nl: `d * value[nibble]`, nibbles ordered as q4_0's.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl(r: *const u8, x: *const f32, nb: usize) -> f32 {
    // A block's halves into their own accumulator (as iq4_xs).
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for b in 0..nb {
        let p = r.add(b * 18);
        prefetch_ahead(p, 18);
        let (lo, hi) = iq4_values(_mm_loadu_si128(p.add(2) as *const __m128i));
        let (xb, d) = (x.add(b * 32), _mm256_set1_ps(f16_at(p)));
        acc0 = _mm256_fmadd_ps(d, fma16_i8(lo, xb, _mm256_setzero_ps()), acc0);
        acc1 = _mm256_fmadd_ps(d, fma16_i8(hi, xb.add(16), _mm256_setzero_ps()), acc1);
    }
    hsum(_mm256_add_ps(acc0, acc1))
}

/// mxfp4: iq4_nl's decoding in a 17-byte block, with an E8M0 scale byte
/// (halved, `quant::e8m0_half`) and ggml's doubled E2M1 values.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mxfp4(r: *const u8, x: *const f32, nb: usize) -> f32 {
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for b in 0..nb {
        let p = r.add(b * 17);
        prefetch_ahead(p, 17);
        let (lo, hi) = nibble_values(&graphc_ir::quant::MXFP4_VALUES, _mm_loadu_si128(p.add(1) as *const __m128i));
        let (xb, d) = (x.add(b * 32), _mm256_set1_ps(graphc_ir::quant::e8m0_half(*p)));
        acc0 = _mm256_fmadd_ps(d, fma16_i8(lo, xb, _mm256_setzero_ps()), acc0);
        acc1 = _mm256_fmadd_ps(d, fma16_i8(hi, xb.add(16), _mm256_setzero_ps()), acc1);
    }
    hsum(_mm256_add_ps(acc0, acc1))
}

/// iq4_xs: 8 sub-blocks of 32, each iq4_nl's decoding with its own scale
/// `d * (ls - 32)`, `ls` 4 bits from `scales_l` and 2 from `scales_h`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_xs(r: *const u8, x: *const f32, nb: usize) -> f32 {
    let nibble = _mm_set1_epi8(0x0F);
    // Each sub-block's halves into their own accumulator: two short FMA
    // chains a sub-block, not one long one.
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for b in 0..nb {
        let p = r.add(b * 136);
        prefetch_ahead(p, 136);
        // The 8 scales at once: `scales_l`'s nibbles in order (low first),
        // each with its two bits of `scales_h`, minus 32, times `d`.
        let sl = _mm_cvtsi32_si128((p.add(4) as *const i32).read_unaligned());
        let low = _mm_unpacklo_epi8(_mm_and_si128(sl, nibble), _mm_and_si128(_mm_srli_epi16(sl, 4), nibble));
        let sh = _mm256_set1_epi32(u16::from_le_bytes([*p.add(2), *p.add(3)]) as i32);
        let high = _mm256_and_si256(_mm256_srlv_epi32(sh, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)), _mm256_set1_epi32(3));
        let ls = _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(low), _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32));
        let mut dl = [0f32; 8];
        _mm256_storeu_ps(dl.as_mut_ptr(), _mm256_mul_ps(_mm256_set1_ps(f16_at(p)), _mm256_cvtepi32_ps(ls)));
        for (ib, &dl) in dl.iter().enumerate() {
            let (lo, hi) = iq4_values(_mm_loadu_si128(p.add(8 + 16 * ib) as *const __m128i));
            let xb = x.add(b * 256 + 32 * ib);
            let dl = _mm256_set1_ps(dl);
            acc0 = _mm256_fmadd_ps(dl, fma16_i8(lo, xb, _mm256_setzero_ps()), acc0);
            acc1 = _mm256_fmadd_ps(dl, fma16_i8(hi, xb.add(16), _mm256_setzero_ps()), acc1);
        }
    }
    hsum(_mm256_add_ps(acc0, acc1))
}

/// Eight codebook values (`grid`: 8 bytes) as f32, each negated where its
/// bit of `signs` is set, times the 8 floats at `x`, added to `acc`.
#[inline(always)]
unsafe fn signed_grid_fma(grid: *const u8, signs: u32, x: *const f32, acc: __m256) -> __m256 {
    let g = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(grid as *const __m128i)));
    signed_fma(g, signs, x, acc)
}

/// `g` (8 floats) with lane `l` negated where bit `l` of `signs` is set,
/// times the 8 floats at `x`, added to `acc`.
#[inline(always)]
unsafe fn signed_fma(g: __m256, signs: u32, x: *const f32, acc: __m256) -> __m256 {
    let bits = _mm256_and_si256(_mm256_set1_epi32(signs as i32), _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128));
    let set = _mm256_xor_si256(_mm256_cmpeq_epi32(bits, _mm256_setzero_si256()), _mm256_set1_epi32(-1));
    let flip = _mm256_castsi256_ps(_mm256_and_si256(set, _mm256_set1_epi32(i32::MIN)));
    _mm256_fmadd_ps(_mm256_xor_ps(g, flip), _mm256_loadu_ps(x), acc)
}

/// Two 4-value codebook rows side by side as 8 f32 (iq3's grid points).
#[inline(always)]
unsafe fn grid_pair(a: &[u8; 4], b: &[u8; 4]) -> __m256 {
    let lo = u32::from_le_bytes(*a) as i32;
    let hi = u32::from_le_bytes(*b) as i32;
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32(lo, hi, 0, 0)))
}

/// The 8 signs of sign index `i` (`graphc_ir::quant`'s: 7 bits and their parity).
#[inline(always)]
fn ksigns(i: u32) -> u32 {
    i | ((i.count_ones() & 1) << 7)
}

#[inline(always)]
unsafe fn u32_at(p: *const u8) -> u32 {
    (p as *const u32).read_unaligned()
}

/// iq2_xxs: 8 sub-blocks of 32, each four grid points of 8 (a byte each)
/// with their signs and a scale `d (0.5 + s) / 4` in the following u32;
/// a sub-block's signed points dotted with `x`, then scaled.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq2_xxs(r: *const u8, x: *const f32, nb: usize) -> f32 {
    use graphc_ir::quant_grids::IQ2XXS_GRID;
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let p = r.add(b * 66);
        prefetch_ahead(p, 66);
        let d = f16_at(p);
        for ib in 0..8 {
            let q = p.add(2 + 8 * ib);
            let aux = u32_at(q.add(4));
            let mut sum = _mm256_setzero_ps();
            for g in 0..4 {
                let grid = IQ2XXS_GRID[*q.add(g) as usize].as_ptr();
                sum = signed_grid_fma(grid, ksigns((aux >> (7 * g)) & 127), x.add(b * 256 + 32 * ib + 8 * g), sum);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * (0.5 + (aux >> 28) as f32) * 0.25), sum, acc);
        }
    }
    hsum(acc)
}

/// iq2_xs: 32 grid points of 8, each a u16 (9-bit index, 7-bit signs),
/// and a scale nibble each two of them.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq2_xs(r: *const u8, x: *const f32, nb: usize) -> f32 {
    use graphc_ir::quant_grids::IQ2XS_GRID;
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let p = r.add(b * 74);
        prefetch_ahead(p, 74);
        let d = f16_at(p);
        for k in 0..16 {
            let mut sum = _mm256_setzero_ps();
            for j in [2 * k, 2 * k + 1] {
                let q = u16::from_le_bytes([*p.add(2 + 2 * j), *p.add(3 + 2 * j)]) as u32;
                sum = signed_grid_fma(IQ2XS_GRID[(q & 511) as usize].as_ptr(), ksigns(q >> 9), x.add(b * 256 + 8 * j), sum);
            }
            let s = (*p.add(66 + k / 2) >> (4 * (k % 2))) & 0xF;
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * (0.5 + s as f32) * 0.25), sum, acc);
        }
    }
    hsum(acc)
}

/// iq2_s: 32 grid points of 8, a 10-bit index each (8 bits in `qs`, 2 in
/// `qh`), a sign byte each, a scale nibble each two.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq2_s(r: *const u8, x: *const f32, nb: usize) -> f32 {
    use graphc_ir::quant_grids::IQ2S_GRID;
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let p = r.add(b * 82);
        prefetch_ahead(p, 82);
        let d = f16_at(p);
        for k in 0..16 {
            let mut sum = _mm256_setzero_ps();
            for j in [2 * k, 2 * k + 1] {
                let index = *p.add(2 + j) as usize | (((*p.add(66 + j / 4) >> (2 * (j % 4))) & 3) as usize) << 8;
                sum = signed_grid_fma(IQ2S_GRID[index].as_ptr(), *p.add(34 + j) as u32, x.add(b * 256 + 8 * j), sum);
            }
            let s = (*p.add(74 + k / 2) >> (4 * (k % 2))) & 0xF;
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * (0.5 + s as f32) * 0.25), sum, acc);
        }
    }
    hsum(acc)
}

/// iq3_xxs: 8 sub-blocks of 32, each eight grid points of 4 (a byte each)
/// and a u32 of four sign indices and a scale `d (0.5 + s) / 2`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq3_xxs(r: *const u8, x: *const f32, nb: usize) -> f32 {
    use graphc_ir::quant_grids::IQ3XXS_GRID;
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let p = r.add(b * 98);
        prefetch_ahead(p, 98);
        let d = f16_at(p);
        for ib in 0..8 {
            let q = p.add(2 + 8 * ib);
            let aux = u32_at(p.add(66 + 4 * ib));
            let mut sum = _mm256_setzero_ps();
            for g in 0..4 {
                let points = grid_pair(&IQ3XXS_GRID[*q.add(2 * g) as usize], &IQ3XXS_GRID[*q.add(2 * g + 1) as usize]);
                sum = signed_fma(points, ksigns((aux >> (7 * g)) & 127), x.add(b * 256 + 32 * ib + 8 * g), sum);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * (0.5 + (aux >> 28) as f32) * 0.5), sum, acc);
        }
    }
    hsum(acc)
}

/// iq3_s: 64 grid points of 4, a 9-bit index each (8 bits in `qs`, 1 in
/// `qh`), a sign bit an element, a scale `d (1 + 2s)` each 32 elements.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq3_s(r: *const u8, x: *const f32, nb: usize) -> f32 {
    use graphc_ir::quant_grids::IQ3S_GRID;
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let p = r.add(b * 110);
        prefetch_ahead(p, 110);
        let d = f16_at(p);
        for ib in 0..8 {
            let mut sum = _mm256_setzero_ps();
            for g in 0..4 {
                // Group g: points j, j + 1 (elements 8·(4 ib + g) ..).
                let j = 8 * ib + 2 * g;
                let index = |j: usize| *p.add(2 + j) as usize | (((*p.add(66 + j / 8) >> (j % 8)) & 1) as usize) << 8;
                let points = grid_pair(&IQ3S_GRID[index(j)], &IQ3S_GRID[index(j + 1)]);
                sum = signed_fma(points, *p.add(74 + 4 * ib + g) as u32, x.add(b * 256 + 32 * ib + 8 * g), sum);
            }
            let s = ((*p.add(106 + ib / 2) >> (4 * (ib % 2))) & 0xF) as u32;
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * (1 + 2 * s) as f32), sum, acc);
        }
    }
    hsum(acc)
}

/// Eight iq1 grid values (-1, 0, 1) plus `delta`, times the 8 floats at
/// `x`, added to `acc`.
#[inline(always)]
unsafe fn iq1_point_fma(point: &[i8; 8], delta: f32, x: *const f32, acc: __m256) -> __m256 {
    let g = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(point.as_ptr() as *const __m128i)));
    _mm256_fmadd_ps(_mm256_add_ps(g, _mm256_set1_ps(delta)), _mm256_loadu_ps(x), acc)
}

/// iq1_s: 8 sub-blocks of 32, four grid points of 8 each (an 11-bit
/// index), one scale `d (2s + 1)` and delta sign a sub-block (its u16 `qh`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq1_s(r: *const u8, x: *const f32, nb: usize) -> f32 {
    use graphc_ir::quant_grids::IQ1S_GRID;
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let p = r.add(b * 50);
        prefetch_ahead(p, 50);
        let d = f16_at(p);
        for ib in 0..8 {
            let qh = u16::from_le_bytes([*p.add(34 + 2 * ib), *p.add(35 + 2 * ib)]) as u32;
            let delta = if qh & 0x8000 == 0 { 0.125 } else { -0.125 };
            let mut sum = _mm256_setzero_ps();
            for g in 0..4 {
                let index = *p.add(2 + 4 * ib + g) as usize | (((qh >> (3 * g)) & 7) as usize) << 8;
                sum = iq1_point_fma(&IQ1S_GRID[index], delta, x.add(b * 256 + 32 * ib + 8 * g), sum);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * (2 * ((qh >> 12) & 7) + 1) as f32), sum, acc);
        }
    }
    hsum(acc)
}

/// iq1_m: iq1_s's points with a scale a 16 elements and a delta sign a
/// point; `d` spread over the top nibbles of the four scale words.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq1_m(r: *const u8, x: *const f32, nb: usize) -> f32 {
    use graphc_ir::quant_grids::IQ1S_GRID;
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let p = r.add(b * 56);
        prefetch_ahead(p, 56);
        let word = |k: usize| u16::from_le_bytes([*p.add(48 + 2 * k), *p.add(49 + 2 * k)]);
        let d_bits = (word(0) >> 12) | ((word(1) >> 12) << 4) | ((word(2) >> 12) << 8) | ((word(3) >> 12) << 12);
        let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(d_bits as i32)));
        for k in 0..16 {
            let mut sum = _mm256_setzero_ps();
            for j in [2 * k, 2 * k + 1] {
                let nibble = (*p.add(32 + j / 2) >> (4 * (j % 2))) & 0xF;
                let index = *p.add(j) as usize | ((nibble & 7) as usize) << 8;
                let delta = if nibble & 8 == 0 { 0.125 } else { -0.125 };
                sum = iq1_point_fma(&IQ1S_GRID[index], delta, x.add(b * 256 + 8 * j), sum);
            }
            let dl = d * (2 * ((word(k / 4) >> (3 * (k % 4))) & 7) + 1) as f32;
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dl), sum, acc);
        }
    }
    hsum(acc)
}

/// A 3×4 f32 tile: `out[i][j] = x_i · w_j` over `k` elements. Twelve
/// accumulators, three activation loads and one weight load per step: the
/// sixteen AVX2 registers exactly.
///
/// # Safety
/// AVX2 + FMA; rows `x + i*ldx` (i < 3) and `w + j*ldw` (j < 4) hold `k` floats.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn tile_3x4(x: *const f32, ldx: usize, w: *const f32, ldw: usize, k: usize, out: &mut super::Tile) {
    let mut acc = [[_mm256_setzero_ps(); 4]; 3];
    let mut kk = 0;
    while kk + 8 <= k {
        let xv = [_mm256_loadu_ps(x.add(kk)), _mm256_loadu_ps(x.add(ldx + kk)), _mm256_loadu_ps(x.add(2 * ldx + kk))];
        for j in 0..4 {
            let wv = _mm256_loadu_ps(w.add(j * ldw + kk));
            for i in 0..3 {
                acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
            }
        }
        kk += 8;
    }
    for i in 0..3 {
        for j in 0..4 {
            let mut s = hsum(acc[i][j]);
            for t in kk..k {
                s += *x.add(i * ldx + t) * *w.add(j * ldw + t);
            }
            out[i][j] = s;
        }
    }
}

/// `out[j] = scale * (q · k_j)` for the `out.len()` rows `k_j` of `d` floats.
/// Four keys at a time share each load of `q` and one horizontal reduction.
///
/// # Safety
/// AVX2 + FMA; `k` holds `out.len() * d` floats and `q` holds `d`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn scores(q: *const f32, k: *const f32, d: usize, scale: f32, out: &mut [f32]) {
    let n = out.len();
    let d8 = d / 8 * 8;
    let mut j = 0;
    while j + 4 <= n {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i < d8 {
            let qv = _mm256_loadu_ps(q.add(i));
            for (r, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k.add((j + r) * d + i)), *a);
            }
            i += 8;
        }
        for (r, a) in acc.iter().enumerate() {
            let mut s = hsum(*a);
            for t in d8..d {
                s += *q.add(t) * *k.add((j + r) * d + t);
            }
            out[j + r] = s * scale;
        }
        j += 4;
    }
    while j < n {
        out[j] = dot_f32(q, k.add(j * d), d) * scale;
        j += 1;
    }
}

/// `o += Σ_j p[j] * v_j` for the `p.len()` rows `v_j` of `o.len()` floats.
/// Columns go in blocks of up to 128, each block's sums held in registers
/// over all rows (no load/store of `o` per row).
///
/// # Safety
/// AVX2 + FMA; `v` holds `p.len() * o.len()` floats.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn weighted_sum(p: &[f32], v: *const f32, o: &mut [f32]) {
    let dv = o.len();
    if !dv.is_multiple_of(8) {
        for (j, &pj) in p.iter().enumerate() {
            axpy(pj, v.add(j * dv), o.as_mut_ptr(), dv);
        }
        return;
    }
    for col in (0..dv).step_by(128) {
        let nv = (dv - col).min(128) / 8;
        let mut acc = [_mm256_setzero_ps(); 16];
        for (a, i) in acc.iter_mut().zip(0..nv) {
            *a = _mm256_loadu_ps(o.as_ptr().add(col + 8 * i));
        }
        for (j, &pj) in p.iter().enumerate() {
            let pv = _mm256_set1_ps(pj);
            let row = v.add(j * dv + col);
            for (a, i) in acc.iter_mut().zip(0..nv) {
                *a = _mm256_fmadd_ps(pv, _mm256_loadu_ps(row.add(8 * i)), *a);
            }
        }
        for (a, i) in acc.iter().zip(0..nv) {
            _mm256_storeu_ps(o.as_mut_ptr().add(col + 8 * i), *a);
        }
    }
}

/// 16 unsigned bytes as two f32 vectors (elements 0..8, 8..16).
#[inline(always)]
unsafe fn f32x16_u8(v: __m128i) -> [__m256; 2] {
    [_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)))]
}

/// 16 signed bytes as two f32 vectors.
#[inline(always)]
unsafe fn f32x16_i8(v: __m128i) -> [__m256; 2] {
    [_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)))]
}

/// `fma16_u8` / `fma16_i8` with the bytes already converted: the same two FMAs.
#[inline(always)]
unsafe fn fma16(w: &[__m256; 2], x: *const f32, acc: __m256) -> __m256 {
    _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x.add(8)), _mm256_fmadd_ps(w[0], _mm256_loadu_ps(x), acc))
}

/// `dot32_u8` / `dot32_i8` with the bytes converted (`w` = elements 0..16, 16..32).
#[inline(always)]
unsafe fn dot32(w: &[[__m256; 2]; 2], x: *const f32) -> __m256 {
    fma16(&w[1], x.add(16), fma16(&w[0], x, _mm256_setzero_ps()))
}

/// 32 unsigned bytes (a `__m256i`) converted, as `dot32_u8` reads them.
#[inline(always)]
unsafe fn f32x32_u8(v: __m256i) -> [[__m256; 2]; 2] {
    [f32x16_u8(_mm256_castsi256_si128(v)), f32x16_u8(_mm256_extracti128_si256(v, 1))]
}

#[inline(always)]
unsafe fn f32x32_i8(v: __m256i) -> [[__m256; 2]; 2] {
    [f32x16_i8(_mm256_castsi256_si128(v)), f32x16_i8(_mm256_extracti128_si256(v, 1))]
}

/// `dot_row` of each weight row in `rows` against `M` activation rows at
/// once, for q4_0, q4_1, q5_0, q8_0, q4_k and q6_k: each block's integers
/// are converted to f32 once and then go through, for every activation row,
/// exactly the FMAs and additions `dot_row` does for that row alone, in the
/// same order, so each result has the bits of `dot_row`. `out` is
/// `[weight row][activation row]`; `false` (nothing written) for other types.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_rows_multi<const M: usize>(dtype: DType, rows: &[u8], x: [&[f32]; M], xsums: [&[f32]; M], out: &mut [f32]) -> bool {
    if !matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q8_0 | DType::Q4K | DType::Q6K) {
        return false;
    }
    let n = x[0].len();
    let Some(rb) = dtype.storage_bytes(n as u64).map(|b| b as usize) else { return false };
    let count = out.len() / M;
    assert!(out.len() == count * M && rows.len() == rb * count, "{dtype}: {} bytes for {count} rows of {rb}", rows.len());
    assert!(x.iter().all(|r| r.len() == n) && xsums.iter().all(|s| s.len() * 32 >= n), "activation rows of unequal length");
    let xp = x.map(|r| r.as_ptr());
    for (j, o) in out.chunks_exact_mut(M).enumerate() {
        let r = rows.as_ptr().add(j * rb);
        o.copy_from_slice(&match dtype {
            DType::Q4_0 => q4_multi::<18, true, M>(r, xp, xsums, n / 32),
            DType::Q4_1 => q4_multi::<20, false, M>(r, xp, xsums, n / 32),
            DType::Q5_0 => two_acc_multi::<Q5_0Blocks, M>(r, xp, n / 32),
            DType::Q8_0 => two_acc_multi::<Q8_0Blocks, M>(r, xp, n / 32),
            DType::Q4K => q4_k_multi::<M>(r, xp, xsums, n / 256),
            _ => q6_k_multi::<M>(r, xp, n / 256),
        });
    }
    true
}

/// `q4` (q4_0 or q4_1) for `M` activation rows: its two accumulators and
/// two offsets, each block decoded once.
#[inline(always)]
unsafe fn q4_multi<const BB: usize, const Q4_0: bool, const M: usize>(r: *const u8, x: [*const f32; M], xsums: [&[f32]; M], nb: usize) -> [f32; M] {
    #[inline(always)]
    unsafe fn decode<const BB: usize>(p: *const u8) -> [[__m256; 2]; 2] {
        let mask = _mm_set1_epi8(0x0F);
        let qs = _mm_loadu_si128(p.add(BB - 16) as *const __m128i);
        [f32x16_u8(_mm_and_si128(qs, mask)), f32x16_u8(_mm_and_si128(_mm_srli_epi16(qs, 4), mask))]
    }
    let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); M], [_mm256_setzero_ps(); M]);
    let (mut off0, mut off1) = ([0f32; M], [0f32; M]);
    let mut b = 0;
    while b + 2 <= nb {
        let p = r.add(b * BB);
        prefetch_ahead(p, 2 * BB);
        let (w0, w1) = (decode::<BB>(p), decode::<BB>(p.add(BB)));
        let ((d0, o0), (d1, o1)) = (q4_scales::<BB, Q4_0>(p), q4_scales::<BB, Q4_0>(p.add(BB)));
        let (d0, d1) = (_mm256_set1_ps(d0), _mm256_set1_ps(d1));
        for i in 0..M {
            acc0[i] = _mm256_fmadd_ps(d0, dot32(&w0, x[i].add(b * 32)), acc0[i]);
            acc1[i] = _mm256_fmadd_ps(d1, dot32(&w1, x[i].add(b * 32 + 32)), acc1[i]);
            off0[i] += o0 * xsums[i][b];
            off1[i] += o1 * xsums[i][b + 1];
        }
        b += 2;
    }
    if b < nb {
        let p = r.add(b * BB);
        let (w0, (d0, o0)) = (decode::<BB>(p), q4_scales::<BB, Q4_0>(p));
        let d0 = _mm256_set1_ps(d0);
        for i in 0..M {
            acc0[i] = _mm256_fmadd_ps(d0, dot32(&w0, x[i].add(b * 32)), acc0[i]);
            off0[i] += o0 * xsums[i][b];
        }
    }
    std::array::from_fn(|i| hsum(_mm256_add_ps(acc0[i], acc1[i])) + (off0[i] + off1[i]))
}

/// A block type whose row dot is `Σ d · dot32(block)` over blocks taken two
/// at a time into two accumulators (q5_0, q8_0: no min term).
trait TwoAccBlocks {
    const BYTES: usize;
    /// The block's 32 values as f32, as the single-row kernel converts them.
    unsafe fn decode(p: *const u8) -> [[__m256; 2]; 2];
}

struct Q5_0Blocks;
impl TwoAccBlocks for Q5_0Blocks {
    const BYTES: usize = 22;
    #[inline(always)]
    unsafe fn decode(p: *const u8) -> [[__m256; 2]; 2] {
        f32x32_i8(_mm256_loadu_si256(q5_0_bytes(p).as_ptr() as *const __m256i))
    }
}

struct Q8_0Blocks;
impl TwoAccBlocks for Q8_0Blocks {
    const BYTES: usize = 34;
    #[inline(always)]
    unsafe fn decode(p: *const u8) -> [[__m256; 2]; 2] {
        f32x32_i8(_mm256_loadu_si256(p.add(2) as *const __m256i))
    }
}

/// `q5_0` / `q8_0` for `M` activation rows: their kernels' two accumulators
/// (even and odd blocks), each block decoded once.
#[inline(always)]
unsafe fn two_acc_multi<B: TwoAccBlocks, const M: usize>(r: *const u8, x: [*const f32; M], nb: usize) -> [f32; M] {
    let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); M], [_mm256_setzero_ps(); M]);
    let mut b = 0;
    while b + 2 <= nb {
        let p = r.add(b * B::BYTES);
        prefetch_ahead(p, 2 * B::BYTES);
        let (w0, w1) = (B::decode(p), B::decode(p.add(B::BYTES)));
        let (d0, d1) = (_mm256_set1_ps(f16_at(p)), _mm256_set1_ps(f16_at(p.add(B::BYTES))));
        for i in 0..M {
            acc0[i] = _mm256_fmadd_ps(d0, dot32(&w0, x[i].add(b * 32)), acc0[i]);
            acc1[i] = _mm256_fmadd_ps(d1, dot32(&w1, x[i].add(b * 32 + 32)), acc1[i]);
        }
        b += 2;
    }
    if b < nb {
        let p = r.add(b * B::BYTES);
        let (w0, d0) = (B::decode(p), _mm256_set1_ps(f16_at(p)));
        for i in 0..M {
            acc0[i] = _mm256_fmadd_ps(d0, dot32(&w0, x[i].add(b * 32)), acc0[i]);
        }
    }
    std::array::from_fn(|i| hsum(_mm256_add_ps(acc0[i], acc1[i])))
}

/// `q4_k` for `M` activation rows.
#[inline(always)]
unsafe fn q4_k_multi<const M: usize>(r: *const u8, x: [*const f32; M], xsums: [&[f32]; M], nb: usize) -> [f32; M] {
    let mask = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); M];
    let mut offset = [0f32; M];
    for b in 0..nb {
        let p = r.add(b * 144);
        prefetch_ahead(p, 144);
        let (d, dmin) = (f16_at(p), f16_at(p.add(2)));
        let (sc, mn) = scales_mins_k4(p.add(4));
        let qs = p.add(16);
        for c in 0..4 {
            let q = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
            let lo = f32x32_u8(_mm256_and_si256(q, mask));
            let hi = f32x32_u8(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask));
            let (s_lo, s_hi) = (_mm256_set1_ps(d * sc[2 * c] as f32), _mm256_set1_ps(d * sc[2 * c + 1] as f32));
            for i in 0..M {
                let xb = x[i].add(b * 256);
                acc[i] = _mm256_fmadd_ps(s_lo, dot32(&lo, xb.add(64 * c)), acc[i]);
                acc[i] = _mm256_fmadd_ps(s_hi, dot32(&hi, xb.add(64 * c + 32)), acc[i]);
            }
        }
        for i in 0..M {
            for j in 0..8 {
                offset[i] -= dmin * mn[j] as f32 * xsums[i][b * 8 + j];
            }
        }
    }
    std::array::from_fn(|i| hsum(acc[i]) + offset[i])
}

/// `q6_k` for `M` activation rows.
#[inline(always)]
unsafe fn q6_k_multi<const M: usize>(r: *const u8, x: [*const f32; M], nb: usize) -> [f32; M] {
    let mut acc = [_mm256_setzero_ps(); M];
    for b in 0..nb {
        let p = r.add(b * 210);
        prefetch_ahead(p, 210);
        let d = f16_at(p.add(208));
        let sc = p.add(192) as *const i8;
        for n in 0..2 {
            for (j, qj) in q6_k_values(p, n).into_iter().enumerate() {
                let w0 = f32x16_i8(_mm256_castsi256_si128(qj));
                let w1 = f32x16_i8(_mm256_extracti128_si256(qj, 1));
                let (c0, c1) = (*sc.add(8 * n + 2 * j) as f32, *sc.add(8 * n + 2 * j + 1) as f32);
                let (s0, s1) = (_mm256_set1_ps(d * c0), _mm256_set1_ps(d * c1));
                for i in 0..M {
                    let xn = x[i].add(b * 256 + 128 * n);
                    let a = fma16(&w0, xn.add(32 * j), _mm256_setzero_ps());
                    let e = fma16(&w1, xn.add(32 * j + 16), _mm256_setzero_ps());
                    acc[i] = _mm256_fmadd_ps(s0, a, acc[i]);
                    acc[i] = _mm256_fmadd_ps(s1, e, acc[i]);
                }
            }
        }
    }
    std::array::from_fn(|i| hsum(acc[i]))
}

/// The exponentials' polynomial (`exp8`, `avx512::exp16`): `ln2^k / k!`,
/// k = 7 .. 0.
pub(super) fn exp2_coefficients() -> [f32; 8] {
    const LN2: f32 = std::f32::consts::LN_2;
    [LN2.powi(7) / 5040.0, LN2.powi(6) / 720.0, LN2.powi(5) / 120.0, LN2.powi(4) / 24.0, LN2.powi(3) / 6.0, LN2 * LN2 / 2.0, LN2, 1.0]
}

/// `exp(v)` for 8 lanes, `avx512::exp16`'s arithmetic lane for lane (the
/// same clamp, rounding, polynomial and coefficients), so each lane is
/// that kernel's bits: `2^n` is applied as `2^a · 2^b` with `a = ⌊n/2⌋`,
/// `b = n - a` (each a normal power of two for `n` in [-160, 128]); the
/// first product is exact, the second rounds once, as `vscalefps` does,
/// to a subnormal, 0 or inf alike.
#[inline(always)]
unsafe fn exp8(v: __m256, coef: &[f32; 8]) -> __m256 {
    let t = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v, _mm256_set1_ps(std::f32::consts::LOG2_E)), _mm256_set1_ps(-160.0)), _mm256_set1_ps(128.0));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
    let f = _mm256_sub_ps(t, n);
    let mut poly = _mm256_set1_ps(coef[0]);
    for &c in &coef[1..] {
        poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(c));
    }
    let n = _mm256_cvtps_epi32(n);
    let a = _mm256_srai_epi32(n, 1);
    let b = _mm256_sub_epi32(n, a);
    let pow2 = |e: __m256i| _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
    _mm256_mul_ps(_mm256_mul_ps(poly, pow2(a)), pow2(b))
}

/// `avx512::exp_shifted_sum`, 8 lanes at a time (`exp8`).
///
/// # Safety
/// AVX2 + FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn exp_shifted_sum(x: &mut [f32], m: f32) -> f32 {
    let n8 = x.len() / 8 * 8;
    let p = x.as_mut_ptr();
    let (mv, coef) = (_mm256_set1_ps(m), exp2_coefficients());
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i < n8 {
        let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), mv), &coef);
        _mm256_storeu_ps(p.add(i), e);
        acc = _mm256_add_ps(acc, e);
        i += 8;
    }
    let mut sum = hsum(acc);
    for v in &mut x[n8..] {
        *v = (*v - m).exp();
        sum += *v;
    }
    sum
}

/// `avx512::silu`, 8 lanes at a time: `x / (1 + exp(-x))` with `exp8`.
///
/// # Safety
/// AVX2 + FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn silu(x: &mut [f32]) {
    let n8 = x.len() / 8 * 8;
    let p = x.as_mut_ptr();
    let (one, coef) = (_mm256_set1_ps(1.0), exp2_coefficients());
    let mut i = 0;
    while i < n8 {
        let v = _mm256_loadu_ps(p.add(i));
        let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v), &coef);
        _mm256_storeu_ps(p.add(i), _mm256_div_ps(v, _mm256_add_ps(one, e)));
        i += 8;
    }
    for v in &mut x[n8..] {
        *v = *v / (1.0 + (-*v).exp());
    }
}

/// `avx512::gelu_tanh`, 8 lanes at a time: `tanh(u) = 1 - 2 / (exp(2u) + 1)`
/// with `exp8`.
///
/// # Safety
/// AVX2 + FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gelu_tanh(x: &mut [f32]) {
    let c = (2.0f32 / std::f32::consts::PI).sqrt();
    let n8 = x.len() / 8 * 8;
    let p = x.as_mut_ptr();
    let coef = exp2_coefficients();
    let mut i = 0;
    while i < n8 {
        let v = _mm256_loadu_ps(p.add(i));
        let v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
        let u = _mm256_mul_ps(_mm256_set1_ps(c), _mm256_fmadd_ps(_mm256_set1_ps(0.044715), v3, v));
        let e = exp8(_mm256_add_ps(u, u), &coef);
        let tanh = _mm256_sub_ps(_mm256_set1_ps(1.0), _mm256_div_ps(_mm256_set1_ps(2.0), _mm256_add_ps(e, _mm256_set1_ps(1.0))));
        let g = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5), v), _mm256_add_ps(_mm256_set1_ps(1.0), tanh));
        _mm256_storeu_ps(p.add(i), g);
        i += 8;
    }
    let f = crate::cpu::reference::unary_fn(graphc_ir::op::UnaryOp::GeluTanh);
    for v in &mut x[n8..] {
        *v = f(*v);
    }
}
