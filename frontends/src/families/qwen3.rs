//! Qwen3 (`config.json` `model_type = "qwen3"`), lowered from safetensors
//! with Hugging Face tensor names.
//!
//! Per layer (HF `Qwen3DecoderLayer`): `x + attn(input_layernorm(x))`, then
//! `x + mlp(post_attention_layernorm(x))`, every norm RMS. Attention: Q and
//! K RMS-normed per head (`q_norm`, `k_norm`, weights of `head_dim`) before
//! NeoX RoPE (HF `rotate_half`), GQA with `num_key_value_heads`, scale
//! `1/sqrt(head_dim)`, no biases; the MLP is SwiGLU.
//!
//! config.json keys: `hidden_size`, `num_hidden_layers`,
//! `num_attention_heads`, `num_key_value_heads`, `head_dim`,
//! `intermediate_size`, `vocab_size`, `rms_norm_eps`, the RoPE base
//! (`rope_theta`, or transformers 5's `rope_parameters.rope_theta`),
//! `max_position_embeddings` (all required: a missing one is an error naming
//! it, never a default), `tie_word_embeddings` (optional; `false` when
//! absent, as in transformers' `Qwen3Config`).

use super::{batch, seq, AttentionCfg, Builder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::plan::ModelMeta;
use graphc_ir::{BinaryOp, DType, NormKind, Op, RopeScaling, RopeStyle, UnaryOp};
use std::collections::BTreeMap;

pub const MODEL_TYPE: &str = "qwen3";

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let u = |k: &str| st.config_uint(k);
    let (d, n_layers, nh, nkv, hd) =
        (u("hidden_size")?, u("num_hidden_layers")?, u("num_attention_heads")?, u("num_key_value_heads")?, u("head_dim")?);
    let (ffn, vocab, context) = (u("intermediate_size")?, u("vocab_size")?, u("max_position_embeddings")?);
    if nh == 0 || nkv == 0 || nh % nkv != 0 {
        return Err(Diagnostic::new(&st.config_path, format!("{nh} attention heads are not a multiple of {nkv} kv heads")));
    }
    if hd == 0 || hd % 2 != 0 {
        return Err(Diagnostic::new(&st.config_path, format!("head_dim {hd} is not a positive even number (RoPE rotates pairs)")));
    }
    let eps = st.config_float("rms_norm_eps")? as f32;
    let theta = rope_theta(st)?;
    if st.config.get("use_sliding_window").and_then(|v| v.as_bool()) == Some(true) {
        return Err(Diagnostic::new(&st.config_path, "`use_sliding_window` is true: Qwen3's sliding-window layers are not lowered yet"));
    }
    let tied = st.config.get("tie_word_embeddings").and_then(|v| v.as_bool()).unwrap_or(false);
    let mut b = Builder::new("qwen3", st);
    let tokens = b.input("tokens", DType::I32, vec![batch(), seq()]);
    let positions = b.input("positions", DType::I32, vec![batch(), seq()]);
    let last_rows = b.input("last_rows", DType::I32, vec![batch()]);
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let cfg = AttentionCfg {
        d,
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
        norm: norm.clone(),
        rope: Op::Rope { style: RopeStyle::Neox, rotary_dim: hd, theta, scaling: RopeScaling::None },
        scale: 1.0 / (hd as f32).sqrt(),
        window: None,
        softcap: None,
        biases: false,
    };
    for l in 0..n_layers {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("model.layers.{l}.{s}.weight");
        let ln = b.weight(&w("input_layernorm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, ln]);
        let (q_norm, k_norm) = (w("self_attn.q_norm"), w("self_attn.k_norm"));
        let names = [&w("self_attn.q_proj"), &w("self_attn.k_proj"), &w("self_attn.v_proj"), &w("self_attn.o_proj")];
        let o = b.attention(h, positions, names.map(|s| s.as_str()), Some((&q_norm, &k_norm)), &cfg)?;
        x = b.binary(BinaryOp::Add, x, o);
        let ln = b.weight(&w("post_attention_layernorm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, ln]);
        let down = b.gated_mlp(h, (&w("mlp.gate_proj"), &w("mlp.up_proj"), &w("mlp.down_proj")), (ffn, d), UnaryOp::Silu)?;
        x = b.binary(BinaryOp::Add, x, down);
    }
    b.layer = None;
    let out = if tied { Ok(embd) } else { Err(("lm_head.weight", vocab)) };
    b.logits_head((x, d), last_rows, (norm, "model.norm.weight"), out)?;
    let facts: BTreeMap<String, String> = [
        ("layers", n_layers.to_string()),
        ("hidden", d.to_string()),
        ("n_heads", nh.to_string()),
        ("n_kv_heads", nkv.to_string()),
        ("head_dim", hd.to_string()),
        ("norm_eps", format!("{eps:?}")),
        ("rope_theta", format!("{theta:?}")),
        ("tied_output", tied.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let meta = ModelMeta { vocab_size: vocab, context_length: context, bos_id: None, add_bos: false, stop_ids: vec![], facts };
    Ok(Lowered { graph: b.g, manifest: b.manifest, meta })
}

/// The RoPE base: top-level `rope_theta` (transformers 4) or
/// `rope_parameters.rope_theta` (transformers 5), whose `rope_type` must be
/// `default` (scaled RoPE variants are not lowered yet).
pub(crate) fn rope_theta(st: &SafetensorsFile) -> Result<f32, Diagnostic> {
    if let Some(t) = st.config.get("rope_theta").and_then(|v| v.as_f64()) {
        return Ok(t as f32);
    }
    let Some(params) = st.config.get("rope_parameters") else {
        return Err(Diagnostic::new(&st.config_path, "missing key `rope_theta` (or `rope_parameters.rope_theta`)"));
    };
    let kind = params.get("rope_type").and_then(|v| v.as_str()).unwrap_or("default");
    if kind != "default" {
        return Err(Diagnostic::new(&st.config_path, format!("`rope_parameters.rope_type` is `{kind}`; graphc lowers only `default` RoPE for qwen3")));
    }
    params
        .get("rope_theta")
        .and_then(|v| v.as_f64())
        .map(|t| t as f32)
        .ok_or_else(|| Diagnostic::new(&st.config_path, "`rope_parameters.rope_theta` is missing or not a number"))
}
