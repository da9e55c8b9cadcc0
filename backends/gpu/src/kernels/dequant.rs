//! One element of a weight block, in the kernel IR: the decoding of every
//! GGUF block type the repo reads (q4_0, q4_1, q5_0, q8_0, q4_k, q5_k, q6_k)
//! plus f32 and f16, written once after `graphc_ir::quant` (the CPU
//! definition) and shared by the matmul and gather kernels.
//!
//! Weights live on the device as their checkpoint bytes, bound as an array
//! of u32 words (padded to a whole word): blocks of 18, 22, 34 or 210 bytes
//! are not word-aligned, so every read is a byte or half read out of the
//! word that holds it.

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

/// Statements that leave element `e` (u32, `0..block_elems`) of the block
/// starting at byte `base` of `w` in the f32 local `out`. Names its locals
/// `dq_*`; `base` and `e` should be locals (they are read many times).
pub fn element(dtype: DType, w: &str, base: Expr, e: Expr) -> Vec<Stmt> {
    let at = |off: u32| base.clone() + u(off);
    let low_or_high = |q: Expr, high: Expr| select(high, q.clone() >> u(4), q & u(0xF));
    let out = |v: Expr| vec![let_("out", Ty::F32, v)];
    match dtype {
        DType::F32 => out(call(Func::BitsToF32, vec![load(w, base / u(4))])),
        DType::F16 => out(half(w, base)),
        DType::Q4_0 => {
            let q = low_or_high(byte(w, at(2) + e.clone() % u(16)), e.ge(u(16)));
            out((q.cast(Ty::I32) - i(8)).cast(Ty::F32) * half(w, base))
        }
        DType::Q4_1 => {
            let q = low_or_high(byte(w, at(4) + e.clone() % u(16)), e.ge(u(16)));
            out(q.cast(Ty::F32) * half(w, base.clone()) + half(w, at(2)))
        }
        DType::Q5_0 => {
            let j = e.clone() % u(16);
            let qh = byte(w, at(2)) | (byte(w, at(3)) << u(8)) | (byte(w, at(4)) << u(16)) | (byte(w, at(5)) << u(24));
            let hi = select(e.clone().ge(u(16)), (var("dq_qh") >> (j.clone() + u(12))) & u(0x10), ((var("dq_qh") >> j.clone()) << u(4)) & u(0x10));
            let q = low_or_high(byte(w, at(6) + j), e.ge(u(16))) | hi;
            let mut s = vec![let_("dq_qh", Ty::U32, qh)];
            s.extend(out((q.cast(Ty::I32) - i(16)).cast(Ty::F32) * half(w, base)));
            s
        }
        DType::Q8_0 => out(signed_byte(w, at(2) + e) * half(w, base)),
        DType::Q4K | DType::Q5K => {
            let q5 = dtype == DType::Q5K;
            let scales = |j: Expr| byte(w, at(4) + j);
            let (chunk, l) = (var("dq_chunk"), var("dq_l"));
            let sub = var("dq_sub");
            // scale_min_k4: 6-bit scale and min of sub-block `sub`.
            let sc = select(
                sub.clone().lt(u(4)),
                scales(sub.clone()) & u(63),
                (scales(sub.clone() + u(4)) & u(0xF)) | ((scales(sub.clone() - u(4).min(sub.clone())) >> u(6)) << u(4)),
            );
            let mn = select(
                sub.clone().lt(u(4)),
                scales(sub.clone() + u(4)) & u(63),
                (scales(sub.clone() + u(4)) >> u(4)) | ((scales(sub.clone()) >> u(6)) << u(4)),
            );
            let qs = at(if q5 { 48 } else { 16 });
            let mut q = low_or_high(byte(w, qs + chunk.clone() * u(32) + l.clone()), var("dq_second"));
            if q5 {
                let mask = select(var("dq_second"), u(2), u(1)) << (u(2) * chunk.clone());
                q = q + select((byte(w, at(16) + l.clone()) & mask).ne(u(0)), u(16), u(0));
            }
            vec![
                let_("dq_chunk", Ty::U32, e.clone() / u(64)),
                let_("dq_second", Ty::Bool, (e.clone() % u(64)).ge(u(32))),
                let_("dq_l", Ty::U32, e % u(32)),
                let_("dq_sub", Ty::U32, u(2) * chunk + select(var("dq_second"), u(1), u(0))),
                let_("dq_d", Ty::F32, half(w, base.clone()) * sc.cast(Ty::F32)),
                let_("dq_m", Ty::F32, half(w, at(2)) * mn.cast(Ty::F32)),
                let_("out", Ty::F32, var("dq_d") * q.cast(Ty::F32) - var("dq_m")),
            ]
        }
        DType::Q6K => {
            // Halves of 128; in each, quarters of 32 share a low-nibble
            // byte pair, a 2-bit field of qh, and scale `is + 2·quarter`.
            let (n, quarter, l) = (var("dq_n"), var("dq_quarter"), var("dq_l"));
            let ql = byte(w, base.clone() + n.clone() * u(64) + l.clone() + (quarter.clone() & u(1)) * u(32));
            let qh = byte(w, at(128) + n.clone() * u(32) + l.clone());
            let q = low_or_high(ql, quarter.clone().ge(u(2))) | (((qh >> (u(2) * quarter.clone())) & u(3)) << u(4));
            let scale = signed_byte(w, at(192) + n * u(8) + l / u(16) + u(2) * quarter);
            vec![
                let_("dq_n", Ty::U32, e.clone() / u(128)),
                let_("dq_quarter", Ty::U32, (e.clone() % u(128)) / u(32)),
                let_("dq_l", Ty::U32, e % u(32)),
                let_("out", Ty::F32, half(w, at(208)) * scale * (q.cast(Ty::I32) - i(32)).cast(Ty::F32)),
            ]
        }
        other => panic!("no GPU decoding for weight type {other} (see kernels::WEIGHT_DTYPES)"),
    }
}
