//! From a graph op on concrete shapes to a kernel call: which kernel, its
//! arguments in binding order, its parameter values and its grid. This is
//! the one place the kernels' host contracts (their doc comments) are
//! honoured; every target's runtime launches what it returns.
//!
//! An op with no kernel is an error naming the op and the target, never a
//! silent fallback to the CPU.

pub use crate::call::{Arg, ArgInfo, KernelCall};
use crate::call::{BindingLimits, Value};
use crate::kernels::{self, attention::MAX_HEAD_DIM, matmul::Edges, WEIGHT_DTYPES};
use crate::kir::Kernel;
use crate::GpuError;
use graphc_backends::cpu::reference::strides;
use graphc_ir::{DType, NormKind, Op, RopeScaling};

#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    #[error("op `{op}` has no {target} kernel ({why})")]
    NoKernel { op: String, target: &'static str, why: String },
}

/// Workgroups for one invocation per element of `n`.
pub fn groups_for(n: usize) -> u32 {
    n.div_ceil(kernels::WORKGROUP as usize).max(1) as u32
}

/// The value of a kernel's `kir::ROUNDING_ONE` parameter (`Kernel::rounded_ops`).
const ROUNDING_ONE: Value = Value::F32(1.0);

fn n32(v: usize) -> Value {
    Value::U32(v as u32)
}

/// Whether a graph's every op has a kernel on `target`, checked when a
/// plan is compiled for a GPU (shapes are symbolic then; what depends on
/// them — ranks, a softmax's axis — is checked again at run time). Errors
/// name the node (its text line) and the target.
pub fn check_graph(graph: &graphc_ir::Graph, target: &'static str) -> Result<(), LowerError> {
    let order = graph.topo_order().unwrap_or_default();
    let names: std::collections::HashMap<_, _> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    for &id in &order {
        let op = &graph.node(id).op;
        let dtypes: Vec<DType> = graph.inputs(id).iter().map(|&i| graph.ty(i).dtype).collect();
        let why = has_kernel(op, &dtypes, target).err().map(|why| match weight_operand(op) {
            // The weight operand, named where it is a checkpoint tensor.
            Some(i) => match &graph.node(graph.inputs(id)[i]).op {
                Op::Weight { name, .. } => format!("weight `{name}` {why}"),
                _ => format!("the weight operand {why}"),
            },
            None => why,
        });
        if let Some(why) = why {
            let line = graphc_ir::text::node_line(graph, id, &names);
            return Err(LowerError::NoKernel { op: op.mnemonic(), target, why: format!("{why}; at `{}`", line.trim()) });
        }
    }
    Ok(())
}

/// The ops the GPU targets have kernels for, given their operands'
/// storage types (shapes aside): the one list that `check_graph` (at
/// compile time) and `lower` (at run time) both consult. A source or a
/// view needs no kernel; the rest are lowered below.
pub fn has_kernel(op: &Op, dtypes: &[DType], target: &str) -> Result<(), String> {
    match op {
        Op::Input { .. } | Op::Weight { .. } | Op::State { .. } | Op::StateOut { .. } | Op::Output { .. } | Op::Const { .. } | Op::Reshape { .. } => {
            Ok(())
        }
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Chain { .. }
        | Op::Glu { .. }
        | Op::Norm { .. }
        | Op::Rope { .. }
        | Op::NormRope { .. }
        | Op::Clamp { .. }
        | Op::Softmax { .. } => Ok(()),
        Op::Attention { .. } | Op::KvAppend { .. } | Op::Permute { .. } | Op::Narrow { .. } | Op::Contiguous | Op::AddPartials { .. } => Ok(()),
        Op::Reduce { .. } | Op::TopKMask { .. } | Op::SparseMixer { .. } => Ok(()),
        Op::CausalConv1d { .. } | Op::GatedDeltaRule | Op::Concat { .. } | Op::NormAdd { .. } | Op::AddNorm { .. } => Ok(()),
        // A further result is written by its producer's kernel.
        Op::Result { .. } => Ok(()),
        // The executor checks it on the host where the value is a step input.
        Op::ToHost { .. } => Ok(()),
        Op::MatMul
        | Op::MatMulGlu { .. }
        | Op::NormMatMul { .. }
        | Op::NormMatMulGlu { .. }
        | Op::MatMulAdd
        | Op::Gather
        | Op::QkvRope { .. }
        | Op::AttentionProject { .. }
        | Op::NormRopeAttention { .. } => match weight_operand(op).and_then(|i| dtypes.get(i).copied()) {
            Some(d) if WEIGHT_DTYPES.contains(&d) => Ok(()),
            Some(d) => Err(format!("is {d}, a block type with no {target} decoding kernel")),
            None => Err("has no weight operand".into()),
        },
        _ => Err("not written yet".into()),
    }
}

/// Which operand of a weight-reading op is its weight (the gate's, of a
/// gated pair: the up weight follows it).
fn weight_operand(op: &Op) -> Option<usize> {
    match op {
        Op::Gather => Some(0),
        Op::MatMul | Op::MatMulGlu { .. } | Op::MatMulAdd | Op::QkvRope { .. } => Some(1),
        Op::NormMatMul { .. } | Op::NormMatMulGlu { .. } => Some(2),
        Op::AttentionProject { .. } => Some(4),
        Op::NormRopeAttention { .. } => Some(9),
        _ => None,
    }
}

/// What the lowering may know of a step besides its shapes, from its
/// inputs on the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepHints {
    /// Keys a causal attention's queries see at most this step (each
    /// query's position + 1, bucketed by the caller so that one lowering
    /// serves many steps). Without it, a whole cache's rows.
    pub attention_keys: Option<usize>,
}

/// The kernel calls for `op` on inputs `args`, for `target` (a name for
/// errors): one, or for a weight larger than one binding allows, one per
/// run of its rows.
pub fn lower(op: &Op, args: &[ArgInfo], target: &'static str, limits: BindingLimits) -> Result<Vec<KernelCall>, LowerError> {
    lower_with(op, args, target, limits, StepHints::default())
}

/// `lower`, knowing more of the step (`StepHints`).
pub fn lower_with(op: &Op, args: &[ArgInfo], target: &'static str, limits: BindingLimits, hints: StepHints) -> Result<Vec<KernelCall>, LowerError> {
    let no = |why: String| LowerError::NoKernel { op: op.mnemonic(), target, why };
    let dtypes: Vec<DType> = args.iter().map(|a| a.dtype).collect();
    has_kernel(op, &dtypes, target).map_err(&no)?;
    match op {
        Op::MatMul | Op::Gather | Op::NormMatMul { .. } | Op::MatMulAdd => {
            let w = weight_operand(op).expect("a weight-reading op");
            weight_runs(op, args, target, limits, &args[w], Partials::None)
        }
        Op::MatMulGlu { .. } | Op::NormMatMulGlu { .. } => lower_matmul_glu(op, args, target, limits, Partials::None),
        Op::NormAdd { eps } => Ok(vec![lower_norm_add(*eps, args, target)?]),
        // Their further results are written where the graph executor's
        // group for them (`fuse::further_results`) puts them.
        Op::AddNorm { kind, eps } => Ok(vec![lower_add_norm(*kind, *eps, args, target)?]),
        Op::QkvRope { .. } => Ok(vec![lower_qkv_rope(op, args, target, limits)?]),
        Op::Attention { .. } | Op::AttentionProject { .. } => lower_attention(op, args, target, limits, hints),
        Op::NormRopeAttention { .. } => lower_norm_rope_attention(op, args, target, limits, hints),
        &Op::AddPartials { eps } => Ok(vec![lower_add_partials(eps, args, target)?]),
        Op::Concat { axis } => {
            // One strided write per input into its slab of the result.
            let mut out = shape0_of(args);
            out[*axis] = args.iter().map(|a| a.shape[*axis]).sum();
            let out_strides = strides(&out);
            let mut start = 0;
            let mut calls = vec![];
            for (i, a) in args.iter().enumerate() {
                if a.shape.len() > 4 || a.dtype != DType::F32 {
                    return Err(no(format!("input {i}: {} {:?}", a.dtype, a.shape)));
                }
                let dims = pad4(&a.shape, 1);
                let st: Vec<usize> = std::iter::repeat_n(0, 4 - a.shape.len()).chain(out_strides.iter().copied()).collect();
                let n: usize = a.shape.iter().product();
                let mut params = vec![n32(n), n32(dims[1]), n32(dims[2]), n32(dims[3]), n32(start * out_strides[*axis])];
                params.extend(st.iter().map(|&s| n32(s)));
                let kernel = kernels::layout::strided_store();
                calls.push(KernelCall { kernel, args: vec![Arg::Input(i), Arg::Output], params, groups: groups_for(n), out_shape: out.clone() });
                start += a.shape[*axis];
            }
            Ok(calls)
        }
        _ => Ok(vec![lower_one(op, args, target)?]),
    }
}

fn shape0_of(args: &[ArgInfo]) -> Vec<usize> {
    args.first().map(|a| a.shape.clone()).unwrap_or_default()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// `matmul_glu{act}(x, w_gate, w_up)` (or `norm_matmul_glu`, with the
/// norm's weight after x) as one kernel: the two weights of one type and
/// shape (the `matmul-glu` rule fuses only such pairs), split into the
/// same row runs where one binding cannot hold them.
fn lower_matmul_glu(
    op: &Op,
    args: &[ArgInfo],
    target: &'static str,
    limits: BindingLimits,
    partials: Partials,
) -> Result<Vec<KernelCall>, LowerError> {
    let w = weight_operand(op).expect("a gated pair reads weights");
    if args.len() != w + 2 || args[w] != args[w + 1] {
        let why = format!("a gated pair needs x and two weights of one type and shape, got {args:?}");
        return Err(LowerError::NoKernel { op: op.mnemonic(), target, why });
    }
    weight_runs(op, args, target, limits, &args[w], partials)
}

/// `norm_add{eps}(a, o, w_o)` = `a + rms_norm(o, w_o)` as one kernel
/// (`a` and `o` of one shape).
fn lower_norm_add(eps: f32, args: &[ArgInfo], target: &'static str) -> Result<KernelCall, LowerError> {
    if args.len() != 3 || args[0] != args[1] || args[0].dtype != DType::F32 {
        let why = format!("a post-norm's residual add needs a, o of one shape and the norm's weight, got {args:?}");
        return Err(LowerError::NoKernel { op: "norm_add".into(), target, why });
    }
    let shape = args[0].shape.clone();
    let d = *shape.last().unwrap_or(&1);
    let rows = shape.iter().product::<usize>() / d.max(1);
    let call_args = vec![Arg::Input(0), Arg::Input(1), Arg::Input(2), Arg::Output];
    let params = vec![n32(rows), n32(d), Value::F32(eps), ROUNDING_ONE];
    Ok(KernelCall { kernel: kernels::norm::norm_add(), args: call_args, params, groups: rows as u32, out_shape: shape })
}

/// `norm(add(a, b))` as one kernel (`add_norm`) that also writes the sum:
/// `args` are `a, b, w[, bias]` (`a` and `b` of one shape, no broadcast).
pub fn lower_add_norm(kind: NormKind, eps: f32, args: &[ArgInfo], target: &'static str) -> Result<KernelCall, LowerError> {
    let inputs = if kind == NormKind::Layer { 4 } else { 3 };
    if args.len() != inputs || args[0] != args[1] || args[0].dtype != DType::F32 {
        let why = format!("a residual norm needs a, b of one shape and the norm's weights, got {args:?}");
        return Err(LowerError::NoKernel { op: "norm".into(), target, why });
    }
    let shape = args[0].shape.clone();
    let d = *shape.last().unwrap_or(&1);
    let rows = shape.iter().product::<usize>() / d.max(1);
    let mut call_args: Vec<Arg> = (0..inputs).map(Arg::Input).collect();
    call_args.extend([Arg::ExtraOutput(shape.clone()), Arg::Output]);
    let params = vec![n32(rows), n32(d), Value::F32(eps)];
    Ok(KernelCall { kernel: kernels::norm::add_norm(kind), args: call_args, params, groups: rows as u32, out_shape: shape })
}

/// Two or three matmuls of one `x` (`args`: `x, w0, w1[, w2]`, weights of
/// one block size and row length, each within one binding) as one
/// `matmul_stacked` kernel (`matmul_stacked_mixed` where their types differ): weight `i`'s result is the call's `i`-th
/// output, the last one the main result (`Arg::Output`), the others
/// `Arg::ExtraOutput` in order.
///
/// With `norm` (norm_matmuls of one `x` and norm), `args` are `x, g, w0,
/// ..` and the kernel forms the norm.
pub fn lower_stacked_matmuls(args: &[ArgInfo], norm: Option<f32>, target: &'static str) -> Result<KernelCall, LowerError> {
    let first = if norm.is_some() { 2 } else { 1 };
    let mut stacked_args = vec![args[0].clone()];
    stacked_args.extend_from_slice(&args[first..]);
    let mut stack = stacked_shape(&stacked_args, target)?;
    let (x, weights) = (&args[0].shape, &args[first..]);
    let out_shape = |w: &ArgInfo| {
        let mut shape = x.clone();
        *shape.last_mut().unwrap() = w.shape[0];
        shape
    };
    let mut call_args: Vec<Arg> = (0..args.len()).map(Arg::Input).collect();
    call_args.extend(weights[..weights.len() - 1].iter().map(|w| Arg::ExtraOutput(out_shape(w))));
    call_args.push(Arg::Output);
    let edges = Edges { norm: norm.is_some(), ..Edges::NONE };
    if let Some(eps) = norm {
        check_norm_weight(&args[1], args[0].shape.last().copied().unwrap_or(0), target)?;
        stack.params.push(Value::F32(eps));
    }
    let kernel = if stack.mixed {
        kernels::matmul::matmul_stacked_mixed(&weights.iter().map(|w| w.dtype).collect::<Vec<_>>(), stack.rows, edges)
    } else {
        kernels::matmul::matmul_stacked(weights[0].dtype, stack.rows, weights.len() as u32, edges)
    };
    Ok(KernelCall { kernel, args: call_args, params: stack.params, groups: stack.groups, out_shape: out_shape(&weights[weights.len() - 1]) })
}

/// A norm weight `g` that fits rows of `k` features.
fn check_norm_weight(g: &ArgInfo, k: usize, target: &'static str) -> Result<(), LowerError> {
    if g.dtype != DType::F32 || g.shape != [k] {
        let why = format!("a norm weight of f32[{k}], got {} {:?}", g.dtype, g.shape);
        return Err(LowerError::NoKernel { op: "norm_matmul".into(), target, why });
    }
    Ok(())
}

/// What every stacked projection kernel (`matmul_stacked`,
/// `matmul_stacked_mixed`, `matmul_qkv_rope`) takes from its `x` and
/// weights: its leading parameters and its grid.
struct StackedShape {
    /// Rows of `x` a workgroup takes: 1 for decode, `PREFILL_ROWS` otherwise.
    rows: u32,
    /// Weights of more than one type.
    mixed: bool,
    /// `m, n, k`, the row bytes (one, or one per weight where mixed), and
    /// the row counts of all weights but the last.
    params: Vec<Value>,
    groups: u32,
}

/// `StackedShape` of `args` (`x, w0, w1[, w2]`), or why they do not stack.
fn stacked_shape(args: &[ArgInfo], target: &'static str) -> Result<StackedShape, LowerError> {
    let no = |why: String| LowerError::NoKernel { op: "matmul".into(), target, why };
    let (x, weights) = (&args[0].shape, &args[1..]);
    let k = *x.last().unwrap_or(&0);
    let dtype = weights[0].dtype;
    let fits = |w: &ArgInfo| {
        WEIGHT_DTYPES.contains(&w.dtype)
            && w.dtype.block_elems() == dtype.block_elems()
            && w.shape.len() == 2
            && w.shape[1] == k
            && k % dtype.block_elems() == 0
    };
    if !(2..=3).contains(&weights.len()) || !weights.iter().all(fits) {
        return Err(no(format!("a stack of 2 or 3 weights of one block size and row length {k}, got {weights:?}")));
    }
    let mixed = weights.iter().any(|w| w.dtype != dtype);
    let m = x.iter().product::<usize>() / k.max(1);
    let n: usize = weights.iter().map(|w| w.shape[0]).sum();
    let rows = if m == 1 { 1 } else { kernels::matmul::PREFILL_ROWS };
    let row_bytes = |t: DType| n32(k / t.block_elems() * t.block_bytes());
    let mut params = vec![n32(m), n32(n), n32(k)];
    if mixed {
        params.extend(weights.iter().map(|w| row_bytes(w.dtype)));
    } else {
        params.push(row_bytes(dtype));
    }
    params.extend(weights[..weights.len() - 1].iter().map(|w| n32(w.shape[0])));
    let groups = m.div_ceil(rows as usize) * n.div_ceil(kernels::matmul::COLUMNS_PER_GROUP as usize);
    Ok(StackedShape { rows, mixed, params, groups: groups as u32 })
}

/// An IR `qkv_rope` (a layer's q/k/v projections with the rotation of q
/// and k and the appends of k and v) as one `matmul_qkv_rope` call.
/// `args`: `x, w_q, w_k, w_v` (one type and row length), `positions [b,
/// s]`, `k_cache [b, hk, cap, d]`, `v_cache [b, hv, cap, dv]`, `lengths
/// [b]`.
/// The main result is rotated q, `[b, hq, s, d]`; the caches are further
/// results in place (k then v). With `norm`, the projections are
/// norm_matmuls of one norm, whose weight is a ninth operand.
///
/// The one kernel binds each weight whole and ten or eleven buffers; a
/// device that allows less refuses the head here, naming the limit (the
/// plan can be compiled with `--disable-pass attention_head`).
pub fn lower_qkv_rope(head: &Op, args: &[ArgInfo], target: &'static str, limits: BindingLimits) -> Result<KernelCall, LowerError> {
    let no = |why: String| LowerError::NoKernel { op: "matmul_qkv_rope".into(), target, why };
    let Op::QkvRope { eps: norm, bias, style, rotary_dim, theta, scaling, window, .. } = head else {
        return Err(no(format!("a qkv_rope, got {}", head.mnemonic())));
    };
    let (norm, bias) = (*norm, *bias);
    let bias_at = 8 + usize::from(norm.is_some());
    if args.len() != bias_at + if bias { 3 } else { 0 } {
        return Err(no(format!("8 operands (and a norm's weight, and three biases), got {}", args.len())));
    }
    let (args, biases) = args.split_at(bias_at);
    let (args, g) = args.split_at(8);
    let [x, wq, wk, wv, positions, k_cache, v_cache, lengths] = args else { unreachable!("split at 8") };
    if wk.dtype.block_elems() != wq.dtype.block_elems() || wv.dtype.block_elems() != wq.dtype.block_elems() {
        return Err(no(format!("q, k and v weights of one block size, got {}, {} and {}", wq.dtype, wk.dtype, wv.dtype)));
    }
    let stack = stacked_shape(&[x.clone(), wq.clone(), wk.clone(), wv.clone()], target)?;
    let (Some(&k), &[b, hk, cap, d], &[vb, hv, vcap, dv]) = (x.shape.last(), &k_cache.shape[..], &v_cache.shape[..]) else {
        return Err(no(format!("caches of rank 4, got {:?} and {:?}", k_cache.shape, v_cache.shape)));
    };
    let m = x.shape.iter().product::<usize>() / k.max(1);
    let (nq, nk, nv) = (wq.shape[0], wk.shape[0], wv.shape[0]);
    let s = m / b.max(1);
    let hq = nq / d.max(1);
    let fits = b == vb
        && cap == vcap
        && b * s == m
        && positions.shape == [b, s]
        && lengths.shape == [b]
        && hq * d == nq
        && hk * d == nk
        && hv * dv == nv
        && d % 2 == 0
        && dv % 2 == 0
        && *rotary_dim <= d
        && rotary_dim % 2 == 0;
    if !fits {
        return Err(no(format!("x {:?}, weights of {nq}, {nk}, {nv} rows, positions {:?}, caches {:?} {:?}, lengths {:?}, rotary_dim {rotary_dim}: heads do not tile the projections", x.shape, positions.shape, k_cache.shape, v_cache.shape, lengths.shape)));
    }
    let mut params = stack.params;
    params.extend([s, d, dv, hq, hk, hv, cap, usize::from(window.is_some())].map(n32));
    params.extend(rope_params(*rotary_dim, scaling));
    let mut call_args = vec![Arg::Input(0)];
    if let (Some(eps), [g]) = (norm, g) {
        check_norm_weight(g, k, target)?;
        call_args.push(Arg::Input(8));
        params.push(Value::F32(eps));
    }
    call_args.extend([
        Arg::Input(1),
        Arg::Input(2),
        Arg::Input(3),
        Arg::Input(4),
        Arg::Constant(scaling.inv_freq(*rotary_dim, *theta)),
        Arg::Output,
        Arg::ExtraInPlace(5),
        Arg::ExtraInPlace(6),
        Arg::Input(7),
    ]);
    for (i, b) in biases.iter().enumerate() {
        let n = [nq, nk, nv][i];
        if b.shape != [n] {
            return Err(no(format!("a bias of {n} features for weight {i}, got {:?}", b.shape)));
        }
        call_args.push(Arg::Input(bias_at + i));
    }
    let kernel =
        kernels::matmul::matmul_qkv_rope([wq.dtype, wk.dtype, wv.dtype], bias, stack.rows, *style, Edges { norm: norm.is_some(), ..Edges::NONE });
    let too_big = [wq, wk, wv].into_iter().map(|w| w.shape.iter().product::<usize>() / w.dtype.block_elems() * w.dtype.block_bytes()).max();
    if too_big.is_some_and(|bytes| bytes as u64 > limits.max_bytes) || kernel.buffers.len() as u32 > limits.max_buffers {
        return Err(no(format!(
            "its weights (up to {} bytes) and {} buffers in one kernel exceed this device's binding limits ({} bytes, {} buffers); compile the plan with `--disable-pass attention_head`",
            too_big.unwrap_or(0),
            kernel.buffers.len(),
            limits.max_bytes,
            limits.max_buffers
        )));
    }
    Ok(KernelCall { kernel, args: call_args, params, groups: stack.groups, out_shape: vec![b, hq, s, d] })
}

/// A weight-reading op (`matmul`, `gather`, a gated pair of matmuls) as one
/// call per run of the weight `w`'s rows that fits one binding.
fn weight_runs(
    op: &Op,
    args: &[ArgInfo],
    target: &'static str,
    limits: BindingLimits,
    w: &ArgInfo,
    partials: Partials,
) -> Result<Vec<KernelCall>, LowerError> {
    let no = |why: String| LowerError::NoKernel { op: op.mnemonic(), target, why };
    let (rows, cols) = match w.shape[..] {
        [r, c] => (r, c),
        _ => return Err(no(format!("weight of shape {:?}", w.shape))),
    };
    let row_bytes = (cols / w.dtype.block_elems() * w.dtype.block_bytes()) as u64;
    // Row runs whose byte offsets keep the binding alignment.
    let align_rows = (limits.offset_alignment / gcd(limits.offset_alignment, row_bytes.max(1))).max(1);
    let chunk = (limits.max_bytes / row_bytes.max(1)) / align_rows * align_rows;
    if chunk == 0 {
        return Err(no(format!("one weight row of {row_bytes} bytes exceeds the {}-byte binding limit", limits.max_bytes)));
    }
    let mut calls = vec![];
    let mut lo = 0u64;
    while lo < rows as u64 {
        let n = chunk.min(rows as u64 - lo);
        calls.push(weight_rows(op, args, target, lo as usize, n as usize, row_bytes, partials)?);
        lo += n;
    }
    Ok(calls)
}

/// Matmul, gather or a gated pair of matmuls over weight rows `lo .. lo + n` only (bound as a byte
/// range), writing their part of the whole result.
fn weight_rows(
    op: &Op,
    args: &[ArgInfo],
    target: &'static str,
    lo: usize,
    n: usize,
    row_bytes: u64,
    partials: Partials,
) -> Result<KernelCall, LowerError> {
    let no = |why: String| LowerError::NoKernel { op: op.mnemonic(), target, why };
    let range = |input: usize| Arg::InputRange { input, offset: lo as u64 * row_bytes, bytes: n as u64 * row_bytes };
    let numel = |s: &[usize]| s.iter().product::<usize>();
    let gated = match op {
        Op::MatMulGlu { act } | Op::NormMatMulGlu { act, .. } => Some(*act),
        _ => None,
    };
    let norm = match op {
        Op::NormMatMul { eps } | Op::NormMatMulGlu { eps, .. } => Some(*eps),
        _ => None,
    };
    match op {
        Op::MatMul | Op::MatMulGlu { .. } | Op::NormMatMul { .. } | Op::NormMatMulGlu { .. } | Op::MatMulAdd => {
            let wi = weight_operand(op).expect("a matmul reads a weight");
            let (x, w) = (&args[0].shape, &args[wi]);
            if !WEIGHT_DTYPES.contains(&w.dtype) {
                return Err(no(format!("weight type {}", w.dtype)));
            }
            let (n_total, k) = (w.shape[0], w.shape[1]);
            if x.last() != Some(&k) || k % w.dtype.block_elems() != 0 {
                return Err(no(format!("x {x:?} against weight [{n_total}, {k}] of {}", w.dtype)));
            }
            let m = numel(x) / k.max(1);
            let mut out_shape = x.clone();
            *out_shape.last_mut().unwrap() = n_total;
            // A staged `x` (`Partials::X`) is one tile of all its rows.
            let rows = match partials {
                Partials::X(..) => m,
                _ if m == 1 => 1,
                _ => kernels::matmul::PREFILL_ROWS as usize,
            };
            let mut params = vec![n32(m), n32(n), n32(k), n32(row_bytes as usize), n32(n_total), n32(lo)];
            let groups = m.div_ceil(rows) * n.div_ceil(kernels::matmul::COLUMNS_PER_GROUP as usize);
            let residual = matches!(op, Op::MatMulAdd);
            let edges = Edges {
                norm: norm.is_some(),
                residual,
                x_partials: matches!(partials, Partials::X(..)),
                x_partials_norm: matches!(partials, Partials::X(_, Some(_))),
                r_partials: matches!(partials, Partials::R(_)),
            };
            let mut call_args = vec![Arg::Input(0)];
            if let Some(eps) = norm {
                check_norm_weight(&args[1], k, target)?;
                call_args.push(Arg::Input(1));
                params.push(Value::F32(eps));
            }
            call_args.push(range(wi));
            if gated.is_some() {
                call_args.push(range(wi + 1));
            }
            if residual {
                if args[2].shape != out_shape || args[2].dtype != DType::F32 {
                    return Err(no(format!("residual {} {:?} against the product's f32 {out_shape:?}", args[2].dtype, args[2].shape)));
                }
                call_args.push(Arg::Input(2));
            }
            call_args.push(Arg::Output);
            if let Partials::X(heads, _) | Partials::R(heads) = partials {
                params.push(n32(heads));
            }
            if let Partials::X(_, Some(eps)) = partials {
                params.extend([Value::F32(eps), ROUNDING_ONE]);
            }
            let kernel = match gated {
                None => kernels::matmul::matmul(w.dtype, rows as u32, edges),
                Some(act) => kernels::matmul::matmul_glu(w.dtype, rows as u32, act, edges),
            };
            let args = call_args;
            Ok(KernelCall { kernel, args, params, groups: groups as u32, out_shape })
        }
        Op::Gather => {
            let t = &args[0];
            if !WEIGHT_DTYPES.contains(&t.dtype) {
                return Err(no(format!("table type {}", t.dtype)));
            }
            let d = t.shape[1];
            let total = numel(&args[1].shape) * d;
            let mut out_shape = args[1].shape.clone();
            out_shape.push(d);
            let params = vec![n32(total), n32(d), n32(n), n32(row_bytes as usize), n32(lo)];
            let kernel = kernels::matmul::gather(t.dtype);
            Ok(KernelCall { kernel, args: vec![range(0), Arg::Input(1), Arg::Output], params, groups: groups_for(total), out_shape })
        }
        _ => unreachable!("only matmul, gather and a gated pair of matmuls read weight rows"),
    }
}

/// Where a matmul reads an `add_partials` it forms itself (`fuse::Group::Partials`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Partials {
    None,
    /// Its `x`, of this many shares a row, staged (`Edges::x_partials`),
    /// with its post-norm's epsilon where the sum has one (`x_partials_norm`).
    X(usize, Option<f32>),
    /// Its residual, of this many shares a row (`Edges::r_partials`).
    R(usize),
}

/// An op whose operand `operand` is an `add_partials{eps}` it forms itself
/// (`fuse::Group::Partials`): `args` are its operands with that one given
/// as the sum's (residual, shares, and with `eps` the post-norm's weight).
/// A `matmul_add`'s residual (operand 2) is formed in its epilogue; a
/// `norm_add`'s `a` (operand 0) before its own norm (a row staged); a
/// matmul's `x` (operand 0) in its prologue for a step of few rows it can
/// stage (a decode step's, one slot or several: one tile of all of
/// them), and otherwise by the `add_partials` kernel into the op's
/// scratch, which the matmul then reads (two launches: a prefill's, or
/// rows too long to stage).
pub fn lower_with_partials(
    op: &Op,
    args: &[ArgInfo],
    operand: usize,
    eps: Option<f32>,
    target: &'static str,
    limits: BindingLimits,
) -> Result<Vec<KernelCall>, LowerError> {
    let no = |why: String| LowerError::NoKernel { op: op.mnemonic(), target, why };
    // The sum's operands beyond its residual: shares, and the norm's weight.
    let extra = if eps.is_some() { 2 } else { 1 };
    if operand + extra >= args.len() {
        return Err(no(format!("no shares after operand {operand} of {args:?}")));
    }
    let mut own = args.to_vec();
    let sum_args: Vec<ArgInfo> = own.drain(operand..=operand + extra).collect();
    own.insert(operand, sum_args[0].clone());
    let heads = shares_per_row(&sum_args[1]);
    let x = &own[operand];
    let k = *x.shape.last().unwrap_or(&1);
    let rows = x.shape.iter().product::<usize>() / k.max(1);
    // Input `i` of the op's own operands, among `args`.
    let shift = |i: usize| if i > operand { i + extra } else { i };
    let shifted = |a: &Arg| match a {
        Arg::Input(i) => Arg::Input(shift(*i)),
        Arg::InputRange { input, offset, bytes } => Arg::InputRange { input: shift(*input), offset: *offset, bytes: *bytes },
        other => other.clone(),
    };
    let matmul = matches!(op, Op::MatMul | Op::NormMatMul { .. } | Op::MatMulGlu { .. } | Op::NormMatMulGlu { .. });
    let staged = rows <= kernels::matmul::PREFILL_ROWS as usize && rows * k <= kernels::MAX_STAGED_X as usize;
    let role = match (op, operand) {
        (Op::MatMulAdd, 2) if eps.is_none() => Partials::R(heads),
        _ if matmul && operand == 0 && staged => Partials::X(heads, eps),
        _ if matmul && operand == 0 => {
            // The sum into scratch, then the op over it.
            let bytes = (x.shape.iter().product::<usize>() * 4) as u64;
            let mut sum = lower_add_partials(eps, &sum_args, target)?;
            sum.args = sum.args.iter().map(|a| if *a == Arg::Output { Arg::Scratch(bytes) } else { a.clone() }).collect();
            let mut calls = lower(op, &own, target, limits)?;
            for c in &mut calls {
                c.args = c.args.iter().map(|a| if *a == Arg::Input(0) { Arg::Scratch(bytes) } else { shifted(a) }).collect();
            }
            sum.out_shape = calls[0].out_shape.clone();
            return Ok(std::iter::once(sum).chain(calls).collect());
        }
        (&Op::NormAdd { eps: eps_o }, 0) if k <= kernels::MAX_STAGED_X as usize => {
            let (a, o) = (&own[0], &own[1]);
            if a.shape != o.shape || own[2].shape != [k] {
                return Err(no(format!("a post-norm's residual add of {:?}, {:?} and weight {:?}", a.shape, o.shape, own[2].shape)));
            }
            let mut params = vec![n32(rows), n32(k), Value::F32(eps_o), n32(heads)];
            params.extend(eps.map(Value::F32));
            params.push(ROUNDING_ONE);
            let call_args = (0..args.len()).map(Arg::Input).chain([Arg::Output]).collect();
            let kernel = kernels::norm::norm_add_partials(eps.is_some());
            return Ok(vec![KernelCall { kernel, args: call_args, params, groups: rows as u32, out_shape: a.shape.clone() }]);
        }
        _ => return Err(no(format!("operand {operand} formed from shares"))),
    };
    let mut calls = match op {
        Op::MatMulGlu { .. } | Op::NormMatMulGlu { .. } => lower_matmul_glu(op, &own, target, limits, role)?,
        _ => {
            let w = weight_operand(op).expect("a matmul reads a weight");
            weight_runs(op, &own, target, limits, &own[w], role)?
        }
    };
    for c in &mut calls {
        let mut with_shares = vec![];
        for a in &c.args {
            with_shares.push(shifted(a));
            // The sum's other buffers follow the value they are summed into.
            if *a == Arg::Input(operand) {
                with_shares.extend((1..=extra).map(|i| Arg::Input(operand + i)));
            }
        }
        c.args = with_shares;
    }
    Ok(calls)
}

/// Attention as one kernel, or, where few queries meet many keys, as a
/// workgroup per (query, block of keys) and a merge (`kernels::attention`).
///
/// `attention_project` likewise, each query's head projected in the kernel
/// that finishes it (the attention's, or the merge's). An attention's
/// sinks (operand 4) are read where its softmax starts, or by the merge.
fn lower_attention(op: &Op, args: &[ArgInfo], target: &'static str, limits: BindingLimits, hints: StepHints) -> Result<Vec<KernelCall>, LowerError> {
    let (Op::Attention { n_heads, n_kv_heads, scale, causal, window, softcap, ring, .. }
    | Op::AttentionProject { n_heads, n_kv_heads, scale, causal, window, softcap, ring }) = *op
    else {
        unreachable!("lower_attention of {op:?}")
    };
    let sinks = matches!(op, Op::Attention { sinks: true, .. });
    if sinks && (args.len() != 5 || args[4].shape != [n_heads] || args[4].dtype != DType::F32) {
        let got: Vec<_> = args.iter().skip(4).map(|a| format!("{} {:?}", a.dtype, a.shape)).collect();
        return Err(LowerError::NoKernel { op: op.mnemonic(), target, why: format!("sinks of f32 [{n_heads}] as operand 4, got {got:?}") });
    }
    let attention = Attention { n_heads, n_kv_heads, scale, causal, window, softcap, ring, sinks };
    let (qs, ks) = (&args[0].shape, &args[1].shape);
    let shape = AttentionShape { b: qs[0], s: qs[2], d: qs[3], t: ks[2], dv: args[2].shape[3] };
    let io =
        AttentionIo { before_w: vec![Arg::Input(0), Arg::Input(1), Arg::Input(2), Arg::Input(3)], w: Arg::Input(4), after_w: vec![], normed: None };
    let project = matches!(op, Op::AttentionProject { .. }).then(|| &args[4]);
    attention_calls(op, &attention, shape, project, io, target, limits, hints)
}

/// An attention's attributes.
struct Attention {
    n_heads: usize,
    n_kv_heads: usize,
    scale: f32,
    causal: bool,
    window: Option<usize>,
    softcap: Option<f32>,
    ring: bool,
    /// Operand 4 holds a logit per query head (a plain attention's only).
    sinks: bool,
}

/// An attention's sizes: batch rows, queries a row, head sizes, cache rows.
#[derive(Clone, Copy)]
struct AttentionShape {
    b: usize,
    s: usize,
    d: usize,
    t: usize,
    dv: usize,
}

/// What an attention kernel binds: its buffers before the projection's
/// weight, the weight, those after it (before its output); and for the
/// kernels of `norm_rope_attention`, the rope style and their further
/// params (`eps`, `current`, the rope's).
struct AttentionIo {
    before_w: Vec<Arg>,
    w: Arg,
    after_w: Vec<Arg>,
    normed: Option<(graphc_ir::RopeStyle, Vec<Value>)>,
}

#[allow(clippy::too_many_arguments)]
fn attention_calls(
    op: &Op,
    a: &Attention,
    shape: AttentionShape,
    project: Option<&ArgInfo>,
    io: AttentionIo,
    target: &'static str,
    limits: BindingLimits,
    hints: StepHints,
) -> Result<Vec<KernelCall>, LowerError> {
    let no = |why: String| LowerError::NoKernel { op: op.mnemonic(), target, why };
    let AttentionShape { b, s, d, t, dv } = shape;
    if dv as u32 > MAX_HEAD_DIM {
        return Err(no(format!("value head size {dv} (the kernel holds up to {MAX_HEAD_DIM})")));
    }
    let n_heads = a.n_heads;
    let queries = b * n_heads * s;
    let params = vec![
        n32(queries),
        n32(n_heads),
        n32(a.n_kv_heads),
        n32(s),
        n32(t),
        n32(d),
        n32(dv),
        Value::F32(a.scale),
        Value::F32(a.softcap.unwrap_or(0.0)),
        n32(usize::from(a.causal)),
        n32(a.window.unwrap_or(0)),
        n32(usize::from(a.ring && a.window.is_some())),
    ];
    let mut out_shape = vec![b, n_heads, s, dv];
    // The projection's weight, its rows and their bytes.
    let project = match project {
        Some(w) => {
            let [n, cols] = w.shape[..] else { return Err(no(format!("a weight of shape {:?}", w.shape))) };
            let whole_groups = dv % kernels::dequant::group_elems(w.dtype) as usize == 0 && cols == n_heads * dv;
            if !WEIGHT_DTYPES.contains(&w.dtype) || !whole_groups {
                return Err(no(format!("a {} weight [{n}, {cols}] split into {n_heads} heads of {dv} columns", w.dtype)));
            }
            let row_bytes = cols / w.dtype.block_elems() * w.dtype.block_bytes();
            if (n * row_bytes) as u64 > limits.max_bytes {
                return Err(no(format!("a weight of {} bytes, over this device's binding limit of {}", n * row_bytes, limits.max_bytes)));
            }
            out_shape = vec![b, s, n_heads, n];
            Some((w.dtype, n, row_bytes))
        }
        None => None,
    };
    // A causal query sees no key past its position: the step's bound, where known.
    let keys = match (hints.attention_keys, a.causal) {
        (Some(bound), true) => bound.min(t),
        _ => t,
    };
    let style = io.normed.as_ref().map(|(style, _)| *style);
    let normed_params = io.normed.as_ref().map(|(_, p)| p.clone()).unwrap_or_default();
    let check_buffers = |call: KernelCall| -> Result<KernelCall, LowerError> {
        if call.kernel.buffers.len() as u32 > limits.max_buffers {
            return Err(no(format!(
                "{} buffers in one kernel, over this device's limit of {}; compile the plan with `--disable-pass {}`",
                call.kernel.buffers.len(),
                limits.max_buffers,
                op.mnemonic()
            )));
        }
        Ok(call)
    };
    let splits = kernels::attention::split_attention(queries, keys);
    if splits == 1 {
        let mut args = io.before_w.clone();
        let mut params = params;
        let kernel = match (project, style) {
            (None, None) if a.sinks => {
                args.push(Arg::Input(4));
                kernels::attention::attention_with_sinks()
            }
            (None, None) => kernels::attention::attention(),
            (Some((dtype, n, row_bytes)), style) => {
                args.push(io.w.clone());
                params.extend([n32(n), n32(row_bytes)]);
                match style {
                    Some(style) => kernels::attention::norm_rope_attention_project(style, dtype),
                    None => kernels::attention::attention_project(dtype),
                }
            }
            (None, Some(_)) => return Err(no("a normed attention without its projection".into())),
        };
        args.extend(io.after_w.iter().cloned());
        args.push(Arg::Output);
        params.extend(normed_params);
        return Ok(vec![check_buffers(KernelCall { kernel, args, params, groups: queries as u32, out_shape })?]);
    }
    // Flash-decoding: a workgroup per (query, block of keys), then one merge.
    let part_bytes = (queries * splits * kernels::attention::part_floats(dv) * 4) as u64;
    let mut part_params = params;
    part_params.push(n32(splits));
    part_params.extend(normed_params);
    let mut part_args = io.before_w.clone();
    part_args.extend(io.after_w.iter().cloned());
    part_args.push(Arg::Scratch(part_bytes));
    let part = KernelCall {
        kernel: match style {
            Some(style) => kernels::attention::norm_rope_attention_part(style),
            None => kernels::attention::attention_part(),
        },
        args: part_args,
        params: part_params,
        groups: (queries * splits) as u32,
        out_shape: out_shape.clone(),
    };
    let merge = match project {
        None if a.sinks => KernelCall {
            kernel: kernels::attention::attention_merge_with_sinks(),
            args: vec![Arg::Scratch(part_bytes), Arg::Input(4), Arg::Output],
            params: vec![n32(queries), n32(splits), n32(dv), n32(n_heads), n32(s)],
            groups: queries as u32,
            out_shape,
        },
        None => KernelCall {
            kernel: kernels::attention::attention_merge(),
            args: vec![Arg::Scratch(part_bytes), Arg::Output],
            params: vec![n32(queries), n32(splits), n32(dv)],
            groups: queries as u32,
            out_shape,
        },
        Some((dtype, n, row_bytes)) => KernelCall {
            kernel: kernels::attention::attention_merge_project(dtype),
            args: vec![Arg::Scratch(part_bytes), io.w.clone(), Arg::Output],
            params: vec![n32(queries), n32(splits), n32(dv), n32(n), n32(row_bytes), n32(n_heads), n32(s)],
            groups: queries as u32,
            out_shape,
        },
    };
    Ok(vec![check_buffers(part)?, merge])
}

/// `norm_rope_attention`: a step of one row a sequence as the attention's
/// calls alone, each workgroup norming its q head and its kv head's new
/// key, the new rows appended by the kernel (`current` 1); a longer step
/// appends first (`norm_rope_append`), then runs them with every key in
/// the cache (`current` 0).
fn lower_norm_rope_attention(
    op: &Op,
    args: &[ArgInfo],
    target: &'static str,
    limits: BindingLimits,
    hints: StepHints,
) -> Result<Vec<KernelCall>, LowerError> {
    let no = |why: String| LowerError::NoKernel { op: op.mnemonic(), target, why };
    let &Op::NormRopeAttention { eps, style, rotary_dim, theta, ref scaling, n_heads, n_kv_heads, scale, causal, window, softcap, ring, .. } = op
    else {
        unreachable!("lower_norm_rope_attention of {op:?}")
    };
    let [q, k_new, v_new, g_q, g_k, positions, k_cache, v_cache, lengths, w] = args else {
        return Err(no(format!("10 operands, got {}", args.len())));
    };
    let (&[b, s, hq, d], &[_, _, hk, _], &[_, _, t, _], &[_, _, _, dv]) = (&q.shape[..], &k_new.shape[..], &k_cache.shape[..], &v_cache.shape[..])
    else {
        return Err(no(format!("q {:?}, k {:?} and caches {:?}, {:?} of rank 4", q.shape, k_new.shape, k_cache.shape, v_cache.shape)));
    };
    let fits = hq == n_heads
        && hk == n_kv_heads
        && k_new.shape == [b, s, hk, d]
        && v_new.shape == [b, hk, s, dv]
        && g_q.shape == [d]
        && g_k.shape == [d]
        && positions.shape == [b, s]
        && k_cache.shape == [b, hk, t, d]
        && v_cache.shape == [b, hk, t, dv]
        && lengths.shape == [b]
        && d as u32 <= MAX_HEAD_DIM
        && rotary_dim <= d
        && rotary_dim % 2 == 0;
    if !fits {
        return Err(no(format!(
            "q {:?}, k {:?}, v {:?}, norm weights {:?} {:?}, positions {:?}, caches {:?} {:?}, lengths {:?}, rotary_dim {rotary_dim}: heads of up to {MAX_HEAD_DIM} that do not tile",
            q.shape, k_new.shape, v_new.shape, g_q.shape, g_k.shape, positions.shape, k_cache.shape, v_cache.shape, lengths.shape
        )));
    }
    let attention = Attention { n_heads, n_kv_heads, scale, causal, window, softcap, ring, sinks: false };
    let inv_freq = scaling.inv_freq(rotary_dim, theta);
    let current = s == 1;
    let mut normed_params = vec![Value::F32(eps), n32(usize::from(current))];
    normed_params.extend(rope_params(rotary_dim, scaling));
    let io = AttentionIo {
        before_w: (0..6).map(Arg::Input).chain([Arg::Constant(inv_freq.clone()), Arg::Input(8)]).collect(),
        w: Arg::Input(9),
        // The caches: written by this call, or by the appends before it.
        after_w: if current { vec![Arg::ExtraInPlace(6), Arg::ExtraInPlace(7)] } else { vec![Arg::Input(6), Arg::Input(7)] },
        normed: Some((style, normed_params)),
    };
    let shape = AttentionShape { b, s, d, t, dv };
    let calls = attention_calls(op, &attention, shape, Some(w), io, target, limits, hints)?;
    if current {
        return Ok(calls);
    }
    let rows = b * s * hk;
    let mut params = vec![n32(rows), n32(hk), n32(s), n32(t), n32(d), n32(dv), n32(usize::from(ring && window.is_some())), Value::F32(eps)];
    params.extend(rope_params(rotary_dim, scaling));
    let append = KernelCall {
        kernel: kernels::attention::norm_rope_append(style),
        args: vec![
            Arg::Input(1),
            Arg::Input(2),
            Arg::Input(4),
            Arg::Input(5),
            Arg::Constant(inv_freq),
            Arg::Input(8),
            Arg::ExtraInPlace(6),
            Arg::ExtraInPlace(7),
        ],
        params,
        groups: rows as u32,
        out_shape: calls[0].out_shape.clone(),
    };
    Ok(std::iter::once(append).chain(calls).collect())
}

/// The heads of an `attention_project`'s shares `[.., heads, n]`.
fn shares_per_row(shares: &ArgInfo) -> usize {
    shares.shape.len().checked_sub(2).map_or(0, |i| shares.shape[i])
}

/// `add_partials`: one invocation an element (`kernels::attention::add_partials`).
fn lower_add_partials(eps: Option<f32>, args: &[ArgInfo], target: &'static str) -> Result<KernelCall, LowerError> {
    let (r, p) = (&args[0], &args[1]);
    let n = *r.shape.last().unwrap_or(&1);
    let heads = shares_per_row(p);
    let total: usize = r.shape.iter().product();
    if p.shape.iter().product::<usize>() != total * heads {
        return Err(LowerError::NoKernel {
            op: "add_partials".into(),
            target,
            why: format!("partials {:?} against a residual {:?}", p.shape, r.shape),
        });
    }
    let out_shape = r.shape.clone();
    let Some(eps) = eps else {
        let args = vec![Arg::Input(0), Arg::Input(1), Arg::Output];
        let params = vec![n32(total), n32(n), n32(heads)];
        return Ok(KernelCall { kernel: kernels::attention::add_partials(), args, params, groups: groups_for(total), out_shape });
    };
    // With a post-norm: a workgroup a row, its sum staged.
    if n > kernels::MAX_STAGED_X as usize || args.get(2).map(|g| &g.shape[..]) != Some(&[n]) {
        let why = format!("a post-normed sum of {n} features (up to {} staged), weight {:?}", kernels::MAX_STAGED_X, args.get(2));
        return Err(LowerError::NoKernel { op: "add_partials".into(), target, why });
    }
    let rows = total / n.max(1);
    let args = vec![Arg::Input(0), Arg::Input(1), Arg::Input(2), Arg::Output];
    let params = vec![n32(rows), n32(n), n32(heads), Value::F32(eps), ROUNDING_ONE];
    Ok(KernelCall { kernel: kernels::norm::add_partials_normed(), args, params, groups: rows as u32, out_shape })
}

fn lower_one(op: &Op, args: &[ArgInfo], target: &'static str) -> Result<KernelCall, LowerError> {
    let no = |why: String| LowerError::NoKernel { op: op.mnemonic(), target, why };
    let shape0 = args.first().map(|a| a.shape.clone()).unwrap_or_default();
    let numel = |s: &[usize]| s.iter().product::<usize>();
    let last = |s: &[usize]| *s.last().unwrap_or(&1);
    let io = |n_inputs: usize| (0..n_inputs).map(Arg::Input).chain([Arg::Output]).collect::<Vec<_>>();
    let call = |kernel: Kernel, args: Vec<Arg>, params: Vec<Value>, groups: u32, out_shape: Vec<usize>| KernelCall {
        kernel,
        args,
        params,
        groups,
        out_shape,
    };
    for (i, a) in args.iter().enumerate() {
        let gated = matches!(op, Op::MatMulGlu { .. } | Op::NormMatMulGlu { .. });
        let is_weight = weight_operand(op).is_some_and(|w| i == w || (gated && i == w + 1));
        if !is_weight && !matches!(a.dtype, DType::F32 | DType::I32) {
            return Err(no(format!("input {i} is {}; only weights may be stored quantized", a.dtype)));
        }
    }
    Ok(match op {
        Op::Unary(u) => {
            let n = numel(&shape0);
            call(kernels::elementwise::unary(*u), io(1), vec![n32(n)], groups_for(n), shape0)
        }
        &Op::Clamp { min, max } => {
            let n = numel(&shape0);
            let params = vec![n32(n), Value::F32(min.unwrap_or(0.0)), Value::F32(max.unwrap_or(0.0))];
            call(kernels::elementwise::clamp(min.is_some(), max.is_some()), io(1), params, groups_for(n), shape0)
        }
        Op::Glu { act } => {
            let n = numel(&shape0);
            call(kernels::elementwise::glu(*act), io(2), vec![n32(n)], groups_for(n), shape0)
        }
        Op::Chain { expr } => lower_chain(expr, args, target)?,
        Op::Binary(b) => {
            let (out, strides) = broadcast(&[&args[0].shape, &args[1].shape]).map_err(no)?;
            let n = numel(&out);
            let padded = pad4(&out, 1);
            let mut params = vec![n32(n), n32(padded[1]), n32(padded[2]), n32(padded[3])];
            params.extend(strides.iter().flatten().map(|&s| n32(s)));
            call(kernels::elementwise::binary(*b), io(2), params, groups_for(n), out)
        }
        Op::Norm { kind, eps } => {
            let d = last(&shape0);
            let rows = numel(&shape0) / d.max(1);
            let inputs = if *kind == NormKind::Layer { 3 } else { 2 };
            if args.len() != inputs {
                return Err(no(format!("{} inputs (the {kind:?} kernel takes {inputs})", args.len())));
            }
            call(kernels::norm::norm(*kind), io(inputs), vec![n32(rows), n32(d), Value::F32(*eps)], rows as u32, shape0)
        }
        Op::Rope { style, rotary_dim, theta, scaling } => {
            let [_b, h, s, d] = shape0[..] else { return Err(no(format!("input of shape {shape0:?}, not [b, h, s, d]"))) };
            let n = numel(&shape0);
            let mut params = vec![n32(n), n32(h), n32(s), n32(d)];
            params.extend(rope_params(*rotary_dim, scaling));
            let a = vec![Arg::Input(0), Arg::Input(1), Arg::Constant(scaling.inv_freq(*rotary_dim, *theta)), Arg::Output];
            call(kernels::rope::rope(*style), a, params, groups_for(n), shape0)
        }
        Op::NormRope { eps, style, rotary_dim, theta, scaling } => {
            let [b, s, h, d] = shape0[..] else { return Err(no(format!("input of shape {shape0:?}, not [b, s, h, d]"))) };
            let rows = b * s * h;
            let mut params = vec![n32(rows), n32(h), n32(s), n32(d), Value::F32(*eps)];
            params.extend(rope_params(*rotary_dim, scaling));
            let a = vec![Arg::Input(0), Arg::Input(1), Arg::Input(2), Arg::Constant(scaling.inv_freq(*rotary_dim, *theta)), Arg::Output];
            call(kernels::rope::norm_rope(*style), a, params, rows as u32, vec![b, h, s, d])
        }
        Op::Softmax { axis, softcap } => {
            if *axis + 1 != shape0.len() {
                return Err(no(format!("softmax along axis {axis} of rank {} (the kernel reduces the last axis)", shape0.len())));
            }
            let d = last(&shape0);
            let rows = numel(&shape0) / d.max(1);
            call(kernels::softmax::softmax(), io(1), vec![n32(rows), n32(d), Value::F32(softcap.unwrap_or(0.0))], rows as u32, shape0)
        }
        Op::KvAppend { axis, window, .. } => {
            let (cache, new) = (&args[0].shape, &args[1].shape);
            let batch = args[2].shape.first().copied().unwrap_or(1).max(1);
            let outer: usize = cache[..*axis].iter().product();
            let inner: usize = cache[axis + 1..].iter().product();
            let (cap, s) = (cache[*axis], new[*axis]);
            let n = numel(new);
            let params = vec![n32(n), n32(s), n32(inner), n32(cap), n32(outer / batch), n32(usize::from(window.is_some()))];
            let a = vec![Arg::InPlace(0), Arg::Input(1), Arg::Input(2)];
            call(kernels::kv_append::kv_append(), a, params, groups_for(n), cache.clone())
        }
        Op::Permute { perm } => {
            let st = strides(&shape0);
            let out: Vec<usize> = perm.iter().map(|&p| shape0[p]).collect();
            let by_out: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
            strided(&out, 0, &by_out).map_err(no)?
        }
        Op::Narrow { axis, start, len } => {
            let env = std::collections::HashMap::new();
            let (start, len) = match (start.eval(&env), len.eval(&env)) {
                (Ok(s), Ok(l)) => (s as usize, l as usize),
                _ => return Err(no(format!("symbolic bounds {start}, {len} (resolved before lowering)"))),
            };
            let st = strides(&shape0);
            let mut out = shape0.clone();
            out[*axis] = len;
            strided(&out, start * st[*axis], &st).map_err(no)?
        }
        Op::Contiguous => strided(&shape0, 0, &strides(&shape0)).map_err(no)?,
        Op::CausalConv1d { kernel: taps } => {
            let [b, s, c] = shape0[..] else { return Err(no(format!("input of shape {shape0:?}, not [b, s, c]"))) };
            let params = vec![n32(b * c), n32(s), n32(c), n32(*taps)];
            call(kernels::recurrent::causal_conv1d(), io(4), params, groups_for(b * c), vec![b, s + taps - 1, c])
        }
        Op::GatedDeltaRule => {
            let (&[b, hk, s, dk], &[_, hv, _, dv]) = (&shape0[..], &args[2].shape[..]) else {
                return Err(no(format!("q {shape0:?} / v {:?}, not [b, h, s, d]", args[2].shape)));
            };
            let lanes = b * hv * dv;
            let params = vec![n32(lanes), n32(hk), n32(hv), n32(s), n32(dk), n32(dv)];
            call(kernels::recurrent::gated_delta_rule(), io(7), params, groups_for(lanes), vec![b, hv, s + dk, dv])
        }
        Op::Reduce { op: r, axis } => {
            let (outer, len, inner) = around(&shape0, *axis);
            let mut out_shape = shape0.clone();
            out_shape[*axis] = 1;
            let lines = outer * inner;
            call(kernels::reduce::reduce(*r), io(1), vec![n32(lines), n32(len), n32(inner)], groups_for(lines), out_shape)
        }
        Op::TopKMask { axis, k } => {
            let (_, len, inner) = around(&shape0, *axis);
            let n = numel(&shape0);
            call(kernels::reduce::top_k_mask(), io(1), vec![n32(n), n32(len), n32(inner), n32(*k)], groups_for(n), shape0)
        }
        Op::SparseMixer { jitter_eps } => {
            let len = last(&shape0);
            let rows = numel(&shape0) / len.max(1);
            // The reference compares against `2.0 * jitter_eps` in f32.
            let params = vec![n32(rows), n32(len), Value::F32(2.0 * jitter_eps)];
            call(kernels::reduce::sparse_mixer(), io(1), params, groups_for(rows), shape0)
        }
        _ => return Err(no("listed by `has_kernel` but not lowered: a bug".into())),
    })
}

/// `(outer, len, inner)` of `shape` around `axis`.
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

/// `shape` padded on the left to rank 4 with `fill`.
fn pad4(shape: &[usize], fill: usize) -> Vec<usize> {
    std::iter::repeat_n(fill, 4 - shape.len()).chain(shape.iter().copied()).collect()
}

/// The numpy broadcast of `shapes` (rank ≤ 4), and each operand's element
/// strides along the result's four (left-padded) axes, 0 where it is
/// stretched.
pub fn broadcast(shapes: &[&Vec<usize>]) -> Result<(Vec<usize>, Vec<[usize; 4]>), String> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    if rank > 4 {
        return Err(format!("rank {rank} (the elementwise kernels broadcast up to rank 4)"));
    }
    let padded: Vec<Vec<usize>> = shapes.iter().map(|s| pad4(s, 1)).collect();
    let mut out = [1usize; 4];
    for k in 0..4 {
        for p in &padded {
            out[k] = match (out[k], p[k]) {
                (x, y) if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                (x, y) => return Err(format!("shapes {shapes:?} do not broadcast (axis {k}: {x} vs {y})")),
            };
        }
    }
    let strides = padded
        .iter()
        .map(|p| {
            let mut st = [0usize; 4];
            let mut acc = 1;
            for k in (0..4).rev() {
                st[k] = if p[k] == 1 { 0 } else { acc };
                acc *= p[k];
            }
            st
        })
        .collect();
    Ok((out[4 - rank..].to_vec(), strides))
}

/// One kernel for a fused chain of elementwise ops whose leaves have
/// `leaves` shapes (the result is their broadcast).
fn lower_chain(expr: &graphc_ir::ChainExpr, leaves: &[ArgInfo], target: &'static str) -> Result<KernelCall, LowerError> {
    let no = |why: String| LowerError::NoKernel { op: "elementwise chain".into(), target, why };
    if let Some(l) = leaves.iter().find(|l| l.dtype != DType::F32) {
        return Err(no(format!("an input of type {}", l.dtype)));
    }
    let shapes: Vec<&Vec<usize>> = leaves.iter().map(|l| &l.shape).collect();
    let (out, strides) = broadcast(&shapes).map_err(no)?;
    let n: usize = out.iter().product();
    let padded = pad4(&out, 1);
    let mut params = vec![n32(n), n32(padded[1]), n32(padded[2]), n32(padded[3])];
    params.extend(strides.iter().flatten().map(|&s| n32(s)));
    params.push(ROUNDING_ONE);
    let args = (0..leaves.len()).map(Arg::Input).chain([Arg::Output]).collect();
    Ok(KernelCall { kernel: kernels::elementwise::chain(expr, leaves.len()), args, params, groups: groups_for(n), out_shape: out })
}

/// The strided-copy call producing `out` from input element `offset +
/// Σ i_k · by_out[k]`.
fn strided(out: &[usize], offset: usize, by_out: &[usize]) -> Result<KernelCall, String> {
    if out.len() > 4 {
        return Err(format!("rank {} (the copy kernel handles up to rank 4)", out.len()));
    }
    let pad = 4 - out.len();
    let dims: Vec<usize> = std::iter::repeat_n(1, pad).chain(out.iter().copied()).collect();
    let st: Vec<usize> = std::iter::repeat_n(0, pad).chain(by_out.iter().copied()).collect();
    let n: usize = out.iter().product();
    let mut params = vec![n32(n), n32(dims[1]), n32(dims[2]), n32(dims[3]), n32(offset)];
    params.extend(st.iter().map(|&s| n32(s)));
    Ok(KernelCall {
        kernel: kernels::layout::strided_copy(),
        args: vec![Arg::Input(0), Arg::Output],
        params,
        groups: groups_for(n),
        out_shape: out.to_vec(),
    })
}

fn rope_params(rotary_dim: usize, scaling: &RopeScaling) -> [Value; 4] {
    let divisor = match scaling {
        RopeScaling::Linear { factor } => *factor,
        _ => 1.0,
    };
    [n32(rotary_dim / 2), Value::F32(divisor), Value::F32(scaling.magnitude()), ROUNDING_ONE]
}

/// `KvAppend`'s capacity checks, on the host before launch (a kernel cannot
/// fail): `rows` new rows at each `lengths[b]` into `cap`, with the CPU
/// executor's conditions.
pub fn check_append(cap: usize, rows: usize, window: Option<usize>, lengths: &[i32]) -> Result<(), GpuError> {
    let bad = |message: String| GpuError::Launch { kernel: "kv_append".into(), message };
    if let Some(w) = window {
        if rows > cap + 1 - w.min(cap) {
            return Err(bad(format!("{rows} rows in one step into a ring of {cap} rows with window {w} (at most {})", cap + 1 - w.min(cap))));
        }
    }
    for (b, &len) in lengths.iter().enumerate() {
        if len < 0 {
            return Err(bad(format!("batch row {b}: offset {len} is negative")));
        }
        if window.is_none() && len as usize + rows > cap {
            return Err(bad(format!("batch row {b}: writing {rows} rows at offset {len} overflows the capacity {cap}")));
        }
    }
    Ok(())
}
