//! safetensors checkpoints (HF layout): `model.safetensors` mapped (never
//! copied) beside its `config.json`, or a sharded checkpoint's
//! `model.safetensors.index.json` and the shards it names, each mapped.
//! Each header is parsed by the `safetensors` crate (which checks that
//! offsets are in bounds, ordered and non-overlapping); graphc maps its
//! dtypes and keeps each tensor's absolute offset (into the shards laid
//! one after another: `CheckpointBytes`), as for GGUF, so weights bind to
//! the same maps either way.

use crate::bytes::{CheckpointBytes, FileBytes};
use crate::error::{commas, Diagnostic};
use crate::gguf::TensorInfo;
use graphc_ir::DType;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The index of a sharded checkpoint, as transformers writes it.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Whether `path` names a safetensors checkpoint: a folder, a
/// `.safetensors` file, or a sharded checkpoint's index.
pub fn is_safetensors_path(path: &Path) -> bool {
    path.is_dir()
        || path.extension().is_some_and(|e| e == "safetensors")
        || path.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".safetensors.index.json"))
}

pub struct SafetensorsFile {
    /// The `.safetensors` file, or a sharded checkpoint's index.
    pub path: String,
    /// `config.json` beside it.
    pub config_path: String,
    pub config: serde_json::Value,
    /// Sorted by name.
    pub tensors: Vec<TensorInfo>,
    /// The file's bytes, or the shards' one after another.
    pub data: CheckpointBytes,
    /// The name a tensor has in its file, where that differs from its name
    /// here (a GGUF seen through HF names: `gguf_hf`), for messages.
    pub file_names: BTreeMap<String, String>,
}

impl SafetensorsFile {
    /// `path` is a `.safetensors` file, a sharded checkpoint's
    /// `model.safetensors.index.json`, or a folder holding either
    /// (`model.safetensors` first); `config.json` must sit beside it.
    pub fn open(path: &Path) -> Result<SafetensorsFile, Diagnostic> {
        let file: PathBuf = match path.is_dir() {
            true if path.join("model.safetensors").exists() || !path.join(INDEX_FILE).exists() => path.join("model.safetensors"),
            true => path.join(INDEX_FILE),
            false => path.to_path_buf(),
        };
        let shown = file.display().to_string();
        let dir = file.parent().unwrap_or(Path::new(".")).to_path_buf();
        let config_file = dir.join("config.json");
        let config_path = config_file.display().to_string();
        let text = std::fs::read_to_string(&config_file).map_err(|e| {
            Diagnostic::new(&config_path, format!("cannot read the checkpoint's config: {e}"))
                .help("a safetensors checkpoint needs its config.json beside it")
        })?;
        let config = parse_config(&config_path, &text)?;
        if file.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".index.json")) {
            return open_sharded(shown, &dir, config_path, config);
        }
        let mut data = CheckpointBytes::new();
        let bytes = map(&file, &shown)?;
        let tensors = parse_header(&shown, &bytes, 0)?;
        data.push(bytes);
        Ok(SafetensorsFile { path: shown, config_path, config, tensors, data, file_names: Default::default() })
    }

    /// Read a safetensors file and its `config.json` held in memory; the
    /// paths name them in diagnostics.
    pub fn from_bytes(path: &str, bytes: Vec<u8>, config_path: &str, config_text: &str) -> Result<SafetensorsFile, Diagnostic> {
        let config = parse_config(config_path, config_text)?;
        let tensors = parse_header(path, &bytes, 0)?;
        let data = CheckpointBytes::one(FileBytes::Owned(bytes));
        Ok(SafetensorsFile { path: path.to_string(), config_path: config_path.to_string(), config, tensors, data, file_names: Default::default() })
    }

    /// The tensor named `name` (`tensors` is sorted by name: a MoE
    /// checkpoint has tens of thousands, each looked up by its lowering).
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.binary_search_by(|t| t.name.as_str().cmp(name)).ok().map(|i| &self.tensors[i])
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

    /// `config_uint` where the key is set; `default` where it is absent or null.
    pub fn config_uint_or(&self, key: &str, default: usize) -> Result<usize, Diagnostic> {
        match self.config.get(key) {
            None | Some(serde_json::Value::Null) => Ok(default),
            Some(_) => self.config_uint(key),
        }
    }

    pub fn config_float(&self, key: &str) -> Result<f64, Diagnostic> {
        self.config_value(key)?.as_f64().ok_or_else(|| Diagnostic::new(&self.config_path, format!("key `{key}` is not a number")))
    }
}

fn parse_config(config_path: &str, text: &str) -> Result<serde_json::Value, Diagnostic> {
    serde_json::from_str(text).map_err(|e| Diagnostic::new(config_path, format!("config.json is not valid JSON: {e}")))
}

fn map(file: &Path, shown: &str) -> Result<FileBytes, Diagnostic> {
    let f = std::fs::File::open(file).map_err(|e| Diagnostic::new(shown, format!("cannot open: {e}")))?;
    FileBytes::map(&f).map_err(|e| Diagnostic::new(shown, format!("cannot map: {e}")))
}

/// The tensors of one safetensors file whose first byte is at `base`.
fn parse_header(shown: &str, bytes: &[u8], base: u64) -> Result<Vec<TensorInfo>, Diagnostic> {
    let (header_len, meta) =
        safetensors::SafeTensors::read_metadata(bytes).map_err(|e| Diagnostic::new(shown, format!("not a valid safetensors file: {e}")))?;
    let data_start = base + 8 + header_len as u64;
    let mut tensors = Vec::new();
    for (name, info) in meta.tensors() {
        let dtype = match info.dtype {
            safetensors::Dtype::F32 => DType::F32,
            safetensors::Dtype::F16 => DType::F16,
            safetensors::Dtype::BF16 => DType::BF16,
            other => {
                return Err(Diagnostic::new(shown, format!("tensor `{name}` has dtype {other:?}")).note("graphc reads f32, f16 and bf16 safetensors"))
            }
        };
        let (start, end) = info.data_offsets;
        let held = end.checked_sub(start).map(|n| n as u64);
        let expected = info.shape.iter().try_fold(dtype.block_bytes() as u64, |a, &d| a.checked_mul(d as u64));
        if held.is_none() || expected != held {
            return Err(Diagnostic::new(
                shown,
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
    Ok(tensors)
}

/// A sharded checkpoint: the index's `weight_map` (tensor → shard file
/// beside it) and every shard it names, mapped one after another. The
/// index and the shards must agree: each tensor is in the shard the index
/// names and no shard holds a tensor the index does not list (a tensor
/// left out would be one no rule reads, unseen), and no name is in two
/// shards.
fn open_sharded(shown: String, dir: &Path, config_path: String, config: serde_json::Value) -> Result<SafetensorsFile, Diagnostic> {
    let text = std::fs::read_to_string(dir.join(Path::new(&shown).file_name().unwrap_or_default()))
        .map_err(|e| Diagnostic::new(&shown, format!("cannot read: {e}")))?;
    let index: serde_json::Value = serde_json::from_str(&text).map_err(|e| Diagnostic::new(&shown, format!("not valid JSON: {e}")))?;
    let Some(weight_map) = index.get("weight_map").and_then(|m| m.as_object()) else {
        return Err(Diagnostic::new(&shown, "no `weight_map` object: not a sharded safetensors index"));
    };
    // Shard file → the tensors the index puts there.
    let mut shards: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, file) in weight_map {
        let Some(file) = file.as_str() else {
            return Err(Diagnostic::new(&shown, format!("`weight_map` entry `{name}` is {file}, not a file name")));
        };
        let plain = Path::new(file).file_name().is_some_and(|f| f == std::ffi::OsStr::new(file));
        if !plain || !file.ends_with(".safetensors") {
            return Err(Diagnostic::new(&shown, format!("`weight_map` puts `{name}` in `{file}`, not a .safetensors file beside the index")));
        }
        shards.entry(file).or_default().push(name);
    }
    if shards.is_empty() {
        return Err(Diagnostic::new(&shown, "`weight_map` names no tensor"));
    }
    if let Some((file, listed)) = shards.iter().find(|(file, _)| !dir.join(file).is_file()) {
        return Err(Diagnostic::new(&shown, format!("puts tensor `{}` in `{file}`, which is not beside it", listed[0])));
    }
    let mut data = CheckpointBytes::new();
    let mut tensors = Vec::new();
    let mut held_by: BTreeMap<String, &str> = BTreeMap::new();
    for file in shards.keys() {
        let shard_path = dir.join(file);
        let shard_shown = shard_path.display().to_string();
        let bytes = map(&shard_path, &shard_shown).map_err(|d| d.note(format!("{shown} names this shard")))?;
        let mut held = parse_header(&shard_shown, &bytes, data.len())?;
        data.push(bytes);
        if let Some(t) = held.iter().find(|t| weight_map.get(&t.name).and_then(|f| f.as_str()) != Some(*file)) {
            let other = weight_map.get(&t.name).and_then(|f| f.as_str());
            let said = other.map_or("does not list it".to_string(), |o| format!("puts it in `{o}`"));
            return Err(Diagnostic::new(&shard_shown, format!("holds tensor `{}`, but the index {said}", t.name)).note(format!("the index: {shown}")));
        }
        held_by.extend(held.iter().map(|t| (t.name.clone(), *file)));
        tensors.append(&mut held);
    }
    for (file, listed) in &shards {
        if let Some(missing) = listed.iter().find(|n| held_by.get(**n) != Some(file)) {
            let holder = held_by.get(*missing).map_or(String::new(), |h| format!(" (`{h}` does)"));
            return Err(Diagnostic::new(&shown, format!("puts tensor `{missing}` in `{file}`, which does not hold it{holder}")));
        }
    }
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(SafetensorsFile { path: shown, config_path, config, tensors, data, file_names: Default::default() })
}
