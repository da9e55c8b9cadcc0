//! Qwen2 and Qwen2.5 (incl. Qwen2.5-Coder; `config.json` `model_type =
//! "qwen2"`, GGUF `general.architecture = "qwen2"` through the HF view),
//! lowered with Hugging Face tensor names.
//!
//! Per layer (HF `Qwen2DecoderLayer`): `x + attn(input_layernorm(x))`, then
//! `x + mlp(post_attention_layernorm(x))`, every norm RMS. Attention: Q, K
//! and V projections with biases, the output projection without; NeoX RoPE
//! (HF `rotate_half`; llama.cpp's converter does not permute Qwen2's rows),
//! GQA, scale `1/sqrt(head_dim)`, no q/k norm. The MLP is SwiGLU.
//!
//! config.json keys: the dimensions (`hidden_size`, `num_hidden_layers`,
//! `num_attention_heads`, `num_key_value_heads`, `intermediate_size`,
//! `vocab_size`, `max_position_embeddings`; `head_dim` or hidden / heads),
//! `rms_norm_eps`, the RoPE base and scaling (`default` or `linear`; YaRN is
//! refused), `tie_word_embeddings`, `hidden_act` (`silu`), and
//! `use_sliding_window` (must be false; `sliding_window` and
//! `max_window_layers` only matter when it is true).

use super::hf::{require_act, rope_scaling, rope_theta, HeadDim, HfDims};
use super::qwen3::{dense_mlp, lower_decoder, Decoder};
use crate::error::Diagnostic;
use crate::families::llama::Lowered;
use crate::safetensors::SafetensorsFile;

pub const MODEL_TYPE: &str = "qwen2";

/// The math-relevant `config.json` keys this family reads.
pub const CONFIG_READS: &[&str] = &["rope_scaling", "rope_parameters", "hidden_act", "use_sliding_window", "sliding_window", "max_window_layers"];

pub fn lower(st: &SafetensorsFile) -> Result<Lowered, Diagnostic> {
    let dims = HfDims::read(st, HeadDim::KeyOrHiddenOverHeads, false)?;
    require_act(st, "qwen2", "silu")?;
    if st.config.get("use_sliding_window").and_then(|v| v.as_bool()) == Some(true) {
        return Err(Diagnostic::new(&st.config_path, "`use_sliding_window` is true: Qwen2's sliding-window layers are not lowered yet")
            .note("the released Qwen2 / Qwen2.5 checkpoints have it false"));
    }
    let decoder = Decoder { qkv_bias: true, scaling: rope_scaling(st, "qwen2")?, ..Decoder::plain(rope_theta(st)?) };
    lower_decoder(st, MODEL_TYPE, dims, &decoder, &mut |b, l, h| dense_mlp(b, &dims, l, h), vec![("biases", "q, k, v".into())])
}
