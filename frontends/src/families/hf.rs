//! What the safetensors families read alike from a Hugging Face
//! `config.json`: the model's dimensions (every one required, a missing key
//! named, never a default), the RoPE base and partial-rotary factor under
//! both transformers 4 and 5 spellings, and tied output.

use crate::error::Diagnostic;
use crate::safetensors::SafetensorsFile;
use graphc_ir::RopeScaling;

/// The dimensions every decoder family has.
#[derive(Clone, Copy, Debug)]
pub struct HfDims {
    pub d: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    /// `max_position_embeddings`.
    pub context: usize,
}

/// Where a family's head size comes from.
#[derive(Clone, Copy, PartialEq)]
pub enum HeadDim {
    /// The `head_dim` key (qwen3, gemma, gemma2).
    Key,
    /// `hidden_size / num_attention_heads` (phi2, phi3, qwen2).
    HiddenOverHeads,
    /// The `head_dim` key where the config has one (not null), else
    /// `hidden_size / num_attention_heads` (llama, mistral).
    KeyOrHiddenOverHeads,
}

impl HfDims {
    /// Read and check the dimensions. `num_key_value_heads` absent or null
    /// means one per attention head only when `kv_default_heads` (as HF's
    /// phi config says); otherwise it is required.
    pub fn read(st: &SafetensorsFile, head_dim: HeadDim, kv_default_heads: bool) -> Result<HfDims, Diagnostic> {
        Self::read_with_ffn(st, head_dim, kv_default_heads, "intermediate_size")
    }

    /// As `read`, the MLP's size from `ffn_key` (`moe_intermediate_size`
    /// where every MLP is routed and the config has no dense size).
    pub fn read_with_ffn(st: &SafetensorsFile, head_dim: HeadDim, kv_default_heads: bool, ffn_key: &str) -> Result<HfDims, Diagnostic> {
        let u = |k: &str| st.config_uint(k);
        let (d, n_layers, n_heads) = (u("hidden_size")?, u("num_hidden_layers")?, u("num_attention_heads")?);
        let n_kv_heads = match st.config.get("num_key_value_heads") {
            None | Some(serde_json::Value::Null) if kv_default_heads => n_heads,
            _ => u("num_key_value_heads")?,
        };
        let err = |m: String| Err(Diagnostic::new(&st.config_path, m));
        if n_heads == 0 || n_kv_heads == 0 || !n_heads.is_multiple_of(n_kv_heads) {
            return err(format!("{n_heads} attention heads are not a multiple of {n_kv_heads} kv heads"));
        }
        let head_dim = match head_dim {
            HeadDim::KeyOrHiddenOverHeads if st.config.get("head_dim").is_some_and(|v| !v.is_null()) => u("head_dim")?,
            HeadDim::Key => u("head_dim")?,
            HeadDim::KeyOrHiddenOverHeads | HeadDim::HiddenOverHeads if d.is_multiple_of(n_heads) => d / n_heads,
            HeadDim::KeyOrHiddenOverHeads | HeadDim::HiddenOverHeads => return err(format!("hidden_size {d} is not a multiple of {n_heads} heads")),
        };
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return err(format!("head_dim {head_dim} is not a positive even number (RoPE rotates pairs)"));
        }
        // Shapes are products of these: refuse what would overflow them.
        let widest = n_heads.checked_mul(head_dim).and_then(|q| q.checked_mul(d.max(1)));
        let ffn = u(ffn_key)?;
        if widest.is_none() || ffn.checked_mul(2).and_then(|f| f.checked_mul(d.max(1))).is_none() {
            return err(format!("dimensions too large: hidden {d}, {n_heads} heads of {head_dim}, intermediate {ffn}"));
        }
        let context = u("max_position_embeddings")?;
        if context == 0 {
            return err("`max_position_embeddings` is 0: no plan could run a single token".into());
        }
        Ok(HfDims { d, n_layers, n_heads, n_kv_heads, head_dim, ffn, vocab: u("vocab_size")?, context })
    }
}

impl HfDims {
    /// The facts a plan records of these dimensions.
    pub fn facts(&self) -> Vec<(&'static str, String)> {
        vec![
            ("layers", self.n_layers.to_string()),
            ("hidden", self.d.to_string()),
            ("n_heads", self.n_heads.to_string()),
            ("n_kv_heads", self.n_kv_heads.to_string()),
            ("head_dim", self.head_dim.to_string()),
        ]
    }

    /// Plain causal attention of these dimensions: scale `1/sqrt(head_dim)`,
    /// no window, no soft-cap, no biases (families change what differs).
    pub fn attention(&self, norm: graphc_ir::Op, rope: graphc_ir::Op) -> super::AttentionCfg {
        super::AttentionCfg {
            d: self.d,
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            norm,
            rope,
            no_rope: false,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
            window: None,
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
        }
    }
}

/// Whether the output matrix is the embedding (`tie_word_embeddings`;
/// `false` when absent, as in transformers' configs of these families).
pub fn tied(st: &SafetensorsFile) -> bool {
    st.config.get("tie_word_embeddings").and_then(|v| v.as_bool()).unwrap_or(false)
}

/// The RoPE base: top-level `rope_theta` (transformers 4) or
/// `rope_parameters.rope_theta` (transformers 5). Its scaling is read by
/// `rope_scaling`; a family that does not read it refuses a scaled config
/// through `check_config_keys`.
pub fn rope_theta(st: &SafetensorsFile) -> Result<f32, Diagnostic> {
    if let Some(t) = st.config.get("rope_theta").and_then(|v| v.as_f64()) {
        return Ok(t as f32);
    }
    let Some(params) = st.config.get("rope_parameters") else {
        return Err(Diagnostic::new(&st.config_path, "missing key `rope_theta` (or `rope_parameters.rope_theta`)"));
    };
    params
        .get("rope_theta")
        .and_then(|v| v.as_f64())
        .map(|t| t as f32)
        .ok_or_else(|| Diagnostic::new(&st.config_path, "`rope_parameters.rope_theta` is missing or not a number"))
}

/// Rotary features per head: `partial_rotary_factor` (top level, or in
/// `rope_parameters` as transformers 5 writes it) of `head_dim`; when the
/// config has no factor, `default` (phi2 requires one: `None`).
pub fn rotary_dim(st: &SafetensorsFile, head_dim: usize, default: Option<f64>) -> Result<usize, Diagnostic> {
    let v = st.config.get("partial_rotary_factor").or_else(|| st.config.get("rope_parameters").and_then(|p| p.get("partial_rotary_factor")));
    let factor = match (v, default) {
        (Some(v), _) => v.as_f64().ok_or_else(|| Diagnostic::new(&st.config_path, "`partial_rotary_factor` is not a number"))?,
        (None, Some(f)) => f,
        (None, None) => {
            return Err(Diagnostic::new(&st.config_path, "missing key `partial_rotary_factor` (or `rope_parameters.partial_rotary_factor`)"))
        }
    };
    let rotary = (head_dim as f64 * factor) as usize;
    if rotary == 0 || rotary > head_dim || !rotary.is_multiple_of(2) {
        return Err(Diagnostic::new(
            &st.config_path,
            format!("partial_rotary_factor {factor} of head_dim {head_dim} gives {rotary} rotary features, not an even number in 2..={head_dim}"),
        ));
    }
    Ok(rotary)
}

/// A config's `sliding_window` (Mistral's, Phi-3's): each token attends
/// to itself and the `window - 1` before it. Absent or null is none, and so
/// is a window as long as the context (it slides nothing); 0 is refused.
pub fn sliding_window(st: &SafetensorsFile, context: usize) -> Result<Option<usize>, Diagnostic> {
    match st.config.get("sliding_window") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(_) => match st.config_uint("sliding_window")? {
            0 => Err(Diagnostic::new(&st.config_path, "`sliding_window` is 0")),
            w if w >= context => Ok(None),
            w => Ok(Some(w)),
        },
    }
}

/// The RoPE scaling of a config: `rope_scaling` (transformers 4) or
/// `rope_parameters` (transformers 5), by its `rope_type` (or `type`):
/// absent, null or `default` is none; `linear`, `llama3` and `yarn` are lowered
/// (`family` names the caller in the error); any other type is refused,
/// naming it, as is a known type with a key graphc does not read.
pub fn rope_scaling(st: &SafetensorsFile, family: &str) -> Result<RopeScaling, Diagnostic> {
    let (key, params) = match (st.config.get("rope_scaling"), st.config.get("rope_parameters")) {
        (Some(v), _) if !v.is_null() => ("rope_scaling", v),
        (_, Some(v)) if !v.is_null() => ("rope_parameters", v),
        _ => return Ok(RopeScaling::None),
    };
    rope_scaling_of(st, key, params, family)
}

/// The RoPE scaling the object `params` (at config key `key`: one layer
/// kind's `rope_parameters.full_attention`, say) gives, as `rope_scaling` reads it.
pub fn rope_scaling_of(st: &SafetensorsFile, key: &str, params: &serde_json::Value, family: &str) -> Result<RopeScaling, Diagnostic> {
    let err = |m: String| Diagnostic::new(&st.config_path, m);
    let kind = params.get("rope_type").or_else(|| params.get("type")).and_then(|v| v.as_str()).unwrap_or("default");
    let num = |k: &str| -> Result<f64, Diagnostic> {
        params.get(k).and_then(|v| v.as_f64()).ok_or_else(|| err(format!("`{key}.{k}` is missing or not a number (rope_type `{kind}`)")))
    };
    // The keys each type reads; any other key of the object is refused.
    let (scaling, reads): (RopeScaling, &[&str]) = match kind {
        "default" => (RopeScaling::None, &[]),
        "linear" => (RopeScaling::Linear { factor: num("factor")? as f32 }, &["factor"]),
        "llama3" => {
            let original = num("original_max_position_embeddings")?;
            if original < 1.0 || original.fract() != 0.0 {
                return Err(err(format!("`{key}.original_max_position_embeddings` = {original} is not a positive whole number")));
            }
            let scaling = RopeScaling::Llama3 {
                factor: num("factor")? as f32,
                low_freq_factor: num("low_freq_factor")? as f32,
                high_freq_factor: num("high_freq_factor")? as f32,
                original_context: original as usize,
            };
            (scaling, &["factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"])
        }
        "yarn" => {
            // As transformers: the pretraining length from the parameters,
            // else the config's, else its `max_position_embeddings`.
            let original = match params.get("original_max_position_embeddings") {
                Some(_) => num("original_max_position_embeddings")?,
                None => ["original_max_position_embeddings", "max_position_embeddings"]
                    .iter()
                    .find_map(|k| st.config.get(*k).and_then(|v| v.as_f64()))
                    .ok_or_else(|| err(format!("`{key}.original_max_position_embeddings` is missing (rope_type `yarn`)")))?,
            };
            if original < 1.0 || original.fract() != 0.0 {
                return Err(err(format!("`{key}.original_max_position_embeddings` = {original} is not a positive whole number")));
            }
            let factor = num("factor")?;
            let or = |k: &str, default: f64| params.get(k).map_or(Ok(default), |_| num(k));
            // When not given, the attention factor is the ratio of `yarn_mscale`
            // for `mscale` over `mscale_all_dim` where both are set (and not 0),
            // else its value for 1.
            let default_attention = match (or("mscale", 0.0)?, or("mscale_all_dim", 0.0)?) {
                (m, all) if m != 0.0 && all != 0.0 => yarn_mscale(factor, m) / yarn_mscale(factor, all),
                _ => yarn_mscale(factor, 1.0),
            };
            let truncate = match params.get("truncate") {
                None => true,
                Some(v) => v.as_bool().ok_or_else(|| err(format!("`{key}.truncate` is not a boolean")))?,
            };
            let scaling = RopeScaling::Yarn {
                factor: factor as f32,
                original_context: original as usize,
                beta_fast: or("beta_fast", 32.0)? as f32,
                beta_slow: or("beta_slow", 1.0)? as f32,
                attention_factor: or("attention_factor", default_attention)? as f32,
                truncate,
            };
            (
                scaling,
                &["factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "truncate", "mscale", "mscale_all_dim"],
            )
        }
        other => {
            return Err(err(format!("`{key}.rope_type` = `{other}` is not implemented for the {family} family"))
                .note("graphc lowers RoPE scaling types `default`, `linear`, `llama3` and `yarn` here"))
        }
    };
    if let Some(obj) = params.as_object() {
        let known = ["rope_type", "type", "rope_theta", "partial_rotary_factor"];
        if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str()) && !reads.contains(&k.as_str())) {
            return Err(err(format!("`{key}.{k}` is not read for rope_type `{kind}` (the {family} family): graphc would ignore it")));
        }
    }
    Ok(scaling)
}

/// transformers' `yarn_get_mscale(factor, mscale)`: `0.1 · mscale · ln(factor) + 1`,
/// 1 where the factor does not stretch.
pub fn yarn_mscale(factor: f64, mscale: f64) -> f64 {
    if factor <= 1.0 {
        1.0
    } else {
        0.1 * mscale * factor.ln() + 1.0
    }
}

/// A boolean config key (`attention_bias`, `mlp_bias`): absent or null is false.
pub fn config_flag(st: &SafetensorsFile, key: &str) -> Result<bool, Diagnostic> {
    match st.config.get(key) {
        None | Some(serde_json::Value::Null) => Ok(false),
        Some(v) => v.as_bool().ok_or_else(|| Diagnostic::new(&st.config_path, format!("`{key}` is not a boolean"))),
    }
}

/// The MLP activation must be `want` (the SwiGLU families: `silu`): the
/// `hidden_act` key, absent meaning transformers' default for the family.
pub fn require_act(st: &SafetensorsFile, family: &str, want: &str) -> Result<(), Diagnostic> {
    use serde_json::Value;
    match st.config.get("hidden_act") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(a)) if a == want => Ok(()),
        Some(Value::String(other)) => {
            Err(Diagnostic::new(&st.config_path, format!("`hidden_act` = `{other}` is not implemented for the {family} family"))
                .note(format!("its MLP is lowered with `{want}`")))
        }
        Some(_) => Err(Diagnostic::new(&st.config_path, "`hidden_act` is not a string")),
    }
}
