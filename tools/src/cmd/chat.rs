//! `graphc chat`: an interactive chat that keeps its KV cache between turns.
//! A thinking model's `<think>` block is shown apart from its answer: dim
//! on a terminal, else between `Thinking...` and `...done thinking.` (as
//! Ollama prints it).

use crate::common::*;
use anyhow::{Context, Result};
use graphc::{Detokenizer, Finish, Model, Sampling, SessionOptions};
use graphc_frontends::reasoning::{self, ThinkSplit};
use std::io::{IsTerminal, Write};
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
    /// For a thinking model: whether it thinks (its template's
    /// `enable_thinking`; default: as the template does). `/think` and
    /// `/nothink` change it between turns.
    #[arg(long)]
    think: Option<bool>,
    #[command(flatten)]
    cpu: CpuArgs,
    #[command(flatten)]
    opts: CompileArgs,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let Args { model, system, n, sampling, show_special, think, cpu, opts } = self;
        let model = open(&model, &opts.options()?)?;
        chat(&model, &cpu.session_options()?, system, n, &sampling.sampling()?, show_special, think)?;
        Ok(())
    }
}

/// `graphc chat`: read a line, answer it streaming, keep the cache.
fn chat(
    model: &Model,
    opts: &SessionOptions,
    system: Option<String>,
    n: Option<usize>,
    sampling: &Sampling,
    show_special: bool,
    think: Option<bool>,
) -> Result<()> {
    use std::io::BufRead;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let mut conv = graphc::Conversation::new(model, opts, system)?;
    let tok = model.tokenizer()?;
    let thinks = tok.template().is_some_and(reasoning::template_thinks);
    if think.is_some() && !thinks {
        anyhow::bail!("--think: this model's chat template does not think (it writes no <think> blocks)");
    }
    conv.set_variable("enable_thinking", think.map(Into::into));
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
    eprintln!("[graphc] /reset, /system TEXT, /stats, /quit{}; Ctrl-C stops an answer", if thinks { ", /think, /nothink" } else { "" });
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
            "/think" | "/nothink" if thinks => {
                conv.set_variable("enable_thinking", Some((line.trim() == "/think").into()));
                eprintln!("[graphc] thinking {}", if line.trim() == "/think" { "on" } else { "off" });
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
        let split = if thinks { reasoning::split_for(tok, conv.opens_thinking(line)) } else { None };
        let mut view = Thoughts::new(split, stdout.is_terminal());
        let result = conv.send(line, n.unwrap_or(usize::MAX), sampling, |t| {
            let mut out = stdout.lock();
            let text = detok.push(t).text;
            view.show(&mut out, t, &text);
            let _ = out.flush();
            if interrupted.load(Ordering::SeqCst) {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            }
        });
        match result {
            Ok(t) => {
                let mut out = stdout.lock();
                view.end(&mut out, &detok.finish());
                let _ = writeln!(out);
                drop(out);
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

/// An answer printed with its reasoning apart (where the model thinks).
struct Thoughts {
    split: Option<ThinkSplit>,
    terminal: bool,
    thinking: bool,
}

impl Thoughts {
    fn new(split: Option<ThinkSplit>, terminal: bool) -> Thoughts {
        Thoughts { split, terminal, thinking: false }
    }

    /// Token `id`'s visible `text`.
    fn show(&mut self, out: &mut impl Write, id: u32, text: &str) {
        let Some(split) = &mut self.split else {
            let _ = out.write_all(text.as_bytes());
            return;
        };
        let (reasoning, content) = split.push_token(id, text);
        self.print(out, &reasoning, &content);
    }

    fn print(&mut self, out: &mut impl Write, reasoning: &str, content: &str) {
        if !reasoning.is_empty() {
            if !self.thinking {
                let _ = out.write_all(if self.terminal { b"\x1b[2m" } else { b"Thinking...\n" });
                self.thinking = true;
            }
            let _ = out.write_all(reasoning.as_bytes());
        }
        if !content.is_empty() {
            self.close(out);
            let _ = out.write_all(content.as_bytes());
        }
    }

    fn close(&mut self, out: &mut impl Write) {
        if self.thinking {
            let _ = out.write_all(if self.terminal { b"\x1b[0m\n\n" } else { b"\n...done thinking.\n\n" });
            self.thinking = false;
        }
    }

    /// The answer's end: its last `text`, what the split held back, and
    /// the block closed.
    fn end(&mut self, out: &mut impl Write, text: &str) {
        match &mut self.split {
            Some(split) => {
                let (reasoning, content) = split.push_last(text);
                self.print(out, &reasoning, &content);
            }
            None => {
                let _ = out.write_all(text.as_bytes());
            }
        }
        self.close(out);
    }
}
