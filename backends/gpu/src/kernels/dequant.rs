//! One element of a weight block, in the kernel IR: the decoding of every
//! GGUF block type the repo reads (q4_0, q4_1, q5_0, q8_0, q4_k, q5_k, q6_k)
//! plus f32 and f16, written once after `graphc_ir::quant` (the CPU
//! definition) and shared by the matmul and gather kernels.
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
    ((byte(w, offset) << u(24)).cast(Ty::I32) >> u(24)).cast(Ty::F32)
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
        DType::Q8_0 => signed_byte(w, at(2) + l) * d,
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
