//! Dequantization of GGUF block types, one row (a whole number of blocks) at
//! a time. These loops are the definition of each format (ggml's
//! `dequantize_row_*`); the fast kernels are checked against them, and they
//! are checked against blocks decoded by the `gguf` Python package
//! (`tests/fixtures/quant_blocks.json`).

use crate::DType;
use half::{bf16, f16};

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Decode `out.len()` elements of `dtype` from `bytes`, which must hold exactly
/// that many (checked by the caller: `DType::storage_bytes`). Panics otherwise,
/// as slicing a checked buffer wrongly is a bug, not bad input.
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    let be = dtype.block_elems();
    let bb = dtype.block_bytes();
    assert_eq!(out.len() % be, 0, "{dtype}: {} elements is not a whole number of blocks", out.len());
    assert_eq!(bytes.len(), out.len() / be * bb, "{dtype}: byte count does not match element count");
    match dtype {
        DType::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        DType::F16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        DType::BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        DType::I32 | DType::U32 => panic!("dequantize of integer type {dtype}"),
        _ => {
            for (y, b) in out.chunks_exact_mut(be).zip(bytes.chunks_exact(bb)) {
                dequantize_block(dtype, b, y);
            }
        }
    }
}

fn dequantize_block(dtype: DType, b: &[u8], y: &mut [f32]) {
    match dtype {
        DType::Q4_0 => {
            let d = f16_at(b, 0);
            let qs = &b[2..18];
            for j in 0..16 {
                y[j] = ((qs[j] & 0xF) as i32 - 8) as f32 * d;
                y[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
            }
        }
        DType::Q4_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            let qs = &b[4..20];
            for j in 0..16 {
                y[j] = (qs[j] & 0xF) as f32 * d + m;
                y[j + 16] = (qs[j] >> 4) as f32 * d + m;
            }
        }
        DType::Q5_0 => {
            let d = f16_at(b, 0);
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            let qs = &b[6..22];
            for j in 0..16 {
                let h0 = ((qh >> j) << 4) & 0x10;
                let h1 = (qh >> (j + 12)) & 0x10;
                y[j] = (((qs[j] & 0xF) as u32 | h0) as i32 - 16) as f32 * d;
                y[j + 16] = (((qs[j] >> 4) as u32 | h1) as i32 - 16) as f32 * d;
            }
        }
        DType::Q8_0 => {
            let d = f16_at(b, 0);
            for j in 0..32 {
                y[j] = (b[2 + j] as i8) as f32 * d;
            }
        }
        DType::Q4K | DType::Q5K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let scales = &b[4..16];
            let (qh, qs) = if dtype == DType::Q5K { (&b[16..48], &b[48..176]) } else { (&b[0..0], &b[16..144]) };
            for (chunk, j) in (0..256).step_by(64).enumerate() {
                let (sc1, m1) = scale_min_k4(2 * chunk, scales);
                let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
                let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
                let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
                let q = &qs[chunk * 32..chunk * 32 + 32];
                let (u1, u2) = (1u8 << (2 * chunk), 2u8 << (2 * chunk));
                for l in 0..32 {
                    let hi1 = if dtype == DType::Q5K && qh[l] & u1 != 0 { 16 } else { 0 };
                    let hi2 = if dtype == DType::Q5K && qh[l] & u2 != 0 { 16 } else { 0 };
                    y[j + l] = d1 * ((q[l] & 0xF) + hi1) as f32 - m1;
                    y[j + 32 + l] = d2 * ((q[l] >> 4) + hi2) as f32 - m2;
                }
            }
        }
        DType::Q6K => {
            let ql_all = &b[0..128];
            let qh_all = &b[128..192];
            let sc_all = &b[192..208];
            let d = f16_at(b, 208);
            for n in 0..2 {
                let (ql, qh, sc) = (&ql_all[n * 64..], &qh_all[n * 32..], &sc_all[n * 8..]);
                let y = &mut y[n * 128..];
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                    y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                    y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                    y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                }
            }
        }
        _ => unreachable!("{dtype} is not a block type"),
    }
}

/// The 6-bit scale and min of sub-block `j` of a q4_k / q5_k block.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}
