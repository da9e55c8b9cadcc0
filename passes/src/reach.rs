//! Whether a value is computed from another: what a structural pass checks
//! before its new op reads operands that might depend on a value the op
//! replaces (the op would then read its own result: a cycle).

use graphc_ir::{Graph, NodeId};
use std::collections::HashSet;

/// Whether any of `values` is computed from (or is) any of `sources`.
pub fn computed_from(g: &Graph, values: &[NodeId], sources: &[NodeId]) -> bool {
    let sources: HashSet<NodeId> = sources.iter().copied().collect();
    let mut seen = HashSet::new();
    let mut stack = values.to_vec();
    while let Some(n) = stack.pop() {
        if sources.contains(&n) {
            return true;
        }
        if seen.insert(n) {
            stack.extend(g.inputs(n));
        }
    }
    false
}
