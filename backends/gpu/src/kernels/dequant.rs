//! One element of a weight block, in the kernel IR: the decoding of every
//! GGUF block type the repo computes (q4_0, q4_1, q5_0, q5_1, q8_0, q2_k,
//! q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4) plus f32 and f16, written once
//! after `graphc_ir::quant` (the CPU definition) and shared by the matmul,
//! gather and attention-projection kernels.
//!
//! Weights live on the device as their checkpoint bytes, bound as an array
//! of u32 words (padded to a whole word): blocks of 18, 22, 34 or 210 bytes
//! are not word-aligned, so every read is a byte or half read out of the
//! word that holds it.
//!
//! A block decodes as groups of elements sharing a scale: the kernels read
//! a group's scales once and then its elements.

use crate::kir::*;
use graphc_ir::DType;

/// Byte `offset` (a u32 expression) of the word buffer `w`.
pub fn byte(w: &str, offset: Expr) -> Expr {
    (load(w, offset.clone() / u(4)) >> ((offset % u(4)) * u(8))) & u(0xFF)
}

/// The f16 at even byte `offset` of `w`, as f32.
fn half(w: &str, offset: Expr) -> Expr {
    call(Func::HalfToF32, vec![load(w, offset.clone() / u(4)) >> ((offset % u(4)) * u(8))])
}

/// A sign-extended byte (q8_0 quants, q6_k scales) as f32.
fn signed_byte(w: &str, offset: Expr) -> Expr {
    sign_extended(byte(w, offset))
}

/// The low byte of u32 `b`, sign-extended, as f32.
fn sign_extended(b: Expr) -> Expr {
    ((b << u(24)).cast(Ty::I32) >> u(24)).cast(Ty::F32)
}

/// The four little-endian u32 words of `graphc_ir::quant::IQ4_VALUES`.
const IQ4_WORDS: [u32; 4] = table_words(graphc_ir::quant::IQ4_VALUES);

/// The four little-endian u32 words of `graphc_ir::quant::MXFP4_VALUES`.
const MXFP4_WORDS: [u32; 4] = table_words(graphc_ir::quant::MXFP4_VALUES);

const fn table_words(v: [i8; 16]) -> [u32; 4] {
    let mut words = [0u32; 4];
    let mut i = 0;
    while i < 16 {
        words[i / 4] |= (v[i] as u8 as u32) << (8 * (i % 4));
        i += 1;
    }
    words
}

/// `IQ4_VALUES[q]` (q a u32 nibble) as f32: the value's byte picked out of
/// four constant words (no table in memory).
fn iq4_value(q: Expr) -> Expr {
    table_value(IQ4_WORDS, q)
}

/// Entry `q` (a u32 nibble) of a 16-entry signed byte table held as `words`, as f32.
fn table_value(words: [u32; 4], q: Expr) -> Expr {
    let word =
        select(q.clone().lt(u(8)), select(q.clone().lt(u(4)), u(words[0]), u(words[1])), select(q.clone().lt(u(12)), u(words[2]), u(words[3])));
    sign_extended(word >> ((q % u(4)) * u(8)))
}

/// The 16 bits at even byte `offset` of `w`, as u32.
fn u16_at(w: &str, offset: Expr) -> Expr {
    byte(w, offset.clone()) | (byte(w, offset + u(1)) << u(8))
}

/// Elements per decoding group: the run of elements that share one scale
/// (and min, `DType::scale_group_elems`). A kernel decodes a group's
/// scales once (`group_setup`) and then each of its elements
/// (`group_element`).
pub fn group_elems(dtype: DType) -> u32 {
    dtype.scale_group_elems() as u32
}

/// Statements declaring the `dq_*` locals of group `g` (u32 local) of the
/// block at byte `base` (u32 local) of `w`.
pub fn group_setup(dtype: DType, w: &str, base: Expr, g: Expr) -> Vec<Stmt> {
    let at = |off: u32| base.clone() + u(off);
    match dtype {
        DType::F32 | DType::F16 => vec![],
        DType::Q4_0 | DType::Q8_0 => vec![let_("dq_d", Ty::F32, half(w, base))],
        DType::Q4_1 => vec![let_("dq_d", Ty::F32, half(w, base.clone())), let_("dq_m", Ty::F32, half(w, at(2)))],
        DType::Q5_0 => vec![
            let_("dq_d", Ty::F32, half(w, base.clone())),
            let_("dq_qh", Ty::U32, byte(w, at(2)) | (byte(w, at(3)) << u(8)) | (byte(w, at(4)) << u(16)) | (byte(w, at(5)) << u(24))),
        ],
        DType::Q4K | DType::Q5K => {
            // Sub-block `g` of 8: scale_min_k4's 6-bit scale and min.
            let scales = |j: Expr| byte(w, at(4) + j);
            let sc = select(
                g.clone().lt(u(4)),
                scales(g.clone()) & u(63),
                (scales(g.clone() + u(4)) & u(0xF)) | ((scales(g.clone() - u(4).min(g.clone())) >> u(6)) << u(4)),
            );
            let mn = select(
                g.clone().lt(u(4)),
                scales(g.clone() + u(4)) & u(63),
                (scales(g.clone() + u(4)) >> u(4)) | ((scales(g.clone()) >> u(6)) << u(4)),
            );
            vec![let_("dq_d", Ty::F32, half(w, base.clone()) * sc.cast(Ty::F32)), let_("dq_m", Ty::F32, half(w, at(2)) * mn.cast(Ty::F32))]
        }
        DType::Q5_1 => vec![
            let_("dq_d", Ty::F32, half(w, base.clone())),
            let_("dq_m", Ty::F32, half(w, at(2))),
            let_("dq_qh", Ty::U32, u16_at(w, at(4)) | (u16_at(w, at(6)) << u(16))),
        ],
        DType::Q2K => {
            // Sub-block `g` of 16: scale in the low nibble, min in the high.
            let sc = byte(w, base.clone() + g);
            vec![
                let_("dq_d", Ty::F32, half(w, at(80)) * (sc.clone() & u(0xF)).cast(Ty::F32)),
                let_("dq_m", Ty::F32, half(w, at(82)) * (sc >> u(4)).cast(Ty::F32)),
            ]
        }
        DType::Q3K => {
            // Sub-block `g` of 16: `quant::q3_k_scales`'s 6-bit scale, less 32.
            let low = select(g.clone().lt(u(8)), byte(w, at(96) + g.clone()) & u(0xF), byte(w, at(88) + g.clone()) >> u(4));
            let high = (byte(w, at(104) + g.clone() % u(4)) >> (u(2) * (g / u(4)))) & u(3);
            vec![let_("dq_d", Ty::F32, half(w, at(108)) * ((low | (high << u(4))).cast(Ty::I32) - i(32)).cast(Ty::F32))]
        }
        DType::IQ4NL => vec![let_("dq_d", Ty::F32, half(w, base))],
        DType::MXFP4 => {
            // `quant::e8m0_half`: the f32 with bits `(e - 1) << 23`, or the
            // subnormal `0x0020_0000 << e` for `e < 2`.
            let e = || byte(w, base.clone());
            let bits = select(e().lt(u(2)), u(0x0020_0000) << e(), (e() - u(1)) << u(23));
            vec![let_("dq_d", Ty::F32, call(Func::BitsToF32, vec![bits]))]
        }
        DType::IQ4XS => {
            // Sub-block `g` of 32: 4 bits in `scales_l`, 2 in `scales_h`, less 32.
            let low = (byte(w, at(4) + g.clone() / u(2)) >> (u(4) * (g.clone() % u(2)))) & u(0xF);
            let high = (u16_at(w, at(2)) >> (u(2) * g)) & u(3);
            vec![let_("dq_d", Ty::F32, half(w, base) * ((low | (high << u(4))).cast(Ty::I32) - i(32)).cast(Ty::F32))]
        }
        DType::Q6K => {
            // Group `g` of 16 elements: half n = g / 8, quarter (g % 8) / 2,
            // scale index is + 2·quarter with is = g % 2.
            let scale = signed_byte(w, at(192) + (g.clone() / u(8)) * u(8) + g.clone() % u(2) + u(2) * ((g.clone() % u(8)) / u(2)));
            vec![let_("dq_d", Ty::F32, half(w, at(208)) * scale)]
        }
        other => panic!("no GPU decoding for weight type {other} (see kernels::WEIGHT_DTYPES)"),
    }
}

/// Element `l` (u32 local, `0..group_elems`) of group `g` of the block at
/// `base`, after `group_setup`. The arithmetic is `graphc_ir::quant`'s.
pub fn group_element(dtype: DType, w: &str, base: Expr, g: Expr, l: Expr) -> Expr {
    let at = |off: u32| base.clone() + u(off);
    let low_or_high = |q: Expr, high: Expr| select(high, q.clone() >> u(4), q & u(0xF));
    let d = var("dq_d");
    match dtype {
        DType::F32 => call(Func::BitsToF32, vec![load(w, base / u(4))]),
        DType::F16 => half(w, base),
        DType::Q4_0 => {
            let q = low_or_high(byte(w, at(2) + l.clone() % u(16)), l.ge(u(16)));
            (q.cast(Ty::I32) - i(8)).cast(Ty::F32) * d
        }
        DType::Q4_1 => low_or_high(byte(w, at(4) + l.clone() % u(16)), l.ge(u(16))).cast(Ty::F32) * d + var("dq_m"),
        DType::Q5_0 => {
            let j = l.clone() % u(16);
            let qh = var("dq_qh");
            let hi = select(l.clone().ge(u(16)), (qh.clone() >> (j.clone() + u(12))) & u(0x10), ((qh >> j.clone()) << u(4)) & u(0x10));
            let q = low_or_high(byte(w, at(6) + j), l.ge(u(16))) | hi;
            (q.cast(Ty::I32) - i(16)).cast(Ty::F32) * d
        }
        DType::Q5_1 => {
            let j = l.clone() % u(16);
            let qh = var("dq_qh");
            let hi = select(l.clone().ge(u(16)), (qh.clone() >> (j.clone() + u(12))) & u(0x10), ((qh >> j.clone()) << u(4)) & u(0x10));
            (low_or_high(byte(w, at(8) + j), l.ge(u(16))) | hi).cast(Ty::F32) * d + var("dq_m")
        }
        DType::Q8_0 => signed_byte(w, at(2) + l) * d,
        DType::Q2K | DType::Q3K => {
            // Sub-block g: 16 bytes of the 32-byte run of half g / 8, shifted
            // by 2·((g % 8) / 2).
            let (half_g, second) = (g.clone() / u(8), g.clone() % u(2));
            let shift = (g.clone() % u(8)) / u(2);
            let qs = if dtype == DType::Q2K { 16 } else { 32 };
            let q = (byte(w, at(qs) + half_g.clone() * u(32) + second.clone() * u(16) + l.clone()) >> (u(2) * shift.clone())) & u(3);
            if dtype == DType::Q2K {
                d * q.cast(Ty::F32) - var("dq_m")
            } else {
                // Less 4 where the element's `hmask` bit is clear.
                let bit = u(1) << (u(4) * half_g + shift);
                let hm = byte(w, base.clone() + second * u(16) + l);
                d * (q.cast(Ty::I32) - select((hm & bit).ne(u(0)), i(0), i(4))).cast(Ty::F32)
            }
        }
        DType::IQ4NL => d * iq4_value(low_or_high(byte(w, at(2) + l.clone() % u(16)), l.ge(u(16)))),
        DType::MXFP4 => d * table_value(MXFP4_WORDS, low_or_high(byte(w, at(1) + l.clone() % u(16)), l.ge(u(16)))),
        DType::IQ4XS => d * iq4_value(low_or_high(byte(w, at(8) + g * u(16) + l.clone() % u(16)), l.ge(u(16)))),
        DType::Q4K | DType::Q5K => {
            // Sub-block g: chunk g / 2 of 32 bytes, low nibbles for even g.
            let chunk = g.clone() / u(2);
            let second = (g % u(2)).eq(u(1));
            let qs = at(if dtype == DType::Q5K { 48 } else { 16 });
            let mut q = low_or_high(byte(w, qs + chunk.clone() * u(32) + l.clone()), second.clone());
            if dtype == DType::Q5K {
                let mask = select(second, u(2), u(1)) << (u(2) * chunk);
                q = q + select((byte(w, at(16) + l) & mask).ne(u(0)), u(16), u(0));
            }
            d * q.cast(Ty::F32) - var("dq_m")
        }
        DType::Q6K => {
            let (n, quarter) = (g.clone() / u(8), (g.clone() % u(8)) / u(2));
            let l32 = (g % u(2)) * u(16) + l;
            let ql = byte(w, base.clone() + n.clone() * u(64) + l32.clone() + (quarter.clone() & u(1)) * u(32));
            let qh = byte(w, at(128) + n * u(32) + l32);
            let q = low_or_high(ql, quarter.clone().ge(u(2))) | (((qh >> (u(2) * quarter)) & u(3)) << u(4));
            d * (q.cast(Ty::I32) - i(32)).cast(Ty::F32)
        }
        other => panic!("no GPU decoding for weight type {other} (see kernels::WEIGHT_DTYPES)"),
    }
}
