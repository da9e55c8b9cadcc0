//! A session: the loop-carried state (KV caches) of one or more sequences
//! over a loaded model, stepped by prefill and decode on the CPU: the fast
//! backend by default, or the reference executor (the oracle) by choice.

use crate::error::Error;
use crate::model::Model;
use crate::sampling::Sampling;
use graphc_backends::cpu::exec::{self, Schedule};
use graphc_backends::cpu::fast::Fast;
use graphc_backends::cpu::reference::Reference;
use graphc_backends::cpu::simd::Isa;
use graphc_backends::Tensor;
use graphc_frontends::families::NEW_LENGTHS_INPUT;
use graphc_ir::{io, Dim, Op};
use graphc_passes::kv_append::{CAP, LENGTHS_INPUT};
use std::collections::HashMap;
use std::time::Instant;

/// Sessions are opened on a model (here, beside what they run).
impl Model {
    /// A session of one sequence.
    pub fn session(&self, opts: &SessionOptions) -> Result<Session<'_>, Error> {
        Session::new(self, 1, opts)
    }

    /// A session of `rows` sequences stepped together, each at its own length.
    pub fn batch_session(&self, rows: usize, opts: &SessionOptions) -> Result<Session<'_>, Error> {
        Session::new(self, rows, opts)
    }
}

/// Session options; `None` is resolved once in `Session::new` (see `resolved`).
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// Worker threads; `None` = the machine's cores.
    pub threads: Option<usize>,
    /// Which CPU kernels run the graph; `None` = the fast backend at the
    /// widest instruction set this CPU has.
    pub kernels: Option<Kernels>,
    /// Stop at the first NaN or infinity any node produces, naming the node
    /// and its layer (`graphc run --check-finite`); off by default, since it
    /// reads every activation once more.
    pub check_finite: bool,
    /// Compute the graph's weight-only values (Gemma's `1 + w` norm
    /// weights, ...) once when the session starts instead of every step;
    /// `None` = on. Off only to compare against (the arithmetic is the same).
    pub fold_weights: Option<bool>,
    /// What the GPU backends are told (kernel caches, CUDA graphs, ...),
    /// for a plan compiled for a GPU device.
    pub gpu: graphc_gpu::GpuSettings,
}

/// The CPU kernels a session runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernels {
    /// The reference executor: every op by its definition (slow; the oracle).
    Reference,
    /// The fast backend at an instruction-set level.
    Fast(Isa),
}

impl Kernels {
    /// `reference`, `fast` (the widest this CPU runs), or an ISA name
    /// (`portable`, `avx2`, `avx512`) for the fast backend at that level.
    pub fn parse(s: &str) -> Result<Kernels, Error> {
        match s {
            "reference" => Ok(Kernels::Reference),
            "fast" => Ok(Kernels::Fast(Isa::best())),
            other => Isa::from_name(other)
                .map(Kernels::Fast)
                .ok_or_else(|| Error::Option(format!("unknown kernels `{other}`; expected reference, fast, portable, avx2 or avx512"))),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Kernels::Reference => "reference".into(),
            Kernels::Fast(isa) => format!("fast-{}", isa.name()),
        }
    }
}

enum Executor {
    /// The reference definition, on a rayon pool of `--threads` threads.
    Reference(rayon::ThreadPool),
    /// The fast kernels, with their own threads; the schedule runs on the
    /// session's caller (its buffers in the caller's heap, not a worker's
    /// separate allocator arena: ~2 MB less peak memory on SmolLM2).
    Fast(Fast),
    /// The plan's kernels on a GPU (wgpu, or cuda when enabled): weights
    /// and caches resident on the device (the host keeps no copy of the
    /// states), one submission a step.
    Device(std::cell::RefCell<Box<dyn graphc_gpu::exec::DeviceGraph>>),
}

/// What `SessionOptions` resolved to, with where each value came from.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ResolvedSession {
    pub threads: usize,
    pub threads_source: &'static str,
    pub kernels: String,
    pub kernels_source: &'static str,
    pub device: String,
    pub max_seq: usize,
    pub check_finite: bool,
}

/// Longest run of prompt tokens one forward takes (see `Session::forward`).
pub const PREFILL_CHUNK: usize = 256;

/// Each row's logits, and the states for the next step.
type RowsOutput = (Vec<Vec<f32>>, HashMap<String, Tensor>);

/// A session holds `rows` sequences, each at its own length.
pub struct Session<'m> {
    model: &'m Model,
    executor: Executor,
    /// The model graph's run order and buffer lifetimes, computed once.
    schedule: Schedule,
    resolved: ResolvedSession,
    states: StateLayout,
    lens: Vec<usize>,
    /// See `step_rows()`.
    step_rows: usize,
    /// The fewest positions a window ring holds (`None`: no rings).
    ring_positions: Option<usize>,
    /// Per row, the positions written since it was last emptied, a ragged
    /// step's padding included: while no more than `ring_positions`, no
    /// ring has overwritten any of the row's positions.
    written: Vec<usize>,
    /// Why the device could not take the caches `reset` gave it, if so.
    device_error: Option<String>,
    /// Per-op times of the forwards since `set_profiling(true)`.
    profile: std::cell::RefCell<Option<exec::Profile>>,
    /// Whether what a step's rows do not read (a free slot's placeholder, a
    /// shorter row's padding) may be left out of its matrix products
    /// (`Fast::set_row_lengths`): every matmul's activation leads with the
    /// batch dimension, and no recurrent state could carry their values.
    skip_idle_rows: bool,
}

/// Where the loop-carried state lives. With `kv_append` in the plan, one
/// cache per layer holds every row at capacity and each row appends at its
/// own offset. Without it (the pass switched off), a concatenated cache has
/// one length for all rows, so rows at different lengths cannot share it:
/// each row keeps its own state and is stepped on its own. That fallback is
/// the A/B baseline, not a fast path.
enum StateLayout {
    Batched(HashMap<String, Tensor>),
    PerRow(Vec<HashMap<String, Tensor>>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub stopped_on_eos: bool,
    pub finish: Finish,
    pub prefill_secs: f64,
    pub decode_secs: f64,
}

impl<'m> Session<'m> {
    pub(crate) fn new(model: &'m Model, rows: usize, opts: &SessionOptions) -> Result<Session<'m>, Error> {
        if rows == 0 {
            return Err(Error::Option("a session needs at least one row".into()));
        }
        let (threads, threads_source) = match opts.threads {
            Some(0) => return Err(Error::Option("--threads must be at least 1".into())),
            Some(n) => (n, "option"),
            None => (std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1), "machine"),
        };
        let (kernels, kernels_source) = match opts.kernels {
            Some(k) => (k, "option"),
            None => (Kernels::Fast(Isa::best()), "machine"),
        };
        let plan = model.plan();
        // Every device but `cpu` runs on its GPU runtime (`open::open`
        // refuses one it does not know): a plan is never run on the CPU
        // in its place.
        let executor = match (plan.options.device.as_str(), kernels) {
            (device, _) if device != "cpu" => {
                if model.graph().find_input(LENGTHS_INPUT).is_none() {
                    return Err(Error::Option(format!("the {device} device needs the kv_append pass (caches appended in place on the device)")));
                }
                Executor::Device(std::cell::RefCell::new(graphc_gpu::open::open(device, model.graph(), model, &opts.gpu)?))
            }
            (_, Kernels::Reference) => Executor::Reference(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .map_err(|e| Error::Option(format!("cannot start {threads} threads: {e}")))?,
            ),
            (_, Kernels::Fast(isa)) => Executor::Fast(Fast::new(isa, threads).map_err(Error::Option)?),
        };
        let (kernels, kernels_source) = match &executor {
            Executor::Device(g) => (g.borrow().label(), "device"),
            _ => (kernels.name(), kernels_source),
        };
        let resolved = ResolvedSession {
            threads,
            threads_source,
            kernels,
            kernels_source,
            device: plan.options.device.clone(),
            max_seq: plan.options.max_seq,
            check_finite: opts.check_finite,
        };
        let states = if model.graph().find_input(LENGTHS_INPUT).is_some() {
            StateLayout::Batched(HashMap::new())
        } else {
            StateLayout::PerRow(vec![HashMap::new(); rows])
        };
        Self::check_state_bytes(model.graph(), rows, plan.options.max_seq)?;
        let mut schedule = Schedule::new(model.graph())?;
        schedule.check_finite = opts.check_finite;
        if opts.fold_weights.unwrap_or(true) {
            match &executor {
                Executor::Reference(pool) => pool.install(|| schedule.fold(model.graph(), &Reference, model))?,
                Executor::Fast(fast) => schedule.fold(model.graph(), fast, model)?,
                // The device folds them itself, in its first step.
                Executor::Device(_) => 0,
            };
        }
        // A ring of `cap` rows for a window of `w` takes `cap - w + 1` rows a step.
        let step_rows = model
            .graph()
            .nodes()
            .filter_map(|n| match n.op.cache_append() {
                Some((cap, Some(w))) => cap.as_const().map(|c| (c as usize + 1).saturating_sub(w).max(1)),
                _ => None,
            })
            .fold(PREFILL_CHUNK, usize::min);
        let ring_positions = model
            .graph()
            .nodes()
            .filter_map(|n| match n.op.cache_append() {
                Some((cap, Some(_))) => cap.as_const().map(|c| c as usize),
                _ => None,
            })
            .min();
        let skip_idle_rows = plan.kv_cache.recurrent_states == 0 && matmuls_lead_with_batch(model.graph());
        let mut s = Session {
            model,
            executor,
            schedule,
            resolved,
            states,
            lens: vec![0; rows],
            step_rows,
            ring_positions,
            written: vec![0; rows],
            device_error: None,
            profile: Default::default(),
            skip_idle_rows,
        };
        s.reset();
        Ok(s)
    }

    /// Graph nodes computed once at session start (weight-only values).
    pub fn folded_nodes(&self) -> usize {
        self.schedule.folded_nodes()
    }

    pub fn resolved(&self) -> &ResolvedSession {
        &self.resolved
    }

    /// How many times each fast kernel ran in this session (empty on the
    /// reference executor): evidence that a fast path engaged. On a GPU:
    /// the device executor's counters (launches, fused groups, replayed
    /// steps) and the last step's host time up to its submission.
    pub fn kernel_counts(&self) -> std::collections::BTreeMap<&'static str, u64> {
        match &self.executor {
            Executor::Fast(f) => f.kernel_counts(),
            Executor::Reference(_) => Default::default(),
            Executor::Device(g) => g.borrow().counters(),
        }
    }

    /// Time every op of the forwards that follow, by class (op, and the
    /// type and shape of the weight it reads), from an empty profile;
    /// `false` stops. On a GPU, every kernel launch instead, each run on
    /// its own and waited for (class `kernel NAME`): slower steps, never
    /// replayed, whose times add a submission's overhead to each kernel's.
    pub fn set_profiling(&mut self, on: bool) -> Result<(), Error> {
        if let Executor::Device(g) = &self.executor {
            g.borrow_mut().set_timing(on);
        }
        self.schedule.profile = on;
        *self.profile.borrow_mut() = on.then(exec::Profile::default);
        Ok(())
    }

    /// The per-op times recorded since `set_profiling(true)`.
    pub fn profile(&self) -> Option<exec::Profile> {
        self.profile.borrow().clone()
    }

    /// Number of sequences (batch rows) this session holds.
    pub fn rows(&self) -> usize {
        self.lens.len()
    }

    /// Tokens each row holds in its cache.
    pub fn lens(&self) -> &[usize] {
        &self.lens
    }

    /// Tokens row 0 holds.
    pub fn len(&self) -> usize {
        self.lens[0]
    }

    pub fn is_empty(&self) -> bool {
        self.lens.iter().all(|&l| l == 0)
    }

    /// Whether the caches are written in place (the plan has `kv_append`).
    pub fn appends_in_place(&self) -> bool {
        matches!(self.states, StateLayout::Batched(_))
    }

    /// A state tensor (of all rows when batched, of row 0 otherwise).
    pub fn state(&self, name: &str) -> Option<&Tensor> {
        match &self.states {
            StateLayout::Batched(m) => m.get(name),
            StateLayout::PerRow(v) => v[0].get(name),
        }
    }

    /// Each state's shape when empty (`past` = 0) for `batch` rows, with the
    /// caches at capacity (`cap` = `max_seq`).
    fn state_shapes(graph: &graphc_ir::Graph, batch: usize, max_seq: usize) -> Result<Vec<(String, Vec<usize>)>, Error> {
        let env: HashMap<String, i64> = [("batch".to_string(), batch as i64), ("past".to_string(), 0), (CAP.to_string(), max_seq as i64)].into();
        let mut shapes = Vec::new();
        for n in graph.nodes() {
            if let Op::State { name, ty } = &n.op {
                let shape: Option<Vec<usize>> = ty.shape.iter().map(|d: &Dim| d.eval(&env).ok().and_then(|v| usize::try_from(v).ok())).collect();
                let shape = shape.ok_or_else(|| Error::Input(format!("state `{name}`: its shape {ty} has no size at max_seq {max_seq}")))?;
                shapes.push((name.clone(), shape));
            }
        }
        Ok(shapes)
    }

    /// Bytes every state of a `batch`-row session holds at capacity; refused
    /// (not aborted on) when it overflows or exceeds the machine's memory.
    fn check_state_bytes(graph: &graphc_ir::Graph, batch: usize, max_seq: usize) -> Result<u64, Error> {
        let mut total: u64 = 0;
        for (name, shape) in Self::state_shapes(graph, batch, max_seq)? {
            let bytes = shape.iter().try_fold(4u64, |a, &d| a.checked_mul(d as u64));
            total = bytes
                .and_then(|b| total.checked_add(b))
                .ok_or_else(|| Error::Input(format!("state `{name}` of shape {shape:?} at max_seq {max_seq} is more than 2^64 bytes")))?;
        }
        if let Some(memory) = machine_memory_bytes() {
            if total > memory {
                return Err(Error::Input(format!(
                    "the KV cache of {batch} row(s) at max_seq {max_seq} needs {total} bytes, more than this machine's {memory} bytes of memory; compile with a smaller --max-seq"
                )));
            }
        }
        Ok(total)
    }

    fn empty_states(&self, batch: usize) -> HashMap<String, Tensor> {
        // Sizes were checked in `Session::new`.
        let shapes = Self::state_shapes(self.model.graph(), batch, self.resolved.max_seq).expect("checked in Session::new");
        shapes
            .into_iter()
            .map(|(name, shape)| {
                let numel = shape.iter().product();
                // Zeroed pages are mapped lazily: a cache at capacity costs
                // memory only as rows are written.
                (name, Tensor::f32(shape, vec![0.0; numel]))
            })
            .collect()
    }

    /// For benchmarks: make every row hold `len` tokens of zero keys and
    /// values, so a decode step can be timed at that context without
    /// prefilling it. The arithmetic a step then does is the same as after a
    /// real prefill of `len` tokens; its output is meaningless.
    pub fn assume_cached(&mut self, len: usize) -> Result<(), Error> {
        if len >= self.resolved.max_seq {
            return Err(Error::Input(format!("context {len} leaves no room under max_seq {}", self.resolved.max_seq)));
        }
        self.reset();
        if let StateLayout::PerRow(rows) = &mut self.states {
            for row in rows.iter_mut() {
                for t in row.values_mut() {
                    // Concatenated caches are [batch, heads, past, dim]: grow `past` to `len`.
                    if let Tensor::F32 { shape, data } = t {
                        shape[2] = len;
                        *data = vec![0.0; shape.iter().product()];
                    }
                }
            }
        }
        self.lens.iter_mut().for_each(|l| *l = len);
        self.written.iter_mut().for_each(|w| *w = len);
        Ok(())
    }

    /// Keep only the first `len` tokens of a one-row session's cache (a
    /// conversation whose new prompt shares only that much with what is
    /// cached): `truncate_row` of its one row.
    pub fn truncate(&mut self, len: usize) -> Result<(), Error> {
        self.only_row()?;
        self.truncate_row(0, len)
    }

    /// Keep only the first `len` tokens of row `row`'s cache (a slot whose
    /// next request shares that much with what it holds). Possible where
    /// the caches are written in place and still hold every position:
    /// not with recurrent states or `kv_append` off (`cannot_truncate`),
    /// nor once a window ring has wrapped (more of the row's positions
    /// written, padding included, than the ring holds: its earliest are
    /// overwritten).
    pub fn truncate_row(&mut self, row: usize, len: usize) -> Result<(), Error> {
        let Some(&now) = self.lens.get(row) else {
            return Err(Error::Input(format!("row {row} of a session of {} rows", self.rows())));
        };
        if len > now {
            return Err(Error::Input(format!("cannot truncate the cache to {len} tokens: it holds {now}")));
        }
        if len == now {
            return Ok(());
        }
        let why = match (self.cannot_truncate(), self.ring_positions) {
            (Some(why), _) => why.to_string(),
            (None, Some(ring)) if self.written[row] > ring => {
                let written = self.written[row];
                format!("its window rings hold {ring} positions and {written} have been written: the first {} are overwritten", written - ring)
            }
            _ => {
                // Positions past `len` are overwritten before any query reads them.
                self.lens[row] = len;
                return Ok(());
            }
        };
        Err(Error::Input(format!("cannot drop the last {} cached tokens: {why}", now - len)))
    }

    /// Copy the first `len` cached positions of row `from` into row `to`,
    /// whose cache then holds exactly them (a slot taking a prompt that
    /// another slot has already run the start of). Possible on the CPU
    /// executors where `truncate_row` is (`from`'s rings not wrapped);
    /// caches on a device are not copied between rows yet (an error, and
    /// `to` untouched).
    pub fn copy_row_prefix(&mut self, from: usize, to: usize, len: usize) -> Result<(), Error> {
        let rows = self.rows();
        if from >= rows || to >= rows || from == to {
            return Err(Error::Input(format!("copying row {from} into row {to} of a session of {rows} rows")));
        }
        if len > self.lens[from] {
            return Err(Error::Input(format!("cannot copy {len} cached tokens of row {from}: it holds {}", self.lens[from])));
        }
        if let Some(why) = self.cannot_truncate() {
            return Err(Error::Input(format!("cannot copy a cache between rows: {why}")));
        }
        if matches!(self.executor, Executor::Device(_)) {
            return Err(Error::Input("copying a cache between rows is not implemented on a device".into()));
        }
        if let Some(ring) = self.ring_positions.filter(|&ring| self.written[from] > ring) {
            return Err(Error::Input(format!("row {from}'s window rings hold {ring} positions and {} have been written", self.written[from])));
        }
        let axes = self.cache_position_axes();
        let StateLayout::Batched(states) = &mut self.states else { unreachable!("cannot_truncate: batched caches") };
        // Check every cache before writing any.
        let mut plan = Vec::new();
        for (name, t) in states.iter() {
            let Some(&axis) = axes.get(name) else {
                return Err(Error::Input(format!("cannot copy state `{name}` between rows: it is not a cache appended along one axis")));
            };
            let shape = t.shape();
            if axis == 0 || axis >= shape.len() || shape[0] != rows || len > shape[axis] {
                return Err(Error::Input(format!("cannot copy {len} positions of state `{name}` {shape:?} along axis {axis}")));
            }
            plan.push((name.clone(), axis));
        }
        for (name, axis) in plan {
            let Some(Tensor::F32 { shape, data }) = states.get_mut(&name) else {
                return Err(Error::Input(format!("state `{name}` is not f32")));
            };
            // Per batch row: `outer` runs of `cap` positions of `inner` values.
            let (cap, inner) = (shape[axis], shape[axis + 1..].iter().product::<usize>());
            let outer: usize = shape[1..axis].iter().product();
            let row = outer * cap * inner;
            for o in 0..outer {
                let (src, dst) = (from * row + o * cap * inner, to * row + o * cap * inner);
                data.copy_within(src..src + len * inner, dst);
            }
        }
        self.lens[to] = len;
        self.written[to] = len;
        Ok(())
    }

    /// Each cache's position axis, from the op that appends to it.
    fn cache_position_axes(&self) -> HashMap<String, usize> {
        let g = self.model.graph();
        g.node_ids()
            .filter_map(|id| match &g.node(id).op {
                Op::State { name, .. } => {
                    let axes: Vec<usize> = g
                        .users(id)
                        .into_iter()
                        .filter_map(|u| match &g.node(u).op {
                            Op::KvAppend { axis, .. } => Some(*axis),
                            op if op.cache_append().is_some() => Some(2),
                            _ => None,
                        })
                        .collect();
                    (!axes.is_empty() && axes.iter().all(|&a| a == axes[0])).then(|| (name.clone(), axes[0]))
                }
                _ => None,
            })
            .collect()
    }

    /// Why no cache of this session can be cut back to an earlier length,
    /// if none can: recurrent states hold no earlier state, and
    /// concatenated caches (`kv_append` off) are not written in place.
    /// (Window rings can be, until they wrap: `truncate_row`.)
    pub fn cannot_truncate(&self) -> Option<&'static str> {
        if self.model.plan().kv_cache.recurrent_states > 0 {
            Some("its recurrent states hold no earlier state")
        } else if !matches!(self.states, StateLayout::Batched(_)) {
            Some("its caches are concatenated (`kv_append` off)")
        } else {
            None
        }
    }

    /// Forget every sequence: each state back to empty.
    pub fn reset(&mut self) {
        let rows = self.rows();
        // Free the old caches before allocating the new ones: both alive at
        // once would leave the old ones' pages to the allocator's free
        // lists, where the activations that reuse them keep them resident.
        let batched = matches!(self.states, StateLayout::Batched(_));
        self.states = StateLayout::PerRow(Vec::new());
        self.states = if let Executor::Device(g) = &self.executor {
            let mut g = g.borrow_mut();
            self.device_error = None;
            for (name, t) in self.empty_states(rows) {
                // Reported by the next step (`reset` returns nothing).
                if let Err(e) = g.set_state(&name, &t) {
                    self.device_error = Some(format!("cannot allocate state `{name}` on the device: {e}"));
                }
            }
            StateLayout::Batched(HashMap::new())
        } else if batched {
            StateLayout::Batched(self.empty_states(rows))
        } else {
            StateLayout::PerRow((0..rows).map(|_| self.empty_states(1)).collect())
        };
        self.lens.iter_mut().for_each(|l| *l = 0);
        self.written.iter_mut().for_each(|w| *w = 0);
    }

    fn check_tokens(&self, row: usize, tokens: &[u32]) -> Result<(), Error> {
        let vocab = self.model.plan().model.vocab_size;
        let at = if self.rows() > 1 { format!(" (row {row})") } else { String::new() };
        if tokens.is_empty() {
            return Err(Error::Input(format!("empty prompt{at}: at least one token is needed")));
        }
        if let Some((i, t)) = tokens.iter().enumerate().find(|(_, &t)| t as usize >= vocab) {
            return Err(Error::Input(format!("token id {t} at position {i}{at} is outside the vocabulary of {vocab}")));
        }
        let (len, max_seq) = (self.lens[row], self.resolved.max_seq);
        if len + tokens.len() > max_seq {
            return Err(Error::Input(format!(
                "{} tokens{at} ({len} in the cache + {} new) exceed max_seq {max_seq}",
                len + tokens.len(),
                tokens.len()
            )));
        }
        Ok(())
    }

    /// One forward over `rows` rows; `news[b]` are row `b`'s new tokens, all
    /// padded to the longest with that row's last token. Returns each row's
    /// logits at its own last new token.
    fn run_rows(
        &self,
        states: HashMap<String, Tensor>,
        in_place: bool,
        (lens, real): (&[usize], &[usize]),
        news: &[&[u32]],
    ) -> Result<RowsOutput, Error> {
        let b = news.len();
        let s = news.iter().map(|t| t.len()).max().unwrap();
        let mut tokens = Vec::with_capacity(b * s);
        let mut positions = Vec::with_capacity(b * s);
        for (row, new) in news.iter().enumerate() {
            for i in 0..s {
                tokens.push(*new.get(i).unwrap_or(new.last().unwrap()) as i32);
                positions.push((lens[row] + i) as i32);
            }
        }
        let last_rows: Vec<i32> = news.iter().enumerate().map(|(row, t)| (row * s + t.len() - 1) as i32).collect();
        let mut inputs: HashMap<String, Tensor> = [
            (io::TOKENS.to_string(), Tensor::i32(vec![b, s], tokens)),
            (io::POSITIONS.to_string(), Tensor::i32(vec![b, s], positions)),
            (io::LAST_ROWS.to_string(), Tensor::i32(vec![b], last_rows)),
        ]
        .into();
        if in_place {
            inputs.insert(LENGTHS_INPUT.to_string(), Tensor::i32(vec![b], lens.iter().map(|&l| l as i32).collect()));
        }
        // Recurrent layers advance each row by its real tokens only (a
        // placeholder row by none).
        if self.model.graph().find_input(NEW_LENGTHS_INPUT).is_some() {
            inputs.insert(NEW_LENGTHS_INPUT.to_string(), Tensor::i32(vec![b], real.iter().map(|&l| l as i32).collect()));
        }
        let model = self.model;
        let sched = &self.schedule;
        let out = match &self.executor {
            Executor::Reference(pool) => pool.install(|| exec::run_scheduled(sched, &Reference, model.graph(), &inputs, states, model)),
            Executor::Fast(fast) => exec::run_scheduled(sched, fast, model.graph(), &inputs, states, model),
            Executor::Device(g) => {
                if let Some(e) = &self.device_error {
                    return Err(Error::Input(e.clone()));
                }
                let outputs = g.borrow_mut().step(&inputs)?;
                Ok(exec::StepOutput { outputs, states, op_secs: Vec::new() })
            }
        }?;
        if let Some(profile) = self.profile.borrow_mut().as_mut() {
            match &self.executor {
                Executor::Device(g) => profile.record_kernels(g.borrow().kernel_secs()),
                _ => profile.record(&self.schedule, &out.op_secs),
            }
        }
        let logits = out.outputs.get(io::LOGITS).ok_or_else(|| Error::Input("the plan has no `logits` output".into()))?;
        let data = logits.as_f32().unwrap_or_default();
        let vocab = data.len() / b;
        Ok((data.chunks_exact(vocab).map(|c| c.to_vec()).collect(), out.states))
    }

    /// Run each row's new tokens after what its cache holds; returns each
    /// row's logits at its own last new token.
    ///
    /// Rows longer than `step_rows` run in rounds of that many tokens; a
    /// row that has run out rides along on a placeholder whose write is
    /// never read (it is overwritten by the row's next real token, before
    /// any query can see it) and whose logits are dropped.
    pub fn forward_rows(&mut self, news: &[&[u32]]) -> Result<Vec<Vec<f32>>, Error> {
        self.forward_checked(news, false)
    }

    /// As `forward_rows`, where a row may have no new tokens (a free slot
    /// of a server's batch, or a request waiting its turn): it rides along
    /// on a placeholder that moves nothing, and its logits are empty. At
    /// least one row must have tokens. The rows that do get the bits they
    /// get in `forward_rows`.
    pub fn forward_slots(&mut self, news: &[&[u32]]) -> Result<Vec<Vec<f32>>, Error> {
        self.forward_checked(news, true)
    }

    /// Empty row `row`'s cache (a slot that takes a new sequence), the
    /// other rows untouched. Where a row's state is not its cache length
    /// alone (`kv_append` off), that row's states are replaced by empty
    /// ones; recurrent states are refused.
    pub fn reset_row(&mut self, row: usize) -> Result<(), Error> {
        if row >= self.rows() {
            return Err(Error::Input(format!("row {row} of a session of {} rows", self.rows())));
        }
        let recurrent = self.model.plan().kv_cache.recurrent_states > 0;
        let fresh = matches!(self.states, StateLayout::PerRow(_)).then(|| self.empty_states(1));
        match (&mut self.states, fresh) {
            (StateLayout::PerRow(rows), Some(fresh)) => rows[row] = fresh,
            (StateLayout::Batched(_), _) if recurrent => {
                return Err(Error::Input("resetting one row of recurrent states on its own is not implemented: reset the session".into()))
            }
            // Positions past a row's length are overwritten before any
            // query reads them (as a placeholder's are).
            _ => {}
        }
        self.lens[row] = 0;
        self.written[row] = 0;
        Ok(())
    }

    /// `forward_rows`, or with `empty_rows` `forward_slots`.
    fn forward_checked(&mut self, news: &[&[u32]], empty_rows: bool) -> Result<Vec<Vec<f32>>, Error> {
        if news.len() != self.rows() {
            return Err(Error::Input(format!("{} rows of tokens for a session of {} rows", news.len(), self.rows())));
        }
        if empty_rows && news.iter().all(|t| t.is_empty()) {
            return Err(Error::Input("no row has new tokens".into()));
        }
        for (row, t) in news.iter().enumerate().filter(|(_, t)| !(empty_rows && t.is_empty())) {
            self.check_tokens(row, t)?;
        }
        let step = self.step_rows;
        let rounds = news.iter().map(|t| t.len()).max().unwrap_or(0).div_ceil(step);
        let mut logits = vec![Vec::new(); news.len()];
        for round in 0..rounds {
            let parts: Vec<&[u32]> = news.iter().map(|t| &t[(round * step).min(t.len())..((round + 1) * step).min(t.len())]).collect();
            for (row, l) in self.step(&parts)?.into_iter().enumerate() {
                if !parts[row].is_empty() {
                    logits[row] = l;
                }
            }
        }
        Ok(logits)
    }

    /// One forward of at most `step_rows` tokens per row; an empty row gets
    /// a placeholder (batched caches) or is skipped (per-row caches), and
    /// its length does not move.
    fn step(&mut self, news: &[&[u32]]) -> Result<Vec<Vec<f32>>, Error> {
        const PLACEHOLDER: &[u32] = &[0];
        let lens = self.lens.clone();
        let logits = match std::mem::replace(&mut self.states, StateLayout::PerRow(vec![])) {
            StateLayout::Batched(states) => {
                let padded: Vec<&[u32]> = news.iter().map(|t| if t.is_empty() { PLACEHOLDER } else { *t }).collect();
                let real: Vec<usize> = news.iter().map(|t| t.len()).collect();
                let fast = match &self.executor {
                    Executor::Fast(f) if self.skip_idle_rows => Some(f),
                    _ => None,
                };
                if let Some(f) = fast {
                    f.set_row_lengths(&real);
                }
                let run = self.run_rows(states, true, (&lens, &real), &padded);
                if let Some(f) = fast {
                    f.set_row_lengths(&[]);
                }
                let (logits, states) = run?;
                self.states = StateLayout::Batched(states);
                // Every row is written to the step's width (padding, placeholders).
                let width = padded.iter().map(|t| t.len()).max().unwrap_or(0);
                for (w, &len) in self.written.iter_mut().zip(&lens) {
                    *w = (*w).max(len + width);
                }
                logits
            }
            StateLayout::PerRow(per_row) => {
                let mut logits = Vec::new();
                let mut next = Vec::new();
                for (row, states) in per_row.into_iter().enumerate() {
                    if news[row].is_empty() {
                        logits.push(Vec::new());
                        next.push(states);
                        continue;
                    }
                    let (mut l, st) = self.run_rows(states, false, (&lens[row..row + 1], &[news[row].len()]), &news[row..row + 1])?;
                    logits.push(l.remove(0));
                    next.push(st);
                }
                self.states = StateLayout::PerRow(next);
                logits
            }
        };
        for (l, t) in self.lens.iter_mut().zip(news) {
            *l += t.len();
        }
        Ok(logits)
    }

    /// The most tokens of one row a single forward takes: `PREFILL_CHUNK`,
    /// or less where a window's ring cache allows less (see `KvAppend`).
    pub fn step_rows(&self) -> usize {
        self.step_rows
    }

    /// Run `tokens` after what the cache holds (a one-row session); returns
    /// the logits at the last of them.
    ///
    /// A long prompt runs in chunks of `PREFILL_CHUNK` tokens, each
    /// appending to the cache, so activation memory stays bounded by the
    /// chunk, not the prompt (the logits are those of one pass, up to f32
    /// summation order).
    pub fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>, Error> {
        self.only_row()?;
        // Check the whole prompt first: a refusal must not leave half of it cached.
        self.check_tokens(0, tokens)?;
        let mut logits = Vec::new();
        for chunk in tokens.chunks(self.step_rows) {
            logits = self.step(&[chunk])?.remove(0);
        }
        Ok(logits)
    }

    fn only_row(&self) -> Result<(), Error> {
        if self.rows() != 1 {
            return Err(Error::Input(format!("this session holds {} rows: use the *_rows methods", self.rows())));
        }
        Ok(())
    }

    /// Prefill a prompt from an empty cache.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>, Error> {
        self.only_row()?;
        self.reset();
        self.forward(prompt)
    }

    /// One decode step.
    pub fn decode(&mut self, token: u32) -> Result<Vec<f32>, Error> {
        self.forward(&[token])
    }

    /// Prefill every row from empty caches (rows may differ in length).
    pub fn prefill_rows(&mut self, prompts: &[&[u32]]) -> Result<Vec<Vec<f32>>, Error> {
        self.reset();
        self.forward_rows(prompts)
    }

    /// One decode step of every row together.
    pub fn decode_rows(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Error> {
        let news: Vec<&[u32]> = tokens.iter().map(std::slice::from_ref).collect();
        self.forward_rows(&news)
    }

    /// Prefill `prompt`, then generate up to `max_new` tokens, calling
    /// `on_token` for each; stops after an end-of-generation id (which is
    /// the last token), or when `on_token` returns `ControlFlow::Break`
    /// (a stop string, a client gone; a callback returning `()` never stops).
    pub fn generate<C: GoOn>(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        sampling: &Sampling,
        on_token: impl FnMut(u32) -> C,
    ) -> Result<Generation, Error> {
        self.only_row()?;
        self.reset();
        self.generate_after(prompt, max_new, sampling, on_token)
    }

    /// As `generate`, with `new` run after what the cache already holds
    /// (a conversation's next turn): only `new` is prefilled.
    pub fn generate_after<C: GoOn>(
        &mut self,
        new: &[u32],
        max_new: usize,
        sampling: &Sampling,
        mut on_token: impl FnMut(u32) -> C,
    ) -> Result<Generation, Error> {
        let stop = self.model.plan().model.stop_ids.clone();
        let mut sampler = self.model.sampler(sampling)?;
        sampler.seen(new);
        let t0 = Instant::now();
        let mut logits = self.forward(new)?;
        let prefill_secs = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut tokens = Vec::new();
        let mut finish = Finish::Length;
        for step in 0..max_new {
            let t = sampler.sample(&logits);
            tokens.push(t);
            if !on_token(t).go_on() {
                finish = Finish::Caller;
                break;
            }
            if stop.contains(&t) {
                finish = Finish::EndOfGeneration;
                break;
            }
            if step + 1 == max_new || self.len() >= self.resolved.max_seq {
                break;
            }
            logits = self.decode(t)?;
        }
        let stopped_on_eos = finish == Finish::EndOfGeneration;
        Ok(Generation { tokens, stopped_on_eos, finish, prefill_secs, decode_secs: t1.elapsed().as_secs_f64() })
    }
}

/// Whether every matmul's activation leads with the `batch` dimension (so
/// its rows are the batch's rows, and an idle row's can be left out).
fn matmuls_lead_with_batch(graph: &graphc_ir::Graph) -> bool {
    let batch = Dim::sym("batch");
    graph
        .node_ids()
        .filter(|&id| graph.node(id).op.is_matmul())
        .all(|id| graph.inputs(id).first().is_some_and(|&x| graph.node(x).ty.as_ref().and_then(|t| t.shape.first()) == Some(&batch)))
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token (the last one generated).
    EndOfGeneration,
    /// `max_new` tokens, or the session's `max_seq`.
    Length,
    /// The caller's callback said stop.
    Caller,
}

/// What a `generate` callback returns: `()` (go on) or a `ControlFlow`.
pub trait GoOn {
    fn go_on(self) -> bool;
}

impl GoOn for () {
    fn go_on(self) -> bool {
        true
    }
}

impl GoOn for std::ops::ControlFlow<()> {
    fn go_on(self) -> bool {
        self.is_continue()
    }
}

/// Physical memory (Linux `/proc/meminfo`'s `MemTotal`); `None` where unknown.
fn machine_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}
