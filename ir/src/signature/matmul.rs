//! Products with a weight matrix: `matmul` and the fused forms the rules
//! build around it, each typed as what it replaces, step by step.

use super::attr::Attributes;
use super::check::{arity, need_float, need_rank, other_kind, same_dim, same_operand};
use crate::op::{NormKind, Op, UnaryOp};
use crate::shape::TensorType;
use crate::DType;

pub(super) fn prototypes() -> Vec<Op> {
    vec![
        Op::MatMul,
        Op::MatMulGlu { act: UnaryOp::Silu },
        Op::NormMatMul { eps: 0.0 },
        Op::NormMatMulGlu { act: UnaryOp::Silu, eps: 0.0 },
        Op::MatMulAdd,
        Op::MoeExperts { act: UnaryOp::Silu, bias: false, alpha: None, limit: None },
    ]
}

pub(super) fn attributes<A: Attributes>(op: &mut Op, a: &mut A) -> Result<(), String> {
    match op {
        Op::MatMul => a.name("matmul"),
        Op::MatMulGlu { act } => {
            a.name("matmul_glu")?;
            a.value("act", act)
        }
        Op::NormMatMul { eps } => {
            a.name("norm_matmul")?;
            a.value("eps", eps)
        }
        Op::NormMatMulGlu { act, eps } => {
            a.name("norm_matmul_glu")?;
            a.value("act", act)?;
            a.value("eps", eps)
        }
        Op::MatMulAdd => a.name("matmul_add"),
        Op::MoeExperts { act, bias, alpha, limit } => {
            a.name("moe_experts")?;
            a.value("act", act)?;
            a.flag("bias", bias)?;
            a.optional("alpha", alpha)?;
            a.optional("limit", limit)
        }
        _ => other_kind(op),
    }
}

pub(super) fn infer(op: &Op, tys: &[TensorType]) -> Result<TensorType, String> {
    let t = |i: usize| &tys[i];
    let rms = |eps: &f32| Op::Norm { kind: NormKind::Rms, eps: *eps };
    match op {
        Op::MatMul => {
            arity(tys, 2..=2)?;
            matmul_type(t(0), t(1))
        }
        Op::MatMulGlu { .. } => {
            arity(tys, 3..=3)?;
            if t(1) != t(2) {
                return Err(format!("gate weight {} and up weight {} differ in type or shape", t(1), t(2)));
            }
            matmul_type(t(0), t(1))
        }
        Op::NormMatMul { eps } => {
            arity(tys, 3..=3)?;
            let normed = super::norm::infer(&rms(eps), &tys[..2])?;
            infer(&Op::MatMul, &[normed, t(2).clone()])
        }
        Op::NormMatMulGlu { act, eps } => {
            arity(tys, 4..=4)?;
            let normed = super::norm::infer(&rms(eps), &tys[..2])?;
            infer(&Op::MatMulGlu { act: *act }, &[normed, t(2).clone(), t(3).clone()])
        }
        Op::MatMulAdd => {
            arity(tys, 3..=3)?;
            let product = infer(&Op::MatMul, &tys[..2])?;
            same_operand("matmul_add residual", t(2), &product)
        }
        Op::MoeExperts { act, bias, alpha, limit } => {
            let per = if *bias { 6 } else { 3 };
            if tys.len() < 2 + per || !(tys.len() - 2).is_multiple_of(per) {
                return Err(format!("takes x, the routing weights and {per} weights an expert, found {} input(s)", tys.len()));
            }
            match (alpha, limit) {
                (None, None) => {}
                (Some(a), Some(l)) if a.is_finite() && l.is_finite() && *l > 0.0 && *act == UnaryOp::Sigmoid => {}
                _ => {
                    return Err(format!(
                        "a clamped SwiGLU needs `act=sigmoid`, a finite `alpha` and a positive `limit`, found {act:?}, {alpha:?}, {limit:?}"
                    ))
                }
            }
            let experts = (tys.len() - 2) / per;
            let (x, weights) = (t(0), t(1));
            need_float("routing weights", weights)?;
            let mut routed = x.shape.clone();
            *routed.last_mut().ok_or("x is a scalar")? = crate::shape::Dim::konst(experts as i64);
            if weights.shape != routed {
                return Err(format!("routing weights {weights} are not [..x's rows, {experts}] for x {x} and {experts} experts"));
            }
            for e in 0..experts {
                let w = |i: usize| t(2 + per * e + if *bias { 2 * i } else { i });
                let [gate, up, down] = [w(0), w(1), w(2)];
                let hidden = infer(&Op::MatMulGlu { act: *act }, &[x.clone(), gate.clone(), up.clone()]).map_err(|m| format!("expert {e}: {m}"))?;
                let y = infer(&Op::MatMul, &[hidden.clone(), down.clone()]).map_err(|m| format!("expert {e}: {m}"))?;
                same_operand(&format!("expert {e}'s output"), &y, &TensorType::new(DType::F32, x.shape.clone()))?;
                if *bias {
                    for (i, product) in [(0, &hidden), (1, &hidden), (2, &y)] {
                        let b = t(3 + per * e + 2 * i);
                        need_float(&format!("expert {e}'s bias {i}"), b)?;
                        need_rank(&format!("expert {e}'s bias {i}"), b, 1)?;
                        same_dim(&format!("expert {e}'s bias {i}"), &b.shape[0], product.shape.last().ok_or("a scalar product")?)?;
                    }
                }
            }
            Ok(TensorType::new(DType::F32, x.shape.clone()))
        }
        _ => other_kind(op),
    }
}

/// `x · wᵀ`'s type: `x [..., k]` float, `w [n, k]` float or quantized.
fn matmul_type(x: &TensorType, w: &TensorType) -> Result<TensorType, String> {
    need_float("matmul lhs", x)?;
    need_rank("matmul rhs", w, 2)?;
    let k = x.shape.last().ok_or("matmul lhs is a scalar")?;
    if !w.dtype.is_float() && !w.dtype.is_quantized() {
        return Err(format!("matmul rhs must be float or quantized, found {w}"));
    }
    same_dim(&format!("matmul inner dims differ ({x} · {w}ᵀ)"), k, &w.shape[1])?;
    let mut shape = x.shape.clone();
    *shape.last_mut().unwrap() = w.shape[0].clone();
    Ok(TensorType::new(DType::F32, shape))
}
