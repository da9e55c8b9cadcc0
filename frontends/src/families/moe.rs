//! A routed mixture-of-experts MLP, as Qwen3-MoE, Qwen3-Next and Mixtral
//! write it: router logits `h·Wgate`, softmax over the experts, the `top_k`
//! largest kept (`top_k_mask`), divided by their sum when `norm_topk`, and
//! the output `Σ_e w_e · expert_e(h)`, each expert a SwiGLU of `ffn`.
//!
//! The lowering is the dense definition: every expert on every token, the
//! unchosen ones weighted 0. The `moe_dispatch` pass turns it into one
//! `moe_experts` op that runs each expert only on the tokens routed to it
//! (CPU plans; a GPU runs the dense form).

use super::Builder;
use crate::error::Diagnostic;
use graphc_ir::{BinaryOp, NodeId, Op, ReduceOp, UnaryOp};

/// A routed MoE layer's shape.
pub(crate) struct Moe {
    pub n_experts: usize,
    pub top_k: usize,
    /// Each expert's intermediate size.
    pub ffn: usize,
    pub d: usize,
    pub norm_topk: bool,
}

/// Qwen's routed experts under `prefix`: the router `PREFIX.gate.weight`,
/// the experts `PREFIX.experts.E.{gate,up,down}_proj.weight`.
pub(crate) fn qwen_moe_block(b: &mut Builder, prefix: &str, h: NodeId, moe: &Moe) -> Result<NodeId, Diagnostic> {
    let expert = |e: usize| ["gate_proj", "up_proj", "down_proj"].map(|p| format!("{prefix}.experts.{e}.{p}.weight"));
    moe_block(b, &format!("{prefix}.gate.weight"), &expert, h, moe)
}

/// The routed experts on `h [batch, seq, d]`: the router weight `router`
/// (`[n_experts, d]`), expert `e`'s gate, up and down weights `expert(e)`.
pub(crate) fn moe_block(b: &mut Builder, router: &str, expert: &dyn Fn(usize) -> [String; 3], h: NodeId, moe: &Moe) -> Result<NodeId, Diagnostic> {
    let router = b.weight(router, Some(&[moe.n_experts, moe.d]))?;
    let logits = b.matmul(h, router);
    let probs = b.op(Op::Softmax { axis: 2, softcap: None }, &[logits]);
    let chosen = b.op(Op::TopKMask { axis: 2, k: moe.top_k }, &[probs]);
    let mut weights = b.binary(BinaryOp::Mul, probs, chosen);
    if moe.norm_topk {
        let sum = b.op(Op::Reduce { op: ReduceOp::Sum, axis: 2 }, &[weights]);
        weights = b.binary(BinaryOp::Div, weights, sum);
    }
    let mut out = None;
    for e in 0..moe.n_experts {
        let [gate, up, down] = expert(e);
        let y = b.gated_mlp(h, (&gate, &up, &down), (moe.ffn, moe.d), UnaryOp::Silu)?;
        let we = b.op(Op::Narrow { axis: 2, start: e.into(), len: 1usize.into() }, &[weights]);
        let y = b.binary(BinaryOp::Mul, y, we);
        out = Some(match out {
            None => y,
            Some(acc) => b.binary(BinaryOp::Add, acc, y),
        });
    }
    Ok(out.expect("at least one expert"))
}
