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
use crate::safetensors::SafetensorsFile;
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

/// Qwen's MoE keys (Qwen2-MoE, Qwen3-MoE): `num_experts` (transformers 5:
/// `num_local_experts`), `num_experts_per_tok`, `moe_intermediate_size`,
/// `norm_topk_prob`, and which layers route: those on the
/// `decoder_sparse_step` grid not in `mlp_only_layers`.
pub(crate) struct QwenMoe;

impl QwenMoe {
    /// The routed layers' shape, and whether each layer routes.
    pub fn read(st: &SafetensorsFile, n_layers: usize, d: usize) -> Result<(Moe, Vec<bool>), Diagnostic> {
        let path = &st.config_path;
        let experts_key = if st.config.get("num_experts").is_some() { "num_experts" } else { "num_local_experts" };
        if st.config.get(experts_key).is_none() {
            return Err(Diagnostic::new(path, "missing the expert count: neither `num_experts` nor `num_local_experts` is set"));
        }
        let (n_experts, top_k, ffn, step) = (
            st.config_uint(experts_key)?,
            st.config_uint("num_experts_per_tok")?,
            st.config_uint("moe_intermediate_size")?,
            st.config_uint("decoder_sparse_step")?,
        );
        if n_experts == 0 || top_k == 0 || top_k > n_experts || step == 0 {
            return Err(Diagnostic::new(path, format!("{top_k} experts per token of {n_experts}, every {step} layer(s), is not a MoE")));
        }
        let norm_topk = st.config_value("norm_topk_prob")?.as_bool().ok_or_else(|| Diagnostic::new(path, "`norm_topk_prob` is not a boolean"))?;
        let dense_only: Vec<usize> = match st.config.get("mlp_only_layers") {
            None | Some(serde_json::Value::Null) => vec![],
            Some(v) => v
                .as_array()
                .and_then(|a| a.iter().map(|l| l.as_u64().map(|l| l as usize)).collect())
                .ok_or_else(|| Diagnostic::new(path, "`mlp_only_layers` is not a list of layer numbers"))?,
        };
        let routes = (0..n_layers).map(|l| !dense_only.contains(&l) && (l + 1).is_multiple_of(step)).collect();
        Ok((Moe { n_experts, top_k, ffn, d, norm_topk }, routes))
    }
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
    let weights = routing_weights(b, logits, moe.top_k, moe.norm_topk);
    experts_sum(b, expert, h, weights, moe, UnaryOp::Silu)
}

/// `Σ_e weights[.., e] · expert_e(h)`, each expert a gated MLP with `act`
/// (expert `e`'s gate, up and down weights `expert(e)`), in the form
/// `moe_dispatch` matches.
pub(crate) fn experts_sum(
    b: &mut Builder,
    expert: &dyn Fn(usize) -> [String; 3],
    h: NodeId,
    weights: NodeId,
    moe: &Moe,
    act: UnaryOp,
) -> Result<NodeId, Diagnostic> {
    let mut out = None;
    for e in 0..moe.n_experts {
        let [gate, up, down] = expert(e);
        let y = b.gated_mlp(h, (&gate, &up, &down), (moe.ffn, moe.d), act)?;
        out = Some(add_weighted(b, out, y, weights, e));
    }
    Ok(out.expect("at least one expert"))
}

/// The routing weights of router `logits` (`[batch, seq, n_experts]`):
/// softmax over the experts, the `top_k` largest kept (`top_k_mask`),
/// divided by their sum when `norm_topk`.
pub(crate) fn routing_weights(b: &mut Builder, logits: NodeId, top_k: usize, norm_topk: bool) -> NodeId {
    let probs = b.op(Op::Softmax { axis: 2, softcap: None }, &[logits]);
    let chosen = b.op(Op::TopKMask { axis: 2, k: top_k }, &[probs]);
    let weights = b.binary(BinaryOp::Mul, probs, chosen);
    if !norm_topk {
        return weights;
    }
    let sum = b.op(Op::Reduce { op: ReduceOp::Sum, axis: 2 }, &[weights]);
    b.binary(BinaryOp::Div, weights, sum)
}

/// `acc + y · weights[.., e]` (or the first term alone): expert `e`'s
/// term added to the sum, left to right, in the form `moe_dispatch` matches.
pub(crate) fn add_weighted(b: &mut Builder, acc: Option<NodeId>, y: NodeId, weights: NodeId, e: usize) -> NodeId {
    let we = b.op(Op::Narrow { axis: 2, start: e.into(), len: 1usize.into() }, &[weights]);
    let y = b.binary(BinaryOp::Mul, y, we);
    match acc {
        None => y,
        Some(acc) => b.binary(BinaryOp::Add, acc, y),
    }
}

/// Qwen's shared expert beside the routed ones (Qwen2-MoE, Qwen3-Next):
/// `sigmoid(h·PREFIX.shared_expert_gate) · shared_expert(h)`, a SwiGLU of
/// `ffn` under `PREFIX.shared_expert.{gate,up,down}_proj`.
pub(crate) fn qwen_shared_expert(b: &mut Builder, prefix: &str, h: NodeId, (ffn, d): (usize, usize)) -> Result<NodeId, Diagnostic> {
    let sw = |s: &str| format!("{prefix}.shared_expert.{s}.weight");
    let shared = b.gated_mlp(h, (&sw("gate_proj"), &sw("up_proj"), &sw("down_proj")), (ffn, d), UnaryOp::Silu)?;
    let gate_w = b.weight(&format!("{prefix}.shared_expert_gate.weight"), Some(&[1, d]))?;
    let gate = b.matmul(h, gate_w);
    let gate = b.unary(UnaryOp::Sigmoid, gate);
    Ok(b.binary(BinaryOp::Mul, shared, gate))
}
