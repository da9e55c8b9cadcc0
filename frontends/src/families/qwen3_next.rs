//! Qwen3-Next (`config.json` `model_type = "qwen3_next"`) and Qwen3.5
//! (`qwen3_5_text`, its MoE `qwen3_5_moe_text`; the multimodal `qwen3_5` /
//! `qwen3_5_moe` through `multimodal`), lowered from safetensors with
//! Hugging Face tensor names (experts in the Hub's per-expert layout), and
//! their GGUFs through `gguf_hf`.
//!
//! Layers are linear attention (Gated DeltaNet) except every
//! `full_attention_interval`-th (or as `layer_types` lists them), which is
//! gated full attention. Qwen3-Next's and Qwen3.5-MoE's MLPs are a routed
//! MoE plus a gated shared expert (Qwen3.5-MoE's router always
//! renormalizes), Qwen3.5's a SwiGLU. Every RMSNorm but the linear
//! attention's output norm scales by `1 + w`.
//!
//! Linear attention (HF `Qwen3NextGatedDeltaNet`): `q, k, v` (flattened,
//! in that order) pass a depthwise causal conv of `linear_conv_kernel_dim`
//! taps and SiLU; the conv's last inputs are loop-carried state (`conv.L`).
//! `q` and `k` are L2-normalized (eps 1e-6), `q` divided by `sqrt(dk)`;
//! `beta = sigmoid(b)`, the decay `g = -exp(A_log) · softplus(a + dt_bias)`;
//! the gated delta rule runs over the tokens from the recurrent state
//! (`ssm.L`, `[hv, dk, dv]` per row; value head `h` reads key head `h / r`,
//! `r = num_v_heads / num_k_heads`). Its output is RMS-normed per head by
//! `norm.weight` (plain `w`), times `silu(z)`, then `out_proj`. Where the
//! projections come from (`LinearLayout`): Qwen3-Next's `in_proj_qkvz`
//! interleaves `[q (dk), k (dk), v (r·dv), z (r·dv)]` per key-head group and
//! `in_proj_ba` `[b (r), a (r)]`; Qwen3.5 has `in_proj_qkv` (`[q; k; v]`),
//! `in_proj_z`, `in_proj_b`, `in_proj_a`.
//!
//! Full attention (HF `Qwen3NextAttention`): `q_proj` yields each head's
//! query and then its gate (`2·head_dim` rows per head); q/k `1 + w` RMS
//! norms per head, RoPE on the first `partial_rotary_factor · head_dim`
//! features (Qwen3.5's interleaved M-RoPE is RoPE on text: `multimodal`),
//! GQA; the merged heads times `sigmoid(gate)` before `o_proj`.
//!
//! MoE (HF `Qwen3NextSparseMoeBlock`): Qwen's router (`moe::qwen_moe_block`,
//! lowered dense) plus `shared_expert(h) · sigmoid(shared_expert_gate(h))`.
//!
//! The recurrent layers advance each batch row by its real new tokens,
//! `new_lengths`, read to the host by every linear layer (the kernels need
//! them there); the `hoist_sync` pass turns those reads into one per forward.

use super::gemma::scalar;
use super::hf::{rope_theta, rotary_dim, tied, HeadDim, HfDims};
use super::moe::{qwen_moe_block, qwen_shared_expert, Moe, QwenMoe};
use super::{batch, seq, Builder, NEW_LENGTHS_INPUT};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, DType, Dim, NodeId, NormKind, Op, ReduceOp, RopeScaling, RopeStyle, TensorType, UnaryOp};

pub const MODEL_TYPE: &str = "qwen3_next";
/// Qwen3.5's text model (dense MLPs).
pub const QWEN3_5: &str = "qwen3_5_text";
/// Qwen3.5's MoE text model.
pub const QWEN3_5_MOE: &str = "qwen3_5_moe_text";

/// A config key (not HF's) set by `gguf_hf` for llama.cpp's Qwen3.5 GGUFs,
/// whose converter reorders the value heads from grouped by key head
/// (`[g0 v0..v(r-1), g1 v0.., ...]`) to tiled (`[g0 v0, g1 v0, ..., g0 v1, ...]`):
/// value head `h` then reads key head `h % num_k_heads`.
pub const V_HEADS_TILED: &str = "graphc_linear_v_heads_tiled";

/// How a checkpoint stores the linear layers' weights, read off its tensors.
#[derive(Clone, Copy, PartialEq)]
struct LinearLayout {
    /// Qwen3-Next's HF `in_proj_qkvz`, interleaved per key-head group
    /// (else `in_proj_qkv` `[q; k; v]` over all heads and `in_proj_z` apart).
    qkvz_grouped: bool,
    /// Qwen3-Next's `in_proj_ba`, `[b (r), a (r)]` per key-head group (else
    /// Qwen3.5's `in_proj_b` and `in_proj_a`).
    ba_grouped: bool,
    /// llama.cpp's GGUF (`Qwen3NextModel.modify_tensors`): the conv
    /// `[channels, kernel]` and `A = -exp(A_log)` stored (else HF's conv
    /// `[channels, 1, kernel]` and `A_log`).
    gguf: bool,
    /// The value heads tiled over the key heads (`V_HEADS_TILED`).
    v_tiled: bool,
}

/// The linear-attention layers' shape.
#[derive(Clone, Copy)]
struct Linear {
    n_k_heads: usize,
    n_v_heads: usize,
    dk: usize,
    dv: usize,
    kernel: usize,
}

/// Lower a checkpoint of `family` (`MODEL_TYPE`, `QWEN3_5` or `QWEN3_5_MOE`).
pub fn lower(st: &SafetensorsFile, family: &str) -> Result<Lowered, Diagnostic> {
    // Qwen3.5-MoE's config has no dense MLP size: every MLP routes.
    let ffn_key = if family == QWEN3_5_MOE { "moe_intermediate_size" } else { "intermediate_size" };
    let dims = HfDims::read_with_ffn(st, HeadDim::Key, false, ffn_key)?;
    let HfDims { d, n_layers, head_dim: hd, vocab, context, .. } = dims;
    let path = &st.config_path;
    let u = |k: &str| st.config_uint(k);
    let lin = Linear {
        n_k_heads: u("linear_num_key_heads")?,
        n_v_heads: u("linear_num_value_heads")?,
        dk: u("linear_key_head_dim")?,
        dv: u("linear_value_head_dim")?,
        kernel: u("linear_conv_kernel_dim")?,
    };
    if lin.n_k_heads == 0 || !lin.n_v_heads.is_multiple_of(lin.n_k_heads) || lin.kernel < 2 || lin.dk == 0 || lin.dv == 0 {
        return Err(Diagnostic::new(path, format!(
            "linear attention of {} value heads on {} key heads (dims {}, {}), conv kernel {}: value heads must be a positive multiple of key heads, kernel at least 2",
            lin.n_v_heads, lin.n_k_heads, lin.dk, lin.dv, lin.kernel
        )));
    }
    let full = full_attention_layers(st, n_layers)?;
    let eps = st.config_float("rms_norm_eps")? as f32;
    let theta = rope_theta(st)?;
    let rotary = rotary_dim(st, hd, Some(0.25))?;
    // Qwen3-Next and Qwen3.5-MoE route every MLP (Qwen3-Next by Qwen's
    // keys); Qwen3.5's are dense.
    let moe = match family {
        QWEN3_5 => None,
        QWEN3_5_MOE => {
            let experts =
                Moe { n_experts: u("num_experts")?, top_k: u("num_experts_per_tok")?, ffn: u("moe_intermediate_size")?, d, norm_topk: true };
            if experts.n_experts == 0 || experts.top_k == 0 || experts.top_k > experts.n_experts {
                return Err(Diagnostic::new(path, format!("{} experts per token of {}: not a MoE", experts.top_k, experts.n_experts)));
            }
            Some((experts, vec![true; n_layers], u("shared_expert_intermediate_size")?))
        }
        _ => {
            let (moe, routes) = QwenMoe::read(st, n_layers, d)?;
            Some((moe, routes, u("shared_expert_intermediate_size")?))
        }
    };
    let tied = tied(st);

    let mut b = Builder::new(family, st);
    // A GGUF (llama.cpp's layout, seen through `gguf_hf`): `1 + w` folded
    // into the norms, and the linear layers' weights regrouped (`LinearLayout`).
    b.norms_include_one = super::gemma::norms_include_one(st);
    let first_linear = format!("model.layers.{}.linear_attn", (0..n_layers).find(|l| !full.contains(l)).unwrap_or(0));
    let layout = LinearLayout {
        qkvz_grouped: b.has_tensor(&format!("{first_linear}.in_proj_qkvz.weight")),
        ba_grouped: b.has_tensor(&format!("{first_linear}.in_proj_ba.weight")),
        gguf: b.has_tensor(&format!("{first_linear}.A")),
        v_tiled: st.config.get(V_HEADS_TILED).and_then(|v| v.as_bool()) == Some(true),
    };
    let (tokens, positions, last_rows) = b.inputs();
    let new_lengths = b.input(NEW_LENGTHS_INPUT, DType::I32, vec![batch()]);
    let embd = b.weight("model.embed_tokens.weight", Some(&[vocab, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let cfg = super::AttentionCfg {
        output_gate: true,
        qk_norm_one_plus: !b.norms_include_one,
        ..dims.attention(norm.clone(), Op::Rope { style: RopeStyle::Neox, rotary_dim: rotary, theta, scaling: RopeScaling::None })
    };
    for l in 0..n_layers {
        b.layer = Some(l as u32);
        let p = format!("model.layers.{l}");
        let h = one_plus_norm(&mut b, x, &format!("{p}.input_layernorm.weight"), d, eps)?;
        let mixed = if full.contains(&l) {
            let w = |s: &str| format!("{p}.self_attn.{s}.weight");
            let (q_norm, k_norm) = (w("q_norm"), w("k_norm"));
            let names = [&w("q_proj"), &w("k_proj"), &w("v_proj"), &w("o_proj")];
            b.attention(h, positions, names.map(|s| s.as_str()), Some((&q_norm, &k_norm)), &cfg)?
        } else {
            linear_attention(&mut b, h, new_lengths, &format!("{p}.linear_attn"), (d, eps), lin, layout)?
        };
        x = b.binary(BinaryOp::Add, x, mixed);
        let h = one_plus_norm(&mut b, x, &format!("{p}.post_attention_layernorm.weight"), d, eps)?;
        let out = if let Some((moe, _, shared_ffn)) = moe.as_ref().filter(|(_, routes, _)| routes[l]) {
            let routed = qwen_moe_block(&mut b, &format!("{p}.mlp"), h, moe)?;
            let shared = qwen_shared_expert(&mut b, &format!("{p}.mlp"), h, (*shared_ffn, d))?;
            b.binary(BinaryOp::Add, routed, shared)
        } else {
            let w = |s: &str| format!("{p}.mlp.{s}.weight");
            b.gated_mlp(h, (&w("gate_proj"), &w("up_proj"), &w("down_proj")), (dims.ffn, d), UnaryOp::Silu)?
        };
        x = b.binary(BinaryOp::Add, x, out);
    }
    b.layer = None;
    // Each row's last position, then the final norm (`1 + w` too) and the head.
    let flat = b.reshape(x, vec![batch().mul(&seq()), Dim::from(d)]);
    let last = b.op(Op::Gather, &[flat, last_rows]);
    let h = one_plus_norm(&mut b, last, "model.norm.weight", d, eps)?;
    let out = if tied { embd } else { b.weight("lm_head.weight", Some(&[vocab, d]))? };
    let logits = b.matmul(h, out);
    b.op(Op::Output { name: graphc_ir::io::LOGITS.into() }, &[logits]);
    let linear_layers: Vec<String> = (0..n_layers).filter(|l| !full.contains(l)).map(|l| l.to_string()).collect();
    let facts = vec![
        ("full_attention_layers", full.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(",")),
        ("linear_attention_layers", linear_layers.join(",")),
        (
            "linear_heads",
            format!("{} key heads of {}, {} value heads of {}, conv kernel {}", lin.n_k_heads, lin.dk, lin.n_v_heads, lin.dv, lin.kernel),
        ),
        ("rotary_dim", rotary.to_string()),
        (
            "experts",
            match &moe {
                Some((moe, _, shared_ffn)) => {
                    format!("{}, {} per token, norm_topk_prob {}, shared expert of {shared_ffn}", moe.n_experts, moe.top_k, moe.norm_topk)
                }
                None => "none (dense MLPs)".into(),
            },
        ),
        ("linear_v_heads", if layout.v_tiled { "tiled over the key heads (llama.cpp's order)" } else { "grouped by key head" }.into()),
        ("norm_eps", format!("{eps:?}")),
        ("rope_theta", format!("{theta:?}")),
        ("tied_output", tied.to_string()),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts].concat()))
}

/// The full-attention layers: from `layer_types` when the config lists
/// them, else every `full_attention_interval`-th layer (HF's default: 4).
fn full_attention_layers(st: &SafetensorsFile, n_layers: usize) -> Result<Vec<usize>, Diagnostic> {
    let path = &st.config_path;
    if let Some(types) = st.config.get("layer_types").filter(|v| !v.is_null()) {
        let types = types
            .as_array()
            .filter(|a| a.len() == n_layers)
            .ok_or_else(|| Diagnostic::new(path, format!("`layer_types` must list one kind per layer ({n_layers})")))?;
        let mut full = Vec::new();
        for (l, t) in types.iter().enumerate() {
            match t.as_str() {
                Some("full_attention") => full.push(l),
                Some("linear_attention") => {}
                other => {
                    return Err(Diagnostic::new(
                        path,
                        format!("`layer_types[{l}]` is {other:?}: expected \"linear_attention\" or \"full_attention\""),
                    ))
                }
            }
        }
        return Ok(full);
    }
    let interval = st.config.get("full_attention_interval").and_then(|v| v.as_u64()).unwrap_or(4).max(1) as usize;
    Ok((0..n_layers).filter(|l| (l + 1).is_multiple_of(interval)).collect())
}

/// `x / rms(x) * (1 + w)` with the `[d]` weight `weight` (Qwen3-Next's
/// `Qwen3NextRMSNorm`, whose weights are stored zero-centered).
fn one_plus_norm(b: &mut Builder, x: NodeId, weight: &str, d: usize, eps: f32) -> Result<NodeId, Diagnostic> {
    super::gemma::one_plus_norm(b, x, weight, d, eps)
}

/// `x * rsqrt(Σ x² + eps)` over the last axis (of rank 4): FLA's `l2norm`.
fn l2norm(b: &mut Builder, x: NodeId) -> NodeId {
    let sq = b.binary(BinaryOp::Mul, x, x);
    let sum = b.op(Op::Reduce { op: ReduceOp::Sum, axis: 3 }, &[sq]);
    let eps = scalar(b, 1e-6);
    let sum = b.binary(BinaryOp::Add, sum, eps);
    let inv = b.unary(UnaryOp::Rsqrt, sum);
    b.binary(BinaryOp::Mul, x, inv)
}

/// One Gated DeltaNet layer on the normed hidden states `h [batch, seq, d]`.
fn linear_attention(
    b: &mut Builder,
    h: NodeId,
    new_lengths: NodeId,
    prefix: &str,
    (d, eps): (usize, f32),
    lin: Linear,
    layout: LinearLayout,
) -> Result<NodeId, Diagnostic> {
    let Linear { n_k_heads: nk, n_v_heads: nv, dk, dv, kernel } = lin;
    let l = b.layer.expect("inside a layer");
    let r = nv / nk;
    let w = |s: &str| format!("{prefix}.{s}");
    let narrow =
        |b: &mut Builder, x: NodeId, axis: usize, start: usize, len: usize| b.op(Op::Narrow { axis, start: start.into(), len: len.into() }, &[x]);
    // The kernels take each row's token count on the host.
    let lengths = b.op(Op::ToHost { nonempty: true, bound: None }, &[new_lengths]);

    let (key_dim, value_dim) = (nk * dk, nv * dv);
    let channels = 2 * key_dim + value_dim;
    // Projections: [q; k; v] in the conv's channel order, and the gate z.
    let (mixed, z) = if layout.qkvz_grouped {
        // Interleaved per key-head group: [q, k, v (r heads), z (r heads)].
        let group = 2 * dk + 2 * r * dv;
        let wqkvz = b.weight(&w("in_proj_qkvz.weight"), Some(&[nk * group, d]))?;
        let qkvz = b.matmul(h, wqkvz);
        let qkvz = b.reshape(qkvz, vec![batch(), seq(), nk.into(), group.into()]);
        let q = narrow(b, qkvz, 3, 0, dk);
        let k = narrow(b, qkvz, 3, dk, dk);
        let v = narrow(b, qkvz, 3, 2 * dk, r * dv);
        let z = narrow(b, qkvz, 3, 2 * dk + r * dv, r * dv);
        let q = b.reshape(q, vec![batch(), seq(), key_dim.into()]);
        let k = b.reshape(k, vec![batch(), seq(), key_dim.into()]);
        let v = b.reshape(v, vec![batch(), seq(), value_dim.into()]);
        (b.op(Op::Concat { axis: 2 }, &[q, k, v]), z)
    } else {
        let wqkv = b.weight(&w("in_proj_qkv.weight"), Some(&[channels, d]))?;
        let wz = b.weight(&w("in_proj_z.weight"), Some(&[value_dim, d]))?;
        (b.matmul(h, wqkv), b.matmul(h, wz))
    };
    // The gates' inputs, one per value head.
    let (beta_in, a) = if layout.ba_grouped {
        let wba = b.weight(&w("in_proj_ba.weight"), Some(&[nk * 2 * r, d]))?;
        let ba = b.matmul(h, wba);
        let ba = b.reshape(ba, vec![batch(), seq(), nk.into(), (2 * r).into()]);
        let beta_in = narrow(b, ba, 3, 0, r);
        let a = narrow(b, ba, 3, r, r);
        (b.reshape(beta_in, vec![batch(), seq(), nv.into()]), b.reshape(a, vec![batch(), seq(), nv.into()]))
    } else {
        let wb = b.weight(&w("in_proj_b.weight"), Some(&[nv, d]))?;
        let wa = b.weight(&w("in_proj_a.weight"), Some(&[nv, d]))?;
        (b.matmul(h, wb), b.matmul(h, wa))
    };

    // The short causal conv over [q; k; v] with its state.
    let conv_w = if layout.gguf {
        b.weight(&w("conv1d.weight"), Some(&[channels, kernel]))?
    } else {
        let conv_w = b.weight(&w("conv1d.weight"), Some(&[channels, 1, kernel]))?;
        b.reshape(conv_w, vec![channels.into(), kernel.into()])
    };
    let conv_name = format!("conv.{l}");
    let conv_state =
        b.op(Op::State { name: conv_name.clone(), ty: TensorType::new(DType::F32, vec![batch(), (kernel - 1).into(), channels.into()]) }, &[]);
    let packed = b.op(Op::CausalConv1d { kernel }, &[mixed, conv_w, conv_state, lengths]);
    let next_conv = b.op(Op::Narrow { axis: 1, start: seq(), len: (kernel - 1).into() }, &[packed]);
    b.op(Op::StateOut { name: conv_name }, &[next_conv]);
    let conv_out = b.op(Op::Narrow { axis: 1, start: 0usize.into(), len: seq() }, &[packed]);
    let conv_out = b.unary(UnaryOp::Silu, conv_out);
    let q = narrow(b, conv_out, 2, 0, key_dim);
    let k = narrow(b, conv_out, 2, key_dim, key_dim);
    let v = narrow(b, conv_out, 2, 2 * key_dim, value_dim);
    let q = b.reshape(q, vec![batch(), seq(), nk.into(), dk.into()]);
    let k = b.reshape(k, vec![batch(), seq(), nk.into(), dk.into()]);
    let v = b.reshape(v, vec![batch(), seq(), nv.into(), dv.into()]);
    let q = l2norm(b, q);
    let k = l2norm(b, k);
    // Tiled value heads: each key head repeated `r` times in turn, so value
    // head `h` meets key head `h % nk` and the rule sees one key head a value head.
    let (q, k) =
        if layout.v_tiled && r > 1 { (b.op(Op::Concat { axis: 2 }, &vec![q; r]), b.op(Op::Concat { axis: 2 }, &vec![k; r])) } else { (q, k) };
    let root = scalar(b, (dk as f64).sqrt() as f32);
    let q = b.binary(BinaryOp::Div, q, root);
    let q = b.permute(q, &[0, 2, 1, 3]);
    let k = b.permute(k, &[0, 2, 1, 3]);
    let v = b.permute(v, &[0, 2, 1, 3]);

    // Gates: beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias).
    let beta = b.unary(UnaryOp::Sigmoid, beta_in);
    let dt_bias = b.weight(&w("dt_bias"), Some(&[nv]))?;
    let a = b.binary(BinaryOp::Add, a, dt_bias);
    let a = b.unary(UnaryOp::Softplus, a);
    let rate = if layout.gguf {
        b.weight(&w("A"), Some(&[nv]))?
    } else {
        let a_log = b.weight(&w("A_log"), Some(&[nv]))?;
        let rate = b.unary(UnaryOp::Exp, a_log);
        b.unary(UnaryOp::Neg, rate)
    };
    let g = b.binary(BinaryOp::Mul, rate, a);
    let g = b.permute(g, &[0, 2, 1]);
    let beta = b.permute(beta, &[0, 2, 1]);

    // The recurrence, from and back to its state.
    let ssm_name = format!("ssm.{l}");
    let ssm_state = b.op(Op::State { name: ssm_name.clone(), ty: TensorType::new(DType::F32, vec![batch(), nv.into(), dk.into(), dv.into()]) }, &[]);
    let packed = b.op(Op::GatedDeltaRule, &[q, k, v, g, beta, ssm_state, lengths]);
    let next_ssm = b.op(Op::Narrow { axis: 2, start: seq(), len: dk.into() }, &[packed]);
    b.op(Op::StateOut { name: ssm_name }, &[next_ssm]);
    let o = b.op(Op::Narrow { axis: 2, start: 0usize.into(), len: seq() }, &[packed]);
    let o = b.permute(o, &[0, 2, 1, 3]);

    // Gated RMSNorm per value head (plain `w`), times silu(z).
    let norm_w = b.weight(&w("norm.weight"), Some(&[dv]))?;
    let o = b.op(Op::Norm { kind: NormKind::Rms, eps }, &[o, norm_w]);
    let z = b.reshape(z, vec![batch(), seq(), nv.into(), dv.into()]);
    let z = b.unary(UnaryOp::Silu, z);
    let o = b.binary(BinaryOp::Mul, o, z);
    let o = b.reshape(o, vec![batch(), seq(), value_dim.into()]);
    let wo = b.weight(&w("out_proj.weight"), Some(&[d, value_dim]))?;
    Ok(b.matmul(o, wo))
}
