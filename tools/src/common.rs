//! What several commands share: compile, CPU and sampling options, and
//! opening a model with a progress bar.

use anyhow::{Context, Result};
use graphc::{CompileOptions, Format, Kernels, Model, Penalties, Sampling, SessionOptions};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;

#[derive(clap::Args, Clone)]
pub struct CompileArgs {
    /// Device to compile for (default: resolved from the machine: `cuda` on a verified GPU, sm_90, else `cpu`).
    #[arg(long)]
    device: Option<String>,
    /// Longest sequence a session may hold (default: the checkpoint's context length).
    #[arg(long)]
    max_seq: Option<usize>,
    /// Switch off a pass by name (repeatable).
    #[arg(long = "disable-pass", value_name = "NAME")]
    disable_pass: Vec<String>,
}

impl CompileArgs {
    pub fn options(&self) -> Result<CompileOptions> {
        Ok(CompileOptions { device: self.device.clone(), max_seq: self.max_seq, disabled_passes: self.disable_pass.clone(), gpu: gpu_settings()? })
    }
}

/// Where a session runs on the CPU (`run`, `chat`, `bench`).
#[derive(clap::Args, Clone)]
pub struct CpuArgs {
    /// Worker threads (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// CPU kernels: `fast` (default: the widest instruction set this CPU
    /// has), `avx512`, `avx2`, `portable`, or `reference` (the oracle).
    #[arg(long)]
    kernels: Option<String>,
}

impl CpuArgs {
    pub fn session_options(&self) -> Result<SessionOptions> {
        let kernels = self.kernels.as_deref().map(Kernels::parse).transpose()?;
        Ok(SessionOptions { threads: self.threads, kernels, gpu: gpu_settings()?, ..Default::default() })
    }
}

/// How tokens are drawn (`run`, `chat`).
#[derive(clap::Args, Clone)]
pub struct SamplingArgs {
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long)]
    top_k: Option<usize>,
    #[arg(long)]
    top_p: Option<f32>,
    /// Drop tokens less likely than this times the most likely one.
    #[arg(long)]
    min_p: Option<f32>,
    /// llama.cpp's repeat penalty over the last 64 tokens (1 is off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// OpenAI's presence penalty on generated tokens.
    #[arg(long, default_value_t = 0.0)]
    presence_penalty: f32,
    /// OpenAI's frequency penalty on generated tokens.
    #[arg(long, default_value_t = 0.0)]
    frequency_penalty: f32,
    /// JSON mode: the answer is a JSON object (each token checked to keep it one).
    #[arg(long)]
    json_object: bool,
    /// Structured output: the answer is a value of the JSON schema in this
    /// file (objects of listed properties, arrays, scalars, enum, const).
    #[arg(long, value_name = "FILE", conflicts_with = "json_object")]
    json_schema: Option<std::path::PathBuf>,
}

impl SamplingArgs {
    pub fn sampling(&self) -> Result<Sampling> {
        let penalties =
            Penalties { presence: self.presence_penalty, frequency: self.frequency_penalty, repeat: self.repeat_penalty, ..Default::default() };
        let format = match (&self.json_schema, self.json_object) {
            (Some(path), _) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("reading the JSON schema {}", path.display()))?;
                let schema: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
                let compiled =
                    graphc::json_schema::Schema::compile(&schema, "schema").with_context(|| format!("the JSON schema {}", path.display()))?;
                Format::JsonSchema(std::sync::Arc::new(compiled))
            }
            (None, true) => Format::JsonObject,
            (None, false) => Format::Text,
        };
        let (temperature, top_k, top_p, min_p, seed) = (self.temperature, self.top_k, self.top_p, self.min_p, self.seed);
        Ok(Sampling { temperature, top_k, top_p, min_p, seed, penalties, format, logit_bias: vec![] })
    }
}

/// Run `load` with a progress bar over the checkpoint bytes it reads.
pub fn with_progress<T>(load: impl FnOnce(graphc::model::Progress) -> Result<T, graphc::Error>) -> Result<T> {
    let pb = ProgressBar::new(0);
    pb.set_style(ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes}").unwrap().progress_chars("=> "));
    pb.set_message("reading weights");
    let mut cb = |done: u64, total: u64| {
        pb.set_length(total);
        pb.set_position(done);
    };
    let out = load(Some(&mut cb))?;
    pb.finish_and_clear();
    Ok(out)
}

pub fn open(path: &Path, opts: &CompileOptions) -> Result<Model> {
    with_progress(|p| Model::open(path, opts, p))
}

/// The GPU settings from the variables the README documents
/// (`GRAPHC_CUDA`, `GRAPHC_METAL`, `GRAPHC_CACHE`, ...): the command is
/// where the environment is read, once, and passed down.
pub fn gpu_settings() -> Result<graphc::GpuSettings> {
    Ok(graphc::GpuSettings::from_env()?)
}
