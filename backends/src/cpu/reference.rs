//! The reference executor: runs any verified graph, one node at a time, in
//! f32 with dense row-major tensors. Clarity over speed; it is the
//! executable definition of every op (see `graphc_ir::op`).

use super::exec::{self, dense, Arg, Env, Evaluator, Val};
pub use super::exec::{ExecError, StepOutput};
use super::kernels::{dot, matmul_weight};
use crate::tensor::{Tensor, WeightRef, WeightSource};
use graphc_ir::op::{BinaryOp, NormKind, Op, ReduceOp, RopeScaling, RopeStyle, UnaryOp};
use graphc_ir::{DType, Graph};
use rayon::prelude::*;
use std::collections::HashMap;

/// The reference executor as an `Evaluator`: every op by its definition.
pub struct Reference;

impl Evaluator for Reference {
    fn eval(&self, op: &Op, args: Vec<Arg<'_, '_>>, env: &Env) -> Result<Tensor, String> {
        match op {
            Op::KvAppend { axis, cap, window } => {
                let mut it = args.into_iter();
                let cache = it.next().unwrap().into_tensor()?;
                let (new, lengths) = (it.next().unwrap(), it.next().unwrap());
                kv_append(cache, new.val(), lengths.val(), (*axis, cap, *window), env)
            }
            op => {
                let refs: Vec<&Val> = args.iter().map(|a| a.val()).collect();
                eval(op, &refs, env)
            }
        }
    }
}

/// Whether `op`'s definition below loops across rayon's threads (the rest
/// run on the calling thread).
pub fn runs_in_parallel(op: &Op) -> bool {
    op.is_matmul() || matches!(op, Op::Attention { .. })
}

/// One op on host tensors, by its definition (for checking kernels).
pub fn eval_op(op: &Op, args: &[Tensor]) -> Result<Tensor, String> {
    // Through the evaluator, which also runs what the run loop would run
    // in place (`kv_append` into a copy of its cache).
    let args = args.iter().cloned().map(|t| Arg::Own(Val::T(t))).collect();
    Reference.eval(op, args, &Env::new())
}

/// Run `graph` once on the reference executor (see `exec::run`).
pub fn run(
    graph: &Graph,
    inputs: &HashMap<String, Tensor>,
    states: HashMap<String, Tensor>,
    weights: &dyn WeightSource,
) -> Result<StepOutput, ExecError> {
    exec::run(&Reference, graph, inputs, states, weights)
}

/// Dense row-major element strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// `KvAppend`'s definition: write `new`'s rows into `cache` at each batch
/// row's own offset `lengths[b]` along `axis`; past `cap` is an error. With
/// a `window`, the cache is a ring: row `i` goes to `(lengths[b] + i) % cap`,
/// and a step of more than `cap - window + 1` rows is an error.
pub(crate) fn kv_append(
    mut cache: Tensor,
    new: &Val,
    lengths: &Val,
    (axis, cap, window): (usize, &graphc_ir::Dim, Option<usize>),
    env: &Env,
) -> Result<Tensor, String> {
    let lengths = lengths.i32s()?;
    let cap = eval_dim(cap, env)?;
    let shape = cache.shape().to_vec();
    let new_shape = new.shape();
    let rows = new_shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let mid: usize = shape[1..axis].iter().product();
    let new_d = new.f32s()?;
    if let Some(w) = window {
        let step = cap + 1 - w;
        if rows > step {
            return Err(format!(
                "kv_append into a ring of {cap} rows for a window of {w}: a step writes at most {step} rows (cap - window + 1), this one writes {rows}"
            ));
        }
    }
    let Tensor::F32 { data, .. } = &mut cache else { return Err("kv_append into an i32 cache".into()) };
    for bi in 0..shape[0] {
        let off = *lengths.get(bi).ok_or(format!("no length given for batch row {bi}"))?;
        let off = usize::try_from(off).map_err(|_| format!("batch row {bi} has negative length {off}"))?;
        if window.is_none() && off + rows > cap {
            return Err(format!(
                "kv_append past capacity: batch row {bi} writes rows {off}..{} (offset {off} + {rows} rows) but the cache holds {cap}",
                off + rows
            ));
        }
        for m in 0..mid {
            for i in 0..rows {
                let dst = ((bi * mid + m) * cap + (off + i) % cap) * inner;
                let src = ((bi * mid + m) * rows + i) * inner;
                data[dst..dst + inner].copy_from_slice(&new_d[src..src + inner]);
            }
        }
    }
    Ok(cache)
}

/// `SparseMixer`'s definition on one row of router scores (see the op).
pub fn sparse_mixer(scores: &[f32], jitter_eps: f32) -> Vec<f32> {
    // The first index of the largest finite-or-not value (torch's `max`).
    let argmax = |v: &[f32]| (0..v.len()).fold(0, |best, i| if v[i] > v[best] { i } else { best });
    // Softmax over `candidates` with those too far below `top` masked out; the weight at `pick`.
    let weight = |candidates: &[f32], top: f32, pick: usize| {
        let kept: Vec<f32> = candidates
            .iter()
            .zip(scores)
            .map(|(&c, &s)| if (top - s) / s.abs().max(top) > 2.0 * jitter_eps { f32::NEG_INFINITY } else { c })
            .collect();
        let m = kept.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = kept.iter().map(|&x| (x - m).exp()).sum();
        (kept[pick] - m).exp() / sum
    };
    let first = argmax(scores);
    let mut out = vec![0f32; scores.len()];
    out[first] = weight(scores, scores[first], first);
    let mut rest = scores.to_vec();
    rest[first] = f32::NEG_INFINITY;
    let second = argmax(&rest);
    out[second] = weight(&rest, rest[second], second);
    out
}

/// `ToHost`'s checks on the value read: `nonempty`, and every i32 value
/// within `0..bound` (every backend runs these on the host).
pub fn to_host_checks(t: &Tensor, nonempty: bool, bound: Option<u64>) -> Result<(), String> {
    if nonempty && t.numel() == 0 {
        return Err(format!("to_host of an empty tensor {:?}", t.shape()));
    }
    if let (Some(b), Some(vals)) = (bound, t.as_i32()) {
        if let Some((i, v)) = vals.iter().enumerate().find(|(_, &v)| v < 0 || v as u64 >= b) {
            return Err(format!("to_host: value {v} at index {i} is outside 0..{b}"));
        }
    }
    Ok(())
}

/// Row `bi`'s token count this step, which must lie in `0..=s`.
pub fn row_length(lengths: &[i32], bi: usize, s: usize) -> Result<usize, String> {
    let n = *lengths.get(bi).ok_or(format!("no length given for batch row {bi}"))?;
    usize::try_from(n).ok().filter(|&n| n <= s).ok_or(format!("batch row {bi} has length {n}, outside 0..={s} (the step's tokens)"))
}

pub(crate) fn eval_dim(d: &graphc_ir::Dim, env: &Env) -> Result<usize, String> {
    let v = d.eval(env).map_err(|why| format!("dimension `{d}`: {why}"))?;
    usize::try_from(v).map_err(|_| format!("dimension `{d}` evaluates to {v}"))
}

pub(crate) fn eval(op: &Op, args: &[&Val], env: &Env) -> Result<Tensor, String> {
    let a0 = || args[0];
    match op {
        Op::ToHost { nonempty, bound } => {
            let t = dense(a0())?;
            to_host_checks(&t, *nonempty, *bound)?;
            Ok(t)
        }
        Op::Contiguous => dense(a0()),
        Op::Const { value, ty } => {
            let shape: Vec<usize> = ty.shape.iter().map(|d| eval_dim(d, env)).collect::<Result<_, _>>()?;
            let n = shape.iter().product();
            Ok(match ty.dtype {
                DType::I32 => Tensor::i32(shape, vec![*value as i32; n]),
                _ => Tensor::f32(shape, vec![*value; n]),
            })
        }
        Op::Reshape { shape } => {
            let shape: Vec<usize> = shape.iter().map(|d| eval_dim(d, env)).collect::<Result<_, _>>()?;
            let t = dense(a0())?;
            if shape.iter().product::<usize>() != t.numel() {
                return Err(format!("reshape of {:?} to {shape:?} changes the element count", t.shape()));
            }
            Ok(match t {
                Tensor::F32 { data, .. } => Tensor::f32(shape, data),
                Tensor::I32 { data, .. } => Tensor::i32(shape, data),
            })
        }
        Op::Permute { perm } => {
            let t = dense(a0())?;
            let shape = t.shape().to_vec();
            let st = strides(&shape);
            let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            let out_st: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
            let n = t.numel();
            let mut src_index = vec![0usize; n];
            let mut idx = vec![0usize; shape.len()];
            for s in src_index.iter_mut() {
                *s = idx.iter().zip(&out_st).map(|(i, s)| i * s).sum();
                for ax in (0..idx.len()).rev() {
                    idx[ax] += 1;
                    if idx[ax] < out_shape[ax] {
                        break;
                    }
                    idx[ax] = 0;
                }
            }
            Ok(match t {
                Tensor::F32 { data, .. } => Tensor::f32(out_shape, src_index.iter().map(|&s| data[s]).collect()),
                Tensor::I32 { data, .. } => Tensor::i32(out_shape, src_index.iter().map(|&s| data[s]).collect()),
            })
        }
        Op::Narrow { axis, start, len } => {
            let t = dense(a0())?;
            let shape = t.shape().to_vec();
            let (s, l) = (eval_dim(start, env)?, eval_dim(len, env)?);
            if s + l > shape[*axis] {
                return Err(format!("narrow {s}..{} past axis {axis} of length {}", s + l, shape[*axis]));
            }
            let outer: usize = shape[..*axis].iter().product();
            let inner: usize = shape[axis + 1..].iter().product();
            let mut out_shape = shape.clone();
            out_shape[*axis] = l;
            let f = |data: &[f32]| {
                let mut o = Vec::with_capacity(outer * l * inner);
                for b in 0..outer {
                    let base = (b * shape[*axis] + s) * inner;
                    o.extend_from_slice(&data[base..base + l * inner]);
                }
                o
            };
            Ok(Tensor::f32(out_shape, f(t.as_f32().ok_or("narrow of i32 is not supported")?)))
        }
        Op::Concat { axis } => {
            let ts: Vec<Tensor> = args.iter().map(|a| dense(a)).collect::<Result<_, _>>()?;
            let shape0 = ts[0].shape().to_vec();
            let outer: usize = shape0[..*axis].iter().product();
            let inner: usize = shape0[axis + 1..].iter().product();
            let total: usize = ts.iter().map(|t| t.shape()[*axis]).sum();
            let mut out = Vec::with_capacity(outer * total * inner);
            for b in 0..outer {
                for t in &ts {
                    let len = t.shape()[*axis] * inner;
                    let d = t.as_f32().ok_or("concat of i32 is not supported")?;
                    out.extend_from_slice(&d[b * len..(b + 1) * len]);
                }
            }
            let mut out_shape = shape0;
            out_shape[*axis] = total;
            Ok(Tensor::f32(out_shape, out))
        }
        Op::Gather => {
            let ids = args[1].i32s()?;
            let ids_shape = args[1].shape();
            let table_shape = args[0].shape();
            let (n, d) = (table_shape[0], table_shape[1]);
            let mut out = vec![0f32; ids.len() * d];
            for (i, &id) in ids.iter().enumerate() {
                if id < 0 || id as usize >= n {
                    return Err(format!("id {id} at index {i} is outside the table's {n} rows"));
                }
                let dst = &mut out[i * d..(i + 1) * d];
                match args[0] {
                    Val::W(w) => graphc_ir::quant::dequantize(w.dtype, w.row(id as usize), dst),
                    Val::T(t) => dst.copy_from_slice(&t.as_f32().ok_or("gather from an i32 table")?[id as usize * d..(id as usize + 1) * d]),
                }
            }
            let mut shape = ids_shape;
            shape.push(d);
            Ok(Tensor::f32(shape, out))
        }
        Op::Unary(u) => {
            let x = a0().f32s()?;
            let f = unary_fn(*u);
            Ok(Tensor::f32(a0().shape(), x.iter().map(|&v| f(v)).collect()))
        }
        Op::Clamp { min, max } => {
            let x = a0().f32s()?;
            Ok(Tensor::f32(a0().shape(), x.iter().map(|&v| clamp(v, *min, *max)).collect()))
        }
        Op::Binary(b) => binary(*b, args[0], args[1]),
        Op::Reduce { op, axis } => {
            let shape = a0().shape();
            let x = a0().f32s()?;
            let outer: usize = shape[..*axis].iter().product();
            let len = shape[*axis];
            let inner: usize = shape[axis + 1..].iter().product();
            let mut out = vec![0f32; outer * inner];
            for o in 0..outer {
                for i in 0..inner {
                    let it = (0..len).map(|k| x[(o * len + k) * inner + i]);
                    out[o * inner + i] = match op {
                        ReduceOp::Sum => it.sum(),
                        ReduceOp::Max => it.fold(f32::NEG_INFINITY, f32::max),
                        ReduceOp::Mean => it.sum::<f32>() / len as f32,
                    };
                }
            }
            let mut s = shape;
            s[*axis] = 1;
            Ok(Tensor::f32(s, out))
        }
        Op::Softmax { axis, softcap } => {
            let shape = a0().shape();
            let x = a0().f32s()?;
            let len = shape[*axis];
            let inner: usize = shape[axis + 1..].iter().product();
            let outer: usize = shape[..*axis].iter().product();
            let mut out = x.to_vec();
            for o in 0..outer {
                for i in 0..inner {
                    let ix = |k: usize| (o * len + k) * inner + i;
                    let mut row: Vec<f32> = (0..len).map(|k| out[ix(k)]).collect();
                    softmax_in_place(&mut row, *softcap);
                    for (k, v) in row.into_iter().enumerate() {
                        out[ix(k)] = v;
                    }
                }
            }
            Ok(Tensor::f32(shape, out))
        }
        Op::Glu { act } => {
            // The arithmetic of `mul(act(gate), up)`, element by element.
            let (f, mul) = (unary_fn(*act), binary_fn(BinaryOp::Mul));
            let shape = a0().shape();
            let (gate, up) = (a0().f32s()?, args[1].f32s()?);
            Ok(Tensor::f32(shape, gate.iter().zip(up.iter()).map(|(&g, &u)| mul(f(g), u)).collect()))
        }
        Op::TopKMask { axis, k } => {
            let shape = a0().shape();
            let x = a0().f32s()?;
            let len = shape[*axis];
            let inner: usize = shape[axis + 1..].iter().product();
            let outer: usize = shape[..*axis].iter().product();
            let mut out = vec![0.0f32; x.len()];
            for o in 0..outer {
                for i in 0..inner {
                    let ix = |j: usize| (o * len + j) * inner + i;
                    // Order by value, largest first; equal values by index.
                    let mut order: Vec<usize> = (0..len).collect();
                    order.sort_by(|&a, &b| x[ix(b)].total_cmp(&x[ix(a)]).then(a.cmp(&b)));
                    for &j in order.iter().take(*k) {
                        out[ix(j)] = 1.0;
                    }
                }
            }
            Ok(Tensor::f32(shape, out))
        }
        Op::Cast { dtype } => {
            let t = dense(a0())?;
            Ok(match (t, dtype) {
                (Tensor::F32 { shape, data }, DType::I32) => Tensor::i32(shape, data.iter().map(|&v| v as i32).collect()),
                (Tensor::I32 { shape, data }, DType::F32) => Tensor::f32(shape, data.iter().map(|&v| v as f32).collect()),
                (t, d) if t.dtype() == *d => t,
                (t, d) => return Err(format!("cast from {} to {d} is not supported by the reference executor", t.dtype())),
            })
        }
        // The fused ops by their definitions: their parts, in order. An add
        // takes the new value first (IEEE addition is commutative, bit for
        // bit), as the fast backend forms it in place.
        Op::NormMatMul { eps } => {
            let normed = Val::T(eval(&Op::Norm { kind: NormKind::Rms, eps: *eps }, &args[..2], env)?);
            eval(&Op::MatMul, &[&normed, args[2]], env)
        }
        Op::NormMatMulGlu { act, eps } => {
            let normed = Val::T(eval(&Op::Norm { kind: NormKind::Rms, eps: *eps }, &args[..2], env)?);
            eval(&Op::MatMulGlu { act: *act }, &[&normed, args[2], args[3]], env)
        }
        Op::MatMulAdd => {
            let product = Val::T(eval(&Op::MatMul, &args[..2], env)?);
            eval(&Op::Binary(BinaryOp::Add), &[&product, args[2]], env)
        }
        Op::NormAdd { eps } => {
            let normed = Val::T(eval(&Op::Norm { kind: NormKind::Rms, eps: *eps }, &args[1..], env)?);
            eval(&Op::Binary(BinaryOp::Add), &[&normed, args[0]], env)
        }
        Op::MoeExperts { act, bias, alpha, limit } => {
            // Each expert by its definition on the rows routed to it.
            let (shape, x, weights) = (a0().shape(), a0().f32s()?, args[1].f32s()?);
            let d = *shape.last().unwrap();
            let per = if *bias { 6 } else { 3 };
            let n_experts = (args.len() - 2) / per;
            let expert = |e: usize, rows: &[f32], m: usize| -> Result<Vec<f32>, String> {
                let rows = Val::T(Tensor::f32(vec![m, d], rows.to_vec()));
                let w = |i: usize| args[2 + per * e + if *bias { 2 * i } else { i }];
                // A product, and its bias where the experts have them.
                let linear = |x: &Val, i: usize| -> Result<Val, String> {
                    let y = Val::T(eval(&Op::MatMul, &[x, w(i)], env)?);
                    Ok(match bias {
                        true => Val::T(eval(&Op::Binary(BinaryOp::Add), &[&y, args[3 + per * e + 2 * i]], env)?),
                        false => y,
                    })
                };
                let hidden = match (alpha, limit) {
                    (Some(alpha), Some(limit)) => {
                        let scalar = |v: f32| Val::T(Tensor::f32(vec![1], vec![v]));
                        let binary = |op: BinaryOp, a: &Val, b: &Val| eval(&Op::Binary(op), &[a, b], env).map(Val::T);
                        let g = Val::T(eval(&Op::Clamp { min: None, max: Some(*limit) }, &[&linear(&rows, 0)?], env)?);
                        let u = Val::T(eval(&Op::Clamp { min: Some(-limit), max: Some(*limit) }, &[&linear(&rows, 1)?], env)?);
                        let sig = Val::T(eval(&Op::Unary(*act), &[&binary(BinaryOp::Mul, &g, &scalar(*alpha))?], env)?);
                        binary(BinaryOp::Mul, &binary(BinaryOp::Add, &u, &scalar(1.0))?, &binary(BinaryOp::Mul, &g, &sig)?)?
                    }
                    _ => Val::T(eval(&Op::Glu { act: *act }, &[&linear(&rows, 0)?, &linear(&rows, 1)?], env)?),
                };
                Ok(linear(&hidden, 2)?.f32s()?.into_owned())
            };
            let (out, _) = crate::cpu::moe::routed_sum(&x, d, &weights, n_experts, |_| false, expert)?;
            Ok(Tensor::f32(shape, out))
        }
        Op::MatMulGlu { act } => {
            // Its definition: the two matmuls, then their glu.
            let gate = Val::T(eval(&Op::MatMul, &[args[0], args[1]], env)?);
            let up = Val::T(eval(&Op::MatMul, &[args[0], args[2]], env)?);
            eval(&Op::Glu { act: *act }, &[&gate, &up], env)
        }
        Op::MatMul => {
            let shape = a0().shape();
            let x = a0().f32s()?;
            let k = *shape.last().unwrap();
            let m = x.len() / k.max(1);
            let w_owned;
            let w = match args[1] {
                Val::W(w) => *w,
                Val::T(t) => {
                    w_owned = t.as_f32().ok_or("matmul rhs is i32")?.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
                    WeightRef { dtype: DType::F32, shape: t.shape(), bytes: &w_owned }
                }
            };
            let n = w.shape[0];
            let out = matmul_weight(&x, m, k, w);
            let mut s = shape;
            *s.last_mut().unwrap() = n;
            Ok(Tensor::f32(s, out))
        }
        Op::Dequantize => Ok(Tensor::f32(a0().shape(), a0().f32s()?.into_owned())),
        Op::Norm { kind, eps } => {
            let shape = a0().shape();
            let x = a0().f32s()?;
            let w = args[1].f32s()?;
            let bias = args.get(2).map(|b| b.f32s()).transpose()?;
            let d = *shape.last().unwrap();
            if w.len() != d || bias.as_ref().is_some_and(|b| b.len() != d) {
                return Err(format!("norm over rows of {d} with a weight of {} (bias {:?})", w.len(), bias.as_ref().map(|b| b.len())));
            }
            let mut out = vec![0f32; x.len()];
            norm_rows(*kind, *eps, &x, &w, bias.as_deref(), &mut out);
            Ok(Tensor::f32(shape, out))
        }
        Op::NormRope { eps, style, rotary_dim, theta, scaling } => {
            // By definition: the three ops it replaces, in order.
            let normed = eval(&Op::Norm { kind: NormKind::Rms, eps: *eps }, &args[..2], env)?;
            let heads_major = eval(&Op::Permute { perm: vec![0, 2, 1, 3] }, &[&Val::T(normed)], env)?;
            let rope = Op::Rope { style: *style, rotary_dim: *rotary_dim, theta: *theta, scaling: scaling.clone() };
            eval(&rope, &[&Val::T(heads_major), args[2]], env)
        }
        Op::Rope { style, rotary_dim, theta, scaling } => {
            let shape = a0().shape();
            let mut x = a0().f32s()?.into_owned();
            let pos = args[1].i32s()?;
            let (b, h, s, d) = (shape[0], shape[1], shape[2], shape[3]);
            let half = rotary_dim / 2;
            let inv_freq = scaling.inv_freq(*rotary_dim, *theta);
            let magnitude = scaling.magnitude();
            let mut angles = vec![(0f32, 0f32); half];
            for bi in 0..b {
                for hi in 0..h {
                    for si in 0..s {
                        rope_angles(scaling, &inv_freq, magnitude, pos[bi * s + si], &mut angles);
                        rotate_row(&mut x[((bi * h + hi) * s + si) * d..][..d], &angles, *style);
                    }
                }
            }
            Ok(Tensor::f32(shape, x))
        }
        Op::Attention { n_heads, n_kv_heads, scale, causal, window, softcap, ring, sinks } => {
            let (qs, ks, vs) = (args[0].shape(), args[1].shape(), args[2].shape());
            let (q, k, v) = (args[0].f32s()?, args[1].f32s()?, args[2].f32s()?);
            let pos = args[3].i32s()?;
            let sinks = if *sinks { Some(args[4].f32s()?) } else { None };
            let (b, s, d, t, dv) = (qs[0], qs[2], qs[3], ks[2], vs[3]);
            let group = n_heads / n_kv_heads;
            let rows: Vec<Vec<f32>> = (0..b * n_heads * s)
                .into_par_iter()
                .map(|r| {
                    let (bi, hi, si) = (r / (n_heads * s), (r / s) % n_heads, r % s);
                    let kh = hi / group;
                    let p = pos[bi * s + si] as i64;
                    let qrow = &q[r * d..(r + 1) * d];
                    let kbase = (bi * n_kv_heads + kh) * t;
                    let visible = |j: usize| {
                        let j = j as i64;
                        (!causal || j <= p) && window.is_none_or(|w| j > p - w as i64)
                    };
                    // A ring holds position `x` in row `x % t`: read the
                    // window's positions in order (the order a full cache
                    // has them in, so the sums are the same).
                    let js: Vec<usize> = match window {
                        Some(w) if *ring => {
                            let lo = (p - *w as i64 + 1).max(0);
                            (lo..=p).map(|x| x as usize % t).collect()
                        }
                        _ => (0..t).filter(|&j| visible(j)).collect(),
                    };
                    let mut scores: Vec<f32> = js.iter().map(|&j| dot(qrow, &k[(kbase + j) * d..(kbase + j + 1) * d]) * scale).collect();
                    softmax_with_sink(&mut scores, *softcap, sinks.as_ref().map(|s| s[hi]));
                    let mut o = vec![0f32; dv];
                    for (&j, &p) in js.iter().zip(&scores) {
                        let vrow = &v[(kbase + j) * dv..(kbase + j + 1) * dv];
                        for (oi, vi) in o.iter_mut().zip(vrow) {
                            *oi += p * vi;
                        }
                    }
                    o
                })
                .collect();
            Ok(Tensor::f32(vec![b, *n_heads, s, dv], rows.concat()))
        }
        Op::SparseMixer { jitter_eps } => {
            let shape = a0().shape().to_vec();
            let e = *shape.last().unwrap();
            let mut out = a0().f32s()?.into_owned();
            for row in out.chunks_exact_mut(e) {
                let w = sparse_mixer(row, *jitter_eps);
                row.copy_from_slice(&w);
            }
            Ok(Tensor::f32(shape, out))
        }
        Op::CausalConv1d { kernel } => {
            let (xs, x, w, state) = (a0().shape(), a0().f32s()?, args[1].f32s()?, args[2].f32s()?);
            let lengths = args[3].i32s()?;
            let (b, s, c, taps) = (xs[0], xs[1], xs[2], *kernel);
            let keep = taps - 1;
            let mut out = vec![0f32; b * (s + keep) * c];
            for bi in 0..b {
                let n = row_length(lengths, bi, s)?;
                // Row `r` of concat(state, x) for this batch row.
                let xc = |r: usize| -> &[f32] {
                    if r < keep {
                        &state[(bi * keep + r) * c..][..c]
                    } else {
                        &x[(bi * s + r - keep) * c..][..c]
                    }
                };
                for t in 0..s {
                    let o = &mut out[(bi * (s + keep) + t) * c..][..c];
                    for j in 0..taps {
                        for (ch, (o, xv)) in o.iter_mut().zip(xc(t + j)).enumerate() {
                            *o += w[ch * taps + j] * xv;
                        }
                    }
                }
                for i in 0..keep {
                    out[(bi * (s + keep) + s + i) * c..][..c].copy_from_slice(xc(n + i));
                }
            }
            Ok(Tensor::f32(vec![b, s + keep, c], out))
        }
        Op::GatedDeltaRule => {
            let (qs, vs) = (a0().shape(), args[2].shape());
            let (q, k, v, g, beta, state) = (a0().f32s()?, args[1].f32s()?, args[2].f32s()?, args[3].f32s()?, args[4].f32s()?, args[5].f32s()?);
            let lengths = args[6].i32s()?;
            let (b, hk, s, dk, hv, dv) = (qs[0], qs[1], qs[2], qs[3], vs[1], vs[3]);
            let group = hv / hk;
            let mut out = vec![0f32; b * hv * (s + dk) * dv];
            for bi in 0..b {
                let n = row_length(lengths, bi, s)?;
                for h in 0..hv {
                    let kh = h / group;
                    let mut st = state[(bi * hv + h) * dk * dv..][..dk * dv].to_vec();
                    let base = (bi * hv + h) * (s + dk) * dv;
                    for t in 0..n {
                        let qt = &q[((bi * hk + kh) * s + t) * dk..][..dk];
                        let kt = &k[((bi * hk + kh) * s + t) * dk..][..dk];
                        let vt = &v[((bi * hv + h) * s + t) * dv..][..dv];
                        let gt = g[(bi * hv + h) * s + t].exp();
                        let bt = beta[(bi * hv + h) * s + t];
                        st.iter_mut().for_each(|x| *x *= gt);
                        let mut delta = vec![0f32; dv];
                        for (i, &ki) in kt.iter().enumerate() {
                            for (dj, sj) in delta.iter_mut().zip(&st[i * dv..(i + 1) * dv]) {
                                *dj += sj * ki;
                            }
                        }
                        for (dj, vj) in delta.iter_mut().zip(vt) {
                            *dj = (vj - *dj) * bt;
                        }
                        for (i, &ki) in kt.iter().enumerate() {
                            for (sj, dj) in st[i * dv..(i + 1) * dv].iter_mut().zip(&delta) {
                                *sj += ki * dj;
                            }
                        }
                        let o = &mut out[base + t * dv..][..dv];
                        for (i, &qi) in qt.iter().enumerate() {
                            for (oj, sj) in o.iter_mut().zip(&st[i * dv..(i + 1) * dv]) {
                                *oj += sj * qi;
                            }
                        }
                    }
                    out[base + s * dv..][..dk * dv].copy_from_slice(&st);
                }
            }
            Ok(Tensor::f32(vec![b, hv, s + dk, dv], out))
        }
        Op::KvAppend { .. } => unreachable!("kv_append runs in place in run()"),
        Op::QkvRope { .. }
        | Op::AddNorm { .. }
        | Op::Chain { .. }
        | Op::Result { .. }
        | Op::AttentionProject { .. }
        | Op::NormRopeAttention { .. }
        | Op::AddPartials { .. } => Err(format!("`{}` is run by the run loop itself (cpu::parts), not by an evaluator", op.mnemonic())),
        Op::Input { .. } | Op::Weight { .. } | Op::State { .. } => unreachable!("sources are bound in run()"),
        Op::StateOut { .. } | Op::Output { .. } => unreachable!("sinks are collected in run()"),
    }
}

/// `Norm` over each `w.len()`-long row of `x` into `out`: the definition
/// (the caller checks that `w` and `bias` match the rows).
/// The `(sin, cos)` of each rotary feature pair at position `pos`, scaled
/// by `magnitude` (HF scales cos and sin themselves: LongRoPE's attention
/// factor). Every backend's rope computes its angles here.
pub(crate) fn rope_angles(scaling: &RopeScaling, inv_freq: &[f32], magnitude: f32, pos: i32, out: &mut [(f32, f32)]) {
    let p = scaling.position(pos);
    for (a, &freq) in out.iter_mut().zip(inv_freq) {
        let (sin, cos) = (p * freq).sin_cos();
        *a = (sin * magnitude, cos * magnitude);
    }
}

/// Turn each feature pair of one head's `row` by its angle (`angles` from
/// `rope_angles`); features past the pairs pass through.
pub(crate) fn rotate_row(row: &mut [f32], angles: &[(f32, f32)], style: RopeStyle) {
    // Each pair as `(x0 cos - x1 sin, x0 sin + x1 cos)`; the pairs walked
    // as slices, not by index, so that the loop has no bounds checks and
    // the compiler may vectorize it (the same operations on every lane).
    let rotate = |x0: &mut f32, x1: &mut f32, (sin, cos): (f32, f32)| {
        let (a, b) = (*x0, *x1);
        *x0 = a * cos - b * sin;
        *x1 = a * sin + b * cos;
    };
    let half = angles.len();
    match style {
        RopeStyle::GptJ => {
            for (pair, &angle) in row[..2 * half].chunks_exact_mut(2).zip(angles) {
                let [x0, x1] = pair else { unreachable!("chunks of 2") };
                rotate(x0, x1, angle);
            }
        }
        RopeStyle::Neox => {
            let (first, second) = row[..2 * half].split_at_mut(half);
            for ((x0, x1), &angle) in first.iter_mut().zip(second.iter_mut()).zip(angles) {
                rotate(x0, x1, angle);
            }
        }
    }
}

pub(crate) fn norm_rows(kind: NormKind, eps: f32, x: &[f32], w: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    let d = w.len();
    let rows: Vec<&[f32]> = x.chunks_exact(d).collect();
    match kind {
        NormKind::Rms => {
            let sums = row_sums(&rows, |_, v| (v as f64) * (v as f64));
            for ((o, row), sum) in out.chunks_exact_mut(d).zip(&rows).zip(sums) {
                rms_normalize(row, w, rms_scale(sum, d, eps), o);
            }
        }
        NormKind::Layer => {
            let means: Vec<f64> = row_sums(&rows, |_, v| v as f64).into_iter().map(|s| s / d as f64).collect();
            let vars = row_sums(&rows, |r, v| (v as f64 - means[r]).powi(2));
            for (((o, row), mean), var) in out.chunks_exact_mut(d).zip(&rows).zip(&means).zip(vars) {
                let r = 1.0 / (((var / d as f64) as f32) + eps).sqrt();
                for i in 0..d {
                    o[i] = (row[i] - *mean as f32) * r * w[i] + bias.map_or(0.0, |b| b[i]);
                }
            }
        }
    }
}

/// RMSNorm's `1 / sqrt(mean(x²) + eps)` from a row's f64 sum of squares.
pub(crate) fn rms_scale(sum_of_squares: f64, d: usize, eps: f32) -> f32 {
    let ms = sum_of_squares / d as f64;
    1.0 / ((ms as f32) + eps).sqrt()
}

/// `out = w · (row · r)`: RMSNorm's row, scaled by `r` (`rms_scale`).
pub(crate) fn rms_normalize(row: &[f32], w: &[f32], r: f32, out: &mut [f32]) {
    for ((o, &v), &w) in out.iter_mut().zip(row).zip(w) {
        *o = w * (v * r);
    }
}

/// Rows whose sums `row_sums` runs side by side.
const INTERLEAVED_ROWS: usize = 8;

/// `Σ_j term(r, row_r[j])` in f64 for each row `r`, each one sequential
/// sum in element order from `-0.0`: the bits of
/// `row.iter().map(..).sum::<f64>()`. Why not that: one row's sum is a
/// chain of dependent adds, an add latency per element, and the norms
/// waited on it (5 cycles an element). Eight rows' chains interleaved keep
/// the adder busy instead; no row's order of additions changes.
pub(crate) fn row_sums(rows: &[&[f32]], term: impl Fn(usize, f32) -> f64) -> Vec<f64> {
    let mut sums = Vec::with_capacity(rows.len());
    for (g, group) in rows.chunks(INTERLEAVED_ROWS).enumerate() {
        let d = group[0].len();
        assert!(group.iter().all(|r| r.len() == d), "rows of one length");
        let first = g * INTERLEAVED_ROWS;
        let mut s = [-0.0f64; INTERLEAVED_ROWS];
        for j in 0..d {
            for (r, row) in group.iter().enumerate() {
                s[r] += term(first + r, row[j]);
            }
        }
        sums.extend_from_slice(&s[..group.len()]);
    }
    sums
}

pub(crate) fn unary_fn(u: UnaryOp) -> fn(f32) -> f32 {
    match u {
        UnaryOp::Neg => |x| -x,
        UnaryOp::Exp => f32::exp,
        UnaryOp::Sqrt => f32::sqrt,
        UnaryOp::Rsqrt => |x| 1.0 / x.sqrt(),
        UnaryOp::Recip => |x| 1.0 / x,
        UnaryOp::Tanh => f32::tanh,
        UnaryOp::Sigmoid => |x| 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Silu => |x| x / (1.0 + (-x).exp()),
        UnaryOp::GeluTanh => |x| {
            let c = (2.0f32 / std::f32::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        },
        UnaryOp::GeluErf => |x| 0.5 * x * (1.0 + erf(x as f64 / std::f64::consts::SQRT_2) as f32),
        UnaryOp::Softplus => |x| if x > 20.0 { x } else { x.exp().ln_1p() },
    }
}

/// Numerically stable softmax, with optional `c * tanh(x / c)` soft-capping.
pub fn softmax_in_place(row: &mut [f32], softcap: Option<f32>) {
    softmax_with_sink(row, softcap, None)
}

/// `softmax_in_place` with an attention sink where there is one: `sink`
/// joins the max and the denominator after the scores' soft cap (gpt-oss:
/// a learned logit per head, concatenated to the scores, softmaxed, then
/// dropped).
pub fn softmax_with_sink(row: &mut [f32], softcap: Option<f32>, sink: Option<f32>) {
    if let Some(c) = softcap {
        for v in row.iter_mut() {
            *v = c * (*v / c).tanh();
        }
    }
    let m = row.iter().copied().fold(sink.unwrap_or(f32::NEG_INFINITY), f32::max);
    let mut sum = 0f32;
    for v in row.iter_mut() {
        *v = (*v - m).exp();
        sum += *v;
    }
    if let Some(sink) = sink {
        sum += (sink - m).exp();
    }
    for v in row.iter_mut() {
        *v /= sum;
    }
}

/// `clamp{min, max}` of one value (a bound left out does not clamp).
pub(crate) fn clamp(v: f32, min: Option<f32>, max: Option<f32>) -> f32 {
    v.max(min.unwrap_or(f32::NEG_INFINITY)).min(max.unwrap_or(f32::INFINITY))
}

pub(crate) fn binary_fn(op: BinaryOp) -> fn(f32, f32) -> f32 {
    match op {
        BinaryOp::Add => |x, y| x + y,
        BinaryOp::Sub => |x, y| x - y,
        BinaryOp::Mul => |x, y| x * y,
        BinaryOp::Div => |x, y| x / y,
        BinaryOp::Max => f32::max,
        BinaryOp::Min => f32::min,
    }
}

fn binary(op: BinaryOp, a: &Val, b: &Val) -> Result<Tensor, String> {
    let (sa, sb) = (a.shape(), b.shape());
    let (xa, xb) = (a.f32s()?, b.f32s()?);
    let f = binary_fn(op);
    if sa == sb {
        return Ok(Tensor::f32(sa, xa.iter().zip(xb.iter()).map(|(&x, &y)| f(x, y)).collect()));
    }
    let n = sa.len().max(sb.len());
    let pad = |s: &[usize]| {
        let mut p = vec![1; n - s.len()];
        p.extend_from_slice(s);
        p
    };
    let (pa, pb) = (pad(&sa), pad(&sb));
    let out_shape: Vec<usize> = pa.iter().zip(&pb).map(|(&x, &y)| x.max(y)).collect();
    let bstr = |p: &[usize]| {
        let st = strides(p);
        st.iter().zip(p).map(|(&s, &d)| if d == 1 { 0 } else { s }).collect::<Vec<_>>()
    };
    let (ta, tb) = (bstr(&pa), bstr(&pb));
    let total: usize = out_shape.iter().product();
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0usize; n];
    for _ in 0..total {
        let ia: usize = idx.iter().zip(&ta).map(|(i, s)| i * s).sum();
        let ib: usize = idx.iter().zip(&tb).map(|(i, s)| i * s).sum();
        out.push(f(xa[ia], xb[ib]));
        for ax in (0..n).rev() {
            idx[ax] += 1;
            if idx[ax] < out_shape[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    Ok(Tensor::f32(out_shape, out))
}

/// erf to double precision (Abramowitz–Stegun 7.1.26 is too coarse for a
/// reference; this is the W. J. Cody rational form via libm-free series).
fn erf(x: f64) -> f64 {
    // erf(x) = 2/sqrt(pi) * sum_{n} (-1)^n x^(2n+1) / (n! (2n+1)) for |x| < 3,
    // and 1 - erfc(x) from its continued fraction beyond.
    let ax = x.abs();
    let r = if ax < 3.0 {
        let mut term = ax;
        let mut sum = ax;
        let x2 = ax * ax;
        for n in 1..200 {
            term *= -x2 / n as f64;
            let add = term / (2 * n + 1) as f64;
            sum += add;
            if add.abs() < 1e-17 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // Continued fraction for erfc, evaluated bottom-up.
        let mut f = ax;
        for k in (1..60).rev() {
            f = ax + (k as f64 / 2.0) / f;
        }
        1.0 - (-ax * ax).exp() / (f * std::f64::consts::PI.sqrt())
    };
    if x < 0.0 {
        -r
    } else {
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `norm_rows` as one row at a time, each sum by `Iterator::sum`: the
    /// arithmetic `row_sums` must reproduce bit for bit.
    fn norm_rows_one_by_one(kind: NormKind, eps: f32, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
        let d = w.len();
        let mut out = vec![0f32; x.len()];
        for (o, row) in out.chunks_exact_mut(d).zip(x.chunks_exact(d)) {
            match kind {
                NormKind::Rms => {
                    let ms = row.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / d as f64;
                    let r = 1.0 / ((ms as f32) + eps).sqrt();
                    (0..d).for_each(|i| o[i] = w[i] * (row[i] * r));
                }
                NormKind::Layer => {
                    let mean = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
                    let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
                    let r = 1.0 / ((var as f32) + eps).sqrt();
                    (0..d).for_each(|i| o[i] = (row[i] - mean as f32) * r * w[i] + bias.map_or(0.0, |b| b[i]));
                }
            }
        }
        out
    }

    /// 19 rows (two groups of 8 and a short one) whose sums depend on their
    /// order: magnitudes from 1e-8 to 1e8 in one row, so summing in another
    /// order (pairwise, reversed) changes the bits; one row of negative
    /// zeros, whose mean keeps its sign only from a `-0.0` start.
    #[test]
    fn interleaved_row_sums_give_the_one_row_at_a_time_bits() {
        let d = 77;
        let mut seed = 0x9E3779B97F4A7C15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut x: Vec<f32> = (0..19 * d).map(|_| ((next() % 2000) as f32 - 1000.0) * 10f32.powi((next() % 17) as i32 - 8)).collect();
        x[5 * d..6 * d].fill(-0.0);
        let w: Vec<f32> = (0..d).map(|i| 0.5 + i as f32 / d as f32).collect();
        let bias: Vec<f32> = (0..d).map(|i| if i % 3 == 0 { -0.0 } else { i as f32 * 0.01 }).collect();
        for (kind, bias) in [(NormKind::Rms, None), (NormKind::Layer, Some(&bias[..]))] {
            let want = norm_rows_one_by_one(kind, 1e-6, &x, &w, bias);
            let mut got = vec![0f32; x.len()];
            norm_rows(kind, 1e-6, &x, &w, bias, &mut got);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert!(bits(&got) == bits(&want), "{kind:?}: interleaved sums changed a bit");
        }
        // The f64 sums themselves (the norms' f32 rounding hides most
        // orders), against `Iterator::sum`; the control: the same rows
        // summed pairwise differ somewhere.
        let rows: Vec<&[f32]> = x.chunks_exact(d).collect();
        let sequential = row_sums(&rows, |_, v| v as f64);
        let by_iter: Vec<f64> = rows.iter().map(|r| r.iter().map(|&v| v as f64).sum::<f64>()).collect();
        assert!(sequential.iter().zip(&by_iter).all(|(a, b)| a.to_bits() == b.to_bits()), "row_sums is not the sequential sum");
        let pairwise: Vec<f64> = rows.iter().map(|r| r.chunks(2).map(|p| p.iter().map(|&v| v as f64).sum::<f64>()).sum()).collect();
        assert!(sequential.iter().zip(&pairwise).any(|(a, b)| a.to_bits() != b.to_bits()), "the input must separate summation orders");
    }

    /// `rotate_row` walks its pairs as slices; the rotation is still the
    /// indexed definition's, bit for bit: both styles, full and partial
    /// rotary (the rows' tails untouched). The control: rotating the halves
    /// of a gpt-j row (the other style) changes it.
    #[test]
    fn rotate_row_is_the_indexed_rotation() {
        fn indexed(row: &mut [f32], angles: &[(f32, f32)], style: RopeStyle) {
            let half = angles.len();
            for (i, &(sin, cos)) in angles.iter().enumerate() {
                let (i0, i1) = match style {
                    RopeStyle::GptJ => (2 * i, 2 * i + 1),
                    RopeStyle::Neox => (i, i + half),
                };
                let (x0, x1) = (row[i0], row[i1]);
                row[i0] = x0 * cos - x1 * sin;
                row[i1] = x0 * sin + x1 * cos;
            }
        }
        let d = 64;
        let row: Vec<f32> = (0..d).map(|i| (i as f32 * 0.731).sin() * 3.0).collect();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for rotary in [d, d / 2] {
            let angles: Vec<(f32, f32)> = (0..rotary / 2).map(|i| ((i as f32 * 0.37).sin(), (i as f32 * 0.37).cos())).collect();
            for style in [RopeStyle::GptJ, RopeStyle::Neox] {
                let (mut got, mut want) = (row.clone(), row.clone());
                rotate_row(&mut got, &angles, style);
                indexed(&mut want, &angles, style);
                assert!(bits(&got) == bits(&want), "{style:?} rotary {rotary}");
                assert!(got[rotary..] == row[rotary..], "the rotary tail is untouched");
            }
            let (mut gptj, mut neox) = (row.clone(), row.clone());
            rotate_row(&mut gptj, &angles, RopeStyle::GptJ);
            rotate_row(&mut neox, &angles, RopeStyle::Neox);
            assert!(bits(&gptj) != bits(&neox), "the styles must be told apart");
        }
    }
}
