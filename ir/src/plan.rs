//! The plan: what `graphc compile` writes and the runtime loads. JSON (serde)
//! with a format version, the optimized graph in its text form, the resolved
//! options, rewrite counts, and a manifest of the checkpoint bytes it needs,
//! pinned by the checkpoint's size and checksum.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Bumped whenever the plan's meaning changes; a plan of another version is refused.
pub const PLAN_FORMAT_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub format_version: u32,
    pub graphc_version: String,
    pub family: String,
    pub checkpoint: CheckpointRef,
    pub options: ResolvedOptions,
    pub model: ModelMeta,
    /// Pass name → rewrites it performed, in pipeline order.
    pub passes: Vec<PassRecord>,
    pub manifest: Vec<WeightEntry>,
    /// The loop-carried caches the optimized graph keeps.
    #[serde(default)]
    pub kv_cache: KvCacheSummary,
    /// The optimized graph, in the text form (`graphc_ir::text`).
    pub graph: String,
}

/// How many cache buffers a plan keeps and what one token costs in them:
/// what the K/V alias dedupe halves on a fused-KV family, and what the
/// window-cache rewrite takes off the sliding-window layers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KvCacheSummary {
    /// `state` inputs (one buffer each), window caches included.
    pub caches: usize,
    /// Bytes one token adds across the caches that grow with the context,
    /// per batch row.
    pub bytes_per_token: u64,
    /// Of `caches`, the rings of a sliding window's size (`window_cache`):
    /// their size does not grow with the context.
    #[serde(default)]
    pub window_caches: usize,
    /// Bytes the window caches hold in all, per batch row.
    #[serde(default)]
    pub window_bytes: u64,
    /// Of `caches`, fixed-size recurrent states (a linear-attention layer's
    /// state, a short conv's last inputs): not KV caches at all.
    #[serde(default)]
    pub recurrent_states: usize,
    /// Bytes the recurrent states hold in all, per batch row.
    #[serde(default)]
    pub recurrent_bytes: u64,
}

impl KvCacheSummary {
    /// Count a graph's `state` inputs by what reads them. A cache that a
    /// `concat` or an unwindowed `kv_append` extends grows: a token's share
    /// of it is the product of its constant dims times the element size.
    /// One a windowed append (`kv_append`, `qkv_rope`) writes is a fixed-size ring; any other
    /// state is recurrent (its whole size is per batch row).
    pub fn of(graph: &crate::Graph) -> KvCacheSummary {
        let mut s = KvCacheSummary::default();
        for id in graph.g.node_indices() {
            let crate::Op::State { ty, .. } = &graph.node(id).op else { continue };
            s.caches += 1;
            let consts: u64 = ty.shape.iter().filter_map(|d| d.as_const()).map(|d| d as u64).product();
            let bytes = consts.saturating_mul(ty.dtype.block_bytes() as u64);
            let users: Vec<&crate::Op> = graph.users(id).into_iter().map(|u| &graph.node(u).op).collect();
            if users.iter().any(|op| matches!(op.cache_append(), Some((_, Some(_))))) {
                s.window_caches += 1;
                s.window_bytes += bytes;
            } else if users.iter().any(|op| matches!(op.cache_append(), Some((_, None))) || matches!(op, crate::Op::Concat { .. })) {
                s.bytes_per_token += bytes;
            } else {
                s.recurrent_states += 1;
                s.recurrent_bytes += bytes;
            }
        }
        s
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRef {
    /// As given at compile time (absolute).
    pub path: String,
    pub bytes: u64,
    /// xxh3-64 of the whole file, hex.
    pub checksum: String,
}

/// Where a resolved option's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Given by the user.
    Option,
    /// Read from the checkpoint's metadata.
    Checkpoint,
    /// Chosen from what this machine has.
    Machine,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Option => "option",
            Source::Checkpoint => "checkpoint",
            Source::Machine => "machine",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResolvedOptions {
    pub device: String,
    pub device_source: Source,
    pub max_seq: usize,
    pub max_seq_source: Source,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelMeta {
    pub vocab_size: usize,
    pub context_length: usize,
    pub bos_id: Option<u32>,
    /// Whether the tokenizer puts `bos_id` in front of a prompt.
    pub add_bos: bool,
    /// Generation stops after any of these.
    pub stop_ids: Vec<u32>,
    /// Free-form facts the family derived (printed by `inspect`).
    pub facts: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PassRecord {
    pub name: String,
    pub enabled: bool,
    pub rewrites: u64,
    /// A rule-based pass's rules, each with how often it fired (a rule that
    /// fires may still lose to another form when the cheapest graph is
    /// extracted: `rewrites` counts what the graph kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleRecord>,
    /// Why a rule-based pass stopped before its rules were exhausted (an
    /// iteration, node or time limit), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleRecord {
    pub name: String,
    pub enabled: bool,
    pub fired: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WeightEntry {
    pub name: String,
    pub dtype: crate::DType,
    pub shape: Vec<usize>,
    /// Absolute byte offset in the checkpoint file.
    pub offset: u64,
    pub bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("cannot read plan {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path} is not a graphc plan: {message}")]
    NotAPlan { path: String, message: String },
    #[error("plan {path} has format version {found}, this graphc reads version {expected}; recompile it with `graphc compile`")]
    Version { path: String, found: u64, expected: u32 },
}

impl Plan {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a plan always serializes")
    }

    pub fn from_json(text: &str, path: &str) -> Result<Plan, PlanError> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| PlanError::NotAPlan { path: path.into(), message: e.to_string() })?;
        // Check the version before the shape, so an old plan gets the version error.
        let found = v
            .get("format_version")
            .and_then(|x| x.as_u64())
            .ok_or_else(|| PlanError::NotAPlan { path: path.into(), message: "no `format_version` field".into() })?;
        if found != PLAN_FORMAT_VERSION as u64 {
            return Err(PlanError::Version { path: path.into(), found, expected: PLAN_FORMAT_VERSION });
        }
        serde_json::from_value(v).map_err(|e| PlanError::NotAPlan { path: path.into(), message: e.to_string() })
    }

    pub fn read(path: &Path) -> Result<Plan, PlanError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PlanError::Io { path: p.clone(), source })?;
        Plan::from_json(&text, &p)
    }
}
