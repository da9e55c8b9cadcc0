//! Each fused kernel class of the fast CPU backend, in bytes/s, beside the
//! machine's memory read bandwidth measured in the same run (`bandwidth`):
//! decode streams every weight once per token, so a matrix-vector product
//! that reads weights at the bandwidth is as fast as the machine allows.
//!
//!     cargo bench -p graphc-benches --bench kernels
//!     GRAPHC_BENCH_ISA=avx2 cargo bench ...   (one instruction set only)
//!
//! Threads: the machine's cores (or `GRAPHC_BENCH_THREADS`), as `graphc run`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use graphc_backends::cpu::fast::{attention, matmul};
use graphc_backends::cpu::pool::SpinPool;
use graphc_backends::cpu::simd::Isa;
use graphc_backends::WeightRef;
use graphc_ir::DType;
use std::hint::black_box;

/// Weights bigger than the last-level cache (32 MiB on the 2-core Zen 4
/// box the README's figures come from): 64 Mi elements of each type.
const ROWS: usize = 65536 / ROWS_DIV;
const ROWS_DIV: usize = 1;
const K: usize = 1024;

fn isas() -> Vec<Isa> {
    match std::env::var("GRAPHC_BENCH_ISA") {
        Ok(s) => vec![Isa::from_name(&s).expect("GRAPHC_BENCH_ISA: portable, avx2 or avx512")],
        Err(_) => Isa::ALL.into_iter().filter(|i| i.available()).collect(),
    }
}

fn pool() -> SpinPool {
    let default = std::thread::available_parallelism().map_or(1, |n| n.get());
    SpinPool::new(std::env::var("GRAPHC_BENCH_THREADS").ok().and_then(|s| s.parse().ok()).unwrap_or(default))
}

fn pseudo_bytes(n: usize) -> Vec<u8> {
    let mut s = 0x2545F4914F6CDD1Du64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Keep every f16 field finite: clear the exponent's top bit.
            (s as u8) & 0xBF
        })
        .collect()
}

fn bandwidth(c: &mut Criterion) {
    let data = vec![1u64; 512 << 20 >> 3];
    let mut g = c.benchmark_group("bandwidth");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((data.len() * 8) as u64));
    g.bench_function("read_512MiB", |b| {
        b.iter(|| {
            use rayon::prelude::*;
            black_box(data.par_chunks(1 << 16).map(|c| c.iter().fold(0u64, |a, &v| a ^ v)).reduce(|| 0, |a, b| a ^ b))
        })
    });
    g.finish();
}

fn matvec(c: &mut Criterion) {
    let pool = pool();
    let mut g = c.benchmark_group("matvec_64Mi");
    g.sample_size(10);
    let x: Vec<f32> = (0..K).map(|i| (i as f32 * 0.37).sin()).collect();
    let types = [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4K, DType::Q5K, DType::Q6K, DType::F16];
    let newer = [
        DType::Q5_1,
        DType::Q2K,
        DType::Q3K,
        DType::IQ4NL,
        DType::IQ4XS,
        DType::IQ2XXS,
        DType::IQ2XS,
        DType::IQ2S,
        DType::IQ3XXS,
        DType::IQ3S,
        DType::IQ1S,
        DType::IQ1M,
    ];
    for dtype in types.into_iter().chain(newer) {
        let bytes = pseudo_bytes(dtype.storage_bytes((ROWS * K) as u64).unwrap() as usize);
        let shape = [ROWS, K];
        let w = WeightRef { dtype, shape: &shape, bytes: &bytes };
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        for isa in isas() {
            g.bench_with_input(BenchmarkId::new(dtype.name(), isa.name()), &isa, |b, &isa| {
                b.iter(|| black_box(matmul::matmul(&pool, isa, &x, 1, K, w)))
            });
        }
    }
    g.finish();
}

/// The row kernels' own rate, on one thread, with the weights in the
/// core's L2 (512 rows of 896, Qwen2.5's width, or of 1024 for the 256-element
/// blocks: about 250–550 KiB): what a
/// kernel costs in instructions, apart from memory. Beside `matvec_64Mi`
/// (from memory, all threads) it tells a kernel that waits on memory from
/// one that waits on its own arithmetic.
fn matvec_hot(c: &mut Criterion) {
    let pool = SpinPool::new(1);
    let mut g = c.benchmark_group("matvec_hot_1thread");
    g.sample_size(20);
    for dtype in [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4K, DType::Q6K] {
        let (n, k) = (512, if dtype.block_elems() == 256 { 1024 } else { 896 });
        let x: Vec<f32> = (0..k).map(|i| (i as f32 * 0.37).sin()).collect();
        let bytes = pseudo_bytes(dtype.storage_bytes((n * k) as u64).unwrap() as usize);
        let shape = [n, k];
        let w = WeightRef { dtype, shape: &shape, bytes: &bytes };
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        for isa in isas() {
            g.bench_with_input(BenchmarkId::new(dtype.name(), isa.name()), &isa, |b, &isa| {
                b.iter(|| black_box(matmul::matmul(&pool, isa, &x, 1, k, w)))
            });
        }
    }
    g.finish();
}

/// The output matrices of Gemma 3 (262144 × 640, tied, q8_0: 178 MB, half
/// its decode step) and Qwen2.5-0.5B (151936 × 896, q8_0: 145 MB, a quarter
/// of its step): short rows, so a row's fixed costs (its reduction, the
/// task split) weigh more than in `matvec_64Mi`'s 1024-wide rows.
fn matvec_output(c: &mut Criterion) {
    let pool = pool();
    let mut g = c.benchmark_group("matvec_output");
    g.sample_size(10);
    for (name, n, k) in [("gemma3", 262144 / ROWS_DIV, 640), ("qwen25", 151936 / ROWS_DIV, 896)] {
        let x: Vec<f32> = (0..k).map(|i| (i as f32 * 0.37).sin()).collect();
        let bytes = pseudo_bytes(DType::Q8_0.storage_bytes((n * k) as u64).unwrap() as usize);
        let shape = [n, k];
        let w = WeightRef { dtype: DType::Q8_0, shape: &shape, bytes: &bytes };
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        for isa in isas() {
            g.bench_with_input(BenchmarkId::new(format!("{name}_q8_0"), isa.name()), &isa, |b, &isa| {
                b.iter(|| black_box(matmul::matmul(&pool, isa, &x, 1, k, w)))
            });
        }
    }
    g.finish();
}

/// Gemma 3's layer projections as a decode step meets them: from memory,
/// not cache (each iteration reads the next of enough copies to fill 64
/// MiB, visited 7 apart so that one copy's end does not run into the
/// next one's start as a single stream). Small matrices are where a task split that starts many cold row
/// streams shows (`matmul`'s `MATVEC_TASK_BYTES`).
fn matvec_cold(c: &mut Criterion) {
    let pool = pool();
    let mut g = c.benchmark_group("matvec_cold");
    g.sample_size(10);
    let isa = isas().into_iter().max().expect("one ISA");
    for (dtype, n, k) in
        [(DType::Q5_0, 256, 640), (DType::Q5_0, 1024, 640), (DType::Q5_0, 2048, 640), (DType::Q4K, 640, 1024), (DType::Q6K, 640, 2048)]
    {
        let rb = dtype.storage_bytes((n * k) as u64).unwrap() as usize;
        let copies = ((64 << 20) / rb + 1) | 1;
        let copies = if copies.is_multiple_of(7) { copies + 2 } else { copies };
        let bytes = pseudo_bytes(rb * copies);
        let x: Vec<f32> = (0..k).map(|i| (i as f32 * 0.37).sin()).collect();
        let shape = [n, k];
        g.throughput(Throughput::Bytes(rb as u64));
        let mut next = 0;
        g.bench_function(BenchmarkId::new(format!("{}_{n}x{k}", dtype.name()), isa.name()), |b| {
            b.iter(|| {
                next = (next + 7) % copies;
                let w = WeightRef { dtype, shape: &shape, bytes: &bytes[next * rb..(next + 1) * rb] };
                black_box(matmul::matmul(&pool, isa, &x, 1, k, w))
            })
        });
    }
    g.finish();
}

fn prefill_tile(c: &mut Criterion) {
    let pool = pool();
    // A SmolLM2-sized projection (1536 × 576, q4_1) over 512 tokens.
    let (n, k, m) = (1536, 576, 512);
    let bytes = pseudo_bytes(DType::Q4_1.storage_bytes((n * k) as u64).unwrap() as usize);
    let shape = [n, k];
    let w = WeightRef { dtype: DType::Q4_1, shape: &shape, bytes: &bytes };
    let x: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.11).cos()).collect();
    let mut g = c.benchmark_group("matmul_tiled_512x576x1536");
    g.sample_size(10);
    g.throughput(Throughput::Elements((2 * n * k * m) as u64)); // flops
    for isa in isas() {
        g.bench_with_input(BenchmarkId::from_parameter(isa.name()), &isa, |b, &isa| b.iter(|| black_box(matmul::matmul(&pool, isa, &x, m, k, w))));
    }
    g.finish();
}

fn decode_attention(c: &mut Criterion) {
    let pool = pool();
    // SmolLM2's shape: 9 query heads on 3 kv heads of 64, one query at
    // position 1023 over a cache of capacity 2048.
    let sh = attention::AttentionShape { batch: 1, n_heads: 9, n_kv_heads: 3, seq: 1, keys: 2048, head_dim: 64, v_dim: 64 };
    let pr = attention::AttentionParams { scale: 0.125, causal: true, window: None, softcap: None, ring: false };
    let q = vec![0.1f32; 9 * 64];
    let kv: Vec<f32> = (0..3 * 2048 * 64).map(|i| (i as f32 * 0.01).sin()).collect();
    let mut g = c.benchmark_group("attention_decode_ctx1024");
    g.sample_size(20);
    g.throughput(Throughput::Bytes((2 * 3 * 1024 * 64 * 4) as u64)); // K and V rows read
    for isa in isas() {
        g.bench_with_input(BenchmarkId::from_parameter(isa.name()), &isa, |b, &isa| {
            b.iter(|| {
                black_box(attention::attention(
                    &pool,
                    isa,
                    &sh,
                    &pr,
                    &attention::AttentionInputs { q: &q, k: &kv, v: &kv, pos: &[1023], sinks: None },
                ))
            })
        });
    }
    g.finish();
}

/// `norm_rope` (q/k norm + heads-major transpose + rope in one pass) beside
/// the three unfused kernels it replaces, on Gemma 3's query shape for a
/// 256-token prefill chunk (4 heads of 256); bytes are one read of `x` and
/// one write of the output.
fn norm_rope(c: &mut Criterion) {
    use graphc_backends::cpu::exec::{Arg, Env, Evaluator, Val};
    use graphc_backends::cpu::fast::Fast;
    use graphc_backends::Tensor;
    use graphc_ir::op::{NormKind, Op, RopeScaling, RopeStyle};
    let threads = std::env::var("GRAPHC_BENCH_THREADS").ok().and_then(|s| s.parse().ok());
    let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let (s, h, d) = (256, 4, 256);
    let x = Val::T(Tensor::f32(vec![1, s, h, d], (0..s * h * d).map(|i| (i as f32 * 0.37).sin()).collect()));
    let w = Val::T(Tensor::f32(vec![d], (0..d).map(|i| 1.0 + i as f32 / d as f32).collect()));
    let pos = Val::T(Tensor::i32(vec![1, s], (0..s as i32).collect()));
    let (style, theta, eps) = (RopeStyle::Neox, 10000.0, 1e-6);
    let fused = Op::NormRope { eps, style, rotary_dim: d, theta, scaling: RopeScaling::None };
    let norm = Op::Norm { kind: NormKind::Rms, eps };
    let permute = Op::Permute { perm: vec![0, 2, 1, 3] };
    let rope = Op::Rope { style, rotary_dim: d, theta, scaling: RopeScaling::None };
    let env = Env::new();
    let mut g = c.benchmark_group("norm_rope_4x256_s256");
    g.sample_size(30);
    g.throughput(Throughput::Bytes((2 * s * h * d * 4) as u64));
    for isa in isas() {
        let fast = Fast::new(isa, threads).expect("available ISA");
        g.bench_with_input(BenchmarkId::new("fused", isa.name()), &isa, |b, _| {
            b.iter(|| black_box(fast.eval(&fused, vec![Arg::Ref(&x), Arg::Ref(&w), Arg::Ref(&pos)], &env).unwrap()))
        });
        g.bench_with_input(BenchmarkId::new("unfused", isa.name()), &isa, |b, _| {
            b.iter(|| {
                let normed = fast.eval(&norm, vec![Arg::Ref(&x), Arg::Ref(&w)], &env).unwrap();
                let heads_major = fast.eval(&permute, vec![Arg::Own(Val::T(normed))], &env).unwrap();
                black_box(fast.eval(&rope, vec![Arg::Own(Val::T(heads_major)), Arg::Ref(&pos)], &env).unwrap())
            })
        });
    }
    g.finish();
}

/// RMSNorm and the fused GLU (SwiGLU, GeGLU) over a 256-token prefill chunk
/// of Gemma 3's widths (hidden 640, FFN 2048): bytes read and written.
fn norm_and_glu(c: &mut Criterion) {
    use criterion::BatchSize;
    use graphc_backends::cpu::exec::{Arg, Env, Evaluator, Val};
    use graphc_backends::cpu::fast::Fast;
    use graphc_backends::Tensor;
    use graphc_ir::op::{NormKind, Op, UnaryOp};
    let threads = std::env::var("GRAPHC_BENCH_THREADS").ok().and_then(|s| s.parse().ok());
    let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let (s, hidden, ffn) = (256, 640, 2048);
    let x = Val::T(Tensor::f32(vec![s, hidden], (0..s * hidden).map(|i| (i as f32 * 0.37).sin()).collect()));
    let w = Val::T(Tensor::f32(vec![hidden], (0..hidden).map(|i| 1.0 + i as f32 / hidden as f32).collect()));
    let gate = Tensor::f32(vec![s, ffn], (0..s * ffn).map(|i| (i as f32 * 0.11).cos() * 3.0).collect());
    let up = Val::T(Tensor::f32(vec![s, ffn], (0..s * ffn).map(|i| (i as f32 * 0.07).sin()).collect()));
    let env = Env::new();
    let mut g = c.benchmark_group("norm_glu_s256");
    g.sample_size(30);
    for isa in isas() {
        let fast = Fast::new(isa, threads).expect("available ISA");
        g.throughput(Throughput::Bytes((2 * s * hidden * 4) as u64));
        g.bench_with_input(BenchmarkId::new("rms_norm_640", isa.name()), &isa, |b, _| {
            b.iter(|| black_box(fast.eval(&Op::Norm { kind: NormKind::Rms, eps: 1e-6 }, vec![Arg::Ref(&x), Arg::Ref(&w)], &env).unwrap()))
        });
        g.throughput(Throughput::Bytes((3 * s * ffn * 4) as u64));
        for (name, act) in [("swiglu_2048", UnaryOp::Silu), ("geglu_2048", UnaryOp::GeluTanh)] {
            g.bench_with_input(BenchmarkId::new(name, isa.name()), &isa, |b, _| {
                b.iter_batched(
                    || gate.clone(),
                    |gate| black_box(fast.eval(&Op::Glu { act }, vec![Arg::Own(Val::T(gate)), Arg::Ref(&up)], &env).unwrap()),
                    BatchSize::LargeInput,
                )
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bandwidth, matvec, matvec_hot, matvec_output, matvec_cold, prefill_tile, decode_attention, norm_rope, norm_and_glu);
criterion_main!(benches);
