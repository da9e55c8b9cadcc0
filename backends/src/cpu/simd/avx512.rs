//! AVX-512F f32 tile for prefill's matrix products: 4 activation rows × 4
//! weight rows, 16 lanes, sixteen accumulators of the thirty-two registers.

// Register tiles are indexed like the math they compute.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

/// `out[i][j] = x_i · w_j` over `k` elements, `i, j < 4`.
///
/// # Safety
/// AVX-512F; rows `x + i*ldx` (i < 4) and `w + j*ldw` (j < 4) hold `k` floats.
#[target_feature(enable = "avx512f")]
pub unsafe fn tile_4x4(x: *const f32, ldx: usize, w: *const f32, ldw: usize, k: usize, out: &mut [[f32; 4]; 4]) {
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    let mut kk = 0;
    while kk + 16 <= k {
        let xv = [
            _mm512_loadu_ps(x.add(kk)),
            _mm512_loadu_ps(x.add(ldx + kk)),
            _mm512_loadu_ps(x.add(2 * ldx + kk)),
            _mm512_loadu_ps(x.add(3 * ldx + kk)),
        ];
        for j in 0..4 {
            let wv = _mm512_loadu_ps(w.add(j * ldw + kk));
            for i in 0..4 {
                acc[i][j] = _mm512_fmadd_ps(xv[i], wv, acc[i][j]);
            }
        }
        kk += 16;
    }
    for i in 0..4 {
        for j in 0..4 {
            let mut s = _mm512_reduce_add_ps(acc[i][j]);
            for t in kk..k {
                s += *x.add(i * ldx + t) * *w.add(j * ldw + t);
            }
            out[i][j] = s;
        }
    }
}

/// How far ahead of the block being decoded the weight stream is
/// prefetched (bytes). A prefetch never faults, so running past the row's
/// end is harmless.
const PREFETCH_AHEAD: usize = 1024;

/// The f16 pair at `p` (`d`, then `m`) as f32.
#[inline(always)]
unsafe fn f16_pair(p: *const u8) -> (f32, f32) {
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// Row dots for the 32-element block types (q4_0, q4_1, q5_0, q8_0), 16 lanes at a time: bytes are
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
        DType::Q8_0 => {
            #[inline(always)]
            unsafe fn block(p: *const u8, xb: *const f32, acc: __m512) -> __m512 {
                let (d, _) = f16_pair(p);
                let q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(2) as *const __m128i)));
                let q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(18) as *const __m128i)));
                let s = _mm512_fmadd_ps(q1, _mm512_loadu_ps(xb.add(16)), _mm512_mul_ps(q0, _mm512_loadu_ps(xb)));
                _mm512_fmadd_ps(_mm512_set1_ps(d), s, acc)
            }
            let (mut a0, mut a1, mut a2, mut a3) = (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());
            let mut b = 0;
            while b + 4 <= nb {
                let (p, xb) = (r.add(b * 34), xp.add(b * 32));
                _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD + 64) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(p.add(PREFETCH_AHEAD + 128) as *const i8);
                a0 = block(p, xb, a0);
                a1 = block(p.add(34), xb.add(32), a1);
                a2 = block(p.add(68), xb.add(64), a2);
                a3 = block(p.add(102), xb.add(96), a3);
                b += 4;
            }
            while b < nb {
                a0 = block(r.add(b * 34), xp.add(b * 32), a0);
                b += 1;
            }
            let v = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
            Some(_mm512_reduce_add_ps(v))
        }
        _ => None,
    }
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
        let s = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(hi),
            _mm512_loadu_ps(xb.add(16)),
            _mm512_mul_ps(_mm512_cvtepi32_ps(lo), _mm512_loadu_ps(xb)),
        );
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
