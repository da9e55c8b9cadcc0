//! Qwen3-MoE (`config.json` `model_type = "qwen3_moe"`), lowered from
//! safetensors in the Hugging Face Hub layout (one `gate_proj`/`up_proj`/
//! `down_proj` per expert, `mlp.gate` the router).
//!
//! Everything but the MLP is Qwen3's decoder (`qwen3::lower_decoder`:
//! per-head q/k RMS norm, GQA). A MoE layer's MLP (HF
//! `Qwen3MoeSparseMoeBlock`) is `moe::moe_block`: `num_experts_per_tok` of
//! the experts, renormalized when `norm_topk_prob`, each a SwiGLU of
//! `moe_intermediate_size`. Layers in `mlp_only_layers`, or off the
//! `decoder_sparse_step` grid, keep a dense SwiGLU of `intermediate_size`.

use super::hf::rope_theta;
use super::hf::{HeadDim, HfDims};
use super::moe::{qwen_moe_block, Moe, QwenMoe};
use super::qwen3::{dense_mlp, lower_decoder, Decoder};
use super::Builder;
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::NodeId;

pub const MODEL_TYPE: &str = "qwen3_moe";

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::Key, false)?;
    let HfDims { d, n_layers, .. } = dims;
    let (moe, is_moe) = QwenMoe::read(st, n_layers, d)?;
    let Moe { n_experts, top_k, norm_topk, .. } = moe;
    let is_moe = |l: usize| is_moe[l];
    let mut mlp = |b: &mut Builder, l: usize, h: NodeId| -> Result<NodeId, Diagnostic> {
        if !is_moe(l) {
            return dense_mlp(b, &dims, l, h);
        }
        qwen_moe_block(b, &format!("model.layers.{l}.mlp"), h, &moe)
    };
    let moe_layers: Vec<String> = (0..n_layers).filter(|&l| is_moe(l)).map(|l| l.to_string()).collect();
    let facts = vec![("experts", format!("{n_experts}, {top_k} per token, norm_topk_prob {norm_topk}")), ("moe_layers", moe_layers.join(","))];
    let decoder = Decoder { qk_norm: true, scaling: super::hf::rope_scaling(st, "qwen3_moe")?, ..Decoder::plain(rope_theta(st)?) };
    lower_decoder(st, "qwen3_moe", dims, &decoder, &mut mlp, facts)
}
