//! AVX-512F f32 tile for prefill's matrix products: 4 activation rows × 4
//! weight rows, 16 lanes, sixteen accumulators of the thirty-two registers.

// Register tiles are indexed like the math they compute.
#![allow(clippy::needless_range_loop)]

use super::avx2::{exp2_coefficients, PREFETCH_AHEAD};
use std::arch::x86_64::*;

/// `out[i][j] = x_i · w_j` over `k` elements, `i < 6`, `j < 4`: 24
/// accumulators, six activation loads and one weight load at a time — 31 of
/// the 32 registers, 24 FMAs per 10 loads.
///
/// # Safety
/// AVX-512F; rows `x + i*ldx` (i < 6) and `w + j*ldw` (j < 4) hold `k` floats.
#[target_feature(enable = "avx512f")]
pub unsafe fn tile_6x4(x: *const f32, ldx: usize, w: *const f32, ldw: usize, k: usize, out: &mut super::Tile) {
    let mut acc = [[_mm512_setzero_ps(); 4]; 6];
    let mut kk = 0;
    while kk + 16 <= k {
        let mut xv = [_mm512_setzero_ps(); 6];
        for i in 0..6 {
            xv[i] = _mm512_loadu_ps(x.add(i * ldx + kk));
        }
        for j in 0..4 {
            let wv = _mm512_loadu_ps(w.add(j * ldw + kk));
            for i in 0..6 {
                acc[i][j] = _mm512_fmadd_ps(xv[i], wv, acc[i][j]);
            }
        }
        kk += 16;
    }
    for i in 0..6 {
        for j in 0..4 {
            let mut s = _mm512_reduce_add_ps(acc[i][j]);
            for t in kk..k {
                s += *x.add(i * ldx + t) * *w.add(j * ldw + t);
            }
            out[i][j] = s;
        }
    }
}

/// GELU (tanh form) in place, 16 lanes: `tanh(u) = 1 - 2 / (exp(2u) + 1)`
/// with `exp16`. Overflow gives `exp = inf` and `tanh = 1`, as it should.
///
/// # Safety
/// AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn gelu_tanh(x: &mut [f32]) {
    let c = (2.0f32 / std::f32::consts::PI).sqrt();
    let n16 = x.len() / 16 * 16;
    let p = x.as_mut_ptr();
    let coef = exp2_coefficients();
    let mut i = 0;
    while i < n16 {
        let v = _mm512_loadu_ps(p.add(i));
        let v3 = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
        let u = _mm512_mul_ps(_mm512_set1_ps(c), _mm512_fmadd_ps(_mm512_set1_ps(0.044715), v3, v));
        let e = exp16(_mm512_add_ps(u, u), &coef);
        let tanh = _mm512_sub_ps(_mm512_set1_ps(1.0), _mm512_div_ps(_mm512_set1_ps(2.0), _mm512_add_ps(e, _mm512_set1_ps(1.0))));
        let g = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5), v), _mm512_add_ps(_mm512_set1_ps(1.0), tanh));
        _mm512_storeu_ps(p.add(i), g);
        i += 16;
    }
    let f = crate::cpu::reference::unary_fn(graphc_ir::op::UnaryOp::GeluTanh);
    for v in &mut x[n16..] {
        *v = f(*v);
    }
}

/// The f16 pair at `p` (`d`, then `m`) as f32.
#[inline(always)]
unsafe fn f16_pair(p: *const u8) -> (f32, f32) {
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// Row dots for q4_0, q4_1, q5_0, q8_0, q4_k and q6_k, 16 lanes at a time: bytes are
/// widened straight from memory (`vpmovzxbd` / `vpmovsxbd`), so a q4 block
/// is one widening load, a mask and a shift for both nibble halves. `None`
/// for the other types (the AVX2 kernels serve them).
///
/// # Safety
/// AVX-512F + F16C; the lengths are checked by `avx2::dot_row`'s contract
/// (asserted again here).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn dot_row(dtype: graphc_ir::DType, row: &[u8], x: &[f32], xsums: &[f32]) -> Option<f32> {
    use graphc_ir::DType;
    let n = x.len();
    assert_eq!(Some(row.len() as u64), dtype.storage_bytes(n as u64));
    let nb = n / 32;
    let (r, xp) = (row.as_ptr(), x.as_ptr());
    match dtype {
        DType::Q4_0 => {
            assert!(xsums.len() >= nb);
            Some(q4::<18, true>(r, xp, xsums.as_ptr(), nb))
        }
        DType::Q4_1 => {
            assert!(xsums.len() >= nb);
            Some(q4::<20, false>(r, xp, xsums.as_ptr(), nb))
        }
        DType::Q5_0 => {
            assert!(xsums.len() >= nb);
            Some(q5_0(r, xp, xsums.as_ptr(), nb))
        }
        DType::Q4K => {
            assert!(xsums.len() * 32 >= n);
            Some(q4_k_multi::<1>(r, [xp], [xsums.as_ptr()], n / 256)[0])
        }
        DType::Q6K => Some(q6_k_multi::<1>(r, [xp], n / 256)[0]),
        DType::Q8_0 => Some(q8_0(r, xp, nb)),
        _ => None,
    }
}

/// `out[r] = row r · x` for the consecutive rows in `rows` (`out.len()` of
/// them), each by the same kernel `dot_row` uses for the type (so the same
/// bits), except q4_0/q4_1/q5_0, which go four rows at a time (`dot_rows4`; a
/// short last group repeats its last row). One call per run of rows instead
/// of one per row: on short rows (Gemma 3's 262144 × 640 output matrix) the
/// per-row dispatch was a tenth of the step. `false` for the types the
/// AVX2 kernels serve.
///
/// # Safety
/// AVX-512F + F16C; the lengths are asserted.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn dot_rows(dtype: graphc_ir::DType, rows: &[u8], x: &[f32], xsums: &[f32], out: &mut [f32]) -> bool {
    use graphc_ir::DType;
    let n = x.len();
    let Some(rb) = dtype.storage_bytes(n as u64).map(|b| b as usize) else { return false };
    assert_eq!(rows.len(), rb * out.len());
    let nb = n / 32;
    let (xp, xs) = (x.as_ptr(), xsums.as_ptr());
    let row = |r: usize| rows.as_ptr().add(r * rb);
    match dtype {
        // Four rows at a time: `dot_rows_multi`'s loop with one activation row.
        DType::Q4_0 | DType::Q4_1 | DType::Q5_0 => return dot_rows_multi::<1>(dtype, rows, [x], [xsums], out),
        DType::Q8_0 => out.iter_mut().enumerate().for_each(|(r, o)| *o = q8_0(row(r), xp, nb)),
        DType::Q4K => {
            assert!(xsums.len() * 32 >= n);
            out.iter_mut().enumerate().for_each(|(r, o)| *o = q4_k_multi::<1>(row(r), [xp], [xs], n / 256)[0]);
        }
        DType::Q6K => out.iter_mut().enumerate().for_each(|(r, o)| *o = q6_k_multi::<1>(row(r), [xp], n / 256)[0]),
        _ => return false,
    }
    true
}

/// q8_0: `d * Σ q·x` per block, four blocks per iteration into four
/// independent accumulators.
///
/// # Safety
/// AVX-512F + F16C; `r` holds `nb` blocks of 34 bytes, `x` `32 * nb` floats.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn q8_0(r: *const u8, xp: *const f32, nb: usize) -> f32 {
    let [v] = q8_0_multi::<1>(r, [xp], nb);
    v
}

/// `q8_0` for `M` activation rows at once: each block's quants widened and
/// converted once, then every row takes exactly `q8_0`'s operations (the
/// same four accumulators by block, summed the same way), so result `i` has
/// the bits of `q8_0` on activation row `i` alone.
///
/// # Safety
/// As `q8_0`, for each of the `M` activation rows.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn q8_0_multi<const M: usize>(r: *const u8, xp: [*const f32; M], nb: usize) -> [f32; M] {
    #[inline(always)]
    unsafe fn block<const M: usize>(p: *const u8, xb: [*const f32; M], acc: &mut [__m512; M]) {
        let (d, _) = f16_pair(p);
        let q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(2) as *const __m128i)));
        let q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(18) as *const __m128i)));
        let d = _mm512_set1_ps(d);
        for i in 0..M {
            let s = _mm512_fmadd_ps(q1, _mm512_loadu_ps(xb[i].add(16)), _mm512_mul_ps(q0, _mm512_loadu_ps(xb[i])));
            acc[i] = _mm512_fmadd_ps(d, s, acc[i]);
        }
    }
    let mut a = [[_mm512_setzero_ps(); M]; 4];
    let at = |b: usize| xp.map(|x| x.add(b * 32));
    let mut b = 0;
    while b + 4 <= nb {
        let p = r.add(b * 34);
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD + 64) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD + 128) as *const i8);
        for (j, acc) in a.iter_mut().enumerate() {
            block(p.add(34 * j), at(b + j), acc);
        }
        b += 4;
    }
    while b < nb {
        block(r.add(b * 34), at(b), &mut a[0]);
        b += 1;
    }
    std::array::from_fn(|i| _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0][i], a[1][i]), _mm512_add_ps(a[2][i], a[3][i]))))
}

/// q4_0 (`BB` = 18, `(q - 8) * d`) and q4_1 (`BB` = 20, `q * d + m`): one
/// widening load gives both nibble halves of a block. Four blocks per
/// iteration into four independent accumulator chains (vector and scalar),
/// so no block waits on the previous one's latency.
///
/// # Safety
/// AVX-512F + F16C; `r` holds `nb` blocks, `x` `32 * nb` floats, `xsums` `nb`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn q4<const BB: usize, const Q4_0: bool>(r: *const u8, x: *const f32, xsums: *const f32, nb: usize) -> f32 {
    // A block's `d * Σ q·x` into `acc`, and its offset (`m * Σx`, or
    // `-8 d * Σx` for q4_0) as a scalar.
    #[inline(always)]
    unsafe fn block<const BB: usize, const Q4_0: bool>(p: *const u8, xb: *const f32, xsum: f32, acc: __m512) -> (__m512, f32) {
        let (d, m) = f16_pair(p);
        let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(p.add(BB - 16) as *const __m128i));
        let lo = _mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(0x0F)));
        let hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4));
        let s = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xb.add(16)), _mm512_mul_ps(lo, _mm512_loadu_ps(xb)));
        (_mm512_fmadd_ps(_mm512_set1_ps(d), s, acc), if Q4_0 { -8.0 * d } else { m } * xsum)
    }
    let (mut a0, mut a1, mut a2, mut a3) = (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());
    let (mut o0, mut o1, mut o2, mut o3) = (0f32, 0f32, 0f32, 0f32);
    let mut b = 0;
    while b + 4 <= nb {
        let (p, xb, xs) = (r.add(b * BB), x.add(b * 32), xsums.add(b));
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD + 64) as *const i8);
        let o;
        (a0, o) = block::<BB, Q4_0>(p, xb, *xs, a0);
        o0 += o;
        let o;
        (a1, o) = block::<BB, Q4_0>(p.add(BB), xb.add(32), *xs.add(1), a1);
        o1 += o;
        let o;
        (a2, o) = block::<BB, Q4_0>(p.add(2 * BB), xb.add(64), *xs.add(2), a2);
        o2 += o;
        let o;
        (a3, o) = block::<BB, Q4_0>(p.add(3 * BB), xb.add(96), *xs.add(3), a3);
        o3 += o;
        b += 4;
    }
    while b < nb {
        let o;
        (a0, o) = block::<BB, Q4_0>(r.add(b * BB), x.add(b * 32), *xsums.add(b), a0);
        o0 += o;
        b += 1;
    }
    let v = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
    _mm512_reduce_add_ps(v) + ((o0 + o1) + (o2 + o3))
}

/// q5_0: `((nibble | high bit << 4) - 16) * d`, element `i`'s high bit being
/// bit `i` of `qh`: the high bits become lane masks (`vpord` under a mask),
/// and the `- 16` is folded into the block's offset `-16 d * Σx`.
///
/// # Safety
/// AVX-512F + F16C; `r` holds `nb` blocks, `x` `32 * nb` floats, `xsums` `nb`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn q5_0(r: *const u8, x: *const f32, xsums: *const f32, nb: usize) -> f32 {
    #[inline(always)]
    unsafe fn block(p: *const u8, xb: *const f32, xsum: f32, acc: __m512) -> (__m512, f32) {
        let (d, _) = f16_pair(p);
        let qh = (p.add(2) as *const u32).read_unaligned();
        let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(p.add(6) as *const __m128i));
        let sixteen = _mm512_set1_epi32(16);
        let lo = _mm512_and_si512(q, _mm512_set1_epi32(0x0F));
        let lo = _mm512_mask_or_epi32(lo, qh as u16, lo, sixteen);
        let hi = _mm512_srli_epi32(q, 4);
        let hi = _mm512_mask_or_epi32(hi, (qh >> 16) as u16, hi, sixteen);
        let s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_loadu_ps(xb.add(16)), _mm512_mul_ps(_mm512_cvtepi32_ps(lo), _mm512_loadu_ps(xb)));
        (_mm512_fmadd_ps(_mm512_set1_ps(d), s, acc), -16.0 * d * xsum)
    }
    let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let (mut o0, mut o1) = (0f32, 0f32);
    let mut b = 0;
    while b + 2 <= nb {
        let (p, xb) = (r.add(b * 22), x.add(b * 32));
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD) as *const i8);
        let o;
        (a0, o) = block(p, xb, *xsums.add(b), a0);
        o0 += o;
        let o;
        (a1, o) = block(p.add(22), xb.add(32), *xsums.add(b + 1), a1);
        o1 += o;
        b += 2;
    }
    if b < nb {
        let o;
        (a0, o) = block(r.add(b * 22), x.add(b * 32), *xsums.add(b), a0);
        o0 += o;
    }
    _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) + (o0 + o1)
}

/// The 6-bit scales and mins of a q4_k block (`graphc_ir::quant`).
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

/// q4_k: 8 sub-blocks of 32, each `d*sc * nibble - dmin*m`; a 16-byte load
/// widened to dwords gives 16 low nibbles (sub-block `2c`) and 16 high ones
/// (sub-block `2c + 1`). The mins go through the per-32 sums of `x`.
/// `M` activation rows at once (a batch's decode; `M` = 1 is the row dot):
/// each block's scales and nibbles decoded once, then every row takes the
/// one-row kernel's own operations, so each row's result is its bits alone.
///
/// # Safety
/// AVX-512F + F16C; `r` holds `nb` blocks, each `x[i]` `256 * nb` floats,
/// each `xsums[i]` `8 * nb`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn q4_k_multi<const M: usize>(r: *const u8, x: [*const f32; M], xsums: [*const f32; M], nb: usize) -> [f32; M] {
    let mask = _mm512_set1_epi32(0x0F);
    // Eight accumulators a row (two FMAs each per block) and the mins as one
    // 8-lane FMA per block: with two chains of eight FMAs and a scalar chain
    // of eight subtractions a block, the kernel waited on latency.
    let mut acc = [[_mm512_setzero_ps(); 8]; M];
    let mut offsets = [_mm256_setzero_ps(); M];
    let mut scales = [0f32; 8];
    for b in 0..nb {
        let p = r.add(b * 144);
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD + 64) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD + 128) as *const i8);
        let (d, dmin) = f16_pair(p);
        let (sc, mn) = scales_mins_k4(p.add(4));
        let widen = |v: [u8; 8]| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(v.as_ptr() as *const __m128i)));
        let scaled_mins = _mm256_mul_ps(_mm256_set1_ps(dmin), widen(mn));
        for i in 0..M {
            offsets[i] = _mm256_fmadd_ps(scaled_mins, _mm256_loadu_ps(xsums[i].add(b * 8)), offsets[i]);
        }
        // `d · sc[j]` for the eight sub-blocks (the products a scalar
        // multiply gives), each broadcast from memory below.
        _mm256_storeu_ps(scales.as_mut_ptr(), _mm256_mul_ps(_mm256_set1_ps(d), widen(sc)));
        let qs = p.add(16);
        for c in 0..4 {
            let (dl, dh) = (broadcast_lane(&scales, 2 * c), broadcast_lane(&scales, 2 * c + 1));
            for half in 0..2 {
                let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(qs.add(32 * c + 16 * half) as *const __m128i));
                let (q_lo, q_hi) = (_mm512_cvtepi32_ps(_mm512_and_si512(q, mask)), _mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)));
                let a = (c % 2) * 4 + half * 2;
                for i in 0..M {
                    let xb = x[i].add(b * 256);
                    let lo = _mm512_mul_ps(q_lo, _mm512_loadu_ps(xb.add(64 * c + 16 * half)));
                    let hi = _mm512_mul_ps(q_hi, _mm512_loadu_ps(xb.add(64 * c + 32 + 16 * half)));
                    acc[i][a] = _mm512_fmadd_ps(dl, lo, acc[i][a]);
                    acc[i][a + 1] = _mm512_fmadd_ps(dh, hi, acc[i][a + 1]);
                }
            }
        }
    }
    std::array::from_fn(|i| {
        let acc = &acc[i];
        let sum = _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])),
            _mm512_add_ps(_mm512_add_ps(acc[4], acc[5]), _mm512_add_ps(acc[6], acc[7])),
        );
        let o = _mm_add_ps(_mm256_castps256_ps128(offsets[i]), _mm256_extractf128_ps::<1>(offsets[i]));
        let o = _mm_add_ps(o, _mm_movehl_ps(o, o));
        let o = _mm_add_ss(o, _mm_movehdup_ps(o));
        _mm512_reduce_add_ps(sum) - _mm_cvtss_f32(o)
    })
}

/// q6_k: 16 sub-blocks of 16, each `d * sc * (q - 32)`, `q` six bits split
/// into a nibble of `ql` and two bits of `qh`. The six-bit values are put
/// together 32 bytes at a time in 256-bit registers (as the AVX2 kernel
/// does: widening to dwords first cost four times the integer work and ran
/// slower than AVX2), then each 16 widen to 16 lanes; eight accumulators a
/// row, two FMAs each per block. `M` activation rows as `q4_k_multi` takes
/// them: the values put together once, each row the one-row operations.
///
/// # Safety
/// AVX-512F + AVX2 + F16C; `r` holds `nb` blocks and each `x[i]` `256 * nb` floats.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn q6_k_multi<const M: usize>(r: *const u8, x: [*const f32; M], nb: usize) -> [f32; M] {
    let mut acc = [[_mm512_setzero_ps(); 8]; M];
    let mut scales = [0f32; 16];
    for b in 0..nb {
        let p = r.add(b * 210);
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD + 64) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD + 128) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD + 192) as *const i8);
        let d = {
            let bits = u16::from_le_bytes([*p.add(208), *p.add(209)]);
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
        };
        // `d · sc[j]` for the sixteen sub-blocks (the products a scalar
        // multiply gives), each broadcast from memory below.
        let sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(192) as *const __m128i)));
        _mm512_storeu_ps(scales.as_mut_ptr(), _mm512_mul_ps(_mm512_set1_ps(d), sc));
        for n in 0..2 {
            for (k, qk) in super::avx2::q6_k_values(p, n).into_iter().enumerate() {
                let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(qk)));
                let hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256::<1>(qk)));
                let (d0, d1) = (broadcast_lane(&scales, 8 * n + 2 * k), broadcast_lane(&scales, 8 * n + 2 * k + 1));
                for i in 0..M {
                    let xn = x[i].add(b * 256 + 128 * n);
                    let s0 = _mm512_mul_ps(lo, _mm512_loadu_ps(xn.add(32 * k)));
                    let s1 = _mm512_mul_ps(hi, _mm512_loadu_ps(xn.add(32 * k + 16)));
                    acc[i][2 * k] = _mm512_fmadd_ps(d0, s0, acc[i][2 * k]);
                    acc[i][2 * k + 1] = _mm512_fmadd_ps(d1, s1, acc[i][2 * k + 1]);
                }
            }
        }
    }
    std::array::from_fn(|i| {
        let acc = &acc[i];
        let sum = _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])),
            _mm512_add_ps(_mm512_add_ps(acc[4], acc[5]), _mm512_add_ps(acc[6], acc[7])),
        );
        _mm512_reduce_add_ps(sum)
    })
}

/// `o_r += Σ_j p_r[j] · v_j` for `R` rows at once (`p_r` = `p + r*stride`,
/// `n` weights; `o_r` = `o + r*dv`), columns a `PANEL` (64) at a time by
/// `outer_product`: each value row is loaded once for all `R` rows. Per
/// element the same FMA sequence as `avx2::weighted_sum`, so the results
/// are the same bits.
///
/// # Safety
/// AVX-512F; `dv % PANEL == 0`; `v` holds `n` rows of `dv`, `p` holds
/// `(R-1)*stride + n` floats and `o` `R*dv`.
#[target_feature(enable = "avx512f")]
pub unsafe fn weighted_sum_rows<const R: usize>(p: *const f32, stride: usize, n: usize, v: *const f32, dv: usize, o: *mut f32) {
    for col in (0..dv).step_by(super::PANEL) {
        outer_product::<R, true>(p, stride, v.add(col), dv, n, o.add(col), dv);
    }
}

/// `lanes[i]` in all 16 lanes, by a broadcast load: where a kernel has a
/// few scales per block for its FMAs, storing them once and loading each
/// keeps the shuffle ports free for the conversions (a broadcast out of a
/// register is a shuffle). Volatile, or the compiler forwards the stored
/// vector through shuffles again.
#[inline(always)]
unsafe fn broadcast_lane(lanes: &[f32], i: usize) -> __m512 {
    debug_assert!(i < lanes.len());
    _mm512_set1_ps(std::ptr::read_volatile(lanes.as_ptr().add(i)))
}

/// The 32 bits at `p` (a block's leading f16 scale, and its min or first
/// quant bytes), for packing four rows' scales into one conversion.
#[inline(always)]
unsafe fn u32_at(p: *const u8) -> i32 {
    (p as *const i32).read_unaligned()
}

/// Where a four-row kernel prefetches: the next group's rows (matrices
/// are row-major, a task's rows consecutive, so the next group is the
/// `4 · row_bytes` after this group's first row), read as one linear run,
/// two cache lines a block. Per-row prefetches (the same place in each of
/// the next four rows) left four interleaved streams that reached about
/// four fifths of the linear run's bytes/s from memory (measured with
/// Qwen2.5's 896-wide q5_0 rows, 2 threads); the linear run outpaces the
/// group (128 bytes a block against a row's 18–22), so it is ahead of the
/// next group's reads by the time they start.
fn rows4_prefetch_start(row_bytes: usize) -> usize {
    4 * row_bytes
}

/// Four weight rows against one activation row, for q4_0, q4_1 and q5_0:
/// each block's 32 activations are
/// loaded once for the four rows, the four rows' `(d, m)` pairs convert in
/// one `vcvtph2ps`, and the call, the reductions and the loop cost are paid
/// once per four rows. `None` for the other types (`dot_row` serves them):
/// q8_0 is bound by memory, not arithmetic, and four interleaved row
/// streams read it at half the speed of one linear stream (measured).
///
/// A row's arithmetic does not depend on its slot or on the other three
/// rows (lanes never mix), so a caller may pad a short group by repeating a
/// row, and results stay the same for any grouping or thread count.
///
/// # Safety
/// AVX-512F + F16C; every row holds the blocks of `x.len()` elements
/// (asserted).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn dot_rows4(dtype: graphc_ir::DType, rows: [&[u8]; 4], x: &[f32], xsums: &[f32]) -> Option<[f32; 4]> {
    use graphc_ir::DType;
    if !matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q5_0) {
        return None;
    }
    let n = x.len();
    for r in rows {
        assert_eq!(Some(r.len() as u64), dtype.storage_bytes(n as u64));
    }
    let nb = n / 32;
    let p = rows.map(|r| r.as_ptr());
    match dtype {
        DType::Q4_0 => {
            assert!(xsums.len() >= nb);
            Some(rows4::<Q4_0_ROWS>(p, x.as_ptr(), xsums.as_ptr(), nb))
        }
        DType::Q4_1 => {
            assert!(xsums.len() >= nb);
            Some(rows4::<Q4_1_ROWS>(p, x.as_ptr(), xsums.as_ptr(), nb))
        }
        DType::Q5_0 => {
            assert!(xsums.len() >= nb);
            Some(rows4::<Q5_0_ROWS>(p, x.as_ptr(), xsums.as_ptr(), nb))
        }
        _ => None,
    }
}

/// The 32-element block types with a four-row kernel (`rows4`'s `KIND`).
const Q4_0_ROWS: u8 = 0;
const Q4_1_ROWS: u8 = 1;
const Q5_0_ROWS: u8 = 2;

/// Four rows of q4_0, q4_1 or q5_0 (`KIND`). Per row:
/// `Σ_b d_b · (lo·x + hi·x)` in one vector accumulator, `lo`/`hi` the
/// block's low and high nibbles (q5_0: with each element's fifth bit, bit
/// `i` of the block's `qh`, or-ed in under a lane mask). The block offsets
/// go to the lanes of one 8-wide accumulator `[d0 m0 d1 m1 d2 m2 d3 m3]`:
/// `Σ_b m_b · Σx_b` (q4_1), or `-8` (q4_0) / `-16` (q5_0) `· Σ_b d_b · Σx_b`
/// (powers of two, so applying them last is exact).
///
/// # Safety
/// As `dot_rows4`; each `p[r]` holds `nb` blocks of the type.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn rows4<const KIND: u8>(p: [*const u8; 4], x: *const f32, xsums: *const f32, nb: usize) -> [f32; 4] {
    let [v] = rows4_multi::<KIND, 1>(p, [x], [xsums], nb);
    v
}

/// `rows4` for `M` activation rows at once: each block's quants are widened
/// and converted once for all of them (the costly part of a row dot), then
/// every activation row takes exactly `rows4`'s operations on them, so
/// result `[i][r]` has the bits of `rows4` on row `r` and activation row
/// `i` alone. A batch's decode (2 or 3 rows) pays the conversions once.
///
/// # Safety
/// As `rows4`, for each of the `M` activation rows and their `xsums`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn rows4_multi<const KIND: u8, const M: usize>(p: [*const u8; 4], x: [*const f32; M], xsums: [*const f32; M], nb: usize) -> [[f32; 4]; M] {
    let bb = match KIND {
        Q4_0_ROWS => 18,
        Q4_1_ROWS => 20,
        _ => 22,
    };
    let (mask, sixteen) = (_mm512_set1_epi32(0x0F), _mm512_set1_epi32(16));
    let next_group = p[0].add(rows4_prefetch_start(nb * bb));
    let mut acc = [[_mm512_setzero_ps(); 4]; M];
    let mut offsets = [_mm256_setzero_ps(); M];
    // The four rows' `(d, m)` pairs, stored so that each row's `d` is
    // broadcast from memory (a load) rather than out of a register (a
    // shuffle, on the ports the conversions need).
    let mut dm_lanes = [0f32; 8];
    for b in 0..nb {
        let pb = p.map(|q| q.add(b * bb));
        _mm_prefetch::<_MM_HINT_T0>(next_group.add(128 * b) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(next_group.add(128 * b + 64) as *const i8);
        // The odd lanes are quant bytes (q4_0) or `qh` bits (q5_0), unused.
        let dm = _mm256_cvtph_ps(_mm_set_epi32(u32_at(pb[3]), u32_at(pb[2]), u32_at(pb[1]), u32_at(pb[0])));
        for i in 0..M {
            offsets[i] = _mm256_fmadd_ps(dm, _mm256_set1_ps(*xsums[i].add(b)), offsets[i]);
        }
        _mm256_storeu_ps(dm_lanes.as_mut_ptr(), dm);
        let mut xb = [(_mm512_setzero_ps(), _mm512_setzero_ps()); M];
        for i in 0..M {
            let xi = x[i].add(b * 32);
            xb[i] = (_mm512_loadu_ps(xi), _mm512_loadu_ps(xi.add(16)));
        }
        for r in 0..4 {
            let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(pb[r].add(bb - 16) as *const __m128i));
            let (mut lo, mut hi) = (_mm512_and_si512(q, mask), _mm512_srli_epi32(q, 4));
            if KIND == Q5_0_ROWS {
                let qh = (pb[r].add(2) as *const u32).read_unaligned();
                lo = _mm512_mask_or_epi32(lo, qh as u16, lo, sixteen);
                hi = _mm512_mask_or_epi32(hi, (qh >> 16) as u16, hi, sixteen);
            }
            let (lo, hi) = (_mm512_cvtepi32_ps(lo), _mm512_cvtepi32_ps(hi));
            let d = broadcast_lane(&dm_lanes, 2 * r);
            for i in 0..M {
                let (x0, x1) = xb[i];
                let s = _mm512_fmadd_ps(hi, x1, _mm512_mul_ps(lo, x0));
                acc[i][r] = _mm512_fmadd_ps(d, s, acc[i][r]);
            }
        }
    }
    // Plain loops, not `array::from_fn`: a closure over `acc` that is not
    // inlined makes it a stack array, stored every block.
    let mut out = [[0f32; 4]; M];
    for i in 0..M {
        let mut off = [0f32; 8];
        _mm256_storeu_ps(off.as_mut_ptr(), offsets[i]);
        for r in 0..4 {
            out[i][r] = _mm512_reduce_add_ps(acc[i][r])
                + match KIND {
                    Q4_0_ROWS => -8.0 * off[2 * r],
                    Q4_1_ROWS => off[2 * r + 1],
                    _ => -16.0 * off[2 * r],
                };
        }
    }
    out
}

/// `dot_rows` for 2 or 3 activation rows at once, for q4_0, q4_1, q5_0
/// (four weight rows at a time) and q8_0 (one; `false` for the others):
/// `out` is `[row][M]`, each value the bits of `dot_rows` on that
/// activation row alone.
///
/// # Safety
/// AVX-512F + F16C; the lengths are asserted.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn dot_rows_multi<const M: usize>(dtype: graphc_ir::DType, rows: &[u8], x: [&[f32]; M], xsums: [&[f32]; M], out: &mut [f32]) -> bool {
    use graphc_ir::DType;
    if !matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q8_0 | DType::Q4K | DType::Q6K) {
        return false;
    }
    let n = x[0].len();
    let Some(rb) = dtype.storage_bytes(n as u64).map(|b| b as usize) else { return false };
    let nb = n / 32;
    let count = out.len() / M;
    assert!(out.len() == count * M && rows.len() == rb * count);
    assert!(x.iter().all(|r| r.len() == n) && xsums.iter().all(|s| s.len() >= nb));
    let (xp, xs) = (x.map(|r| r.as_ptr()), xsums.map(|s| s.as_ptr()));
    let row = |r: usize| rows.as_ptr().add(r * rb);
    // One weight row at a time for the types whose kernels take one row.
    if matches!(dtype, DType::Q8_0 | DType::Q4K | DType::Q6K) {
        for (j, o) in out.chunks_exact_mut(M).enumerate() {
            o.copy_from_slice(&match dtype {
                DType::Q8_0 => q8_0_multi::<M>(row(j), xp, nb),
                DType::Q4K => q4_k_multi::<M>(row(j), xp, xs, n / 256),
                _ => q6_k_multi::<M>(row(j), xp, n / 256),
            });
        }
        return true;
    }
    let mut j = 0;
    while j < count {
        let take = (count - j).min(4);
        let group: [*const u8; 4] = std::array::from_fn(|t| row(j + t.min(take - 1)));
        let v = match dtype {
            DType::Q4_0 => rows4_multi::<Q4_0_ROWS, M>(group, xp, xs, nb),
            DType::Q4_1 => rows4_multi::<Q4_1_ROWS, M>(group, xp, xs, nb),
            _ => rows4_multi::<Q5_0_ROWS, M>(group, xp, xs, nb),
        };
        for t in 0..take {
            for i in 0..M {
                out[(j + t) * M + i] = v[i][t];
            }
        }
        j += take;
    }
    true
}

/// `out[i*ldo + j] = Σ_kk x[i*ldx + kk] · w[kk*ldw + j]` for `i < R`,
/// `j < PANEL` (64): the outer-product micro-kernel of the prefill GEMM and
/// of prefill attention. `w` is k-major (a panel of weight rows stored
/// transposed, `ldw` = `PANEL`; or value rows, `ldw` = their length), so
/// each step loads four vectors of `w` and broadcasts one activation per
/// row: `R` × 4 accumulators (24 for `R` = 6) and no horizontal sums at the
/// end, which the dot-product tile (`tile_6x4`) pays per output. Each
/// output is one FMA chain in `kk` order.
///
/// # Safety
/// AVX-512F; `x` holds rows `i*ldx .. i*ldx + k` for `i < R`, `w` rows
/// `kk*ldw .. kk*ldw + PANEL` for `kk < k`, `out` rows `i*ldo .. i*ldo + PANEL`.
#[target_feature(enable = "avx512f")]
pub unsafe fn outer_tile<const R: usize>(x: *const f32, ldx: usize, w: *const f32, ldw: usize, k: usize, out: *mut f32, ldo: usize) {
    outer_product::<R, false>(x, ldx, w, ldw, k, out, ldo)
}

/// `out_i[0..PANEL] (+)= Σ_kk x_i[kk] · w_kk[0..PANEL]` for `i < R` (`x_i` =
/// `x + i*ldx`, `w_kk` = `w + kk*ldw`, `out_i` = `out + i*ldo`): the one
/// outer-product loop under `outer_tile` (`ACCUMULATE = false`: out is
/// overwritten) and `weighted_sum_rows` (`true`: out is the chain's start).
/// Each output is one FMA chain in `kk` order; each `w` row is loaded once
/// for all `R` rows.
///
/// # Safety
/// AVX-512F; `x` holds rows `i*ldx .. i*ldx + k` for `i < R`, `w` rows
/// `kk*ldw .. kk*ldw + PANEL` for `kk < k`, `out` rows `i*ldo .. i*ldo + PANEL`.
#[target_feature(enable = "avx512f")]
unsafe fn outer_product<const R: usize, const ACCUMULATE: bool>(
    x: *const f32,
    ldx: usize,
    w: *const f32,
    ldw: usize,
    k: usize,
    out: *mut f32,
    ldo: usize,
) {
    const C: usize = super::PANEL / 16;
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    if ACCUMULATE {
        for i in 0..R {
            for c in 0..C {
                acc[i][c] = _mm512_loadu_ps(out.add(i * ldo + 16 * c));
            }
        }
    }
    for kk in 0..k {
        let mut wv = [_mm512_setzero_ps(); C];
        for c in 0..C {
            wv[c] = _mm512_loadu_ps(w.add(kk * ldw + 16 * c));
        }
        for i in 0..R {
            let xv = _mm512_set1_ps(*x.add(i * ldx + kk));
            for c in 0..C {
                acc[i][c] = _mm512_fmadd_ps(xv, wv[c], acc[i][c]);
            }
        }
    }
    for i in 0..R {
        for c in 0..C {
            _mm512_storeu_ps(out.add(i * ldo + 16 * c), acc[i][c]);
        }
    }
}

/// The 16 × 16 transpose of `r` (row `i` becomes column `i`): 32-bit
/// interleaves, then 64-bit, then two rounds of 128-bit lane shuffles.
#[inline(always)]
unsafe fn transpose16(r: &mut [__m512; 16]) {
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // r[4g + c] = rows 4g..4g+4, column c of each 128-bit lane.
    for g in 0..4 {
        let (lo, hi) = (t[4 * g], t[4 * g + 1]);
        let (lo2, hi2) = (t[4 * g + 2], t[4 * g + 3]);
        r[4 * g] = _mm512_shuffle_ps::<0x44>(lo, lo2);
        r[4 * g + 1] = _mm512_shuffle_ps::<0xEE>(lo, lo2);
        r[4 * g + 2] = _mm512_shuffle_ps::<0x44>(hi, hi2);
        r[4 * g + 3] = _mm512_shuffle_ps::<0xEE>(hi, hi2);
    }
    for c in 0..4 {
        t[c] = _mm512_shuffle_f32x4::<0x88>(r[c], r[4 + c]);
        t[4 + c] = _mm512_shuffle_f32x4::<0xDD>(r[c], r[4 + c]);
        t[8 + c] = _mm512_shuffle_f32x4::<0x88>(r[8 + c], r[12 + c]);
        t[12 + c] = _mm512_shuffle_f32x4::<0xDD>(r[8 + c], r[12 + c]);
    }
    for c in 0..8 {
        r[c] = _mm512_shuffle_f32x4::<0x88>(t[c], t[8 + c]);
        r[8 + c] = _mm512_shuffle_f32x4::<0xDD>(t[c], t[8 + c]);
    }
}

/// `panel[kk*PANEL + j] = rows[j][kk]` for `kk < k` (rows past `rows.len()`
/// are zero), 16 × 16 blocks at a time through registers.
///
/// # Safety
/// AVX-512F; `rows.len() <= PANEL`, every row holds `k` floats and `panel`
/// `PANEL * k` (asserted by `simd::pack_panel`).
#[target_feature(enable = "avx512f")]
pub unsafe fn pack_panel(rows: &[&[f32]], k: usize, panel: &mut [f32]) {
    let k16 = k / 16 * 16;
    let out = panel.as_mut_ptr();
    const P: usize = super::PANEL;
    for half in 0..P / 16 {
        let present = rows.len().saturating_sub(16 * half).min(16);
        let mut kk = 0;
        while kk < k16 {
            let mut r = [_mm512_setzero_ps(); 16];
            for i in 0..present {
                r[i] = _mm512_loadu_ps(rows[16 * half + i].as_ptr().add(kk));
            }
            transpose16(&mut r);
            for (c, v) in r.iter().enumerate() {
                _mm512_storeu_ps(out.add((kk + c) * P + 16 * half), *v);
            }
            kk += 16;
        }
    }
    for kk in k16..k {
        for j in 0..P {
            *out.add(kk * P + j) = rows.get(j).map_or(0.0, |r| r[kk]);
        }
    }
}

/// `graphc_ir::quant::dequantize` for q4_0, q4_1, q5_0, q8_0, q4_k, q6_k
/// and mxfp4, 16 elements at a time, with the reference's operations in its
/// order (a multiply, then an add or subtract: no FMA), so the same bits.
/// `false` for the other types (`dequantizes`).
///
/// # Safety
/// AVX-512F + AVX2 + F16C; `bytes` holds the blocks of `out.len()`
/// elements (asserted).
/// Whether `dequantize` has a vectorized decode of `dtype`.
pub fn dequantizes(dtype: graphc_ir::DType) -> bool {
    use graphc_ir::DType;
    matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q8_0 | DType::Q4K | DType::Q6K | DType::MXFP4)
}

/// `graphc_ir::quant::MXFP4_VALUES` as f32 lanes.
const MXFP4_F32: [f32; 16] = {
    let mut t = [0f32; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = graphc_ir::quant::MXFP4_VALUES[i] as f32;
        i += 1;
    }
    t
};

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn dequantize(dtype: graphc_ir::DType, bytes: &[u8], out: &mut [f32]) -> bool {
    use graphc_ir::DType;
    if !dequantizes(dtype) {
        return false;
    }
    assert_eq!(Some(bytes.len() as u64), dtype.storage_bytes(out.len() as u64));
    let (bb, be) = (dtype.block_bytes(), dtype.block_elems());
    let nibbles = _mm512_set1_epi32(0x0F);
    for (b, y) in out.chunks_exact_mut(be).enumerate() {
        let p = bytes.as_ptr().add(b * bb);
        let y = y.as_mut_ptr();
        match dtype {
            DType::Q4_0 | DType::Q4_1 => {
                let (d, m) = f16_pair(p);
                let q4_0 = dtype == DType::Q4_0;
                let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(p.add(if q4_0 { 2 } else { 4 }) as *const __m128i));
                let (lo, hi) = (_mm512_and_si512(q, nibbles), _mm512_srli_epi32(q, 4));
                let dv = _mm512_set1_ps(d);
                for (half, v) in [lo, hi].into_iter().enumerate() {
                    let r = if q4_0 {
                        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(v, _mm512_set1_epi32(8))), dv)
                    } else {
                        _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(v), dv), _mm512_set1_ps(m))
                    };
                    _mm512_storeu_ps(y.add(16 * half), r);
                }
            }
            DType::Q5_0 => {
                let (d, _) = f16_pair(p);
                let qh = (p.add(2) as *const u32).read_unaligned();
                let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(p.add(6) as *const __m128i));
                let sixteen = _mm512_set1_epi32(16);
                let lo = _mm512_and_si512(q, nibbles);
                let lo = _mm512_mask_or_epi32(lo, qh as u16, lo, sixteen);
                let hi = _mm512_srli_epi32(q, 4);
                let hi = _mm512_mask_or_epi32(hi, (qh >> 16) as u16, hi, sixteen);
                let dv = _mm512_set1_ps(d);
                _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, sixteen)), dv));
                _mm512_storeu_ps(y.add(16), _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, sixteen)), dv));
            }
            DType::MXFP4 => {
                // Each nibble's value looked up among 16 lanes, times the
                // E8M0 scale: the reference's one product.
                let d = _mm512_set1_ps(graphc_ir::quant::e8m0_half(*p));
                let table = _mm512_loadu_ps(MXFP4_F32.as_ptr());
                let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(p.add(1) as *const __m128i));
                for (half, idx) in [_mm512_and_si512(q, nibbles), _mm512_srli_epi32(q, 4)].into_iter().enumerate() {
                    _mm512_storeu_ps(y.add(16 * half), _mm512_mul_ps(d, _mm512_permutexvar_ps(idx, table)));
                }
            }
            DType::Q8_0 => {
                let (d, _) = f16_pair(p);
                let dv = _mm512_set1_ps(d);
                for half in 0..2 {
                    let q = _mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(2 + 16 * half) as *const __m128i));
                    _mm512_storeu_ps(y.add(16 * half), _mm512_mul_ps(_mm512_cvtepi32_ps(q), dv));
                }
            }
            DType::Q4K => {
                let (d, dmin) = f16_pair(p);
                let (sc, mn) = scales_mins_k4(p.add(4));
                let qs = p.add(16);
                for c in 0..4 {
                    let (d1, m1) = (_mm512_set1_ps(d * sc[2 * c] as f32), _mm512_set1_ps(dmin * mn[2 * c] as f32));
                    let (d2, m2) = (_mm512_set1_ps(d * sc[2 * c + 1] as f32), _mm512_set1_ps(dmin * mn[2 * c + 1] as f32));
                    for half in 0..2 {
                        let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(qs.add(32 * c + 16 * half) as *const __m128i));
                        let lo = _mm512_cvtepi32_ps(_mm512_and_si512(q, nibbles));
                        let hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4));
                        _mm512_storeu_ps(y.add(64 * c + 16 * half), _mm512_sub_ps(_mm512_mul_ps(d1, lo), m1));
                        _mm512_storeu_ps(y.add(64 * c + 32 + 16 * half), _mm512_sub_ps(_mm512_mul_ps(d2, hi), m2));
                    }
                }
            }
            _ => {
                // q6_k: the six-bit values put together bytewise (as `q6_k`).
                let d = {
                    let bits = u16::from_le_bytes([*p.add(208), *p.add(209)]);
                    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
                };
                let sc = p.add(192) as *const i8;
                for n in 0..2 {
                    for (i, qi) in super::avx2::q6_k_values(p, n).into_iter().enumerate() {
                        let halves = [_mm256_castsi256_si128(qi), _mm256_extracti128_si256::<1>(qi)];
                        for (half, v) in halves.into_iter().enumerate() {
                            let scale = _mm512_set1_ps(d * *sc.add(8 * n + 2 * i + half) as f32);
                            let r = _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)));
                            _mm512_storeu_ps(y.add(128 * n + 32 * i + 16 * half), r);
                        }
                    }
                }
            }
        }
    }
    true
}

/// `exp(v)` for 16 lanes as `2^n * p(f)`: `t = v · log2 e` clamped to
/// [-160, 128] (so -inf gives 0 and overflow inf), `n = round(t)`,
/// `f = t - n`, `p` the degree-7 Taylor polynomial of `2^f` on `|f| <= 0.5`
/// (relative error < 2e-8 before rounding), scaled by `vscalefps`.
#[inline(always)]
unsafe fn exp16(v: __m512, coef: &[f32; 8]) -> __m512 {
    let t = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, _mm512_set1_ps(std::f32::consts::LOG2_E)), _mm512_set1_ps(-160.0)), _mm512_set1_ps(128.0));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
    let f = _mm512_sub_ps(t, n);
    let mut poly = _mm512_set1_ps(coef[0]);
    for &c in &coef[1..] {
        poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(poly, n)
}

/// `x[i] = exp(x[i] - m)` in place, returning `Σ x[i]`: softmax's
/// exponentials, 16 lanes at a time (`exp16`; arguments below -160·ln 2,
/// and -inf, a masked score, give 0).
///
/// # Safety
/// AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn exp_shifted_sum(x: &mut [f32], m: f32) -> f32 {
    let n16 = x.len() / 16 * 16;
    let p = x.as_mut_ptr();
    let (mv, coef) = (_mm512_set1_ps(m), exp2_coefficients());
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    while i < n16 {
        let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), mv), &coef);
        _mm512_storeu_ps(p.add(i), e);
        acc = _mm512_add_ps(acc, e);
        i += 16;
    }
    let mut sum = _mm512_reduce_add_ps(acc);
    for v in &mut x[n16..] {
        *v = (*v - m).exp();
        sum += *v;
    }
    sum
}

/// SiLU in place, `x / (1 + exp(-x))` (the reference's form) with `exp16`;
/// very negative `x` gives `exp = inf` and `-0`, as the reference does.
///
/// # Safety
/// AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn silu(x: &mut [f32]) {
    let n16 = x.len() / 16 * 16;
    let p = x.as_mut_ptr();
    let (one, coef) = (_mm512_set1_ps(1.0), exp2_coefficients());
    let mut i = 0;
    while i < n16 {
        let v = _mm512_loadu_ps(p.add(i));
        let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), v), &coef);
        _mm512_storeu_ps(p.add(i), _mm512_div_ps(v, _mm512_add_ps(one, e)));
        i += 16;
    }
    for v in &mut x[n16..] {
        *v = *v / (1.0 + (-*v).exp());
    }
}
