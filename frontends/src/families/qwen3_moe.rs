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
use super::moe::{qwen_moe_block, Moe};
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
        qwen_moe_block(b, &format!("model.layers.{l}.mlp"), h, &moe)
    };
    let moe_layers: Vec<String> = (0..n_layers).filter(|&l| is_moe(l)).map(|l| l.to_string()).collect();
    let facts = vec![("experts", format!("{n_experts}, {top_k} per token, norm_topk_prob {norm_topk}")), ("moe_layers", moe_layers.join(","))];
    let decoder = Decoder { qk_norm: true, scaling: super::hf::rope_scaling(st, "qwen3_moe")?, ..Decoder::plain(rope_theta(st)?) };
    lower_decoder(st, "qwen3_moe", dims, &decoder, &mut mlp, facts)
}
