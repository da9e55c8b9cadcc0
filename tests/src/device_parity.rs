//! A GPU device against the CPU on one checkpoint, end to end, with the
//! device's speed (`examples/device_parity.rs`, which `tools/device-check`
//! runs on checkpoints of SmolLM2's and Gemma 3's shapes with made-up
//! weights; `tests/gpu_models.rs` runs it on lavapipe in CI). Teacher-forced:
//! both sides are fed the CPU's greedy tokens, so a near-tie cannot make
//! them diverge.

use graphc::sampling::argmax;
use graphc::{CompileOptions, Model, Session, SessionOptions};
use std::time::Instant;

/// The GPU tests' bound on the real checkpoints is 5e-4 on logits of ~20
/// (2.5e-5 relative, measured 2e-6 relative there); made-up weights give
/// flatter, larger-magnitude logits, so this allows 4x that, relative.
pub const MAX_RELATIVE_DIFF: f32 = 1e-4;

pub struct Report {
    /// The CPU kernels and the device, as the sessions name them.
    pub sides: (String, String),
    /// Largest max |Δlogit| / max |logit| over the prefill and every step.
    pub worst: f32,
    pub prefill_tok_s: f64,
    /// Over the decode steps after the first two (which load kernels).
    pub decode_tok_s: f64,
    /// The device session's counters after the last decode step (launches
    /// a step, fused groups, replayed steps).
    pub device_counts: std::collections::BTreeMap<&'static str, u64>,
}

/// Prefills `prompt_len` spread-out ids, then decodes `steps` tokens, on
/// the CPU and on `device`; an error names the first step past
/// [`MAX_RELATIVE_DIFF`].
pub fn run(model: &std::path::Path, device: &str, prompt_len: usize, steps: usize) -> Result<Report, String> {
    let max_seq = Some(prompt_len + steps + 1);
    let compile = |device: &str| {
        let opts = CompileOptions { device: Some(device.into()), max_seq, ..Default::default() };
        Model::compile(model, &opts, None).map_err(|e| format!("compiling {} for {device}: {e}", model.display()))
    };
    let (cpu, gpu) = (compile("cpu")?, compile(device)?);
    let (mut cpu_session, mut gpu_session) = (session(&cpu)?, session(&gpu)?);
    let sides = (cpu_session.resolved().kernels.clone(), gpu_session.resolved().kernels.clone());

    // The vocabulary is the logits' length.
    let vocab = session(&cpu)?.prefill(&[1]).map_err(|e| e.to_string())?.len() as u64;
    let prompt: Vec<u32> = (0..prompt_len as u64).map(|i| ((i * 7919 + 13) % vocab) as u32).collect();
    let mut cpu_logits = cpu_session.prefill(&prompt).map_err(|e| e.to_string())?;
    let mut gpu_logits = gpu_session.prefill(&prompt).map_err(|e| e.to_string())?;

    let mut worst = 0f32;
    let mut check = |step: &str, cpu: &[f32], gpu: &[f32]| -> Result<(), String> {
        let scale = cpu.iter().fold(0f32, |m, x| m.max(x.abs())).max(1.0);
        let diff = cpu.iter().zip(gpu).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max) / scale;
        if cpu.len() != gpu.len() || !diff.is_finite() || diff > MAX_RELATIVE_DIFF {
            return Err(format!("{step}: max |Δlogit| / max |logit| = {diff:e} > {MAX_RELATIVE_DIFF:e} (max |logit| {scale})"));
        }
        worst = worst.max(diff);
        Ok(())
    };
    check("prefill", &cpu_logits, &gpu_logits)?;
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
    let device_counts = gpu_session.kernel_counts();
    // Prefill timed in a second session: its kernels are compiled already.
    let mut again = session(&gpu)?;
    let t = Instant::now();
    again.prefill(&prompt).map_err(|e| e.to_string())?;
    let prefill_tok_s = prompt_len as f64 / t.elapsed().as_secs_f64();
    let decode_tok_s = if timed > 0 { timed as f64 / decode_s } else { f64::NAN };
    Ok(Report { sides, worst, prefill_tok_s, decode_tok_s, device_counts })
}

fn session(model: &Model) -> Result<Session<'_>, String> {
    model.session(&SessionOptions::default()).map_err(|e| e.to_string())
}
