//! `graphc compile`: lower, verify and optimize a checkpoint into a plan, written atomically; print what was resolved.

use crate::common::*;
use anyhow::Result;
use graphc::Model;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    checkpoint: PathBuf,
    /// Where to write the plan (written atomically).
    #[arg(short, long)]
    output: PathBuf,
    #[command(flatten)]
    opts: CompileArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let Args { checkpoint, output, opts, json } = self;
        let t0 = Instant::now();
        let options = opts.options()?;
        let model = with_progress(|p| Model::compile(&checkpoint, &options, p))?;
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
                let width = p.rules.iter().map(|r| r.name.len()).max().unwrap_or(0);
                for r in &p.rules {
                    let state = if r.enabled { "" } else { " (disabled)" };
                    println!("  rule {:<width$} fired {}{state}", r.name, r.fired);
                }
                if let Some(why) = &p.stopped {
                    println!("  stopped early: {why} (the graph is correct, maybe less fused)");
                }
            }
            println!("wrote {} in {secs:.2}s", output.display());
        }
        Ok(())
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
