//! `graphc_fused_kv`: a small synthetic family whose attention reads one
//! projected latent as both K and V (the fused-MQA / compressed-latent shape
//! that real MLA-style models have), lowered from safetensors + config.json.
//! It exists so the K/V alias dedupe (`passes/kv_alias.rs`) is exercised on a
//! checkpoint-lowered graph, not only on hand-written IR.
//!
//! Per layer: RMSNorm, `q = h·Wq` (`n_heads` heads), `kv = h·Wkv` (one head
//! of `head_dim`), and — as a straightforward frontend writes it — K and V as
//! two separate `narrow(kv).contiguous()` views, each concatenated into its
//! own cache. Attention is causal without positional rotation (NoPE: a
//! rotated K would no longer equal V). Then the output projection, residual,
//! a SwiGLU MLP and residual, as in llama.
//!
//! config.json keys: `hidden_size`, `num_hidden_layers`, `num_attention_heads`,
//! `head_dim`, `intermediate_size`, `vocab_size`, `rms_norm_eps`,
//! `max_position_embeddings`, `tie_word_embeddings` (optional, default false).

use super::{batch, past, seq, Builder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, DType, NormKind, Op, TensorType, UnaryOp};

/// `config.json`'s `model_type` for this family.
pub const MODEL_TYPE: &str = "graphc_fused_kv";

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let (d, n_layers, nh, hd) =
        (st.config_uint("hidden_size")?, st.config_uint("num_hidden_layers")?, st.config_uint("num_attention_heads")?, st.config_uint("head_dim")?);
    let (ffn, vocab, context) = (st.config_uint("intermediate_size")?, st.config_uint("vocab_size")?, st.config_uint("max_position_embeddings")?);
    let eps = st.config_float("rms_norm_eps")? as f32;
    let tied = st.config.get("tie_word_embeddings").and_then(|v| v.as_bool()).unwrap_or(false);
    let mut b = Builder::new("fused_kv", st);
    let (tokens, positions, last_rows) = b.inputs();
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    for l in 0..n_layers {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("model.layers.{l}.{s}.weight");
        let ln = b.weight(&w("input_layernorm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, ln]);
        let wq = b.weight(&w("self_attn.q_proj"), Some(&[nh * hd, d]))?;
        let wkv = b.weight(&w("self_attn.kv_proj"), Some(&[hd, d]))?;
        let q = b.matmul(h, wq);
        let q = b.reshape(q, vec![batch(), seq(), nh.into(), hd.into()]);
        let q = b.permute(q, &[0, 2, 1, 3]);
        let kv = b.matmul(h, wkv);
        let kv = b.reshape(kv, vec![batch(), seq(), 1usize.into(), hd.into()]);
        let kv = b.permute(kv, &[0, 2, 1, 3]);
        let cache_ty = TensorType::new(DType::F32, vec![batch(), 1usize.into(), past(), hd.into()]);
        let mut caches = Vec::new();
        for name in ["k", "v"] {
            // The same view of the same latent, written once for K and once for V.
            let view = b.op(Op::Narrow { axis: 3, start: 0usize.into(), len: hd.into() }, &[kv]);
            let view = b.op(Op::Contiguous, &[view]);
            let name = format!("{name}.{l}");
            let cache = b.op(Op::State { name: name.clone(), ty: cache_ty.clone() }, &[]);
            let all = b.op(Op::Concat { axis: 2 }, &[cache, view]);
            b.op(Op::StateOut { name }, &[all]);
            caches.push(all);
        }
        let attn = Op::Attention {
            n_heads: nh,
            n_kv_heads: 1,
            scale: 1.0 / (hd as f32).sqrt(),
            causal: true,
            window: None,
            softcap: None,
            ring: false,
            sinks: false,
        };
        let a = b.op(attn, &[q, caches[0], caches[1], positions]);
        let a = b.permute(a, &[0, 2, 1, 3]);
        let a = b.reshape(a, vec![batch(), seq(), (nh * hd).into()]);
        let wo = b.weight(&w("self_attn.o_proj"), Some(&[d, nh * hd]))?;
        let o = b.matmul(a, wo);
        x = b.binary(BinaryOp::Add, x, o);
        let ln = b.weight(&w("post_attention_layernorm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, ln]);
        let down = b.gated_mlp(h, (&w("mlp.gate_proj"), &w("mlp.up_proj"), &w("mlp.down_proj")), (ffn, d), UnaryOp::Silu)?;
        x = b.binary(BinaryOp::Add, x, down);
    }
    b.layer = None;
    let out = if tied { Ok(embd) } else { Err(("lm_head.weight", vocab)) };
    b.logits_head((x, d), last_rows, (norm, "model.norm.weight"), out)?;
    let facts = [
        ("layers", n_layers.to_string()),
        ("hidden", d.to_string()),
        ("n_heads", nh.to_string()),
        ("n_kv_heads", "1 (one latent read as K and V)".to_string()),
        ("head_dim", hd.to_string()),
        ("norm_eps", format!("{eps:?}")),
        ("tied_output", tied.to_string()),
    ];
    Ok(b.finish(vocab, context, &facts))
}
