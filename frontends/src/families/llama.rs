//! The llama family (llama 1/2/3, SmolLM2, Mistral-shaped GGUFs, Mixtral;
//! SmolLM3, arch `smollm3`: llama without RoPE on every fourth layer;
//! Ministral 3, arch `mistral3`: llama with YaRN and Llama 4's attention
//! temperature (the context capped where it starts to matter); and
//! Granite, arch `granite`: llama with four scales, `granite.rs`, and its
//! MoE, arch `granitemoe`, whose experts are Mixtral's),
//! lowered from GGUF metadata alone: layers, heads and kv heads (GQA), head
//! dim, rope base and dimension, norm epsilon, context length, tied or
//! untied output, and for Mixtral the experts (`expert_count`,
//! `expert_used_count`): each layer's MLP is `moe::moe_block` with
//! llama.cpp's router `blk.N.ffn_gate_inp` and its chosen experts'
//! weights renormalized (as llama.cpp and transformers' Mixtral do), the
//! experts read per expert (`expert_slices`).
//!
//! One decode step (or a prefill) per forward. Inputs: `tokens` and
//! `positions` `[batch, seq]`, and `last_rows` `[batch]`, the flat index
//! (`b * seq + len_b - 1`) of each row's own last token, so logits are read
//! from each row's own length. Each layer's K and V are loop-carried state
//! `[batch, n_kv_heads, past, head_dim]`, extended by concat; the `kv_append`
//! pass turns that into an in-place write.
//!
//! RoPE is the GPT-J (adjacent pairs) form: llama.cpp's converter permuted
//! the Q/K rows of HF checkpoints so that this form applies to the stored
//! weights (transformers un-permutes them on load and uses the NeoX form;
//! the two compute the same).

use super::granite::Scales;
use super::moe::{moe_block, Moe};
use super::{batch, past, seq, Builder};
use crate::error::Diagnostic;
use crate::gguf::GgufFile;
use graphc_ir::plan::{ModelMeta, WeightEntry};
use graphc_ir::{BinaryOp, DType, Graph, NormKind, Op, RopeScaling, RopeStyle, TensorType, UnaryOp};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub n_layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rotary_dim: usize,
    pub rope_theta: f32,
    pub rope_scaling: RopeScaling,
    pub norm_eps: f32,
    pub context_length: usize,
    pub vocab_size: usize,
    pub tied_output: bool,
    /// Mistral's sliding window (`attention.sliding_window`): each token
    /// attends to itself and the `window - 1` before it, on every layer.
    pub window: Option<usize>,
    /// Mixtral's routed experts: `(expert_count, expert_used_count)`.
    pub experts: Option<(usize, usize)>,
    /// SmolLM3 (arch `smollm3`) rotates no Q and K on every layer `l` with
    /// `(l + 1) % n == 0`: llama.cpp hard-codes `n` = 4, and the GGUF has
    /// no key for it.
    pub no_rope_every: Option<usize>,
    /// Granite's embedding, residual, attention and logit scales (arch `granite`).
    pub scales: Option<super::granite::Scales>,
    /// Ministral 3 (arch `mistral3`): its Llama 4 attention temperature's
    /// beta and the pretraining length the context is capped at.
    pub temperature: Option<(f32, usize)>,
}

impl LlamaConfig {
    pub fn from_gguf(g: &GgufFile) -> Result<LlamaConfig, Diagnostic> {
        let arch = g.str("general.architecture")?;
        let k = |s: &str| format!("{arch}.{s}");
        let u = |s: &str| g.uint(&k(s)).map(|v| v as usize);
        let hidden = u("embedding_length")?;
        let n_heads = u("attention.head_count")?;
        if n_heads == 0 || hidden % n_heads != 0 {
            return Err(Diagnostic::new(
                &g.path,
                format!("`{}` = {n_heads} does not divide `{}` = {hidden}", k("attention.head_count"), k("embedding_length")),
            ));
        }
        let n_kv_heads = g.uint_or(&k("attention.head_count_kv"), n_heads as u64)? as usize;
        if n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(Diagnostic::new(&g.path, format!("{n_heads} attention heads are not a multiple of {n_kv_heads} kv heads")));
        }
        let head_dim = g.uint_or(&k("attention.key_length"), (hidden / n_heads) as u64)? as usize;
        let rotary_dim = g.uint_or(&k("rope.dimension_count"), head_dim as u64)? as usize;
        let mut rope_scaling = match (crate::gguf_hf::scaling_type(g, arch)?, g.tensor(ROPE_FREQS)) {
            (None, None) => RopeScaling::None,
            (Some("linear"), None) => RopeScaling::Linear { factor: g.float(&k("rope.scaling.factor"))? as f32 },
            (Some("yarn"), None) => crate::gguf_hf::yarn_scaling(g, arch)?,
            // Llama 3.1+: the converter stores the frequency factors as a
            // tensor and writes no scaling type.
            (None, Some(t)) => {
                let factors = crate::gguf_hf::f32_values(g, t)?;
                if t.shape != [rotary_dim / 2] {
                    return Err(Diagnostic::new(
                        &g.path,
                        format!("tensor `{ROPE_FREQS}` has shape {:?}, expected [{}] (one factor per rotary pair)", t.shape, rotary_dim / 2),
                    ));
                }
                if let Some(f) = factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
                    return Err(Diagnostic::new(&g.path, format!("tensor `{ROPE_FREQS}` holds {f}, not a positive frequency factor")));
                }
                RopeScaling::FreqFactors { factors, attention_factor: 1.0 }
            }
            (Some(other), _) => {
                let also = if g.tensor(ROPE_FREQS).is_some() { format!(" with a `{ROPE_FREQS}` tensor") } else { String::new() };
                return Err(Diagnostic::new(
                    &g.path,
                    format!("`{}` = {other:?}{also} is not implemented by the llama family", k("rope.scaling.type")),
                )
                .note("graphc lowers llama RoPE scaling `none`, `linear`, `yarn`, and Llama 3's `rope_freqs` factors"));
            }
        };
        let mut temperature = None;
        if arch == "mistral3" {
            // llama.cpp's converter writes Ministral 3's `mscale_all_dim` as
            // the YaRN log multiplier (its `mscale` taken as 1), and its Llama 4
            // attention temperature as `attention.temperature_scale`.
            // (An explicit `yarn_attn_factor` wins, as transformers' `attention_factor` does.)
            let explicit = g.get(&k("rope.scaling.yarn_attn_factor")).is_some();
            if let (RopeScaling::Yarn { factor, attention_factor, .. }, Some(log_mul), false) =
                (&mut rope_scaling, g.get(&k("rope.scaling.yarn_log_multiplier")).and_then(|v| v.as_f64()).filter(|&m| m != 0.0), explicit)
            {
                let factor = *factor as f64;
                *attention_factor = (super::hf::yarn_mscale(factor, 1.0) / super::hf::yarn_mscale(factor, log_mul)) as f32;
            }
            let beta = g.float_or(&k("attention.temperature_scale"), 0.0)?;
            if beta != 0.0 {
                let original = g.uint(&k("rope.scaling.original_context_length"))? as usize;
                if original == 0 {
                    return Err(Diagnostic::new(&g.path, format!("`{}` is 0", k("rope.scaling.original_context_length"))));
                }
                temperature = Some((beta as f32, original));
            }
        }
        let vocab_size = match g.get(&k("vocab_size")) {
            Some(_) => u("vocab_size")?,
            None => g.array("tokenizer.ggml.tokens")?.len(),
        };
        let context_length = match u("context_length")? {
            0 => return Err(Diagnostic::new(&g.path, format!("`{}` is 0: no plan could run a single token", k("context_length")))),
            // Ministral 3's temperature is 1 before the pretraining length and not computed past it.
            n => temperature.map_or(n, |(_, original)| n.min(original)),
        };
        // 0, or a window as long as the context, slides nothing.
        let window =
            g.get(&k("attention.sliding_window")).map(|_| u("attention.sliding_window")).transpose()?.filter(|&w| w > 0 && w < context_length);
        // 0, or no key: a dense MLP.
        let experts = match g.get(&k("expert_count")).map(|_| u("expert_count")).transpose()? {
            None | Some(0) => None,
            Some(n) => {
                let used = u("expert_used_count")?;
                if used == 0 || used > n {
                    return Err(Diagnostic::new(
                        &g.path,
                        format!("`{}` = {used} is not between 1 and `{}` = {n}", k("expert_used_count"), k("expert_count")),
                    ));
                }
                Some((n, used))
            }
        };
        Ok(LlamaConfig {
            n_layers: u("block_count")?,
            hidden,
            ffn: u("feed_forward_length")?,
            n_heads,
            n_kv_heads,
            head_dim,
            rotary_dim,
            rope_theta: g.float_or(&k("rope.freq_base"), 10000.0)? as f32,
            rope_scaling,
            norm_eps: g.float(&k("attention.layer_norm_rms_epsilon"))? as f32,
            context_length,
            vocab_size,
            tied_output: g.tensor("output.weight").is_none(),
            window,
            experts,
            no_rope_every: (arch == "smollm3").then_some(4),
            scales: if matches!(arch, "granite" | "granitemoe") { Some(Scales::from_gguf(g, arch)?) } else { None },
            temperature,
        })
    }
}

/// Llama 3's RoPE frequency factors, as llama.cpp's converter stores them.
pub const ROPE_FREQS: &str = "rope_freqs.weight";

pub struct Lowered {
    pub graph: Graph,
    pub manifest: Vec<WeightEntry>,
    pub meta: ModelMeta,
    /// Tensors whose values the lowering read into the graph itself (a
    /// Llama 3 GGUF's `rope_freqs.weight`), not bound as weights.
    pub read_at_lowering: Vec<String>,
}

pub fn lower(g: &GgufFile) -> Result<Lowered, Diagnostic> {
    let c = LlamaConfig::from_gguf(g)?;
    let arch = g.str("general.architecture")?;
    let mut b = Builder::new(arch, g);
    let (d, hd, nh, nkv) = (c.hidden, c.head_dim, c.n_heads, c.n_kv_heads);
    let tokens = b.input(graphc_ir::io::TOKENS, DType::I32, vec![batch(), seq()]);
    let positions = b.input(graphc_ir::io::POSITIONS, DType::I32, vec![batch(), seq()]);
    let last_rows = b.input(graphc_ir::io::LAST_ROWS, DType::I32, vec![batch()]);
    let embd = b.weight("token_embd.weight", Some(&[c.vocab_size, d]))?;
    let mut x = b.op(Op::Gather, &[embd, tokens]);
    if let Some(s) = c.scales {
        x = Scales::times(&mut b, x, s.embedding);
    }
    // A block's output on its way into the residual stream.
    let residual = |b: &mut Builder, o| match c.scales {
        Some(s) => Scales::times(b, o, s.residual),
        None => o,
    };
    let heads = |b: &mut Builder, v, n: usize| {
        let r = b.reshape(v, vec![batch(), seq(), n.into(), hd.into()]);
        b.permute(r, &[0, 2, 1, 3])
    };
    let rope = Op::Rope { style: RopeStyle::GptJ, rotary_dim: c.rotary_dim, theta: c.rope_theta, scaling: c.rope_scaling.clone() };
    for l in 0..c.n_layers {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("blk.{l}.{s}.weight");
        let attn_norm = b.weight(&w("attn_norm"), Some(&[d]))?;
        let h = b.op(Op::Norm { kind: NormKind::Rms, eps: c.norm_eps }, &[x, attn_norm]);
        let wq = b.weight(&w("attn_q"), Some(&[nh * hd, d]))?;
        let wk = b.weight(&w("attn_k"), Some(&[nkv * hd, d]))?;
        let wv = b.weight(&w("attn_v"), Some(&[nkv * hd, d]))?;
        let q = b.matmul(h, wq);
        let k = b.matmul(h, wk);
        let v = b.matmul(h, wv);
        let q = heads(&mut b, q, nh);
        let k = heads(&mut b, k, nkv);
        let v = heads(&mut b, v, nkv);
        let rotates = c.no_rope_every.is_none_or(|n| (l + 1) % n != 0);
        let (q, k) = if rotates { (b.op(rope.clone(), &[q, positions]), b.op(rope.clone(), &[k, positions])) } else { (q, k) };
        let cache_ty = TensorType::new(DType::F32, vec![batch(), nkv.into(), past(), hd.into()]);
        let mut kv = Vec::new();
        for (name, new) in [("k", k), ("v", v)] {
            let name = format!("{name}.{l}");
            let cache = b.op(Op::State { name: name.clone(), ty: cache_ty.clone() }, &[]);
            let all = b.op(Op::Concat { axis: 2 }, &[cache, new]);
            b.op(Op::StateOut { name }, &[all]);
            kv.push(all);
        }
        let attn = b.op(
            Op::Attention {
                n_heads: nh,
                n_kv_heads: nkv,
                scale: c.scales.map_or(1.0 / (hd as f32).sqrt(), |s| s.attention),
                causal: true,
                window: c.window,
                softcap: None,
                ring: false,
                sinks: false,
            },
            &[q, kv[0], kv[1], positions],
        );
        let attn = b.permute(attn, &[0, 2, 1, 3]);
        let attn = b.reshape(attn, vec![batch(), seq(), (nh * hd).into()]);
        let wo = b.weight(&w("attn_output"), Some(&[d, nh * hd]))?;
        let o = b.matmul(attn, wo);
        let o = residual(&mut b, o);
        x = b.binary(BinaryOp::Add, x, o);
        let ffn_norm = b.weight(&w("ffn_norm"), Some(&[d]))?;
        let h = b.op(Op::Norm { kind: NormKind::Rms, eps: c.norm_eps }, &[x, ffn_norm]);
        let down = match c.experts {
            None => b.gated_mlp(h, (&w("ffn_gate"), &w("ffn_up"), &w("ffn_down")), (c.ffn, d), UnaryOp::Silu)?,
            Some((n_experts, top_k)) => {
                let expert = |e: usize| ["ffn_gate", "ffn_up", "ffn_down"].map(|p| format!("blk.{l}.{p}.{e}.weight"));
                let moe = Moe { n_experts, top_k, ffn: c.ffn, d, norm_topk: true };
                moe_block(&mut b, &w("ffn_gate_inp"), &expert, h, &moe)?
            }
        };
        let down = residual(&mut b, down);
        x = b.binary(BinaryOp::Add, x, down);
    }
    b.layer = None;
    let out = if c.tied_output { Ok(embd) } else { Err(("output.weight", c.vocab_size)) };
    let norm = Op::Norm { kind: NormKind::Rms, eps: c.norm_eps };
    b.logits_head_divided((x, d), last_rows, (norm, "output_norm.weight"), out, c.scales.map(|s| s.logits))?;

    let mut facts = BTreeMap::new();
    for (k, v) in [
        ("layers", c.n_layers.to_string()),
        ("hidden", c.hidden.to_string()),
        ("n_heads", c.n_heads.to_string()),
        ("n_kv_heads", c.n_kv_heads.to_string()),
        ("head_dim", c.head_dim.to_string()),
        ("rotary_dim", c.rotary_dim.to_string()),
        ("rope_theta", format!("{:?}", c.rope_theta)),
        ("norm_eps", format!("{:?}", c.norm_eps)),
        ("tied_output", c.tied_output.to_string()),
    ] {
        facts.insert(k.to_string(), v);
    }
    if c.rope_scaling != RopeScaling::None {
        facts.insert("rope_scaling".into(), format!("{:?}", c.rope_scaling));
    }
    if let Some(w) = c.window {
        facts.insert("sliding_window".into(), w.to_string());
    }
    for (k, v) in c.scales.iter().flat_map(Scales::facts) {
        facts.insert(k.into(), v);
    }
    if let Some(n) = c.no_rope_every {
        let layers: Vec<String> = (0..c.n_layers).filter(|l| (l + 1) % n == 0).map(|l| l.to_string()).collect();
        facts.insert("no_rope_layers".into(), layers.join(","));
    }
    if let Some((n, used)) = c.experts {
        facts.insert("experts".into(), format!("{n}, {used} per token, renormalized"));
    }
    if let Some((beta, original)) = c.temperature {
        facts.insert("attention_temperature".into(), super::llama_hf::temperature_fact(beta as f64, original));
    }
    let read_at_lowering = if g.tensor(ROPE_FREQS).is_some() { vec![ROPE_FREQS.to_string()] } else { vec![] };
    let meta = ModelMeta { vocab_size: c.vocab_size, context_length: c.context_length, bos_id: None, add_bos: false, stop_ids: vec![], facts };
    Ok(Lowered { graph: b.g, manifest: b.manifest, meta, read_at_lowering })
}
