//! The `graphc` command: compile checkpoints to plans, run them, print the
//! graph at every stage.

// No `unsafe` here: it is confined to named modules (SIMD, the pool, mmap).
#![forbid(unsafe_code)]

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use graphc::{ChatOptions, CompileOptions, Detokenizer, Finish, Kernels, Message, Model, Penalties, Sampling, SessionOptions};
use graphc_ir::text;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

mod serve;

#[derive(Parser)]
#[command(name = "graphc", version, about = "A compiler for large-language-model inference")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct CompileArgs {
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
    fn options(&self) -> CompileOptions {
        CompileOptions { device: self.device.clone(), max_seq: self.max_seq, disabled_passes: self.disable_pass.clone() }
    }
}

/// Where a session runs on the CPU (`run`, `chat`, `bench`).
#[derive(clap::Args, Clone)]
struct CpuArgs {
    /// Worker threads (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// CPU kernels: `fast` (default: the widest instruction set this CPU
    /// has), `avx512`, `avx2`, `portable`, or `reference` (the oracle).
    #[arg(long)]
    kernels: Option<String>,
}

impl CpuArgs {
    fn session_options(&self) -> Result<SessionOptions> {
        let kernels = self.kernels.as_deref().map(Kernels::parse).transpose()?;
        Ok(SessionOptions { threads: self.threads, kernels, ..Default::default() })
    }
}

/// How tokens are drawn (`run`, `chat`).
#[derive(clap::Args, Clone)]
struct SamplingArgs {
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
}

impl SamplingArgs {
    fn sampling(&self) -> Sampling {
        let penalties =
            Penalties { presence: self.presence_penalty, frequency: self.frequency_penalty, repeat: self.repeat_penalty, ..Default::default() };
        Sampling { temperature: self.temperature, top_k: self.top_k, top_p: self.top_p, min_p: self.min_p, seed: self.seed, penalties }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Compile a checkpoint (GGUF, or safetensors + config.json) to a plan.
    Compile {
        checkpoint: PathBuf,
        /// Where to write the plan (written atomically).
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        opts: CompileArgs,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Generate text from a plan or a checkpoint.
    Run {
        /// A plan from `graphc compile`, or a checkpoint (compiled in memory).
        model: PathBuf,
        #[arg(long, conflicts_with_all = ["prompt_file", "prompt_ids"], required_unless_present_any = ["prompt_file", "prompt_ids"])]
        prompt: Option<String>,
        #[arg(long, conflicts_with = "prompt_ids")]
        prompt_file: Option<PathBuf>,
        /// Token ids, comma-separated (for checkpoints whose tokenizer graphc
        /// does not rebuild yet); the output is ids too.
        #[arg(long, value_delimiter = ',')]
        prompt_ids: Option<Vec<u32>>,
        /// Most tokens to generate.
        #[arg(short = 'n', long, default_value_t = 32)]
        n: usize,
        #[command(flatten)]
        sampling: SamplingArgs,
        /// Apply the checkpoint's chat template, the prompt as the user's message.
        #[arg(long)]
        chat: bool,
        /// With --chat: a system message before the user's.
        #[arg(long, requires = "chat")]
        system: Option<String>,
        /// Stop when the text contains this string (repeatable); it is not printed.
        #[arg(long = "stop", value_name = "TEXT")]
        stop: Vec<String>,
        /// Print special tokens (`<|im_end|>`, ...) as text.
        #[arg(long)]
        show_special: bool,
        #[command(flatten)]
        cpu: CpuArgs,
        /// Stop at the first NaN or infinity a node produces and name the
        /// node and its layer (reads every activation once more).
        #[arg(long)]
        check_finite: bool,
        #[command(flatten)]
        opts: CompileArgs,
        /// Print one JSON object at the end instead of streaming text.
        #[arg(long)]
        json: bool,
    },
    /// Print the graph in its text form.
    Dump {
        model: PathBuf,
        #[arg(long, value_enum, default_value = "optimized")]
        stage: Stage,
        /// Only these layers, e.g. `0..1` (end exclusive); the rest are summarized.
        #[arg(long)]
        layers: Option<String>,
        /// `text` (the IR text form) or `dot` (Graphviz: `| dot -Tsvg > g.svg`).
        #[arg(long, value_enum, default_value = "text")]
        format: DumpFormat,
        #[command(flatten)]
        opts: CompileArgs,
    },
    /// Print a checkpoint's metadata and tensors.
    Inspect { checkpoint: PathBuf },
    /// An interactive chat that keeps its cache between turns (only each new
    /// turn is prefilled). Commands: /reset, /system TEXT, /stats, /quit;
    /// Ctrl-C stops an answer.
    Chat {
        /// A plan from `graphc compile`, or a checkpoint.
        model: PathBuf,
        /// A system message before the first turn.
        #[arg(long)]
        system: Option<String>,
        /// Most tokens an answer may have (default: until the model ends it or the context is full).
        #[arg(short = 'n', long)]
        n: Option<usize>,
        #[command(flatten)]
        sampling: SamplingArgs,
        /// Print special tokens (`<|im_end|>`, ...) as text.
        #[arg(long)]
        show_special: bool,
        #[command(flatten)]
        cpu: CpuArgs,
        #[command(flatten)]
        opts: CompileArgs,
    },
    /// Serve the OpenAI API (chat and completions, streamed or whole) with
    /// continuous batching; SIGTERM or Ctrl-C answers the requests in
    /// flight, then exits.
    Serve {
        /// A plan from `graphc compile`, or a checkpoint.
        model: PathBuf,
        #[command(flatten)]
        serve: serve::ServeArgs,
        #[command(flatten)]
        cpu: CpuArgs,
        #[command(flatten)]
        opts: CompileArgs,
    },
    /// Prefill speed, and decode step time at several contexts with
    /// `kv_append` on and off, measured in one run.
    Bench {
        checkpoint: PathBuf,
        /// Contexts (tokens already in the cache) to time a decode step at.
        #[arg(long, value_delimiter = ',', default_value = "128,1024,2048")]
        contexts: Vec<usize>,
        /// Decode steps timed per context (the median is reported).
        #[arg(long, default_value_t = 5)]
        steps: usize,
        /// Prefill this many tokens of `--prompt-file` (0: skip).
        #[arg(long, default_value_t = 0)]
        prefill: usize,
        /// Text whose first `--prefill` tokens are prefilled.
        #[arg(long, conflicts_with = "prompt_ids_file")]
        prompt_file: Option<PathBuf>,
        /// Or token ids (whitespace- or comma-separated) in a file.
        #[arg(long)]
        prompt_ids_file: Option<PathBuf>,
        /// Skip the `kv_append` off column.
        #[arg(long)]
        no_ab: bool,
        /// Also time a decode step of a batch of this many rows, every row
        /// at the context (`Session::decode_rows`), and its tokens a second.
        #[arg(long)]
        batch: Option<usize>,
        /// Device to compile for and run on, as for `compile` (default: resolved).
        #[arg(long)]
        device: Option<String>,
        /// Also time each op of `--steps` decode steps at each context (and
        /// of a second prefill, with `--prefill`) and print where the time
        /// goes, by op class (op, and the type and shape of the weight it
        /// reads), with each matmul class's weight GiB/s and GFLOP/s; on a
        /// GPU, by kernel, each launch run on its own.
        #[arg(long)]
        profile: bool,
        #[command(flatten)]
        cpu: CpuArgs,
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq)]
enum DumpFormat {
    Text,
    Dot,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq)]
enum Stage {
    Lowered,
    Optimized,
}

/// Run `load` with a progress bar over the checkpoint bytes it reads.
fn with_progress<T>(load: impl FnOnce(graphc::model::Progress) -> Result<T, graphc::Error>) -> Result<T> {
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

fn open(path: &Path, opts: &CompileOptions) -> Result<Model> {
    with_progress(|p| Model::open(path, opts, p))
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Compile { checkpoint, output, opts, json } => {
            let t0 = Instant::now();
            let model = with_progress(|p| Model::compile(&checkpoint, &opts.options(), p))?;
            model.write_plan(&output)?;
            let secs = t0.elapsed().as_secs_f64();
            let plan = model.plan();
            if json {
                let passes: serde_json::Map<String, serde_json::Value> = plan.passes.iter().map(|p| (p.name.clone(), p.rewrites.into())).collect();
                let v = serde_json::json!({
                    "family": plan.family,
                    "device": plan.options.device,
                    "device_source": plan.options.device_source.as_str(),
                    "max_seq": plan.options.max_seq,
                    "max_seq_source": plan.options.max_seq_source.as_str(),
                    "passes": passes,
                    "weights_bytes": model.weights_bytes(),
                    "kv_caches": plan.kv_cache.caches,
                    "kv_bytes_per_token": plan.kv_cache.bytes_per_token,
                    "kv_window_caches": plan.kv_cache.window_caches,
                    "kv_window_bytes": plan.kv_cache.window_bytes,
                    "recurrent_states": plan.kv_cache.recurrent_states,
                    "recurrent_bytes": plan.kv_cache.recurrent_bytes,
                    "nodes": model.graph().len(),
                    "stop_ids": plan.model.stop_ids,
                    "compile_secs": secs,
                    "plan": output.display().to_string(),
                });
                println!("{v}");
            } else {
                println!("family:   {}", plan.family);
                println!("device:   {} (from {})", plan.options.device, plan.options.device_source.as_str());
                println!("max_seq:  {} (from {})", plan.options.max_seq, plan.options.max_seq_source.as_str());
                println!("weights:  {} tensors, {} bytes", plan.manifest.len(), model.weights_bytes());
                println!("nodes:    {}", model.graph().len());
                println!("stops at: {}", stop_tokens(&model));
                let kv = &plan.kv_cache;
                print!("kv cache: {} buffers, {} bytes per token", kv.caches, kv.bytes_per_token);
                if kv.window_caches > 0 {
                    print!("; {} of them window rings of {} bytes in all", kv.window_caches, kv.window_bytes);
                }
                if kv.recurrent_states > 0 {
                    print!("; {} of them recurrent states of {} bytes in all", kv.recurrent_states, kv.recurrent_bytes);
                }
                println!();
                for p in &plan.passes {
                    let state = if p.enabled { "" } else { " (disabled)" };
                    println!("pass {:<12} {} rewrites{state}", p.name, p.rewrites);
                }
                println!("wrote {} in {secs:.2}s", output.display());
            }
        }
        Cmd::Run { model, prompt, prompt_file, prompt_ids, n, sampling, chat, system, stop, show_special, cpu, check_finite, opts, json } => {
            let model = open(&model, &opts.options())?;
            // With `--prompt-ids` the tokenizer is optional: without one, tokens are printed as ids.
            let tok = if prompt_ids.is_some() { model.tokenizer().ok() } else { Some(model.tokenizer()?) };
            let prompt_ids = match (prompt, prompt_file, prompt_ids, tok) {
                (_, _, Some(ids), _) => ids,
                (p, f, None, Some(tok)) => {
                    let text_in = match (p, f) {
                        (Some(p), _) => p,
                        (None, Some(f)) => std::fs::read_to_string(&f).with_context(|| format!("cannot read prompt file {}", f.display()))?,
                        (None, None) => bail!("give --prompt, --prompt-file or --prompt-ids"),
                    };
                    if chat && tok.chat_template.is_none() {
                        if let Some((_, source)) = &tok.chat_fallback {
                            eprintln!("[graphc] the checkpoint has no chat template: --chat uses {source}");
                        }
                    }
                    if chat {
                        let mut messages: Vec<Message> = system.iter().map(|s| Message::system(s)).collect();
                        messages.push(Message::user(&text_in));
                        model.chat_prompt(&messages, &ChatOptions::default())?
                    } else {
                        tok.encode(&text_in).map_err(anyhow::Error::msg)?
                    }
                }
                (_, _, None, None) => unreachable!("a tokenizer is required without --prompt-ids"),
            };
            if tok.is_none() && !stop.is_empty() {
                bail!("--stop needs the checkpoint's tokenizer (this one has none: the output is token ids)");
            }
            let mut session = model.session(&SessionOptions { check_finite, ..cpu.session_options()? })?;
            let r = session.resolved().clone();
            if !json {
                eprintln!(
                    "[graphc] family {} | device {} | kernels {} (from {}) | max_seq {} | threads {} (from {}) | check_finite {} | prompt {} tokens",
                    model.plan().family,
                    r.device,
                    r.kernels,
                    r.kernels_source,
                    r.max_seq,
                    r.threads,
                    r.threads_source,
                    r.check_finite,
                    prompt_ids.len()
                );
            }
            let sampling = sampling.sampling();
            // Text streams through the detokenizer (whole characters, stop
            // strings held back); without a tokenizer, ids are printed.
            let mut detok = tok.map(|t| Detokenizer::new(t, show_special, &stop));
            let mut text = String::new();
            let stdout = std::io::stdout();
            let g = session.generate(&prompt_ids, n, &sampling, |t| {
                let (piece, stopped) = match detok.as_mut() {
                    Some(d) => {
                        let e = d.push(t);
                        (e.text, e.stopped)
                    }
                    None => (format!("{t} "), false),
                };
                text.push_str(&piece);
                if !json {
                    let mut out = stdout.lock();
                    let _ = out.write_all(piece.as_bytes());
                    let _ = out.flush();
                }
                if stopped {
                    std::ops::ControlFlow::Break(())
                } else {
                    std::ops::ControlFlow::Continue(())
                }
            })?;
            let rest = detok.as_mut().map(|d| d.finish()).unwrap_or_default();
            text.push_str(&rest);
            let prefill_tok_s = prompt_ids.len() as f64 / g.prefill_secs.max(1e-9);
            let decode_steps = g.tokens.len().saturating_sub(1);
            let decode_tok_s = if decode_steps == 0 { 0.0 } else { decode_steps as f64 / g.decode_secs.max(1e-9) };
            if json {
                let v = serde_json::json!({
                    "prompt_ids": prompt_ids,
                    "tokens": g.tokens,
                    // Each token's own text (special tokens included), to compare token by token.
                    "token_texts": tok.map(|t| g.tokens.iter().map(|&id| String::from_utf8_lossy(&t.decode_bytes(&[id], true)).into_owned()).collect::<Vec<_>>()),
                    "text": text,
                    "stopped_on_eos": g.stopped_on_eos,
                    "finish": finish_name(g.finish),
                    "prefill_tok_s": prefill_tok_s,
                    "decode_tok_s": decode_tok_s,
                    "threads": r.threads,
                    "kernels": r.kernels,
                    "device": r.device,
                    "max_seq": r.max_seq,
                    "peak_rss_bytes": graphc::peak_rss_bytes(),
                });
                println!("{v}");
            } else {
                print!("{rest}");
                println!();
                eprintln!("[graphc] prefill {prefill_tok_s:.1} tok/s | decode {decode_tok_s:.1} tok/s");
            }
        }
        Cmd::Dump { model, stage, layers, format, opts } => {
            let m = open(&model, &opts.options())?;
            let graph = match stage {
                Stage::Optimized => m.graph(),
                Stage::Lowered => m.lowered_graph().context("--stage lowered needs a checkpoint (a plan holds only the optimized graph)")?,
            };
            let (a, b) = match layers {
                None => (0, u32::MAX),
                Some(spec) => {
                    let (a, b) = spec.split_once("..").context("--layers takes A..B, e.g. 0..1")?;
                    (a.trim().parse().context("--layers: start is not a number")?, b.trim().parse().context("--layers: end is not a number")?)
                }
            };
            let keep = |l: u32| l >= a && l < b;
            let out = match format {
                DumpFormat::Text => text::print_filtered(graph, keep),
                DumpFormat::Dot => graphc_ir::dot::to_dot(graph, keep),
            };
            print!("{out}");
        }
        Cmd::Bench { checkpoint, contexts, steps, prefill, prompt_file, prompt_ids_file, no_ab, batch, device, profile, cpu, json } => {
            if batch == Some(0) {
                bail!("--batch must be at least 1 row");
            }
            let opts = cpu.session_options()?;
            let max = (contexts.iter().max().copied().unwrap_or(0) + steps + 1).max(prefill + 1);
            let compile = |disabled: &[&str]| {
                let opts =
                    CompileOptions { device: device.clone(), max_seq: Some(max), disabled_passes: disabled.iter().map(|s| s.to_string()).collect() };
                Model::compile(&checkpoint, &opts, None)
            };
            let on = compile(&[])?;
            let resolved = on.session(&opts)?.resolved().clone();
            // A device appends in place or not at all: no off column there.
            let off = if no_ab || resolved.device != "cpu" { None } else { Some(compile(&["kv_append"])?) };
            let prefill_row = if prefill > 0 {
                let path = prompt_file.as_ref().or(prompt_ids_file.as_ref()).context("--prefill needs --prompt-file or --prompt-ids-file")?;
                let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
                let ids: Vec<u32> = if prompt_ids_file.is_some() {
                    text.split(|c: char| c.is_whitespace() || c == ',')
                        .filter(|t| !t.is_empty())
                        .map(|t| t.parse().with_context(|| format!("{}: `{t}` is not a token id", path.display())))
                        .collect::<Result<_>>()?
                } else {
                    on.encode(&text)?
                };
                if ids.len() < prefill {
                    bail!("{} holds {} tokens, fewer than --prefill {prefill}", path.display(), ids.len());
                }
                let mut s = on.session(&opts)?;
                let t0 = Instant::now();
                s.prefill(&ids[..prefill])?;
                let secs = t0.elapsed().as_secs_f64();
                let mut row = serde_json::json!({"tokens": prefill, "secs": secs, "tok_s": prefill as f64 / secs});
                if profile {
                    // A second prefill, timed op by op (the first warmed the weights).
                    let mut s = on.session(&opts)?;
                    s.set_profiling(true)?;
                    s.prefill(&ids[..prefill])?;
                    row["profile"] = profile_json(&s.profile().context("profiling was on")?, 1.0);
                }
                Some(row)
            } else {
                None
            };
            let time = |m: &Model, ctx: usize| -> Result<f64> {
                let mut s = m.session(&opts)?;
                s.assume_cached(ctx)?;
                median_ms(steps, || s.decode(1).map(|_| ()).map_err(Into::into))
            };
            // A batch's decode step, every row at `ctx`.
            let time_batch = |rows: usize, ctx: usize| -> Result<f64> {
                let mut s = on.batch_session(rows, &opts)?;
                s.assume_cached(ctx)?;
                let tokens = vec![1; rows];
                median_ms(steps, || s.decode_rows(&tokens).map(|_| ()).map_err(Into::into))
            };
            // Where a decode step's time goes, by op class, at one context.
            let profile_at = |ctx: usize| -> Result<serde_json::Value> {
                let mut s = on.session(&opts)?;
                s.assume_cached(ctx)?;
                s.decode(1)?; // warm: the first step touches every weight page
                s.set_profiling(true)?;
                for _ in 0..steps.max(1) {
                    s.decode(1)?;
                }
                let mut v = profile_json(&s.profile().context("profiling was on")?, steps.max(1) as f64);
                v["context"] = ctx.into();
                Ok(v)
            };
            let profiles: Vec<serde_json::Value> = if profile { contexts.iter().map(|&c| profile_at(c)).collect::<Result<_>>()? } else { Vec::new() };
            let mut rows = Vec::new();
            for &ctx in &contexts {
                let a = time(&on, ctx)?;
                let b = off.as_ref().map(|m| time(m, ctx)).transpose()?;
                let batched = batch.map(|n| time_batch(n, ctx)).transpose()?;
                rows.push(serde_json::json!({
                    "context": ctx,
                    "kv_append_on_ms": a,
                    "decode_tok_s": 1e3 / a,
                    "kv_append_off_ms": b,
                    "on_over_off": b.map(|b| a / b),
                    "batch_ms": batched,
                    "batch_tok_s": batched.zip(batch).map(|(ms, n)| n as f64 * 1e3 / ms),
                }));
            }
            if json {
                let v = serde_json::json!({
                    "device": resolved.device,
                    "kernels": resolved.kernels,
                    "threads": resolved.threads,
                    "batch_rows": batch,
                    "prefill": prefill_row,
                    "decode": rows,
                    "profile": profile.then_some(&profiles),
                });
                println!("{v}");
            } else {
                println!("device {} | kernels {} | threads {}", resolved.device, resolved.kernels, resolved.threads);
                let num = |v: &serde_json::Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.2}"));
                if let Some(p) = &prefill_row {
                    println!("prefill {} tokens: {:.1} tok/s", p["tokens"], p["tok_s"].as_f64().unwrap_or(0.0));
                    if !p["profile"].is_null() {
                        println!("\nwhere the prefill's time goes ({} ms of ops):", num(&p["profile"]["step_ms"]));
                        print_profile(&p["profile"]);
                        println!();
                    }
                }
                println!("decode step, median of {steps} (ms)");
                let batch_head = batch.map_or(String::new(), |n| format!(" | {:>12} | {:>11}", format!("{n} rows (ms)"), format!("{n} rows tok/s")));
                println!("{:>8} | {:>14} | {:>15} | {:>6} | {:>8}{batch_head}", "context", "kv_append on", "kv_append off", "on/off", "tok/s");
                for r in &rows {
                    let batch_cells = batch.map_or(String::new(), |_| format!(" | {:>12} | {:>11}", num(&r["batch_ms"]), num(&r["batch_tok_s"])));
                    println!(
                        "{:>8} | {:>14} | {:>15} | {:>6} | {:>8}{batch_cells}",
                        r["context"].as_u64().unwrap_or(0),
                        num(&r["kv_append_on_ms"]),
                        num(&r["kv_append_off_ms"]),
                        num(&r["on_over_off"]),
                        num(&r["decode_tok_s"])
                    );
                }
                for p in &profiles {
                    println!(
                        "\nwhere a decode step's time goes at context {} ({} ms of ops a step, mean of {steps}):",
                        p["context"],
                        num(&p["step_ms"])
                    );
                    print_profile(p);
                }
            }
        }
        Cmd::Chat { model, system, n, sampling, show_special, cpu, opts } => {
            let model = open(&model, &opts.options())?;
            chat(&model, &cpu.session_options()?, system, n, &sampling.sampling(), show_special)?;
        }
        Cmd::Serve { model: path, serve: args, cpu, opts } => {
            let model = open(&path, &opts.options())?;
            serve::serve(model, &path, &args, cpu.session_options()?)?;
        }
        Cmd::Inspect { checkpoint } => {
            if checkpoint.is_dir() || checkpoint.extension().is_some_and(|e| e == "safetensors") {
                let st = graphc_frontends::SafetensorsFile::open(&checkpoint)?;
                println!("safetensors | {} tensors | config {}", st.tensors.len(), st.config_path);
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
            println!("GGUF v{} | alignment {} | {} tensors{uncomputable}", g.version, g.alignment, g.tensors.len() + g.uncomputable.len());
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
                g.uncomputable
                    .iter()
                    .map(|t| (t.offset, t.name.as_str(), t.ggml_type.name(), t.shape.as_slice(), " (graphc cannot compute this type)")),
            );
            rows.sort_by_key(|r| r.0);
            for (_, name, ty, shape, mark) in rows {
                println!("{name:<32} {ty:<7} {shape:?}{mark}");
            }
        }
    }
    Ok(())
}

/// The median of `steps` (at least one) runs of `step`, in ms.
fn median_ms(steps: usize, mut step: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut times = Vec::new();
    for _ in 0..steps.max(1) {
        let t0 = Instant::now();
        step()?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// A `Profile` as JSON, its times divided by `per` (forwards per step).
fn profile_json(p: &graphc_backends::cpu::exec::Profile, per: f64) -> serde_json::Value {
    let mut classes: Vec<_> = p.classes.iter().collect();
    classes.sort_by(|a, b| b.1.secs.total_cmp(&a.1.secs));
    let total = p.total_secs();
    serde_json::json!({
        "step_ms": total / per * 1e3,
        "classes": classes.iter().map(|(name, c)| serde_json::json!({
            "class": name,
            "calls_per_step": c.calls as f64 / per,
            "ms_per_step": c.secs / per * 1e3,
            "share": c.secs / total,
            "weight_gib_s": (c.weight_bytes > 0).then(|| c.weight_bytes as f64 / c.secs / (1u64 << 30) as f64),
            "gflop_s": (c.flops > 0.0).then(|| c.flops / c.secs / 1e9),
        })).collect::<Vec<_>>(),
    })
}

/// `profile_json`'s classes as a table.
fn print_profile(p: &serde_json::Value) {
    println!("{:>8} {:>6} {:>6} {:>9} {:>9}  class", "ms/step", "share", "calls", "GiB/s", "GFLOP/s");
    for c in p["classes"].as_array().into_iter().flatten() {
        println!(
            "{:>8.3} {:>5.1}% {:>6} {:>9} {:>9}  {}",
            c["ms_per_step"].as_f64().unwrap_or(0.0),
            c["share"].as_f64().unwrap_or(0.0) * 100.0,
            c["calls_per_step"].as_f64().unwrap_or(0.0).round(),
            c["weight_gib_s"].as_f64().map_or("-".to_string(), |g| format!("{g:.1}")),
            c["gflop_s"].as_f64().map_or("-".to_string(), |g| format!("{g:.1}")),
            c["class"].as_str().unwrap_or("")
        );
    }
}

/// `finish` in `run --json`: `stop` (an end-of-generation token or a stop
/// string), `length`, as the OpenAI API names them.
fn finish_name(f: Finish) -> &'static str {
    match f {
        Finish::EndOfGeneration | Finish::Caller => "stop",
        Finish::Length => "length",
    }
}

/// The end-of-generation ids with their text, e.g. `2 <|im_end|>, 0 <|endoftext|>`.
fn stop_tokens(model: &Model) -> String {
    let ids = &model.plan().model.stop_ids;
    if ids.is_empty() {
        return "no end-of-generation token (generation runs to -n)".into();
    }
    let text = |id: u32| model.tokenizer().ok().and_then(|t| t.token_text(id)).map(|t| format!(" {t}")).unwrap_or_default();
    ids.iter().map(|&id| format!("{id}{}", text(id))).collect::<Vec<_>>().join(", ")
}

/// `graphc chat`: read a line, answer it streaming, keep the cache.
fn chat(model: &Model, opts: &SessionOptions, system: Option<String>, n: Option<usize>, sampling: &Sampling, show_special: bool) -> Result<()> {
    use std::io::BufRead;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let mut conv = graphc::Conversation::new(model, opts, system)?;
    let tok = model.tokenizer()?;
    let max_seq = conv.session().resolved().max_seq;
    // Ctrl-C stops the answer being written, not the chat.
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("cannot catch Ctrl-C")?;
    let r = conv.session().resolved().clone();
    eprintln!(
        "[graphc] chat with {} | device {} | kernels {} | max_seq {} | threads {}",
        model.plan().family,
        r.device,
        r.kernels,
        max_seq,
        r.threads
    );
    eprintln!("[graphc] /reset, /system TEXT, /stats, /quit; Ctrl-C stops an answer");
    let (mut last, mut turns) = (None::<graphc::Turn>, 0usize);
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        eprint!("> ");
        let _ = std::io::stderr().flush();
        let Some(line) = lines.next() else { break };
        let line = line.context("cannot read the terminal")?;
        let line = line.trim_end_matches(['\r', '\n']);
        interrupted.store(false, Ordering::SeqCst);
        match line.trim() {
            "" => continue,
            "/quit" | "/exit" => break,
            "/reset" => {
                conv.reset();
                eprintln!("[graphc] conversation cleared");
                continue;
            }
            "/stats" => {
                eprintln!("[graphc] {turns} turns | context {} of {max_seq} tokens", conv.context_used());
                if let Some(t) = &last {
                    let steps = t.tokens.len().saturating_sub(1);
                    eprintln!(
                        "[graphc] last answer: {} tokens, {:.1} tok/s | prefill {} new tokens ({} from the cache), {:.1} tok/s",
                        t.tokens.len(),
                        steps as f64 / t.decode_secs.max(1e-9),
                        t.prefilled,
                        t.reused,
                        t.prefilled as f64 / t.prefill_secs.max(1e-9)
                    );
                }
                continue;
            }
            l if l == "/system" || l.starts_with("/system ") => {
                let text = l["/system".len()..].trim();
                conv.set_system((!text.is_empty()).then(|| text.to_string()));
                eprintln!("[graphc] system message {}", if text.is_empty() { "dropped" } else { "set" });
                continue;
            }
            l if l.starts_with('/') => {
                eprintln!("[graphc] unknown command {l}: /reset, /system TEXT, /stats, /quit");
                continue;
            }
            _ => {}
        }
        let mut detok = Detokenizer::new(tok, show_special, &[]);
        let stdout = std::io::stdout();
        let result = conv.send(line, n.unwrap_or(usize::MAX), sampling, |t| {
            let mut out = stdout.lock();
            let _ = out.write_all(detok.push(t).text.as_bytes());
            let _ = out.flush();
            if interrupted.load(Ordering::SeqCst) {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            }
        });
        match result {
            Ok(t) => {
                println!("{}", detok.finish());
                let why = match t.finish {
                    Finish::Caller => " | stopped",
                    Finish::Length if conv.context_used() + 1 >= max_seq => " | the context is full: /reset to start over",
                    _ => "",
                };
                eprintln!(
                    "[graphc] prefill {} tokens | {} tokens, {:.1} tok/s | context {} of {max_seq}{why}",
                    t.prefilled,
                    t.tokens.len(),
                    t.tokens.len().saturating_sub(1) as f64 / t.decode_secs.max(1e-9),
                    conv.context_used()
                );
                turns += 1;
                last = Some(t);
            }
            Err(e) => eprintln!("[graphc] {e}"),
        }
    }
    Ok(())
}
