//! What the safetensors families read alike from a Hugging Face
//! `config.json`: the model's dimensions (every one required, a missing key
//! named, never a default), the RoPE base and partial-rotary factor under
//! both transformers 4 and 5 spellings, and tied output.

use crate::error::Diagnostic;
use crate::safetensors::SafetensorsFile;

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
    /// `hidden_size / num_attention_heads` (phi2, phi3).
    HiddenOverHeads,
}

impl HfDims {
    /// Read and check the dimensions. `num_key_value_heads` absent or null
    /// means one per attention head only when `kv_default_heads` (as HF's
    /// phi config says); otherwise it is required.
    pub fn read(st: &SafetensorsFile, head_dim: HeadDim, kv_default_heads: bool) -> Result<HfDims, Diagnostic> {
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
            HeadDim::Key => u("head_dim")?,
            HeadDim::HiddenOverHeads if d.is_multiple_of(n_heads) => d / n_heads,
            HeadDim::HiddenOverHeads => return err(format!("hidden_size {d} is not a multiple of {n_heads} heads")),
        };
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return err(format!("head_dim {head_dim} is not a positive even number (RoPE rotates pairs)"));
        }
        // Shapes are products of these: refuse what would overflow them.
        let widest = n_heads.checked_mul(head_dim).and_then(|q| q.checked_mul(d.max(1)));
        let ffn = u("intermediate_size")?;
        if widest.is_none() || ffn.checked_mul(2).and_then(|f| f.checked_mul(d.max(1))).is_none() {
            return err(format!("dimensions too large: hidden {d}, {n_heads} heads of {head_dim}, intermediate {ffn}"));
        }
        Ok(HfDims { d, n_layers, n_heads, n_kv_heads, head_dim, ffn, vocab: u("vocab_size")?, context: u("max_position_embeddings")? })
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
            scale: 1.0 / (self.head_dim as f32).sqrt(),
            window: None,
            softcap: None,
            biases: false,
            output_gate: false,
            qk_norm_one_plus: false,
        }
    }
}

/// Whether the output matrix is the embedding (`tie_word_embeddings`;
/// `false` when absent, as in transformers' configs of these families).
pub fn tied(st: &SafetensorsFile) -> bool {
    st.config.get("tie_word_embeddings").and_then(|v| v.as_bool()).unwrap_or(false)
}

/// The RoPE base: top-level `rope_theta` (transformers 4) or
/// `rope_parameters.rope_theta` (transformers 5), whose `rope_type` must be
/// `default` (scaled RoPE variants are not lowered yet).
pub fn rope_theta(st: &SafetensorsFile) -> Result<f32, Diagnostic> {
    if let Some(t) = st.config.get("rope_theta").and_then(|v| v.as_f64()) {
        return Ok(t as f32);
    }
    let Some(params) = st.config.get("rope_parameters") else {
        return Err(Diagnostic::new(&st.config_path, "missing key `rope_theta` (or `rope_parameters.rope_theta`)"));
    };
    let kind = params.get("rope_type").and_then(|v| v.as_str()).unwrap_or("default");
    if kind != "default" {
        return Err(Diagnostic::new(&st.config_path, format!("`rope_parameters.rope_type` is `{kind}`; graphc lowers only `default` RoPE here")));
    }
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
