//! `graphc chat`: an interactive chat that keeps its KV cache between turns.

use crate::common::*;
use anyhow::{Context, Result};
use graphc::{Detokenizer, Finish, Model, Sampling, SessionOptions};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
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
}

impl Args {
    pub fn run(self) -> Result<()> {
        let Args { model, system, n, sampling, show_special, cpu, opts } = self;
        let model = open(&model, &opts.options()?)?;
        chat(&model, &cpu.session_options()?, system, n, &sampling.sampling()?, show_special)?;
        Ok(())
    }
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
