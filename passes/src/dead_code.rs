//! Dead-code elimination.
//!
//! Rewrite: remove every node whose value reaches no sink (`Output`,
//! `StateOut`). Legal always: ops have no side effects apart from sinks.
//! Counts: nodes removed. Frontends may emit a weight or view they end up
//! not using (e.g. an untied output lowered before the tie is known); this
//! keeps such nodes out of the plan and its weight manifest.

use crate::pass::Pass;
use graphc_ir::Graph;
use std::collections::HashSet;

pub struct DeadCode;

impl Pass for DeadCode {
    fn name(&self) -> &'static str {
        "dead_code"
    }

    fn run(&self, graph: &mut Graph) -> u64 {
        let mut live = HashSet::new();
        let mut stack: Vec<_> = graph.node_ids().filter(|&n| graph.node(n).op.is_sink()).collect();
        while let Some(n) = stack.pop() {
            if live.insert(n) {
                stack.extend(graph.inputs(n));
            }
        }
        let dead: Vec<_> = graph.node_ids().filter(|n| !live.contains(n)).collect();
        for &n in &dead {
            graph.remove(n);
        }
        dead.len() as u64
    }
}
