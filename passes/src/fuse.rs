//! Fusion: the rules of `rules/` run on an e-graph of the graph, and the
//! cheapest form of each value is written back.
//!
//! Rewrite: whatever the rules say (each rule file states its algebra and
//! guards); the runner applies every rule to every match until nothing new
//! is found, under an iteration, node and time limit (a hit limit is
//! recorded in the plan, and the graph is still correct: every form in the
//! e-graph computes the same value). Extraction keeps a node of the input
//! wherever a fused form is not cheaper, by the plan's backend's cost
//! (`cost.rs`: launches on a GPU, passes over memory on the CPU; `egraph.rs`).
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

/// The runner's limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub iterations: usize,
    pub nodes: usize,
    pub time: Duration,
}

impl Default for Limits {
    /// Far above what a model needs (SmolLM2 saturates in 3 iterations),
    /// so a hit limit means a rule that keeps firing.
    fn default() -> Self {
        Limits { iterations: 16, nodes: 500_000, time: Duration::from_secs(2) }
    }
}

#[derive(Default)]
pub struct Fuse {
    pub limits: Limits,
    /// What extraction minimizes: the plan's backend's cost.
    pub cost: crate::cost::CostModel,
}

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
            .with_iter_limit(self.limits.iterations)
            .with_node_limit(self.limits.nodes)
            .with_time_limit(self.limits.time)
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
        let rewrites = egraph::extract_into(&runner.egraph, &loaded, graph, self.cost);
        Outcome { rewrites, rules: records, stopped }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::CostModel;
    use crate::pass::Pass;
    use graphc_ir::{text, verify, Op};

    const MLP: &str = r#"graph "mlp" {
  %0 = input{name="x"} : f32[batch, seq, 64]
  %1 = weight{name="w_gate"} : q4_0[96, 64]
  %2 = weight{name="w_up"} : q4_0[96, 64]
  %3 = matmul %0, %1
  %4 = matmul %0, %2
  %5 = silu %3
  %6 = mul %5, %4
  %7 = output{name="y"} %6
}"#;

    fn ops(g: &Graph) -> Vec<String> {
        g.nodes().map(|n| n.op.mnemonic()).filter(|m| !matches!(m.as_str(), "input" | "weight" | "output")).collect()
    }

    /// A limit hit is recorded, and the graph is still correct: what the
    /// rules found before the limit is kept (the glu), what they had not
    /// reached yet is not (matmul-glu needs the glu first).
    #[test]
    fn an_iteration_limit_is_recorded_and_leaves_a_correct_graph() {
        let mut g = text::parse(MLP).unwrap();
        verify(&mut g).unwrap();
        let one = Fuse { limits: Limits { iterations: 1, ..Limits::default() }, ..Fuse::default() };
        let outcome = one.run_with(&mut g, &[]);
        assert_eq!(outcome.stopped.as_deref(), Some("iteration limit (1) hit"));
        let fired = |name: &str| outcome.rules.iter().find(|r| r.name == name).unwrap().fired;
        assert_eq!((fired("glu-silu"), fired("matmul-glu")), (1, 0));
        for n in g.nodes_mut() {
            if n.op.declared_type().is_none() {
                n.ty = None;
            }
        }
        verify(&mut g).unwrap();
        assert_eq!(ops(&g), ["matmul", "matmul", "glu"]);

        let mut g = text::parse(MLP).unwrap();
        verify(&mut g).unwrap();
        let outcome = Fuse::default().run_with(&mut g, &[]);
        assert_eq!(outcome.stopped, None, "saturates within the default limits");
        assert_eq!(ops(&g), ["matmul_glu"]);
        assert!(g.nodes().any(|n| matches!(n.op, Op::MatMulGlu { .. })));
    }

    const QKV: &str = r#"graph "qkv" {
  %0 = input{name="x"} : f32[batch, seq, 64]
  %1 = weight{name="norm"} : f32[64]
  %2 = weight{name="w_q"} : q4_0[64, 64]
  %3 = weight{name="w_k"} : q4_0[32, 64]
  %4 = weight{name="w_head"} : q4_0[96, 64]
  %5 = weight{name="head_norm"} : f32[64]
  %6 = norm{kind=rms, eps=1e-5} %0, %1
  %7 = matmul %6, %2
  %8 = matmul %6, %3
  %9 = norm{kind=rms, eps=1e-5} %0, %5
  %10 = matmul %9, %4
  %11 = output{name="q"} %7
  %12 = output{name="k"} %8
  %13 = output{name="head"} %10
}"#;

    /// Extraction by the plan's device: counted in launches, both readers
    /// of a shared norm form it and the norm goes; counted in passes over
    /// memory, the shared norm stays (recomputing it costs a pass) while a
    /// norm read once still fuses.
    #[test]
    fn the_cost_model_decides_whether_a_shared_norm_is_recomputed() {
        for (cost, want) in [
            (CostModel::Launches, vec!["norm_matmul", "norm_matmul", "norm_matmul"]),
            (CostModel::Passes, vec!["norm", "matmul", "matmul", "norm_matmul"]),
        ] {
            let mut g = text::parse(QKV).unwrap();
            verify(&mut g).unwrap();
            let outcome = Fuse { cost, ..Fuse::default() }.run_with(&mut g, &[]);
            for n in g.nodes_mut() {
                if n.op.declared_type().is_none() {
                    n.ty = None;
                }
            }
            verify(&mut g).unwrap();
            assert_eq!(ops(&g), want, "{cost:?}");
            assert_eq!(outcome.rules.iter().find(|r| r.name == "norm-matmul").unwrap().fired, 3, "{cost:?}: the rule fires either way");
        }
    }
}
