//! A GPU device against the CPU on one checkpoint, end to end, with the
//! device's speed: `device_parity MODEL.gguf DEVICE [PROMPT_LEN] [STEPS]`
//! (`graphc_tests::device_parity`; `tools/device-check` runs it on
//! checkpoints of SmolLM2's and Gemma 3's shapes with made-up weights).
//! Prints the distances and speeds either way; exits non-zero when a step
//! was past its bound.

use graphc_tests::device_parity::{run, MAX_RELATIVE_DIFF, ORACLE_FACTOR};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, device, rest @ ..] = &args[..] else {
        eprintln!("usage: device_parity MODEL.gguf DEVICE [PROMPT_LEN] [STEPS]");
        std::process::exit(2);
    };
    let number = |i: usize, default: usize| {
        rest.get(i).map_or(default, |v| {
            v.parse().unwrap_or_else(|e| {
                eprintln!("device_parity: `{v}`: {e}");
                std::process::exit(2)
            })
        })
    };
    let (prompt_len, steps) = (number(0, 256), number(1, 64));
    match run(std::path::Path::new(model), device, prompt_len, steps) {
        Ok(r) => {
            let t = &r.tightest;
            println!("{model}: cpu ({}) against {device} ({})", r.sides.0, r.sides.1);
            println!(
                "parity: tightest at {}: {device} {:.2e} from the oracle (bound {:.2e}: {MAX_RELATIVE_DIFF:e}, or {ORACLE_FACTOR} x the fast CPU's {:.2e}); {device} against the fast CPU at most {:.2e}, over the prefill and {steps} decode steps",
                t.step, t.device_vs_oracle, t.bound, t.fast_vs_oracle, r.worst
            );
            println!(
                "speed on {device}: prefill {prompt_len} tokens {:.1} tok/s, decode {:.1} tok/s (context {prompt_len}..{})",
                r.prefill_tok_s,
                r.decode_tok_s,
                prompt_len + steps
            );
            println!("speed on cpu ({}, this machine's cores): prefill {:.1} tok/s, decode {:.1} tok/s", r.sides.0, r.cpu_tok_s.0, r.cpu_tok_s.1);
            let counts: Vec<String> = r.device_counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
            println!("device counters after decoding: {}", counts.join(", "));
            if let Some(failure) = r.failure {
                eprintln!("device_parity: {model} on {device}: {failure}");
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("device_parity: {model} on {device}: {e}");
            std::process::exit(1);
        }
    }
}
