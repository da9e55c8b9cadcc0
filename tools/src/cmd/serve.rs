//! `graphc serve`: the OpenAI API over HTTP with continuous batching; SIGTERM or
//! Ctrl-C answers the requests in flight, then exits.

use crate::common::*;
use anyhow::Result;
use graphc::{Model, SessionOptions};
use graphc_server::{ServeOptions, Server};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// A plan from `graphc compile`, or a checkpoint.
    model: PathBuf,
    #[command(flatten)]
    serve: ServeArgs,
    #[command(flatten)]
    cpu: CpuArgs,
    #[command(flatten)]
    opts: CompileArgs,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let Args { model: path, serve: args, cpu, opts } = self;
        let model = open(&path, &opts.options()?)?;
        serve(model, &path, &args, cpu.session_options()?)?;
        Ok(())
    }
}

#[derive(clap::Args, Clone)]
pub struct ServeArgs {
    /// Address to listen on (default 127.0.0.1).
    #[arg(long)]
    host: Option<String>,
    /// Port (default 8080; 0 picks a free one, printed).
    #[arg(long)]
    port: Option<u16>,
    /// Requests run at once (default 4); each holds a KV cache of --max-seq tokens.
    #[arg(long)]
    slots: Option<usize>,
    /// Requests that may wait for a slot before new ones get 429 (default 64).
    #[arg(long)]
    max_queue: Option<usize>,
    /// Require `Authorization: Bearer KEY` on /v1/* (default: none).
    #[arg(long)]
    api_key: Option<String>,
    /// The model's name in the API (default: the checkpoint's file name without extension).
    #[arg(long)]
    model_name: Option<String>,
    /// Reuse the longest cached prefix of a prompt in a free slot, as a chat
    /// client's next turn repeats the conversation (default: true, but for
    /// models with recurrent states; a slot whose sliding-window rings have
    /// wrapped starts from empty).
    #[arg(long)]
    prompt_cache: Option<bool>,
}

pub fn serve(model: Model, path: &Path, args: &ServeArgs, session: SessionOptions) -> Result<()> {
    let model_name = args.model_name.clone().or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()));
    let opts = ServeOptions {
        host: args.host.clone(),
        port: args.port,
        slots: args.slots,
        max_queue: args.max_queue,
        api_key: args.api_key.clone(),
        model_name,
        prefill_chunk: None,
        prompt_cache: args.prompt_cache,
        session,
    };
    let mut server = Server::start(Arc::new(model), opts)?;
    let r = server.resolved();
    eprintln!(
        "serving `{}` on http://{} | slots {} | queue {} | max_seq {} per slot | prompt cache {} | api key {}",
        r.model_name,
        r.addr,
        r.slots,
        r.max_queue,
        r.max_seq,
        if r.prompt_cache { "on" } else { "off" },
        if r.api_key { "required" } else { "none" }
    );
    let handle = server.shutdown_handle().expect("a fresh server");
    ctrlc::set_handler(move || {
        eprintln!("shutting down: answering the requests in flight");
        handle.shutdown();
    })?;
    server.join()?;
    Ok(())
}
