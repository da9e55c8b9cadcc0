//! Phi-3 (`config.json` `model_type = "phi3"`), lowered from safetensors
//! with Hugging Face tensor names.
//!
//! A llama-shaped decoder (RMSNorm, NeoX RoPE, GQA, SwiGLU) whose weights
//! are fused: `self_attn.qkv_proj` holds the rows of Q, then K, then V, and
//! `mlp.gate_up_proj` the rows of the gate, then the up projection (HF
//! `Phi3MLP`: `gate, up = chunk(2)`). The graph multiplies by each fused
//! weight once and narrows the product; a split in the wrong order or at
//! the wrong row is what the parity fixture's controls catch.
//!
//! RoPE scaling: the 4k-context configs have none (`rope_scaling` null, or
//! `rope_parameters.rope_type = "default"`). The 128k configs' LongRoPE
//! (`longrope`, earlier `su`) divides each pair's frequency by a factor
//! from `short_factor` or `long_factor` and scales cos/sin by
//! `attention_factor` (default `sqrt(1 + ln(s) / ln(original))`, `s` =
//! `factor` or `max_position_embeddings / original_max_position_embeddings`,
//! 1 when `s <= 1`). transformers picks the set per forward, by the longest
//! position in it (and recomputes the whole cache when a generation
//! crosses `original_max_position_embeddings`); graphc picks it once, by
//! `max_seq` (long when `max_seq > original`), as llama.cpp does by its
//! context size, so one sequence never mixes keys of both sets. The two
//! agree on every sequence longer than the original length, and, with
//! `--max-seq <= original`, on every sequence at all.
//!
//! Sliding window: the 4k models' `sliding_window` (2047: each token sees
//! itself and the 2046 before it), on every layer, as transformers'
//! `Phi3Model` masks it; GGUF `phi3.attention.sliding_window`.
//!
//! config.json keys: `hidden_size`, `num_hidden_layers`,
//! `num_attention_heads`, `num_key_value_heads`, `intermediate_size`,
//! `vocab_size`, `rms_norm_eps`, `max_position_embeddings`, the RoPE base
//! (see `hf::rope_theta`), `tie_word_embeddings` (optional, false).

use super::hf::{rotary_dim, tied, HeadDim, HfDims};
use super::{Builder, Projections};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, NormKind, Op, RopeScaling, RopeStyle};

pub const MODEL_TYPE: &str = "phi3";

pub fn lower(st: &SafetensorsFile, max_seq: Option<usize>) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::HiddenOverHeads, false)?;
    let HfDims { d, n_layers, head_dim: hd, ffn, vocab, context, .. } = dims;
    // HF's Phi3Config defaults the factor to 1 (the whole head rotates);
    // phi-4-mini's config sets 0.75.
    let rotary_dim = rotary_dim(st, hd, Some(1.0))?;
    let eps = st.config_float("rms_norm_eps")? as f32;
    let rope = scaled_rope(st, rotary_dim, max_seq.unwrap_or(context), context)?;
    let theta = rope.theta;
    let tied = tied(st);
    let mut b = Builder::new("phi3", st);
    let (tokens, positions, last_rows) = b.inputs();
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let window = super::hf::sliding_window(st, context)?;
    let cfg = super::AttentionCfg {
        window,
        ..dims.attention(norm.clone(), Op::Rope { style: RopeStyle::Neox, rotary_dim, theta, scaling: rope.scaling.clone() })
    };
    for l in 0..n_layers {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("model.layers.{l}.{s}.weight");
        let ln = b.weight(&w("input_layernorm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, ln]);
        let o = b.attention_from(h, positions, Projections::Fused(&w("self_attn.qkv_proj")), &w("self_attn.o_proj"), None, &cfg)?;
        x = b.binary(BinaryOp::Add, x, o);
        let ln = b.weight(&w("post_attention_layernorm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, ln]);
        let down = b.fused_swiglu(h, (&w("mlp.gate_up_proj"), &w("mlp.down_proj")), (ffn, d))?;
        x = b.binary(BinaryOp::Add, x, down);
    }
    b.layer = None;
    let out = if tied { Ok(embd) } else { Err(("lm_head.weight", vocab)) };
    b.logits_head((x, d), last_rows, (norm, "model.norm.weight"), out)?;
    let facts = [
        ("rotary_dim", rotary_dim.to_string()),
        ("norm_eps", format!("{eps:?}")),
        ("rope_theta", format!("{theta:?}")),
        ("rope_scaling", rope.fact.clone()),
        ("fused_weights", "qkv_proj split q,k,v; gate_up_proj split gate,up".to_string()),
        ("sliding_window", window.map_or("none".to_string(), |w| w.to_string())),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts.to_vec()].concat()))
}

/// The RoPE a phi3 config asks for, resolved for `max_seq`.
pub(crate) struct ScaledRope {
    pub theta: f32,
    pub scaling: RopeScaling,
    /// What was chosen and why, for the plan's facts.
    pub fact: String,
}

pub(crate) fn scaled_rope(st: &SafetensorsFile, rotary_dim: usize, max_seq: usize, context: usize) -> Result<ScaledRope, Diagnostic> {
    let path = &st.config_path;
    // transformers 5 writes `rope_parameters` (with the base and the
    // original length inside); Hub configs have `rope_scaling` beside a
    // top-level `rope_theta` and `original_max_position_embeddings`.
    let params = st.config.get("rope_parameters").filter(|v| !v.is_null());
    let scaling = st.config.get("rope_scaling").filter(|v| !v.is_null()).or(params);
    let kind = scaling.and_then(|s| s.get("rope_type").or_else(|| s.get("type"))).and_then(|v| v.as_str()).unwrap_or("default");
    let theta =
        match st.config.get("rope_theta").and_then(|v| v.as_f64()).or_else(|| params.and_then(|p| p.get("rope_theta")).and_then(|v| v.as_f64())) {
            Some(t) => t as f32,
            None => return Err(Diagnostic::new(path, "missing key `rope_theta` (or `rope_parameters.rope_theta`)")),
        };
    let scaling = match (kind, scaling) {
        ("default", _) | (_, None) => return Ok(ScaledRope { theta, scaling: RopeScaling::None, fact: "none".into() }),
        ("longrope" | "su", Some(s)) => s,
        (other, _) => return Err(Diagnostic::new(path, format!("RoPE scaling `{other}`: phi3 lowers `default` and `longrope` (`su`) only"))),
    };
    let original = scaling
        .get("original_max_position_embeddings")
        .or_else(|| st.config.get("original_max_position_embeddings"))
        .and_then(|v| v.as_u64())
        .ok_or_else(|| Diagnostic::new(path, "longrope needs `original_max_position_embeddings` (top level or in the RoPE parameters)"))?
        as usize;
    let factors = |key: &str| -> Result<Vec<f32>, Diagnostic> {
        let list =
            scaling.get(key).and_then(|v| v.as_array()).ok_or_else(|| Diagnostic::new(path, format!("longrope needs `{key}`, a list of numbers")))?;
        let f: Vec<f32> = list.iter().filter_map(|v| v.as_f64()).map(|v| v as f32).collect();
        if f.len() != list.len() || f.len() != rotary_dim / 2 {
            return Err(Diagnostic::new(
                path,
                format!(
                    "`{key}` has {} entries; {} numbers are needed (one per pair of the {rotary_dim} rotary features)",
                    list.len(),
                    rotary_dim / 2
                ),
            ));
        }
        Ok(f)
    };
    let (short, long) = (factors("short_factor")?, factors("long_factor")?);
    let ratio = scaling.get("factor").and_then(|v| v.as_f64()).unwrap_or(context as f64 / original as f64);
    let attention_factor = match scaling.get("attention_factor").and_then(|v| v.as_f64()) {
        Some(a) => a,
        None if ratio <= 1.0 => 1.0,
        None => (1.0 + ratio.ln() / (original as f64).ln()).sqrt(),
    } as f32;
    let use_long = max_seq > original;
    let fact = format!(
        "longrope, {} factors (max_seq {max_seq} {} original_max_position_embeddings {original}), attention_factor {attention_factor}",
        if use_long { "long" } else { "short" },
        if use_long { ">" } else { "<=" },
    );
    let factors = if use_long { long } else { short };
    Ok(ScaledRope { theta, scaling: RopeScaling::FreqFactors { factors, attention_factor }, fact })
}
