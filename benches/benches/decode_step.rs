//! Decode step time on SmolLM2 (default session: the fast CPU backend) at
//! contexts 128, 1024 and 2048, with the
//! `kv_append` pass on and off (criterion). The cache is filled with
//! `Session::assume_cached` (zero keys and values: the same arithmetic as a
//! real prefill, without spending minutes on one). `graphc bench` prints the
//! same comparison as one table with the on/off ratio.
//!
//!     bash tools/setup.sh && cargo bench -p graphc-benches

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use graphc::{CompileOptions, Model, SessionOptions};

const CONTEXTS: [usize; 3] = [128, 1024, 2048];

fn decode_step(c: &mut Criterion) {
    let path = graphc_tests::smollm2();
    let compile = |disabled: &[&str]| {
        let opts = CompileOptions { max_seq: Some(4096), disabled_passes: disabled.iter().map(|s| s.to_string()).collect(), ..Default::default() };
        Model::compile(&path, &opts, None).unwrap()
    };
    let models = [("kv_append_on", compile(&[])), ("kv_append_off", compile(&["kv_append"]))];
    let mut group = c.benchmark_group("smollm2_decode_step");
    group.sample_size(10);
    for (label, model) in &models {
        for ctx in CONTEXTS {
            let mut s = model.session(&SessionOptions::default()).unwrap();
            s.assume_cached(ctx).unwrap();
            group.bench_with_input(BenchmarkId::new(*label, ctx), &ctx, |b, &ctx| {
                // Only the step is timed; refilling the cache to `ctx` is not.
                b.iter_custom(|iters| {
                    let mut total = std::time::Duration::ZERO;
                    for _ in 0..iters {
                        s.assume_cached(ctx).unwrap();
                        let t0 = std::time::Instant::now();
                        s.decode(1).unwrap();
                        total += t0.elapsed();
                    }
                    total
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, decode_step);
criterion_main!(benches);
