//! The pass manager: named passes in a fixed order, per-pass disable, and a
//! count of rewrites per pass (what `graphc compile` prints and the plan stores).

use crate::cost::CostModel;
use crate::pass::{Outcome, Pass};
use graphc_ir::plan::PassRecord;
use graphc_ir::{verify, Graph, VerifyError};

#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("unknown pass or rule `{name}` in --disable-pass; the passes are: {known}")]
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
    /// The passes for a GPU plan (fusion extracted by launches).
    fn default() -> Self {
        PassManager::for_cost(CostModel::default())
    }
}

impl PassManager {
    /// The passes, fusion extracted by `cost` (`CostModel::for_device`).
    pub fn for_cost(cost: CostModel) -> Self {
        PassManager {
            passes: vec![
                Box::new(crate::kv_alias::KvAlias),
                Box::new(crate::kv_append::KvAppend),
                Box::new(crate::window_cache::WindowCache),
                Box::new(crate::hoist_sync::HoistSync),
                Box::new(crate::moe_dispatch::MoeDispatch { cost }),
                Box::new(crate::fuse::Fuse { cost, ..Default::default() }),
                Box::new(crate::attention_head::AttentionHead { cost }),
                Box::new(crate::attention_project::AttentionProject { cost }),
                Box::new(crate::norm_rope_attention::NormRopeAttention { cost }),
                Box::new(crate::residual_norm::ResidualNorm { cost }),
                Box::new(crate::elementwise_chain::ElementwiseChain { cost }),
                Box::new(crate::dead_code::DeadCode),
            ],
        }
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.passes.iter().map(|p| p.name()).collect()
    }

    /// Every rule of the rule-based passes, by name.
    pub fn rule_names(&self) -> Vec<String> {
        self.passes.iter().flat_map(|p| p.rules()).collect()
    }

    /// Run every pass not named in `disabled` on a verified graph (a rule
    /// named there is off in its pass).
    pub fn run(&self, graph: &mut Graph, disabled: &[String]) -> Result<PassReport, PassError> {
        let names = self.names();
        let rules = self.rule_names();
        if let Some(bad) = disabled.iter().find(|d| !names.contains(&d.as_str()) && !rules.contains(d)) {
            let known = format!("{}; the rules: {}", names.join(", "), rules.join(", "));
            return Err(PassError::UnknownPass { name: bad.clone(), known });
        }
        let mut records = Vec::new();
        for p in &self.passes {
            let enabled = !disabled.iter().any(|d| d == p.name());
            let outcome = if enabled { p.run_with(graph, disabled) } else { Outcome { rewrites: 0, rules: vec![], stopped: None } };
            // Types of derived values are re-inferred from scratch after a rewrite.
            for n in graph.nodes_mut() {
                if n.op.declared_type().is_none() {
                    n.ty = None;
                }
            }
            verify(graph).map_err(|source| PassError::BrokeGraph { pass: p.name().into(), source })?;
            let Outcome { rewrites, rules, stopped } = outcome;
            records.push(PassRecord { name: p.name().into(), enabled, rewrites, rules, stopped });
        }
        Ok(PassReport { records })
    }
}
