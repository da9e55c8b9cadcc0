//! The fast CPU backend: the same graph, run by the shared loop
//! (`cpu::exec`), with the ops that cost time replaced by fused, SIMD,
//! multithreaded kernels; everything else is the reference definition.
//!
//! | op | kernel |
//! |---|---|
//! | `matmul` on a checkpoint weight | dequantize-into-matmul (`matmul`), every GGUF block type, f16, f32; four weight rows per pass over the activations where the ISA has it (`matmul_rows4`) |
//! | `attention` | over the cache in place, visible rows only, GQA native (`attention`) |
//! | `rope` | sin/cos once per (row, position), shared by every head; in place |
//! | `norm_rope` | q/k norm, heads-major transpose and rope in one pass per row |
//! | `reshape`, layout-preserving `permute` | no copy: the buffer is moved |
//! | elementwise `unary` / same-shape `binary` | in place on the operand that dies here, split across threads |
//! | `norm` | rows across threads, each by the reference's arithmetic (bit-identical) |
//! | `kv_append` | in place into the cache (as the reference) |
//! | `moe_experts` | each expert on the rows routed to it, gathered (`cpu::moe`), its products on the dense form's path |
//!
//! Precision contract (DESIGN.md): activations and accumulation are f32,
//! weights are dequantized on the fly; nothing is quantized to 8 bits.
//! `Fast::kernel_counts` says how often each fast kernel ran, so a test can
//! assert that a fast path engaged rather than silently falling back.

pub mod attention;
pub mod matmul;

use crate::cpu::exec::{self, Arg, Env, Evaluator, ExecError, StepOutput, Val};
use crate::cpu::pool::{for_each_chunk_mut, SpinPool};

/// Elements per task of the elementwise kernels (small tensors run as one task).
const ELEMENTWISE_CHUNK: usize = 1 << 14;
use crate::cpu::reference::{self, eval_dim};
use crate::cpu::simd::{self, Isa};
use crate::tensor::{Tensor, WeightRef, WeightSource};
use graphc_ir::op::{Op, RopeScaling, RopeStyle};
use graphc_ir::Graph;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The fast evaluator at one instruction-set level, with its threads.
pub struct Fast {
    pub isa: Isa,
    pool: SpinPool,
    /// The reference definition's threads, for ops without a fast kernel:
    /// the caller's thread runs the schedule, so `--threads` must reach
    /// the fallback's rayon loops through a pool of their own.
    fallback: rayon::ThreadPool,
    counts: Mutex<BTreeMap<&'static str, AtomicU64>>,
    /// Per batch row, how many of its leading tokens anyone reads this
    /// step; empty = all of them. See `set_row_lengths`.
    row_lengths: Mutex<Vec<usize>>,
}

impl Fast {
    /// Kernels for `isa` on `threads` threads; an error when this CPU cannot run them.
    pub fn new(isa: Isa, threads: usize) -> Result<Fast, String> {
        if !isa.available() {
            return Err(format!("this CPU cannot run {} kernels (best available: {})", isa.name(), Isa::best().name()));
        }
        let fallback = rayon::ThreadPoolBuilder::new().num_threads(threads).build().map_err(|e| format!("cannot start {threads} threads: {e}"))?;
        Ok(Fast { isa, pool: SpinPool::new(threads), fallback, counts: Mutex::new(BTreeMap::new()), row_lengths: Mutex::new(Vec::new()) })
    }

    /// How many times each fast kernel ran (`matmul_q`, `attention`, ...)
    /// and how many ops fell back to the reference definition (`reference`).
    pub fn kernel_counts(&self) -> BTreeMap<&'static str, u64> {
        let c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        c.iter().map(|(k, v)| (*k, v.load(Ordering::Relaxed))).collect()
    }

    /// Say, for each batch row, how many of its leading tokens the next
    /// runs read (empty: all): a ragged step's real tokens, the rest
    /// padding, and 0 for a free slot riding along. Matrix products whose
    /// activations lead with the batch dimension (`lengths.len()` rows)
    /// then compute only those tokens and give zeros for the others, and
    /// `moe_experts` routes none of them: padding costs no weight dot
    /// products. Only for graphs where every matmul's activation leads
    /// with the batch dimension (the caller checks the IR types), and whose
    /// padding values go nowhere that is read (no recurrent state; causal
    /// attention never shows a later position to an earlier one).
    pub fn set_row_lengths(&self, lengths: &[usize]) {
        let mut rows = self.row_lengths.lock().unwrap_or_else(|e| e.into_inner());
        rows.clear();
        rows.extend_from_slice(lengths);
    }

    /// The rows (of `rows` in all) of an activation of `shape` that are
    /// read this step, where `set_row_lengths` leaves some out; `None`:
    /// all of them. A rank-3 activation's second dimension is its tokens;
    /// any other rank's batch rows are busy unless of length 0.
    fn busy_rows(&self, shape: &[usize], rows: usize) -> Option<Vec<usize>> {
        let lengths = self.row_lengths.lock().unwrap_or_else(|e| e.into_inner());
        if lengths.is_empty() || shape.len() < 2 || shape[0] != lengths.len() || !rows.is_multiple_of(lengths.len()) {
            return None;
        }
        let per_row = rows / lengths.len();
        // A rank-3 activation's tokens: as many as the step's longest row
        // (a placeholder is one), else its second dimension is not tokens.
        if shape.len() == 3 && per_row != lengths.iter().copied().max().unwrap_or(0).max(1) {
            return None;
        }
        let read = |len: usize| {
            if shape.len() == 3 {
                len.min(per_row)
            } else if len > 0 {
                per_row
            } else {
                0
            }
        };
        if lengths.iter().all(|&len| read(len) == per_row) {
            return None;
        }
        Some(lengths.iter().enumerate().flat_map(|(b, &len)| (0..read(len)).map(move |t| b * per_row + t)).collect())
    }

    fn count(&self, kernel: &'static str) {
        self.count_n(kernel, 1);
    }

    fn count_n(&self, what: &'static str, n: u64) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        c.entry(what).or_default().fetch_add(n, Ordering::Relaxed);
    }

    /// Run `graph` once (see `exec::run`; a session runs a precomputed
    /// `exec::Schedule` through `exec::run_scheduled` instead).
    pub fn run(
        &self,
        graph: &Graph,
        inputs: &HashMap<String, Tensor>,
        states: HashMap<String, Tensor>,
        weights: &dyn WeightSource,
    ) -> Result<StepOutput, ExecError> {
        exec::run(self, graph, inputs, states, weights)
    }
}

impl Evaluator for Fast {
    fn eval(&self, op: &Op, args: Vec<Arg<'_, '_>>, env: &Env) -> Result<Tensor, String> {
        if let Some(t) = self.composite(op, args.iter().map(|a| a.val()).collect(), env) {
            return t;
        }
        match self.try_fast(op, args, env)? {
            Ok(t) => Ok(t),
            Err(args) => {
                self.count("reference");
                // Handing an op to the pool's threads costs a wake-up and a
                // sleep (~10 µs each); only the definitions that loop in
                // parallel are worth it. The rest (`kv_append`, `gather`,
                // ~70 a decode step) run here.
                if reference::runs_in_parallel(op) {
                    self.fallback.install(|| reference::Reference.eval(op, args, env))
                } else {
                    reference::Reference.eval(op, args, env)
                }
            }
        }
    }
}

/// `matmul` over the `busy` rows of `x` (`k` elements each); the other
/// rows' outputs are zeros.
fn matmul_busy_rows(pool: &SpinPool, isa: Isa, x: &[f32], busy: &[usize], k: usize, w: WeightRef<'_>) -> Vec<f32> {
    let n = w.shape[0];
    let mut out = vec![0f32; x.len() / k * n];
    if busy.is_empty() {
        return out;
    }
    let xs: Vec<f32> = busy.iter().flat_map(|&r| &x[r * k..(r + 1) * k]).copied().collect();
    let part = matmul::matmul(pool, isa, &xs, busy.len(), k, w);
    for (i, &r) in busy.iter().enumerate() {
        out[r * n..(r + 1) * n].copy_from_slice(&part[i * n..(i + 1) * n]);
    }
    out
}

type Fallback<'v, 'w> = Result<Tensor, Vec<Arg<'v, 'w>>>;

impl Fast {
    /// Whether a fast kernel multiplies by `w`.
    fn has_matmul(&self, w: &WeightRef<'_>) -> bool {
        w.shape.len() == 2 && simd::supports(w.dtype)
    }

    /// `x · wᵀ` (x of `shape`, f32), skipping idle batch rows.
    fn matmul(&self, shape: &[usize], data: &[f32], w: &WeightRef<'_>) -> Tensor {
        let isa = self.isa;
        let k = *shape.last().unwrap();
        let m = data.len() / k.max(1);
        // Listed only on a step that leaves rows out (no allocation on
        // the usual path), and no lock is held while the product runs.
        let out = if let Some(busy) = self.busy_rows(shape, m) {
            self.count("matmul_idle_rows_skipped");
            self.count_n("matmul_rows_left_out", (m - busy.len()) as u64);
            matmul_busy_rows(&self.pool, isa, data, &busy, k, *w)
        } else {
            matmul::matmul(&self.pool, isa, data, m, k, *w)
        };
        let mut s = shape.to_vec();
        *s.last_mut().unwrap() = w.shape[0];
        let row_dots = matmul::uses_row_dots(isa, w.dtype, m);
        self.count(if row_dots { "matmul_rows" } else { "matmul_tiled" });
        if row_dots && simd::has_rows4(isa, w.dtype) {
            self.count("matmul_rows4");
        }
        if row_dots && m >= 2 && simd::has_rows_multi(isa, w.dtype) {
            self.count("matmul_rows_multi"); // the batch's rows decoded once a group
        }
        Tensor::f32(s, out)
    }

    /// `gate = act(gate) * up` with the arithmetic of the unfused `Unary`
    /// and `Binary` arms (bit-identical with the fusion rules off).
    fn glu_in_place(&self, act: graphc_ir::UnaryOp, gate: &mut [f32], up: &[f32]) {
        let mul = reference::binary_fn(graphc_ir::BinaryOp::Mul);
        let isa = self.isa;
        for_each_chunk_mut(&self.pool, gate, ELEMENTWISE_CHUNK, |t, c| {
            simd::unary(isa, act, c);
            let u = &up[t * ELEMENTWISE_CHUNK..][..c.len()];
            c.iter_mut().zip(u).for_each(|(x, &y)| *x = mul(*x, y));
        });
    }

    /// gpt-oss's clamped SwiGLU in place of `gate`, op by op as the dense
    /// form computes it (`Op::MoeExperts`): `g = clamp(gate, max=limit)`,
    /// `u = clamp(up, ±limit)`, `(u + 1) · (g · act(g · alpha))`.
    fn clamped_swiglu_in_place(&self, act: graphc_ir::UnaryOp, (alpha, limit): (f32, f32), gate: &mut [f32], up: &[f32]) {
        let (mul, add) = (reference::binary_fn(graphc_ir::BinaryOp::Mul), reference::binary_fn(graphc_ir::BinaryOp::Add));
        let isa = self.isa;
        for_each_chunk_mut(&self.pool, gate, ELEMENTWISE_CHUNK, |t, c| {
            c.iter_mut().for_each(|g| *g = reference::clamp(*g, None, Some(limit)));
            let mut s: Vec<f32> = c.iter().map(|&g| mul(g, alpha)).collect();
            simd::unary(isa, act, &mut s);
            let u = &up[t * ELEMENTWISE_CHUNK..][..c.len()];
            c.iter_mut().zip(s).zip(u).for_each(|((g, s), &u)| *g = mul(add(reference::clamp(u, Some(-limit), Some(limit)), 1.0), mul(*g, s)));
        });
    }

    /// A fused op that is its parts run one after another (`None` for any
    /// other op): each part through `eval`, so by the same kernels, hence
    /// the same bits, as with its rule off. Only the fused op's own
    /// intermediate is owned, and updated in place (an add takes it first:
    /// IEEE addition is commutative, bit for bit).
    fn composite(&self, op: &Op, args: Vec<&Val<'_>>, env: &Env) -> Option<Result<Tensor, String>> {
        let rms = |eps: f32| Op::Norm { kind: graphc_ir::NormKind::Rms, eps };
        let own = |t: Tensor| Arg::Own(Val::T(t));
        let add = Op::Binary(graphc_ir::BinaryOp::Add);
        let run = || -> Result<Tensor, String> {
            let t = match *op {
                Op::NormMatMul { eps } => {
                    let normed = self.eval(&rms(eps), vec![Arg::Ref(args[0]), Arg::Ref(args[1])], env)?;
                    self.eval(&Op::MatMul, vec![own(normed), Arg::Ref(args[2])], env)?
                }
                Op::NormMatMulGlu { act, eps } => {
                    let normed = self.eval(&rms(eps), vec![Arg::Ref(args[0]), Arg::Ref(args[1])], env)?;
                    self.eval(&Op::MatMulGlu { act }, vec![own(normed), Arg::Ref(args[2]), Arg::Ref(args[3])], env)?
                }
                Op::MatMulAdd => {
                    let product = self.eval(&Op::MatMul, vec![Arg::Ref(args[0]), Arg::Ref(args[1])], env)?;
                    self.eval(&add, vec![own(product), Arg::Ref(args[2])], env)?
                }
                Op::NormAdd { eps } => {
                    let normed = self.eval(&rms(eps), vec![Arg::Ref(args[1]), Arg::Ref(args[2])], env)?;
                    self.eval(&add, vec![own(normed), Arg::Ref(args[0])], env)?
                }
                _ => unreachable!("only the ops matched below"),
            };
            self.count(match op {
                Op::NormMatMul { .. } => "norm_matmul",
                Op::NormMatMulGlu { .. } => "norm_matmul_glu",
                Op::MatMulAdd => "matmul_add",
                _ => "norm_add",
            });
            Ok(t)
        };
        matches!(op, Op::NormMatMul { .. } | Op::NormMatMulGlu { .. } | Op::MatMulAdd | Op::NormAdd { .. }).then(run)
    }

    /// The fast kernel for `op`, or the operands back when it has none.
    fn try_fast<'v, 'w>(&self, op: &Op, mut args: Vec<Arg<'v, 'w>>, env: &Env) -> Result<Fallback<'v, 'w>, String> {
        let isa = self.isa;
        match op {
            Op::MatMul => {
                let (Val::T(Tensor::F32 { shape, data }), Val::W(w)) = (args[0].val(), args[1].val()) else { return Ok(Err(args)) };
                if !self.has_matmul(w) {
                    return Ok(Err(args));
                }
                Ok(Ok(self.matmul(shape, data, w)))
            }
            Op::MatMulGlu { act } => {
                let (Val::T(Tensor::F32 { shape, data }), Val::W(w_gate), Val::W(w_up)) = (args[0].val(), args[1].val(), args[2].val()) else {
                    return Ok(Err(args));
                };
                // Each projection as `matmul` runs it alone (a fast kernel,
                // or the reference's definition), then the glu arm's arithmetic.
                let project = |w: &WeightRef<'_>| match self.has_matmul(w) {
                    true => match self.matmul(shape, data, w) {
                        Tensor::F32 { data, .. } => data,
                        Tensor::I32 { .. } => unreachable!("a matmul is f32"),
                    },
                    false => {
                        let k = *shape.last().unwrap();
                        self.fallback.install(|| crate::cpu::kernels::matmul_weight(data, data.len() / k.max(1), k, *w))
                    }
                };
                let (mut gate, up) = (project(w_gate), project(w_up));
                self.glu_in_place(*act, &mut gate, &up);
                self.count("matmul_glu");
                let mut out_shape = shape.clone();
                *out_shape.last_mut().unwrap() = w_gate.shape[0];
                Ok(Ok(Tensor::f32(out_shape, gate)))
            }
            Op::MoeExperts { act, bias, alpha, limit } => {
                let (Val::T(Tensor::F32 { shape, data: x }), Val::T(Tensor::F32 { data: weights, .. })) = (args[0].val(), args[1].val()) else {
                    return Ok(Err(args));
                };
                let mut experts = Vec::new();
                for a in &args[2..] {
                    let Val::W(w) = a.val() else { return Ok(Err(args)) };
                    experts.push(*w);
                }
                let d = *shape.last().unwrap();
                let rows = x.len() / d.max(1);
                // Rows no one reads are skipped as `matmul` skips them, and
                // every product takes the path the dense form's would: the
                // one for the rows computed.
                let busy = self.busy_rows(shape, rows);
                let path_rows = busy.as_ref().map_or(rows, |b| b.len());
                let idle: Option<Vec<bool>> = busy.map(|b| {
                    let mut idle = vec![true; rows];
                    b.into_iter().for_each(|r| idle[r] = false);
                    idle
                });
                let is_idle = |r: usize| idle.as_ref().is_some_and(|idle| idle[r]);
                let project = |w: &WeightRef<'_>, xs: &[f32], m: usize| -> Vec<f32> {
                    let k = w.shape[1];
                    match self.has_matmul(w) {
                        true => matmul::matmul_on_path(&self.pool, isa, xs, m, k, *w, path_rows),
                        false => self.fallback.install(|| crate::cpu::kernels::matmul_weight(xs, m, k, *w)),
                    }
                };
                let per = if *bias { 6 } else { 3 };
                // Each product, and its bias added as the dense form's `add` adds it.
                let add = reference::binary_fn(graphc_ir::BinaryOp::Add);
                let linear = |e: usize, i: usize, xs: &[f32], m: usize| -> Result<Vec<f32>, String> {
                    let w = &experts[per * e + if *bias { 2 * i } else { i }];
                    let mut y = project(w, xs, m);
                    if *bias {
                        let bias = Val::W(experts[per * e + 2 * i + 1]);
                        let b = bias.f32s()?;
                        let n = b.len();
                        y.iter_mut().enumerate().for_each(|(j, v)| *v = add(*v, b[j % n]));
                    }
                    Ok(y)
                };
                let expert = |e: usize, xs: &[f32], m: usize| -> Result<Vec<f32>, String> {
                    let (mut hidden, up) = (linear(e, 0, xs, m)?, linear(e, 1, xs, m)?);
                    match (alpha, limit) {
                        (Some(alpha), Some(limit)) => self.clamped_swiglu_in_place(*act, (*alpha, *limit), &mut hidden, &up),
                        _ => self.glu_in_place(*act, &mut hidden, &up),
                    }
                    linear(e, 2, &hidden, m)
                };
                let (out, products) = crate::cpu::moe::routed_sum(x, d, weights, experts.len() / per, is_idle, expert)?;
                self.count("moe_experts");
                let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
                c.entry("moe_expert_rows").or_default().fetch_add(products as u64, Ordering::Relaxed);
                Ok(Ok(Tensor::f32(shape.clone(), out)))
            }
            Op::Attention { n_heads, n_kv_heads, scale, causal, window, softcap, ring, sinks } => {
                let (qs, ks, vs) = (args[0].val().shape(), args[1].val().shape(), args[2].val().shape());
                let (Val::T(Tensor::F32 { data: q, .. }), Val::T(Tensor::F32 { data: k, .. }), Val::T(Tensor::F32 { data: v, .. })) =
                    (args[0].val(), args[1].val(), args[2].val())
                else {
                    return Ok(Err(args));
                };
                let pos = args[3].val().i32s()?;
                let sinks = if *sinks { Some(args[4].val().f32s()?) } else { None };
                let sh = attention::AttentionShape {
                    batch: qs[0],
                    n_heads: *n_heads,
                    n_kv_heads: *n_kv_heads,
                    seq: qs[2],
                    keys: ks[2],
                    head_dim: qs[3],
                    v_dim: vs[3],
                };
                let pr = attention::AttentionParams { scale: *scale, causal: *causal, window: *window, softcap: *softcap, ring: *ring };
                let out = attention::attention(&self.pool, isa, &sh, &pr, &attention::AttentionInputs { q, k, v, pos, sinks: sinks.as_deref() });
                self.count("attention");
                Ok(Ok(Tensor::f32(vec![qs[0], *n_heads, qs[2], vs[3]], out)))
            }
            Op::Rope { style, rotary_dim, theta, scaling } => {
                if !matches!(args[0].val(), Val::T(Tensor::F32 { .. })) {
                    return Ok(Err(args));
                }
                let pos = args[1].val().i32s()?.to_vec();
                let x = args.swap_remove(0).into_tensor()?;
                self.count("rope");
                Ok(Ok(rope(x, &pos, *style, *rotary_dim, *theta, scaling)))
            }
            Op::NormRope { eps, style, rotary_dim, theta, scaling } => {
                let Val::T(Tensor::F32 { shape, data }) = args[0].val() else { return Ok(Err(args)) };
                let w = args[1].val().f32s()?;
                let pos = args[2].val().i32s()?;
                let (b, s, h, d) = (shape[0], shape[1], shape[2], shape[3]);
                if w.len() != d || pos.len() != b * s || *rotary_dim > d {
                    return Ok(Err(args)); // the reference reports it
                }
                let out = norm_rope(&self.pool, data, [b, s, h, d], &w, pos, *eps, (*style, *rotary_dim, *theta, scaling));
                self.count("norm_rope");
                Ok(Ok(Tensor::F32 { shape: vec![b, h, s, d], data: out }))
            }
            Op::Reshape { shape } => {
                let shape: Vec<usize> = shape.iter().map(|d| eval_dim(d, env)).collect::<Result<_, _>>()?;
                let Arg::Own(Val::T(t)) = &args[0] else { return Ok(Err(args)) };
                if shape.iter().product::<usize>() != t.numel() {
                    return Ok(Err(args));
                }
                self.count("view");
                Ok(Ok(with_shape(args.swap_remove(0).into_tensor()?, shape)))
            }
            Op::Permute { perm } => {
                let Val::T(t) = args[0].val() else { return Ok(Err(args)) };
                // Moving only length-1 axes keeps the element order: a view.
                let order: Vec<usize> = perm.iter().copied().filter(|&p| t.shape()[p] != 1).collect();
                let shape: Vec<usize> = perm.iter().map(|&p| t.shape()[p]).collect();
                if order.windows(2).all(|w| w[0] < w[1]) && matches!(args[0], Arg::Own(_)) {
                    self.count("view");
                    return Ok(Ok(with_shape(args.swap_remove(0).into_tensor()?, shape)));
                }
                // Swapping the middle axes of a 4-D tensor (heads ↔ sequence,
                // the layout change around attention) copies whole rows.
                match (perm.as_slice(), t) {
                    ([0, 2, 1, 3], Tensor::F32 { shape: s, data }) => {
                        let (a, b, c, d) = (s[0], s[1], s[2], s[3]);
                        let mut out = vec![0f32; data.len()];
                        for i in 0..a {
                            for j in 0..b {
                                for k in 0..c {
                                    let src = ((i * b + j) * c + k) * d;
                                    let dst = ((i * c + k) * b + j) * d;
                                    out[dst..dst + d].copy_from_slice(&data[src..src + d]);
                                }
                            }
                        }
                        self.count("transpose");
                        Ok(Ok(Tensor::F32 { shape, data: out }))
                    }
                    _ => Ok(Err(args)),
                }
            }
            Op::Unary(u) => {
                let Arg::Own(Val::T(Tensor::F32 { .. })) = &args[0] else { return Ok(Err(args)) };
                let Tensor::F32 { shape, mut data } = args.swap_remove(0).into_tensor()? else { unreachable!() };
                let isa = self.isa;
                for_each_chunk_mut(&self.pool, &mut data, ELEMENTWISE_CHUNK, |_, c| simd::unary(isa, *u, c));
                self.count("elementwise");
                Ok(Ok(Tensor::F32 { shape, data }))
            }
            Op::Norm { kind, eps } => {
                let Val::T(Tensor::F32 { shape, data }) = args[0].val() else { return Ok(Err(args)) };
                let w = args[1].val().f32s()?;
                let bias = args.get(2).map(|b| b.val().f32s()).transpose()?;
                let d = *shape.last().unwrap();
                if w.len() != d || bias.as_ref().is_some_and(|b| b.len() != d) {
                    return Ok(Err(args)); // the reference reports it
                }
                let mut out = vec![0f32; data.len()];
                // Rows in parallel, each by the reference's own arithmetic.
                let rows_per_task = (ELEMENTWISE_CHUNK / d.max(1)).max(1);
                for_each_chunk_mut(&self.pool, &mut out, rows_per_task * d, |t, o| {
                    let x = &data[t * rows_per_task * d..][..o.len()];
                    reference::norm_rows(*kind, *eps, x, &w, bias.as_deref(), o);
                });
                self.count("norm");
                Ok(Ok(Tensor::F32 { shape: shape.clone(), data: out }))
            }
            Op::Glu { act } => {
                // `act(gate) * up` in one pass over the gate, in place, with
                // the arithmetic of the unfused `Unary` and `Binary` arms
                // above and below (bit-identical with the `glu-*` rules off).
                let same = args[0].val().shape() == args[1].val().shape();
                let (Arg::Own(Val::T(Tensor::F32 { .. })), Val::T(Tensor::F32 { .. }), true) = (&args[0], args[1].val(), same) else {
                    return Ok(Err(args));
                };
                let up = args.pop().unwrap();
                let Tensor::F32 { shape, mut data } = args.pop().unwrap().into_tensor()? else { unreachable!() };
                self.glu_in_place(*act, &mut data, &up.val().f32s()?);
                self.count("glu");
                Ok(Ok(Tensor::F32 { shape, data }))
            }
            Op::Binary(b) => {
                let same = args[0].val().shape() == args[1].val().shape();
                let (Arg::Own(Val::T(Tensor::F32 { .. })), Val::T(Tensor::F32 { .. }), true) = (&args[0], args[1].val(), same) else {
                    return Ok(Err(args));
                };
                let rhs = args.pop().unwrap();
                let Tensor::F32 { shape, mut data } = args.pop().unwrap().into_tensor()? else { unreachable!() };
                let f = reference::binary_fn(*b);
                let rhs = rhs.val().f32s()?;
                for_each_chunk_mut(&self.pool, &mut data, ELEMENTWISE_CHUNK, |t, c| {
                    let r = &rhs[t * ELEMENTWISE_CHUNK..][..c.len()];
                    c.iter_mut().zip(r).for_each(|(x, &y)| *x = f(*x, y));
                });
                self.count("elementwise");
                Ok(Ok(Tensor::F32 { shape, data }))
            }
            _ => Ok(Err(args)),
        }
    }
}

fn with_shape(t: Tensor, shape: Vec<usize>) -> Tensor {
    match t {
        Tensor::F32 { data, .. } => Tensor::F32 { shape, data },
        Tensor::I32 { data, .. } => Tensor::I32 { shape, data },
    }
}

/// `norm_rope`: each `[b, s, h]` row of `x` normalized (the reference's
/// `norm_rows`), written to its heads-major place `[b, h, s]` and rotated
/// there with `rope`'s arithmetic (bit-identical with the `norm-rope` rule off).
/// One pass over q or k instead of three (norm, transpose, rope); each
/// task is one `(b, h)` block of the output, the angles of each position
/// computed once for all heads before the pass.
fn norm_rope(
    pool: &SpinPool,
    x: &[f32],
    [b, s, h, d]: [usize; 4],
    w: &[f32],
    pos: &[i32],
    eps: f32,
    (style, rotary_dim, theta, scaling): (RopeStyle, usize, f32, &RopeScaling),
) -> Vec<f32> {
    let half = rotary_dim / 2;
    let inv_freq = scaling.inv_freq(rotary_dim, theta);
    let magnitude = scaling.magnitude();
    let mut angles = vec![(0f32, 0f32); b * s * half];
    for (row, a) in angles.chunks_exact_mut(half.max(1)).enumerate().take(b * s) {
        reference::rope_angles(scaling, &inv_freq, magnitude, pos[row], a);
    }
    let mut out = vec![0f32; x.len()];
    for_each_chunk_mut(pool, &mut out, (s * d).max(1), |block, o| {
        let (bi, hi) = (block / h, block % h);
        let rows: Vec<&[f32]> = (0..s).map(|si| &x[((bi * s + si) * h + hi) * d..][..d]).collect();
        let sums = reference::row_sums(&rows, |_, v| (v as f64) * (v as f64));
        for (si, (row, (src, sum))) in o.chunks_exact_mut(d).zip(rows.iter().zip(sums)).enumerate() {
            reference::rms_normalize(src, w, reference::rms_scale(sum, d, eps), row);
            reference::rotate_row(row, &angles[(bi * s + si) * half..][..half], style);
        }
    });
    out
}

/// RoPE in place, with the reference's arithmetic (bit-identical): the
/// angles of each (row, position) are computed once and shared by every head.
fn rope(x: Tensor, pos: &[i32], style: RopeStyle, rotary_dim: usize, theta: f32, scaling: &RopeScaling) -> Tensor {
    let Tensor::F32 { shape, mut data } = x else { unreachable!("checked by the caller") };
    let (b, h, s, d) = (shape[0], shape[1], shape[2], shape[3]);
    let half = rotary_dim / 2;
    let inv_freq = scaling.inv_freq(rotary_dim, theta);
    let magnitude = scaling.magnitude();
    let mut angles = vec![(0f32, 0f32); half];
    for bi in 0..b {
        for si in 0..s {
            reference::rope_angles(scaling, &inv_freq, magnitude, pos[bi * s + si], &mut angles);
            for hi in 0..h {
                reference::rotate_row(&mut data[((bi * h + hi) * s + si) * d..][..d], &angles, style);
            }
        }
    }
    Tensor::F32 { shape, data }
}
