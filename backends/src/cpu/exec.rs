//! The run loop every CPU executor shares: bind inputs, states and weights,
//! walk the graph in topological order, free each value after its last use,
//! and hand the values that die at a node to that node by move, so a kernel
//! can write in place (`kv_append` into its cache, a reshape without a
//! copy). What each op computes is the `Evaluator`'s business.

pub(crate) use super::eval::dense;
pub use super::eval::{Arg, Env, Evaluator, Val};
use crate::tensor::{Tensor, WeightSource};
use graphc_ir::op::Op;
use graphc_ir::{Graph, NodeId};
use std::collections::{BTreeMap, HashMap, HashSet};

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
    /// With `Schedule::profile` on: each computed node's time. Empty otherwise.
    pub op_secs: Vec<OpTime>,
}

/// One computed node's time in a profiled forward.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpTime {
    /// The node's position in the schedule.
    pub step: usize,
    pub secs: f64,
    /// Multiply-adds × 2 (a matmul on a weight; 0 for other ops).
    pub flops: f64,
}

/// One op class of a `Profile`: the nodes that share a label (op, and the
/// type and shape of the weight it reads, if any).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpClassTime {
    pub calls: u64,
    pub secs: f64,
    /// Checkpoint bytes the class's calls read (their weight operands).
    pub weight_bytes: u64,
    /// Floating-point operations of the class's calls (matmuls on weights).
    pub flops: f64,
}

/// Where the time of profiled forwards went, by op class (`graphc bench
/// --profile`). Wall time per node on the calling thread, which waits for
/// its workers, so the classes add up to the forward's time less the run
/// loop's own bookkeeping.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Profile {
    /// Forwards recorded.
    pub forwards: u64,
    pub classes: BTreeMap<String, OpClassTime>,
}

impl Profile {
    /// Add one forward's `StepOutput::op_secs`, run under `schedule`.
    pub fn record(&mut self, schedule: &Schedule, op_secs: &[OpTime]) {
        self.forwards += 1;
        for &OpTime { step: i, secs, flops } in op_secs {
            let step = &schedule.steps[i];
            let class = self.classes.entry(step.class.clone()).or_default();
            class.calls += 1;
            class.secs += secs;
            class.weight_bytes += step.weight_bytes;
            class.flops += flops;
        }
    }

    /// Add one forward's launches on a GPU executor (kernel name and
    /// seconds, each run alone: `DeviceGraph::kernel_secs`), each kernel
    /// its own class `kernel NAME` (no weight bytes or flops: a kernel may
    /// be several fused ops).
    pub fn record_kernels(&mut self, kernel_secs: &[(String, f64)]) {
        self.forwards += 1;
        for (name, secs) in kernel_secs {
            let class = self.classes.entry(format!("kernel {name}")).or_default();
            class.calls += 1;
            class.secs += secs;
        }
    }

    /// Seconds of all classes together.
    pub fn total_secs(&self) -> f64 {
        self.classes.values().map(|c| c.secs).sum()
    }
}

/// What the run loop needs of a graph, computed once per graph: the
/// topological order, each node's operands as positions in it, which
/// operands die at each node (moved to the kernel) and which are freed after
/// it. A session keeps its schedule, so a decode step does no graph walking.
pub struct Schedule {
    steps: Vec<Step>,
    /// (is_state, name, position of the value).
    sinks: Vec<(bool, String, usize)>,
    /// Scan every f32 value a node produces and stop at the first NaN or
    /// infinity, naming the node and its layer (`--check-finite`). Off by
    /// default: it reads every activation once more.
    pub check_finite: bool,
    /// Time every computed node (`StepOutput::op_secs`). Off by default.
    pub profile: bool,
    /// Positions computed by `fold`, never by a step.
    folded: Vec<bool>,
    /// The folded values steps read, by position.
    folded_values: HashMap<usize, Val<'static>>,
}

struct Step {
    id: NodeId,
    name: String,
    inputs: Vec<usize>,
    /// Per input: this node is its last user (and it is used once here and
    /// feeds no sink), so it is moved in.
    moved: Vec<bool>,
    /// Inputs whose last use is here (and feed no sink): freed afterwards.
    frees: Vec<usize>,
    /// The node's class in a `Profile`: its op, and each checkpoint weight
    /// it reads by type and shape (`matmul q5_0[2048, 640]`).
    class: String,
    /// Bytes of the checkpoint weights it reads (a matmul's).
    weight_bytes: u64,
    /// A matmul on a weight: its inner dimension, summed over its weights
    /// (flops = 2 · output · k; a matmul_glu has two).
    matmul_k: usize,
}

impl Schedule {
    pub fn new(graph: &Graph) -> Result<Schedule, ExecError> {
        let order = graph.topo_order().map_err(|n| ExecError {
            node: format!("#{}", n.index()),
            op: graph.node(n).op.mnemonic(),
            message: "cycle".into(),
        })?;
        let pos: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let mut last_use: HashMap<usize, usize> = HashMap::new();
        let mut sinks = Vec::new();
        for (i, &n) in order.iter().enumerate() {
            match &graph.node(n).op {
                Op::StateOut { name } => sinks.push((true, name.clone(), pos[&graph.inputs(n)[0]])),
                Op::Output { name } => sinks.push((false, name.clone(), pos[&graph.inputs(n)[0]])),
                _ => {
                    for inp in graph.inputs(n) {
                        last_use.insert(pos[&inp], i);
                    }
                }
            }
        }
        let kept: HashSet<usize> = sinks.iter().map(|s| s.2).collect();
        let steps: Vec<Step> = order
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let inputs: Vec<usize> = graph.inputs(id).iter().map(|n| pos[n]).collect();
                let dies = |p: &usize| last_use.get(p) == Some(&i) && !kept.contains(p);
                let moved = inputs.iter().map(|p| dies(p) && inputs.iter().filter(|q| *q == p).count() == 1).collect();
                let mut frees: Vec<usize> = inputs.iter().copied().filter(dies).collect();
                frees.dedup();
                let (class, weight_bytes, matmul_k) = profile_class(graph, id);
                Step { id, name: format!("%{i}"), inputs, moved, frees, class, weight_bytes, matmul_k }
            })
            .collect();
        let n = steps.len();
        Ok(Schedule { steps, sinks, check_finite: false, profile: false, folded: vec![false; n], folded_values: HashMap::new() })
    }

    /// Fold the graph's weight-only subgraphs (DESIGN.md: "weight-only
    /// subgraphs are folded once, at load"): every value that depends on
    /// weights and constants alone, with a shape that does not depend on
    /// the step, is computed here, once, by `evaluator`; a step reads the
    /// results (Gemma's `1 + w` norm weights, Qwen3-Next's `-exp(A_log)`).
    /// A value a step would read that is larger than `crate::fold::FOLD_MAX_ELEMS` is
    /// left to the steps. Returns how many nodes were folded.
    pub fn fold(&mut self, graph: &Graph, evaluator: &dyn Evaluator, weights: &dyn WeightSource) -> Result<usize, ExecError> {
        let n = self.steps.len();
        let order: Vec<NodeId> = self.steps.iter().map(|s| s.id).collect();
        let folding = crate::fold::plan(graph, &order, &|id| graph.inputs(id), &|_| true);
        let is_weight = |i: usize| matches!(graph.node(self.steps[i].id).op, Op::Weight { .. });
        // What runs here: the weight-only nodes, and the weights they read.
        let constant: Vec<bool> = (0..n).map(|i| is_weight(i) || folding.weight_only.contains(&self.steps[i].id)).collect();
        let keep: Vec<usize> = (0..n).filter(|&i| folding.frontier.contains(&self.steps[i].id)).collect();
        let env = Env::new();
        let mut vals: Vec<Option<Val>> = Vec::with_capacity(n);
        vals.resize_with(n, || None);
        let mut count = 0;
        for i in 0..n {
            if !constant[i] {
                continue;
            }
            let step = &self.steps[i];
            let node = graph.node(step.id);
            let err = |message: String| ExecError { node: step.name.clone(), op: node.op.mnemonic(), message };
            let v = match &node.op {
                Op::Weight { name, .. } => Val::W(weights.weight(name).ok_or_else(|| err(format!("weight `{name}` is not bound")))?),
                op => {
                    let args: Vec<Arg> = step.inputs.iter().map(|&p| Arg::Ref(vals[p].as_ref().expect("folded operand computed"))).collect();
                    count += 1;
                    Val::T(evaluator.eval(op, args, &env).map_err(err)?)
                }
            };
            vals[i] = Some(v);
        }
        for p in keep {
            if let Some(Val::T(t)) = vals[p].take() {
                self.folded_values.insert(p, Val::T(t));
            }
        }
        let weights_at: Vec<bool> = (0..n).map(is_weight).collect();
        for i in 0..n {
            self.folded[i] = constant[i] && !weights_at[i];
            // A folded value is shared by every step: never moved into a kernel.
            let moved: Vec<bool> =
                self.steps[i].inputs.iter().zip(&self.steps[i].moved).map(|(p, &m)| m && !self.folded_values.contains_key(p)).collect();
            self.steps[i].moved = moved;
        }
        Ok(count)
    }

    /// Nodes `fold` computed once instead of every step.
    pub fn folded_nodes(&self) -> usize {
        self.folded.iter().filter(|&&f| f).count()
    }
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
    states: HashMap<String, Tensor>,
    weights: &dyn WeightSource,
) -> Result<StepOutput, ExecError> {
    run_scheduled(&Schedule::new(graph)?, evaluator, graph, inputs, states, weights)
}

/// `run` with a schedule made by `Schedule::new(graph)` for this same graph.
pub fn run_scheduled(
    schedule: &Schedule,
    evaluator: &dyn Evaluator,
    graph: &Graph,
    inputs: &HashMap<String, Tensor>,
    mut states: HashMap<String, Tensor>,
    weights: &dyn WeightSource,
) -> Result<StepOutput, ExecError> {
    let mut env: Env = HashMap::new();
    let mut op_secs = Vec::new();
    let mut vals: Vec<Option<Val>> = Vec::with_capacity(schedule.steps.len());
    vals.resize_with(schedule.steps.len(), || None);
    // The further results of an op that has several, by the producer's
    // position, until their `result` nodes take them.
    let mut further: HashMap<usize, Vec<Option<Tensor>>> = HashMap::new();
    for (i, step) in schedule.steps.iter().enumerate() {
        let node = graph.node(step.id);
        let err = |message: String| ExecError { node: step.name.clone(), op: node.op.mnemonic(), message };
        if node.op.is_sink() || schedule.folded[i] {
            continue;
        }
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
            Op::Result { index } => {
                let taken = further.get_mut(&step.inputs[0]).and_then(|r| r.get_mut(index - 1)).and_then(Option::take);
                Val::T(taken.ok_or_else(|| err(format!("result {index} of its operand was not computed")))?)
            }
            op => {
                // Operands that die here are moved to the kernel; the rest are borrowed.
                let mut owned: Vec<Option<Val>> = step
                    .inputs
                    .iter()
                    .zip(&step.moved)
                    .map(|(&p, &m)| if m { Some(vals[p].take().expect("operand evaluated before its user")) } else { None })
                    .collect();
                let args: Vec<Arg> = step
                    .inputs
                    .iter()
                    .zip(owned.iter_mut())
                    .map(|(&p, o)| match o.take() {
                        Some(v) => Arg::Own(v),
                        None => Arg::Ref(vals[p].as_ref().or_else(|| schedule.folded_values.get(&p)).expect("operand evaluated before its user")),
                    })
                    .collect();
                let started = schedule.profile.then(std::time::Instant::now);
                let t = if super::parts::runs_as_parts(op) {
                    let mut results = super::parts::results(evaluator, op, args, &env).map_err(err)?;
                    further.insert(i, results.drain(1..).map(Some).collect());
                    results.swap_remove(0)
                } else {
                    evaluator.eval(op, args, &env).map_err(err)?
                };
                if let Some(started) = started {
                    let secs = started.elapsed().as_secs_f64();
                    let flops = 2.0 * t.shape().iter().product::<usize>() as f64 * step.matmul_k as f64;
                    op_secs.push(OpTime { step: i, secs, flops });
                }
                if schedule.check_finite {
                    check_finite(graph, step.id, &t).map_err(err)?;
                }
                Val::T(t)
            }
        };
        vals[i] = Some(v);
        for &p in &step.frees {
            vals[p] = None;
        }
    }
    let mut out = StepOutput { op_secs, ..Default::default() };
    let mut uses: HashMap<usize, usize> = HashMap::new();
    for s in &schedule.sinks {
        *uses.entry(s.2).or_default() += 1;
    }
    for (is_state, name, p) in &schedule.sinks {
        let n = uses.get_mut(p).expect("counted above");
        *n -= 1;
        let val = match schedule.folded_values.get(p) {
            Some(v) => Some(Arg::Ref(v)),
            None if *n == 0 => vals[*p].take().map(Arg::Own),
            None => vals[*p].as_ref().map(Arg::Ref),
        };
        let t = val.expect("sink value evaluated").into_tensor().map_err(|m| ExecError { node: name.clone(), op: "sink".into(), message: m })?;
        if *is_state {
            out.states.insert(name.clone(), t);
        } else {
            out.outputs.insert(name.clone(), t);
        }
    }
    Ok(out)
}

/// A node's `Profile` class, and the checkpoint bytes it reads where it
/// reads whole weights (a matmul; a gather reads a few rows).
fn profile_class(graph: &Graph, id: NodeId) -> (String, u64, usize) {
    let op = &graph.node(id).op;
    let mut class = op.mnemonic();
    let inputs = graph.inputs(id);
    // A MoE layer's experts: their count and the first one's weights. They
    // are read only where routed, so how much of them a step reads is not
    // the class's to say.
    let per = match op {
        Op::MoeExperts { bias: true, .. } => Some(6),
        Op::MoeExperts { .. } => Some(3),
        _ => None,
    };
    let inputs = if let Some(per) = per {
        class.push_str(&format!(" {}×", inputs.len().saturating_sub(2) / per));
        &inputs[2.min(inputs.len())..(2 + per).min(inputs.len())]
    } else {
        &inputs[..]
    };
    let (mut bytes, mut k) = (0, 0);
    for &input in inputs {
        if let Op::Weight { ty, .. } = &graph.node(input).op {
            let shape: Vec<i64> = ty.shape.iter().filter_map(|d| d.as_const()).collect();
            class.push_str(&format!(" {}{shape:?}", ty.dtype));
            // The matrices it multiplies by (a norm_matmul's norm weight is a vector).
            if op.is_matmul() && shape.len() == 2 && per.is_none() {
                let elems = shape.iter().product::<i64>().max(0) as u64;
                bytes += ty.dtype.storage_bytes(elems).unwrap_or(0);
                // A matmul_glu's two products over one output: 2k a column.
                k += shape.last().copied().unwrap_or(0).max(0) as usize;
            }
        }
    }
    (class, bytes, k)
}

/// The first NaN or infinity in `t`, if any, as an error naming where the
/// node sits (its layer and its text line).
fn check_finite(graph: &Graph, id: graphc_ir::NodeId, t: &Tensor) -> Result<(), String> {
    let Tensor::F32 { shape, data } = t else { return Ok(()) };
    let Some(i) = data.iter().position(|v| !v.is_finite()) else { return Ok(()) };
    let at = match graph.node(id).layer {
        Some(l) => format!("in layer {l}"),
        None => "outside the layers".to_string(),
    };
    let names = graph.topo_order().map(|o| o.into_iter().enumerate().map(|(i, n)| (n, i)).collect()).unwrap_or_default();
    Err(format!(
        "non-finite value {} at element {i} of its {shape:?} output: the first node to produce one, {at} (`{}`)",
        data[i],
        graphc_ir::text::node_line(graph, id, &names)
    ))
}

/// Check a bound tensor against its declared type and bind the symbols its
/// single-symbol dims name (`batch`, `seq`, `past`, `cap`).
fn bind_shape(name: &str, ty: &graphc_ir::TensorType, t: &Tensor, env: &mut Env) -> Result<(), String> {
    if t.dtype() != ty.dtype {
        return Err(format!("`{name}` is declared {ty} but was given {} {:?}", t.dtype(), t.shape()));
    }
    bind_dims(ty, t.shape(), env).map_err(|m| format!("`{name}` {m}"))
}

/// Bind the symbols a declared type's single-symbol dims name to a
/// concrete shape (every backend's executor does this per step).
pub fn bind_dims(ty: &graphc_ir::TensorType, shape: &[usize], env: &mut Env) -> Result<(), String> {
    if shape.len() != ty.shape.len() {
        return Err(format!("is declared {ty} but was given shape {shape:?}"));
    }
    for (d, &actual) in ty.shape.iter().zip(shape) {
        let actual = actual as i64;
        match d.as_const() {
            Some(c) if c != actual => return Err(format!("is declared {ty} but was given shape {shape:?}")),
            Some(_) => {}
            None => {
                let syms: Vec<&str> = d.symbols().collect();
                if syms.len() == 1 && *d == graphc_ir::Dim::sym(syms[0]) {
                    if let Some(prev) = env.insert(syms[0].to_string(), actual) {
                        if prev != actual {
                            return Err(format!("binds `{}` = {actual}, but an earlier input bound it to {prev}", syms[0]));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
