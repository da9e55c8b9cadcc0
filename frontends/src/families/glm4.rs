//! GLM-4 (`config.json` `model_type = "glm4"`: GLM-4-9B-0414, GLM-Z1; GGUF
//! `glm4` through the HF view), lowered with Hugging Face tensor names.
//!
//! Per layer (HF `Glm4DecoderLayer`), every norm RMS with a plain `w`:
//! `x + post_self_attn_layernorm(attn(input_layernorm(x)))`, then
//! `x + post_mlp_layernorm(mlp(post_attention_layernorm(x)))`. Attention:
//! q, k, v biased where `attention_bias` (GLM-4's are), the output
//! projection never; GPT-J RoPE (adjacent pairs, HF Glm's
//! `repeat_interleave`d cos/sin) on the first `partial_rotary_factor` (0.5)
//! of each head; GQA, scale `1/sqrt(head_dim)`. The MLP is Phi-3's: one
//! `gate_up_proj`, the gate's rows first, SwiGLU.

use super::hf::{config_flag, require_act, rope_theta, rotary_dim, tied, HeadDim, HfDims};
use super::{AttentionCfg, Builder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NormKind, Op, RopeScaling, RopeStyle};

pub const MODEL_TYPE: &str = "glm4";

/// The math-relevant `config.json` keys this family reads.
/// (RoPE scaling is not read: none of GLM-4's sets one, so a config that
/// does is refused.)
pub const CONFIG_READS: &[&str] = &["hidden_act", "attention_bias", "partial_rotary_factor", "head_dim"];

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::KeyOrHiddenOverHeads, false)?;
    let HfDims { d, n_layers, head_dim: hd, ffn, vocab, context, .. } = dims;
    require_act(st, MODEL_TYPE, "silu")?;
    let bias = config_flag(st, "attention_bias")?;
    let eps = st.config_float("rms_norm_eps")? as f32;
    let rotary = rotary_dim(st, hd, Some(0.5))?;
    let (theta, scaling) = (rope_theta(st)?, RopeScaling::None);
    let tied = tied(st);
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let rope = Op::Rope { style: RopeStyle::GptJ, rotary_dim: rotary, theta, scaling };
    let cfg = AttentionCfg { qkv_bias: bias, ..dims.attention(norm.clone(), rope) };
    let mut b = Builder::new(MODEL_TYPE, st);
    let (tokens, positions, last_rows) = b.inputs();
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    let normed = |b: &mut Builder, h, name: &str| -> Result<_, Diagnostic> {
        let w = b.weight(name, Some(&[d]))?;
        Ok(b.op(norm.clone(), &[h, w]))
    };
    for l in 0..n_layers {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("model.layers.{l}.{s}.weight");
        let h = normed(&mut b, x, &w("input_layernorm"))?;
        let names = [&w("self_attn.q_proj"), &w("self_attn.k_proj"), &w("self_attn.v_proj"), &w("self_attn.o_proj")];
        let o = b.attention(h, positions, names.map(|s| s.as_str()), None, &cfg)?;
        let o = normed(&mut b, o, &w("post_self_attn_layernorm"))?;
        x = b.binary(BinaryOp::Add, x, o);
        let h = normed(&mut b, x, &w("post_attention_layernorm"))?;
        let down = b.fused_swiglu(h, (&w("mlp.gate_up_proj"), &w("mlp.down_proj")), (ffn, d))?;
        let down = normed(&mut b, down, &w("post_mlp_layernorm"))?;
        x = b.binary(BinaryOp::Add, x, down);
    }
    b.layer = None;
    let out = if tied { Ok(embd) } else { Err(("lm_head.weight", vocab)) };
    b.logits_head((x, d), last_rows, (norm, "model.norm.weight"), out)?;
    let facts = vec![
        ("rotary_dim", format!("{rotary} (GPT-J pairs)")),
        ("norm_eps", format!("{eps:?}")),
        ("rope_theta", format!("{theta:?}")),
        ("norms", "before and after attention and the MLP".to_string()),
        ("attention_bias", bias.to_string()),
        ("tied_output", tied.to_string()),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts].concat()))
}
