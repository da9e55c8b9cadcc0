//! `graphc bench`: prefill speed and decode step times at several contexts, measured in one run.

use crate::common::*;
use anyhow::{bail, Context, Result};
use graphc::{CompileOptions, Model};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
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
    /// Switch off a pass or a fusion rule by name in every plan timed (repeatable).
    #[arg(long = "disable-pass", value_name = "NAME")]
    disable_pass: Vec<String>,
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
}

impl Args {
    pub fn run(self) -> Result<()> {
        let Args { checkpoint, contexts, steps, prefill, prompt_file, prompt_ids_file, no_ab, batch, device, disable_pass, profile, cpu, json } =
            self;
        if batch == Some(0) {
            bail!("--batch must be at least 1 row");
        }
        let opts = cpu.session_options()?;
        let max = (contexts.iter().max().copied().unwrap_or(0) + steps + 1).max(prefill + 1);
        let compile = |disabled: &[&str]| {
            let opts = CompileOptions {
                device: device.clone(),
                max_seq: Some(max),
                disabled_passes: disable_pass.iter().cloned().chain(disabled.iter().map(|s| s.to_string())).collect(),
                gpu: opts.gpu.clone(),
            };
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
        // A decode step's median time, and on a device its launches and host µs (the last step's).
        let time = |m: &Model, ctx: usize| -> Result<(f64, Option<u64>, Option<u64>)> {
            let mut s = m.session(&opts)?;
            s.assume_cached(ctx)?;
            let ms = median_ms(steps, || s.decode(1).map(|_| ()).map_err(Into::into))?;
            let counts = s.kernel_counts();
            Ok((ms, counts.get("device_launches_last_step").copied(), counts.get("device_host_us_last_step").copied()))
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
            let (a, launches, host_us) = time(&on, ctx)?;
            let b = off.as_ref().map(|m| time(m, ctx).map(|t| t.0)).transpose()?;
            let batched = batch.map(|n| time_batch(n, ctx)).transpose()?;
            rows.push(serde_json::json!({
                "context": ctx,
                "kv_append_on_ms": a,
                "decode_tok_s": 1e3 / a,
                "kv_append_off_ms": b,
                "on_over_off": b.map(|b| a / b),
                "batch_ms": batched,
                "batch_tok_s": batched.zip(batch).map(|(ms, n)| n as f64 * 1e3 / ms),
                "launches_per_step": launches,
                "host_us_per_step": host_us,
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
            for r in rows.iter().filter(|r| !r["launches_per_step"].is_null()) {
                println!(
                    "context {}: {} kernel launches a decode step, {} µs of host time",
                    r["context"], r["launches_per_step"], r["host_us_per_step"]
                );
            }
            for p in &profiles {
                println!("\nwhere a decode step's time goes at context {} ({} ms of ops a step, mean of {steps}):", p["context"], num(&p["step_ms"]));
                print_profile(p);
            }
        }
        Ok(())
    }
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
