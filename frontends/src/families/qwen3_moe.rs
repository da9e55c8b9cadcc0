//! Qwen3-MoE (`config.json` `model_type = "qwen3_moe"`), lowered from
//! safetensors in the Hugging Face Hub layout (one `gate_proj`/`up_proj`/
//! `down_proj` per expert, `mlp.gate` the router).
//!
//! Everything but the MLP is Qwen3's decoder (`qwen3::lower_decoder`:
//! per-head q/k RMS norm, GQA). A MoE layer's MLP
//! (HF `Qwen3MoeSparseMoeBlock`): router logits `h·Wgate`, softmax over the
//! experts, the `num_experts_per_tok` largest kept (`top_k_mask`), divided
//! by their sum when `norm_topk_prob`, and the output is `Σ_e w_e ·
//! expert_e(h)`, each expert a SwiGLU of `moe_intermediate_size`. Layers in
//! `mlp_only_layers`, or off the `decoder_sparse_step` grid, keep a dense
//! SwiGLU of `intermediate_size`.
//!
//! This lowering is dense: every expert runs on every token and the
//! unchosen ones are weighted by 0 (exact, and what the parity fixture
//! checks; E/k times the work of sparse dispatch, which is not done yet).

use super::hf::rope_theta;
use super::hf::{HeadDim, HfDims};
use super::qwen3::{dense_mlp, lower_decoder, Decoder};
use super::Builder;
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NodeId, Op, ReduceOp, UnaryOp};

pub const MODEL_TYPE: &str = "qwen3_moe";

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::Key, false)?;
    let HfDims { d, n_layers, .. } = dims;
    // transformers 4 writes `num_experts`, 5 `num_local_experts`.
    let experts_key = if st.config.get("num_experts").is_some() { "num_experts" } else { "num_local_experts" };
    if st.config.get(experts_key).is_none() {
        return Err(Diagnostic::new(&st.config_path, "missing the expert count: neither `num_experts` nor `num_local_experts` is set"));
    }
    let (n_experts, top_k, moe_ffn, step) = (
        st.config_uint(experts_key)?,
        st.config_uint("num_experts_per_tok")?,
        st.config_uint("moe_intermediate_size")?,
        st.config_uint("decoder_sparse_step")?,
    );
    if n_experts == 0 || top_k == 0 || top_k > n_experts || step == 0 {
        return Err(Diagnostic::new(&st.config_path, format!("{top_k} experts per token of {n_experts}, every {step} layer(s), is not a MoE")));
    }
    let norm_topk =
        st.config_value("norm_topk_prob")?.as_bool().ok_or_else(|| Diagnostic::new(&st.config_path, "`norm_topk_prob` is not a boolean"))?;
    let dense_only: Vec<usize> = match st.config.get("mlp_only_layers") {
        None | Some(serde_json::Value::Null) => vec![],
        Some(v) => v
            .as_array()
            .and_then(|a| a.iter().map(|l| l.as_u64().map(|l| l as usize)).collect())
            .ok_or_else(|| Diagnostic::new(&st.config_path, "`mlp_only_layers` is not a list of layer numbers"))?,
    };
    let is_moe = |l: usize| !dense_only.contains(&l) && (l + 1).is_multiple_of(step);
    let moe = Moe { n_experts, top_k, ffn: moe_ffn, d, norm_topk };
    let mut mlp = |b: &mut Builder, l: usize, h: NodeId| -> Result<NodeId, Diagnostic> {
        if !is_moe(l) {
            return dense_mlp(b, &dims, l, h);
        }
        moe_block(b, &format!("model.layers.{l}.mlp"), h, &moe)
    };
    let moe_layers: Vec<String> = (0..n_layers).filter(|&l| is_moe(l)).map(|l| l.to_string()).collect();
    let facts = vec![
        ("experts", format!("{n_experts}, {top_k} per token, norm_topk_prob {norm_topk}")),
        ("moe_layers", moe_layers.join(",")),
        ("moe_dispatch", "dense (every expert, unchosen weighted 0)".to_string()),
    ];
    let decoder = Decoder { qk_norm: true, scaling: super::hf::rope_scaling(st, "qwen3_moe")?, ..Decoder::plain(rope_theta(st)?) };
    lower_decoder(st, "qwen3_moe", dims, &decoder, &mut mlp, facts)
}

/// A routed MoE layer's shape.
pub(crate) struct Moe {
    pub n_experts: usize,
    pub top_k: usize,
    /// Each expert's intermediate size.
    pub ffn: usize,
    pub d: usize,
    pub norm_topk: bool,
}

/// Qwen's routed experts on `h [batch, seq, d]`, weights under `prefix`
/// (`PREFIX.gate` the router, `PREFIX.experts.E.{gate,up,down}_proj`):
/// softmax over the router logits, the `top_k` largest kept
/// (`top_k_mask`), renormalized when `norm_topk`, `Σ_e w_e · expert_e(h)`.
/// Dense dispatch: every expert runs, unchosen ones weighted 0.
pub(crate) fn moe_block(b: &mut Builder, prefix: &str, h: NodeId, moe: &Moe) -> Result<NodeId, Diagnostic> {
    let router = b.weight(&format!("{prefix}.gate.weight"), Some(&[moe.n_experts, moe.d]))?;
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
        let ew = |s: &str| format!("{prefix}.experts.{e}.{s}.weight");
        let y = b.gated_mlp(h, (&ew("gate_proj"), &ew("up_proj"), &ew("down_proj")), (moe.ffn, moe.d), UnaryOp::Silu)?;
        let we = b.op(Op::Narrow { axis: 2, start: e.into(), len: 1usize.into() }, &[weights]);
        let y = b.binary(BinaryOp::Mul, y, we);
        out = Some(match out {
            None => y,
            Some(acc) => b.binary(BinaryOp::Add, acc, y),
        });
    }
    Ok(out.expect("at least one expert"))
}
