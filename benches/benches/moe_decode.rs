//! Sparse MoE dispatch (the `moe_dispatch` pass) against the dense form,
//! on a Mixtral-shaped checkpoint made here: hidden 1024, 16 heads on 4 kv
//! heads, 8 experts of 1792, 2 a token, 4 layers, every matrix q8_0 with
//! made-up values (about 200 MB). A decode step at context 128 and a
//! 64-token prefill, with the pass on and off (criterion): the dense form
//! runs every expert, the dispatched one the two routed ones.
//!
//!     cargo bench -p graphc-benches --bench moe_decode

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use graphc::{CompileOptions, Model, SessionOptions};
use graphc_tests::{GgufWriter, Meta};

const D: u64 = 1024;
const FFN: u64 = 1792;
const EXPERTS: u64 = 8;
const LAYERS: u32 = 4;
const VOCAB: u64 = 2048;
const KV: u64 = 4 * 64;

/// q8_0 bytes for `n` elements: small f16 scales, pseudo-random quants.
fn q8_0(n: u64, seed: &mut u64) -> Vec<u8> {
    let mut out = Vec::with_capacity((n / 32 * 34) as usize);
    for _ in 0..n / 32 {
        out.extend(half::f16::from_f32(0.0004).to_le_bytes());
        for _ in 0..32 {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            out.push(*seed as u8);
        }
    }
    out
}

fn mixtral_shaped(dir: &std::path::Path) -> std::path::PathBuf {
    let mut seed = 7u64;
    let mut w = GgufWriter::default()
        .meta("general.architecture", Meta::Str("llama".into()))
        .meta("llama.block_count", Meta::U32(LAYERS))
        .meta("llama.context_length", Meta::U32(4096))
        .meta("llama.embedding_length", Meta::U32(D as u32))
        .meta("llama.feed_forward_length", Meta::U32(FFN as u32))
        .meta("llama.attention.head_count", Meta::U32(16))
        .meta("llama.attention.head_count_kv", Meta::U32(4))
        .meta("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5))
        .meta("llama.rope.freq_base", Meta::F32(1e6))
        .meta("llama.expert_count", Meta::U32(EXPERTS as u32))
        .meta("llama.expert_used_count", Meta::U32(2))
        .meta("llama.vocab_size", Meta::U32(VOCAB as u32));
    let mut q = |w: GgufWriter, name: &str, shape: &[u64]| {
        let bytes = q8_0(shape.iter().product(), &mut seed);
        let mut w = w;
        w.tensors.push((name.into(), shape.to_vec(), 8, bytes));
        w
    };
    w = q(w, "token_embd.weight", &[VOCAB, D]);
    for l in 0..LAYERS {
        let t = |s: &str| format!("blk.{l}.{s}.weight");
        w = w.f32_tensor(&t("attn_norm"), &[D], &vec![1.0; D as usize]).f32_tensor(&t("ffn_norm"), &[D], &vec![1.0; D as usize]);
        w = q(w, &t("attn_q"), &[D, D]);
        w = q(w, &t("attn_k"), &[KV, D]);
        w = q(w, &t("attn_v"), &[KV, D]);
        w = q(w, &t("attn_output"), &[D, D]);
        // The router in f32, spread so routing varies from token to token.
        let router: Vec<f32> = (0..EXPERTS * D).map(|i| ((i * 2654435761 % 2001) as f32 / 1000.0 - 1.0) * 0.5).collect();
        w = w.f32_tensor(&t("ffn_gate_inp"), &[EXPERTS, D], &router);
        w = q(w, &t("ffn_gate_exps"), &[EXPERTS, FFN, D]);
        w = q(w, &t("ffn_up_exps"), &[EXPERTS, FFN, D]);
        w = q(w, &t("ffn_down_exps"), &[EXPERTS, D, FFN]);
    }
    w = w.f32_tensor("output_norm.weight", &[D], &vec![1.0; D as usize]);
    w = q(w, "output.weight", &[VOCAB, D]);
    w.write(dir, "mixtral-shaped.gguf")
}

fn moe(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("graphc-moe-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = mixtral_shaped(&dir);
    let compile = |disabled: &[&str]| {
        let opts = CompileOptions { max_seq: Some(512), disabled_passes: disabled.iter().map(|s| s.to_string()).collect(), ..Default::default() };
        Model::compile(&path, &opts, None).unwrap()
    };
    let models = [("moe_dispatch_on", compile(&[])), ("moe_dispatch_off", compile(&["moe_dispatch"]))];
    let prompt: Vec<u32> = (0..64).map(|i| (i * 37 % VOCAB as u32) + 1).collect();
    let mut group = c.benchmark_group("mixtral_shaped");
    group.sample_size(10);
    for (label, model) in &models {
        let mut s = model.session(&SessionOptions::default()).unwrap();
        group.bench_function(BenchmarkId::new("decode_ctx128", label), |b| {
            b.iter_custom(|iters| {
                let mut total = std::time::Duration::ZERO;
                for _ in 0..iters {
                    s.assume_cached(128).unwrap();
                    let t0 = std::time::Instant::now();
                    s.decode(1).unwrap();
                    total += t0.elapsed();
                }
                total
            })
        });
        group.bench_function(BenchmarkId::new("prefill_64", label), |b| {
            b.iter(|| {
                s.reset();
                s.prefill(&prompt).unwrap()
            })
        });
    }
    group.finish();
    std::fs::remove_dir_all(&dir).ok();
}

criterion_group!(benches, moe);
criterion_main!(benches);
