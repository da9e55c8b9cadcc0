//! graphc's frontends: checkpoint readers (GGUF and safetensors + config.json,
//! both over mmap), the tokenizer rebuilt from checkpoint metadata, and one
//! lowering per model family.

// `unsafe` only in the modules that allow it by name, each block with a
// `// SAFETY:` comment (clippy checks).
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[allow(unsafe_code)] // the mmap
pub mod bytes;
pub mod chat;
pub mod detokenize;
pub mod eog;
pub mod error;
pub mod expert_slices;
pub mod families;
pub mod gguf;
pub mod gguf_hf;
pub mod harmony;
pub mod hf_json;
pub mod mtp;
pub mod multimodal;
pub mod pretokenize;
pub mod pyjson;
pub mod reasoning;
pub mod rules;
pub mod safetensors;
pub mod spm;
pub mod tokenizer;
pub mod tool_calls;

pub use error::Diagnostic;
pub use families::llama::Lowered;
pub use gguf::{GgufFile, TensorInfo};
pub use safetensors::SafetensorsFile;
pub use tokenizer::Tokenizer;

use families::registry;
use std::path::Path;

/// A checkpoint file's tensors, whatever its format.
pub trait TensorSource {
    /// The file, for diagnostics.
    fn path(&self) -> &str;
    fn tensor(&self, name: &str) -> Option<&TensorInfo>;
    /// Every tensor.
    fn tensors(&self) -> &[TensorInfo];
    /// The name `name` has in the file (it differs for a GGUF read
    /// through HF names), for diagnostics.
    fn file_name<'a>(&'a self, name: &'a str) -> &'a str {
        name
    }
}

impl TensorSource for GgufFile {
    fn path(&self) -> &str {
        &self.path
    }
    fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        GgufFile::tensor(self, name)
    }
    fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
    fn file_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.slice_of.get(name).map_or(name, |n| n.as_str())
    }
}

impl TensorSource for SafetensorsFile {
    fn path(&self) -> &str {
        &self.path
    }
    fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        SafetensorsFile::tensor(self, name)
    }
    fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
    fn file_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.file_names.get(name).map_or(name, |n| n.as_str())
    }
}

/// The file a checkpoint was read from.
pub enum Format {
    Gguf(GgufFile),
    Safetensors(SafetensorsFile),
}

/// An opened checkpoint: its tensors (mapped, not copied), its tokenizer
/// when it carries one, and its family.
pub struct Checkpoint {
    pub format: Format,
    pub tokenizer: Option<Tokenizer>,
    pub family: String,
}

/// Every GGUF architecture graphc reads (`families::registry`; the
/// Qwen-VL text models, `multimodal`).
pub fn gguf_architectures() -> Vec<&'static str> {
    registry::gguf_architectures().into_iter().chain(multimodal::gguf_architectures()).collect()
}

impl Checkpoint {
    /// A GGUF file (by its magic), or a safetensors file, sharded
    /// checkpoint's index or folder with its `config.json`.
    pub fn open(path: &Path) -> Result<Checkpoint, Diagnostic> {
        let mut magic = [0u8; 4];
        let is_gguf = std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic)).is_ok_and(|_| &magic == b"GGUF");
        if is_gguf || !safetensors::is_safetensors_path(path) {
            Checkpoint::from_gguf(GgufFile::open(path)?)
        } else {
            Checkpoint::from_safetensors(SafetensorsFile::open(path)?)
        }
    }

    /// A GGUF already read: its architecture checked, its tokenizer built.
    pub fn from_gguf(mut gguf: GgufFile) -> Result<Checkpoint, Diagnostic> {
        let arch = gguf.str("general.architecture")?.to_string();
        if !gguf_architectures().contains(&arch.as_str()) {
            return Err(Diagnostic::new(&gguf.path, format!("GGUF architecture `{arch}` is not supported"))
                .note(format!("graphc lowers the GGUF architectures {}", gguf_architectures().join(", "))));
        }
        rules::check_gguf_keys(&gguf, &arch)?;
        let family_arch = multimodal::gguf_text_arch(&arch).unwrap_or(&arch);
        if let Some(model_type) = registry::by_gguf_arch(family_arch).and_then(|f| f.model_type) {
            // A family lowered from HF names: the GGUF seen through them.
            let tokenizer = match gguf.get("tokenizer.ggml.model") {
                Some(_) => Some(Tokenizer::from_gguf(&gguf)?),
                None => None,
            };
            let view = gguf_hf::hf_view(gguf)?;
            // The view may name another family its file's architecture holds (OLMo 3 in `olmo2`).
            let family = view.config.get("model_type").and_then(|m| m.as_str()).unwrap_or(model_type).to_string();
            return Ok(Checkpoint { format: Format::Safetensors(view), tokenizer, family });
        }
        if matches!(arch.as_str(), "llama" | "granitemoe") {
            // Mixtral's (and GraniteMoE's) experts, stacked or not, under one set of names.
            gguf.split_stacked_experts()?;
        }
        // A GGUF without a vocabulary (the parity fixtures) runs from token ids.
        let mut tokenizer = match (arch.as_str(), gguf.get("tokenizer.ggml.model")) {
            ("llama" | "smollm3" | "granite" | "granitemoe" | "mistral3", None) => None,
            _ => Some(Tokenizer::from_gguf(&gguf)?),
        };
        if let Some(t) = tokenizer.as_mut().filter(|t| arch == "gemma3" && t.chat_template.is_none()) {
            // The GGUF has no chat template: Gemma's own turn format
            // (llama.cpp's built-in `gemma` template); the BOS comes
            // from the tokenizer.
            t.chat_fallback = Some((families::gemma3::TURN_FORMAT.to_string(), "gemma3's turn format"));
        }
        Ok(Checkpoint { format: Format::Gguf(gguf), tokenizer, family: arch })
    }

    /// A safetensors file already read: its `model_type` checked (a
    /// multimodal checkpoint read as its language model: `multimodal`).
    pub fn from_safetensors(mut st: SafetensorsFile) -> Result<Checkpoint, Diagnostic> {
        let mut model_type =
            st.config_value("model_type")?.as_str().ok_or_else(|| Diagnostic::new(&st.config_path, "key `model_type` is not a string"))?.to_string();
        // The folder's own tokenizer, where it carries one.
        let dir = Path::new(&st.config_path).parent().unwrap_or(Path::new(".")).to_path_buf();
        if multimodal::is_multimodal(&model_type) {
            st = multimodal::language_model_view(st, &model_type)?;
            // The view names the family it chose (mistral3: Mistral's or Ministral 3's).
            model_type = st.config_value("model_type")?.as_str().unwrap_or_default().to_string();
        } else {
            let (view, family) = multimodal::text_checkpoint_view(st, &model_type)?;
            st = view;
            if let Some(family) = family {
                model_type = family.to_string();
            }
        }
        if mtp::FAMILIES.contains(&model_type.as_str()) {
            st = mtp::leave_out(st);
        }
        if model_type == families::gemma4::MODEL_TYPE {
            st = families::gemma4::split_experts(st)?;
        }
        if registry::by_model_type(&model_type).is_none() {
            return Err(Diagnostic::new(&st.config_path, format!("model_type `{model_type}` is not supported")).note(format!(
                "graphc lowers from safetensors the model types {}; and, as their language model, {}",
                registry::model_types().join(", "),
                multimodal::model_types().collect::<Vec<_>>().join(", ")
            )));
        }
        let tokenizer = hf_json::from_dir(&dir)?;
        Ok(Checkpoint { format: Format::Safetensors(st), tokenizer, family: model_type })
    }

    /// The family's graph (unverified), weight manifest and model facts,
    /// for the checkpoint's own context length.
    pub fn lower(&self) -> Result<Lowered, Diagnostic> {
        self.lower_for(None)
    }

    /// As `lower`, for a session limit of `max_seq` tokens where the user
    /// set one: the few families whose graph depends on it (Phi-3's
    /// LongRoPE picks its short or long factors by it) read it here.
    pub fn lower_for(&self, max_seq: Option<usize>) -> Result<Lowered, Diagnostic> {
        if let Format::Safetensors(st) = &self.format {
            rules::check_config_keys(st, &self.family)?;
        }
        let family = match &self.format {
            Format::Gguf(_) => registry::by_gguf_arch(&self.family),
            Format::Safetensors(_) => registry::by_model_type(&self.family),
        };
        let mut lowered = match (family.map(|f| &f.lower), &self.format) {
            (Some(registry::Lower::Gguf(lower)), Format::Gguf(g)) => lower(g)?,
            (Some(registry::Lower::Hf(lower)), Format::Safetensors(st)) => lower(st, &self.family, max_seq)?,
            _ => unreachable!("family {} was accepted by open()", self.family),
        };
        rules::check_tensors_used(self.source(), &lowered, &self.family)?;
        if let Format::Safetensors(st) = &self.format {
            lowered.meta.facts.extend(multimodal::facts(&st.config));
            lowered.meta.facts.extend(mtp::fact(&st.config));
        }
        if let Some(t) = &self.tokenizer {
            lowered.meta.bos_id = t.bos_id;
            lowered.meta.add_bos = t.add_bos;
            lowered.meta.stop_ids = t.eog_ids.clone();
        } else if let Format::Gguf(g) = &self.format {
            // No tokenizer object: the special ids straight from the metadata.
            lowered.meta.bos_id = g.get("tokenizer.ggml.bos_token_id").and_then(|v| v.as_u64()).map(|v| v as u32);
            lowered.meta.add_bos = matches!(g.get("tokenizer.ggml.add_bos_token"), Some(gguf::MetaValue::Bool(true)));
            lowered.meta.stop_ids = g.get("tokenizer.ggml.eos_token_id").and_then(|v| v.as_u64()).map(|v| v as u32).into_iter().collect();
        }
        // A special token past the vocabulary would index past the
        // embedding (or never stop a generation): the file is corrupt.
        let vocab = lowered.meta.vocab_size;
        let specials = lowered.meta.bos_id.map(|id| ("tokenizer.ggml.bos_token_id", id)).into_iter();
        let specials = specials.chain(lowered.meta.stop_ids.iter().map(|&id| ("tokenizer.ggml.eos_token_id", id)));
        for (key, id) in specials {
            if id as usize >= vocab {
                return Err(Diagnostic::new(self.path(), format!("`{key}` = {id} is past the vocabulary of {vocab} tokens")));
            }
        }
        Ok(lowered)
    }

    /// Drop the metadata arrays the tokenizer and the lowering have already
    /// read (vocabulary, merges, scores: ~10 MB of strings on a 49k-token
    /// vocabulary) from memory; the tensors stay mapped. Call after `lower`.
    pub fn release_metadata(&mut self) {
        if let Format::Gguf(g) = &mut self.format {
            g.metadata.retain(|_, v| !matches!(v, gguf::MetaValue::Array(a) if a.len() > 1024));
        }
    }

    /// The checkpoint's bytes: its file, or a split or sharded checkpoint's files one after another.
    pub fn data(&self) -> &bytes::CheckpointBytes {
        match &self.format {
            Format::Gguf(g) => &g.data,
            Format::Safetensors(s) => &s.data,
        }
    }

    /// Bytes in the checkpoint's files together.
    pub fn len(&self) -> u64 {
        self.data().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `len` bytes at `offset` (a tensor's, from its `TensorInfo`), mapped.
    pub fn range(&self, offset: u64, len: u64) -> Option<&[u8]> {
        self.data().range(offset, len)
    }

    pub fn path(&self) -> &str {
        self.source().path()
    }

    pub fn source(&self) -> &dyn TensorSource {
        match &self.format {
            Format::Gguf(g) => g,
            Format::Safetensors(s) => s,
        }
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.source().tensor(name)
    }

    /// The tokenizer, or an error saying this checkpoint has none.
    pub fn tokenizer(&self) -> Result<&Tokenizer, String> {
        self.tokenizer.as_ref().ok_or_else(|| {
            format!(
                "{} carries no tokenizer (no GGUF `tokenizer.ggml.*` vocabulary, no tokenizer.json beside it): give token ids (the library's sessions take ids)",
                self.path()
            )
        })
    }

    /// xxh3-64 of the checkpoint's files one after another, reporting progress in bytes.
    pub fn checksum(&self, progress: impl FnMut(u64)) -> String {
        checksum_bytes(self.data().files(), progress)
    }
}

/// xxh3-64 of `files` one after another as hex, in 16 MiB steps with
/// progress callbacks.
pub fn checksum_bytes<'a>(files: impl IntoIterator<Item = &'a [u8]>, mut progress: impl FnMut(u64)) -> String {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for chunk in files.into_iter().flat_map(|f| f.chunks(16 << 20)) {
        h.update(chunk);
        progress(chunk.len() as u64);
    }
    format!("{:016x}", h.digest())
}
