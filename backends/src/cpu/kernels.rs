//! Small numeric kernels shared by the CPU executors.

use crate::tensor::WeightRef;
use rayon::prelude::*;

/// `sum a[i] * b[i]` with eight independent f32 accumulators (so the
/// compiler vectorizes it), combined in a fixed order: deterministic.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, ra) = a.split_at(a.len() / 8 * 8);
    let (cb, rb) = b.split_at(ca.len());
    for (x, y) in ca.chunks_exact(8).zip(cb.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// `out[m, n] = sum_k x[m, k] * w[n, k]` for a weight of any storage type:
/// each weight row is dequantized once into f32 and dotted with every row of
/// `x`. Weight rows are split across threads.
pub fn matmul_weight(x: &[f32], m: usize, k: usize, w: WeightRef<'_>) -> Vec<f32> {
    let n = w.shape[0];
    const ROWS: usize = 16;
    let blocks: Vec<Vec<f32>> = (0..n.div_ceil(ROWS))
        .into_par_iter()
        .map(|blk| {
            let r0 = blk * ROWS;
            let r1 = (r0 + ROWS).min(n);
            let mut row = vec![0f32; k];
            let mut out = vec![0f32; (r1 - r0) * m];
            for r in r0..r1 {
                graphc_ir::quant::dequantize(w.dtype, w.row(r), &mut row);
                for i in 0..m {
                    out[(r - r0) * m + i] = dot(&x[i * k..(i + 1) * k], &row);
                }
            }
            out
        })
        .collect();
    let mut out = vec![0f32; m * n];
    for (blk, vals) in blocks.iter().enumerate() {
        let r0 = blk * ROWS;
        for (j, col) in vals.chunks_exact(m).enumerate() {
            for i in 0..m {
                out[i * n + r0 + j] = col[i];
            }
        }
    }
    out
}
