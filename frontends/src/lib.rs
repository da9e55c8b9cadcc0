//! graphc's frontends: checkpoint readers (GGUF over mmap), the tokenizer
//! rebuilt from checkpoint metadata, and one lowering per model family.

pub mod error;
pub mod families;
pub mod gguf;
pub mod tokenizer;

pub use error::Diagnostic;
pub use families::llama::Lowered;
pub use gguf::GgufFile;
pub use tokenizer::Tokenizer;

use std::path::Path;

/// An opened checkpoint: its tensors (mapped, not copied) and its tokenizer.
pub struct Checkpoint {
    pub gguf: GgufFile,
    pub tokenizer: Tokenizer,
    pub family: String,
}

/// The families graphc lowers, by GGUF `general.architecture`.
pub const FAMILIES: &[&str] = &["llama"];

impl Checkpoint {
    pub fn open(path: &Path) -> Result<Checkpoint, Diagnostic> {
        let gguf = GgufFile::open(path)?;
        let arch = gguf.str("general.architecture")?.to_string();
        if !FAMILIES.contains(&arch.as_str()) {
            return Err(Diagnostic::new(&gguf.path, format!("unknown architecture `{arch}`"))
                .note(format!("graphc lowers: {}", FAMILIES.join(", "))));
        }
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        Ok(Checkpoint { gguf, tokenizer, family: arch })
    }

    /// The family's graph (unverified), weight manifest and model facts.
    pub fn lower(&self) -> Result<Lowered, Diagnostic> {
        let mut lowered = match self.family.as_str() {
            "llama" => families::llama::lower(&self.gguf)?,
            other => unreachable!("family {other} was accepted by open()"),
        };
        let t = &self.tokenizer;
        lowered.meta.bos_id = t.bos_id;
        lowered.meta.add_bos = t.add_bos;
        lowered.meta.stop_ids = t.eos_id.into_iter().collect();
        Ok(lowered)
    }

    /// xxh3-64 of the whole file, reporting progress in bytes.
    pub fn checksum(&self, progress: impl FnMut(u64)) -> String {
        checksum_bytes(&self.gguf.mmap, progress)
    }
}

/// xxh3-64 of `bytes` as hex, in 16 MiB steps with progress callbacks.
pub fn checksum_bytes(bytes: &[u8], mut progress: impl FnMut(u64)) -> String {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for chunk in bytes.chunks(16 << 20) {
        h.update(chunk);
        progress(chunk.len() as u64);
    }
    format!("{:016x}", h.digest())
}
