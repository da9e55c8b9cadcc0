//! AVX-512F f32 tile for prefill's matrix products: 4 activation rows × 4
//! weight rows, 16 lanes, sixteen accumulators of the thirty-two registers.

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
