//! A GPU device against the CPU on one checkpoint, end to end, with the
//! device's speed: `device_parity MODEL.gguf DEVICE [PROMPT_LEN] [STEPS]`.
//!
//! For machines the real checkpoints cannot reach: `tools/device-check`
//! runs it on checkpoints of SmolLM2's and Gemma 3's exact shapes with
//! made-up weights (`tools/synth-gguf.py`), so the graph, the kernels and
//! the bytes moved are the real ones. Teacher-forced: both sides are fed
//! the CPU's greedy tokens, so a near-tie cannot make them diverge. Prints
//! max |Δlogit| of the prefill and of every decode step, relative to the
//! largest |logit|, and exits non-zero above `MAX_RELATIVE_DIFF`; then the
//! device's prefill and decode tok/s.

use graphc::sampling::argmax;
use graphc::{CompileOptions, Model, SessionOptions};
use std::time::Instant;

/// The GPU tests' bound on the real checkpoints is 5e-4 on logits of ~20
/// (2.5e-5 relative, measured 2e-6 relative there); made-up weights give
/// flatter, larger-magnitude logits, so this allows 4x that, relative.
const MAX_RELATIVE_DIFF: f32 = 1e-4;

fn main() {
    if let Err(e) = run() {
        eprintln!("device_parity: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, device, rest @ ..] = &args[..] else {
        return Err("usage: device_parity MODEL.gguf DEVICE [PROMPT_LEN] [STEPS]".into());
    };
    let number = |i: usize, default: usize| rest.get(i).map_or(Ok(default), |v| v.parse().map_err(|e| format!("`{v}`: {e}")));
    let (prompt_len, steps) = (number(0, 256)?, number(1, 64)?);
    let max_seq = Some(prompt_len + steps + 1);
    let compile = |device: &str| {
        let opts = CompileOptions { device: Some(device.into()), max_seq, ..Default::default() };
        Model::compile(std::path::Path::new(model), &opts, None).map_err(|e| format!("compiling {model} for {device}: {e}"))
    };
    let cpu = compile("cpu")?;
    let gpu = compile(device)?;
    let mut cpu_session = cpu.session(&SessionOptions::default()).map_err(|e| e.to_string())?;
    let mut gpu_session = gpu.session(&SessionOptions::default()).map_err(|e| e.to_string())?;
    println!("{model}: cpu ({}) against {device} ({})", cpu_session.resolved().kernels, gpu_session.resolved().kernels);

    // Spread-out ids (any ids are valid tokens).
    let mut cpu_logits = cpu_session.prefill(&[1]).map_err(|e| e.to_string())?;
    let vocab = cpu_logits.len() as u64;
    let prompt: Vec<u32> = (0..prompt_len as u64).map(|i| ((i * 7919 + 13) % vocab) as u32).collect();
    cpu_session = cpu.session(&SessionOptions::default()).map_err(|e| e.to_string())?;
    cpu_logits = cpu_session.prefill(&prompt).map_err(|e| e.to_string())?;
    let mut gpu_logits = gpu_session.prefill(&prompt).map_err(|e| e.to_string())?;

    let mut worst = 0f32;
    let mut check = |step: &str, cpu: &[f32], gpu: &[f32]| -> Result<(), String> {
        let scale = cpu.iter().fold(0f32, |m, x| m.max(x.abs())).max(1.0);
        let diff = cpu.iter().zip(gpu).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max) / scale;
        if !diff.is_finite() || diff > MAX_RELATIVE_DIFF {
            return Err(format!("{step}: max |Δlogit| / max |logit| = {diff:e} > {MAX_RELATIVE_DIFF:e} (max |logit| {scale})"));
        }
        worst = worst.max(diff);
        Ok(())
    };
    check("prefill", &cpu_logits, &gpu_logits)?;
    // Decode steps after the first two are timed (those load the decode
    // kernels).
    let (mut decode_s, mut timed) = (0.0, 0);
    for step in 0..steps {
        let token = argmax(&cpu_logits);
        cpu_logits = cpu_session.decode(token).map_err(|e| e.to_string())?;
        let t = Instant::now();
        gpu_logits = gpu_session.decode(token).map_err(|e| e.to_string())?;
        if step >= 2 {
            decode_s += t.elapsed().as_secs_f64();
            timed += 1;
        }
        check(&format!("decode step {step}"), &cpu_logits, &gpu_logits)?;
    }
    println!("parity: max |Δlogit| / max |logit| over the prefill and {steps} decode steps = {worst:.2e} (bound {MAX_RELATIVE_DIFF:e})");
    // Prefill timed in a second session: its kernels are compiled already.
    let mut again = gpu.session(&SessionOptions::default()).map_err(|e| e.to_string())?;
    let t = Instant::now();
    again.prefill(&prompt).map_err(|e| e.to_string())?;
    let prefill_s = t.elapsed().as_secs_f64();
    println!(
        "speed on {device}: prefill {prompt_len} tokens {:.1} tok/s, decode {:.1} tok/s ({timed} steps at context {}..{})",
        prompt_len as f64 / prefill_s,
        timed as f64 / decode_s,
        prompt_len + 2,
        prompt_len + steps
    );
    Ok(())
}
