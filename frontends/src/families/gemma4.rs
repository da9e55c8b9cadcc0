//! Gemma 4's text model (`config.json` `model_type = "gemma4_text"`: the
//! Gemma 4 checkpoints E2B, E4B, 31B and 26B-A4B), lowered with Hugging Face
//! tensor names; also the language model of the multimodal `gemma4`
//! checkpoints (`crate::multimodal`), and llama.cpp's `gemma4` GGUF seen
//! through those names (`crate::gguf_hf`).
//!
//! Per layer (HF `Gemma4TextDecoderLayer`), every norm a plain RMSNorm
//! (`x * w`, no Gemma `1 +`):
//! `x + post_attention_layernorm(attn(input_layernorm(x)))`, then
//! `x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))`
//! (GeGLU), then with per-layer inputs (PLE, E2B/E4B)
//! `x + post_per_layer_input_norm(per_layer_projection(gelu(per_layer_input_gate(x)) * ple[l]))`,
//! and the result times the layer's `layer_scalar`.
//!
//! Attention: scale 1 (the q norm carries it); Q and K RMS-normed per head
//! with weights, V per head without one. Layers slide (`layer_types`,
//! `sliding_window`) or attend globally; each kind has its own head size
//! and kv heads (`per_layer_config`, or the Hub's `global_head_dim` /
//! `num_global_key_value_heads`) and its own RoPE: the sliding layers'
//! `default`, the global layers' `proportional` (`RopeScaling::Proportional`:
//! a `partial_rotary_factor` of the pairs turn, with exponents over the whole
//! head). With `attention_k_eq_v` (31B) a global layer has no V weight: its
//! values are its keys' projection, before the k norm and RoPE. The last
//! `num_kv_shared_layers` layers project only Q and attend over the caches
//! of the last earlier layer of their kind (E2B/E4B); with
//! `use_double_wide_mlp` their MLPs are twice as wide.
//!
//! PLE: `embed_tokens_per_layer` (scaled by `sqrt(ple)`) plus the RMS-normed
//! `per_layer_model_projection` of the scaled embedding (times
//! `hidden^-1/2`), times `2^-1/2`, sliced per layer. The embedding is scaled
//! by `sqrt(hidden)`; the final logits soft-capped (`final_logit_softcapping`).
//!
//! MoE (26B-A4B, `enable_moe_block`): every layer's dense MLP beside routed
//! GeGLU experts, each output normed (`post_feedforward_layernorm_1/_2`),
//! summed, then the MLP's post-norm (`moe_block`); the experts' 3D tensors
//! read a slice an expert (`split_experts`).
//!
//! Refused, by name: attention biases, bidirectional attention
//! (`use_bidirectional_attention = "all"`), any RoPE but those above.

use super::gemma::{gelu_kind, scaled_embedding};
use super::hf::{HeadDim, HfDims};
use super::moe::{experts_sum, routing_weights, Moe};
use super::{batch, seq, AttentionCfg, Builder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::gguf::TensorInfo;
use crate::safetensors::SafetensorsFile;
use graphc_ir::{BinaryOp, Dim, NodeId, NormKind, Op, RopeScaling, RopeStyle};
use serde_json::Value;

pub const MODEL_TYPE: &str = "gemma4_text";

/// The `config.json` keys the family reads.
pub const CONFIG_READS: &[&str] = &[
    "head_dim",
    "hidden_act",
    "hidden_activation",
    "sliding_window",
    "layer_types",
    "final_logit_softcapping",
    "rope_parameters",
    "attention_bias",
    "use_bidirectional_attention",
    "attention_k_eq_v",
    "num_kv_shared_layers",
    "hidden_size_per_layer_input",
    "use_double_wide_mlp",
    "enable_moe_block",
    "per_layer_config",
    "global_head_dim",
    "num_global_key_value_heads",
    "num_experts",
];

/// One layer's shape.
#[derive(Clone, Copy, Debug)]
struct LayerShape {
    sliding: bool,
    head_dim: usize,
    n_kv_heads: usize,
    /// The earlier layer whose caches a KV-shared layer reads.
    kv_from: Option<usize>,
    ffn: usize,
}

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::Key, false)?;
    let HfDims { d, n_layers, vocab, context, .. } = dims;
    let path = &st.config_path;
    let err = |m: String| Diagnostic::new(path, m);
    let flag = |k: &str| super::hf::config_flag(st, k);
    let moe = if flag("enable_moe_block")? { Some(moe_shape(st, d)?) } else { None };
    if flag("attention_bias")? {
        return Err(err("`attention_bias` is true: no Gemma 4 has attention biases, and graphc does not lower them".into()));
    }
    match st.config.get("use_bidirectional_attention") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "vision" => {} // text tokens stay causal
        Some(v) => return Err(err(format!("`use_bidirectional_attention` = {v}: graphc lowers causal Gemma 4 only"))),
    }
    let window = st.config_uint("sliding_window")?;
    if window == 0 {
        return Err(err("`sliding_window` is 0".into()));
    }
    let eps = st.config_float("rms_norm_eps")? as f32;
    let act = gelu_kind(st)?;
    let cap = match st.config.get("final_logit_softcapping") {
        None | Some(Value::Null) => None,
        Some(_) => Some(st.config_float("final_logit_softcapping")? as f32),
    };
    let layers = layer_shapes(st, &dims)?;
    let k_eq_v = flag("attention_k_eq_v")?;
    let sliding_rope = rope(st, &layers, true)?;
    let global_rope = rope(st, &layers, false)?;
    let ple = st.config_uint_or("hidden_size_per_layer_input", 0)?;

    let mut b = Builder::new(MODEL_TYPE, st);
    let (tokens, positions, last_rows) = b.inputs();
    let (embd, mut x) = scaled_embedding(&mut b, tokens, (vocab, d))?;
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let ple_inputs = match ple {
        0 => None,
        p => Some(per_layer_inputs(&mut b, st, (tokens, x), (vocab, d, n_layers, p), &norm)?),
    };
    let mut kv_of = Vec::with_capacity(n_layers);
    for (l, shape) in layers.iter().enumerate() {
        b.layer = Some(l as u32);
        let w = |s: &str| format!("model.layers.{l}.{s}.weight");
        let rope = if shape.sliding { sliding_rope.clone() } else { global_rope.clone() };
        let cfg = AttentionCfg {
            n_kv_heads: shape.n_kv_heads,
            head_dim: shape.head_dim,
            scale: 1.0,
            window: shape.sliding.then_some(window),
            values_are_keys: k_eq_v && !shape.sliding,
            v_norm: true,
            shared_kv: shape.kv_from.map(|from| kv_of[from]),
            ..dims.attention(norm.clone(), rope)
        };
        let nw = b.weight(&w("input_layernorm"), Some(&[d]))?;
        let h = b.op(norm.clone(), &[x, nw]);
        let names = [&w("self_attn.q_proj"), &w("self_attn.k_proj"), &w("self_attn.v_proj"), &w("self_attn.o_proj")];
        let (q_norm, k_norm) = (w("self_attn.q_norm"), w("self_attn.k_norm"));
        let o = b.attention(h, positions, names.map(|s| s.as_str()), Some((&q_norm, &k_norm)), &cfg)?;
        kv_of.push(b.last_kv.expect("attention records its caches"));
        let o = b.normed(o, &w("post_attention_layernorm"), d, &norm)?;
        x = b.binary(BinaryOp::Add, x, o);
        let h = b.normed(x, &w("pre_feedforward_layernorm"), d, &norm)?;
        let mut m = b.gated_mlp(h, (&w("mlp.gate_proj"), &w("mlp.up_proj"), &w("mlp.down_proj")), (shape.ffn, d), act)?;
        if let Some(moe) = &moe {
            // The dense MLP and the routed experts side by side, each normed, summed.
            let dense = b.normed(m, &w("post_feedforward_layernorm_1"), d, &norm)?;
            let routed = moe_block(&mut b, l, x, moe, (&norm, act))?;
            let routed = b.normed(routed, &w("post_feedforward_layernorm_2"), d, &norm)?;
            m = b.binary(BinaryOp::Add, dense, routed);
        }
        let m = b.normed(m, &w("post_feedforward_layernorm"), d, &norm)?;
        x = b.binary(BinaryOp::Add, x, m);
        if let Some((all, p)) = ple_inputs {
            let mine = b.op(Op::Narrow { axis: 2, start: l.into(), len: 1usize.into() }, &[all]);
            let mine = b.reshape(mine, vec![batch(), seq(), p.into()]);
            let gate = b.weight(&w("per_layer_input_gate"), Some(&[p, d]))?;
            let g = b.matmul(x, gate);
            let g = b.unary(act, g);
            let g = b.binary(BinaryOp::Mul, g, mine);
            let proj = b.weight(&w("per_layer_projection"), Some(&[d, p]))?;
            let g = b.matmul(g, proj);
            let g = b.normed(g, &w("post_per_layer_input_norm"), d, &norm)?;
            x = b.binary(BinaryOp::Add, x, g);
        }
        // A buffer HF saves with the weights (ones where a checkpoint has none).
        let scalar_name = format!("model.layers.{l}.layer_scalar");
        if b.has_tensor(&scalar_name) {
            let s = b.weight(&scalar_name, Some(&[1]))?;
            x = b.binary(BinaryOp::Mul, x, s);
        }
    }
    b.layer = None;
    let flat = b.reshape(x, vec![batch().mul(&seq()), Dim::from(d)]);
    let last = b.op(Op::Gather, &[flat, last_rows]);
    let h = b.normed(last, "model.norm.weight", d, &norm)?;
    let out = if super::hf::tied(st) { embd } else { b.weight("lm_head.weight", Some(&[vocab, d]))? };
    let mut logits = b.matmul(h, out);
    if let Some(cap) = cap {
        // `tanh(logits / cap) * cap`, as transformers computes it.
        let c = b.scalar(cap);
        let scaled = b.binary(BinaryOp::Div, logits, c);
        let t = b.unary(graphc_ir::UnaryOp::Tanh, scaled);
        logits = b.binary(BinaryOp::Mul, t, c);
    }
    b.op(Op::Output { name: graphc_ir::io::LOGITS.into() }, &[logits]);
    let list =
        |f: &dyn Fn(&LayerShape) -> bool| layers.iter().enumerate().filter(|(_, s)| f(s)).map(|(l, _)| l.to_string()).collect::<Vec<_>>().join(",");
    let global = layers.iter().find(|s| !s.sliding).copied();
    let shared: Vec<String> = layers.iter().enumerate().filter_map(|(l, s)| s.kv_from.map(|f| format!("{l}<-{f}"))).collect();
    let facts = [
        ("sliding_window", window.to_string()),
        ("global_layers", list(&|s| !s.sliding)),
        ("global_head_dim", global.map_or("none".into(), |g| g.head_dim.to_string())),
        ("global_kv_heads", global.map_or("none".into(), |g| g.n_kv_heads.to_string())),
        ("global_values_are_keys", k_eq_v.to_string()),
        ("kv_shared_layers", if shared.is_empty() { "none".into() } else { shared.join(",") }),
        ("mlp_sizes", layers.iter().map(|s| s.ffn.to_string()).collect::<Vec<_>>().join(",")),
        ("per_layer_inputs", if ple == 0 { "none".into() } else { format!("{ple} a layer") }),
        ("rope_sliding", format!("{sliding_rope:?}")),
        ("rope_global", format!("{global_rope:?}")),
        ("final_logit_softcapping", format!("{cap:?}")),
        ("attention_scale", "1 (the q norm carries it)".into()),
    ];
    Ok(b.finish(vocab, context, &[dims.facts(), facts.to_vec()].concat()))
}

/// Gemma 4's MoE shape (26B-A4B): `num_experts`, `top_k_experts`,
/// `moe_intermediate_size`.
fn moe_shape(st: &SafetensorsFile, d: usize) -> Result<Moe, Diagnostic> {
    let (n_experts, top_k, ffn) = (st.config_uint("num_experts")?, st.config_uint("top_k_experts")?, st.config_uint("moe_intermediate_size")?);
    if n_experts == 0 || top_k == 0 || top_k > n_experts || ffn == 0 {
        return Err(Diagnostic::new(&st.config_path, format!("{top_k} experts per token of {n_experts}, each of {ffn}, is not a MoE")));
    }
    Ok(Moe { n_experts, top_k, ffn, d, norm_topk: true })
}

/// Layer `l`'s routed experts on the residual stream `x` (HF
/// `Gemma4TextRouter`, `Gemma4TextExperts`): the router reads `x`
/// RMS-normed without a weight, times `router.scale` and `hidden^-1/2`,
/// through `router.proj`; softmax, the top k renormalized, each times its
/// expert's `router.per_expert_scale`; the experts (GeGLU) read
/// `pre_feedforward_layernorm_2(x)`.
fn moe_block(b: &mut Builder, l: usize, x: NodeId, moe: &Moe, (norm, act): (&Op, graphc_ir::UnaryOp)) -> Result<NodeId, Diagnostic> {
    let d = moe.d;
    let p = |s: &str| format!("model.layers.{l}.{s}");
    let r = b.normed_unscaled(x, d, norm);
    let scale = b.weight(&p("router.scale"), Some(&[d]))?;
    let r = b.binary(BinaryOp::Mul, r, scale);
    let root = b.scalar((d as f64).powf(-0.5) as f32);
    let r = b.binary(BinaryOp::Mul, r, root);
    let proj = b.weight(&p("router.proj.weight"), Some(&[moe.n_experts, d]))?;
    let logits = b.matmul(r, proj);
    let weights = routing_weights(b, logits, moe.top_k, moe.norm_topk);
    let per_expert = b.weight(&p("router.per_expert_scale"), Some(&[moe.n_experts]))?;
    let weights = b.binary(BinaryOp::Mul, weights, per_expert);
    let h = b.normed(x, &p("pre_feedforward_layernorm_2.weight"), d, norm)?;
    let expert = |e: usize| ["gate_proj", "up_proj", "down_proj"].map(|w| p(&format!("experts.{e}.{w}.weight")));
    experts_sum(b, &expert, h, weights, moe, act)
}

/// A Gemma 4 MoE checkpoint's experts as transformers stores them
/// (`model.layers.L.experts.gate_up_proj` `[experts, 2·ffn, d]`, the gate's
/// rows first, and `experts.down_proj` `[experts, d, ffn]`) seen one expert
/// at a time, `experts.E.{gate,up,down}_proj.weight`: slices of the same
/// bytes.
pub fn split_experts(mut st: SafetensorsFile) -> Result<SafetensorsFile, Diagnostic> {
    if !st.tensors.iter().any(|t| t.name.ends_with(".experts.gate_up_proj") || t.name.ends_with(".experts.down_proj")) {
        return Ok(st);
    }
    let path = st.path.clone();
    let mut out = Vec::with_capacity(st.tensors.len());
    for t in std::mem::take(&mut st.tensors) {
        let Some((prefix, which)) = t.name.rsplit_once(".experts.").filter(|(_, w)| matches!(*w, "gate_up_proj" | "down_proj")) else {
            out.push(t);
            continue;
        };
        let name = |e: usize, proj: &str| format!("{prefix}.experts.{e}.{proj}.weight");
        let parts: Vec<(String, TensorInfo)> = if which == "down_proj" {
            let slices = crate::expert_slices::expert_slices(&path, &t)?;
            slices.into_iter().enumerate().map(|(e, s)| (name(e, "down_proj"), s)).collect()
        } else {
            let halves = crate::expert_slices::gate_up_halves(&path, &t)?;
            halves.into_iter().enumerate().flat_map(|(e, [gate, up])| [(name(e, "gate_proj"), gate), (name(e, "up_proj"), up)]).collect()
        };
        for (name, part) in parts {
            st.file_names.insert(name.clone(), t.name.clone());
            out.push(TensorInfo { name, ..part });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    st.tensors = out;
    Ok(st)
}

/// The per-layer inputs `[batch, seq, layers, p]` (HF `get_per_layer_inputs`
/// then `project_per_layer_inputs`) of the step's `tokens` and their scaled
/// embedding `embedded`, with `p`.
fn per_layer_inputs(
    b: &mut Builder,
    st: &SafetensorsFile,
    (tokens, embedded): (NodeId, NodeId),
    (vocab, d, n_layers, p): (usize, usize, usize, usize),
    norm: &Op,
) -> Result<(NodeId, usize), Diagnostic> {
    let ple_vocab = st.config_uint("vocab_size_per_layer_input")?;
    if ple_vocab != vocab {
        return Err(Diagnostic::new(
            &st.config_path,
            format!("`vocab_size_per_layer_input` = {ple_vocab} differs from `vocab_size` = {vocab}: tokens past it have no per-layer input"),
        ));
    }
    let width = n_layers * p;
    let shape = vec![batch(), seq(), n_layers.into(), p.into()];
    let table = b.weight("model.embed_tokens_per_layer.weight", Some(&[vocab, width]))?;
    let own = b.op(Op::Gather, &[table, tokens]);
    let s = b.scalar((p as f64).sqrt() as f32);
    let own = b.binary(BinaryOp::Mul, own, s);
    let own = b.reshape(own, shape.clone());
    let w = b.weight("model.per_layer_model_projection.weight", Some(&[width, d]))?;
    let proj = b.matmul(embedded, w);
    let s = b.scalar((d as f64).powf(-0.5) as f32);
    let proj = b.binary(BinaryOp::Mul, proj, s);
    let proj = b.reshape(proj, shape);
    let proj = b.normed(proj, "model.per_layer_projection_norm.weight", p, norm)?;
    let sum = b.binary(BinaryOp::Add, proj, own);
    let s = b.scalar(0.5f64.sqrt() as f32);
    Ok((b.binary(BinaryOp::Mul, sum, s), p))
}

/// Each layer's kind, head size, kv heads, KV source and MLP size.
fn layer_shapes(st: &SafetensorsFile, dims: &HfDims) -> Result<Vec<LayerShape>, Diagnostic> {
    let path = &st.config_path;
    let err = |m: String| Diagnostic::new(path, m);
    let n = dims.n_layers;
    let sliding: Vec<bool> = if st.config.get("layer_types").is_some_and(|v| !v.is_null()) {
        super::gemma2::layer_kinds(st, n)?
    } else {
        // HF's default: five sliding then one global, the last layer global.
        (0..n).map(|l| (l + 1) % 6 != 0 && l + 1 != n).collect()
    };
    if sliding.last() == Some(&true) {
        return Err(err(format!("`layer_types[{}]` is sliding_attention: Gemma 4's last layer attends globally (transformers forces it)", n - 1)));
    }
    let mut shapes: Vec<LayerShape> = sliding
        .iter()
        .map(|&s| LayerShape { sliding: s, head_dim: dims.head_dim, n_kv_heads: dims.n_kv_heads, kv_from: None, ffn: dims.ffn })
        .collect();
    // The global layers' overrides.
    match st.config.get("per_layer_config").filter(|v| !v.is_null()) {
        Some(Value::Object(per_layer)) => {
            for (key, over) in per_layer {
                let which: Vec<usize> = match key.as_str() {
                    "full_attention" => (0..n).filter(|&l| !sliding[l]).collect(),
                    "sliding_attention" => (0..n).filter(|&l| sliding[l]).collect(),
                    k => match k.parse::<usize>() {
                        Ok(l) if l < n => vec![l],
                        _ => return Err(err(format!("`per_layer_config` has the key `{key}`: not a layer index below {n} or a layer type"))),
                    },
                };
                let Value::Object(over) = over else { return Err(err(format!("`per_layer_config.{key}` is not an object"))) };
                for (field, v) in over {
                    let v = v
                        .as_u64()
                        .filter(|&v| v > 0)
                        .ok_or_else(|| err(format!("`per_layer_config.{key}.{field}` = {v} is not a positive integer")))?;
                    for &l in &which {
                        match field.as_str() {
                            "head_dim" => shapes[l].head_dim = v as usize,
                            "num_key_value_heads" => shapes[l].n_kv_heads = v as usize,
                            _ => {
                                return Err(err(format!("`per_layer_config.{key}.{field}` is not implemented by the gemma4_text family"))
                                    .note("graphc reads each layer's `head_dim` and `num_key_value_heads`"))
                            }
                        }
                    }
                }
            }
        }
        Some(_) => return Err(err("`per_layer_config` is not an object".into())),
        None => {
            // The Hub's form: HF's `__post_init__` derives the same overrides.
            let global_hd = st.config_uint("global_head_dim")?;
            let global_kv = match st.config.get("num_global_key_value_heads") {
                Some(v) if !v.is_null() && super::hf::config_flag(st, "attention_k_eq_v")? => Some(st.config_uint("num_global_key_value_heads")?),
                _ => None,
            };
            for s in shapes.iter_mut().filter(|s| !s.sliding) {
                s.head_dim = global_hd;
                s.n_kv_heads = global_kv.unwrap_or(s.n_kv_heads);
            }
        }
    }
    for (l, s) in shapes.iter().enumerate() {
        if s.head_dim == 0 || !s.head_dim.is_multiple_of(2) || s.n_kv_heads == 0 || !dims.n_heads.is_multiple_of(s.n_kv_heads) {
            return Err(err(format!("layer {l}: head_dim {} and {} kv heads do not fit {} attention heads", s.head_dim, s.n_kv_heads, dims.n_heads)));
        }
    }
    // KV sharing: from `n - shared` on, each layer reads the caches of the
    // last earlier layer of its kind (HF `kv_sharing_modes`).
    let shared = st.config_uint_or("num_kv_shared_layers", 0)?;
    if shared >= n && shared > 0 {
        return Err(err(format!("`num_kv_shared_layers` = {shared} of {n} layers leaves no layer computing keys and values")));
    }
    let first = n - shared;
    let double = super::hf::config_flag(st, "use_double_wide_mlp")?;
    for l in first..n {
        let from = (0..first).rev().find(|&j| sliding[j] == sliding[l]).ok_or_else(|| {
            err(format!("layer {l} shares keys and values (`num_kv_shared_layers` = {shared}) but no earlier layer is of its kind"))
        })?;
        if (shapes[from].head_dim, shapes[from].n_kv_heads) != (shapes[l].head_dim, shapes[l].n_kv_heads) {
            return Err(err(format!("layer {l} reads layer {from}'s caches but its heads differ from that layer's")));
        }
        shapes[l].kv_from = Some(from);
        if double {
            shapes[l].ffn *= 2;
        }
    }
    Ok(shapes)
}

/// The RoPE of the sliding or the global layers (`rope_parameters.{kind}`).
fn rope(st: &SafetensorsFile, layers: &[LayerShape], sliding: bool) -> Result<Op, Diagnostic> {
    let path = &st.config_path;
    let kind = if sliding { "sliding_attention" } else { "full_attention" };
    let key = format!("rope_parameters.{kind}");
    let head_dim = layers.iter().find(|s| s.sliding == sliding).map_or(0, |s| s.head_dim);
    let p = st
        .config
        .get("rope_parameters")
        .and_then(|r| r.get(kind))
        .filter(|p| p.is_object())
        .ok_or_else(|| Diagnostic::new(path, format!("missing `{key}`")).note("Gemma 4 configs give each layer kind's RoPE"))?;
    let theta = p.get("rope_theta").and_then(|t| t.as_f64()).ok_or_else(|| Diagnostic::new(path, format!("`{key}.rope_theta` is missing")))? as f32;
    let partial = p.get("partial_rotary_factor").and_then(|f| f.as_f64());
    if let Some(f) = p.get("factor").and_then(|f| f.as_f64()).filter(|&f| f != 1.0) {
        return Err(Diagnostic::new(path, format!("`{key}.factor` = {f} is not implemented by the gemma4_text family")));
    }
    let scaling = match p.get("rope_type").or_else(|| p.get("type")).and_then(|t| t.as_str()).unwrap_or("default") {
        // transformers' default RoPE turns every pair (a partial factor is not read).
        "default" if partial.is_none_or(|f| f == 1.0) => RopeScaling::None,
        "proportional" => {
            let f = partial.unwrap_or(1.0);
            if !(0.0..=1.0).contains(&f) {
                return Err(Diagnostic::new(path, format!("`{key}.partial_rotary_factor` = {f} is not in [0, 1]")));
            }
            // HF: `int(partial_rotary_factor * head_dim // 2)`.
            RopeScaling::Proportional { rotated_pairs: (f * head_dim as f64 / 2.0).floor() as usize }
        }
        other => {
            return Err(Diagnostic::new(
                path,
                format!("`{key}` (rope_type {other:?}, partial_rotary_factor {partial:?}) is not implemented by the gemma4_text family"),
            )
            .note("graphc lowers Gemma 4's `default` RoPE on the sliding layers and `default` or `proportional` on the global ones"))
        }
    };
    Ok(Op::Rope { style: RopeStyle::Neox, rotary_dim: head_dim, theta, scaling })
}
