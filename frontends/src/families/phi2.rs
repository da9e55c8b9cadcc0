//! Phi-2 (`config.json` `model_type = "phi"`), lowered from safetensors
//! with Hugging Face tensor names.
//!
//! Per layer (HF `PhiDecoderLayer`): one LayerNorm (with bias) feeds
//! attention and the MLP *in parallel*: `x + attn(ln(x)) + mlp(ln(x))`.
//! Attention: biased Q/K/V/dense projections, RoPE on the first
//! `partial_rotary_factor * head_dim` features of each head (NeoX pairs
//! within them; the rest pass through), MHA unless `num_key_value_heads`
//! says otherwise, scale `1/sqrt(head_dim)`. MLP: `fc2(gelu(fc1(h)))` with
//! GELU in its tanh form (`gelu_new`). Final LayerNorm, biased `lm_head`.
//!
//! config.json keys: `hidden_size`, `num_hidden_layers`,
//! `num_attention_heads`, `intermediate_size`, `vocab_size`,
//! `max_position_embeddings`, the RoPE base (see `hf::rope_theta`), the
//! LayerNorm epsilon under any of its spellings (`layer_norm_eps`,
//! `layer_norm_epsilon`, `layer_norm_rms_epsilon`; an error names them all
//! when none is there), `partial_rotary_factor` (top level, or in
//! `rope_parameters` as transformers 5 writes it), `hidden_act`
//! (`gelu_new`/`gelu_pytorch_tanh`: tanh form; `gelu`: erf form), and
//! `num_key_value_heads` (absent or null: one per attention head, as in HF).

use super::hf::{rope_theta, rotary_dim, HeadDim, HfDims};
use super::{batch, bias_name, seq, AttentionCfg, Builder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NodeId, NormKind, Op, RopeScaling, RopeStyle, UnaryOp};

pub const MODEL_TYPE: &str = "phi";

/// The spellings of the LayerNorm epsilon key, in the order they are tried.
pub const EPS_KEYS: &[&str] = &["layer_norm_eps", "layer_norm_epsilon", "layer_norm_rms_epsilon"];

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::HiddenOverHeads, true)?;
    let HfDims { d, n_layers, head_dim: hd, ffn, vocab, context, .. } = dims;
    let eps = layer_norm_eps(st)?;
    let rotary_dim = rotary_dim(st, hd, None)?;
    let act = match st.config_value("hidden_act")?.as_str() {
        Some("gelu_new") | Some("gelu_pytorch_tanh") => UnaryOp::GeluTanh,
        Some("gelu") => UnaryOp::GeluErf,
        other => return Err(Diagnostic::new(&st.config_path, format!("`hidden_act` is {other:?}; expected \"gelu_new\" or \"gelu\""))),
    };
    let theta = rope_theta(st)?;
    let mut b = Builder::new("phi2", st);
    let (tokens, positions, last_rows) = b.inputs();
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    let layer_norm = |b: &mut Builder, x: NodeId, weight: &str| -> Result<NodeId, Diagnostic> {
        let w = b.weight(weight, Some(&[d]))?;
        let bias = b.weight(&bias_name(weight), Some(&[d]))?;
        Ok(b.op(Op::Norm { kind: NormKind::Layer, eps }, &[x, w, bias]))
    };
    let linear = |b: &mut Builder, x: NodeId, weight: &str, (rows, cols): (usize, usize)| -> Result<NodeId, Diagnostic> {
        let w = b.weight(weight, Some(&[rows, cols]))?;
        let bias = b.weight(&bias_name(weight), Some(&[rows]))?;
        let y = b.matmul(x, w);
        Ok(b.binary(BinaryOp::Add, y, bias))
    };
    let cfg = AttentionCfg {
        qkv_bias: true,
        out_bias: true,
        ..dims.attention(Op::Norm { kind: NormKind::Layer, eps }, Op::Rope { style: RopeStyle::Neox, rotary_dim, theta, scaling: RopeScaling::None })
    };
    for l in 0..n_layers {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("model.layers.{l}.{s}.weight");
        let h = layer_norm(&mut b, x, &w("input_layernorm"))?;
        let names = [&w("self_attn.q_proj"), &w("self_attn.k_proj"), &w("self_attn.v_proj"), &w("self_attn.dense")];
        let attn = b.attention(h, positions, names.map(|s| s.as_str()), None, &cfg)?;
        // The MLP reads the same normed input: attention and MLP in parallel.
        let up = linear(&mut b, h, &w("mlp.fc1"), (ffn, d))?;
        let up = b.unary(act, up);
        let mlp = linear(&mut b, up, &w("mlp.fc2"), (d, ffn))?;
        let both = b.binary(BinaryOp::Add, attn, mlp);
        x = b.binary(BinaryOp::Add, x, both);
    }
    b.layer = None;
    let flat = b.reshape(x, vec![batch().mul(&seq()), d.into()]);
    let last = b.op(Op::Gather, &[flat, last_rows]);
    let h = layer_norm(&mut b, last, "model.final_layernorm.weight")?;
    let logits = linear(&mut b, h, "lm_head.weight", (vocab, d))?;
    b.op(Op::Output { name: graphc_ir::io::LOGITS.into() }, &[logits]);
    let facts = [
        ("rotary_dim", rotary_dim.to_string()),
        ("norm", format!("layer, eps {eps:?}")),
        ("mlp_activation", format!("{act:?}")),
        ("residual", "parallel: x + attn(ln(x)) + mlp(ln(x))".to_string()),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts.to_vec()].concat()))
}

/// The LayerNorm epsilon under the first of its spellings that is present.
pub fn layer_norm_eps(st: &SafetensorsFile) -> Result<f32, Diagnostic> {
    for key in EPS_KEYS {
        if st.config.get(key).is_some() {
            return Ok(st.config_float(key)? as f32);
        }
    }
    Err(Diagnostic::new(
        &st.config_path,
        format!("missing the LayerNorm epsilon: none of {} is set", EPS_KEYS.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")),
    )
    .help("phi configs spell it `layer_norm_eps`; converted ones `layer_norm_epsilon` or `layer_norm_rms_epsilon`"))
}
