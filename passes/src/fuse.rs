//! Fusion: the rules of `rules/` run on an e-graph of the graph, and the
//! cheapest form of each value is written back.
//!
//! Rewrite: whatever the rules say (each rule file states its algebra and
//! guards); the runner applies every rule to every match until nothing new
//! is found, under an iteration, node and time limit (a hit limit is
//! recorded in the plan, and the graph is still correct: every form in the
//! e-graph computes the same value). Extraction keeps a node of the input
//! wherever a fused form is not cheaper (in launches; `egraph.rs`).
//!
//! Legal: see `rules/` — no rule changes arithmetic, so logits are
//! bit-identical with the pass or any rule off.
//!
//! Counts: fused nodes the graph kept, and each rule's firings.

use crate::egraph;
use crate::pass::{Outcome, Pass};
use egg::{Runner, SimpleScheduler, StopReason};
use graphc_ir::plan::RuleRecord;
use graphc_ir::Graph;
use std::time::Duration;

/// The runner's limits: far above what a model needs (SmolLM2 saturates
/// in 3 iterations), so a hit limit means a rule that keeps firing.
pub const ITERATION_LIMIT: usize = 16;
pub const NODE_LIMIT: usize = 500_000;
pub const TIME_LIMIT: Duration = Duration::from_secs(2);

pub struct Fuse;

impl Pass for Fuse {
    fn name(&self) -> &'static str {
        "fuse"
    }

    fn rules(&self) -> Vec<String> {
        crate::rules::all().iter().map(|r| r.name.to_string()).collect()
    }

    fn run(&self, graph: &mut Graph) -> u64 {
        self.run_with(graph, &[]).rewrites
    }

    fn run_with(&self, graph: &mut Graph, disabled: &[String]) -> Outcome {
        let all = crate::rules::all();
        let rules: Vec<_> = all.iter().filter(|r| !disabled.iter().any(|d| *d == r.name.as_str())).collect();
        let (egraph, loaded) = egraph::load(graph);
        let mut runner = Runner::default()
            .with_scheduler(SimpleScheduler)
            .with_iter_limit(ITERATION_LIMIT)
            .with_node_limit(NODE_LIMIT)
            .with_time_limit(TIME_LIMIT)
            .with_egraph(egraph)
            .run(rules.iter().copied());
        runner.egraph.rebuild();
        let stopped = match &runner.stop_reason {
            Some(StopReason::Saturated) | None => None,
            Some(StopReason::IterationLimit(n)) => Some(format!("iteration limit ({n}) hit")),
            Some(StopReason::NodeLimit(n)) => Some(format!("e-node limit ({n}) hit")),
            Some(StopReason::TimeLimit(s)) => Some(format!("time limit ({s} s) hit")),
            Some(StopReason::Other(why)) => Some(why.clone()),
        };
        let records = all
            .iter()
            .map(|r| RuleRecord {
                name: r.name.to_string(),
                enabled: rules.iter().any(|e| e.name == r.name),
                fired: runner.iterations.iter().filter_map(|it| it.applied.get(&r.name)).sum::<usize>() as u64,
            })
            .collect();
        let rewrites = egraph::extract_into(&runner.egraph, &loaded, graph);
        Outcome { rewrites, rules: records, stopped }
    }
}
