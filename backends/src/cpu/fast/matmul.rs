//! Dequantize-into-matmul: `out[m, n] = x[m, k] · w[n, k]ᵀ` with `w` in its
//! checkpoint storage type, never materialized as an f32 copy of the whole
//! tensor.
//!
//! - Few activation rows (decode, and small batches): each weight row is
//!   decoded in registers and dotted with every activation row while it is
//!   hot (`simd::dot_rows`: a task's rows in one call; q4_0/q4_1 four rows
//!   at a time, sharing each load of the activations, where the ISA has
//!   it). Weights are read once per step: the memory-bound case.
//! - Many rows (prefill): a task dequantizes `TILE_ROWS` weight rows into an
//!   f32 scratch once and runs the register-blocked `simd::tile` over all
//!   activation rows: the dequantization is amortized over `m`.
//!
//! Work is split over weight rows across the session's `SpinPool`. Every
//! output element is one dot product whose order does not depend on the
//! thread count, so results are the same for any `--threads`.

use crate::cpu::pool::{for_each_chunk_mut, SpinPool};
use crate::cpu::simd::{self, Isa};
use crate::tensor::WeightRef;

/// From this many activation rows on, the dequantize-once tiled path wins.
pub const GEMM_MIN_ROWS: usize = 4;
/// Weight rows per task in the tiled path.
const TILE_ROWS: usize = 16;

pub fn matmul(pool: &SpinPool, isa: Isa, x: &[f32], m: usize, k: usize, w: WeightRef<'_>) -> Vec<f32> {
    assert_eq!(x.len(), m * k);
    assert_eq!(w.shape.len(), 2);
    assert_eq!(w.shape[1], k);
    if m < GEMM_MIN_ROWS {
        matvec(pool, isa, x, m, k, w)
    } else {
        gemm(pool, isa, x, m, k, w)
    }
}

fn matvec(pool: &SpinPool, isa: Isa, x: &[f32], m: usize, k: usize, w: WeightRef<'_>) -> Vec<f32> {
    let n = w.shape[0];
    let xsums: Vec<Vec<f32>> = x.chunks_exact(k).map(simd::group_sums).collect();
    // Enough tasks to balance the pool, each big enough to amortize its dispatch.
    let rows_per_task = (n / (pool.threads() * 8)).clamp(8, 256);
    let mut out_t = vec![0f32; n * m]; // [n][m]
    let rb = w.row_bytes();
    for_each_chunk_mut(pool, &mut out_t, rows_per_task * m, |task, chunk| {
        let (r0, rows) = (task * rows_per_task, chunk.len() / m);
        let bytes = &w.bytes[r0 * rb..(r0 + rows) * rb];
        if m == 1 {
            return simd::dot_rows(isa, w.dtype, bytes, x, &xsums[0], chunk);
        }
        let mut col = vec![0f32; rows];
        for i in 0..m {
            simd::dot_rows(isa, w.dtype, bytes, &x[i * k..(i + 1) * k], &xsums[i], &mut col);
            for (j, v) in col.iter().enumerate() {
                chunk[j * m + i] = *v;
            }
        }
    });
    if m == 1 {
        return out_t;
    }
    let mut out = vec![0f32; m * n];
    for j in 0..n {
        for i in 0..m {
            out[i * n + j] = out_t[j * m + i];
        }
    }
    out
}

fn gemm(pool: &SpinPool, isa: Isa, x: &[f32], m: usize, k: usize, w: WeightRef<'_>) -> Vec<f32> {
    let n = w.shape[0];
    let rb = w.row_bytes();
    let (mr, nr) = simd::tile_shape(isa);
    let mut tiles: Vec<Vec<f32>> = vec![Vec::new(); n.div_ceil(TILE_ROWS)];
    for_each_chunk_mut(pool, &mut tiles, 1, |t, slot| {
        slot[0] = {
            let (r0, r1) = (t * TILE_ROWS, ((t + 1) * TILE_ROWS).min(n));
            let rows = r1 - r0;
            let mut wf = vec![0f32; rows * k];
            graphc_ir::quant::dequantize(w.dtype, &w.bytes[r0 * rb..r1 * rb], &mut wf);
            let mut o = vec![0f32; m * rows]; // [m][rows]
            let mut acc: simd::Tile = [[0f32; 4]; 8];
            let mut i = 0;
            while i + mr <= m {
                let mut j = 0;
                while j + nr <= rows {
                    simd::tile(isa, &x[i * k..], k, &wf[j * k..], k, k, &mut acc);
                    for a in 0..mr {
                        o[(i + a) * rows + j..(i + a) * rows + j + nr].copy_from_slice(&acc[a][..nr]);
                    }
                    j += nr;
                }
                for jj in j..rows {
                    for a in i..i + mr {
                        o[a * rows + jj] = simd::dot_f32(isa, &x[a * k..(a + 1) * k], &wf[jj * k..(jj + 1) * k]);
                    }
                }
                i += mr;
            }
            for a in i..m {
                for jj in 0..rows {
                    o[a * rows + jj] = simd::dot_f32(isa, &x[a * k..(a + 1) * k], &wf[jj * k..(jj + 1) * k]);
                }
            }
            o
        };
    });
    let mut out = vec![0f32; m * n];
    for (t, o) in tiles.iter().enumerate() {
        let r0 = t * TILE_ROWS;
        let rows = o.len() / m;
        for i in 0..m {
            out[i * n + r0..i * n + r0 + rows].copy_from_slice(&o[i * rows..(i + 1) * rows]);
        }
    }
    out
}
