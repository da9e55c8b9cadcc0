//! Gemma 3 (`general.architecture = gemma3`), lowered from GGUF metadata.
//!
//! Per layer (HF `Gemma3DecoderLayer`): `x + post_attention_norm(attn(attn_norm(x)))`,
//! then `x + post_ffw_norm(mlp(ffn_norm(x)))`, every norm RMS. Attention: Q/K
//! RMS-normed per head (`attn_q_norm`, `attn_k_norm`), NeoX RoPE, GQA
//! (`head_count_kv` kv heads), scale `1/sqrt(key_length)`; the MLP is GeGLU
//! with GELU in its tanh form (`gelu_pytorch_tanh`). The embedding is scaled
//! by `sqrt(hidden)`, rounded to f32 as transformers does; the output is tied
//! to the embedding. Norm weights are used as stored: llama.cpp's converter
//! already added Gemma's `1 +` offset to them.
//!
//! What the GGUF does not store, and where graphc takes it from:
//! - the layer pattern: five sliding-window layers, then one global
//!   (`layer_types` in HF's Gemma 3 config, llama.cpp's `swa_pattern = 6`):
//!   layer `l` is global when `(l + 1) % 6 == 0`;
//! - the local layers' RoPE base, 10000 (HF `rope_local_base_freq`; the
//!   GGUF's `rope.freq_base` is the global layers' 1e6).
//!
//! RoPE scaling (Gemma 3 4B and larger: `rope.scaling.type = linear`,
//! `rope.scaling.factor = 8`, HF `rope_scaling`) applies to the global
//! layers only, as in transformers (`rotary_emb` against the local layers'
//! `rotary_emb_local`) and llama.cpp (`rope_freq_scale_train_swa` = 1 for
//! the sliding-window layers). Any other scaling type is refused.
//!
//! Sliding-window layers attend to the last `attention.sliding_window` keys
//! (`window` on their attention); global layers to all. Both keep a cache at
//! the plan's capacity (a window-sized ring cache for local layers is not
//! done yet).

use super::{AttentionCfg, Builder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::gguf::GgufFile;
use graphc_ir::{BinaryOp, DType, NormKind, Op, RopeScaling, RopeStyle, TensorType, UnaryOp};

/// Gemma's chat turn format (a Jinja template for one user message), used
/// when the checkpoint carries no `tokenizer.chat_template`.
/// (The generation prompt is a Jinja string, as in Gemma's own template: a
/// template's final newline is dropped when rendered.)
pub const TURN_FORMAT: &str = "<start_of_turn>user\n{{ messages[0]['content'] }}<end_of_turn>\n{{ '<start_of_turn>model\\n' }}";

/// Five local layers, then one global.
pub const LAYER_PATTERN: usize = 6;
/// RoPE base of the sliding-window layers.
pub const LOCAL_ROPE_THETA: f32 = 10_000.0;

pub fn is_global(layer: usize) -> bool {
    (layer + 1).is_multiple_of(LAYER_PATTERN)
}

pub fn lower(g: &GgufFile) -> Result<Lowered, Diagnostic> {
    let k = |s: &str| format!("gemma3.{s}");
    let u = |s: &str| g.uint(&k(s)).map(|v| v as usize);
    let (d, n_layers, nh, ffn) = (u("embedding_length")?, u("block_count")?, u("attention.head_count")?, u("feed_forward_length")?);
    let nkv = g.uint_or(&k("attention.head_count_kv"), nh as u64)? as usize;
    if nh == 0 || nkv == 0 || nh % nkv != 0 {
        return Err(Diagnostic::new(&g.path, format!("{nh} attention heads are not a multiple of {nkv} kv heads")));
    }
    let hd = u("attention.key_length")?;
    let eps = g.float(&k("attention.layer_norm_rms_epsilon"))? as f32;
    let window = u("attention.sliding_window")?;
    let global_theta = g.float(&k("rope.freq_base"))? as f32;
    let global_scaling = match crate::gguf_hf::scaling_type(g, "gemma3")? {
        None => RopeScaling::None,
        Some("linear") => {
            let factor = g.float(&k("rope.scaling.factor"))? as f32;
            if !(factor.is_finite() && factor > 0.0) {
                return Err(Diagnostic::new(&g.path, format!("`{}` = {factor} is not a positive factor", k("rope.scaling.factor"))));
            }
            RopeScaling::Linear { factor }
        }
        Some(other) => {
            return Err(Diagnostic::new(&g.path, format!("`{}` = {other:?} is not implemented by the gemma3 family", k("rope.scaling.type")))
                .note("graphc lowers Gemma 3's RoPE scaling `none` and `linear` (on the global layers)"));
        }
    };
    let vocab = g.array("tokenizer.ggml.tokens")?.len();
    let mut b = Builder::new("gemma3", g);
    let (tokens, positions, last_rows) = b.inputs();
    let embd = b.weight("token_embd.weight", Some(&[vocab, d]))?;
    let x = b.op(Op::Gather, &[embd, tokens]);
    let scale = b.op(Op::Const { value: (d as f64).sqrt() as f32, ty: TensorType::new(DType::F32, vec![1usize.into()]) }, &[]);
    let mut x = b.binary(BinaryOp::Mul, x, scale);
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    for l in 0..n_layers {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("blk.{l}.{s}.weight");
        let ln = b.weight(&w("attn_norm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, ln]);
        let global = is_global(l);
        let rope = Op::Rope {
            style: RopeStyle::Neox,
            rotary_dim: hd,
            theta: if global { global_theta } else { LOCAL_ROPE_THETA },
            scaling: if global { global_scaling.clone() } else { RopeScaling::None },
        };
        let cfg = AttentionCfg {
            d,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            norm: norm.clone(),
            rope,
            no_rope: false,
            scale: 1.0 / (hd as f32).sqrt(),
            window: (!global).then_some(window),
            softcap: None,
            qkv_bias: false,
            out_bias: false,
            output_gate: false,
            qk_norm_one_plus: false,
            qk_norm_full_width: false,
            sinks: None,
            values_are_keys: false,
            v_norm: false,
            shared_kv: None,
        };
        let (q_norm, k_norm) = (w("attn_q_norm"), w("attn_k_norm"));
        let o = b.attention(h, positions, [&w("attn_q"), &w("attn_k"), &w("attn_v"), &w("attn_output")], Some((&q_norm, &k_norm)), &cfg)?;
        let post = b.weight(&w("post_attention_norm"), Some(&[d]))?;
        let o = b.op(norm.clone(), &[o, post]);
        x = b.binary(BinaryOp::Add, x, o);
        let ln = b.weight(&w("ffn_norm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, ln]);
        let down = b.gated_mlp(h, (&w("ffn_gate"), &w("ffn_up"), &w("ffn_down")), (ffn, d), UnaryOp::GeluTanh)?;
        let post = b.weight(&w("post_ffw_norm"), Some(&[d]))?;
        let down = b.op(norm.clone(), &[down, post]);
        x = b.binary(BinaryOp::Add, x, down);
    }
    b.layer = None;
    b.logits_head((x, d), last_rows, (norm, "output_norm.weight"), Ok(embd))?;
    let globals: Vec<String> = (0..n_layers).filter(|&l| is_global(l)).map(|l| l.to_string()).collect();
    let facts = [
        ("layers", n_layers.to_string()),
        ("hidden", d.to_string()),
        ("n_heads", nh.to_string()),
        ("n_kv_heads", nkv.to_string()),
        ("head_dim", hd.to_string()),
        ("norm_eps", format!("{eps:?}")),
        ("sliding_window", window.to_string()),
        ("global_layers", globals.join(",")),
        ("rope_theta_global", format!("{global_theta:?}")),
        ("rope_theta_local", format!("{LOCAL_ROPE_THETA:?} (Gemma 3's rope_local_base_freq; not in the GGUF)")),
        (
            "rope_scaling_global",
            match &global_scaling {
                RopeScaling::Linear { factor } => format!("linear, factor {factor:?} (global layers only)"),
                _ => "none".to_string(),
            },
        ),
    ];
    let context = u("context_length")?;
    Ok(b.finish(vocab, context, &facts))
}
