//! `graphc run`: generate text from a plan or a checkpoint, streaming it (or one JSON object).

use crate::common::*;
use anyhow::{bail, Context, Result};
use graphc::{ChatOptions, Detokenizer, Finish, Message, SessionOptions};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
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
}

impl Args {
    pub fn run(self) -> Result<()> {
        let Args { model, prompt, prompt_file, prompt_ids, n, sampling, chat, system, stop, show_special, cpu, check_finite, opts, json } = self;
        let model = open(&model, &opts.options()?)?;
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
        let sampling = sampling.sampling()?;
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
        Ok(())
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
