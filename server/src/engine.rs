//! The engine thread: owns the batch session (a `Batcher`), takes requests
//! from the HTTP side between steps, and steps while there is work. It
//! blocks only when idle, and ends when every sender is gone and the last
//! request is answered (how shutdown drains).

use crate::metrics::Metrics;
use graphc_runtime::batcher::{Batcher, BatcherOptions, Event, Limits, Request};
use graphc_runtime::Model;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::sync::Arc;

/// Start the engine; returns the request channel, what a request must fit
/// and whether the prompt cache is on.
/// A started engine: where requests go, what it resolved, its thread.
pub struct Started {
    pub jobs: mpsc::Sender<Request>,
    pub limits: Limits,
    /// Whether slots reuse their cached prefix of a prompt (`BatcherOptions::prompt_cache` resolved).
    pub prompt_cache: bool,
    pub thread: std::thread::JoinHandle<()>,
}

pub fn start(model: Arc<Model>, opts: BatcherOptions, metrics: Arc<Metrics>) -> Result<Started, graphc_runtime::Error> {
    let (jobs, rx) = mpsc::channel::<Request>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("graphc-engine".into())
        .spawn(move || {
            let mut batcher = match Batcher::new(&model, &opts) {
                Ok(b) => b,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let limits = batcher.limits();
            let _ = ready_tx.send(Ok((limits, batcher.prompt_cache())));
            metrics.slots.store(opts.slots, Relaxed);
            run(&mut batcher, limits, &rx, &metrics);
        })
        .map_err(|e| graphc_runtime::Error::Option(format!("cannot start the engine thread: {e}")))?;
    let (limits, prompt_cache) = ready_rx.recv().map_err(|_| graphc_runtime::Error::Option("the engine thread died while starting".into()))??;
    Ok(Started { jobs, limits, prompt_cache, thread })
}

fn run(batcher: &mut Batcher, limits: Limits, rx: &mpsc::Receiver<Request>, metrics: &Arc<Metrics>) {
    let mut open = true;
    loop {
        if batcher.is_idle() {
            if !open {
                return;
            }
            match rx.recv() {
                Ok(r) => take(batcher, limits, r, metrics),
                Err(_) => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(r) => take(batcher, limits, r, metrics),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        let report = batcher.step();
        metrics.slots_busy.store(batcher.busy_slots(), Relaxed);
        metrics.steps.fetch_add(1, Relaxed);
        metrics.requests_cancelled.fetch_add(report.cancelled as u64, Relaxed);
        metrics.prompt_tokens_cached.fetch_add(report.reused_tokens as u64, Relaxed);
    }
}

/// Queue a request, or fail it where it does not fit (the HTTP side checks
/// first; this is the engine not trusting it).
fn take(batcher: &mut Batcher, limits: Limits, mut r: Request, metrics: &Arc<Metrics>) {
    if let Err(e) = limits.check(&r.prompt) {
        metrics.waiting.fetch_sub(1, Relaxed);
        (r.sink)(Event::Failed(e.to_string()));
        return;
    }
    // It stops waiting the moment it is admitted, before its prompt runs,
    // not when the step that admitted it ends: by then its first tokens
    // are streaming, and a request arriving meanwhile must not find the
    // queue full of it.
    let (waiting, mut sink) = (metrics.clone(), r.sink);
    r.sink = Box::new(move |e| {
        if matches!(e, Event::Admitted) {
            waiting.waiting.fetch_sub(1, Relaxed);
        }
        sink(e)
    });
    batcher.submit(r).expect("checked against the same limits");
}
