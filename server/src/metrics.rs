//! What an operator scrapes (`GET /metrics`, Prometheus text format):
//! requests by outcome, queue depth, slots in use, tokens, and a time to
//! first token histogram. Plain atomics: the engine thread and the HTTP
//! tasks write them, a scrape reads them.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Upper bounds (seconds) of the time-to-first-token buckets.
const TTFT_BUCKETS: [f64; 10] = [0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Default)]
pub struct Metrics {
    pub slots: AtomicUsize,
    pub slots_busy: AtomicUsize,
    /// Requests handed to the engine and not yet in a slot.
    pub waiting: AtomicUsize,
    pub in_flight: AtomicUsize,
    pub requests_ok: AtomicU64,
    pub requests_client_error: AtomicU64,
    pub requests_rejected_full: AtomicU64,
    pub requests_failed: AtomicU64,
    pub requests_cancelled: AtomicU64,
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens found in a slot's cache (the prompt cache) and not run.
    pub prompt_tokens_cached: AtomicU64,
    pub completion_tokens: AtomicU64,
    pub steps: AtomicU64,
    ttft_buckets: [AtomicU64; TTFT_BUCKETS.len()],
    ttft_count: AtomicU64,
    ttft_sum_us: AtomicU64,
}

impl Metrics {
    pub fn observe_ttft(&self, secs: f64) {
        for (b, &le) in self.ttft_buckets.iter().zip(&TTFT_BUCKETS) {
            if secs <= le {
                b.fetch_add(1, Relaxed);
            }
        }
        self.ttft_count.fetch_add(1, Relaxed);
        self.ttft_sum_us.fetch_add((secs * 1e6) as u64, Relaxed);
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, f64)]| {
            let _ = writeln!(s, "# HELP graphc_{name} {help}\n# TYPE graphc_{name} {kind}");
            for (labels, v) in samples {
                let _ = writeln!(s, "graphc_{name}{labels} {v}");
            }
        };
        let g = |a: &AtomicUsize| a.load(Relaxed) as f64;
        let c = |a: &AtomicU64| a.load(Relaxed) as f64;
        metric("slots", "gauge", "Requests the batch runs at once.", &[("", g(&self.slots))]);
        metric("slots_busy", "gauge", "Slots running a request.", &[("", g(&self.slots_busy))]);
        metric("queue_depth", "gauge", "Requests waiting for a slot.", &[("", g(&self.waiting))]);
        metric("requests_in_flight", "gauge", "Requests being answered.", &[("", g(&self.in_flight))]);
        metric(
            "requests_total",
            "counter",
            "Requests by outcome.",
            &[
                ("{outcome=\"ok\"}", c(&self.requests_ok)),
                ("{outcome=\"client_error\"}", c(&self.requests_client_error)),
                ("{outcome=\"queue_full\"}", c(&self.requests_rejected_full)),
                ("{outcome=\"failed\"}", c(&self.requests_failed)),
                ("{outcome=\"cancelled\"}", c(&self.requests_cancelled)),
            ],
        );
        metric("prompt_tokens_total", "counter", "Prompt tokens of finished requests.", &[("", c(&self.prompt_tokens))]);
        metric(
            "prompt_tokens_cached_total",
            "counter",
            "Prompt tokens taken from a slot's cache, not prefilled again.",
            &[("", c(&self.prompt_tokens_cached))],
        );
        metric("completion_tokens_total", "counter", "Generated tokens of finished requests.", &[("", c(&self.completion_tokens))]);
        metric("engine_steps_total", "counter", "Batch steps run.", &[("", c(&self.steps))]);
        let _ = writeln!(
            s,
            "# HELP graphc_time_to_first_token_seconds From request to first generated token.\n# TYPE graphc_time_to_first_token_seconds histogram"
        );
        for (b, le) in self.ttft_buckets.iter().zip(TTFT_BUCKETS) {
            let _ = writeln!(s, "graphc_time_to_first_token_seconds_bucket{{le=\"{le}\"}} {}", b.load(Relaxed));
        }
        let count = self.ttft_count.load(Relaxed);
        let _ = writeln!(s, "graphc_time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(s, "graphc_time_to_first_token_seconds_sum {}", self.ttft_sum_us.load(Relaxed) as f64 / 1e6);
        let _ = writeln!(s, "graphc_time_to_first_token_seconds_count {count}");
        s
    }
}
