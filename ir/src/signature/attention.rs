//! Attention over a key/value cache, the in-place cache write the
//! `kv_append` pass makes, and the attention head (q/k/v projections,
//! rotations and appends) the `attention_head` pass makes, and the
//! attention split by head into shares of its output projection
//! (`attention_project`) with the sum that adds them to the residual
//! (`add_partials`), which the `attention_project` pass makes, and the
//! attention of heads normed before their rotation with its appends
//! (`norm_rope_attention`), which the `norm_rope_attention` pass makes.

use super::attr::Attributes;
use super::check::{arity, need_float, need_rank, other_kind, same_dim};
use crate::op::Op;
use crate::op::{RopeScaling, RopeStyle};
use crate::shape::{Dim, TensorType};
use crate::DType;

pub(super) fn prototypes() -> Vec<Op> {
    vec![
        Op::Attention { n_heads: 0, n_kv_heads: 0, scale: 0.0, causal: false, window: None, softcap: None, ring: false, sinks: false },
        Op::KvAppend { axis: 0, cap: Dim::konst(0), window: None },
        Op::QkvRope {
            eps: None,
            bias: false,
            style: RopeStyle::Neox,
            rotary_dim: 0,
            theta: 0.0,
            scaling: RopeScaling::None,
            cap: Dim::konst(0),
            window: None,
        },
        Op::AttentionProject { n_heads: 0, n_kv_heads: 0, scale: 0.0, causal: false, window: None, softcap: None, ring: false },
        Op::AddPartials { eps: None },
        Op::NormRopeAttention {
            eps: 0.0,
            style: RopeStyle::Neox,
            rotary_dim: 0,
            theta: 0.0,
            scaling: RopeScaling::None,
            n_heads: 0,
            n_kv_heads: 0,
            scale: 0.0,
            causal: false,
            window: None,
            softcap: None,
            ring: false,
            cap: Dim::konst(0),
        },
    ]
}

pub(super) fn attributes<A: Attributes>(op: &mut Op, a: &mut A) -> Result<(), String> {
    let name = if matches!(op, Op::Attention { .. }) { "attention" } else { "attention_project" };
    match op {
        Op::Attention { n_heads, n_kv_heads, scale, causal, window, softcap, ring, sinks } => {
            a.name(name)?;
            heads(a, n_heads, n_kv_heads, scale, causal, window, softcap, ring)?;
            a.flag("sinks", sinks)
        }
        Op::AttentionProject { n_heads, n_kv_heads, scale, causal, window, softcap, ring } => {
            a.name(name)?;
            heads(a, n_heads, n_kv_heads, scale, causal, window, softcap, ring)
        }
        Op::KvAppend { axis, cap, window } => {
            a.name("kv_append")?;
            a.value("axis", axis)?;
            a.value("cap", cap)?;
            a.optional("window", window)
        }
        Op::QkvRope { eps, bias, style, rotary_dim, theta, scaling, cap, window } => {
            a.name("qkv_rope")?;
            a.optional("eps", eps)?;
            a.flag("bias", bias)?;
            super::rope::rotation(a, style, rotary_dim, theta, scaling)?;
            a.value("cap", cap)?;
            a.optional("window", window)
        }
        Op::NormRopeAttention { eps, style, rotary_dim, theta, scaling, n_heads, n_kv_heads, scale, causal, window, softcap, ring, cap } => {
            a.name("norm_rope_attention")?;
            a.value("eps", eps)?;
            super::rope::rotation(a, style, rotary_dim, theta, scaling)?;
            heads(a, n_heads, n_kv_heads, scale, causal, window, softcap, ring)?;
            a.value("cap", cap)
        }
        Op::AddPartials { eps } => {
            a.name("add_partials")?;
            a.optional("eps", eps)
        }
        _ => other_kind(op),
    }
}

/// An attention's attributes (`attention`, `attention_project`, and
/// `norm_rope_attention` after its rotation's).
#[allow(clippy::too_many_arguments)]
fn heads<A: Attributes>(
    a: &mut A,
    n_heads: &mut usize,
    n_kv_heads: &mut usize,
    scale: &mut f32,
    causal: &mut bool,
    window: &mut Option<usize>,
    softcap: &mut Option<f32>,
    ring: &mut bool,
) -> Result<(), String> {
    a.value("n_heads", n_heads)?;
    a.value("n_kv_heads", n_kv_heads)?;
    a.value("scale", scale)?;
    a.value("causal", causal)?;
    a.optional("window", window)?;
    a.optional("softcap", softcap)?;
    a.flag("ring", ring)
}

pub(super) fn infer(op: &Op, tys: &[TensorType]) -> Result<TensorType, String> {
    let t = |i: usize| &tys[i];
    match op {
        Op::Attention { n_heads, n_kv_heads, window, causal, ring, sinks, .. } => {
            arity(tys, if *sinks { 5..=5 } else { 4..=4 })?;
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
            if *sinks {
                let s = t(4);
                need_float("attention sinks", s)?;
                need_rank("attention sinks", s, 1)?;
                same_dim("attention sinks vs n_heads", &s.shape[0], &Dim::from(*n_heads))?;
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
        Op::QkvRope { .. } => Ok(qkv_rope_results(op, tys)?.swap_remove(0)),
        Op::NormRopeAttention { .. } => Ok(norm_rope_attention_results(op, tys)?.swap_remove(0)),
        &Op::AttentionProject { n_heads, n_kv_heads, scale, causal, window, softcap, ring } => {
            // Typed as what it replaces: the attention, its rows of heads, the projection.
            arity(tys, 5..=5)?;
            let attention = Op::Attention { n_heads, n_kv_heads, scale, causal, window, softcap, ring, sinks: false };
            let a = infer(&attention, &tys[..4])?;
            let w = t(4);
            need_rank("attention_project weight", w, 2)?;
            let dv = a.shape[3].as_const().ok_or_else(|| format!("attention_project of a value head size {} not constant", a.shape[3]))?;
            same_dim("attention_project weight columns vs n_heads · dv", &w.shape[1], &crate::shape::Dim::konst(n_heads as i64 * dv))?;
            let mut shape = vec![a.shape[0].clone(), a.shape[2].clone(), Dim::from(n_heads)];
            shape.push(w.shape[0].clone());
            Ok(TensorType::new(DType::F32, shape))
        }
        &Op::AddPartials { eps } => {
            arity(tys, if eps.is_some() { 3..=3 } else { 2..=2 })?;
            let (r, p) = (t(0), t(1));
            need_float("add_partials residual", r)?;
            need_float("add_partials partials", p)?;
            if p.shape.len() != r.shape.len() + 1 {
                return Err(format!("add_partials of partials {p} against a residual {r}: the partials have one axis more (the heads)"));
            }
            let n = r.shape.len();
            for k in 0..n - 1 {
                same_dim(&format!("add_partials axis {k}"), &r.shape[k], &p.shape[k])?;
            }
            same_dim("add_partials features", &r.shape[n - 1], &p.shape[n])?;
            if let Some(eps) = eps {
                // The post-norm's own rule on the sum (of `r`'s shape).
                super::norm::infer(&Op::NormAdd { eps }, &[r.clone(), r.clone(), t(2).clone()])?;
            }
            Ok(TensorType::new(DType::F32, r.shape.clone()))
        }
        _ => other_kind(op),
    }
}

/// `qkv_rope`'s three results (q rotated, the caches after the appends),
/// typed as the ops it replaces, step by step.
pub(super) fn qkv_rope_results(op: &Op, tys: &[TensorType]) -> Result<Vec<TensorType>, String> {
    let &Op::QkvRope { eps, bias, style, rotary_dim, theta, ref scaling, ref cap, window } = op else { other_kind(op) };
    // The biases follow the norm's weight.
    let bias_at = 8 + usize::from(eps.is_some());
    let operands = bias_at + if bias { 3 } else { 0 };
    arity(tys, operands..=operands)?;
    let t = |i: usize| &tys[i];
    let (positions, k_cache, v_cache, lengths) = (t(4), t(5), t(6), t(7));
    need_rank("k_cache", k_cache, 4)?;
    need_rank("v_cache", v_cache, 4)?;
    // p(w), then split into heads of the caches' head sizes.
    let heads = |w: usize, what: &str, head_dim: &Dim| -> Result<TensorType, String> {
        let projected = match eps {
            Some(eps) => super::matmul::infer(&Op::NormMatMul { eps }, &[t(0).clone(), t(8).clone(), t(w).clone()])?,
            None => super::matmul::infer(&Op::MatMul, &[t(0).clone(), t(w).clone()])?,
        };
        need_rank(&format!("{what} projection"), &projected, 3)?;
        let projected = match bias {
            true => {
                let b = t(bias_at + w - 1);
                need_rank(&format!("{what} bias"), b, 1)?;
                same_dim(&format!("{what} bias and projection features"), &b.shape[0], &projected.shape[2])?;
                super::elementwise::infer(&Op::Binary(crate::op::BinaryOp::Add), &[projected, b.clone()])?
            }
            false => projected,
        };
        let (n, d) = match (projected.shape[2].as_const(), head_dim.as_const()) {
            (Some(n), Some(d)) if d > 0 && n % d == 0 => (n, d),
            _ => {
                return Err(format!(
                    "the {what} projection's {} features do not split into heads of {head_dim} (the cache's head size)",
                    projected.shape[2]
                ))
            }
        };
        let mut shape = projected.shape[..2].to_vec();
        shape.extend([Dim::konst(n / d), Dim::konst(d)]);
        let split = super::layout::infer(&Op::Reshape { shape }, &[projected])?;
        super::layout::infer(&Op::Permute { perm: vec![0, 2, 1, 3] }, &[split])
    };
    let rope = Op::Rope { style, rotary_dim, theta, scaling: scaling.clone() };
    let append = Op::KvAppend { axis: 2, cap: cap.clone(), window };
    let q = super::rope::infer(&rope, &[heads(1, "q", &k_cache.shape[3])?, positions.clone()])?;
    let k = super::rope::infer(&rope, &[heads(2, "k", &k_cache.shape[3])?, positions.clone()])?;
    let v = heads(3, "v", &v_cache.shape[3])?;
    let k_cache = infer(&append, &[k_cache.clone(), k, lengths.clone()])?;
    let v_cache = infer(&append, &[v_cache.clone(), v, lengths.clone()])?;
    Ok(vec![q, k_cache, v_cache])
}

/// `norm_rope_attention`'s three results (the shares, the caches after the
/// appends), typed as the ops it replaces, step by step.
pub(super) fn norm_rope_attention_results(op: &Op, tys: &[TensorType]) -> Result<Vec<TensorType>, String> {
    let Op::NormRopeAttention { eps, style, rotary_dim, theta, scaling, n_heads, n_kv_heads, scale, causal, window, softcap, ring, cap } = op.clone()
    else {
        other_kind(op)
    };
    arity(tys, 10..=10)?;
    let t = |i: usize| tys[i].clone();
    let norm_rope = Op::NormRope { eps, style, rotary_dim, theta, scaling };
    let q = super::rope::infer(&norm_rope, &[t(0), t(3), t(5)])?;
    let k = super::rope::infer(&norm_rope, &[t(1), t(4), t(5)])?;
    let append = Op::KvAppend { axis: 2, cap, window: window.filter(|_| ring) };
    let k_cache = infer(&append, &[t(6), k, t(8)])?;
    let v_cache = infer(&append, &[t(7), t(2), t(8)])?;
    let project = Op::AttentionProject { n_heads, n_kv_heads, scale, causal, window, softcap, ring };
    let shares = infer(&project, &[q, k_cache.clone(), v_cache.clone(), t(5), t(9)])?;
    Ok(vec![shares, k_cache, v_cache])
}
