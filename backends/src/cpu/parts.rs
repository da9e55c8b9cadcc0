//! The GPU plans' structural fusions (ops with further results, and
//! elementwise chains), run on the CPU as the ops they are defined as, each
//! through the executor's own `eval`: the same kernels in the same order,
//! hence the bits of the graph the optimizer started from. On the CPU the
//! fused form saves no pass over memory (its parts are the passes), so only
//! GPU plans form these ops; the CPU runs them for plans made elsewhere and
//! for checking the GPU against the reference.

use super::eval::{dense, Arg, Env, Evaluator, Val};
use crate::tensor::Tensor;
use graphc_ir::shape::const_shape;
use graphc_ir::{BinaryOp, ChainExpr, Op};

/// Whether the run loop runs `op` as its parts (`results`).
pub fn runs_as_parts(op: &Op) -> bool {
    op.results() > 1 || matches!(op, Op::Chain { .. } | Op::AttentionProject { .. } | Op::AddPartials { .. })
}

/// Every result of `op`, an op that runs as its parts (`runs_as_parts`).
pub fn results(evaluator: &dyn Evaluator, op: &Op, args: Vec<Arg<'_, '_>>, env: &Env) -> Result<Vec<Tensor>, String> {
    match op {
        Op::Chain { expr } => {
            let operands: Vec<&Val> = args.iter().map(|a| a.val()).collect();
            Ok(vec![chain(evaluator, expr, &operands, env)?])
        }
        Op::QkvRope { .. } => qkv_rope(evaluator, op, args, env),
        Op::AttentionProject { .. } => Ok(vec![attention_project(evaluator, op, args, env)?]),
        Op::NormRopeAttention { .. } => norm_rope_attention(evaluator, op, args, env),
        &Op::AddPartials { eps } => Ok(vec![add_partials(evaluator, eps, args, env)?]),
        Op::AddNorm { kind, eps } => {
            // The sum, then its norm (the sum is kept: result 1).
            let mut args = args.into_iter();
            let (a, b) = (args.next().expect("a"), args.next().expect("b"));
            let sum = evaluator.eval(&Op::Binary(BinaryOp::Add), vec![a, b], env)?;
            let sum = Val::T(sum);
            let mut norm_args = vec![Arg::Ref(&sum)];
            norm_args.extend(args);
            let normed = evaluator.eval(&Op::Norm { kind: *kind, eps: *eps }, norm_args, env)?;
            let Val::T(sum) = sum else { unreachable!("a tensor") };
            Ok(vec![normed, sum])
        }
        _ => Err(format!("{} is not run as its parts", op.mnemonic())),
    }
}

/// A chain's expression, each op through `eval`: an operand borrowed, an
/// inner op's value handed over (its only reader, as in the unfused graph).
fn chain<'v, 'w>(evaluator: &dyn Evaluator, expr: &ChainExpr, operands: &[&'v Val<'w>], env: &Env) -> Result<Tensor, String> {
    let step = |e: &ChainExpr| -> Result<Arg<'v, 'w>, String> {
        Ok(match e {
            ChainExpr::Input(i) => Arg::Ref(operands[*i]),
            inner => Arg::Own(Val::T(chain(evaluator, inner, operands, env)?)),
        })
    };
    match expr {
        ChainExpr::Input(i) => dense(operands[*i]),
        ChainExpr::Unary(u, a) => evaluator.eval(&Op::Unary(*u), vec![step(a)?], env),
        ChainExpr::Binary(b, x, y) => evaluator.eval(&Op::Binary(*b), vec![step(x)?, step(y)?], env),
    }
}

/// `qkv_rope` as its definition in `Op::QkvRope`: each projection, its
/// split into heads, the rotations, and the appends into the caches (in
/// place where the run loop handed the cache over).
fn qkv_rope(evaluator: &dyn Evaluator, op: &Op, args: Vec<Arg<'_, '_>>, env: &Env) -> Result<Vec<Tensor>, String> {
    let Op::QkvRope { eps, bias, style, rotary_dim, theta, scaling, cap, window } = op else { unreachable!("matched by `results`") };
    let mut args: Vec<Option<Arg>> = args.into_iter().map(Some).collect();
    let mut take = |i: usize| args[i].take().expect("each operand taken once");
    let (x, w_q, w_k, w_v, positions) = (take(0), take(1), take(2), take(3), take(4));
    let (k_cache, v_cache, lengths) = (take(5), take(6), take(7));
    let norm_weight = eps.map(|_| take(8));
    let bias_at = 8 + usize::from(eps.is_some());
    let [b_q, b_k, b_v] = [0, 1, 2].map(|i| bias.then(|| take(bias_at + i)));
    let own = |t: Tensor| Arg::Own(Val::T(t));
    let heads = |w: &Arg<'_, '_>, b: &Option<Arg<'_, '_>>, head_dim: usize| -> Result<Tensor, String> {
        let projected = match (eps, &norm_weight) {
            (Some(eps), Some(g)) => {
                evaluator.eval(&Op::NormMatMul { eps: *eps }, vec![Arg::Ref(x.val()), Arg::Ref(g.val()), Arg::Ref(w.val())], env)?
            }
            _ => evaluator.eval(&Op::MatMul, vec![Arg::Ref(x.val()), Arg::Ref(w.val())], env)?,
        };
        let projected = match b {
            Some(b) => evaluator.eval(&Op::Binary(BinaryOp::Add), vec![own(projected), Arg::Ref(b.val())], env)?,
            None => projected,
        };
        let &[b, s, n] = projected.shape() else { return Err(format!("qkv_rope: a projection of shape {:?}", projected.shape())) };
        let split = Op::Reshape { shape: const_shape(&[b, s, n / head_dim, head_dim]) };
        let split = evaluator.eval(&split, vec![own(projected)], env)?;
        evaluator.eval(&Op::Permute { perm: vec![0, 2, 1, 3] }, vec![own(split)], env)
    };
    let rope = Op::Rope { style: *style, rotary_dim: *rotary_dim, theta: *theta, scaling: scaling.clone() };
    let append = Op::KvAppend { axis: 2, cap: cap.clone(), window: *window };
    let (head_dim, v_head_dim) = (k_cache.val().shape()[3], v_cache.val().shape()[3]);
    let q = evaluator.eval(&rope, vec![own(heads(&w_q, &b_q, head_dim)?), Arg::Ref(positions.val())], env)?;
    let k = evaluator.eval(&rope, vec![own(heads(&w_k, &b_k, head_dim)?), Arg::Ref(positions.val())], env)?;
    let k_cache = evaluator.eval(&append, vec![k_cache, own(k), Arg::Ref(lengths.val())], env)?;
    let v = heads(&w_v, &b_v, v_head_dim)?;
    let v_cache = evaluator.eval(&append, vec![v_cache, own(v), Arg::Ref(lengths.val())], env)?;
    Ok(vec![q, k_cache, v_cache])
}

/// `norm_rope_attention` as its definition in `Op::NormRopeAttention`: q
/// and k normed and rotated, k and v appended to their caches (in place
/// where the run loop handed the cache over), then the attention over
/// them projected by head.
fn norm_rope_attention(evaluator: &dyn Evaluator, op: &Op, args: Vec<Arg<'_, '_>>, env: &Env) -> Result<Vec<Tensor>, String> {
    let Op::NormRopeAttention { eps, style, rotary_dim, theta, scaling, n_heads, n_kv_heads, scale, causal, window, softcap, ring, cap } = op.clone()
    else {
        unreachable!("matched by `results`")
    };
    let mut args: Vec<Option<Arg>> = args.into_iter().map(Some).collect();
    if args.len() != 10 {
        return Err(format!("norm_rope_attention of {} operands (10)", args.len()));
    }
    let mut take = |i: usize| args[i].take().expect("each operand taken once");
    let (q, k, v, g_q, g_k, positions) = (take(0), take(1), take(2), take(3), take(4), take(5));
    let (k_cache, v_cache, lengths, w) = (take(6), take(7), take(8), take(9));
    let norm_rope = Op::NormRope { eps, style, rotary_dim, theta, scaling };
    let q = evaluator.eval(&norm_rope, vec![q, g_q, Arg::Ref(positions.val())], env)?;
    let k = evaluator.eval(&norm_rope, vec![k, g_k, Arg::Ref(positions.val())], env)?;
    let append = Op::KvAppend { axis: 2, cap, window: window.filter(|_| ring) };
    let k_cache = evaluator.eval(&append, vec![k_cache, Arg::Own(Val::T(k)), Arg::Ref(lengths.val())], env)?;
    let v_cache = evaluator.eval(&append, vec![v_cache, v, Arg::Ref(lengths.val())], env)?;
    let (k_cache, v_cache) = (Val::T(k_cache), Val::T(v_cache));
    let project = Op::AttentionProject { n_heads, n_kv_heads, scale, causal, window, softcap, ring };
    let project_args = vec![Arg::Own(Val::T(q)), Arg::Ref(&k_cache), Arg::Ref(&v_cache), positions, w];
    let shares = attention_project(evaluator, &project, project_args, env)?;
    let (Val::T(k_cache), Val::T(v_cache)) = (k_cache, v_cache) else { unreachable!("tensors") };
    Ok(vec![shares, k_cache, v_cache])
}

/// `attention_project` as its definition in `Op::AttentionProject`: the
/// attention, its heads side by side in each row, and each head's share
/// of the projection as `matmul` of the row with the other heads' features
/// zeroed.
fn attention_project(evaluator: &dyn Evaluator, op: &Op, args: Vec<Arg<'_, '_>>, env: &Env) -> Result<Tensor, String> {
    let &Op::AttentionProject { n_heads, n_kv_heads, scale, causal, window, softcap, ring } = op else { unreachable!("matched by `results`") };
    let mut args = args.into_iter();
    let attention_args: Vec<Arg> = args.by_ref().take(4).collect();
    let w = args.next().ok_or("attention_project: no weight")?;
    let attention = Op::Attention { n_heads, n_kv_heads, scale, causal, window, softcap, ring, sinks: false };
    let a = evaluator.eval(&attention, attention_args, env)?;
    let a = evaluator.eval(&Op::Permute { perm: vec![0, 2, 1, 3] }, vec![Arg::Own(Val::T(a))], env)?;
    let &[b, s, h, dv] = a.shape() else { return Err(format!("attention_project: an attention of shape {:?}", a.shape())) };
    let values = a.as_f32().ok_or("attention_project: an i32 attention")?;
    let rows = b * s;
    let mut out: Option<(usize, Vec<f32>)> = None;
    for head in 0..h {
        // Every row's features of `head` only.
        let mut masked = vec![0f32; rows * h * dv];
        for r in 0..rows {
            let at = (r * h + head) * dv;
            masked[at..at + dv].copy_from_slice(&values[at..at + dv]);
        }
        let share = evaluator.eval(&Op::MatMul, vec![Arg::Own(Val::T(Tensor::f32(vec![b, s, h * dv], masked))), Arg::Ref(w.val())], env)?;
        let n = *share.shape().last().expect("a matmul's rows");
        let share = share.as_f32().ok_or("attention_project: an i32 product")?;
        let (_, all) = out.get_or_insert_with(|| (n, vec![0f32; rows * h * n]));
        for r in 0..rows {
            all[(r * h + head) * n..][..n].copy_from_slice(&share[r * n..][..n]);
        }
    }
    let (n, all) = out.ok_or("attention_project of no heads")?;
    Ok(Tensor::f32(vec![b, s, h, n], all))
}

/// `add_partials` as its definition in `Op::AddPartials`: each row's
/// shares summed left to right from 0, then added to the residual (`add`),
/// or with `eps` through the post-norm (`norm_add`).
fn add_partials(evaluator: &dyn Evaluator, eps: Option<f32>, args: Vec<Arg<'_, '_>>, env: &Env) -> Result<Tensor, String> {
    let operands = args.len();
    let mut args = args.into_iter();
    let (Some(r), Some(p)) = (args.next(), args.next()) else { return Err(format!("add_partials of {operands} operands")) };
    let sum = Arg::Own(Val::T(sum_of_shares(&dense(p.val())?)?));
    match eps {
        Some(eps) => {
            let weight = args.next().ok_or("add_partials: no post-norm weight")?;
            evaluator.eval(&Op::NormAdd { eps }, vec![r, sum, weight], env)
        }
        None => evaluator.eval(&Op::Binary(BinaryOp::Add), vec![r, sum], env),
    }
}

/// The shares `p [.., h, n]` of each row summed left to right from 0: `[.., n]`.
fn sum_of_shares(p: &Tensor) -> Result<Tensor, String> {
    let shape = p.shape();
    let (&n, lead) = shape.split_last().ok_or("add_partials: scalar shares")?;
    let (&h, lead) = lead.split_last().ok_or("add_partials: shares without heads")?;
    let ps = p.as_f32().ok_or("add_partials: i32 shares")?;
    let rows: usize = lead.iter().product();
    let sums = (0..rows)
        .flat_map(|row| {
            (0..n).map(move |j| {
                let mut sum = 0f32;
                for head in 0..h {
                    sum += ps[(row * h + head) * n + j];
                }
                sum
            })
        })
        .collect();
    let mut out_shape = lead.to_vec();
    out_shape.push(n);
    Ok(Tensor::f32(out_shape, sums))
}
