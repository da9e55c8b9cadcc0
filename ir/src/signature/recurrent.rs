//! Ops that carry state along the sequence inside one op: the short causal
//! convolution and the gated delta rule (Qwen3-Next's linear attention).

use super::attr::Attributes;
use super::check::{arity, need_float, need_rank, other_kind, same_dim};
use crate::op::Op;
use crate::shape::{Dim, TensorType};
use crate::DType;

pub(super) fn prototypes() -> Vec<Op> {
    vec![Op::CausalConv1d { kernel: 0 }, Op::GatedDeltaRule]
}

pub(super) fn attributes<A: Attributes>(op: &mut Op, a: &mut A) -> Result<(), String> {
    match op {
        Op::CausalConv1d { kernel } => {
            a.name("causal_conv1d")?;
            a.value("kernel", kernel)
        }
        Op::GatedDeltaRule => a.name("gated_delta_rule"),
        _ => other_kind(op),
    }
}

pub(super) fn infer(op: &Op, tys: &[TensorType]) -> Result<TensorType, String> {
    let t = |i: usize| &tys[i];
    match op {
        Op::CausalConv1d { kernel } => {
            arity(tys, 4..=4)?;
            let (x, w, state, lengths) = (t(0), t(1), t(2), t(3));
            need_rank("conv input", x, 3)?;
            need_rank("conv state", state, 3)?;
            need_rank("conv weight", w, 2)?;
            need_float("conv input", x)?;
            need_float("conv state", state)?;
            if *kernel < 2 {
                return Err(format!("a causal conv needs kernel >= 2, found {kernel}"));
            }
            same_dim("conv weight channels", &w.shape[0], &x.shape[2])?;
            same_dim("conv weight taps", &w.shape[1], &Dim::from(*kernel))?;
            same_dim("conv state batch", &state.shape[0], &x.shape[0])?;
            same_dim("conv state rows", &state.shape[1], &Dim::from(*kernel - 1))?;
            same_dim("conv state channels", &state.shape[2], &x.shape[2])?;
            if lengths.dtype != DType::I32 || lengths.shape.len() != 1 {
                return Err(format!("conv lengths must be i32[batch], found {lengths}"));
            }
            let mut shape = x.shape.clone();
            shape[1] = x.shape[1].add(&Dim::from(*kernel - 1));
            Ok(TensorType::new(DType::F32, shape))
        }
        Op::GatedDeltaRule => {
            arity(tys, 7..=7)?;
            let (q, k, v, g, beta, state, lengths) = (t(0), t(1), t(2), t(3), t(4), t(5), t(6));
            for (what, x, rank) in [("q", q, 4), ("k", k, 4), ("v", v, 4), ("g", g, 3), ("beta", beta, 3), ("state", state, 4)] {
                need_float(what, x)?;
                need_rank(what, x, rank)?;
            }
            if q.shape != k.shape {
                return Err(format!("q {q} and k {k} differ in shape"));
            }
            let (hk, hv) = (q.shape[1].as_const(), v.shape[1].as_const());
            if let (Some(hk), Some(hv)) = (hk, hv) {
                if hk == 0 || hv % hk != 0 {
                    return Err(format!("{hv} value heads are not a multiple of {hk} key heads"));
                }
            }
            same_dim("q and v batch", &q.shape[0], &v.shape[0])?;
            same_dim("q and v tokens", &q.shape[2], &v.shape[2])?;
            for (what, x) in [("g", g), ("beta", beta)] {
                same_dim(&format!("{what} batch"), &x.shape[0], &v.shape[0])?;
                same_dim(&format!("{what} heads"), &x.shape[1], &v.shape[1])?;
                same_dim(&format!("{what} tokens"), &x.shape[2], &v.shape[2])?;
            }
            same_dim("state batch", &state.shape[0], &v.shape[0])?;
            same_dim("state heads", &state.shape[1], &v.shape[1])?;
            same_dim("state key dim", &state.shape[2], &q.shape[3])?;
            same_dim("state value dim", &state.shape[3], &v.shape[3])?;
            if lengths.dtype != DType::I32 || lengths.shape.len() != 1 {
                return Err(format!("delta rule lengths must be i32[batch], found {lengths}"));
            }
            let mut shape = v.shape.clone();
            shape[2] = v.shape[2].add(&q.shape[3]);
            Ok(TensorType::new(DType::F32, shape))
        }
        _ => other_kind(op),
    }
}
