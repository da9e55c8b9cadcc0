//! safetensors checkpoints (HF layout): `model.safetensors` mapped (never
//! copied) beside its `config.json`. The header is parsed by the
//! `safetensors` crate (which checks that offsets are in bounds, ordered and
//! non-overlapping); graphc maps its dtypes and keeps each tensor's absolute
//! file offset, as for GGUF, so weights bind to the same mmap either way.

use crate::bytes::FileBytes;
use crate::error::{commas, Diagnostic};
use crate::gguf::TensorInfo;
use graphc_ir::DType;
use std::path::{Path, PathBuf};

pub struct SafetensorsFile {
    /// The `.safetensors` file.
    pub path: String,
    /// `config.json` beside it.
    pub config_path: String,
    pub config: serde_json::Value,
    pub tensors: Vec<TensorInfo>,
    pub mmap: FileBytes,
    /// The name a tensor has in its file, where that differs from its name
    /// here (a GGUF seen through HF names: `gguf_hf`), for messages.
    pub file_names: std::collections::BTreeMap<String, String>,
}

impl SafetensorsFile {
    /// `path` is a `.safetensors` file or a folder holding `model.safetensors`;
    /// `config.json` must sit beside it.
    pub fn open(path: &Path) -> Result<SafetensorsFile, Diagnostic> {
        let file: PathBuf = if path.is_dir() { path.join("model.safetensors") } else { path.to_path_buf() };
        let shown = file.display().to_string();
        let f = std::fs::File::open(&file).map_err(|e| Diagnostic::new(&shown, format!("cannot open: {e}")))?;
        let mmap = FileBytes::map(&f).map_err(|e| Diagnostic::new(&shown, format!("cannot map: {e}")))?;
        let config_file = file.parent().unwrap_or(Path::new(".")).join("config.json");
        let config_path = config_file.display().to_string();
        let text = std::fs::read_to_string(&config_file).map_err(|e| {
            Diagnostic::new(&config_path, format!("cannot read the checkpoint's config: {e}"))
                .help("a safetensors checkpoint needs its config.json beside it")
        })?;
        Self::parse(shown, mmap, config_path, &text)
    }

    /// Read a safetensors file and its `config.json` held in memory; the
    /// paths name them in diagnostics.
    pub fn from_bytes(path: &str, bytes: Vec<u8>, config_path: &str, config_text: &str) -> Result<SafetensorsFile, Diagnostic> {
        Self::parse(path.to_string(), FileBytes::Owned(bytes), config_path.to_string(), config_text)
    }

    fn parse(shown: String, mmap: FileBytes, config_path: String, config_text: &str) -> Result<SafetensorsFile, Diagnostic> {
        let (header_len, meta) =
            safetensors::SafeTensors::read_metadata(&mmap[..]).map_err(|e| Diagnostic::new(&shown, format!("not a valid safetensors file: {e}")))?;
        let data_start = 8 + header_len as u64;
        let mut tensors = Vec::new();
        for (name, info) in meta.tensors() {
            let dtype = match info.dtype {
                safetensors::Dtype::F32 => DType::F32,
                safetensors::Dtype::F16 => DType::F16,
                safetensors::Dtype::BF16 => DType::BF16,
                other => {
                    return Err(
                        Diagnostic::new(&shown, format!("tensor `{name}` has dtype {other:?}")).note("graphc reads f32, f16 and bf16 safetensors")
                    )
                }
            };
            let (start, end) = info.data_offsets;
            let held = end.checked_sub(start).map(|n| n as u64);
            let expected = info.shape.iter().try_fold(dtype.block_bytes() as u64, |a, &d| a.checked_mul(d as u64));
            if held.is_none() || expected != held {
                return Err(Diagnostic::new(
                    &shown,
                    format!(
                        "tensor `{name}` holds bytes {start}..{end} but its shape {:?} of {dtype} needs {}",
                        info.shape,
                        expected.map_or("more than 2^64".into(), commas)
                    ),
                ));
            }
            tensors.push(TensorInfo {
                name: name.to_string(),
                shape: info.shape.clone(),
                dtype,
                offset: data_start + start as u64,
                bytes: (end - start) as u64,
            });
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        let config = serde_json::from_str(config_text).map_err(|e| Diagnostic::new(&config_path, format!("config.json is not valid JSON: {e}")))?;
        Ok(SafetensorsFile { path: shown, config_path, config, tensors, mmap, file_names: Default::default() })
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A config key that must be present: an error names the key and the file.
    pub fn config_value(&self, key: &str) -> Result<&serde_json::Value, Diagnostic> {
        self.config.get(key).ok_or_else(|| Diagnostic::new(&self.config_path, format!("missing key `{key}`")))
    }

    pub fn config_uint(&self, key: &str) -> Result<usize, Diagnostic> {
        self.config_value(key)?
            .as_u64()
            .map(|v| v as usize)
            .ok_or_else(|| Diagnostic::new(&self.config_path, format!("key `{key}` is not a non-negative integer")))
    }

    pub fn config_float(&self, key: &str) -> Result<f64, Diagnostic> {
        self.config_value(key)?.as_f64().ok_or_else(|| Diagnostic::new(&self.config_path, format!("key `{key}` is not a number")))
    }
}
