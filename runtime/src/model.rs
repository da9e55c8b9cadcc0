//! Compiling a checkpoint to a plan, and loading a plan back against its
//! checkpoint (refused when the file changed or the plan's version differs).

use crate::error::Error;
use crate::sampling::{Constraint, Format, Sampler, Sampling};
use crate::vocabulary::TokenBytes;
use graphc_backends::{WeightRef, WeightSource};
use graphc_frontends::chat::{ChatOptions, Message};
use graphc_frontends::tool_calls::ToolFormat;
use graphc_frontends::{Checkpoint, Tokenizer};
use graphc_ir::plan::{CheckpointRef, Plan, ResolvedOptions, Source, WeightEntry, PLAN_FORMAT_VERSION};
use graphc_ir::{text, verify, Graph};
use graphc_passes::{CostModel, PassManager};
use std::collections::HashMap;
use std::path::Path;

/// Compile-time options; every `None` is resolved once (from the checkpoint
/// or the machine), printed by the CLI and stored in the plan.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    pub device: Option<String>,
    pub max_seq: Option<usize>,
    pub disabled_passes: Vec<String>,
    /// Which GPU devices may be picked or named (CUDA on an unverified
    /// architecture, Metal); the library reads no environment for them.
    pub gpu: graphc_gpu::GpuSettings,
}

/// The devices `--device` names. `cpu` and `wgpu` run here (`wgpu` is
/// parity-checked on lavapipe, a CPU Vulkan driver, and passed on an H200's
/// Vulkan driver); `cuda` passed its parity run on an H200 and is on for
/// that architecture (sm_90), elsewhere only where `GpuSettings::cuda`
/// says so; `metal` has never run on its hardware, so it is off unless
/// `GpuSettings::metal` (and needs macOS). `device_unavailable` says why not.
pub const DEVICES: &[&str] = &["cpu", "wgpu", "cuda", "metal"];

/// Why `device` cannot run plans on this machine and build, if it cannot.
pub fn device_unavailable(device: &str, gpu: &graphc_gpu::GpuSettings) -> Option<String> {
    match device {
        "cpu" | "wgpu" => None,
        "cuda" => graphc_gpu::cuda_rt::device_check(gpu).err().map(|e| e.to_string()),
        "metal" => graphc_gpu::metal_rt::device_check(gpu).err().map(|e| e.to_string()),
        other => Some(format!("unknown device `{other}`; expected one of {}", DEVICES.join(", "))),
    }
}

/// Progress callback: (bytes done, bytes total) while the checkpoint is read.
pub type Progress<'a> = Option<&'a mut dyn FnMut(u64, u64)>;

pub struct Model {
    plan: Plan,
    graph: Graph,
    lowered: Option<Graph>,
    checkpoint: Checkpoint,
    weights: HashMap<String, WeightEntry>,
    /// Each token's bytes, made the first time a JSON-mode sampler asks.
    token_bytes: std::sync::OnceLock<TokenBytes>,
}

fn checksum(ck: &Checkpoint, progress: Progress) -> String {
    let total = ck.len();
    let mut done = 0u64;
    match progress {
        Some(p) => ck.checksum(|n| {
            done += n;
            p(done, total)
        }),
        None => ck.checksum(|_| {}),
    }
}

fn resolve(opts: &CompileOptions, context_length: usize) -> Result<ResolvedOptions, Error> {
    let (device, device_source) = match &opts.device {
        Some(d) => match device_unavailable(d, &opts.gpu) {
            None => (d.clone(), Source::Option),
            Some(why) => return Err(Error::Option(format!("device `{d}` is not available: {why}"))),
        },
        // A verified CUDA device where there is one: on the H200 it was
        // verified on, its prefill ran 1.6-1.9x and its decode 1.05-2x the
        // fast CPU kernels on all 16 of the machine's cores (device-check's
        // side by side). wgpu is never picked alone: its adapter may be any
        // Vulkan driver, a CPU one too, and on the H200 its decode was
        // slower than the CPU's.
        None => match graphc_gpu::cuda_rt::device_check(&opts.gpu) {
            Ok(()) => ("cuda".to_string(), Source::Machine),
            Err(_) => ("cpu".to_string(), Source::Machine),
        },
    };
    let (max_seq, max_seq_source) = match opts.max_seq {
        Some(0) => return Err(Error::Option("--max-seq must be at least 1".into())),
        Some(n) if n > context_length => {
            return Err(Error::Option(format!("--max-seq {n} exceeds the checkpoint's context length {context_length}")))
        }
        Some(n) => (n, Source::Option),
        None => (context_length, Source::Checkpoint),
    };
    Ok(ResolvedOptions { device, device_source, max_seq, max_seq_source })
}

impl Model {
    /// Lower, verify and optimize a checkpoint in memory.
    pub fn compile(path: &Path, opts: &CompileOptions, progress: Progress) -> Result<Model, Error> {
        let checkpoint = Checkpoint::open(path)?;
        let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Model::compile_checkpoint(checkpoint, &abs.display().to_string(), opts, progress)
    }

    /// Lower, verify and optimize a checkpoint already opened (from a file or
    /// from memory); `path` is what the plan records as its location.
    pub fn compile_checkpoint(mut checkpoint: Checkpoint, path: &str, opts: &CompileOptions, progress: Progress) -> Result<Model, Error> {
        let lowered = checkpoint.lower_for(opts.max_seq)?;
        checkpoint.release_metadata();
        let mut graph = lowered.graph;
        verify(&mut graph)?;
        let lowered_graph = graph.clone();
        let options = resolve(opts, lowered.meta.context_length)?;
        // Fusion's choices are the device's (`CostModel`): same bits, its speed.
        let report = PassManager::for_cost(CostModel::for_device(&options.device)).run(&mut graph, &opts.disabled_passes)?;
        // A GPU plan must have a kernel for every op: refused here, naming
        // the node, rather than discovered (or silently run on the CPU) later.
        let gpu_target = match options.device.as_str() {
            "wgpu" => Some("wgpu"),
            "cuda" => Some("cuda"),
            "metal" => Some("metal"),
            _ => None,
        };
        if let Some(target) = gpu_target {
            graphc_gpu::lower::check_graph(&graph, target).map_err(|e| Error::Gpu(e.into()))?;
        }
        // Keep only the weights the optimized graph still uses.
        let used: std::collections::HashSet<String> = graph
            .nodes()
            .filter_map(|n| match &n.op {
                graphc_ir::Op::Weight { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect();
        let manifest: Vec<WeightEntry> = lowered.manifest.into_iter().filter(|w| used.contains(&w.name)).collect();
        let plan = Plan {
            format_version: PLAN_FORMAT_VERSION,
            graphc_version: env!("CARGO_PKG_VERSION").into(),
            family: checkpoint.family.clone(),
            checkpoint: CheckpointRef { path: path.to_string(), bytes: checkpoint.len(), checksum: checksum(&checkpoint, progress) },
            options,
            model: lowered.meta,
            passes: report.records,
            manifest,
            kv_cache: graphc_ir::plan::KvCacheSummary::of(&graph),
            graph: text::print(&graph),
        };
        Model::assemble(plan, graph, Some(lowered_graph), checkpoint)
    }

    /// Load a plan written by `graphc compile`, against the checkpoint it names.
    pub fn load(plan_path: &Path, progress: Progress) -> Result<Model, Error> {
        let plan = Plan::read(plan_path)?;
        let p = plan_path.display().to_string();
        let checkpoint = Checkpoint::open(Path::new(&plan.checkpoint.path)).map_err(|e| Error::PlanMismatch {
            plan: p.clone(),
            message: format!("cannot open its checkpoint {}: {}", plan.checkpoint.path, e.message),
        })?;
        Model::from_plan(plan, &p, checkpoint, progress)
    }

    /// A plan already read (`plan_path` names it in errors), against an
    /// opened checkpoint: refused unless the checkpoint is the one the plan
    /// was compiled from (size, checksum, every manifest entry) and the
    /// plan is consistent with itself (its graph parses and verifies, every
    /// weight the graph names is in the manifest with its type, the
    /// resolved options fit the model). A plan is a file from anywhere:
    /// nothing in it is trusted before these checks.
    pub fn from_plan(plan: Plan, plan_path: &str, mut checkpoint: Checkpoint, progress: Progress) -> Result<Model, Error> {
        let mismatch = |message: String| Error::PlanMismatch { plan: plan_path.to_string(), message };
        let bytes = checkpoint.len();
        if bytes != plan.checkpoint.bytes {
            return Err(mismatch(format!(
                "its checkpoint {} changed: it was {} bytes at compile time and is {bytes} now; recompile the plan",
                plan.checkpoint.path, plan.checkpoint.bytes
            )));
        }
        let sum = checksum(&checkpoint, progress);
        if sum != plan.checkpoint.checksum {
            return Err(mismatch(format!(
                "its checkpoint {} changed: checksum {} at compile time, {sum} now; recompile the plan",
                plan.checkpoint.path, plan.checkpoint.checksum
            )));
        }
        if plan.family != checkpoint.family {
            return Err(mismatch(format!("it is a `{}` plan but its checkpoint is `{}`", plan.family, checkpoint.family)));
        }
        let mut graph = text::parse(&plan.graph).map_err(|e| mismatch(format!("its graph does not parse: {e}")))?;
        verify(&mut graph)?;
        check_plan(&plan, &graph).map_err(mismatch)?;
        checkpoint.release_metadata();
        Model::assemble(plan, graph, None, checkpoint)
    }

    /// A plan (JSON) or a checkpoint (compiled in memory with default options
    /// and `max_seq`), told apart by the file's first bytes.
    pub fn open(path: &Path, opts: &CompileOptions, progress: Progress) -> Result<Model, Error> {
        // A folder is a safetensors checkpoint (its model.safetensors, or
        // its shards and their index, and config.json); so is an index.
        if graphc_frontends::safetensors::is_safetensors_path(path) {
            return Model::compile(path, opts, progress);
        }
        let mut head = [0u8; 4];
        let n = std::fs::File::open(path)
            .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
            .map_err(|e| Error::Input(format!("cannot read {}: {e}", path.display())))?;
        if n >= 1 && head[0] == b'{' {
            Model::load(path, progress)
        } else {
            Model::compile(path, opts, progress)
        }
    }

    fn assemble(plan: Plan, graph: Graph, lowered: Option<Graph>, checkpoint: Checkpoint) -> Result<Model, Error> {
        let mut weights = HashMap::new();
        for w in &plan.manifest {
            let t = checkpoint.tensor(&w.name);
            let ok = t.is_some_and(|t| t.dtype == w.dtype && t.shape == w.shape && t.offset == w.offset && t.bytes == w.bytes);
            if !ok {
                return Err(Error::PlanMismatch {
                    plan: plan.checkpoint.path.clone(),
                    message: format!("weight `{}` in the manifest does not match the checkpoint", w.name),
                });
            }
            weights.insert(w.name.clone(), w.clone());
        }
        Ok(Model { plan, graph, lowered, checkpoint, weights, token_bytes: Default::default() })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
    /// The graph as lowered, before passes (only when compiled in memory).
    pub fn lowered_graph(&self) -> Option<&Graph> {
        self.lowered.as_ref()
    }
    /// The checkpoint's tokenizer; an error for checkpoints without one
    /// (sessions take token ids either way).
    pub fn tokenizer(&self) -> Result<&Tokenizer, Error> {
        self.checkpoint.tokenizer().map_err(Error::Tokenizer)
    }
    /// A sampler for `sampling`: with `Format::JsonObject` or
    /// `Format::JsonSchema`, constrained over this checkpoint's vocabulary
    /// and end tokens (an error for a checkpoint without a tokenizer).
    pub fn sampler(&self, sampling: &Sampling) -> Result<Sampler, Error> {
        if sampling.format == Format::Text {
            return Ok(Sampler::new(sampling));
        }
        let vocabulary = self.vocabulary()?;
        let ends = self.plan.model.stop_ids.clone();
        let constraint = match &sampling.format {
            Format::Text => unreachable!("returned above"),
            Format::JsonObject => Constraint::json_object(vocabulary, ends),
            Format::JsonSchema(schema) => Constraint::json_schema(vocabulary, ends, schema.clone()),
        };
        Ok(Sampler::with_constraint(sampling, constraint))
    }
    /// Each token's bytes (control tokens' none) and their trie, made once.
    pub fn vocabulary(&self) -> Result<TokenBytes, Error> {
        let tok = self.tokenizer()?;
        Ok(self
            .token_bytes
            .get_or_init(|| {
                let bytes = (0..tok.vocab_size as u32).map(|id| tok.decode_bytes(&[id], false).into_boxed_slice()).collect();
                std::sync::Arc::new(crate::vocabulary::Vocabulary::new(bytes))
            })
            .clone())
    }

    /// Token ids of `text` (BOS added when the checkpoint asks for one).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, Error> {
        self.tokenizer()?.encode(text).map_err(Error::Tokenizer)
    }
    /// Text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, Error> {
        self.tokenizer()?.decode(ids).map_err(Error::Tokenizer)
    }
    /// The prompt ids of a conversation: rendered by the checkpoint's chat
    /// template, special tokens in it parsed, the BOS put in front where
    /// the checkpoint asks for one and the template did not write it.
    pub fn chat_prompt(&self, messages: &[Message], opts: &ChatOptions) -> Result<Vec<u32>, Error> {
        let tok = self.tokenizer()?;
        let mut text = tok.apply_chat_template(messages, opts)?;
        text.push_str(&opts.assistant_prefix);
        let mut ids = tok.encode_text(&text, true).map_err(Error::Tokenizer)?;
        if let Some(bos) = tok.bos_id.filter(|&b| tok.add_bos && ids.first() != Some(&b)) {
            ids.insert(0, bos);
        }
        Ok(ids)
    }
    /// The function-call format the checkpoint's chat template teaches
    /// (`None`: it shows the model no tools graphc can read calls back from).
    pub fn tool_format(&self) -> Option<ToolFormat> {
        self.tokenizer().ok()?.template().and_then(ToolFormat::of_template)
    }

    pub fn weights_bytes(&self) -> u64 {
        self.plan.manifest.iter().map(|w| w.bytes).sum()
    }

    /// Write the plan atomically: a temporary file beside `path`, then a
    /// rename, so a failed write never leaves a truncated plan or clobbers a
    /// good one.
    pub fn write_plan(&self, path: &Path) -> Result<(), Error> {
        let io = |e: std::io::Error| Error::Input(format!("cannot write plan {}: {e}", path.display()));
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let tmp = dir.join(format!(".{}.tmp{}", path.file_name().and_then(|n| n.to_str()).unwrap_or("plan"), std::process::id()));
        std::fs::write(&tmp, self.plan.to_json()).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    }
}

/// A plan's own consistency, beyond what the verifier checks of its graph:
/// what the runtime would otherwise trust (weights bound by name, the
/// vocabulary that bounds token ids, the cache capacity it allocates).
fn check_plan(plan: &Plan, graph: &Graph) -> Result<(), String> {
    let manifest: HashMap<&str, &WeightEntry> = plan.manifest.iter().map(|w| (w.name.as_str(), w)).collect();
    for n in graph.nodes() {
        if let graphc_ir::Op::Weight { name, ty } = &n.op {
            let w = manifest.get(name.as_str()).ok_or_else(|| format!("its graph reads weight `{name}`, which its manifest lacks"))?;
            let shape: Option<Vec<usize>> = ty.shape.iter().map(|d| d.as_const().map(|c| c as usize)).collect();
            if w.dtype != ty.dtype || shape.as_ref() != Some(&w.shape) {
                return Err(format!("its graph declares weight `{name}` as {ty}, its manifest as {} {:?}", w.dtype, w.shape));
            }
        }
    }
    let logits = graph
        .node_ids()
        .find(|&n| matches!(&graph.node(n).op, graphc_ir::Op::Output { name } if name == graphc_ir::io::LOGITS))
        .ok_or("its graph has no `logits` output")?;
    let input = *graph.inputs(logits).first().ok_or("its `logits` output has no operand")?;
    let vocab = graph.node(input).ty.as_ref().and_then(|t| t.shape.last()).and_then(|d| d.as_const());
    if vocab != Some(plan.model.vocab_size as i64) {
        return Err(format!("its model has a vocabulary of {} but its graph's logits are {:?} wide", plan.model.vocab_size, vocab));
    }
    let o = &plan.options;
    if o.max_seq == 0 || o.max_seq > plan.model.context_length {
        return Err(format!("its max_seq {} is outside 1..={} (the context length)", o.max_seq, plan.model.context_length));
    }
    if !DEVICES.contains(&o.device.as_str()) {
        return Err(format!("its device `{}` is not available in this build; available: {}", o.device, DEVICES.join(", ")));
    }
    Ok(())
}

impl WeightSource for Model {
    fn weight(&self, name: &str) -> Option<WeightRef<'_>> {
        let w = self.weights.get(name)?;
        Some(WeightRef { dtype: w.dtype, shape: &w.shape, bytes: self.checkpoint.range(w.offset, w.bytes)? })
    }
}
