//! Dequantization of GGUF block types, one row (a whole number of blocks) at
//! a time. These loops are the definition of each format (ggml's
//! `dequantize_row_*`); the fast kernels are checked against them, and they
//! are checked against blocks decoded by the `gguf` Python package
//! (`tests/fixtures/quant_blocks.json`).

use crate::quant_grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
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
        DType::Q5_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            let qs = &b[8..24];
            for j in 0..16 {
                let h0 = ((qh >> j) << 4) & 0x10;
                let h1 = (qh >> (j + 12)) & 0x10;
                y[j] = ((qs[j] & 0xF) as u32 | h0) as f32 * d + m;
                y[j + 16] = ((qs[j] >> 4) as u32 | h1) as f32 * d + m;
            }
        }
        DType::Q2K => {
            // 16 sub-blocks of 16: scale (low nibble) and min (high nibble)
            // per sub-block, 2-bit quants. Byte `l` of a 32-byte run holds
            // element `l` of four consecutive 32-element groups, by shift.
            let (scales, qs) = (&b[0..16], &b[16..80]);
            let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
            for (is, y) in y.chunks_exact_mut(16).enumerate() {
                let (half, j, second) = (is / 8, (is % 8) / 2, is % 2);
                let q = &qs[32 * half + 16 * second..][..16];
                let dl = d * (scales[is] & 0xF) as f32;
                let ml = dmin * (scales[is] >> 4) as f32;
                for (yl, &ql) in y.iter_mut().zip(q) {
                    *yl = dl * ((ql >> (2 * j)) & 3) as f32 - ml;
                }
            }
        }
        DType::Q3K => {
            // 16 sub-blocks of 16 with signed 6-bit scales; each quant is
            // 2 low bits (as q2_k) minus 4 where its `hmask` bit is clear.
            let (hmask, qs, d) = (&b[0..32], &b[32..96], f16_at(b, 108));
            let scales = q3_k_scales(&b[96..108]);
            for (is, y) in y.chunks_exact_mut(16).enumerate() {
                let (half, j, second) = (is / 8, (is % 8) / 2, is % 2);
                let q = &qs[32 * half + 16 * second..][..16];
                let hm = &hmask[16 * second..][..16];
                let bit = 1u8 << (4 * half + j);
                let dl = d * (scales[is] as i32 - 32) as f32;
                for ((yl, &ql), &h) in y.iter_mut().zip(q).zip(hm) {
                    let v = ((ql >> (2 * j)) & 3) as i32 - if h & bit != 0 { 0 } else { 4 };
                    *yl = dl * v as f32;
                }
            }
        }
        DType::IQ4NL => {
            let d = f16_at(b, 0);
            for j in 0..16 {
                y[j] = d * IQ4_VALUES[(b[2 + j] & 0xF) as usize] as f32;
                y[j + 16] = d * IQ4_VALUES[(b[2 + j] >> 4) as usize] as f32;
            }
        }
        DType::MXFP4 => {
            // OCP microscaling FP4: an E8M0 scale byte (half of it, as ggml
            // stores the doubled E2M1 values), then q4_0's nibble order.
            let d = e8m0_half(b[0]);
            for j in 0..16 {
                y[j] = d * MXFP4_VALUES[(b[1 + j] & 0xF) as usize] as f32;
                y[j + 16] = d * MXFP4_VALUES[(b[1 + j] >> 4) as usize] as f32;
            }
        }
        DType::IQ4XS => {
            // 8 sub-blocks of 32, each with a 6-bit scale (4 bits in
            // `scales_l`, 2 in `scales_h`) biased by 32, and iq4_nl's values.
            let d = f16_at(b, 0);
            let scales_h = u16::from_le_bytes([b[2], b[3]]);
            for (ib, y) in y.chunks_exact_mut(32).enumerate() {
                let low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
                let high = ((scales_h >> (2 * ib)) & 3) as u8;
                let dl = d * ((low | (high << 4)) as i32 - 32) as f32;
                let qs = &b[8 + 16 * ib..][..16];
                for j in 0..16 {
                    y[j] = dl * IQ4_VALUES[(qs[j] & 0xF) as usize] as f32;
                    y[j + 16] = dl * IQ4_VALUES[(qs[j] >> 4) as usize] as f32;
                }
            }
        }
        DType::IQ2XXS | DType::IQ3XXS => {
            // 8 sub-blocks of 32: grid indices (one byte a point), then a
            // u32 of four 7-bit sign indices and a 4-bit scale.
            let (d, iq3) = (f16_at(b, 0), dtype == DType::IQ3XXS);
            for (ib, y) in y.chunks_exact_mut(32).enumerate() {
                let aux = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
                let (points, signs_at) = if iq3 { (&b[2 + 8 * ib..][..8], 66 + 4 * ib) } else { (&b[2 + 8 * ib..][..4], 2 + 8 * ib + 4) };
                let signs_scale = aux(signs_at);
                let db = d * (0.5 + (signs_scale >> 28) as f32) * if iq3 { 0.5 } else { 0.25 };
                for (g, y) in y.chunks_exact_mut(8).enumerate() {
                    let signs = iq_signs((signs_scale >> (7 * g)) & 127);
                    for (l, yl) in y.iter_mut().enumerate() {
                        let point = match iq3 {
                            true => IQ3XXS_GRID[points[2 * g + l / 4] as usize][l % 4],
                            false => IQ2XXS_GRID[points[g] as usize][l],
                        };
                        *yl = db * point as f32 * signed(signs, l);
                    }
                }
            }
        }
        DType::IQ2XS => {
            // 32 points of 8 as u16: a 9-bit grid index and a 7-bit sign
            // index; 16 scales (nibbles), one a 16 elements.
            let d = f16_at(b, 0);
            for (j, y) in y.chunks_exact_mut(8).enumerate() {
                let q = u16::from_le_bytes([b[2 + 2 * j], b[3 + 2 * j]]) as u32;
                let db = d * (0.5 + iq_scale(&b[66..74], j / 2) as f32) * 0.25;
                let signs = iq_signs(q >> 9);
                for (l, yl) in y.iter_mut().enumerate() {
                    *yl = db * IQ2XS_GRID[(q & 511) as usize][l] as f32 * signed(signs, l);
                }
            }
        }
        DType::IQ2S => {
            // 32 points of 8: a grid index of 8 bits in `qs` and 2 in `qh`,
            // a sign bit an element, 16 scales (nibbles).
            let d = f16_at(b, 0);
            for (j, y) in y.chunks_exact_mut(8).enumerate() {
                let index = b[2 + j] as usize | (((b[66 + j / 4] >> (2 * (j % 4))) & 3) as usize) << 8;
                let db = d * (0.5 + iq_scale(&b[74..82], j / 2) as f32) * 0.25;
                for (l, yl) in y.iter_mut().enumerate() {
                    *yl = db * IQ2S_GRID[index][l] as f32 * signed(b[34 + j] as u32, l);
                }
            }
        }
        DType::IQ3S => {
            // 64 points of 4: a grid index of 8 bits in `qs` and 1 in `qh`,
            // a sign bit an element, 8 scales `1 + 2s` (nibbles), one a 32.
            let d = f16_at(b, 0);
            for (e, yl) in y.iter_mut().enumerate() {
                let j = e / 4;
                let index = b[2 + j] as usize | (((b[66 + j / 8] >> (j % 8)) & 1) as usize) << 8;
                let db = d * (1 + 2 * iq_scale(&b[106..110], e / 32)) as f32;
                *yl = db * IQ3S_GRID[index][e % 4] as f32 * signed(b[74 + e / 8] as u32, e % 8);
            }
        }
        DType::IQ1S => {
            // 8 sub-blocks of 32: four grid points of 8 (values -1, 0, 1),
            // an 11-bit index each (8 bits in `qs`, 3 in the sub-block's
            // u16 `qh`), whose top bits hold the scale and the delta's sign.
            let d = f16_at(b, 0);
            for (ib, y) in y.chunks_exact_mut(32).enumerate() {
                let qh = u16::from_le_bytes([b[34 + 2 * ib], b[35 + 2 * ib]]) as u32;
                let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
                let delta = if qh & 0x8000 == 0 { IQ1_DELTA } else { -IQ1_DELTA };
                for (g, y) in y.chunks_exact_mut(8).enumerate() {
                    let index = b[2 + 4 * ib + g] as usize | (((qh >> (3 * g)) & 7) as usize) << 8;
                    for (yl, &v) in y.iter_mut().zip(&IQ1S_GRID[index]) {
                        *yl = dl * (v as f32 + delta);
                    }
                }
            }
        }
        DType::IQ1M => {
            // iq1_s's points, with a 3-bit scale a 16 elements and a delta
            // sign a point (in `qh`'s nibbles); the f16 `d` spread over the
            // top nibbles of the four scale words.
            let word = |k: usize| u16::from_le_bytes([b[48 + 2 * k], b[49 + 2 * k]]);
            let d_bits = (word(0) >> 12) | ((word(1) >> 12) << 4) | ((word(2) >> 12) << 8) | ((word(3) >> 12) << 12);
            let d = f16::from_bits(d_bits).to_f32();
            for (j, y) in y.chunks_exact_mut(8).enumerate() {
                let (ib, half) = (j / 4, (j / 2) % 2);
                let k = 2 * ib + half;
                let dl = d * (2 * ((word(k / 4) >> (3 * (k % 4))) & 7) + 1) as f32;
                let nibble = (b[32 + j / 2] >> (4 * (j % 2))) & 0xF;
                let index = b[j] as usize | ((nibble & 7) as usize) << 8;
                let delta = if nibble & 8 == 0 { IQ1_DELTA } else { -IQ1_DELTA };
                for (yl, &v) in y.iter_mut().zip(&IQ1S_GRID[index]) {
                    *yl = dl * (v as f32 + delta);
                }
            }
        }
        _ => unreachable!("{dtype} is not a block type"),
    }
}

/// The offset iq1_s and iq1_m add to each grid value (ggml's `IQ1S_DELTA`).
const IQ1_DELTA: f32 = 0.125;

/// The 8 signs of sign index `i` (7 bits): its bits, and an eighth that
/// makes their count even (ggml's `ksigns_iq2xs[i]`).
fn iq_signs(i: u32) -> u32 {
    i | ((i.count_ones() & 1) << 7)
}

/// `-1.0` where bit `l` of `signs` is set, else `1.0`.
fn signed(signs: u32, l: usize) -> f32 {
    if (signs >> l) & 1 != 0 {
        -1.0
    } else {
        1.0
    }
}

/// Nibble `k` of `scales` (the low one of each byte first).
fn iq_scale(scales: &[u8], k: usize) -> u32 {
    ((scales[k / 2] >> (4 * (k % 2))) & 0xF) as u32
}

/// The 16 values an iq4_nl / iq4_xs nibble indexes (ggml's `kvalues_iq4nl`).
/// MXFP4's E2M1 values, doubled (ggml's `kvalues_mxfp4`): `0, 0.5, 1,
/// 1.5, 2, 3, 4, 6` and their negatives, times 2 so they are integers; the
/// scale is halved to match (`e8m0_half`).
pub const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half of an E8M0 scale, `2^(e - 128)`, as ggml's `ggml_e8m0_to_fp32_half`
/// computes it: the f32 with those bits (`e < 2` a subnormal).
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { (e as u32 - 1) << 23 };
    f32::from_bits(bits)
}

pub const IQ4_VALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// The 16 unsigned 6-bit scales of a q3_k block (before the `- 32`) from its
/// 12 scale bytes: sub-block `i`'s low four bits are a nibble of byte
/// `i % 8` (the low nibble for `i < 8`), its high two bits are bits
/// `2 (i / 4)` of byte `8 + i % 4`.
pub fn q3_k_scales(s: &[u8]) -> [u8; 16] {
    std::array::from_fn(|i| {
        let low = if i < 8 { s[i] & 0xF } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        low | (high << 4)
    })
}

/// The 6-bit scale and min of sub-block `j` of a q4_k / q5_k block.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}
