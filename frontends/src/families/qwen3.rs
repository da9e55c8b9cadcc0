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

use super::granite::Scales;
use super::hf::{rope_theta, tied, HeadDim, HfDims};
use super::{AttentionCfg, Builder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NodeId, NormKind, Op, RopeScaling, RopeStyle, UnaryOp};

pub const MODEL_TYPE: &str = "qwen3";

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::Key, false)?;
    if st.config.get("use_sliding_window").and_then(|v| v.as_bool()) == Some(true) {
        return Err(Diagnostic::new(&st.config_path, "`use_sliding_window` is true: Qwen3's sliding-window layers are not lowered yet"));
    }
    let decoder = Decoder { qk_norm: true, scaling: super::hf::rope_scaling(st, "qwen3")?, ..Decoder::plain(rope_theta(st)?) };
    lower_decoder(st, "qwen3", dims, &decoder, &mut |b, l, h| dense_mlp(b, &dims, l, h), Vec::new())
}

/// How the decoders built by `lower_decoder` differ: Qwen3's per-head q/k
/// norms, Qwen2's Q/K/V biases, Llama's output bias (`attention_bias`),
/// its RoPE scaling, Mistral's sliding window and SmolLM3's NoPE layers.
#[derive(Clone, Debug)]
pub(crate) struct Decoder {
    pub qk_norm: bool,
    pub qkv_bias: bool,
    pub out_bias: bool,
    pub theta: f32,
    pub scaling: RopeScaling,
    pub window: Option<usize>,
    /// Layers whose Q and K are not rotated (SmolLM3's NoPE layers).
    pub no_rope_layers: Vec<usize>,
    /// Granite's embedding, residual, attention and logit scales.
    pub scales: Option<super::granite::Scales>,
    /// The layers `window` applies to (gpt-oss's alternate); `None`: all.
    pub sliding_layers: Option<Vec<bool>>,
    /// Each attention has a sink logit per head (gpt-oss's `self_attn.sinks`).
    pub sinks: bool,
    /// The pairs RoPE rotates: NeoX's halves (HF `rotate_half`), or ERNIE
    /// 4.5's adjacent pairs (GLM's `rotate_half`, GPT-J's).
    pub rope_style: RopeStyle,
}

impl Decoder {
    /// No q/k norm, no biases, unscaled RoPE of base `theta`, no window.
    pub fn plain(theta: f32) -> Decoder {
        Decoder {
            qk_norm: false,
            qkv_bias: false,
            out_bias: false,
            theta,
            scaling: RopeScaling::None,
            window: None,
            no_rope_layers: vec![],
            scales: None,
            sliding_layers: None,
            sinks: false,
            rope_style: RopeStyle::Neox,
        }
    }
}

/// Layer `l`'s MLP on its post-attention-normed input `h`.
pub(crate) type LayerMlp<'a> = dyn FnMut(&mut Builder, usize, NodeId) -> Result<NodeId, Diagnostic> + 'a;

/// Qwen3's dense SwiGLU MLP of `intermediate_size`.
pub(crate) fn dense_mlp(b: &mut Builder, dims: &HfDims, l: usize, h: NodeId) -> Result<NodeId, Diagnostic> {
    let w = |s: &str| format!("model.layers.{l}.mlp.{s}.weight");
    b.gated_mlp(h, (&w("gate_proj"), &w("up_proj"), &w("down_proj")), (dims.ffn, dims.d), UnaryOp::Silu)
}

/// The Qwen3 decoder (embedding, layers of q/k-normed GQA attention and
/// `mlp`, final norm, head), shared by qwen3 and qwen3_moe, which differ
/// only in their MLP; `facts` are the family's own beside the common ones.
pub(crate) fn lower_decoder(
    st: &SafetensorsFile,
    name: &str,
    dims: HfDims,
    decoder: &Decoder,
    mlp: &mut LayerMlp,
    facts: Vec<(&'static str, String)>,
) -> Result<Lowered, Diagnostic> {
    let HfDims { d, n_layers, head_dim: hd, vocab, context, .. } = dims;
    let eps = st.config_float("rms_norm_eps")? as f32;
    let theta = decoder.theta;
    let tied = tied(st);
    let mut b = Builder::new(name, st);
    let (tokens, positions, last_rows) = b.inputs();
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    let scales = decoder.scales;
    if let Some(s) = scales {
        x = Scales::times(&mut b, x, s.embedding);
    }
    // A block's output on its way into the residual stream.
    let residual = |b: &mut Builder, o| match scales {
        Some(s) => Scales::times(b, o, s.residual),
        None => o,
    };
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let rope = Op::Rope { style: decoder.rope_style, rotary_dim: hd, theta, scaling: decoder.scaling.clone() };
    let mut cfg =
        AttentionCfg { qkv_bias: decoder.qkv_bias, out_bias: decoder.out_bias, window: decoder.window, ..dims.attention(norm.clone(), rope) };
    if let Some(s) = scales {
        cfg.scale = s.attention;
    }
    for l in 0..n_layers {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("model.layers.{l}.{s}.weight");
        let ln = b.weight(&w("input_layernorm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, ln]);
        let (q_norm, k_norm) = (w("self_attn.q_norm"), w("self_attn.k_norm"));
        let names = [&w("self_attn.q_proj"), &w("self_attn.k_proj"), &w("self_attn.v_proj"), &w("self_attn.o_proj")];
        let qk_norm = decoder.qk_norm.then_some((q_norm.as_str(), k_norm.as_str()));
        let slides = decoder.sliding_layers.as_ref().is_none_or(|s| s[l]);
        let cfg = AttentionCfg {
            no_rope: decoder.no_rope_layers.contains(&l),
            window: cfg.window.filter(|_| slides),
            sinks: decoder.sinks.then(|| format!("model.layers.{l}.self_attn.sinks")),
            ..cfg.clone()
        };
        let o = b.attention(h, positions, names.map(|s| s.as_str()), qk_norm, &cfg)?;
        let o = residual(&mut b, o);
        x = b.binary(BinaryOp::Add, x, o);
        let ln = b.weight(&w("post_attention_layernorm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, ln]);
        let out = mlp(&mut b, l, h)?;
        let out = residual(&mut b, out);
        x = b.binary(BinaryOp::Add, x, out);
    }
    b.layer = None;
    let out = if tied { Ok(embd) } else { Err(("lm_head.weight", vocab)) };
    b.logits_head_divided((x, d), last_rows, (norm, "model.norm.weight"), out, scales.map(|s| s.logits))?;
    let mut common = vec![("norm_eps", format!("{eps:?}")), ("rope_theta", format!("{theta:?}")), ("tied_output", tied.to_string())];
    if decoder.scaling != RopeScaling::None {
        common.push(("rope_scaling", format!("{:?}", decoder.scaling)));
    }
    common.extend(scales.iter().flat_map(Scales::facts));
    Ok(b.finish(vocab, context, &[dims.facts(), facts, common].concat()))
}
