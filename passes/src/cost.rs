//! What extraction minimizes, by the backend a plan is for: every fused
//! form computes the same bits, so choosing among them is a question of
//! speed only, and the backends pay for different things.

/// The cost extraction minimizes (`egraph::extract_into`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CostModel {
    /// Kernel launches (a GPU): each op that computes is one. A fused op
    /// that forms a shared input again itself (`norm_matmul`: a norm read
    /// by q, k and v) costs nothing more: a few reads inside a kernel that
    /// runs anyway, while the shared input's own launch goes once every
    /// reader forms it.
    #[default]
    Launches,
    /// Passes over memory (the CPU): each op that computes is one, and a
    /// fused op that forms a shared input again pays for that pass too (a
    /// norm of every row, a dispatch to the thread pool), so a norm read by
    /// several projections stays one shared op (recomputing the q/k/v
    /// norms slowed a CPU decode step: `docs/passes.md`).
    Passes,
}

impl CostModel {
    /// The model for a plan's device (`cpu`, `wgpu`, `cuda`, `metal`).
    pub fn for_device(device: &str) -> CostModel {
        match device {
            "cpu" => CostModel::Passes,
            _ => CostModel::Launches,
        }
    }

    /// What forming a shared input again costs a fused op that does.
    pub fn recompute(self) -> u64 {
        match self {
            CostModel::Launches => 0,
            CostModel::Passes => 1,
        }
    }
}
