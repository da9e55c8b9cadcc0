//! A whole graph on wgpu: weights uploaded once (checkpoint bytes, never a
//! dequantized copy), states (the KV caches) resident on the device across
//! steps and appended in place, and each step's kernels recorded into one
//! submission. Only the step's inputs go up and its outputs come back.
//!
//! Every op lowers through `lower::lower`; an op without a kernel stops the
//! step with an error naming the node, the op and the target — the graph is
//! never split with a silent CPU fallback. `reshape` is no kernel (dense
//! buffers are reinterpreted); a `state_out` of the state's own buffer (what
//! `kv_append` produces) is no copy.
//!
//! Buffer plan: every kernel result has a slot, fixed from the graph alone:
//! slots are handed out in the step's order and a slot is free again after
//! its value's last use (through any `reshape` of it), so later kernels of
//! the same step reuse it — the device runs the step's launches in order.
//! A slot keeps one buffer per size it has held, so a node writes the same
//! buffer every step of the same shapes: a decode step in the steady state
//! allocates nothing and binds exactly what the step before bound (wgpu
//! builds no bind group). Results that become state or stay folded have no
//! slot; step outputs keep theirs to the end of the step.
//!
//! Fusion: the groups `fuse` forms run as one kernel each, where the
//! group's root stands; `state_out` and `output` take their values once
//! every kernel of the step is placed. Replay: a step with the recorded
//! step's dims and input shapes runs its launches again (`Replay`).

use crate::device::{bind_args, call_buffers, op_scratch, tensor_bytes, Device, Launch};
use crate::fuse::{Fused, Group, Groups};
use crate::lower::{lower, lower_with, Arg, ArgInfo, KernelCall, StepHints};
use crate::GpuError;
use graphc_backends::{Tensor, WeightSource};
use graphc_ir::{DType, Dim, Graph, NodeId, Op};
use std::collections::HashMap;
use std::sync::Arc;

/// A value on the device: its buffer, storage type and concrete shape.
struct DeviceValue<B> {
    buffer: B,
    dtype: DType,
    shape: Vec<usize>,
}

impl<B: Clone> Clone for DeviceValue<B> {
    fn clone(&self) -> Self {
        DeviceValue { buffer: self.buffer.clone(), dtype: self.dtype, shape: self.shape.clone() }
    }
}

pub struct GpuGraph<D: Device> {
    device: Arc<D>,
    graph: Graph,
    order: Vec<NodeId>,
    weights: HashMap<String, D::Buffer>,
    states: HashMap<String, DeviceValue<D::Buffer>>,
    plan: BufferPlan,
    /// Fused groups (`fuse`), by root.
    groups: Groups,
    /// Nodes each reader's kernel forms for itself (`fuse::formed_in_readers`):
    /// no launch, no value.
    formed_in_readers: std::collections::HashSet<NodeId>,
    /// Nodes a group's kernel writes besides its root's value → that root.
    written_at: HashMap<NodeId, NodeId>,
    /// Each slot's buffers, by size in bytes.
    slot_buffers: HashMap<(usize, u64), D::Buffer>,
    /// Each step input's buffer, rewritten by the next step where it fits.
    input_buffers: HashMap<String, D::Buffer>,
    /// Weight-only values: computed in the first step, then kept.
    folding: graphc_backends::fold::Folding,
    /// The kept ones, once the first step has run.
    folded: Option<HashMap<NodeId, DeviceValue<D::Buffer>>>,
    /// Kernel launches of the last step (evidence the device ran it).
    pub last_launches: usize,
    /// Permutes run as no copy so far (`keeps_order`).
    pub aliased_permutes: usize,
    /// Device buffers allocated for kernel results so far (a decode step in
    /// the steady state adds none).
    pub result_allocations: usize,
    /// Each node's kernel calls (with their kernels' hashes) for the op (its
    /// symbolic bounds resolved) and input shapes it last ran on: a decode
    /// step lowers nothing anew.
    call_cache: CallCache<D::Buffer>,
    /// The step inputs every attention reads its positions from, where
    /// each reads a step input: the keys a step's queries see are then
    /// known on the host (`StepHints`).
    attention_positions: Option<Vec<String>>,
    /// The last recorded step (`Replay`), where the graph allows one: its
    /// states are all appended in place and no state keeps a step input.
    replay: Option<Replay<D::Buffer>>,
    replayable: bool,
    /// Steps run by replaying a recorded one so far.
    pub replayed_steps: usize,
    /// Time each launch on its own (`set_timing`): every launch its own
    /// submission, waited for; no step replayed meanwhile.
    timing: bool,
    /// With `timing`, the last step's launches: kernel name and seconds.
    kernel_secs: Vec<(String, f64)>,
    /// Binding objects (wgpu's bind groups) this graph's runs built: the
    /// device may be shared with other sessions, so its runs are counted
    /// here, not read off the device.
    bindings_built: usize,
    /// Host time of the last step up to its submission (preparing,
    /// encoding, submitting; not the wait for its results), in µs.
    pub last_host_us: u64,
}

/// A decode step's work, kept to be run again: a later step whose symbolic
/// dims and input shapes are the same, whose inputs were rewritten in their
/// buffers, and whose states are appended in place launches the same
/// kernels on the same buffers with the same parameters (positions and
/// lengths live in buffers), so only the host checks on its inputs run
/// again before the launches. Recorded from the second step on (the first
/// folds weight-only values, which later steps do not run).
struct Replay<B> {
    key: StepKey,
    /// Each input's buffer when the step was recorded.
    input_buffers: HashMap<String, B>,
    calls: Vec<(KeyedCalls<B>, usize, Vec<B>)>,
    outputs: Vec<(String, DeviceValue<B>)>,
    checks: Vec<HostCheck>,
    aliased_permutes: usize,
    /// What the target built to run these launches (`Device::run_prepared`).
    prepared: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// What fixes a step's launches: the symbolic dims' values, and every
/// input's name, type and shape.
type StepKey = (Vec<(String, i64)>, Vec<(String, DType, Vec<usize>)>);

/// A check the kernels cannot make, rerun on each replayed step's inputs.
enum HostCheck {
    /// `host_checks` of a node's resolved op on its operands.
    Op { node: NodeId, op: Op, args: Vec<NodeId>, infos: Vec<ArgInfo> },
    /// `to_host`'s checks on a step input.
    ToHost { node: NodeId, input: String, nonempty: bool, bound: Option<u64> },
}

/// An op's kernel calls, each with its kernel's hash and the buffers it
/// owns (host constants, uploaded once; the op's scratch), made once.
type KeyedCalls<B> = Arc<Vec<(KernelCall, u64, Vec<B>)>>;

/// Per node: the op, input shapes and hints its calls were lowered for.
type CallCache<B> = HashMap<NodeId, (Op, Vec<ArgInfo>, StepHints, KeyedCalls<B>)>;

/// Which kernel results share a buffer, from the graph alone.
struct BufferPlan {
    /// The slot of each kernel result that has one.
    slot: HashMap<NodeId, usize>,
    /// Step inputs whose buffer a state may keep: never rewritten in place.
    kept_inputs: std::collections::HashSet<String>,
}

impl BufferPlan {
    /// `written_at` nodes are written by their group root's kernel, so
    /// what they read is used at the root's position, and a `written_at`
    /// node takes its slot there too (before or after its own position in
    /// `order`).
    /// `kept` values (the folded frontier) never return to the pool.
    /// `formed` nodes (`fuse::formed_in_readers`) have no buffer: their
    /// readers read what they read, so that is used where the readers run.
    fn new(
        graph: &Graph,
        order: &[NodeId],
        written_at: &HashMap<NodeId, NodeId>,
        formed: &std::collections::HashSet<NodeId>,
        kept: &std::collections::HashSet<NodeId>,
    ) -> BufferPlan {
        let position: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let runs_at = |id: NodeId| position[&crate::fuse::launched_by(written_at, id)];
        // The node whose buffer a value lives in: itself, or through
        // `reshape` and in-place `kv_append` the value it aliases.
        let mut root = HashMap::new();
        let mut pooled = std::collections::HashSet::new();
        for &id in order {
            let inputs = graph.inputs(id);
            let r = match &graph.node(id).op {
                Op::Reshape { .. } | Op::KvAppend { .. } | Op::ToHost { .. } => root[&inputs[0]],
                // A cache appended in place by its producer (`qkv_rope`'s).
                Op::Result { index } => match graph.node(inputs[0]).op.written_over(*index) {
                    Some(i) => root[&graph.inputs(inputs[0])[i]],
                    None => id,
                },
                Op::Input { .. } | Op::Weight { .. } | Op::State { .. } | Op::Const { .. } | Op::StateOut { .. } | Op::Output { .. } => id,
                _ if formed.contains(&id) => id,
                _ => {
                    pooled.insert(id);
                    id
                }
            };
            root.insert(id, r);
        }
        // The buffers a value may live in: its root's, and where that root
        // is a `permute`, its input's too (a permute that keeps the memory
        // order runs as no copy: `keeps_order`).
        let aliases = |v: NodeId| -> Vec<NodeId> {
            let mut out = vec![root[&v]];
            while let Some(&last) = out.last().filter(|&&r| matches!(graph.node(r).op, Op::Permute { .. })) {
                out.push(root[&graph.inputs(last)[0]]);
            }
            out
        };
        for k in kept {
            for r in aliases(*k) {
                pooled.remove(&r);
            }
        }
        let mut last_use: HashMap<NodeId, usize> = HashMap::new();
        let mut at_end = vec![];
        let mut kept_inputs = std::collections::HashSet::new();
        for (pos, &id) in order.iter().enumerate() {
            last_use.entry(root[&id]).or_insert(runs_at(id).max(pos));
            let read = graph.inputs(id).into_iter().flat_map(|i| if formed.contains(&i) { graph.inputs(i) } else { vec![i] });
            for input in read.collect::<Vec<_>>() {
                for r in aliases(input) {
                    match &graph.node(id).op {
                        Op::StateOut { .. } => {
                            pooled.remove(&r);
                            if let Op::Input { name, .. } = &graph.node(r).op {
                                kept_inputs.insert(name.clone());
                            }
                        }
                        Op::Output { .. } => at_end.push(r),
                        _ => {
                            let at = runs_at(id).max(pos);
                            let e = last_use.entry(r).or_insert(at);
                            *e = (*e).max(at);
                        }
                    }
                }
            }
        }
        let mut release_at: HashMap<usize, Vec<NodeId>> = HashMap::new();
        for (r, pos) in last_use {
            if pooled.contains(&r) && !at_end.contains(&r) {
                release_at.entry(pos).or_default().push(r);
            }
        }
        // Hand out slots in order (a released slot first, the last released
        // first); a slot frees after its value's last use, never within the
        // node that takes it. Output values are never released.
        let mut slot = HashMap::new();
        let (mut free, mut slots) = (vec![], 0);
        // The nodes a group root's kernel writes: the root, then the rest.
        let mut written_by: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
        for (&node, &group_root) in written_at {
            written_by.entry(group_root).or_default().push(node);
        }
        for nodes in written_by.values_mut() {
            nodes.sort_by_key(|n| position[n]);
        }
        for (pos, &id) in order.iter().enumerate() {
            let written = std::iter::once(id).chain(written_by.get(&id).into_iter().flatten().copied());
            for node in written.filter(|n| pooled.contains(n) && (*n != id || !written_at.contains_key(n))) {
                let s = free.pop().unwrap_or_else(|| {
                    slots += 1;
                    slots - 1
                });
                slot.insert(node, s);
            }
            let mut released: Vec<usize> = release_at.get(&pos).into_iter().flatten().filter_map(|r| slot.get(r).copied()).collect();
            released.sort_unstable();
            free.extend(released);
        }
        BufferPlan { slot, kept_inputs }
    }
}

fn node_err(graph: &Graph, id: NodeId, message: String) -> GpuError {
    let layer = graph.node(id).layer.map(|l| format!(" in layer {l}")).unwrap_or_default();
    GpuError::Launch { kernel: format!("node #{}{layer} ({})", id.index(), graph.node(id).op.mnemonic()), message }
}

impl<D: Device> GpuGraph<D> {
    /// Uploads every weight the graph names, once.
    pub fn new(device: Arc<D>, graph: &Graph, weights: &dyn WeightSource) -> Result<GpuGraph<D>, GpuError> {
        let order = graph.topo_order().map_err(|n| node_err(graph, n, "the graph has a cycle".into()))?;
        let mut uploaded = HashMap::new();
        for &id in &order {
            if let Op::Weight { name, ty } = &graph.node(id).op {
                if uploaded.contains_key(name) {
                    continue;
                }
                let w = weights.weight(name).ok_or_else(|| node_err(graph, id, format!("weight `{name}` is not bound")))?;
                let want: Vec<i64> = ty.shape.iter().filter_map(|d| d.as_const()).collect();
                let got: Vec<i64> = w.shape.iter().map(|&d| d as i64).collect();
                if w.dtype != ty.dtype || want != got {
                    return Err(node_err(graph, id, format!("weight `{name}` is declared {ty} but is bound to {} {:?}", w.dtype, w.shape)));
                }
                uploaded.insert(name.clone(), device.upload(w.bytes)?);
            }
        }
        let groups = crate::fuse::groups(graph, &order, device.binding_limits());
        // Where each co-produced node's value is written: its group's root.
        let written_at: HashMap<NodeId, NodeId> = groups.iter().flat_map(|(&root, g)| g.also.iter().map(move |&n| (n, root))).collect();
        let operands = |id: NodeId| groups.get(&id).map_or_else(|| graph.inputs(id), |g| g.leaves.clone());
        let formed_in_readers = crate::fuse::formed_in_readers(graph, &groups);
        let launched = |id: NodeId| !written_at.contains_key(&id) && !formed_in_readers.contains(&id);
        let folding = graphc_backends::fold::plan(graph, &order, &operands, &launched);
        let plan = BufferPlan::new(graph, &order, &written_at, &formed_in_readers, &folding.frontier);
        // Every state's next value is its own buffer, appended in place.
        let in_place = |state_out: NodeId, name: &str| {
            let mut v = graph.inputs(state_out)[0];
            loop {
                match &graph.node(v).op {
                    Op::KvAppend { .. } | Op::Reshape { .. } => v = graph.inputs(v)[0],
                    Op::Result { index } => match graph.node(graph.inputs(v)[0]).op.written_over(*index) {
                        Some(i) => v = graph.inputs(graph.inputs(v)[0])[i],
                        None => return false,
                    },
                    Op::State { name: n, .. } => return n == name,
                    _ => return false,
                }
            }
        };
        let attention_positions = order
            .iter()
            .filter_map(|&id| match graph.node(id).op {
                Op::Attention { .. } | Op::AttentionProject { .. } => Some(graph.inputs(id)[3]),
                Op::NormRopeAttention { .. } => Some(graph.inputs(id)[5]),
                _ => None,
            })
            .map(|positions| match &graph.node(positions).op {
                Op::Input { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect();
        let replayable = plan.kept_inputs.is_empty()
            && order.iter().all(|&id| match &graph.node(id).op {
                Op::StateOut { name } => in_place(id, name),
                _ => true,
            });
        Ok(GpuGraph {
            device,
            graph: graph.clone(),
            order,
            weights: uploaded,
            states: HashMap::new(),
            plan,
            groups,
            written_at,
            formed_in_readers,
            slot_buffers: HashMap::new(),
            input_buffers: HashMap::new(),
            folding,
            folded: None,
            last_launches: 0,
            aliased_permutes: 0,
            result_allocations: 0,
            call_cache: HashMap::new(),
            attention_positions,
            replay: None,
            replayable,
            replayed_steps: 0,
            bindings_built: 0,
            timing: false,
            kernel_secs: Vec::new(),
            last_host_us: 0,
        })
    }

    /// Sets a state (a KV cache at capacity) from the host.
    pub fn set_state(&mut self, name: &str, t: &Tensor) -> Result<(), GpuError> {
        let value = DeviceValue { buffer: self.device.upload(tensor_bytes(t))?, dtype: t.dtype(), shape: t.shape().to_vec() };
        self.states.insert(name.to_string(), value);
        // The recorded launches name the old buffer.
        self.replay = None;
        Ok(())
    }

    /// Elementwise ops folded into another's kernel: each `chain`'s ops
    /// but the one its kernel is launched for.
    pub fn fused_elementwise(&self) -> usize {
        self.graph.nodes().filter_map(|n| if let Op::Chain { expr } = &n.op { Some(expr.ops() - 1) } else { None }).sum()
    }

    /// Matmuls written by another matmul's kernel (`stacked_matmuls`'
    /// count: a layer's q and k, launched with its v).
    pub fn stacked_matmuls(&self) -> usize {
        self.groups.values().filter(|g| matches!(g.group, Group::Stacked { .. })).map(|g| g.also.len()).sum()
    }

    /// Layer heads (`qkv_rope`: q/k/v projections, rotations and appends)
    /// run as one kernel.
    pub fn qkv_rope_heads(&self) -> usize {
        self.groups.keys().filter(|&&id| matches!(self.graph.node(id).op, Op::QkvRope { .. })).count()
    }

    /// Ops launched stacked with another of their kind (`paired_ops`'
    /// count: a layer's q/k ropes, its K/V appends).
    pub fn paired_ops(&self) -> usize {
        self.groups.values().filter(|g| matches!(g.group, Group::Pair { .. })).count()
    }

    /// Attentions projected by head in their own kernel (`attention_project`,
    /// and `norm_rope_attention`, which projects so too).
    pub fn attention_projections(&self) -> usize {
        self.graph.nodes().filter(|n| matches!(n.op, Op::AttentionProject { .. } | Op::NormRopeAttention { .. })).count()
    }

    /// Attentions that norm and rotate their q and new k and append k and v
    /// in their own kernels (`norm_rope_attention`).
    pub fn normed_attentions(&self) -> usize {
        self.graph.nodes().filter(|n| matches!(n.op, Op::NormRopeAttention { .. })).count()
    }

    /// Sums of heads' shares (`add_partials`) formed by their readers'
    /// kernels, launching nothing (`fuse::formed_in_readers`).
    pub fn partials_formed_in_readers(&self) -> usize {
        self.formed_in_readers.len()
    }

    /// Residual adds written by the following norm's kernel (`add_norm`).
    pub fn fused_residual_norms(&self) -> usize {
        self.groups.keys().filter(|&&id| matches!(self.graph.node(id).op, Op::AddNorm { .. })).count()
    }

    /// Every counter, by the name sessions report it under: launches of the
    /// last step, result buffers allocated (the buffer plan's evidence),
    /// weight-only nodes folded, the target's binding objects built, permutes
    /// run as no copy, each fusion group's count, steps replayed, and the
    /// last step's host time up to its submission (a measurement, in µs,
    /// never asserted).
    pub fn counters(&self) -> std::collections::BTreeMap<&'static str, u64> {
        [
            ("device_launches_last_step", self.last_launches as u64),
            ("device_result_allocations", self.result_allocations as u64),
            ("device_folded_nodes", self.folded_nodes() as u64),
            ("device_bindings_built", self.bindings_built as u64),
            ("device_aliased_permutes", self.aliased_permutes as u64),
            ("device_fused_elementwise", self.fused_elementwise() as u64),
            ("device_qkv_rope_heads", self.qkv_rope_heads() as u64),
            ("device_fused_residual_norms", self.fused_residual_norms() as u64),
            ("device_stacked_matmuls", self.stacked_matmuls() as u64),
            ("device_paired_ops", self.paired_ops() as u64),
            ("device_attention_projections", self.attention_projections() as u64),
            ("device_normed_attentions", self.normed_attentions() as u64),
            ("device_partials_in_readers", self.partials_formed_in_readers() as u64),
            ("device_replayed_steps", self.replayed_steps as u64),
            ("device_host_us_last_step", self.last_host_us),
        ]
        .into()
    }

    /// Weight-only nodes computed once, in the first step, and not again.
    pub fn folded_nodes(&self) -> usize {
        self.folding.weight_only.len()
    }

    /// Reads a state back to the host.
    pub fn state(&self, name: &str) -> Result<Option<Tensor>, GpuError> {
        let Some(v) = self.states.get(name) else { return Ok(None) };
        Ok(Some(Tensor::f32(v.shape.clone(), self.device.read_f32(&v.buffer)?)))
    }

    /// One step: `inputs` by name; returns the graph's outputs. States are
    /// read and written on the device.
    pub fn step(&mut self, inputs: &HashMap<String, Tensor>) -> Result<HashMap<String, Tensor>, GpuError> {
        let started = std::time::Instant::now();
        let graph = &self.graph;
        let mut env: HashMap<String, i64> = HashMap::new();
        for &id in &self.order {
            let (name, ty, shape) = match &graph.node(id).op {
                Op::Input { name, ty } => (name, ty, inputs.get(name).map(|t| t.shape().to_vec())),
                Op::State { name, ty } => (name, ty, self.states.get(name).map(|v| v.shape.clone())),
                _ => continue,
            };
            let shape = shape.ok_or_else(|| node_err(graph, id, format!("no value given for `{name}`")))?;
            graphc_backends::cpu::exec::bind_dims(ty, &shape, &mut env).map_err(|m| node_err(graph, id, format!("`{name}` {m}")))?;
        }
        let concrete = |id: NodeId| -> Result<Vec<usize>, GpuError> {
            let ty = graph.node(id).ty.as_ref().ok_or_else(|| node_err(graph, id, "the node has no type (verify the graph first)".into()))?;
            ty.shape.iter().map(|d| d.eval(&env).map(|v| v as usize)).collect::<Result<_, _>>().map_err(|m| node_err(graph, id, m))
        };
        // Step inputs to the device: the last step's buffer for each,
        // rewritten where it fits, unless a state may have kept it.
        let mut input_values: HashMap<NodeId, DeviceValue<D::Buffer>> = HashMap::new();
        let mut key_inputs = vec![];
        for &id in &self.order {
            let Op::Input { name, ty } = &graph.node(id).op else { continue };
            let t = &inputs[name];
            if t.dtype() != ty.dtype {
                return Err(node_err(graph, id, format!("`{name}` is declared {ty} but was given {}", t.dtype())));
            }
            let previous = if self.plan.kept_inputs.contains(name) { None } else { self.input_buffers.get(name) };
            let buffer = self.device.upload_reusing(previous, tensor_bytes(t))?;
            self.input_buffers.insert(name.clone(), buffer.clone());
            input_values.insert(id, DeviceValue { buffer, dtype: t.dtype(), shape: t.shape().to_vec() });
            key_inputs.push((name.clone(), t.dtype(), t.shape().to_vec()));
        }
        // The keys this step's attentions can see, in whole blocks
        // (`keys_bound`): a step past the bound lowers and records anew.
        let attention_keys = self.attention_positions.as_ref().map(|names| {
            let last = names.iter().flat_map(|n| inputs[n].as_i32().unwrap_or_default()).fold(0, |m, &p| m.max(p.max(0) as usize));
            crate::kernels::attention::keys_bound(last)
        });
        let hints = StepHints { attention_keys };
        let mut key_dims: Vec<(String, i64)> = env.iter().map(|(k, v)| (k.clone(), *v)).collect();
        key_dims.extend(attention_keys.map(|k| ("attention keys".to_string(), k as i64)));
        key_dims.sort();
        let key = (key_dims, key_inputs);
        if let Some(mut replay) = self.replay.take_if(|r| r.key == key && !self.timing) {
            let same_inputs = replay.input_buffers.iter().all(|(name, b)| self.device.same_buffer(b, &self.input_buffers[name]));
            if same_inputs {
                for check in &replay.checks {
                    match check {
                        HostCheck::Op { node, op, args, infos } => {
                            self.host_checks(op, args, infos, inputs).map_err(|m| node_err(graph, *node, m))?
                        }
                        HostCheck::ToHost { node, input, nonempty, bound } => {
                            graphc_backends::cpu::reference::to_host_checks(&inputs[input], *nonempty, *bound)
                                .map_err(|m| node_err(graph, *node, m))?
                        }
                    }
                }
                // What the target kept from the last run of these launches,
                // else the launches themselves (and it keeps what it builds).
                let built_before = self.device.bindings_built();
                let reran = match &replay.prepared {
                    Some(prepared) => self.device.rerun(prepared.as_ref())?,
                    None => false,
                };
                if !reran {
                    self.device.run_prepared(&launches_of(&replay.calls), &mut replay.prepared)?;
                }
                self.bindings_built += self.device.bindings_built() - built_before;
                self.last_host_us = started.elapsed().as_micros() as u64;
                self.last_launches = replay.calls.len();
                self.aliased_permutes += replay.aliased_permutes;
                self.replayed_steps += 1;
                let mut out = HashMap::new();
                for (name, v) in &replay.outputs {
                    out.insert(name.clone(), Tensor::f32(v.shape.clone(), self.device.read_f32(&v.buffer)?));
                }
                self.replay = Some(replay);
                return Ok(out);
            }
            self.replay = Some(replay);
        }
        let recording = self.replayable && self.folded.is_some();
        let mut sinks = vec![];
        let mut checks = vec![];
        let aliased_before = self.aliased_permutes;

        let mut values: HashMap<NodeId, DeviceValue<D::Buffer>> = HashMap::new();
        // Weights, step inputs and states first: a group's kernel, run
        // where its root stands, may read one that stands later in the
        // order (a stacked group's later weights, `QkvRope`'s caches and
        // lengths).
        for &id in &self.order {
            let value = match &graph.node(id).op {
                Op::Weight { name, ty } => DeviceValue { buffer: self.weights[name].clone(), dtype: ty.dtype, shape: concrete(id)? },
                Op::Input { .. } => input_values[&id].clone(),
                Op::State { name, .. } => self.states[name].clone(),
                _ => continue,
            };
            values.insert(id, value);
        }
        let mut calls = vec![];
        let mut outputs = vec![];
        for &id in &self.order {
            if let (Some(folded), true) = (&self.folded, self.folding.weight_only.contains(&id)) {
                // Only weight-only nodes read a weight-only value outside
                // the frontier, and they do not run either.
                if let Some(v) = folded.get(&id) {
                    values.insert(id, v.clone());
                }
                continue;
            }
            // Written by its group's kernel, at the group's root; or formed by its readers.
            if self.written_at.contains_key(&id) || self.formed_in_readers.contains(&id) {
                continue;
            }
            let node = graph.node(id);
            let args: Vec<NodeId> = graph.inputs(id);
            let value = match &node.op {
                Op::Input { .. } | Op::Weight { .. } | Op::State { .. } => continue,
                Op::Const { value, .. } => {
                    let shape = concrete(id)?;
                    let data = vec![*value; shape.iter().product()];
                    DeviceValue { buffer: self.device.upload(bytemuck::cast_slice(&data))?, dtype: DType::F32, shape }
                }
                Op::Reshape { .. } => DeviceValue { shape: concrete(id)?, ..values[&args[0]].clone() },
                // Decode's `[b, 1, h, d] -> [b, h, 1, d]`: the same bytes.
                Op::Permute { perm } if keeps_order(perm, &values[&args[0]].shape) => {
                    self.aliased_permutes += 1;
                    DeviceValue { shape: concrete(id)?, ..values[&args[0]].clone() }
                }
                Op::ToHost { nonempty, bound } => {
                    // The value stays on the device; its checks run here, on
                    // the host copy a step input has (reading back a device
                    // value mid-step would split the submission).
                    let input = match &graph.node(args[0]).op {
                        Op::Input { name, .. } => name,
                        _ => return Err(node_err(graph, id, "to_host of a value computed on the device is not supported yet".into())),
                    };
                    graphc_backends::cpu::reference::to_host_checks(&inputs[input], *nonempty, *bound).map_err(|m| node_err(graph, id, m))?;
                    checks.push(HostCheck::ToHost { node: id, input: input.clone(), nonempty: *nonempty, bound: *bound });
                    values[&args[0]].clone()
                }
                // Taken once every kernel of the step is placed: a paired
                // node's value is written where its pair's root stands.
                Op::StateOut { .. } | Op::Output { .. } => {
                    sinks.push(id);
                    continue;
                }
                op => {
                    let operand_ids = match self.groups.get(&id) {
                        Some(g) => g.leaves.clone(),
                        None => args.clone(),
                    };
                    let infos: Vec<ArgInfo> =
                        operand_ids.iter().map(|a| ArgInfo { dtype: values[a].dtype, shape: values[a].shape.clone() }).collect();
                    let op = resolve_dims(op, &env).map_err(|m| node_err(graph, id, m))?;
                    // Its kernel writes every further result into a `result` node's value.
                    if op.results() > 1 && !self.groups.contains_key(&id) {
                        return Err(node_err(
                            graph,
                            id,
                            format!("{} has {} results, and not each is read by a `result` node", op.mnemonic(), op.results()),
                        ));
                    }
                    // The host checks of each op the launch runs on its own operands.
                    let mut checked = vec![];
                    match self.groups.get(&id) {
                        None => checked.push((id, op.clone(), args.clone(), infos.clone())),
                        Some(Fused { group: Group::Pair { root_inputs }, also, .. }) => {
                            let other = also[0];
                            let other_op = resolve_dims(&graph.node(other).op, &env).map_err(|m| node_err(graph, other, m))?;
                            checked.push((id, op.clone(), args.clone(), infos[..*root_inputs].to_vec()));
                            checked.push((other, other_op, graph.inputs(other), infos[*root_inputs..].to_vec()));
                        }
                        // Its own checks (a `qkv_rope`'s appends), on its own operands.
                        Some(Fused { group: Group::Results, .. }) => checked.push((id, op.clone(), args.clone(), infos.clone())),
                        Some(_) => {}
                    }
                    for (node, node_op, node_args, node_infos) in checked {
                        self.host_checks(&node_op, &node_args, &node_infos, inputs).map_err(|m| node_err(graph, node, m))?;
                        if matches!(
                            node_op,
                            Op::KvAppend { .. }
                                | Op::QkvRope { .. }
                                | Op::NormRopeAttention { .. }
                                | Op::CausalConv1d { .. }
                                | Op::GatedDeltaRule
                                | Op::Gather
                        ) {
                            checks.push(HostCheck::Op { node, op: node_op, args: node_args, infos: node_infos });
                        }
                    }
                    // Only an attention's calls depend on the step's hints.
                    let hints = if matches!(op, Op::Attention { .. } | Op::AttentionProject { .. } | Op::NormRopeAttention { .. }) {
                        hints
                    } else {
                        StepHints::default()
                    };
                    let op_calls = match self.call_cache.get(&id) {
                        Some((cached_op, cached, cached_hints, calls)) if *cached == infos && *cached_op == op && *cached_hints == hints => {
                            calls.clone()
                        }
                        _ => {
                            let calls = match self.groups.get(&id).map(|g| &g.group) {
                                Some(Group::Stacked { norm }) => {
                                    crate::lower::lower_stacked_matmuls(&infos, *norm, self.device.target()).map(|c| vec![c])
                                }
                                Some(Group::Pair { root_inputs }) => {
                                    let other = self.groups[&id].also[0];
                                    let other_op = resolve_dims(&graph.node(other).op, &env).map_err(|m| node_err(graph, other, m))?;
                                    let limits = self.device.binding_limits();
                                    let one = |op: &Op, infos: &[ArgInfo]| -> Result<KernelCall, crate::lower::LowerError> {
                                        let mut calls = lower(op, infos, self.device.target(), limits)?;
                                        // Rope and kv_append lower to one call each.
                                        let call = calls.pop().expect("one call");
                                        assert!(calls.is_empty(), "a paired op lowers to one call");
                                        Ok(call)
                                    };
                                    let (root_infos, other_infos) = infos.split_at(*root_inputs);
                                    let pair = one(&op, root_infos).and_then(|a| Ok((a, one(&other_op, other_infos)?)));
                                    pair.map(|(a, b)| {
                                        let stacked = crate::stack::stack_calls(&a, &b, *root_inputs);
                                        // More buffers than one kernel may bind: the two calls.
                                        if stacked.kernel.buffers.len() as u32 > limits.max_buffers {
                                            vec![a, crate::stack::after(&b, *root_inputs)]
                                        } else {
                                            vec![stacked]
                                        }
                                    })
                                }
                                Some(Group::Partials { operand, eps }) => {
                                    crate::lower::lower_with_partials(&op, &infos, *operand, *eps, self.device.target(), self.device.binding_limits())
                                }
                                Some(Group::Results) | None => lower_with(&op, &infos, self.device.target(), self.device.binding_limits(), hints),
                            };
                            let calls = calls.map_err(|e| node_err(graph, id, e.to_string()))?;
                            for c in &calls {
                                crate::cuda_rt::record(&c.kernel, self.device.settings()).map_err(|e| node_err(graph, id, e.to_string()))?;
                            }
                            let scratch = op_scratch(self.device.as_ref(), &calls)?;
                            let keyed: KeyedCalls<D::Buffer> = Arc::new(
                                calls
                                    .into_iter()
                                    .map(|c| {
                                        let key = c.kernel.hash();
                                        let owned = call_buffers(self.device.as_ref(), &c.args, scratch.as_ref())?;
                                        Ok((c, key, owned))
                                    })
                                    .collect::<Result<_, GpuError>>()?,
                            );
                            self.call_cache.insert(id, (op.clone(), infos.clone(), hints, keyed.clone()));
                            keyed
                        }
                    };
                    let args = operand_ids;
                    let out_shape = op_calls[0].0.out_shape.clone();
                    let in_place = op_calls[0].0.args.iter().find_map(|a| if let Arg::InPlace(i) = a { Some(*i) } else { None });
                    let operands: Vec<D::Buffer> = args.iter().map(|a| values[a].buffer.clone()).collect();
                    let mut result_buffer = |node: NodeId, shape: &[usize]| -> Result<D::Buffer, GpuError> {
                        // Every kernel writes all of its result, so a
                        // reused buffer needs no clearing.
                        let bytes = (shape.iter().product::<usize>() as u64 * 4).max(4);
                        let slot = self.plan.slot.get(&node).copied();
                        if let Some(b) = slot.and_then(|slot| self.slot_buffers.get(&(slot, bytes))) {
                            return Ok(b.clone());
                        }
                        self.result_allocations += 1;
                        let b = self.device.zeros(bytes)?;
                        // Without a slot (a state or a kept value), a buffer of its own.
                        if let Some(slot) = slot {
                            self.slot_buffers.insert((slot, bytes), b.clone());
                        }
                        Ok(b)
                    };
                    let result = match in_place {
                        Some(i) => operands[i].clone(),
                        None => result_buffer(id, &out_shape)?,
                    };
                    // A group's further results: its co-produced nodes' values.
                    let also = self.groups.get(&id).map(|g| g.also.clone()).unwrap_or_default();
                    // (In whichever of the group's calls names them.)
                    let further = op_calls.iter().flat_map(|c| c.0.args.iter()).filter(|a| matches!(a, Arg::ExtraOutput(_) | Arg::ExtraInPlace(_)));
                    let mut extra = vec![];
                    for (&node, arg) in also.iter().zip(further) {
                        let value = match arg {
                            Arg::ExtraOutput(shape) => {
                                let buffer = result_buffer(node, shape)?;
                                extra.push(buffer.clone());
                                DeviceValue { buffer, dtype: DType::F32, shape: shape.clone() }
                            }
                            // In place: the operand's buffer, under the node's shape.
                            Arg::ExtraInPlace(i) => DeviceValue { buffer: operands[*i].clone(), dtype: DType::F32, shape: concrete(node)? },
                            _ => unreachable!("filtered above"),
                        };
                        values.insert(node, value);
                    }
                    for i in 0..op_calls.len() {
                        let (call, _, constants) = &op_calls[i];
                        let buffers = bind_args(self.device.as_ref(), &call.args, &operands, &result, &extra, constants);
                        calls.push((op_calls.clone(), i, buffers));
                    }
                    DeviceValue { buffer: result, dtype: DType::F32, shape: out_shape }
                }
            };
            values.insert(id, value);
        }
        for id in sinks {
            let value = values[&graph.inputs(id)[0]].clone();
            match &graph.node(id).op {
                Op::StateOut { name } => {
                    self.states.insert(name.clone(), value);
                }
                Op::Output { name } => outputs.push((name.clone(), value)),
                _ => unreachable!("sinks are state_out and output nodes"),
            }
        }
        let built_before = self.device.bindings_built();
        if self.timing {
            // Each launch alone, from an idle device to its end: kernel time
            // plus one submission's overhead (which a step pays per launch
            // where it does not replay).
            self.kernel_secs.clear();
            self.device.wait()?;
            for launch in &launches_of(&calls) {
                let started = std::time::Instant::now();
                self.device.run(std::slice::from_ref(launch))?;
                self.device.wait()?;
                self.kernel_secs.push((launch.kernel.name.clone(), started.elapsed().as_secs_f64()));
            }
        } else {
            self.device.run(&launches_of(&calls))?;
        }
        self.bindings_built += self.device.bindings_built() - built_before;
        self.last_host_us = started.elapsed().as_micros() as u64;
        self.last_launches = calls.len();
        if self.folded.is_none() {
            self.folded = Some(self.folding.frontier.iter().map(|f| (*f, values[f].clone())).collect());
        }
        let mut out = HashMap::new();
        for (name, v) in &outputs {
            out.insert(name.clone(), Tensor::f32(v.shape.clone(), self.device.read_f32(&v.buffer)?));
        }
        self.replay = recording.then(|| Replay {
            key,
            input_buffers: self.input_buffers.clone(),
            calls,
            outputs,
            checks,
            aliased_permutes: self.aliased_permutes - aliased_before,
            prepared: None,
        });
        Ok(out)
    }

    /// What the kernels cannot check themselves, from host-known inputs:
    /// `kv_append` offsets against the capacity, and gathered ids against
    /// the table (out-of-range reads would be silent zeros on a GPU).
    fn host_checks(&self, op: &Op, args: &[NodeId], infos: &[ArgInfo], inputs: &HashMap<String, Tensor>) -> Result<(), String> {
        // A step input's host copy, seen through `to_host` and `reshape`.
        let host_i32 = |mut id: NodeId| loop {
            match &self.graph.node(id).op {
                Op::Input { name, .. } => return inputs.get(name).and_then(|t| t.as_i32()),
                Op::ToHost { .. } | Op::Reshape { .. } => id = self.graph.inputs(id)[0],
                _ => return None,
            }
        };
        match op {
            Op::KvAppend { axis, window, .. } => {
                let lengths = host_i32(args[2]).ok_or("kv_append's lengths are not a step input")?;
                let (cap, rows) = (infos[0].shape[*axis], infos[1].shape[*axis]);
                crate::lower::check_append(cap, rows, *window, lengths).map_err(|e| e.to_string())
            }
            // Its appends: the step's rows of `x [b, s, k]` into the caches' axis 2.
            Op::QkvRope { window, .. } => {
                let lengths = host_i32(args[7]).ok_or("qkv_rope's lengths are not a step input")?;
                let (cap, rows) = (infos[5].shape[2], infos[0].shape[1]);
                crate::lower::check_append(cap, rows, *window, lengths).map_err(|e| e.to_string())
            }
            // Its appends: the step's rows of `k [b, s, h, d]` into the caches' axis 2.
            Op::NormRopeAttention { window, ring, .. } => {
                let lengths = host_i32(args[8]).ok_or("norm_rope_attention's lengths are not a step input")?;
                let (cap, rows) = (infos[6].shape[2], infos[1].shape[1]);
                crate::lower::check_append(cap, rows, window.filter(|_| *ring), lengths).map_err(|e| e.to_string())
            }
            Op::CausalConv1d { .. } | Op::GatedDeltaRule => {
                // Each row's token count this step, which must lie in 0..=s.
                let (lengths_at, s) = match op {
                    Op::CausalConv1d { .. } => (3, infos[0].shape[1]),
                    _ => (6, infos[0].shape[2]),
                };
                let lengths = host_i32(args[lengths_at]).ok_or("the row lengths are not a step input")?;
                (0..lengths.len()).try_for_each(|bi| graphc_backends::cpu::reference::row_length(lengths, bi, s).map(|_| ()))
            }
            Op::Gather => {
                let rows = infos[0].shape[0];
                if let Some(ids) = host_i32(args[1]) {
                    if let Some((i, id)) = ids.iter().enumerate().find(|(_, &id)| id < 0 || id as usize >= rows) {
                        return Err(format!("id {id} at index {i} is outside the table's {rows} rows"));
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// The launches of a step's kernel calls, in order.
fn launches_of<B>(calls: &[(KeyedCalls<B>, usize, Vec<B>)]) -> Vec<Launch<'_, B>> {
    calls
        .iter()
        .map(|(op_calls, i, buffers)| {
            let (call, key, _) = &op_calls[*i];
            Launch { kernel: &call.kernel, key: *key, buffers: buffers.iter().collect(), params: call.params.clone(), groups: call.groups }
        })
        .collect()
}

/// Whether permuting `shape` by `perm` leaves every element where it is in
/// memory: it moves only axes of size 1 (each decode step's
/// `[b, 1, h, d] -> [b, h, 1, d]` around attention). Such a permute is the
/// input's buffer under another shape, no kernel; the buffer plan keeps the
/// input alive for the permute's readers (`aliases`).
pub fn keeps_order(perm: &[usize], shape: &[usize]) -> bool {
    let moved: Vec<usize> = perm.iter().copied().filter(|&axis| shape.get(axis).is_some_and(|&n| n > 1)).collect();
    moved.windows(2).all(|w| w[0] < w[1])
}

/// `op` with its symbolic attributes (`narrow`'s bounds) evaluated.
fn resolve_dims(op: &Op, env: &HashMap<String, i64>) -> Result<Op, String> {
    Ok(match op {
        Op::Narrow { axis, start, len } => Op::Narrow { axis: *axis, start: Dim::konst(start.eval(env)?), len: Dim::konst(len.eval(env)?) },
        other => other.clone(),
    })
}

/// A graph on some device, behind one interface (what a session holds).
pub trait DeviceGraph {
    fn step(&mut self, inputs: &HashMap<String, Tensor>) -> Result<HashMap<String, Tensor>, GpuError>;
    fn set_state(&mut self, name: &str, t: &Tensor) -> Result<(), GpuError>;
    fn label(&self) -> String;
    /// The executor's counters by name (`GpuGraph::counters`).
    fn counters(&self) -> std::collections::BTreeMap<&'static str, u64>;
    /// Time every launch of the steps that follow on its own (`false`
    /// stops): slower steps, never replayed, for `kernel_secs`.
    fn set_timing(&mut self, on: bool);
    /// With timing on, the last step's launches in order: kernel name and
    /// seconds, each run alone and waited for.
    fn kernel_secs(&self) -> &[(String, f64)];
}

impl<D: Device> DeviceGraph for GpuGraph<D> {
    fn step(&mut self, inputs: &HashMap<String, Tensor>) -> Result<HashMap<String, Tensor>, GpuError> {
        GpuGraph::step(self, inputs)
    }
    fn set_state(&mut self, name: &str, t: &Tensor) -> Result<(), GpuError> {
        GpuGraph::set_state(self, name, t)
    }
    fn label(&self) -> String {
        format!("{} ({})", self.device.target(), self.device.label())
    }
    fn counters(&self) -> std::collections::BTreeMap<&'static str, u64> {
        GpuGraph::counters(self)
    }
    fn set_timing(&mut self, on: bool) {
        self.timing = on;
        self.kernel_secs.clear();
    }
    fn kernel_secs(&self) -> &[(String, f64)] {
        &self.kernel_secs
    }
}
