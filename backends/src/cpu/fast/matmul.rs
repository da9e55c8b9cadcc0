//! Dequantize-into-matmul: `out[m, n] = x[m, k] · w[n, k]ᵀ` with `w` in its
//! checkpoint storage type, never materialized as an f32 copy of the whole
//! tensor.
//!
//! - Few activation rows (decode, and small batches): each weight row is
//!   decoded in registers and dotted with every activation row while it is
//!   hot (`simd::dot_rows`: a task's rows in one call; q4_0/q4_1/q5_0 four rows
//!   at a time, sharing each load of the activations, where the ISA has
//!   it). Weights are read once per step: the memory-bound case.
//! - Many rows (prefill): a task dequantizes a block of weight rows into an
//!   f32 scratch once and runs a register-blocked kernel over all
//!   activation rows: the dequantization is amortized over `m`. AVX-512:
//!   `simd::PANEL` rows laid out k-major for the outer-product
//!   `simd::outer_tile` (`gemm_panels`); elsewhere `TILE_ROWS` rows for the
//!   dot-product `simd::tile`.
//!
//! Work is split over weight rows across the session's `SpinPool`. Every
//! output element is one dot product whose order does not depend on the
//! thread count, so results are the same for any `--threads`; nor, on
//! either path, on the other activation rows (`matmul_on_path`).

use crate::cpu::pool::{collect_column_blocks, for_each_chunk_mut, SpinPool};
use crate::cpu::simd::{self, Isa};
use crate::tensor::WeightRef;

/// From this many activation rows on, the dequantize-once tiled path wins
/// over row dots that decode the weights once per activation row.
pub const GEMM_MIN_ROWS: usize = 4;
/// Up to this many activation rows, weight types with multi-row kernels
/// (`simd::has_rows_multi`) stay on row dots: the rows go in groups of at
/// most `simd::MULTI_ROWS`, each group decoding a block once for all its
/// rows, which beats dequantizing whole panels to f32 for a small batch.
pub const MULTI_MAX_ROWS: usize = 8;

/// Whether `m` activation rows against `dtype` weights take the row-dot
/// path (`matvec`) rather than the tiled one.
pub fn uses_row_dots(isa: Isa, dtype: graphc_ir::DType, m: usize) -> bool {
    m < GEMM_MIN_ROWS || (m <= MULTI_MAX_ROWS && simd::has_rows_multi(isa, dtype))
}
/// Weight rows per task in the tiled path.
const TILE_ROWS: usize = 16;

pub fn matmul(pool: &SpinPool, isa: Isa, x: &[f32], m: usize, k: usize, w: WeightRef<'_>) -> Vec<f32> {
    matmul_on_path(pool, isa, x, m, k, w, m)
}

/// `matmul` on the path `path_rows` activation rows would take: a row's
/// bits depend on the path, never on the other rows, so rows gathered
/// out of a batch (a MoE expert's) get the bits they have in the batch.
pub fn matmul_on_path(pool: &SpinPool, isa: Isa, x: &[f32], m: usize, k: usize, w: WeightRef<'_>, path_rows: usize) -> Vec<f32> {
    assert_eq!(x.len(), m * k);
    assert_eq!(w.shape.len(), 2);
    assert_eq!(w.shape[1], k);
    if uses_row_dots(isa, w.dtype, path_rows) {
        matvec(pool, isa, x, m, k, w)
    } else {
        gemm(pool, isa, x, m, k, w)
    }
}

/// Weight bytes a matrix-vector task reads, at least (`matvec_rows_per_task`).
const MATVEC_TASK_BYTES: usize = 256 << 10;

/// Rows per matrix-vector task: tasks of about `MATVEC_TASK_BYTES`, as many
/// as a multiple of the threads (at least one each), rows a multiple of 4
/// (the four-row kernels' group). Why bytes: a decode step's weights come
/// from memory, and each task starts its row streams cold (the first rows
/// wait a memory latency before its prefetches run ahead), so many small
/// tasks stall where a few long ones stream. Measured on Gemma 3's
/// matrices from memory, 2 threads: the 256 × 640 q5_0 projection 15.5 →
/// 7–8 µs, 1024 × 640 36.7 → 26 µs, against tasks of `n / 16` rows (at
/// most 256). The big output matrix keeps hundreds of tasks, so a thread
/// the machine preempts is still covered by the others.
fn matvec_rows_per_task(n: usize, row_bytes: usize, threads: usize) -> usize {
    let threads = threads.max(1);
    let by_bytes = (n * row_bytes).div_ceil(MATVEC_TASK_BYTES);
    let tasks = by_bytes.div_ceil(threads).max(1) * threads;
    n.div_ceil(tasks).next_multiple_of(4).max(4)
}

fn matvec(pool: &SpinPool, isa: Isa, x: &[f32], m: usize, k: usize, w: WeightRef<'_>) -> Vec<f32> {
    let n = w.shape[0];
    let xsums: Vec<Vec<f32>> = x.chunks_exact(k).map(simd::group_sums).collect();
    let rows_per_task = matvec_rows_per_task(n, w.row_bytes(), pool.threads());
    let mut out_t = vec![0f32; n * m]; // [n][m]
    let rb = w.row_bytes();
    let (rows_of_x, sums_of_x): (Vec<&[f32]>, Vec<&[f32]>) = (x.chunks_exact(k).collect(), xsums.iter().map(|s| &s[..]).collect());
    for_each_chunk_mut(pool, &mut out_t, rows_per_task * m, |task, chunk| {
        let (r0, rows) = (task * rows_per_task, chunk.len() / m);
        let bytes = &w.bytes[r0 * rb..(r0 + rows) * rb];
        if m == 1 {
            return simd::dot_rows(isa, w.dtype, bytes, x, &xsums[0], chunk);
        }
        // A batch's rows at once where the kernel exists (the same bits as
        // each row alone): in groups of at most `MULTI_ROWS`, as even as
        // they can be (6 rows as 3 + 3, not 4 + 2), each group's results
        // then scattered into the task's `[weight row][activation row]`.
        if simd::has_rows_multi(isa, w.dtype) {
            let groups = m.div_ceil(simd::MULTI_ROWS);
            if groups == 1 {
                let done = simd::dot_rows_multi(isa, w.dtype, bytes, &rows_of_x, &sums_of_x, chunk);
                debug_assert!(done);
                return;
            }
            let mut group_out = vec![0f32; rows * simd::MULTI_ROWS];
            let mut i0 = 0;
            for g in 0..groups {
                let size = (m - i0) / (groups - g);
                let out = &mut group_out[..rows * size];
                let done = simd::dot_rows_multi(isa, w.dtype, bytes, &rows_of_x[i0..i0 + size], &sums_of_x[i0..i0 + size], out);
                debug_assert!(done);
                for (j, values) in out.chunks_exact(size).enumerate() {
                    chunk[j * m + i0..j * m + i0 + size].copy_from_slice(values);
                }
                i0 += size;
            }
            return;
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
    if simd::has_outer(isa) {
        return gemm_panels(pool, isa, x, m, k, w);
    }
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
            // Rows `i..i + live` of `x`, `mr` rows from `xg`'s start.
            let mut group = |xg: &[f32], i: usize, live: usize, o: &mut [f32]| {
                let mut j = 0;
                while j + nr <= rows {
                    simd::tile(isa, xg, k, &wf[j * k..], k, k, &mut acc);
                    for a in 0..live {
                        o[(i + a) * rows + j..(i + a) * rows + j + nr].copy_from_slice(&acc[a][..nr]);
                    }
                    j += nr;
                }
                for jj in j..rows {
                    for a in 0..live {
                        o[(i + a) * rows + jj] = simd::dot_f32(isa, &xg[a * k..(a + 1) * k], &wf[jj * k..(jj + 1) * k]);
                    }
                }
            };
            let mut i = 0;
            while i + mr <= m {
                group(&x[i * k..], i, mr, &mut o);
                i += mr;
            }
            if i < m {
                // The last rows through the same tile, padded with zero
                // rows: a row's bits never depend on which rows share its
                // tile, so rows gathered out of a batch (a MoE expert's)
                // keep the bits they have in it.
                let mut padded = vec![0f32; mr * k];
                padded[..(m - i) * k].copy_from_slice(&x[i * k..m * k]);
                group(&padded, i, m - i, &mut o);
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

/// The tiled path on ISAs with the outer-product kernel: a task decodes
/// `simd::PANEL` weight rows, lays them out k-major (`simd::pack_panel`),
/// then runs `simd::outer_tile` over every `OUTER_ROWS` activation rows,
/// writing its columns of the output in place (`collect_column_blocks`:
/// the output is never zeroed). The row and panel buffers are per thread
/// and reused: allocating and zeroing them per task wrote about as many
/// bytes as the products read.
fn gemm_panels(pool: &SpinPool, isa: Isa, x: &[f32], m: usize, k: usize, w: WeightRef<'_>) -> Vec<f32> {
    const P: usize = simd::PANEL;
    thread_local! {
        static SCRATCH: std::cell::RefCell<(Vec<f32>, Vec<f32>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    }
    let n = w.shape[0];
    let rb = w.row_bytes();
    collect_column_blocks(pool, m, n, P, |_, block| {
        let (r0, r1) = (block.columns().start, block.columns().end);
        SCRATCH.with_borrow_mut(|(rows, panel)| {
            rows.resize(P * k, 0.0);
            panel.resize(k * P, 0.0);
            let live = r1 - r0;
            simd::dequantize(isa, w.dtype, &w.bytes[r0 * rb..r1 * rb], &mut rows[..live * k]);
            let row_refs: Vec<&[f32]> = rows[..live * k].chunks_exact(k).collect();
            simd::pack_panel(isa, &row_refs, k, panel);
            let mut tile = [0f32; simd::OUTER_ROWS * P];
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(simd::OUTER_ROWS);
                simd::outer_tile(isa, &x[i * k..], k, rows, panel, P, k, &mut tile, P);
                for o in tile.chunks_exact(P).take(rows) {
                    block.push_row(&o[..r1 - r0]);
                }
                i += rows;
            }
        });
    })
}
