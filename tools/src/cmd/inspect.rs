//! `graphc inspect`: a checkpoint's metadata and tensors.

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    checkpoint: PathBuf,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let Args { checkpoint } = self;
        if graphc_frontends::safetensors::is_safetensors_path(&checkpoint) {
            let st = graphc_frontends::SafetensorsFile::open(&checkpoint)?;
            let files = match st.data.files().count() {
                1 => String::new(),
                n => format!(" in {n} shards"),
            };
            println!("safetensors | {} tensors{files} | config {}", st.tensors.len(), st.config_path);
            println!("{}", serde_json::to_string_pretty(&st.config)?);
            for t in &st.tensors {
                println!("{:<40} {:<5} {:?}", t.name, t.dtype.name(), t.shape);
            }
            return Ok(());
        }
        // Any type the format defines: one graphc cannot compute is
        // listed (and counted) here, and refused by `compile`.
        let g = graphc_frontends::GgufFile::open_any_type(&checkpoint)?;
        let uncomputable = match g.uncomputable.len() {
            0 => String::new(),
            n => format!(" ({n} of types graphc cannot compute)"),
        };
        let files = match g.data.files().count() {
            1 => String::new(),
            n => format!(" in {n} files"),
        };
        println!("GGUF v{} | alignment {} | {} tensors{uncomputable}{files}", g.version, g.alignment, g.tensors.len() + g.uncomputable.len());
        for (k, v) in &g.metadata {
            let shown = match v {
                graphc_frontends::gguf::MetaValue::Array(a) => format!("[{} items]", a.len()),
                graphc_frontends::gguf::MetaValue::Str(s) if s.len() > 80 => format!("{:?}...", &s[..s.floor_char_boundary(80)]),
                other => format!("{other:?}"),
            };
            println!("{k} = {shown}");
        }
        // In file (offset) order, whichever list a tensor is in.
        let mut rows: Vec<(u64, &str, &str, &[usize], &str)> =
            g.tensors.iter().map(|t| (t.offset, t.name.as_str(), t.dtype.name(), t.shape.as_slice(), "")).collect();
        rows.extend(
            g.uncomputable.iter().map(|t| (t.offset, t.name.as_str(), t.ggml_type.name(), t.shape.as_slice(), " (graphc cannot compute this type)")),
        );
        rows.sort_by_key(|r| r.0);
        for (_, name, ty, shape, mark) in rows {
            println!("{name:<32} {ty:<7} {shape:?}{mark}");
        }
        Ok(())
    }
}
