//! The `graphc` command: compile checkpoints to plans, run them, print the
//! graph at every stage.

// No `unsafe` here: it is confined to named modules (SIMD, the pool, mmap).
#![forbid(unsafe_code)]

use anyhow::Result;
use clap::{Parser, Subcommand};

mod cmd;
mod common;

#[derive(Parser)]
#[command(name = "graphc", version, about = "A compiler for large-language-model inference")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Compile a checkpoint (GGUF, or safetensors + config.json) to a plan.
    Compile(cmd::compile::Args),
    /// Generate text from a plan or a checkpoint.
    Run(cmd::run::Args),
    /// Print the graph in its text form.
    Dump(cmd::dump::Args),
    /// Print a checkpoint's metadata and tensors.
    Inspect(cmd::inspect::Args),
    /// An interactive chat that keeps its cache between turns (only each new
    /// turn is prefilled). Commands: /reset, /system TEXT, /stats, /quit;
    /// Ctrl-C stops an answer.
    Chat(cmd::chat::Args),
    /// Serve the OpenAI API (chat and completions, streamed or whole) with
    /// continuous batching; SIGTERM or Ctrl-C answers the requests in
    /// flight, then exits.
    Serve(cmd::serve::Args),
    /// Prefill speed, and decode step time at several contexts with
    /// `kv_append` on and off, measured in one run.
    Bench(cmd::bench::Args),
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Compile(args) => args.run(),
        Cmd::Run(args) => args.run(),
        Cmd::Dump(args) => args.run(),
        Cmd::Inspect(args) => args.run(),
        Cmd::Chat(args) => args.run(),
        Cmd::Serve(args) => args.run(),
        Cmd::Bench(args) => args.run(),
    }
}
