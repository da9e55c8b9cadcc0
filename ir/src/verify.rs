//! The verifier: infers every node's dtype and shape from its inputs and
//! rejects a graph that does not type-check, naming the node (`%N`, its
//! position in the printed form), its op and the mismatch.

use crate::graph::{Graph, NodeId};
use crate::op::{NormKind, Op, RopeScaling};
use crate::shape::{numel, shape_to_string, Dim, Shape, TensorType};
use crate::DType;
use std::collections::{HashMap, HashSet};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("error: node {node} ({op}): {message}")]
pub struct VerifyError {
    /// `%N` as printed.
    pub node: String,
    pub op: String,
    pub message: String,
}

/// Infer and store every node's type; the first error stops verification.
pub fn verify(graph: &mut Graph) -> Result<(), VerifyError> {
    let order = graph.topo_order().map_err(|n| VerifyError {
        node: format!("#{}", n.index()),
        op: graph.node(n).op.mnemonic(),
        message: "the graph has a cycle through this node".into(),
    })?;
    let names: HashMap<NodeId, String> = order.iter().enumerate().map(|(i, &n)| (n, format!("%{i}"))).collect();
    let mut state_in: HashMap<String, TensorType> = HashMap::new();
    let mut state_node: HashMap<String, NodeId> = HashMap::new();
    let mut state_out: HashSet<String> = HashSet::new();
    let mut source_names: HashSet<(u8, String)> = HashSet::new();
    for &id in &order {
        let node = graph.node(id);
        let err = |message: String| VerifyError { node: names[&id].clone(), op: node.op.mnemonic(), message };
        let inputs = graph.inputs(id);
        if let Some(sink) = inputs.iter().find(|&&i| graph.node(i).op.is_sink()) {
            return Err(err(format!("operand {} is a `{}`, which has no value to read", names[sink], graph.node(*sink).op.mnemonic())));
        }
        let in_tys: Vec<TensorType> = inputs.iter().map(|i| graph.node(*i).ty.clone().unwrap()).collect();
        if let Some(declared) = node.op.declared_type() {
            crate::shape::check_range(&declared.shape).map_err(&err)?;
        }
        let inferred = infer(&node.op, &in_tys).map_err(&err)?;
        crate::shape::check_range(&inferred.shape).map_err(&err)?;
        if let Op::Weight { name, ty } = &node.op {
            let row = ty.shape.last().and_then(|d| d.as_const()).unwrap_or(0);
            let block = ty.dtype.block_elems() as i64;
            if ty.dtype.is_quantized() && row % block != 0 {
                return Err(err(format!("weight `{name}` is {} with rows of {row}, not a whole number of {block}-element blocks", ty.dtype)));
            }
        }
        match &node.op {
            Op::Input { name, .. } | Op::Weight { name, .. } | Op::State { name, .. } => {
                let kind = match node.op {
                    Op::Input { .. } => 0,
                    Op::Weight { .. } => 1,
                    _ => 2,
                };
                if !source_names.insert((kind, name.clone())) {
                    return Err(err(format!("`{name}` is declared twice")));
                }
                if let Op::State { name, ty } = &node.op {
                    state_in.insert(name.clone(), ty.clone());
                    state_node.insert(name.clone(), id);
                }
                if !matches!(node.op, Op::Weight { .. }) && inferred.dtype.is_quantized() {
                    return Err(err(format!("only weights may have a quantized type, found {}", inferred.dtype)));
                }
            }
            Op::StateOut { name } => {
                let Some(decl) = state_in.get(name) else {
                    return Err(err(format!("state_out `{name}` has no matching state input")));
                };
                if decl.dtype != inferred.dtype || decl.shape.len() != inferred.shape.len() {
                    return Err(err(format!("state `{name}` is {decl} but its next value is {inferred}")));
                }
                if !state_out.insert(name.clone()) {
                    return Err(err(format!("state `{name}` is written twice")));
                }
            }
            _ => {}
        }
        if let Some(declared) = &node.ty {
            if *declared != inferred && node.op.declared_type().is_none() {
                return Err(err(format!("declared type {declared} but inputs give {inferred}")));
            }
        }
        graph.node_mut(id).ty = Some(inferred);
    }
    let mut unwritten: Vec<&String> = state_in.keys().filter(|n| !state_out.contains(*n)).collect();
    unwritten.sort();
    if let Some(missing) = unwritten.first() {
        return Err(VerifyError {
            node: names[&state_node[*missing]].clone(),
            op: "state".into(),
            message: format!("state `{missing}` is read but never written (no state_out)"),
        });
    }
    Ok(())
}

fn arity(op: &Op, tys: &[TensorType], want: std::ops::RangeInclusive<usize>) -> Result<(), String> {
    if !want.contains(&tys.len()) {
        let w = if want.start() == want.end() { want.start().to_string() } else { format!("{}..={}", want.start(), want.end()) };
        return Err(format!("{} takes {} input(s), found {}", op.mnemonic(), w, tys.len()));
    }
    Ok(())
}

fn need_float(what: &str, t: &TensorType) -> Result<(), String> {
    if t.dtype != DType::F32 {
        return Err(format!("{what} must be f32, found {t}"));
    }
    Ok(())
}

fn need_rank(what: &str, t: &TensorType, rank: usize) -> Result<(), String> {
    if t.shape.len() != rank {
        return Err(format!("{what} must have rank {rank}, found {t}"));
    }
    Ok(())
}

fn same_dim(what: &str, a: &Dim, b: &Dim) -> Result<(), String> {
    if a != b {
        return Err(format!("{what}: {a} != {b}"));
    }
    Ok(())
}

fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n].clone() } else { Dim::konst(1) };
        let db = if i + b.len() >= n { b[i + b.len() - n].clone() } else { Dim::konst(1) };
        out.push(if da == db || db.is_const(1) {
            da
        } else if da.is_const(1) {
            db
        } else {
            return Err(format!("shapes {} and {} do not broadcast", shape_to_string(a), shape_to_string(b)));
        });
    }
    Ok(out)
}

/// The type `op` produces from inputs of types `tys`.
pub fn infer(op: &Op, tys: &[TensorType]) -> Result<TensorType, String> {
    let t = |i: usize| &tys[i];
    match op {
        Op::Input { ty, .. } | Op::Weight { ty, .. } | Op::State { ty, .. } | Op::Const { ty, .. } => {
            arity(op, tys, 0..=0)?;
            Ok(ty.clone())
        }
        Op::ToHost { bound, .. } => {
            arity(op, tys, 1..=1)?;
            if bound.is_some() && t(0).dtype != DType::I32 {
                return Err(format!("to_host with a bound check needs i32 values, found {}", t(0)));
            }
            Ok(t(0).clone())
        }
        Op::StateOut { .. } | Op::Output { .. } | Op::Contiguous => {
            arity(op, tys, 1..=1)?;
            Ok(t(0).clone())
        }
        Op::Reshape { shape } => {
            arity(op, tys, 1..=1)?;
            let (a, b) = (numel(&t(0).shape), numel(shape));
            if a != b {
                return Err(format!("reshape of {} to {} changes the element count ({a} vs {b})", t(0), shape_to_string(shape)));
            }
            Ok(TensorType::new(t(0).dtype, shape.clone()))
        }
        Op::Permute { perm } => {
            arity(op, tys, 1..=1)?;
            let rank = t(0).shape.len();
            let mut seen = vec![false; rank];
            if perm.len() != rank || perm.iter().any(|&p| p >= rank || std::mem::replace(&mut seen[p], true)) {
                return Err(format!("perm {perm:?} is not a permutation of {rank} axes"));
            }
            Ok(TensorType::new(t(0).dtype, perm.iter().map(|&p| t(0).shape[p].clone()).collect()))
        }
        Op::Narrow { axis, start, len } => {
            arity(op, tys, 1..=1)?;
            let Some(d) = t(0).shape.get(*axis) else {
                return Err(format!("axis {axis} out of range for {}", t(0)));
            };
            if let (Some(d), Some(s), Some(l)) = (d.as_const(), start.as_const(), len.as_const()) {
                if s < 0 || l < 0 || s + l > d {
                    return Err(format!("narrow {s}..{} is outside axis {axis} of length {d}", s + l));
                }
            }
            let mut shape = t(0).shape.clone();
            shape[*axis] = len.clone();
            Ok(TensorType::new(t(0).dtype, shape))
        }
        Op::Concat { axis } => {
            if tys.len() < 2 {
                return Err(format!("concat takes at least 2 inputs, found {}", tys.len()));
            }
            let first = t(0);
            if *axis >= first.shape.len() {
                return Err(format!("axis {axis} out of range for {first}"));
            }
            let mut total = Dim::konst(0);
            for (i, x) in tys.iter().enumerate() {
                if x.dtype != first.dtype || x.shape.len() != first.shape.len() {
                    return Err(format!("input {i} is {x}, input 0 is {first}"));
                }
                for (k, (a, b)) in x.shape.iter().zip(&first.shape).enumerate() {
                    if k != *axis && a != b {
                        return Err(format!("input {i} is {x}, input 0 is {first}: axis {k} differs"));
                    }
                }
                total = total.add(&x.shape[*axis]);
            }
            let mut shape = first.shape.clone();
            shape[*axis] = total;
            Ok(TensorType::new(first.dtype, shape))
        }
        Op::Gather => {
            arity(op, tys, 2..=2)?;
            need_rank("gather table", t(0), 2)?;
            if t(1).dtype != DType::I32 {
                return Err(format!("gather ids must be i32, found {}", t(1)));
            }
            let mut shape = t(1).shape.clone();
            shape.push(t(0).shape[1].clone());
            Ok(TensorType::new(DType::F32, shape))
        }
        Op::Unary(_) | Op::Clamp { .. } | Op::Softmax { .. } => {
            arity(op, tys, 1..=1)?;
            need_float("operand", t(0))?;
            if let Op::Softmax { axis, .. } = op {
                if *axis >= t(0).shape.len() {
                    return Err(format!("axis {axis} out of range for {}", t(0)));
                }
            }
            if let Op::Clamp { min: Some(lo), max: Some(hi) } = op {
                if lo > hi {
                    return Err(format!("clamp min {lo:?} > max {hi:?}"));
                }
            }
            Ok(t(0).clone())
        }
        Op::Binary(_) => {
            arity(op, tys, 2..=2)?;
            if t(0).dtype != t(1).dtype {
                return Err(format!("operand dtypes differ: {} vs {}", t(0), t(1)));
            }
            if t(0).dtype.is_quantized() {
                return Err(format!("elementwise math on quantized {} needs a dequantize first", t(0)));
            }
            Ok(TensorType::new(t(0).dtype, broadcast(&t(0).shape, &t(1).shape)?))
        }
        Op::Reduce { axis, .. } => {
            arity(op, tys, 1..=1)?;
            need_float("operand", t(0))?;
            if *axis >= t(0).shape.len() {
                return Err(format!("axis {axis} out of range for {}", t(0)));
            }
            let mut shape = t(0).shape.clone();
            shape[*axis] = Dim::konst(1);
            Ok(TensorType::new(DType::F32, shape))
        }
        Op::Glu { .. } => {
            arity(op, tys, 2..=2)?;
            need_float("gate", t(0))?;
            need_float("up", t(1))?;
            if t(0).shape != t(1).shape {
                return Err(format!("gate {} and up {} differ in shape", t(0), t(1)));
            }
            Ok(t(0).clone())
        }
        Op::MatMulGlu { .. } => {
            arity(op, tys, 3..=3)?;
            if t(1) != t(2) {
                return Err(format!("gate weight {} and up weight {} differ in type or shape", t(1), t(2)));
            }
            matmul_type(t(0), t(1))
        }
        Op::SparseMixer { jitter_eps } => {
            arity(op, tys, 1..=1)?;
            need_float("router scores", t(0))?;
            if t(0).shape.last().and_then(|d| d.as_const()).is_none_or(|e| e < 2) {
                return Err(format!("sparse_mixer picks 2 experts: the last axis of {} must be at least 2", t(0)));
            }
            if !(jitter_eps.is_finite() && *jitter_eps >= 0.0) {
                return Err(format!("jitter_eps {jitter_eps} is not a non-negative number"));
            }
            Ok(t(0).clone())
        }
        Op::TopKMask { axis, k } => {
            arity(op, tys, 1..=1)?;
            need_float("operand", t(0))?;
            let Some(len) = t(0).shape.get(*axis) else {
                return Err(format!("axis {axis} out of range for {}", t(0)));
            };
            if *k == 0 || len.as_const().is_some_and(|n| (*k as i64) > n) {
                return Err(format!("k = {k} is not in 1..={len} (the length of axis {axis})"));
            }
            Ok(t(0).clone())
        }
        Op::Cast { dtype } => {
            arity(op, tys, 1..=1)?;
            if dtype.is_quantized() || t(0).dtype.is_quantized() {
                return Err(format!("cast to or from a quantized type ({} -> {dtype}); use dequantize", t(0)));
            }
            Ok(TensorType::new(*dtype, t(0).shape.clone()))
        }
        Op::MatMul => {
            arity(op, tys, 2..=2)?;
            matmul_type(t(0), t(1))
        }
        // The fused ops are typed as what they replace, step by step.
        Op::NormMatMul { eps } => {
            arity(op, tys, 3..=3)?;
            let normed = infer(&Op::Norm { kind: NormKind::Rms, eps: *eps }, &tys[..2])?;
            infer(&Op::MatMul, &[normed, t(2).clone()])
        }
        Op::NormMatMulGlu { act, eps } => {
            arity(op, tys, 4..=4)?;
            let normed = infer(&Op::Norm { kind: NormKind::Rms, eps: *eps }, &tys[..2])?;
            infer(&Op::MatMulGlu { act: *act }, &[normed, t(2).clone(), t(3).clone()])
        }
        Op::MatMulAdd => {
            arity(op, tys, 3..=3)?;
            let product = infer(&Op::MatMul, &tys[..2])?;
            same_operand("matmul_add residual", t(2), &product)
        }
        Op::NormAdd { eps } => {
            arity(op, tys, 3..=3)?;
            let normed = infer(&Op::Norm { kind: NormKind::Rms, eps: *eps }, &tys[1..])?;
            same_operand("norm_add residual", t(0), &normed)
        }
        Op::Dequantize => {
            arity(op, tys, 1..=1)?;
            if t(0).dtype.is_int() {
                return Err(format!("dequantize of an integer tensor {}", t(0)));
            }
            Ok(TensorType::new(DType::F32, t(0).shape.clone()))
        }
        Op::Norm { kind, eps } => {
            arity(op, tys, 2..=3)?;
            need_float("norm input", t(0))?;
            if eps.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || !eps.is_finite() {
                return Err(format!("norm eps must be a positive number, found {eps:?}"));
            }
            let d = t(0).shape.last().ok_or("norm of a scalar")?;
            for (i, what) in [(1, "weight"), (2, "bias")] {
                if let Some(w) = tys.get(i) {
                    need_rank(&format!("norm {what}"), w, 1)?;
                    same_dim(&format!("norm {what} length differs from the normalized axis"), &w.shape[0], d)?;
                }
            }
            if *kind == NormKind::Rms && tys.len() == 3 {
                return Err("rms norm takes no bias".into());
            }
            Ok(t(0).clone())
        }
        Op::NormRope { eps, style, rotary_dim, theta, scaling } => {
            // Typed as what it replaces, step by step.
            arity(op, tys, 3..=3)?;
            need_rank("norm_rope input", t(0), 4)?;
            let normed = infer(&Op::Norm { kind: NormKind::Rms, eps: *eps }, &tys[..2])?;
            let heads_major = infer(&Op::Permute { perm: vec![0, 2, 1, 3] }, &[normed])?;
            let rope = Op::Rope { style: *style, rotary_dim: *rotary_dim, theta: *theta, scaling: scaling.clone() };
            infer(&rope, &[heads_major, t(2).clone()])
        }
        Op::Rope { rotary_dim, scaling, .. } => {
            arity(op, tys, 2..=2)?;
            need_float("rope input", t(0))?;
            need_rank("rope input", t(0), 4)?;
            need_rank("rope positions", t(1), 2)?;
            if t(1).dtype != DType::I32 {
                return Err(format!("rope positions must be i32, found {}", t(1)));
            }
            same_dim("rope positions batch", &t(1).shape[0], &t(0).shape[0])?;
            same_dim("rope positions seq", &t(1).shape[1], &t(0).shape[2])?;
            if let Some(d) = t(0).shape[3].as_const() {
                if *rotary_dim as i64 > d || rotary_dim % 2 == 1 || *rotary_dim == 0 {
                    return Err(format!("rotary_dim {rotary_dim} must be even and at most head_dim {d}"));
                }
            }
            if let RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_context } = scaling {
                let ok = |f: &f32| f.is_finite() && *f > 0.0;
                if !(ok(factor) && ok(low_freq_factor) && ok(high_freq_factor) && high_freq_factor > low_freq_factor && *original_context > 0) {
                    return Err(format!(
                        "llama3 rope scaling needs positive factors with high_freq_factor > low_freq_factor and original_context > 0, found factor {factor}, low {low_freq_factor}, high {high_freq_factor}, original_context {original_context}"
                    ));
                }
            }
            if let RopeScaling::FreqFactors { factors, attention_factor } = scaling {
                if factors.len() != rotary_dim / 2 {
                    return Err(format!(
                        "rope has {} freq_factors for rotary_dim {rotary_dim}: one per feature pair ({}) is needed",
                        factors.len(),
                        rotary_dim / 2
                    ));
                }
                if let Some(f) = factors.iter().chain([attention_factor]).find(|f| !(f.is_finite() && **f > 0.0)) {
                    return Err(format!("rope scaling factor {f} is not a positive finite number"));
                }
            }
            Ok(t(0).clone())
        }
        Op::Attention { n_heads, n_kv_heads, window, causal, ring, .. } => {
            arity(op, tys, 4..=4)?;
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
        Op::CausalConv1d { kernel } => {
            arity(op, tys, 4..=4)?;
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
            arity(op, tys, 7..=7)?;
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
        Op::KvAppend { axis, cap, window } => {
            arity(op, tys, 3..=3)?;
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

/// A fused op's residual operand: exactly the type of the value it is
/// added to (no broadcast: the fused kernels add element by element).
fn same_operand(what: &str, residual: &TensorType, value: &TensorType) -> Result<TensorType, String> {
    if residual != value {
        return Err(format!("{what} {residual} is not of the sum's type {value}"));
    }
    Ok(value.clone())
}
