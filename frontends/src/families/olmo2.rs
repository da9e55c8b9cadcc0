//! OLMo 2 and OLMo 3 (`config.json` `model_type = "olmo2"` / `"olmo3"`,
//! GGUF `olmo2` through the HF view: llama.cpp writes OLMo 3 as `olmo2` with
//! a sliding window), lowered with Hugging Face tensor names.
//!
//! OLMo 3 (HF `Olmo3DecoderLayer`) is OLMo 2 with sliding-window layers:
//! `layer_types` (absent: three of four sliding, every fourth global),
//! `sliding_window` (absent: HF's 4096), and a RoPE per layer kind
//! (`rope_parameters.{sliding_attention, full_attention}`, or the Hub's
//! `rope_theta` for both with `rope_scaling`, OLMo 3's YaRN, on the global
//! layers only). OLMo 2 has neither: its config's window keys are refused.
//!
//! Per layer (HF `Olmo2DecoderLayer`): no norm before attention or the MLP;
//! `x + post_attention_layernorm(attn(x))`, then
//! `x + post_feedforward_layernorm(mlp(x))`, every norm RMS. Q and K are
//! RMS-normed over the whole projection (`q_norm` of `num_heads *
//! head_dim`) before the heads split, then NeoX RoPE; GQA, scale
//! `1/sqrt(head_dim)`, biases on all four projections when
//! `attention_bias`; the MLP is SwiGLU.

use super::hf::{config_flag, require_act, rope_scaling, rope_theta, tied, HeadDim, HfDims};
use super::{AttentionCfg, Builder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NormKind, Op, RopeScaling, RopeStyle, UnaryOp};

pub const MODEL_TYPE: &str = "olmo2";
/// OLMo 3: OLMo 2's layers, most of them sliding.
pub const OLMO3: &str = "olmo3";

/// The math-relevant `config.json` keys OLMo 2 reads.
pub const CONFIG_READS: &[&str] = &["rope_scaling", "rope_parameters", "hidden_act", "attention_bias"];
/// OLMo 3's: OLMo 2's and its windows.
pub const OLMO3_READS: &[&str] = &["rope_scaling", "rope_parameters", "hidden_act", "attention_bias", "sliding_window", "layer_types"];

/// OLMo 3's window where its config gives none (`Olmo3Config`'s default).
const OLMO3_WINDOW: usize = 4096;

/// Lower a checkpoint of `family` (`MODEL_TYPE` or `OLMO3`).
pub fn lower(st: &SafetensorsFile, family: &str) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::KeyOrHiddenOverHeads, false)?;
    let HfDims { d, n_layers, head_dim: hd, ffn, vocab, context, .. } = dims;
    require_act(st, family, "silu")?;
    let bias = config_flag(st, "attention_bias")?;
    let eps = st.config_float("rms_norm_eps")? as f32;
    // Each layer's kind (true: sliding), and each kind's window and RoPE.
    let (sliding, window, rope_full, rope_sliding) = if family == OLMO3 {
        let sliding = match st.config.get("layer_types").filter(|v| !v.is_null()) {
            Some(_) => super::gemma2::layer_kinds(st, n_layers)?,
            None => (0..n_layers).map(|l| !(l + 1).is_multiple_of(4)).collect(),
        };
        let window = match st.config.get("sliding_window").filter(|v| !v.is_null()) {
            Some(_) => super::hf::sliding_window(st, context)?,
            None => Some(OLMO3_WINDOW).filter(|&w| w < context),
        };
        (sliding, window, kind_rope(st, family, true)?, kind_rope(st, family, false)?)
    } else {
        let rope = (rope_theta(st)?, rope_scaling(st, family)?);
        (vec![false; n_layers], None, rope.clone(), rope)
    };
    let tied = tied(st);
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let layer_cfg = |(theta, scaling): &(f32, RopeScaling), window: Option<usize>| {
        let rope = Op::Rope { style: RopeStyle::Neox, rotary_dim: hd, theta: *theta, scaling: scaling.clone() };
        AttentionCfg { qkv_bias: bias, out_bias: bias, qk_norm_full_width: true, window, ..dims.attention(norm.clone(), rope) }
    };
    let (full_cfg, sliding_cfg) = (layer_cfg(&rope_full, None), layer_cfg(&rope_sliding, window));
    let mut b = Builder::new(family, st);
    let (tokens, positions, last_rows) = b.inputs();
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    for (l, &slides) in sliding.iter().enumerate() {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("model.layers.{l}.{s}.weight");
        let names = [&w("self_attn.q_proj"), &w("self_attn.k_proj"), &w("self_attn.v_proj"), &w("self_attn.o_proj")];
        let (q_norm, k_norm) = (w("self_attn.q_norm"), w("self_attn.k_norm"));
        let cfg = if slides { &sliding_cfg } else { &full_cfg };
        let o = b.attention(x, positions, names.map(|s| s.as_str()), Some((&q_norm, &k_norm)), cfg)?;
        let post = b.weight(&w("post_attention_layernorm"), Some(&[d]))?;
        let o = b.op(norm.clone(), &[o, post]);
        x = b.binary(BinaryOp::Add, x, o);
        let down = b.gated_mlp(x, (&w("mlp.gate_proj"), &w("mlp.up_proj"), &w("mlp.down_proj")), (ffn, d), UnaryOp::Silu)?;
        let post = b.weight(&w("post_feedforward_layernorm"), Some(&[d]))?;
        let down = b.op(norm.clone(), &[down, post]);
        x = b.binary(BinaryOp::Add, x, down);
    }
    b.layer = None;
    let out = if tied { Ok(embd) } else { Err(("lm_head.weight", vocab)) };
    b.logits_head((x, d), last_rows, (norm, "model.norm.weight"), out)?;
    let sliding_layers: Vec<String> = (0..n_layers).filter(|&l| sliding[l]).map(|l| l.to_string()).collect();
    let facts = vec![
        ("norm_eps", format!("{eps:?}")),
        ("rope_theta", format!("{:?}", rope_full.0)),
        ("rope_scaling", format!("{:?}", rope_full.1)),
        ("rope_sliding", format!("theta {:?}, {:?}", rope_sliding.0, rope_sliding.1)),
        ("sliding_layers", sliding_layers.join(",")),
        ("sliding_window", window.map_or("none".into(), |w| w.to_string())),
        ("norms", "after attention and the MLP; q/k over the whole projection".to_string()),
        ("attention_bias", bias.to_string()),
        ("tied_output", tied.to_string()),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts].concat()))
}

/// OLMo 3's RoPE base and scaling for its global (`full`) or sliding layers:
/// `rope_parameters.{full_attention, sliding_attention}`, or the Hub's
/// `rope_theta` for both and `rope_scaling` for the global ones.
fn kind_rope(st: &SafetensorsFile, family: &str, full: bool) -> Result<(f32, RopeScaling), Diagnostic> {
    let kind = if full { "full_attention" } else { "sliding_attention" };
    match st.config.get("rope_parameters").and_then(|p| p.get(kind)) {
        Some(params) => {
            let key = format!("rope_parameters.{kind}");
            let theta = params.get("rope_theta").and_then(|t| t.as_f64());
            let theta = theta.ok_or_else(|| Diagnostic::new(&st.config_path, format!("`{key}.rope_theta` is missing or not a number")))?;
            Ok((theta as f32, super::hf::rope_scaling_of(st, &key, params, family)?))
        }
        None if full => Ok((rope_theta(st)?, rope_scaling(st, family)?)),
        None => Ok((rope_theta(st)?, RopeScaling::None)),
    }
}
