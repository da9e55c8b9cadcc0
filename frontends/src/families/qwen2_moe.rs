//! Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B; `config.json` `model_type =
//! "qwen2_moe"`, GGUF `qwen2moe` through the HF view), lowered with Hugging
//! Face tensor names.
//!
//! Qwen2's decoder (`qwen2.rs`: Q, K, V biased, unless `qkv_bias` says
//! not) whose routed layers' MLP (HF `Qwen2MoeSparseMoeBlock`) is Qwen's
//! routed experts (`moe::qwen_moe_block`: softmax, `num_experts_per_tok`
//! kept, renormalized when `norm_topk_prob`) plus a shared expert gated by
//! a sigmoid (`moe::qwen_shared_expert`, `shared_expert_intermediate_size`).
//! Layers off the `decoder_sparse_step` grid or in `mlp_only_layers` keep a
//! dense SwiGLU of `intermediate_size`.

use super::hf::{require_act, rope_scaling, rope_theta, HeadDim, HfDims};
use super::moe::{qwen_moe_block, qwen_shared_expert, Moe, QwenMoe};
use super::qwen3::{dense_mlp, lower_decoder, Decoder};
use super::Builder;
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NodeId};

pub const MODEL_TYPE: &str = "qwen2_moe";

/// The math-relevant `config.json` keys this family reads.
pub const CONFIG_READS: &[&str] = &[
    "rope_scaling",
    "rope_parameters",
    "hidden_act",
    "use_sliding_window",
    "sliding_window",
    "max_window_layers",
    "num_experts",
    "num_local_experts",
];

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::KeyOrHiddenOverHeads, false)?;
    let HfDims { d, n_layers, .. } = dims;
    require_act(st, MODEL_TYPE, "silu")?;
    if st.config.get("use_sliding_window").and_then(|v| v.as_bool()) == Some(true) {
        return Err(Diagnostic::new(&st.config_path, "`use_sliding_window` is true: Qwen2-MoE's sliding-window layers are not lowered yet"));
    }
    // transformers 5 names the biases' switch; the Hub's configs, older, always have them.
    let qkv_bias = match st.config.get("qkv_bias") {
        None | Some(serde_json::Value::Null) => true,
        Some(v) => v.as_bool().ok_or_else(|| Diagnostic::new(&st.config_path, "`qkv_bias` is not a boolean"))?,
    };
    let (moe, routes) = QwenMoe::read(st, n_layers, d)?;
    let shared_ffn = st.config_uint("shared_expert_intermediate_size")?;
    let mut mlp = |b: &mut Builder, l: usize, h: NodeId| -> Result<NodeId, Diagnostic> {
        if !routes[l] {
            return dense_mlp(b, &dims, l, h);
        }
        let prefix = format!("model.layers.{l}.mlp");
        let routed = qwen_moe_block(b, &prefix, h, &moe)?;
        let shared = qwen_shared_expert(b, &prefix, h, (shared_ffn, d))?;
        Ok(b.binary(BinaryOp::Add, routed, shared))
    };
    let Moe { n_experts, top_k, norm_topk, .. } = moe;
    let routed: Vec<String> = (0..n_layers).filter(|&l| routes[l]).map(|l| l.to_string()).collect();
    let facts = vec![
        ("experts", format!("{n_experts}, {top_k} per token, norm_topk_prob {norm_topk}, a shared expert of {shared_ffn}")),
        ("moe_layers", routed.join(",")),
        ("biases", if qkv_bias { "q, k, v" } else { "none" }.into()),
    ];
    let decoder = Decoder { qkv_bias, scaling: rope_scaling(st, MODEL_TYPE)?, ..Decoder::plain(rope_theta(st)?) };
    lower_decoder(st, MODEL_TYPE, dims, &decoder, &mut mlp, facts)
}
