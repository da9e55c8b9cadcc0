//! GGUF checkpoints of the families lowered from Hugging Face names
//! (qwen3, qwen3moe, gemma, gemma2, phi2, phi3), presented as the HF
//! checkpoint those lowerings read: the GGUF metadata becomes the
//! `config.json` keys, and each tensor gets its HF name. No byte is copied:
//! a renamed tensor is the same offset into the same map (an expert of a
//! stacked `ffn_*_exps` tensor is a slice of it).
//!
//! The names and keys are llama.cpp's (`convert_hf_to_gguf.py`, gguf-py's
//! tensor map). Where GGUF stores a thing differently:
//! - gemma, gemma2: the converter adds 1 to every norm weight, so the `1 +
//!   w` is already in the weight (`NORMS_INCLUDE_ONE` tells the lowering).
//! - gemma2: GGUF has no `query_pre_attn_scalar`; llama.cpp scales scores
//!   by `1/sqrt(head_dim)` (its 27B special case aside), so that is the
//!   scalar here; and the sliding layers are the even ones, as llama.cpp
//!   hard-codes for gemma2.
//! - phi3: LongRoPE's factors are the tensors `rope_factors_long/short`,
//!   its attention factor `phi3.rope.scaling.attn_factor`; a partial
//!   rotation (Phi-4-mini) is `rope.dimension_count` of the head.
//! - qwen3moe, qwen2moe: layers without a router (`ffn_gate_inp`) are
//!   dense; qwen2moe's chosen experts are not renormalized (llama.cpp's
//!   rule: its GGUF has no key for `norm_topk_prob`).
//! - qwen3next, qwen35, qwen35moe: the linear layers' weights as llama.cpp
//!   regroups them (`attn_qkv` = `[q; k; v]`, `attn_gate` = z, `ssm_a` =
//!   `-exp(A_log)`, the conv `[channels, kernel]`; Qwen3.5's `ssm_beta` /
//!   `ssm_alpha` with its value heads tiled over the key heads), read by
//!   `qwen3_next`'s layouts; `1 + w` folded into its zero-centered norms;
//!   the MTP blocks after the trunk (`nextn_predict_layers`) left out.
//! - glm4: its fused `gate_up_proj` is `ffn_up`, its sandwich norms
//!   `post_attention_norm` (after attention), `ffn_norm` (before the MLP)
//!   and `post_ffw_norm`; the rotated half `rope.dimension_count`.
//! - olmo2: its post-norms are `post_attention_norm` and `post_ffw_norm`;
//!   `attention_bias` follows from `attn_q.bias`; with a sliding window it
//!   is OLMo 3 (`olmo3_config`).
//! - phimoe: as phi3, with stacked experts; GGUF has no key for the
//!   sparsemixer's `router_jitter_noise`, so HF's default (0.01) is used.
//! - lfm2: a conv layer is one with 0 kv heads (`attention.head_count_kv`
//!   per layer), the MLP's adjusted size is `feed_forward_length`, the
//!   final norm `token_embd_norm`, the conv `[channels, taps]`.
//! - gemma4: see `gemma4_config`.
//! - gpt-oss: the experts' biases are stacked too (`[experts, rows]`);
//!   the sinks are `attn_sinks.weight`; the even layers slide (llama.cpp's
//!   pattern); `swiglu_alpha`/`swiglu_limit` have no key (1.702 and 7, as
//!   llama.cpp hard-codes them); YaRN is untruncated, as the model's own.

use crate::error::Diagnostic;
use crate::gguf::{GgufFile, MetaValue, TensorInfo};
use crate::safetensors::SafetensorsFile;
use serde_json::{json, Map, Value};

/// A config key (not HF's) saying the norm weights already hold the `1 +`.
pub const NORMS_INCLUDE_ONE: &str = "graphc_gguf_norms_include_one";

/// `gguf` (of an architecture the registry reads through HF names) as an HF checkpoint.
pub fn hf_view(gguf: GgufFile) -> Result<SafetensorsFile, Diagnostic> {
    let file_arch = gguf.str("general.architecture")?.to_string();
    // A Qwen-VL text model's keys are under its own architecture; it is read as its text family.
    let arch = crate::multimodal::gguf_text_arch(&file_arch).unwrap_or(&file_arch).to_string();
    let Some(model_type) = crate::families::registry::by_gguf_arch(&arch).and_then(|f| f.model_type) else {
        return Err(Diagnostic::new(&gguf.path, format!("architecture `{arch}` is not read through the HF view")));
    };
    let mut config = config(&gguf, &file_arch, &arch, model_type)?;
    if file_arch != arch {
        let rotary = gguf.uint_or(&format!("{file_arch}.rope.dimension_count"), config["head_dim"].as_u64().unwrap_or(0))?;
        let fact = crate::multimodal::gguf_mrope_fact(&gguf, &file_arch, rotary)?;
        config[crate::multimodal::MROPE_READ_AS_ROPE] = json!(fact);
    }
    let trunk = match arch.as_str() {
        "qwen3next" | "qwen35" | "qwen35moe" => Some(trunk_layers(&gguf, &file_arch)?),
        _ => None,
    };
    let (tensors, file_names, mtp) = rename(&gguf, &arch, trunk)?;
    if mtp > 0 {
        config[crate::mtp::MTP_TENSORS_LEFT] = json!(mtp);
    }
    Ok(SafetensorsFile {
        path: gguf.path.clone(),
        config_path: format!("{} (GGUF metadata)", gguf.path),
        config,
        tensors,
        data: gguf.data,
        file_names,
    })
}

/// The config of a GGUF whose keys are under `key_arch` (its own
/// architecture), read as the family of `arch`.
fn config(g: &GgufFile, key_arch: &str, arch: &str, model_type: &str) -> Result<Value, Diagnostic> {
    let k = |s: &str| format!("{key_arch}.{s}");
    let d = g.uint(&k("embedding_length"))?;
    let n_heads = g.uint(&k("attention.head_count"))?;
    if n_heads == 0 {
        return Err(Diagnostic::new(&g.path, format!("`{}` is 0", k("attention.head_count"))));
    }
    let embd = g.tensor("token_embd.weight").ok_or_else(|| Diagnostic::new(&g.path, "missing tensor `token_embd.weight`"))?;
    let head_dim = g.uint_or(&k("attention.key_length"), d / n_heads)?;
    let mut c = Map::new();
    c.insert("model_type".into(), json!(model_type));
    c.insert("hidden_size".into(), json!(d));
    c.insert("num_hidden_layers".into(), json!(g.uint(&k("block_count"))?));
    c.insert("num_attention_heads".into(), json!(n_heads));
    // Gemma 4's kv heads and MLP sizes are per layer (`gemma4_config`).
    if !matches!(arch, "gemma4" | "lfm2") {
        c.insert("num_key_value_heads".into(), json!(g.uint_or(&k("attention.head_count_kv"), n_heads)?));
    }
    c.insert("head_dim".into(), json!(head_dim));
    // Qwen3.5-MoE's GGUF has no dense size: every MLP routes.
    if !matches!(arch, "qwen35moe" | "gemma4") {
        c.insert("intermediate_size".into(), json!(g.uint(&k("feed_forward_length"))?));
    }
    c.insert("max_position_embeddings".into(), json!(g.uint(&k("context_length"))?));
    c.insert("vocab_size".into(), json!(embd.shape.first().copied().unwrap_or(0)));
    c.insert("rope_theta".into(), json!(g.float_or(&k("rope.freq_base"), 10000.0)?));
    c.insert("tie_word_embeddings".into(), json!(g.tensor("output.weight").is_none()));
    if arch != "phi2" {
        c.insert("rms_norm_eps".into(), json!(g.float(&k("attention.layer_norm_rms_epsilon"))?));
    }
    match arch {
        "gemma" | "gemma2" => {
            c.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
            c.insert(NORMS_INCLUDE_ONE.into(), json!(true));
            if arch == "gemma2" {
                let layers = g.uint(&k("block_count"))?;
                c.insert("sliding_window".into(), json!(g.uint(&k("attention.sliding_window"))?));
                for key in ["attn_logit_softcapping", "final_logit_softcapping"] {
                    c.insert(key.into(), g.get(&k(key)).and_then(|v| v.as_f64()).map_or(Value::Null, |v| json!(v)));
                }
                c.insert("query_pre_attn_scalar".into(), json!(head_dim));
                let types: Vec<&str> = (0..layers).map(|l| if l % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect();
                c.insert("layer_types".into(), json!(types));
            }
        }
        "phi2" => {
            c.insert("layer_norm_eps".into(), json!(g.float(&k("attention.layer_norm_epsilon"))?));
            let rotary = g.uint(&k("rope.dimension_count"))?;
            c.insert("partial_rotary_factor".into(), json!(rotary as f64 / head_dim as f64));
            c.insert("hidden_act".into(), json!("gelu_new"));
        }
        "qwen3next" | "qwen35" | "qwen35moe" => {
            let (nk, nv) = (g.uint(&k("ssm.group_count"))?, g.uint(&k("ssm.time_step_rank"))?);
            c.insert(NORMS_INCLUDE_ONE.into(), json!(true));
            c.insert("linear_conv_kernel_dim".into(), json!(g.uint(&k("ssm.conv_kernel"))?));
            c.insert("linear_key_head_dim".into(), json!(g.uint(&k("ssm.state_size"))?));
            c.insert("linear_num_key_heads".into(), json!(nk));
            c.insert("linear_num_value_heads".into(), json!(nv));
            c.insert("linear_value_head_dim".into(), json!(g.uint(&k("ssm.inner_size"))? / nv.max(1)));
            c.insert("full_attention_interval".into(), json!(g.uint_or(&k("full_attention_interval"), 4)?));
            let rotary = g.uint(&k("rope.dimension_count"))?;
            c.insert("partial_rotary_factor".into(), json!(rotary as f64 / head_dim as f64));
            // The trunk's layers: the MTP blocks after it are left out (`mtp`).
            let trunk = trunk_layers(g, key_arch)?;
            c.insert("num_hidden_layers".into(), json!(trunk));
            if let Some(recurrent) = g.get(&k("attention.recurrent_layers")) {
                let kinds: Option<Vec<&str>> = match recurrent {
                    MetaValue::Array(a) if a.len() as u64 >= trunk => a[..trunk as usize]
                        .iter()
                        .map(|v| match v {
                            MetaValue::Bool(true) => Some("linear_attention"),
                            MetaValue::Bool(false) => Some("full_attention"),
                            _ => None,
                        })
                        .collect(),
                    _ => None,
                };
                let kinds = kinds.ok_or_else(|| {
                    Diagnostic::new(&g.path, format!("`{}` is not a list of at least {trunk} booleans", k("attention.recurrent_layers")))
                })?;
                c.insert("layer_types".into(), json!(kinds));
            }
            if arch != "qwen35" {
                c.insert("num_experts".into(), json!(g.uint(&k("expert_count"))?));
                c.insert("num_experts_per_tok".into(), json!(g.uint(&k("expert_used_count"))?));
                c.insert("moe_intermediate_size".into(), json!(g.uint(&k("expert_feed_forward_length"))?));
                c.insert("shared_expert_intermediate_size".into(), json!(g.uint(&k("expert_shared_feed_forward_length"))?));
            }
            if arch == "qwen3next" {
                c.insert("norm_topk_prob".into(), json!(true));
                c.insert("decoder_sparse_step".into(), json!(1));
            } else {
                // llama.cpp's converter tiles Qwen3.5's value heads; its M-RoPE sections are required.
                c.insert(crate::families::qwen3_next::V_HEADS_TILED.into(), json!(true));
                c.insert(crate::multimodal::MROPE_READ_AS_ROPE.into(), json!(crate::multimodal::gguf_mrope_fact(g, key_arch, rotary)?));
            }
        }
        "phi3" | "phimoe" => {
            if arch == "phimoe" {
                c.insert("num_local_experts".into(), json!(g.uint(&k("expert_count"))?));
                c.insert("num_experts_per_tok".into(), json!(g.uint(&k("expert_used_count"))?));
                c.insert("router_jitter_noise".into(), json!(0.01));
                c.insert("attention_bias".into(), json!(g.tensor("blk.0.attn_q.bias").is_some()));
                c.insert("lm_head_bias".into(), json!(g.tensor("output.bias").is_some()));
            }
            if arch == "phi3" {
                // Phi-4-mini rotates 96 of each head's 128 features.
                let rotary = g.uint_or(&k("rope.dimension_count"), head_dim)?;
                c.insert("partial_rotary_factor".into(), json!(rotary as f64 / head_dim as f64));
                // 0: none (the converter writes 0 where the config has null).
                if let Some(w) = g.get(&k("attention.sliding_window")).and_then(|v| v.as_u64()).filter(|&w| w > 0) {
                    c.insert("sliding_window".into(), json!(w));
                }
            }
            let original = g.uint_or(&k("rope.scaling.original_context_length"), g.uint(&k("context_length"))?)?;
            c.insert("original_max_position_embeddings".into(), json!(original));
            if let (Some(long), Some(short)) = (g.tensor("rope_factors_long.weight"), g.tensor("rope_factors_short.weight")) {
                let mut scaling = json!({
                    "type": "longrope",
                    "long_factor": f32_values(g, long)?,
                    "short_factor": f32_values(g, short)?,
                });
                if let Some(a) = g.get(&k("rope.scaling.attn_factor")).and_then(|v| v.as_f64()) {
                    scaling["attention_factor"] = json!(a);
                }
                c.insert("rope_scaling".into(), scaling);
            }
        }
        "gemma4" => gemma4_config(g, key_arch, &mut c)?,
        "lfm2" => {
            // The converter writes 0 kv heads for a conv layer, and the MLP's adjusted size.
            let kinds: Option<Vec<u64>> = match g.get(&k("attention.head_count_kv")) {
                Some(MetaValue::Array(a)) => a.iter().map(|v| v.as_u64()).collect(),
                Some(v) => v.as_u64().map(|n| vec![n; g.uint(&k("block_count")).unwrap_or(0) as usize]),
                None => None,
            };
            let kinds =
                kinds.ok_or_else(|| Diagnostic::new(&g.path, format!("`{}` is not a list of kv heads a layer", k("attention.head_count_kv"))))?;
            let kv = kinds.iter().copied().find(|&n| n > 0).unwrap_or(n_heads);
            if kinds.iter().any(|&n| n != 0 && n != kv) {
                return Err(Diagnostic::new(
                    &g.path,
                    format!("`{}` = {kinds:?}: attention layers with different kv heads", k("attention.head_count_kv")),
                ));
            }
            let types: Vec<&str> = kinds.iter().map(|&n| if n == 0 { "conv" } else { "full_attention" }).collect();
            c.insert("num_key_value_heads".into(), json!(kv));
            c.insert("layer_types".into(), json!(types));
            c.insert("block_auto_adjust_ff_dim".into(), json!(false));
            c.insert("conv_L_cache".into(), json!(g.uint(&k("shortconv.l_cache"))?));
            c.insert("norm_eps".into(), c["rms_norm_eps"].clone());
        }
        "glm4" => {
            c.insert("attention_bias".into(), json!(g.tensor("blk.0.attn_q.bias").is_some()));
            c.insert("partial_rotary_factor".into(), json!(g.uint(&k("rope.dimension_count"))? as f64 / head_dim as f64));
        }
        "olmo2" => {
            c.insert("attention_bias".into(), json!(g.tensor("blk.0.attn_q.bias").is_some()));
            // OLMo 3 (llama.cpp's converter writes it as olmo2 with its window).
            if let Some(window) = g.get(&k("attention.sliding_window")).and_then(|v| v.as_u64()).filter(|&w| w > 0) {
                olmo3_config(g, key_arch, &mut c, window)?;
            }
        }
        "qwen2moe" => {
            let layers = g.uint(&k("block_count"))?;
            c.insert("num_experts".into(), json!(g.uint(&k("expert_count"))?));
            c.insert("num_experts_per_tok".into(), json!(g.uint(&k("expert_used_count"))?));
            c.insert("moe_intermediate_size".into(), json!(g.uint(&k("expert_feed_forward_length"))?));
            c.insert("shared_expert_intermediate_size".into(), json!(g.uint(&k("expert_shared_feed_forward_length"))?));
            // llama.cpp never renormalizes the chosen experts' weights for qwen2moe.
            c.insert("norm_topk_prob".into(), json!(false));
            c.insert("decoder_sparse_step".into(), json!(1));
            c.insert("qkv_bias".into(), json!(g.tensor("blk.0.attn_q.bias").is_some()));
            let dense: Vec<u64> = (0..layers).filter(|l| g.tensor(&format!("blk.{l}.ffn_gate_inp.weight")).is_none()).collect();
            c.insert("mlp_only_layers".into(), json!(dense));
        }
        "qwen3moe" => {
            let layers = g.uint(&k("block_count"))?;
            c.insert("num_experts".into(), json!(g.uint(&k("expert_count"))?));
            c.insert("num_experts_per_tok".into(), json!(g.uint(&k("expert_used_count"))?));
            c.insert("moe_intermediate_size".into(), json!(g.uint(&k("expert_feed_forward_length"))?));
            // llama.cpp always renormalizes the chosen experts' weights for qwen3moe.
            c.insert("norm_topk_prob".into(), json!(true));
            c.insert("decoder_sparse_step".into(), json!(1));
            let dense: Vec<u64> = (0..layers).filter(|l| g.tensor(&format!("blk.{l}.ffn_gate_inp.weight")).is_none()).collect();
            c.insert("mlp_only_layers".into(), json!(dense));
        }
        "gpt-oss" => {
            let layers = g.uint(&k("block_count"))?;
            c.insert("num_local_experts".into(), json!(g.uint(&k("expert_count"))?));
            c.insert("num_experts_per_tok".into(), json!(g.uint(&k("expert_used_count"))?));
            // The experts' size: llama.cpp writes both keys, equal.
            let ffn = g.uint(&k("expert_feed_forward_length"))?;
            if ffn != g.uint(&k("feed_forward_length"))? {
                return Err(Diagnostic::new(
                    &g.path,
                    format!("`{}` = {ffn} differs from `{}`", k("expert_feed_forward_length"), k("feed_forward_length")),
                ));
            }
            c.insert("attention_bias".into(), json!(true));
            // llama.cpp's swa pattern for gpt-oss: the even layers slide.
            c.insert("sliding_window".into(), json!(g.uint(&k("attention.sliding_window"))?));
            let types: Vec<&str> = (0..layers).map(|l| if l % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect();
            c.insert("layer_types".into(), json!(types));
            // No GGUF key holds these: llama.cpp hard-codes gpt-oss's values.
            c.insert("swiglu_alpha".into(), json!(1.702));
            c.insert("swiglu_limit".into(), json!(7.0));
            match scaling_type(g, key_arch)? {
                // gpt-oss's YaRN is not truncated (transformers' config and
                // OpenAI's reference; llama.cpp floors/ceils the range).
                Some("yarn") => {
                    let mut scaling = yarn_scaling(g, key_arch)?;
                    if let graphc_ir::RopeScaling::Yarn { truncate, .. } = &mut scaling {
                        *truncate = false;
                    }
                    c.insert("rope_scaling".into(), yarn_json(&scaling));
                }
                None => {}
                Some(other) => {
                    return Err(Diagnostic::new(
                        &g.path,
                        format!("`{}` = {other:?} is not implemented by the gpt-oss family", k("rope.scaling.type")),
                    )
                    .note("graphc lowers gpt-oss with YaRN or no scaling"))
                }
            }
        }
        _ => {}
    }
    let olmo3 = c.get("model_type").and_then(|m| m.as_str()) == Some(crate::families::olmo2::OLMO3);
    if matches!(arch, "qwen2" | "qwen3" | "qwen3moe") || (arch == "olmo2" && !olmo3) {
        if let Some(scaling) = rope_scaling(g, key_arch)? {
            c.insert("rope_scaling".into(), scaling);
        }
    }
    Ok(Value::Object(c))
}

/// OLMo 3 from an `olmo2` GGUF with a sliding window: which layers slide
/// (`attention.sliding_window_pattern`, else llama.cpp's default, three of
/// four), and each kind's RoPE as `rope_parameters.{full_attention,
/// sliding_attention}`: the global layers at `rope.freq_base` with the
/// file's scaling (OLMo 3's YaRN), the sliding ones at `rope.freq_base_swa`
/// (else the same base) unscaled, as llama.cpp's olmo2 graph runs them.
fn olmo3_config(g: &GgufFile, key_arch: &str, c: &mut Map<String, Value>, window: u64) -> Result<(), Diagnostic> {
    let k = |s: &str| format!("{key_arch}.{s}");
    let layers = g.uint(&k("block_count"))?;
    let sliding: Vec<bool> = match g.get(&k("attention.sliding_window_pattern")) {
        None => (0..layers).map(|l| !(l + 1).is_multiple_of(4)).collect(),
        Some(MetaValue::Array(a)) if a.len() as u64 == layers && a.iter().all(|v| matches!(v, MetaValue::Bool(_))) => {
            a.iter().map(|v| matches!(v, MetaValue::Bool(true))).collect()
        }
        Some(_) => return Err(Diagnostic::new(&g.path, format!("`{}` is not a list of {layers} booleans", k("attention.sliding_window_pattern")))),
    };
    let kinds: Vec<&str> = sliding.iter().map(|&s| if s { "sliding_attention" } else { "full_attention" }).collect();
    let base = g.float_or(&k("rope.freq_base"), 10000.0)?;
    let mut full = rope_scaling(g, key_arch)?.unwrap_or_else(|| json!({"rope_type": "default"}));
    full["rope_theta"] = json!(base);
    let sliding_rope = json!({"rope_type": "default", "rope_theta": g.float_or(&k("rope.freq_base_swa"), base)?});
    c.insert("model_type".into(), json!(crate::families::olmo2::OLMO3));
    c.insert("sliding_window".into(), json!(window));
    c.insert("layer_types".into(), json!(kinds));
    c.insert("rope_parameters".into(), json!({"full_attention": full, "sliding_attention": sliding_rope}));
    Ok(())
}

/// Gemma 4 as llama.cpp's converter writes it: per-layer kv heads and MLP
/// sizes (`attention.head_count_kv`, `feed_forward_length`: a number or
/// one per layer), the sliding layers' head size `attention.key_length_swa`
/// and the global ones' `key_length`, which layers slide
/// (`attention.sliding_window_pattern`), KV-shared layers
/// (`attention.shared_kv_layers`; their MLPs double-wide where the sizes
/// say so), per-layer inputs (`embedding_length_per_layer_input`), the
/// values-are-keys global layers (no `attn_v`), and the global layers'
/// proportional RoPE as the `rope_freqs` factors the converter writes for
/// it (1 for a turning pair, 1e30 for a still one: read back as the
/// fraction that turns; any other factors refused).
fn gemma4_config(g: &GgufFile, arch: &str, c: &mut Map<String, Value>) -> Result<(), Diagnostic> {
    let k = |s: &str| format!("{arch}.{s}");
    let err = |m: String| Diagnostic::new(&g.path, m);
    let n = g.uint(&k("block_count"))? as usize;
    let per_layer = |key: &str| -> Result<Vec<u64>, Diagnostic> {
        match g.get(&k(key)) {
            Some(MetaValue::Array(a)) if a.len() == n => {
                a.iter().map(|v| v.as_u64()).collect::<Option<Vec<u64>>>().ok_or_else(|| err(format!("`{}` is not a list of integers", k(key))))
            }
            Some(v) => v.as_u64().map(|v| vec![v; n]).ok_or_else(|| err(format!("`{}` is not an integer or a list of {n}", k(key)))),
            None => Err(err(format!("missing key `{}`", k(key)))),
        }
    };
    let sliding: Vec<bool> = match g.get(&k("attention.sliding_window_pattern")) {
        Some(MetaValue::Array(a)) if a.len() == n && a.iter().all(|v| matches!(v, MetaValue::Bool(_))) => {
            a.iter().map(|v| matches!(v, MetaValue::Bool(true))).collect()
        }
        _ => return Err(err(format!("`{}` is not a list of {n} booleans", k("attention.sliding_window_pattern")))),
    };
    let (global_hd, sliding_hd) = (g.uint(&k("attention.key_length"))?, g.uint(&k("attention.key_length_swa"))?);
    for (key, want) in [
        ("attention.value_length", global_hd),
        ("attention.value_length_swa", sliding_hd),
        ("rope.dimension_count", global_hd),
        ("rope.dimension_count_swa", sliding_hd),
    ] {
        let got = g.uint_or(&k(key), want)?;
        if got != want {
            return Err(err(format!(
                "`{}` = {got}, expected {want}: graphc lowers Gemma 4 with whole heads rotated as its converter writes them",
                k(key)
            )));
        }
    }
    let kv = per_layer("attention.head_count_kv")?;
    let ffn = per_layer("feed_forward_length")?;
    let shared = g.uint_or(&k("attention.shared_kv_layers"), 0)? as usize;
    let first_shared = n.saturating_sub(shared);
    // The sliding layers' kv heads (the config's own), the global ones' per layer.
    let sliding_kv = (0..n).find(|&l| sliding[l]).map_or(kv[0], |l| kv[l]);
    if (0..n).any(|l| sliding[l] && kv[l] != sliding_kv) {
        return Err(err(format!("`{}` differs between sliding layers", k("attention.head_count_kv"))));
    }
    let mut overrides = Map::new();
    for l in (0..n).filter(|&l| !sliding[l]) {
        overrides.insert(l.to_string(), json!({"head_dim": global_hd, "num_key_value_heads": kv[l]}));
    }
    // Double-wide MLPs: the shared layers' size twice the others'.
    let double = first_shared < n && ffn[first_shared..].iter().all(|&f| f == 2 * ffn[0]);
    if ffn[..first_shared].iter().any(|&f| f != ffn[0]) || ffn[first_shared..].iter().any(|&f| f != if double { 2 * ffn[0] } else { ffn[0] }) {
        return Err(err(format!("`{}` = {ffn:?}: graphc lowers one MLP size, doubled on the KV-shared layers", k("feed_forward_length"))));
    }
    let values_are_keys = (0..n).filter(|&l| !sliding[l] && l < first_shared).all(|l| g.tensor(&format!("blk.{l}.attn_v.weight")).is_none());
    // The proportional RoPE of the global layers, from the converter's factors.
    let factors = g.tensor("rope_freqs.weight").ok_or_else(|| err("missing tensor `rope_freqs.weight` (Gemma 4's global layers' RoPE)".into()))?;
    let factors = f32_values(g, factors)?;
    let turning = factors.iter().take_while(|&&f| f == 1.0).count();
    if factors.len() as u64 != global_hd / 2 || factors[turning..].iter().any(|&f| f != 1e30) {
        return Err(err(format!(
            "tensor `rope_freqs.weight` holds {} factors that are not {} pairs of 1 then 1e30: not the proportional RoPE graphc lowers",
            factors.len(),
            global_hd / 2
        )));
    }
    let base = g.float_or(&k("rope.freq_base"), 10000.0)?;
    c.insert("head_dim".into(), json!(sliding_hd));
    c.insert("num_key_value_heads".into(), json!(sliding_kv));
    c.insert("per_layer_config".into(), Value::Object(overrides));
    c.insert("intermediate_size".into(), json!(ffn[0]));
    c.insert("use_double_wide_mlp".into(), json!(double));
    c.insert("num_kv_shared_layers".into(), json!(shared));
    c.insert("attention_k_eq_v".into(), json!(values_are_keys));
    c.insert("hidden_size_per_layer_input".into(), json!(g.uint_or(&k("embedding_length_per_layer_input"), 0)?));
    c.insert("vocab_size_per_layer_input".into(), c["vocab_size"].clone());
    c.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
    // MoE layers (26B-A4B): a router on every layer.
    if (0..n).any(|l| g.tensor(&format!("blk.{l}.ffn_gate_inp.weight")).is_some()) {
        c.insert("enable_moe_block".into(), json!(true));
        c.insert("num_experts".into(), json!(g.uint(&k("expert_count"))?));
        c.insert("top_k_experts".into(), json!(g.uint(&k("expert_used_count"))?));
        c.insert("moe_intermediate_size".into(), json!(g.uint(&k("expert_feed_forward_length"))?));
    } else if let Some(key) =
        ["expert_count", "expert_used_count", "expert_feed_forward_length"].iter().map(|s| k(s)).find(|key| g.get(key).is_some())
    {
        return Err(err(format!("GGUF key `{key}` is set but no layer has a router (`ffn_gate_inp`): not a Gemma 4 MoE graphc can read")));
    }
    c.insert("sliding_window".into(), json!(g.uint(&k("attention.sliding_window"))?));
    let types: Vec<&str> = sliding.iter().map(|&s| if s { "sliding_attention" } else { "full_attention" }).collect();
    c.insert("layer_types".into(), json!(types));
    c.insert("final_logit_softcapping".into(), g.get(&k("final_logit_softcapping")).and_then(|v| v.as_f64()).map_or(Value::Null, |v| json!(v)));
    c.insert(
        "rope_parameters".into(),
        json!({
            "sliding_attention": {"rope_type": "default", "rope_theta": g.float_or(&k("rope.freq_base_swa"), base)?},
            "full_attention": {"rope_type": "proportional", "rope_theta": base, "partial_rotary_factor": (2 * turning) as f64 / global_hd as f64},
        }),
    );
    Ok(())
}

/// The layers of the model's own forward: `block_count` less the MTP blocks
/// after them (`nextn_predict_layers`, Qwen3-Next's and Qwen3.5's), which
/// only draft tokens (`mtp`).
fn trunk_layers(g: &GgufFile, key_arch: &str) -> Result<u64, Diagnostic> {
    let (blocks, mtp) = (g.uint(&format!("{key_arch}.block_count"))?, g.uint_or(&format!("{key_arch}.nextn_predict_layers"), 0)?);
    if mtp >= blocks {
        return Err(Diagnostic::new(&g.path, format!("`{key_arch}.nextn_predict_layers` = {mtp} leaves none of {blocks} blocks")));
    }
    Ok(blocks - mtp)
}

/// llama.cpp's RoPE scaling keys as HF's `rope_scaling` (qwen2, qwen3, qwen3moe):
/// `linear` with its factor, `yarn` as `yarn_scaling` reads it. Another
/// type is refused here, naming the key; YaRN keys graphc does not read
/// (`yarn_log_multiplier` but for mistral3, `yarn_ext_factor`) by the
/// family's key check.
fn rope_scaling(g: &GgufFile, arch: &str) -> Result<Option<Value>, Diagnostic> {
    let k = |s: &str| format!("{arch}.rope.scaling.{s}");
    match scaling_type(g, arch)? {
        None => Ok(None),
        Some("linear") => Ok(Some(json!({"rope_type": "linear", "factor": g.float(&k("factor"))?}))),
        Some("yarn") => Ok(Some(yarn_json(&yarn_scaling(g, arch)?))),
        Some(other) => Err(Diagnostic::new(&g.path, format!("`{}` = {other:?} is not implemented by the {arch} family", k("type")))
            .note("graphc lowers RoPE scaling `none`, `linear` and `yarn` here")),
    }
}

/// A YaRN scaling as HF's `rope_scaling`, as `hf::rope_scaling` reads it.
fn yarn_json(scaling: &graphc_ir::RopeScaling) -> Value {
    match *scaling {
        graphc_ir::RopeScaling::Yarn { factor, original_context, beta_fast, beta_slow, attention_factor, truncate } => json!({
            "rope_type": "yarn",
            "factor": factor,
            "original_max_position_embeddings": original_context,
            "beta_fast": beta_fast,
            "beta_slow": beta_slow,
            "attention_factor": attention_factor,
            "truncate": truncate,
        }),
        _ => unreachable!("yarn_scaling gives YaRN"),
    }
}

/// `{arch}.rope.scaling.type`, `None` where absent or `none`. A factor
/// other than 1 with no type is refused: llama.cpp would take it as linear
/// scaling, and graphc does not guess (every family that reads the factor
/// goes through here).
pub(crate) fn scaling_type<'g>(g: &'g GgufFile, arch: &str) -> Result<Option<&'g str>, Diagnostic> {
    let k = |s: &str| format!("{arch}.rope.scaling.{s}");
    match g.get(&k("type")).map(|v| v.as_str()) {
        None if g.get(&k("factor")).and_then(|v| v.as_f64()).is_some_and(|f| f != 1.0) => {
            Err(Diagnostic::new(&g.path, format!("`{}` is set but `{}` is not", k("factor"), k("type")))
                .note("llama.cpp would take a bare factor as linear scaling; graphc does not guess"))
        }
        None | Some(Some("none")) => Ok(None),
        Some(Some(kind)) => Ok(Some(kind)),
        Some(None) => Err(Diagnostic::new(&g.path, format!("`{}` is not a string", k("type")))),
    }
}

/// YaRN as llama.cpp's converter writes it (`rope.scaling.type = yarn`):
/// `.factor`, `.original_context_length`, and where written
/// `.yarn_beta_fast/slow` (else transformers' 32 and 1); the attention
/// factor is `.yarn_attn_factor` where written (the converter writes
/// transformers' `attention_factor` there, OLMo 3's for one), else the one
/// transformers derives from the factor (`0.1 ln(factor) + 1`).
pub(crate) fn yarn_scaling(g: &GgufFile, arch: &str) -> Result<graphc_ir::RopeScaling, Diagnostic> {
    let k = |s: &str| format!("{arch}.rope.scaling.{s}");
    let factor = g.float(&k("factor"))?;
    let original = g.uint(&k("original_context_length"))?;
    if !(factor.is_finite() && factor > 0.0) || original == 0 {
        return Err(Diagnostic::new(
            &g.path,
            format!("`{}` = {factor} and `{}` = {original}: not a YaRN scaling", k("factor"), k("original_context_length")),
        ));
    }
    Ok(graphc_ir::RopeScaling::Yarn {
        factor: factor as f32,
        original_context: original as usize,
        beta_fast: g.float_or(&k("yarn_beta_fast"), 32.0)? as f32,
        beta_slow: g.float_or(&k("yarn_beta_slow"), 1.0)? as f32,
        attention_factor: g.float_or(&k("yarn_attn_factor"), crate::families::hf::yarn_mscale(factor, 1.0))? as f32,
        truncate: true,
    })
}

/// An f32 tensor's values (LongRoPE's factors).
pub(crate) fn f32_values(g: &GgufFile, t: &TensorInfo) -> Result<Vec<f32>, Diagnostic> {
    if t.dtype != graphc_ir::DType::F32 {
        return Err(Diagnostic::new(&g.path, format!("tensor `{}` is {}, expected f32", t.name, t.dtype)));
    }
    Ok(g.tensor_bytes(t).chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

/// The HF name of a per-layer GGUF tensor `blk.N.{part}.{weight|bias}`.
fn layer_name(arch: &str, part: &str) -> Option<&'static str> {
    Some(match (arch, part) {
        ("qwen3next" | "qwen35" | "qwen35moe", "attn_qkv") => "linear_attn.in_proj_qkv",
        ("qwen3next" | "qwen35" | "qwen35moe", "attn_gate") => "linear_attn.in_proj_z",
        ("qwen3next", "ssm_ba") => "linear_attn.in_proj_ba",
        ("qwen35" | "qwen35moe", "ssm_beta") => "linear_attn.in_proj_b",
        ("qwen35" | "qwen35moe", "ssm_alpha") => "linear_attn.in_proj_a",
        ("qwen3next" | "qwen35" | "qwen35moe", "ssm_conv1d") => "linear_attn.conv1d",
        ("qwen3next" | "qwen35" | "qwen35moe", "ssm_dt") => "linear_attn.dt",
        ("qwen3next" | "qwen35" | "qwen35moe", "ssm_a") => "linear_attn.A",
        ("qwen3next" | "qwen35" | "qwen35moe", "ssm_norm") => "linear_attn.norm",
        ("qwen3next" | "qwen35" | "qwen35moe", "ssm_out") => "linear_attn.out_proj",
        ("qwen3next" | "qwen35" | "qwen35moe", "post_attention_norm") => "post_attention_layernorm",
        ("qwen3next" | "qwen35moe" | "qwen2moe", "ffn_gate_inp_shexp") => "mlp.shared_expert_gate",
        ("qwen3next" | "qwen35moe" | "qwen2moe", "ffn_gate_shexp") => "mlp.shared_expert.gate_proj",
        ("qwen3next" | "qwen35moe" | "qwen2moe", "ffn_up_shexp") => "mlp.shared_expert.up_proj",
        ("qwen3next" | "qwen35moe" | "qwen2moe", "ffn_down_shexp") => "mlp.shared_expert.down_proj",
        ("qwen3moe" | "qwen3next" | "qwen35moe" | "qwen2moe", "ffn_gate_inp") => "mlp.gate",
        ("phimoe", "ffn_gate_inp") => "block_sparse_moe.gate",
        ("gpt-oss", "ffn_gate_inp") => "mlp.router",
        ("gpt-oss", "post_attention_norm") => "post_attention_layernorm",
        ("gpt-oss", "attn_sinks") => "self_attn.sinks",
        ("phi2", "attn_norm") => "input_layernorm",
        ("phi2", "attn_output") => "self_attn.dense",
        ("phi2", "ffn_up") => "mlp.fc1",
        ("phi2", "ffn_down") => "mlp.fc2",
        ("phi3", "ffn_up") => "mlp.gate_up_proj",
        ("phi3", "attn_qkv") => "self_attn.qkv_proj",
        ("glm4", "post_attention_norm") => "post_self_attn_layernorm",
        ("glm4", "ffn_up") => "mlp.gate_up_proj",
        ("glm4", "post_ffw_norm") => "post_mlp_layernorm",
        ("gemma2" | "gemma4", "ffn_norm") => "pre_feedforward_layernorm",
        ("gemma4", "inp_gate") => "per_layer_input_gate",
        ("gemma4", "proj") => "per_layer_projection",
        ("gemma4", "post_norm") => "post_per_layer_input_norm",
        ("gemma4", "layer_output_scale") => "layer_scalar",
        ("gemma4", "ffn_gate_inp") => "router.proj",
        ("lfm2", "shortconv.conv") => "conv.conv",
        ("lfm2", "shortconv.in_proj") => "conv.in_proj",
        ("lfm2", "shortconv.out_proj") => "conv.out_proj",
        ("lfm2", "attn_norm") => "operator_norm",
        ("lfm2", "ffn_norm") => "ffn_norm",
        ("lfm2", "ffn_gate") => "feed_forward.w1",
        ("lfm2", "ffn_up") => "feed_forward.w3",
        ("lfm2", "ffn_down") => "feed_forward.w2",
        ("lfm2", "attn_output") => "self_attn.out_proj",
        ("lfm2", "attn_q_norm") => "self_attn.q_layernorm",
        ("lfm2", "attn_k_norm") => "self_attn.k_layernorm",
        ("gemma4", "pre_ffw_norm_2") => "pre_feedforward_layernorm_2",
        ("gemma4", "post_ffw_norm_1") => "post_feedforward_layernorm_1",
        ("gemma4", "post_ffw_norm_2") => "post_feedforward_layernorm_2",
        ("gemma2" | "olmo2" | "gemma4", "post_attention_norm") => "post_attention_layernorm",
        ("gemma2" | "olmo2" | "gemma4", "post_ffw_norm") => "post_feedforward_layernorm",
        (_, "attn_norm") => "input_layernorm",
        (_, "ffn_norm") => "post_attention_layernorm",
        (_, "attn_q") => "self_attn.q_proj",
        (_, "attn_k") => "self_attn.k_proj",
        (_, "attn_v") => "self_attn.v_proj",
        (_, "attn_output") => "self_attn.o_proj",
        (_, "attn_q_norm") => "self_attn.q_norm",
        (_, "attn_k_norm") => "self_attn.k_norm",
        (_, "ffn_gate") => "mlp.gate_proj",
        (_, "ffn_up") => "mlp.up_proj",
        (_, "ffn_down") => "mlp.down_proj",
        _ => return None,
    })
}

/// Each tensor under its HF name, and the GGUF name of each; with `trunk`,
/// the blocks from it on (MTP's) left out, and how many tensors that was.
type Renamed = (Vec<TensorInfo>, std::collections::BTreeMap<String, String>, usize);
fn rename(g: &GgufFile, arch: &str, trunk: Option<u64>) -> Result<Renamed, Diagnostic> {
    let mut out = Vec::new();
    let mut mtp = 0;
    for t in &g.tensors {
        let named = |name: String| TensorInfo { name, ..t.clone() };
        match t.name.as_str() {
            "token_embd.weight" => out.push(named("model.embed_tokens.weight".into())),
            "output.weight" => out.push(named("lm_head.weight".into())),
            "output.bias" => out.push(named("lm_head.bias".into())),
            "output_norm.bias" if arch == "phimoe" => out.push(named("model.norm.bias".into())),
            "output_norm.weight" if arch == "phi2" => out.push(named("model.final_layernorm.weight".into())),
            "output_norm.bias" if arch == "phi2" => out.push(named("model.final_layernorm.bias".into())),
            "output_norm.weight" => out.push(named("model.norm.weight".into())),
            "rope_factors_long.weight" | "rope_factors_short.weight" => {} // read into the config
            "rope_freqs.weight" if arch == "gemma4" => {}                  // read into the config
            "token_embd_norm.weight" if arch == "lfm2" => out.push(named("model.embedding_norm.weight".into())),
            "per_layer_token_embd.weight" => out.push(named("model.embed_tokens_per_layer.weight".into())),
            "per_layer_model_proj.weight" => out.push(named("model.per_layer_model_projection.weight".into())),
            "per_layer_proj_norm.weight" => out.push(named("model.per_layer_projection_norm.weight".into())),
            name => {
                let unknown = || Diagnostic::new(&g.path, format!("tensor `{name}` has no place in a {arch} model"));
                let rest = name.strip_prefix("blk.").ok_or_else(unknown)?;
                let (layer, rest) = rest.split_once('.').ok_or_else(unknown)?;
                if trunk.is_some_and(|t| layer.parse::<u64>().is_ok_and(|l| l >= t)) {
                    mtp += 1;
                    continue;
                }
                // `ssm_a` has no `.weight` (llama.cpp writes it bare).
                let (part, kind) = rest.rsplit_once('.').unwrap_or((rest, ""));
                if (arch, part, kind) == ("gemma4", "ffn_down_exps", "scale") {
                    // Gemma 4's per-expert scale (the converter moves the router's here).
                    out.push(named(format!("model.layers.{layer}.router.per_expert_scale")));
                    continue;
                }
                if (arch, part) == ("gemma4", "ffn_gate_up_exps") {
                    // [experts, 2·ffn, d]: each expert's gate rows, then its up rows.
                    for (e, halves) in crate::expert_slices::gate_up_halves(&g.path, t)?.into_iter().enumerate() {
                        for (half, proj) in halves.into_iter().zip(["gate_proj", "up_proj"]) {
                            out.push(TensorInfo { name: format!("model.layers.{layer}.experts.{e}.{proj}.{kind}"), ..half });
                        }
                    }
                    continue;
                }
                if let Some(which) = part.strip_suffix("_exps") {
                    // [experts, rows, cols] stacked: one slice per expert.
                    let (block, proj) = match (arch, which) {
                        // Gemma 4's experts sit beside its dense MLP, not in it.
                        ("gemma4", "ffn_gate") => ("", "gate_proj"),
                        ("gemma4", "ffn_up") => ("", "up_proj"),
                        ("gemma4", "ffn_down") => ("", "down_proj"),
                        ("phimoe", "ffn_gate") => ("block_sparse_moe", "w1"),
                        ("phimoe", "ffn_up") => ("block_sparse_moe", "w3"),
                        ("phimoe", "ffn_down") => ("block_sparse_moe", "w2"),
                        (_, "ffn_gate") => ("mlp", "gate_proj"),
                        (_, "ffn_up") => ("mlp", "up_proj"),
                        (_, "ffn_down") => ("mlp", "down_proj"),
                        _ => return Err(unknown()),
                    };
                    // A stacked bias ([experts, rows], gpt-oss) one row per expert.
                    let slices = if kind == "bias" {
                        crate::expert_slices::expert_rows(&g.path, t)?
                    } else {
                        crate::expert_slices::expert_slices(&g.path, t)?
                    };
                    for (e, slice) in slices.into_iter().enumerate() {
                        let block = if block.is_empty() { String::new() } else { format!("{block}.") };
                        out.push(TensorInfo { name: format!("model.layers.{layer}.{block}experts.{e}.{proj}.{kind}"), ..slice });
                    }
                    continue;
                }
                let hf = layer_name(arch, part).ok_or_else(unknown)?;
                out.push(named(match (part, kind) {
                    ("ssm_dt", "bias") => format!("model.layers.{layer}.linear_attn.dt_bias"),
                    // HF's sinks are a bare parameter; the converter adds `.weight`.
                    ("attn_sinks", "weight") => format!("model.layers.{layer}.{hf}"),
                    // So is Gemma 4's layer scalar (a buffer).
                    ("layer_output_scale", "weight") => format!("model.layers.{layer}.{hf}"),
                    // Gemma 4's router: its weight and its scale vector.
                    ("ffn_gate_inp", "scale") if arch == "gemma4" => format!("model.layers.{layer}.router.scale"),
                    (_, "") => format!("model.layers.{layer}.{hf}"),
                    _ => format!("model.layers.{layer}.{hf}.{kind}"),
                }));
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    // Each renamed tensor (or expert slice) lies in one GGUF tensor.
    let file_names = out
        .iter()
        .filter_map(|o| {
            let t = g.tensors.iter().find(|t| o.offset >= t.offset && o.offset < t.offset + t.bytes.max(1))?;
            (t.name != o.name).then(|| (o.name.clone(), t.name.clone()))
        })
        .collect();
    Ok((out, file_names, mtp))
}
