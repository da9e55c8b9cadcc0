//! Attention over a key/value cache, and the in-place cache write the
//! `kv_append` pass makes.

use super::attr::Attributes;
use super::check::{arity, need_float, need_rank, other_kind, same_dim};
use crate::op::Op;
use crate::shape::{Dim, TensorType};
use crate::DType;

pub(super) fn prototypes() -> Vec<Op> {
    vec![
        Op::Attention { n_heads: 0, n_kv_heads: 0, scale: 0.0, causal: false, window: None, softcap: None, ring: false },
        Op::KvAppend { axis: 0, cap: Dim::konst(0), window: None },
    ]
}

pub(super) fn attributes<A: Attributes>(op: &mut Op, a: &mut A) -> Result<(), String> {
    match op {
        Op::Attention { n_heads, n_kv_heads, scale, causal, window, softcap, ring } => {
            a.name("attention")?;
            a.value("n_heads", n_heads)?;
            a.value("n_kv_heads", n_kv_heads)?;
            a.value("scale", scale)?;
            a.value("causal", causal)?;
            a.optional("window", window)?;
            a.optional("softcap", softcap)?;
            a.flag("ring", ring)
        }
        Op::KvAppend { axis, cap, window } => {
            a.name("kv_append")?;
            a.value("axis", axis)?;
            a.value("cap", cap)?;
            a.optional("window", window)
        }
        _ => other_kind(op),
    }
}

pub(super) fn infer(op: &Op, tys: &[TensorType]) -> Result<TensorType, String> {
    let t = |i: usize| &tys[i];
    match op {
        Op::Attention { n_heads, n_kv_heads, window, causal, ring, .. } => {
            arity(tys, 4..=4)?;
            for (i, what) in [(0, "q"), (1, "k"), (2, "v")] {
                need_float(what, t(i))?;
                need_rank(what, t(i), 4)?;
            }
            let (q, k, v, pos) = (t(0), t(1), t(2), t(3));
            if *n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
                return Err(format!("n_heads {n_heads} is not a multiple of n_kv_heads {n_kv_heads}"));
            }
            same_dim("q heads vs n_heads", &q.shape[1], &Dim::from(*n_heads))?;
            same_dim("k heads vs n_kv_heads", &k.shape[1], &Dim::from(*n_kv_heads))?;
            same_dim("v heads vs n_kv_heads", &v.shape[1], &Dim::from(*n_kv_heads))?;
            same_dim("q and k head_dim", &q.shape[3], &k.shape[3])?;
            same_dim("k and v rows", &k.shape[2], &v.shape[2])?;
            same_dim("q and k batch", &q.shape[0], &k.shape[0])?;
            if *ring && (window.is_none() || !causal) {
                return Err("a ring attention reads a window of a causal cache: it needs `causal=true` and a `window`".into());
            }
            if let (true, Some(w), Some(t)) = (*ring, window, k.shape[2].as_const()) {
                if (*w as i64) > t {
                    return Err(format!("a ring of {t} rows cannot hold a window of {w}"));
                }
            }
            need_rank("attention positions", pos, 2)?;
            if pos.dtype != DType::I32 {
                return Err(format!("attention positions must be i32, found {pos}"));
            }
            let mut shape = q.shape.clone();
            shape[3] = v.shape[3].clone();
            Ok(TensorType::new(DType::F32, shape))
        }
        Op::KvAppend { axis, cap, window } => {
            arity(tys, 3..=3)?;
            if let Some(w) = window {
                match cap.as_const() {
                    Some(c) if *w >= 1 && c >= *w as i64 => {}
                    _ => return Err(format!("a ring kv_append needs a constant capacity of at least its window {w}, found {cap}")),
                }
            }
            let (cache, new) = (t(0), t(1));
            if *axis >= cache.shape.len() || cache.shape.len() != new.shape.len() {
                return Err(format!("kv_append of {new} into {cache} along axis {axis}"));
            }
            same_dim("kv_append cache capacity", &cache.shape[*axis], cap)?;
            for k in 0..cache.shape.len() {
                if k != *axis {
                    same_dim(&format!("kv_append axis {k}"), &cache.shape[k], &new.shape[k])?;
                }
            }
            Ok(cache.clone())
        }
        _ => other_kind(op),
    }
}
