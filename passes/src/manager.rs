//! The pass manager: named passes in a fixed order, per-pass disable, and a
//! count of rewrites per pass (what `graphc compile` prints and the plan stores).

use graphc_ir::plan::PassRecord;
use graphc_ir::{verify, Graph, VerifyError};

/// One rewrite pass over the graph; returns how many rewrites it performed.
pub trait Pass {
    fn name(&self) -> &'static str;
    fn run(&self, graph: &mut Graph) -> u64;
}

#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("unknown pass `{name}` in --disable-pass; the passes are: {known}")]
    UnknownPass { name: String, known: String },
    #[error("pass `{pass}` produced a graph that does not verify: {source}")]
    BrokeGraph { pass: String, source: VerifyError },
}

pub struct PassManager {
    passes: Vec<Box<dyn Pass>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PassReport {
    pub records: Vec<PassRecord>,
}

impl PassReport {
    pub fn rewrites(&self, name: &str) -> Option<u64> {
        self.records.iter().find(|r| r.name == name).map(|r| r.rewrites)
    }
}

impl Default for PassManager {
    fn default() -> Self {
        PassManager {
            passes: vec![
                Box::new(crate::kv_alias::KvAlias),
                Box::new(crate::kv_append::KvAppend),
                Box::new(crate::window_cache::WindowCache),
                Box::new(crate::hoist_sync::HoistSync),
                Box::new(crate::fuse_glu::FuseGlu),
                Box::new(crate::fuse_norm_rope::FuseNormRope),
                Box::new(crate::dead_code::DeadCode),
            ],
        }
    }
}

impl PassManager {
    pub fn names(&self) -> Vec<&'static str> {
        self.passes.iter().map(|p| p.name()).collect()
    }

    /// Run every pass not named in `disabled` on a verified graph.
    pub fn run(&self, graph: &mut Graph, disabled: &[String]) -> Result<PassReport, PassError> {
        let names = self.names();
        if let Some(bad) = disabled.iter().find(|d| !names.contains(&d.as_str())) {
            return Err(PassError::UnknownPass { name: bad.clone(), known: names.join(", ") });
        }
        let mut records = Vec::new();
        for p in &self.passes {
            let enabled = !disabled.iter().any(|d| d == p.name());
            let rewrites = if enabled { p.run(graph) } else { 0 };
            // Types of derived values are re-inferred from scratch after a rewrite.
            for n in graph.g.node_weights_mut() {
                if n.op.declared_type().is_none() {
                    n.ty = None;
                }
            }
            verify(graph).map_err(|source| PassError::BrokeGraph { pass: p.name().into(), source })?;
            records.push(PassRecord { name: p.name().into(), enabled, rewrites });
        }
        Ok(PassReport { records })
    }
}
