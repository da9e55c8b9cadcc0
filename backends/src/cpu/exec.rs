//! The run loop every CPU executor shares: bind inputs, states and weights,
//! walk the graph in topological order, free each value after its last use,
//! and hand the values that die at a node to that node by move, so a kernel
//! can write in place (`kv_append` into its cache, a reshape without a
//! copy). What each op computes is the `Evaluator`'s business.

use crate::tensor::{Tensor, WeightRef, WeightSource};
use graphc_ir::op::Op;
use graphc_ir::{Graph, NodeId};
use std::collections::{HashMap, HashSet};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("error: node {node} ({op}): {message}")]
pub struct ExecError {
    pub node: String,
    pub op: String,
    pub message: String,
}

/// What one forward returns: each `Output` and each `StateOut` by name.
#[derive(Debug, Default)]
pub struct StepOutput {
    pub outputs: HashMap<String, Tensor>,
    pub states: HashMap<String, Tensor>,
}

/// Values of the symbolic dims (`batch`, `seq`, `past`, `cap`) for one run.
pub type Env = HashMap<String, i64>;

/// A value in the executor: a host tensor, or a checkpoint weight in place.
pub enum Val<'w> {
    T(Tensor),
    W(WeightRef<'w>),
}

impl Val<'_> {
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Val::T(t) => t.shape().to_vec(),
            Val::W(w) => w.shape.to_vec(),
        }
    }
    /// f32 values (weights dequantized: used for small weights like norm scales).
    pub fn f32s(&self) -> Result<std::borrow::Cow<'_, [f32]>, String> {
        match self {
            Val::T(Tensor::F32 { data, .. }) => Ok(std::borrow::Cow::Borrowed(data)),
            Val::T(Tensor::I32 { .. }) => Err("expected f32 values, found i32".into()),
            Val::W(w) => {
                let mut out = vec![0f32; w.shape.iter().product()];
                if w.dtype.is_int() {
                    return Err(format!("weight of integer type {}", w.dtype));
                }
                graphc_ir::quant::dequantize(w.dtype, w.bytes, &mut out);
                Ok(std::borrow::Cow::Owned(out))
            }
        }
    }
    pub fn i32s(&self) -> Result<&[i32], String> {
        match self {
            Val::T(Tensor::I32 { data, .. }) => Ok(data),
            _ => Err("expected i32 values".into()),
        }
    }
}

/// An operand: borrowed, or owned when this node is its last user (the
/// kernel may then reuse its buffer).
pub enum Arg<'v, 'w> {
    Ref(&'v Val<'w>),
    Own(Val<'w>),
}

impl<'w> Arg<'_, 'w> {
    pub fn val(&self) -> &Val<'w> {
        match self {
            Arg::Ref(v) => v,
            Arg::Own(v) => v,
        }
    }
    /// The operand as a dense tensor: moved when owned, copied otherwise.
    pub fn into_tensor(self) -> Result<Tensor, String> {
        match self {
            Arg::Own(Val::T(t)) => Ok(t),
            other => crate::cpu::reference::dense(other.val()),
        }
    }
}

/// What an executor computes for each op.
pub trait Evaluator: Sync {
    fn eval(&self, op: &Op, args: Vec<Arg<'_, '_>>, env: &Env) -> Result<Tensor, String>;
}

/// Run `graph` once. `inputs` are bound by name and borrowed; `states` are
/// moved in and come back in `StepOutput::states`, so a cache written in
/// place by `kv_append` is the same buffer from step to step (no copy).
/// Every `Input` and `State` must be given, with a shape that fits its
/// declared type.
pub fn run(
    evaluator: &dyn Evaluator,
    graph: &Graph,
    inputs: &HashMap<String, Tensor>,
    mut states: HashMap<String, Tensor>,
    weights: &dyn WeightSource,
) -> Result<StepOutput, ExecError> {
    let order = graph.topo_order().map_err(|n| ExecError {
        node: format!("#{}", n.index()),
        op: graph.node(n).op.mnemonic(),
        message: "cycle".into(),
    })?;
    let names: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    // Free each value after its last use, so a long prefill holds only live
    // tensors. Values that feed a sink are kept to the end and moved out.
    let mut last_use: HashMap<NodeId, usize> = HashMap::new();
    let mut sinks: Vec<(bool, String, NodeId)> = Vec::new(); // (is_state, name, value)
    for (i, &n) in order.iter().enumerate() {
        match &graph.node(n).op {
            Op::StateOut { name } => sinks.push((true, name.clone(), graph.inputs(n)[0])),
            Op::Output { name } => sinks.push((false, name.clone(), graph.inputs(n)[0])),
            _ => {
                for inp in graph.inputs(n) {
                    last_use.insert(inp, i);
                }
            }
        }
    }
    let kept: HashSet<NodeId> = sinks.iter().map(|s| s.2).collect();
    let mut env: Env = HashMap::new();
    let mut vals: HashMap<NodeId, Val> = HashMap::new();
    for (i, &id) in order.iter().enumerate() {
        let node = graph.node(id);
        let err = |message: String| ExecError { node: format!("%{}", names[&id]), op: node.op.mnemonic(), message };
        if node.op.is_sink() {
            continue;
        }
        let ins = graph.inputs(id);
        let v = match &node.op {
            Op::Input { name, ty } | Op::State { name, ty } => {
                let t = if matches!(node.op, Op::Input { .. }) { inputs.get(name).cloned() } else { states.remove(name) };
                let t = t.ok_or_else(|| err(format!("no value given for `{name}`")))?;
                bind_shape(name, ty, &t, &mut env).map_err(err)?;
                Val::T(t)
            }
            Op::Weight { name, ty } => {
                let w = weights.weight(name).ok_or_else(|| err(format!("weight `{name}` is not bound")))?;
                let want: Vec<i64> = ty.shape.iter().filter_map(|d| d.as_const()).collect();
                let got: Vec<i64> = w.shape.iter().map(|&d| d as i64).collect();
                if w.dtype != ty.dtype || want != got {
                    return Err(err(format!("weight `{name}` is declared {ty} but is bound to {} {:?}", w.dtype, w.shape)));
                }
                Val::W(w)
            }
            op => {
                // Operands that die here (and appear once among the inputs)
                // are moved to the kernel; the rest are borrowed.
                let dies = |n: &NodeId| {
                    last_use.get(n) == Some(&i) && !kept.contains(n) && ins.iter().filter(|m| *m == n).count() == 1
                };
                let mut owned: HashMap<NodeId, Val> =
                    ins.iter().filter(|n| dies(n)).map(|n| (*n, vals.remove(n).expect("operand evaluated before its user"))).collect();
                let args: Vec<Arg> = ins
                    .iter()
                    .map(|n| match owned.remove(n) {
                        Some(v) => Arg::Own(v),
                        None => Arg::Ref(&vals[n]),
                    })
                    .collect();
                Val::T(evaluator.eval(op, args, &env).map_err(err)?)
            }
        };
        vals.insert(id, v);
        for inp in ins {
            if last_use.get(&inp) == Some(&i) && !kept.contains(&inp) {
                vals.remove(&inp);
            }
        }
    }
    let mut out = StepOutput::default();
    let mut uses: HashMap<NodeId, usize> = HashMap::new();
    for s in &sinks {
        *uses.entry(s.2).or_default() += 1;
    }
    for (is_state, name, v) in sinks {
        let n = uses.get_mut(&v).expect("counted above");
        *n -= 1;
        let val = if *n == 0 { vals.remove(&v).map(Arg::Own) } else { vals.get(&v).map(Arg::Ref) };
        let t = val
            .expect("sink value evaluated")
            .into_tensor()
            .map_err(|m| ExecError { node: name.clone(), op: "sink".into(), message: m })?;
        if is_state {
            out.states.insert(name, t);
        } else {
            out.outputs.insert(name, t);
        }
    }
    Ok(out)
}

/// Check a bound tensor against its declared type and bind the symbols its
/// single-symbol dims name (`batch`, `seq`, `past`, `cap`).
fn bind_shape(name: &str, ty: &graphc_ir::TensorType, t: &Tensor, env: &mut Env) -> Result<(), String> {
    if t.dtype() != ty.dtype || t.shape().len() != ty.shape.len() {
        return Err(format!("`{name}` is declared {ty} but was given {} {:?}", t.dtype(), t.shape()));
    }
    for (d, &actual) in ty.shape.iter().zip(t.shape()) {
        let actual = actual as i64;
        match d.as_const() {
            Some(c) if c != actual => return Err(format!("`{name}` is declared {ty} but was given shape {:?}", t.shape())),
            Some(_) => {}
            None => {
                let syms: Vec<&str> = d.symbols().collect();
                if syms.len() == 1 && *d == graphc_ir::Dim::sym(syms[0]) {
                    if let Some(prev) = env.insert(syms[0].to_string(), actual) {
                        if prev != actual {
                            return Err(format!(
                                "`{name}` binds `{}` = {actual}, but an earlier input bound it to {prev}",
                                syms[0]
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
