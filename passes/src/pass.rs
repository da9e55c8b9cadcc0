//! What a pass is: a named rewrite of the graph that says how many
//! rewrites it made (a rule-based pass also names its rules and what each did).

use graphc_ir::plan::RuleRecord;
use graphc_ir::Graph;

/// One rewrite pass over the graph; returns how many rewrites it performed.
pub trait Pass {
    fn name(&self) -> &'static str;
    fn run(&self, graph: &mut Graph) -> u64;

    /// A rule-based pass's rules by name (which `disabled` may name too).
    fn rules(&self) -> Vec<String> {
        vec![]
    }

    /// `run` with the rules named in `disabled` off, and what each rule did.
    fn run_with(&self, graph: &mut Graph, disabled: &[String]) -> Outcome {
        let _ = disabled;
        Outcome { rewrites: self.run(graph), rules: vec![], stopped: None }
    }
}

/// What a pass did: its rewrites, its rules' firings, why it stopped early.
pub struct Outcome {
    pub rewrites: u64,
    pub rules: Vec<RuleRecord>,
    pub stopped: Option<String>,
}
