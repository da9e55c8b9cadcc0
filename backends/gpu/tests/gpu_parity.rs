//! Every kernel class on wgpu (lavapipe in CI) against the CPU reference
//! executor, through the same lowering the runtime uses. Inputs are chosen
//! to separate the right answer from the likely wrong one: odd sizes and
//! rows longer than a workgroup, GQA with n_heads ≠ n_kv_heads, a ragged
//! batch whose rows sit at different positions, more keys than one chunk,
//! every weight block type. Where a plausible bug would still pass a loose
//! comparison, the test also checks the wrong answer is far away.
//!
//! Without a Vulkan adapter these tests print that they skipped, unless
//! `GRAPHC_REQUIRE_WGPU=1` (set by `.ci/run`, which installs lavapipe).
//! With `GRAPHC_TEST_DEVICE=cuda` (and `GRAPHC_CUDA=1`) the same checks run
//! on the CUDA device instead (`tools/gpu-check`); with
//! `GRAPHC_TEST_DEVICE=metal` (and `GRAPHC_METAL=1`) on a Mac's Metal
//! device (`tools/metal-check`).
//!
//! Tolerance: the GPU sums in a different order (tree reductions, online
//! softmax) and its `exp`/`tanh`/`sin` differ from libm by a few ulps, so
//! results agree to ~1e-6 relative; the bound asserted is 2e-5 of the
//! result's largest magnitude (at least 1). A wrong index or mask moves
//! results by O(0.1) or more.

use graphc_backends::cpu::reference;
use graphc_backends::{Tensor, WeightRef, WeightSource};
use graphc_gpu::cuda_rt::CudaDevice;
use graphc_gpu::device::{Device, OpInput};
use graphc_gpu::run_op::RunOp;
use graphc_gpu::wgpu_rt::WgpuDevice;
use graphc_ir::{text, BinaryOp, DType, NormKind, Op, RopeScaling, RopeStyle, UnaryOp};
use graphc_passes::attention_head::AttentionHead;
use graphc_passes::elementwise_chain::ElementwiseChain;
use graphc_passes::residual_norm::ResidualNorm;
use graphc_passes::{CostModel, Pass};
use half::f16;
use std::collections::HashMap;
use std::sync::OnceLock;

/// The device under test: wgpu, or what `GRAPHC_TEST_DEVICE` names.
enum TestDevice {
    Wgpu(WgpuDevice),
    Cuda(CudaDevice),
    #[cfg(any(target_os = "macos", graphc_metal_typecheck))]
    Metal(graphc_gpu::metal_rt::MetalDevice),
}

impl TestDevice {
    fn run_op(&self, op: &Op, inputs: &[OpInput]) -> Result<Tensor, graphc_gpu::GpuError> {
        match self {
            TestDevice::Wgpu(d) => d.run_op(op, inputs),
            TestDevice::Cuda(d) => d.run_op(op, inputs),
            #[cfg(any(target_os = "macos", graphc_metal_typecheck))]
            TestDevice::Metal(d) => d.run_op(op, inputs),
        }
    }
}

/// What the device under test is told: the test's environment
/// (`GRAPHC_CUDA=1`, `GRAPHC_PTX_CACHE`, ... as `tools/device-check` sets them).
fn settings() -> graphc_gpu::GpuSettings {
    graphc_gpu::GpuSettings::from_env().unwrap_or_else(|e| panic!("{e}"))
}

fn device() -> Option<&'static TestDevice> {
    static DEVICE: OnceLock<Option<TestDevice>> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            if std::env::var("GRAPHC_TEST_DEVICE").as_deref() == Ok("cuda") {
                let d = CudaDevice::new(&settings()).unwrap_or_else(|e| panic!("GRAPHC_TEST_DEVICE=cuda: {e}"));
                eprintln!("CUDA device: {}", d.label());
                return Some(TestDevice::Cuda(d));
            }
            if std::env::var("GRAPHC_TEST_DEVICE").as_deref() == Ok("metal") {
                #[cfg(any(target_os = "macos", graphc_metal_typecheck))]
                {
                    let d = graphc_gpu::metal_rt::MetalDevice::new(&settings()).unwrap_or_else(|e| panic!("GRAPHC_TEST_DEVICE=metal: {e}"));
                    eprintln!("Metal device: {}", d.label());
                    return Some(TestDevice::Metal(d));
                }
                #[cfg(not(any(target_os = "macos", graphc_metal_typecheck)))]
                panic!("GRAPHC_TEST_DEVICE=metal: Metal needs macOS");
            }
            wgpu_device().map(TestDevice::Wgpu)
        })
        .as_ref()
}

/// `graph` on the device under test, through the executor sessions use
/// (`open::open`); `None` where the wgpu tests skip.
fn open_graph(graph: &graphc_ir::Graph, weights: &dyn WeightSource) -> Option<Box<dyn graphc_gpu::exec::DeviceGraph>> {
    device()?;
    let name = match std::env::var("GRAPHC_TEST_DEVICE").as_deref() {
        Ok("cuda") => "cuda",
        Ok("metal") => "metal",
        _ => "wgpu",
    };
    Some(graphc_gpu::open::open(name, graph, weights, &settings()).unwrap_or_else(|e| panic!("{name}: {e}")))
}

fn wgpu_device() -> Option<WgpuDevice> {
    match WgpuDevice::new(&settings()) {
        Ok(d) => {
            eprintln!("wgpu adapter: {}", d.adapter_name);
            Some(d)
        }
        Err(e) if std::env::var("GRAPHC_REQUIRE_WGPU").as_deref() == Ok("1") => {
            panic!("GRAPHC_REQUIRE_WGPU=1 but {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: no wgpu adapter on this machine ({e}); apt-get install mesa-vulkan-drivers for lavapipe");
            None
        }
    }
}

/// Deterministic values in `[lo, hi)`.
fn values(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

fn t(shape: &[usize], seed: u64) -> Tensor {
    Tensor::f32(shape.to_vec(), values(seed, shape.iter().product(), -2.0, 2.0))
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.shape(), b.shape());
    a.as_f32().unwrap().iter().zip(b.as_f32().unwrap()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn assert_close(what: &str, gpu: &Tensor, want: &Tensor) {
    let scale = want.as_f32().unwrap().iter().fold(1f32, |m, v| m.max(v.abs()));
    let d = max_diff(gpu, want);
    assert!(d <= 2e-5 * scale, "{what}: max |gpu - reference| = {d:e} (scale {scale})");
}

/// `gpu` is far from what a plausible bug would give: by more than 1e-2,
/// or by `min` where the two answers are inherently close.
fn assert_separates_by(what: &str, gpu: &Tensor, wrong: &Tensor, min: f32) {
    let d = max_diff(gpu, wrong);
    assert!(d > min, "{what}: the input does not tell the right answer from the wrong one (differ by {d:e})");
}

fn assert_separates(what: &str, gpu: &Tensor, wrong: &Tensor) {
    assert_separates_by(what, gpu, wrong, 1e-2)
}

fn gpu(op: &Op, inputs: &[&Tensor]) -> Option<Tensor> {
    let dev = device()?;
    let args: Vec<OpInput> = inputs.iter().map(|t| OpInput::Tensor(t)).collect();
    Some(dev.run_op(op, &args).unwrap_or_else(|e| panic!("{}: {e}", op.mnemonic())))
}

fn reference_op(op: &Op, inputs: &[&Tensor]) -> Tensor {
    let owned: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
    reference::eval_op(op, &owned).unwrap()
}

fn check(what: &str, op: &Op, inputs: &[&Tensor]) -> Option<Tensor> {
    let got = gpu(op, inputs)?;
    assert_close(what, &got, &reference_op(op, inputs));
    Some(got)
}

#[test]
fn elementwise_unary_and_glu() {
    let x = Tensor::f32(vec![3, 347], values(1, 3 * 347, -30.0, 30.0));
    let up = t(&[3, 347], 2);
    for u in [UnaryOp::Silu, UnaryOp::GeluTanh, UnaryOp::GeluErf, UnaryOp::Softplus, UnaryOp::Sigmoid, UnaryOp::Tanh, UnaryOp::Neg] {
        if check(&format!("unary {u:?}"), &Op::Unary(u), &[&x]).is_none() {
            return;
        }
        check(&format!("glu {u:?}"), &Op::Glu { act: u }, &[&x, &up]);
    }
    // The two GELUs differ by up to ~5e-4 on [-4, 4], where the tolerance
    // is 8e-5: the erf kernel must not be the tanh one.
    let near = Tensor::f32(vec![1000], values(21, 1000, -4.0, 4.0));
    let got = check("gelu_erf near 0", &Op::Unary(UnaryOp::GeluErf), &[&near]).unwrap();
    assert_separates_by("gelu_erf vs gelu_tanh", &got, &reference_op(&Op::Unary(UnaryOp::GeluTanh), &[&near]), 2e-4);
}

/// gpt-oss's clamps (`min(g, 7)`, `clamp(u, -7, 7)`) and a lower bound
/// alone, bit for bit (a max and a min are exact). Controls: a bound
/// dropped, and an absent bound read as its param's placeholder 0.
#[test]
fn clamps_apply_only_their_bounds() {
    let x = Tensor::f32(vec![3, 347], values(31, 3 * 347, -30.0, 30.0));
    let cases =
        [((Some(-7.0), Some(7.0)), (None, Some(7.0))), ((None, Some(7.0)), (Some(0.0), Some(7.0))), ((Some(-2.5), None), (Some(-2.5), Some(0.0)))];
    for ((min, max), (wrong_min, wrong_max)) in cases {
        let op = Op::Clamp { min, max };
        let Some(got) = gpu(&op, &[&x]) else { return };
        assert_eq!(got.as_f32().unwrap(), reference_op(&op, &[&x]).as_f32().unwrap(), "clamp {min:?} {max:?}");
        let wrong = Op::Clamp { min: wrong_min, max: wrong_max };
        assert_separates(&format!("clamp {min:?} {max:?}: its bounds only"), &got, &reference_op(&wrong, &[&x]));
    }
}

/// Where `tanh` saturates: ±1 (and GELU-tanh `x` or -0) exactly, as in
/// f32 on the CPU. A target's fast `tanh` (Metal's default) overflows to
/// NaN here unless the kernel guards it (`kir::tanh`); lavapipe's does not,
/// so this guards the other targets (`tools/gpu-check`, `tools/metal-check`).
#[test]
fn tanh_saturates_without_nan() {
    let extremes: Vec<f32> = [9.5f32, 15.5, 40.0, 90.0, 1e4, 1e30].iter().flat_map(|&v| [v, -v]).collect();
    let x = Tensor::f32(vec![extremes.len()], extremes);
    for u in [UnaryOp::Tanh, UnaryOp::GeluTanh] {
        let Some(got) = gpu(&Op::Unary(u), &[&x]) else { return };
        let want = reference_op(&Op::Unary(u), &[&x]);
        assert_eq!(got.as_f32().unwrap(), want.as_f32().unwrap(), "{u:?} at {:?}", x.as_f32().unwrap());
    }
    let row = Tensor::f32(vec![1, 4], vec![1e4, -1e4, 0.5, 90.0]);
    check("softmax softcap at the extremes", &Op::Softmax { axis: 1, softcap: Some(5.0) }, &[&row]);
}

#[test]
fn elementwise_binary_broadcasts() {
    let a = t(&[2, 3, 5, 7], 3);
    for (b_shape, label) in [(vec![2, 3, 5, 7], "same shape"), (vec![3, 1, 7], "rank 3 with a stretched axis"), (vec![1], "scalar")] {
        let b = t(&b_shape, 4);
        for op in [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Sub, BinaryOp::Div, BinaryOp::Max] {
            check(&format!("{op:?} {label}"), &Op::Binary(op), &[&a, &b]);
            check(&format!("{op:?} {label}, swapped"), &Op::Binary(op), &[&b, &a]);
        }
    }
}

#[test]
fn norms_over_rows_longer_than_a_workgroup() {
    let x = t(&[3, 301], 5);
    let (w, bias) = (t(&[301], 6), t(&[301], 7));
    check("rms_norm", &Op::Norm { kind: NormKind::Rms, eps: 1e-6 }, &[&x, &w]);
    check("layer_norm", &Op::Norm { kind: NormKind::Layer, eps: 1e-5 }, &[&x, &w, &bias]);
}

/// Two rows at different positions (one past 256, where an unreduced
/// angle loses precision on some targets).
fn ragged_positions(s: usize) -> Tensor {
    let mut p: Vec<i32> = (0..s as i32).collect();
    p.extend((0..s as i32).map(|i| 1000 + 7 * i));
    Tensor::i32(vec![2, s], p)
}

#[test]
fn rope_and_norm_rope_with_per_row_positions() {
    let pos = ragged_positions(5);
    let x = t(&[2, 3, 5, 16], 8);
    for style in [RopeStyle::Neox, RopeStyle::GptJ] {
        for (rotary_dim, scaling) in [(16, RopeScaling::None), (12, RopeScaling::Linear { factor: 4.0 })] {
            let op = Op::Rope { style, rotary_dim, theta: 10000.0, scaling: scaling.clone() };
            let Some(got) = check(&format!("rope {style:?} rotary_dim={rotary_dim}"), &op, &[&x, &pos]) else { return };
            let same_pos = Tensor::i32(vec![2, 5], [0, 1, 2, 3, 4].repeat(2));
            assert_separates("rope: row 1's own positions", &got, &reference_op(&op, &[&x, &same_pos]));
        }
    }
    let xs = t(&[2, 5, 3, 16], 9);
    let w = Tensor::f32(vec![16], values(10, 16, 0.5, 1.5));
    for style in [RopeStyle::Neox, RopeStyle::GptJ] {
        let op = Op::NormRope { eps: 1e-6, style, rotary_dim: 16, theta: 1_000_000.0, scaling: RopeScaling::None };
        check(&format!("norm_rope {style:?}"), &op, &[&xs, &w, &pos]);
    }
}

#[test]
fn softmax_with_and_without_softcap() {
    let x = Tensor::f32(vec![4, 300], values(11, 1200, -20.0, 20.0));
    check("softmax", &Op::Softmax { axis: 1, softcap: None }, &[&x]);
    check("softmax softcap", &Op::Softmax { axis: 1, softcap: Some(5.0) }, &[&x]);
}

#[test]
fn attention_gqa_ragged_windowed_ring() {
    let (b, nh, nkv, s, t_len, d) = (2, 4, 2, 3, 300, 16);
    let q = t(&[b, nh, s, d], 12);
    let k = t(&[b, nkv, t_len, d], 13);
    let v = t(&[b, nkv, t_len, d], 14);
    // Row 0 is early in its sequence, row 1 deep into it (past one 256-key chunk).
    let pos = Tensor::i32(vec![b, s], vec![5, 6, 7, 280, 281, 282]);
    let attention = |causal: bool, window: Option<usize>, softcap: Option<f32>, ring: bool| Op::Attention {
        n_heads: nh,
        n_kv_heads: nkv,
        scale: 0.25,
        causal,
        window,
        softcap,
        ring,
        sinks: false,
    };
    let base = attention(true, None, None, false);
    let Some(got) = check("attention causal GQA", &base, &[&q, &k, &v, &pos]) else { return };
    let row0_pos = Tensor::i32(vec![b, s], vec![5, 6, 7, 5, 6, 7]);
    assert_separates("attention: each row at its own positions", &got, &reference_op(&base, &[&q, &k, &v, &row0_pos]));
    // Swapping the two kv heads is what a `h % n_kv_heads` mapping would read.
    let swap = |x: &Tensor| {
        let data = x.as_f32().unwrap();
        let per_head = t_len * d;
        let mut out = data.to_vec();
        for bi in 0..b {
            let (h0, h1) = ((bi * nkv) * per_head, (bi * nkv + 1) * per_head);
            out[h0..h0 + per_head].copy_from_slice(&data[h1..h1 + per_head]);
            out[h1..h1 + per_head].copy_from_slice(&data[h0..h0 + per_head]);
        }
        Tensor::f32(x.shape().to_vec(), out)
    };
    assert_separates("attention: GQA head mapping", &got, &reference_op(&base, &[&q, &swap(&k), &swap(&v), &pos]));

    let windowed = attention(true, Some(8), Some(3.0), false);
    check("attention window + softcap", &windowed, &[&q, &k, &v, &pos]);
    let ring = attention(true, Some(8), None, true);
    let (k_ring, v_ring) = (t(&[b, nkv, 10, d], 15), t(&[b, nkv, 10, d], 16));
    check("attention ring", &ring, &[&q, &k_ring, &v_ring, &pos]);
    let bidirectional = attention(false, None, None, false);
    check("attention non-causal", &bidirectional, &[&q, &k, &v, &pos]);
}

/// Attention with sinks (gpt-oss): a logit per query head in each
/// softmax's denominator, weighing no value. One kernel for a prefill's
/// many queries, and split blocks merged for a decode step's few, each
/// against the reference (`reference::softmax_with_sink`); sinks spread
/// from below to above the scores, so they weigh from nothing to most of
/// the sum. Controls: the same attention without sinks, and with each
/// head given another head's sink.
#[test]
fn attention_sinks_join_each_softmax() {
    use graphc_gpu::kernels::attention::KEYS_PER_SPLIT;
    let (b, nh, nkv, d) = (2, 4, 2, 16);
    let sinks = Tensor::f32(vec![nh], vec![-3.0, 0.5, 2.0, 6.0]);
    let shifted = Tensor::f32(vec![nh], vec![6.0, -3.0, 0.5, 2.0]);
    let attention = |window: Option<usize>, sinks: bool| Op::Attention {
        n_heads: nh,
        n_kv_heads: nkv,
        scale: 0.25,
        causal: true,
        window,
        softcap: None,
        ring: false,
        sinks,
    };
    // A prefill: one kernel.
    let (s, t_len) = (3, 300);
    let q = t(&[b, nh, s, d], 41);
    let (k, v) = (t(&[b, nkv, t_len, d], 42), t(&[b, nkv, t_len, d], 43));
    let pos = Tensor::i32(vec![b, s], vec![5, 6, 7, 280, 281, 282]);
    for window in [None, Some(8)] {
        let op = attention(window, true);
        assert_eq!(attention_kernels(&op, &q, &k, &v), ["attention_sinks"]);
        let Some(got) = check(&format!("attention sinks window {window:?}"), &op, &[&q, &k, &v, &pos, &sinks]) else { return };
        assert_separates("attention sinks: the sink counts", &got, &reference_op(&attention(window, false), &[&q, &k, &v, &pos]));
        assert_separates("attention sinks: each head's own", &got, &reference_op(&op, &[&q, &k, &v, &pos, &shifted]));
    }
    // A decode step deep into three blocks of keys: split and merged.
    let t_len = 2 * KEYS_PER_SPLIT + 100;
    let q = t(&[b, nh, 1, d], 44);
    let (k, v) = (t(&[b, nkv, t_len, d], 45), t(&[b, nkv, t_len, d], 46));
    let pos = Tensor::i32(vec![b, 1], vec![(2 * KEYS_PER_SPLIT + 50) as i32, 300]);
    let op = attention(None, true);
    assert_eq!(attention_kernels(&op, &q, &k, &v), ["attention_part", "attention_merge_sinks"]);
    let got = check("attention sinks split", &op, &[&q, &k, &v, &pos, &sinks]).unwrap();
    assert_separates("attention sinks split: the sink counts", &got, &reference_op(&attention(None, false), &[&q, &k, &v, &pos]));
    assert_separates("attention sinks split: each head's own", &got, &reference_op(&op, &[&q, &k, &v, &pos, &shifted]));
}

/// The kernels an attention of these shapes lowers to, by name.
fn attention_kernels(op: &Op, q: &Tensor, k: &Tensor, v: &Tensor) -> Vec<String> {
    let info = |t: &Tensor, dtype| graphc_gpu::call::ArgInfo { dtype, shape: t.shape().to_vec() };
    let pos = graphc_gpu::call::ArgInfo { dtype: DType::I32, shape: vec![q.shape()[0], q.shape()[2]] };
    let mut infos = vec![info(q, DType::F32), info(k, DType::F32), info(v, DType::F32), pos];
    if let Op::Attention { sinks: true, n_heads, .. } = *op {
        infos.push(graphc_gpu::call::ArgInfo { dtype: DType::F32, shape: vec![n_heads] });
    }
    let limits = graphc_gpu::call::BindingLimits { max_bytes: 1 << 27, offset_alignment: 256, max_buffers: 8 };
    graphc_gpu::lower::lower(op, &infos, "wgpu", limits).unwrap().iter().map(|c| c.kernel.name.clone()).collect()
}

/// Few queries over a long cache split their keys into blocks of
/// `KEYS_PER_SPLIT` (a workgroup each) and merge the blocks
/// (flash-decoding): two decode rows, one deep into three blocks, one
/// inside the first (so two of its blocks are empty); a window whose
/// first key is not on a block boundary, with a soft-cap; a ring cache.
/// The control sees only the first block of keys (a merge that kept one
/// block) and is far away. Many queries (a prefill) over the same cache
/// stay one kernel.
#[test]
fn attention_splits_a_long_context_into_merged_blocks() {
    use graphc_gpu::kernels::attention::KEYS_PER_SPLIT;
    let (b, nh, nkv, t_len, d) = (2, 4, 2, 2 * KEYS_PER_SPLIT + 100, 16);
    let q = t(&[b, nh, 1, d], 21);
    let (k, v) = (t(&[b, nkv, t_len, d], 22), t(&[b, nkv, t_len, d], 23));
    let pos = Tensor::i32(vec![b, 1], vec![(2 * KEYS_PER_SPLIT + 50) as i32, 300]);
    let attention = |window: Option<usize>, softcap: Option<f32>, ring: bool| Op::Attention {
        n_heads: nh,
        n_kv_heads: nkv,
        scale: 0.25,
        causal: true,
        window,
        softcap,
        ring,
        sinks: false,
    };
    let base = attention(None, None, false);
    assert_eq!(attention_kernels(&base, &q, &k, &v), ["attention_part", "attention_merge"], "a decode step's keys are split");
    let Some(got) = check("attention split", &base, &[&q, &k, &v, &pos]) else { return };
    let first_block = Tensor::i32(vec![b, 1], vec![(KEYS_PER_SPLIT - 1) as i32, 300]);
    assert_separates("attention split: every block counts", &got, &reference_op(&base, &[&q, &k, &v, &first_block]));

    check("attention split window + softcap", &attention(Some(KEYS_PER_SPLIT + 37), Some(3.0), false), &[&q, &k, &v, &pos]);
    let ring = attention(Some(KEYS_PER_SPLIT + 37), None, true);
    let ring_rows = KEYS_PER_SPLIT + 60;
    let (k_ring, v_ring) = (t(&[b, nkv, ring_rows, d], 24), t(&[b, nkv, ring_rows, d], 25));
    let deep = Tensor::i32(vec![b, 1], vec![(3 * ring_rows + 5) as i32, 40]);
    assert_eq!(attention_kernels(&ring, &q, &k_ring, &v_ring), ["attention_part", "attention_merge"]);
    check("attention split ring", &ring, &[&q, &k_ring, &v_ring, &deep]);

    // A prefill's queries fill the device already: one kernel.
    let s = graphc_gpu::kernels::attention::SPLIT_BELOW_QUERIES / nh / b + 1;
    let q_prefill = t(&[b, nh, s, d], 26);
    let positions: Vec<i32> = (0..b * s).map(|i| (2 * KEYS_PER_SPLIT + i) as i32).collect();
    assert_eq!(attention_kernels(&base, &q_prefill, &k, &v), ["attention"]);
    check("attention prefill over a long cache", &base, &[&q_prefill, &k, &v, &Tensor::i32(vec![b, s], positions)]);
}

/// Split attention through the graph executor: its blocks live in a
/// scratch buffer the op's two launches share, made once and reused by
/// every step; a step is split by the keys its positions can see, so
/// steps near the start of the cache run one kernel, and a step past a
/// bound lowers anew (each step matches the reference).
#[test]
fn split_attention_runs_in_a_graph_step_after_step() {
    use graphc_gpu::kernels::attention::KEYS_PER_SPLIT;
    let (b, nh, nkv, cap, d) = (2, 4, 2, 2 * KEYS_PER_SPLIT + 100, 16);
    let graph = text::parse(&format!(
        "graph \"split_attention\" {{
  %0 = input{{name=\"q\"}} : f32[{b}, {nh}, 1, {d}]
  %1 = input{{name=\"positions\"}} : i32[{b}, 1]
  %2 = state{{name=\"k\"}} : f32[{b}, {nkv}, {cap}, {d}]
  %3 = state{{name=\"v\"}} : f32[{b}, {nkv}, {cap}, {d}]
  %4 = attention{{n_heads={nh}, n_kv_heads={nkv}, scale=0.25, causal=true}} %0, %2, %3, %1 : f32[{b}, {nh}, 1, {d}]
  %5 = state_out{{name=\"k\"}} %2
  %6 = state_out{{name=\"v\"}} %3
  %7 = output{{name=\"y\"}} %4
}}
"
    ))
    .unwrap();
    let Some(mut g) = open_graph(&graph, &Weights(HashMap::new())) else { return };
    let states = HashMap::from([("k".to_string(), t(&[b, nkv, cap, d], 31)), ("v".to_string(), t(&[b, nkv, cap, d], 32))]);
    for (name, cache) in &states {
        g.set_state(name, cache).unwrap();
    }
    let steps = [
        ([2 * KEYS_PER_SPLIT + 50, 7], 2),
        ([KEYS_PER_SPLIT + 3, 2 * KEYS_PER_SPLIT + 99], 2),
        ([5, KEYS_PER_SPLIT - 1], 1),
        ([9, KEYS_PER_SPLIT], 2),
    ];
    for (step, (rows, launches)) in steps.iter().enumerate() {
        let inputs = HashMap::from([
            ("q".to_string(), t(&[b, nh, 1, d], 33 + step as u64)),
            ("positions".to_string(), Tensor::i32(vec![b, 1], rows.iter().map(|&p| p as i32).collect())),
        ]);
        let got = g.step(&inputs).unwrap();
        assert_eq!(g.counters()["device_launches_last_step"], *launches, "step {step} at positions {rows:?}");
        let want = reference::run(&graph, &inputs, states.clone(), &Weights(HashMap::new())).unwrap().outputs;
        assert_close(&format!("split attention, step {step}"), &got["y"], &want["y"]);
    }
}

/// Checkpoint bytes for `rows × cols` of `dtype`: random quants with small,
/// valid f16 scales (random bytes there would be NaNs and infinities).
fn weight_bytes(dtype: DType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let n = rows * cols;
    match dtype {
        DType::F32 => values(seed, n, -1.0, 1.0).iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => values(seed, n, -1.0, 1.0).iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect(),
        _ => {
            let (be, bb) = (dtype.block_elems(), dtype.block_bytes());
            let blocks = n / be;
            let mut bytes: Vec<u8> = values(seed, blocks * bb, 0.0, 256.0).iter().map(|v| *v as u8).collect();
            if dtype == DType::MXFP4 {
                // E8M0 scales 2^-10 .. 2^1, and the subnormal edge (e < 2) in a few blocks.
                for blk in 0..blocks {
                    bytes[blk * bb] = if blk % 7 == 3 { (blk % 2) as u8 } else { 118 + (bytes[blk * bb] % 12) };
                }
                return bytes;
            }
            let scales = values(seed + 1, blocks * 2, 0.002, 0.05);
            let fields: &[usize] = match dtype {
                DType::Q4_1 | DType::Q5_1 | DType::Q4K | DType::Q5K => &[0, 2],
                DType::Q6K => &[208],
                DType::Q2K => &[80, 82],
                DType::Q3K => &[108],
                _ => &[0],
            };
            for blk in 0..blocks {
                for (f, &off) in fields.iter().enumerate() {
                    let h = f16::from_f32(scales[blk * 2 + f]).to_le_bytes();
                    bytes[blk * bb + off..blk * bb + off + 2].copy_from_slice(&h);
                }
            }
            bytes
        }
    }
}

struct OneWeight {
    dtype: DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl WeightSource for OneWeight {
    fn weight(&self, name: &str) -> Option<WeightRef<'_>> {
        (name == "w").then_some(WeightRef { dtype: self.dtype, shape: &self.shape, bytes: &self.bytes })
    }
}

fn dtype_name(d: DType) -> String {
    d.to_string().to_lowercase()
}

#[test]
fn matmul_and_gather_for_every_weight_type() {
    let Some(dev) = device() else { return };
    // 37 output columns: one full workgroup of columns and a ragged one.
    let (n, k) = (37, 512);
    let ids = Tensor::i32(vec![4], vec![3, 0, 36, 2]);
    for dtype in graphc_gpu::kernels::WEIGHT_DTYPES {
        let w = OneWeight { dtype, shape: vec![n, k], bytes: weight_bytes(dtype, n, k, 18 + dtype as u64) };
        let wref = w.weight("w").unwrap();
        let name = dtype_name(dtype);
        // m = 1: the decode kernel; 3 and 11: the prefill kernel with a
        // partial tile, and with a full tile and a partial one.
        for m in [1, 3, 11] {
            let x = t(&[m, k], 17 + m as u64);
            let got = dev.run_op(&Op::MatMul, &[OpInput::Tensor(&x), OpInput::Weight(wref)]).unwrap();
            let graph = text::parse(&format!(
                "graph \"mm\" {{\n  %0 = input{{name=\"x\"}} : f32[{m}, {k}]\n  %1 = weight{{name=\"w\"}} : {name}[{n}, {k}]\n  %2 = matmul %0, %1 : f32[{m}, {n}]\n  %3 = output{{name=\"y\"}} %2 : f32[{m}, {n}]\n}}\n"
            ))
            .unwrap();
            let inputs = HashMap::from([("x".to_string(), x.clone())]);
            let want = reference::run(&graph, &inputs, HashMap::new(), &w).unwrap().outputs.remove("y").unwrap();
            // Sums of 512 products in another order: bound relative to the largest output.
            let scale = want.as_f32().unwrap().iter().fold(1f32, |a, v| a.max(v.abs()));
            let d = max_diff(&got, &want);
            assert!(d <= 4e-5 * scale, "matmul {name} m={m}: max |gpu - reference| = {d:e} (scale {scale})");
        }

        let got = dev.run_op(&Op::Gather, &[OpInput::Weight(wref), OpInput::Tensor(&ids)]).unwrap();
        let graph = text::parse(&format!(
            "graph \"g\" {{\n  %0 = weight{{name=\"w\"}} : {name}[{n}, {k}]\n  %1 = input{{name=\"ids\"}} : i32[4]\n  %2 = gather %0, %1 : f32[4, {k}]\n  %3 = output{{name=\"y\"}} %2 : f32[4, {k}]\n}}\n"
        ))
        .unwrap();
        let inputs = HashMap::from([("ids".to_string(), ids.clone())]);
        let want = reference::run(&graph, &inputs, HashMap::new(), &w).unwrap().outputs.remove("y").unwrap();
        // Decoding is exact arithmetic on the same f16 and integer fields.
        assert_eq!(max_diff(&got, &want), 0.0, "gather {name}: decoded rows differ from the CPU's");
    }
}

/// A weight larger than one binding (Gemma 3's 262144-row embedding is
/// 178 MB; lavapipe binds at most 128 MiB) runs as launches over row
/// ranges. Forced here with a 4 KiB limit on a 37-row weight.
#[test]
fn weights_larger_than_one_binding_are_split_by_rows() {
    let (Some(whole_dev), Some(mut dev)) = (wgpu_device(), wgpu_device()) else { return };
    dev.limit_binding_bytes(4096);
    let (n, k) = (37, 512);
    let ids = Tensor::i32(vec![5], vec![36, 0, 17, 35, 1]);
    for dtype in [DType::Q4_1, DType::Q6K, DType::F32] {
        let w = OneWeight { dtype, shape: vec![n, k], bytes: weight_bytes(dtype, n, k, 40 + dtype as u64) };
        let wref = w.weight("w").unwrap();
        let infos = [graphc_gpu::lower::ArgInfo { dtype: DType::F32, shape: vec![3, k] }, graphc_gpu::lower::ArgInfo { dtype, shape: vec![n, k] }];
        let calls = graphc_gpu::lower::lower(&Op::MatMul, &infos, "wgpu", dev.binding_limits()).unwrap();
        assert!(calls.len() > 1, "{dtype}: {} bytes per row in 4 KiB bindings should split", w.bytes.len() / n);
        let x = t(&[3, k], 41);
        let whole = whole_dev.run_op(&Op::MatMul, &[OpInput::Tensor(&x), OpInput::Weight(wref)]).unwrap();
        let split = dev.run_op(&Op::MatMul, &[OpInput::Tensor(&x), OpInput::Weight(wref)]).unwrap();
        assert_eq!(max_diff(&whole, &split), 0.0, "{dtype}: split matmul differs from the whole one");
        let whole = whole_dev.run_op(&Op::Gather, &[OpInput::Weight(wref), OpInput::Tensor(&ids)]).unwrap();
        let split = dev.run_op(&Op::Gather, &[OpInput::Weight(wref), OpInput::Tensor(&ids)]).unwrap();
        assert_eq!(max_diff(&whole, &split), 0.0, "{dtype}: split gather differs from the whole one");
    }
}

#[test]
fn kv_append_writes_each_row_at_its_own_offset() {
    let Some(dev) = device() else { return };
    let (b, h, cap, s, d) = (2, 2, 8, 3, 4);
    let cache = t(&[b, h, cap, d], 19);
    let new = t(&[b, h, s, d], 20);
    let lengths = Tensor::i32(vec![b], vec![1, 5]);
    let got = dev
        .run_op(
            &Op::KvAppend { axis: 2, cap: graphc_ir::Dim::konst(cap as i64), window: None },
            &[OpInput::Tensor(&cache), OpInput::Tensor(&new), OpInput::Tensor(&lengths)],
        )
        .unwrap();
    let graph = text::parse(&format!(
        "graph \"kv\" {{\n  %0 = state{{name=\"cache\"}} : f32[{b}, {h}, {cap}, {d}]\n  %1 = input{{name=\"new\"}} : f32[{b}, {h}, {s}, {d}]\n  %2 = input{{name=\"lengths\"}} : i32[{b}]\n  %3 = kv_append{{axis=2, cap={cap}}} %0, %1, %2 : f32[{b}, {h}, {cap}, {d}]\n  %4 = state_out{{name=\"cache\"}} %3 : f32[{b}, {h}, {cap}, {d}]\n}}\n"
    ))
    .unwrap();
    let inputs = HashMap::from([("new".to_string(), new.clone()), ("lengths".to_string(), lengths.clone())]);
    let states = HashMap::from([("cache".to_string(), cache.clone())]);
    let want = reference::run(&graph, &inputs, states, &graphc_tests_free::NoWeights).unwrap().states.remove("cache").unwrap();
    assert_eq!(max_diff(&got, &want), 0.0, "kv_append is a copy: bit-exact");
    assert_separates("kv_append: rows written", &got, &cache);

    // Past the capacity: the CPU's error, before anything is launched.
    let too_far = Tensor::i32(vec![b], vec![1, 6]);
    let err = dev
        .run_op(
            &Op::KvAppend { axis: 2, cap: graphc_ir::Dim::konst(cap as i64), window: None },
            &[OpInput::Tensor(&cache), OpInput::Tensor(&new), OpInput::Tensor(&too_far)],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("offset 6") && err.contains("capacity 8"), "{err}");
}

mod graphc_tests_free {
    use graphc_backends::{WeightRef, WeightSource};
    pub struct NoWeights;
    impl WeightSource for NoWeights {
        fn weight(&self, _: &str) -> Option<WeightRef<'_>> {
            None
        }
    }
}

/// What the kernel cannot check itself, checked on the host before the
/// launch: each row's offset against the capacity, a ring's rows a step.
#[test]
fn kv_append_offsets_are_checked_on_the_host() {
    use graphc_gpu::lower::check_append;
    assert!(check_append(8, 3, None, &[5, 0]).is_ok());
    let e = check_append(8, 3, None, &[0, 6]).unwrap_err().to_string();
    assert!(e.contains("batch row 1: writing 3 rows at offset 6 overflows the capacity 8"), "{e}");
    let e = check_append(8, 1, None, &[-1]).unwrap_err().to_string();
    assert!(e.contains("batch row 0: offset -1 is negative"), "{e}");
    // A ring of 8 rows for a window of 4 takes at most 5 rows a step, at any offset.
    assert!(check_append(8, 5, Some(4), &[100]).is_ok());
    let e = check_append(8, 6, Some(4), &[0]).unwrap_err().to_string();
    assert!(e.contains("6 rows in one step into a ring of 8 rows with window 4 (at most 5)"), "{e}");
}

#[test]
fn an_op_without_a_kernel_is_an_error_naming_op_and_target() {
    let infos = [graphc_gpu::lower::ArgInfo { dtype: DType::F32, shape: vec![2, 3] }];
    let limits = graphc_gpu::device::BindingLimits { max_bytes: 1 << 27, offset_alignment: 256, max_buffers: 8 };
    let err = graphc_gpu::lower::lower(&Op::Cast { dtype: DType::I32 }, &infos, "wgpu", limits).unwrap_err().to_string();
    assert!(err.contains("cast") && err.contains("wgpu"), "{err}");
}

/// A chain of elementwise ops (Gemma 2's logit soft-cap plus a bias),
/// made one `chain` op by the `elementwise_chain` pass, runs as one kernel
/// in the graph executor, with the reference's values; the reference runs
/// the op as its parts to the unfused graph's bits.
#[test]
fn elementwise_chains_run_as_one_kernel() {
    let unfused = text::parse(
        "graph \"chain\" {\n  %0 = input{name=\"x\"} : f32[3, 37]\n  %1 = input{name=\"b\"} : f32[37]\n  %2 = const{value=5.0} : f32[1]\n  %3 = div %0, %2 : f32[3, 37]\n  %4 = tanh %3 : f32[3, 37]\n  %5 = mul %4, %2 : f32[3, 37]\n  %6 = add %5, %1 : f32[3, 37]\n  %7 = output{name=\"y\"} %6 : f32[3, 37]\n}\n",
    )
    .unwrap();
    let mut graph = unfused.clone();
    assert_eq!(ElementwiseChain { cost: CostModel::Launches }.run(&mut graph), 3, "div, tanh and mul fold into the add");
    graphc_ir::verify(&mut graph).unwrap();
    let inputs = HashMap::from([("x".to_string(), Tensor::f32(vec![3, 37], values(50, 111, -30.0, 30.0))), ("b".to_string(), t(&[37], 51))]);
    let want = reference::run(&unfused, &inputs, HashMap::new(), &graphc_tests_free::NoWeights).unwrap().outputs.remove("y").unwrap();
    let parts = reference::run(&graph, &inputs, HashMap::new(), &graphc_tests_free::NoWeights).unwrap().outputs.remove("y").unwrap();
    let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert!(bits(&parts) == bits(&want), "the reference's chain differs from its parts in its bits");
    let Some(mut g) = open_graph(&graph, &graphc_tests_free::NoWeights) else { return };
    let got = g.step(&inputs).unwrap().remove("y").unwrap();
    assert_close("soft-cap chain", &got, &want);
    assert_eq!(g.counters()["device_fused_elementwise"], 3, "div, tanh and mul fold into the add's kernel");
    assert_eq!(g.counters()["device_launches_last_step"], 1, "the chain is one launch");
    // Bit for bit the ops' own kernels one at a time (each value stored
    // before the next op reads it: the chain rounds its products and sums
    // the same way, no FMA across ops).
    let dev = device().unwrap();
    let cap = Tensor::f32(vec![1], vec![5.0]);
    let run = |op: Op, a: &Tensor, b: Option<&Tensor>| {
        let mut args = vec![OpInput::Tensor(a)];
        args.extend(b.map(OpInput::Tensor));
        dev.run_op(&op, &args).unwrap()
    };
    let scaled = run(Op::Binary(BinaryOp::Div), &inputs["x"], Some(&cap));
    let squashed = run(Op::Unary(UnaryOp::Tanh), &scaled, None);
    let capped = run(Op::Binary(BinaryOp::Mul), &squashed, Some(&cap));
    let unfused = run(Op::Binary(BinaryOp::Add), &capped, Some(&inputs["b"]));
    let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert!(bits(&got) == bits(&unfused), "the fused chain differs from the ops' own kernels in its bits");
    // Without the cap the values differ: the test tells a dropped op.
    assert_separates("soft-cap chain vs the plain sum", &got, &reference_op(&Op::Binary(BinaryOp::Add), &[&inputs["x"], &inputs["b"]]));
}

/// Named weights, each its own bytes.
struct Weights(HashMap<String, OneWeight>);

impl WeightSource for Weights {
    fn weight(&self, name: &str) -> Option<WeightRef<'_>> {
        self.0.get(name).map(|w| WeightRef { dtype: w.dtype, shape: &w.shape, bytes: &w.bytes })
    }
}

/// A gated MLP, `glu{act}(x · w_gateᵀ, x · w_upᵀ)`: one `matmul_glu`
/// op (`fused`), or the two matmuls and the glu.
fn gated_mlp(dtype: DType, m: usize, n: usize, k: usize, act: &str, fused: bool) -> graphc_ir::Graph {
    let name = dtype_name(dtype);
    let body = if fused {
        format!("  %3 = matmul_glu{{act={act}}} %0, %1, %2 : f32[{m}, {n}]\n  %4 = output{{name=\"y\"}} %3 : f32[{m}, {n}]\n")
    } else {
        format!("  %3 = matmul %0, %1 : f32[{m}, {n}]\n  %4 = matmul %0, %2 : f32[{m}, {n}]\n  %5 = glu{{act={act}}} %3, %4 : f32[{m}, {n}]\n  %6 = output{{name=\"y\"}} %5 : f32[{m}, {n}]\n")
    };
    text::parse(&format!(
        "graph \"mlp\" {{\n  %0 = input{{name=\"x\"}} : f32[{m}, {k}]\n  %1 = weight{{name=\"w_gate\"}} : {name}[{n}, {k}]\n  %2 = weight{{name=\"w_up\"}} : {name}[{n}, {k}]\n{body}}}\n"
    ))
    .unwrap()
}

/// The `matmul_glu` op (the `matmul-glu` rule's) runs as one kernel for
/// every weight type, decode and prefill shapes, with the reference's
/// values and bit for bit the unfused ops' kernels' result (the control:
/// two stacked projections, then the glu). Gate and up swapped, or the
/// other activation, is far away.
#[test]
fn gated_matmuls_run_as_one_kernel() {
    // 37 output columns: a full workgroup of columns and a ragged one.
    let (n, k) = (37, 512);
    for dtype in graphc_gpu::kernels::WEIGHT_DTYPES {
        let w = |seed| OneWeight { dtype, shape: vec![n, k], bytes: weight_bytes(dtype, n, k, seed) };
        let weights = Weights(HashMap::from([("w_gate".to_string(), w(80 + dtype as u64)), ("w_up".to_string(), w(90 + dtype as u64))]));
        for (m, act) in [(1, "silu"), (11, "silu"), (1, "gelu_tanh")] {
            let graph = gated_mlp(dtype, m, n, k, act, true);
            let inputs = HashMap::from([("x".to_string(), t(&[m, k], 81 + m as u64))]);
            let Some(mut fused) = open_graph(&graph, &weights) else { return };
            let got = fused.step(&inputs).unwrap().remove("y").unwrap();
            let what = format!("{} m={m} {act}", dtype_name(dtype));
            assert_eq!(fused.counters()["device_launches_last_step"], 1, "{what}: one launch");
            let want = reference::run(&graph, &inputs, HashMap::new(), &weights).unwrap().outputs.remove("y").unwrap();
            let scale = want.as_f32().unwrap().iter().fold(1f32, |a, v| a.max(v.abs()));
            let d = max_diff(&got, &want);
            assert!(d <= 4e-5 * scale, "{what}: max |gpu - reference| = {d:e} (scale {scale})");

            let mut unfused = open_graph(&gated_mlp(dtype, m, n, k, act, false), &weights).unwrap();
            let three = unfused.step(&inputs).unwrap().remove("y").unwrap();
            // The two projections still share a launch (`matmul_stacked`,
            // bit for bit the plain matmul: tested below), then the glu.
            assert_eq!(unfused.counters()["device_stacked_matmuls"], 1, "{what}: the control's projections stack");
            assert_eq!(unfused.counters()["device_launches_last_step"], 2, "{what}: the control runs two kernels");
            let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert!(bits(&got) == bits(&three), "{what}: fused and unfused results differ in their bits");

            let swapped = Weights(HashMap::from([("w_gate".to_string(), w(90 + dtype as u64)), ("w_up".to_string(), w(80 + dtype as u64))]));
            let wrong = reference::run(&graph, &inputs, HashMap::new(), &swapped).unwrap().outputs.remove("y").unwrap();
            assert_separates(&format!("{what}: gate and up swapped"), &got, &wrong);
            let other = if act == "silu" { "gelu_tanh" } else { "silu" };
            let wrong =
                reference::run(&gated_mlp(dtype, m, n, k, other, true), &inputs, HashMap::new(), &weights).unwrap().outputs.remove("y").unwrap();
            assert_separates(&format!("{what}: {other} instead"), &got, &wrong);
        }
    }
}

/// A gated pair too large for one binding runs as launches over the same
/// row runs of both weights (forced with a 4 KiB limit), bit for bit the
/// whole pair's result.
#[test]
fn gated_matmuls_split_by_rows_like_one_matmul() {
    let (Some(whole_dev), Some(mut dev)) = (wgpu_device(), wgpu_device()) else { return };
    dev.limit_binding_bytes(4096);
    let (whole_dev, dev) = (std::sync::Arc::new(whole_dev), std::sync::Arc::new(dev));
    let (n, k, m) = (37, 512, 3);
    for dtype in [DType::Q4_1, DType::Q6K] {
        let w = |seed| OneWeight { dtype, shape: vec![n, k], bytes: weight_bytes(dtype, n, k, seed) };
        let weights = Weights(HashMap::from([("w_gate".to_string(), w(60)), ("w_up".to_string(), w(61))]));
        let graph = gated_mlp(dtype, m, n, k, "silu", true);
        let inputs = HashMap::from([("x".to_string(), t(&[m, k], 62))]);
        let mut whole = graphc_gpu::exec::GpuGraph::new(whole_dev.clone(), &graph, &weights).unwrap();
        let mut split = graphc_gpu::exec::GpuGraph::new(dev.clone(), &graph, &weights).unwrap();
        let want = whole.step(&inputs).unwrap().remove("y").unwrap();
        let got = split.step(&inputs).unwrap().remove("y").unwrap();
        assert_eq!(whole.last_launches, 1, "{dtype}: one launch in one binding");
        assert!(split.last_launches > 1, "{dtype}: {} bytes per row in 4 KiB bindings should split", weights.0["w_up"].bytes.len() / n);
        assert_eq!(max_diff(&got, &want), 0.0, "{dtype}: split gated pair differs from the whole one");
    }
}

/// A layer's q and k rotations, and its K and V appends, each run as one
/// stacked launch (`graphc_gpu::stack`): per-row positions and offsets, q
/// with more heads than k; every output bit for bit what the ops' own
/// kernels give one at a time, and the reference's values.
#[test]
fn paired_ropes_and_appends_run_as_one_launch_each() {
    let (b, nh, nkv, s, cap, d) = (2, 3, 2, 5, 8, 16);
    let graph = text::parse(&format!(
        "graph \"pairs\" {{\n  %0 = input{{name=\"q\"}} : f32[{b}, {nh}, {s}, {d}]\n  %1 = input{{name=\"k\"}} : f32[{b}, {nkv}, {s}, {d}]\n  %2 = input{{name=\"v\"}} : f32[{b}, {nkv}, {s}, {d}]\n  %3 = input{{name=\"positions\"}} : i32[{b}, {s}]\n  %4 = input{{name=\"lengths\"}} : i32[{b}]\n  %5 = rope{{style=gptj, rotary_dim=12, theta=10000.0}} %0, %3 : f32[{b}, {nh}, {s}, {d}]\n  %6 = rope{{style=gptj, rotary_dim=12, theta=10000.0}} %1, %3 : f32[{b}, {nkv}, {s}, {d}]\n  %7 = state{{name=\"k_cache\"}} : f32[{b}, {nkv}, {cap}, {d}]\n  %8 = kv_append{{axis=2, cap={cap}}} %7, %6, %4 : f32[{b}, {nkv}, {cap}, {d}]\n  %9 = state_out{{name=\"k_cache\"}} %8 : f32[{b}, {nkv}, {cap}, {d}]\n  %10 = state{{name=\"v_cache\"}} : f32[{b}, {nkv}, {cap}, {d}]\n  %11 = kv_append{{axis=2, cap={cap}}} %10, %2, %4 : f32[{b}, {nkv}, {cap}, {d}]\n  %12 = state_out{{name=\"v_cache\"}} %11 : f32[{b}, {nkv}, {cap}, {d}]\n  %13 = output{{name=\"q_rot\"}} %5 : f32[{b}, {nh}, {s}, {d}]\n  %14 = output{{name=\"k_out\"}} %8 : f32[{b}, {nkv}, {cap}, {d}]\n  %15 = output{{name=\"v_out\"}} %11 : f32[{b}, {nkv}, {cap}, {d}]\n}}\n"
    ))
    .unwrap();
    let positions = Tensor::i32(vec![b, s], vec![0, 1, 2, 3, 4, 2, 3, 4, 5, 6]);
    let lengths = Tensor::i32(vec![b], vec![0, 2]);
    let inputs = HashMap::from([
        ("q".to_string(), t(&[b, nh, s, d], 150)),
        ("k".to_string(), t(&[b, nkv, s, d], 151)),
        ("v".to_string(), t(&[b, nkv, s, d], 152)),
        ("positions".to_string(), positions.clone()),
        ("lengths".to_string(), lengths.clone()),
    ]);
    let caches = [("k_cache", t(&[b, nkv, cap, d], 153)), ("v_cache", t(&[b, nkv, cap, d], 154))];
    let Some(mut g) = open_graph(&graph, &graphc_tests_free::NoWeights) else { return };
    for (name, cache) in &caches {
        g.set_state(name, cache).unwrap();
    }
    let got = g.step(&inputs).unwrap();
    assert_eq!(g.counters()["device_paired_ops"], 2, "the ropes pair, and the appends");
    assert_eq!(g.counters()["device_launches_last_step"], 2, "one launch per pair");
    let states: HashMap<String, Tensor> = caches.iter().map(|(n, c)| (n.to_string(), c.clone())).collect();
    let want = reference::run(&graph, &inputs, states, &graphc_tests_free::NoWeights).unwrap().outputs;
    for name in ["q_rot", "k_out", "v_out"] {
        assert_close(name, &got[name], &want[name]);
    }
    // The ops one at a time on the same device.
    let dev = device().unwrap();
    let rope = Op::Rope { style: RopeStyle::GptJ, rotary_dim: 12, theta: 10000.0, scaling: RopeScaling::None };
    let append = Op::KvAppend { axis: 2, cap: graphc_ir::Dim::konst(cap as i64), window: None };
    let q_rot = dev.run_op(&rope, &[OpInput::Tensor(&inputs["q"]), OpInput::Tensor(&positions)]).unwrap();
    let k_rot = dev.run_op(&rope, &[OpInput::Tensor(&inputs["k"]), OpInput::Tensor(&positions)]).unwrap();
    let k_out = dev.run_op(&append, &[OpInput::Tensor(&caches[0].1), OpInput::Tensor(&k_rot), OpInput::Tensor(&lengths)]).unwrap();
    let v_out = dev.run_op(&append, &[OpInput::Tensor(&caches[1].1), OpInput::Tensor(&inputs["v"]), OpInput::Tensor(&lengths)]).unwrap();
    let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for (name, alone) in [("q_rot", &q_rot), ("k_out", &k_out), ("v_out", &v_out)] {
        assert!(bits(&got[name]) == bits(alone), "{name}: the stacked launch differs from the op's own kernel in its bits");
    }
    // K and V caches each got their own rows.
    assert_separates("k cache vs v cache", &got["k_out"], &got["v_out"]);

    // Where one kernel may bind only 7 buffers, the rope pair (8) runs as
    // its two calls and the append pair (6) stays stacked: same bits.
    if let Some(mut small) = wgpu_device().filter(|_| std::env::var("GRAPHC_TEST_DEVICE").map_or(true, |d| d == "wgpu")) {
        small.limit_buffers(7);
        let mut g = graphc_gpu::exec::GpuGraph::new(std::sync::Arc::new(small), &graph, &graphc_tests_free::NoWeights).unwrap();
        for (name, cache) in &caches {
            g.set_state(name, cache).unwrap();
        }
        let split = g.step(&inputs).unwrap();
        assert_eq!(g.last_launches, 3, "the rope pair as two calls, the appends as one");
        for name in ["q_rot", "k_out", "v_out"] {
            assert!(bits(&split[name]) == bits(&got[name]), "{name}: the unstacked pair differs from the stacked one");
        }
    }
    let unrotated = dev.run_op(&append, &[OpInput::Tensor(&caches[0].1), OpInput::Tensor(&inputs["k"]), OpInput::Tensor(&lengths)]).unwrap();
    assert_separates("k appended rotated", &got["k_out"], &unrotated);
}

/// Decode steps of the same shapes replay the recorded step's launches
/// (from the third step: the first folds, the second records) with each
/// step's own inputs, appending at each step's own offset as the reference
/// does; the host checks still run on a replayed step, so an offset past
/// the capacity is refused there too. Every target rewrites a step's
/// inputs in their buffers and tells its buffers apart
/// (`Device::same_buffer`), so each replays (CUDA and Metal here only
/// where `tools/gpu-check` and `tools/metal-check` run this).
#[test]
fn decode_steps_replay_the_recorded_launches() {
    let (b, h, cap, d) = (1, 2, 8, 4);
    let graph = text::parse(&format!(
        "graph \"decode\" {{\n  %0 = state{{name=\"cache\"}} : f32[{b}, {h}, {cap}, {d}]\n  %1 = input{{name=\"new\"}} : f32[{b}, {h}, 1, {d}]\n  %2 = input{{name=\"lengths\"}} : i32[{b}]\n  %3 = kv_append{{axis=2, cap={cap}}} %0, %1, %2 : f32[{b}, {h}, {cap}, {d}]\n  %4 = state_out{{name=\"cache\"}} %3 : f32[{b}, {h}, {cap}, {d}]\n  %5 = exp %1 : f32[{b}, {h}, 1, {d}]\n  %6 = output{{name=\"c\"}} %3 : f32[{b}, {h}, {cap}, {d}]\n  %7 = output{{name=\"e\"}} %5 : f32[{b}, {h}, 1, {d}]\n}}\n"
    ))
    .unwrap();
    let Some(mut g) = open_graph(&graph, &graphc_tests_free::NoWeights) else { return };
    let cache = Tensor::f32(vec![b, h, cap, d], vec![0.0; b * h * cap * d]);
    g.set_state("cache", &cache).unwrap();
    let mut want_cache = cache;
    for step in 0..5 {
        let inputs =
            HashMap::from([("new".to_string(), t(&[b, h, 1, d], 130 + step as u64)), ("lengths".to_string(), Tensor::i32(vec![b], vec![step]))]);
        let got = g.step(&inputs).unwrap();
        let states = HashMap::from([("cache".to_string(), want_cache)]);
        let mut want = reference::run(&graph, &inputs, states, &graphc_tests_free::NoWeights).unwrap();
        want_cache = want.states.remove("cache").unwrap();
        assert_eq!(max_diff(&got["c"], &want_cache), 0.0, "step {step}: the cache differs from the reference's");
        assert_close(&format!("step {step}: exp"), &got["e"], &want.outputs["e"]);
        let replayed = (step as u64).saturating_sub(1);
        assert_eq!(g.counters()["device_replayed_steps"], replayed, "step {step}: steps replayed so far");
    }
    // Each step wrote its own row: the last step's alone would leave rows 0..4 zero.
    assert_separates("five appends vs the last", &want_cache, &reference_op_cache_row(&want_cache, 4));
    let past_cap = HashMap::from([("new".to_string(), t(&[b, h, 1, d], 140)), ("lengths".to_string(), Tensor::i32(vec![b], vec![cap as i32]))]);
    let err = g.step(&past_cap).unwrap_err().to_string();
    assert!(err.contains("capacity"), "a replayed step must still check offsets: {err}");
}

/// `cache` with every row but `row` zeroed.
fn reference_op_cache_row(cache: &Tensor, row: usize) -> Tensor {
    let shape = cache.shape().to_vec();
    let (cap, d) = (shape[2], shape[3]);
    let data = cache.as_f32().unwrap().iter().enumerate().map(|(i, &v)| if (i / d) % cap == row { v } else { 0.0 }).collect();
    Tensor::f32(shape, data)
}

/// A layer's q, k and v projections (one `x`, weights of one type) run
/// as one kernel (`matmul_stacked`) writing each to its own output, for
/// every weight type, decode and prefill shapes; row counts 37, 19, 19 put
/// weight boundaries inside a workgroup's columns. Each output is bit for
/// bit the plain matmul kernel's. With v of another type and the same
/// block size (q8_0 beside q5_0, as in Gemma 3) all three still stack,
/// each decoded as its own type; with another block size (q8_0 beside
/// f16) q and k stack and v runs alone.
#[test]
fn projections_of_one_input_run_as_one_kernel() {
    let k = 512;
    let (nq, nkv) = (37, 19);
    let Some(dev) = device() else { return };
    for dtype in graphc_gpu::kernels::WEIGHT_DTYPES {
        let v_dtype = match dtype {
            DType::Q8_0 => DType::Q5_0,
            DType::F16 => DType::Q8_0,
            _ => dtype,
        };
        let name = |d: DType| dtype_name(d);
        let w = |d: DType, n: usize, seed: u64| OneWeight { dtype: d, shape: vec![n, k], bytes: weight_bytes(d, n, k, seed) };
        let weights = Weights(HashMap::from([
            ("wq".to_string(), w(dtype, nq, 110)),
            ("wk".to_string(), w(dtype, nkv, 111)),
            ("wv".to_string(), w(v_dtype, nkv, 112)),
        ]));
        for m in [1, 11] {
            let graph = text::parse(&format!(
                "graph \"qkv\" {{\n  %0 = input{{name=\"x\"}} : f32[{m}, {k}]\n  %1 = weight{{name=\"wq\"}} : {q}[{nq}, {k}]\n  %2 = weight{{name=\"wk\"}} : {q}[{nkv}, {k}]\n  %3 = weight{{name=\"wv\"}} : {v}[{nkv}, {k}]\n  %4 = matmul %0, %1 : f32[{m}, {nq}]\n  %5 = matmul %0, %2 : f32[{m}, {nkv}]\n  %6 = matmul %0, %3 : f32[{m}, {nkv}]\n  %7 = output{{name=\"q\"}} %4 : f32[{m}, {nq}]\n  %8 = output{{name=\"k\"}} %5 : f32[{m}, {nkv}]\n  %9 = output{{name=\"v\"}} %6 : f32[{m}, {nkv}]\n}}\n",
                q = name(dtype),
                v = name(v_dtype)
            ))
            .unwrap();
            let inputs = HashMap::from([("x".to_string(), t(&[m, k], 113 + m as u64))]);
            let Some(mut g) = open_graph(&graph, &weights) else { return };
            let got = g.step(&inputs).unwrap();
            let what = format!("{} m={m}", name(dtype));
            let (stacked, launches) = if v_dtype.block_elems() == dtype.block_elems() { (2, 1) } else { (1, 2) };
            assert_eq!(g.counters()["device_stacked_matmuls"], stacked, "{what}: matmuls written by another's kernel");
            assert_eq!(g.counters()["device_launches_last_step"], launches, "{what}: launches");
            let want = reference::run(&graph, &inputs, HashMap::new(), &weights).unwrap().outputs;
            let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            for out in ["q", "k", "v"] {
                let scale = want[out].as_f32().unwrap().iter().fold(1f32, |a, v| a.max(v.abs()));
                let d = max_diff(&got[out], &want[out]);
                assert!(d <= 4e-5 * scale, "{what} {out}: max |gpu - reference| = {d:e} (scale {scale})");
                let plain =
                    dev.run_op(&Op::MatMul, &[OpInput::Tensor(&inputs["x"]), OpInput::Weight(weights.weight(&format!("w{out}")).unwrap())]).unwrap();
                assert!(bits(&got[out]) == bits(&plain), "{what} {out}: differs from the plain matmul kernel in its bits");
            }
            // k and v have one shape: each must come from its own weight.
            assert_separates(&format!("{what}: k vs v"), &got["k"], &got["v"]);
        }
    }
}

/// `[b, s, h·d]` as `[b, h, s, d]` (the reshape and permute a layer puts
/// between a projection and its rotation: data movement only).
fn heads_major(x: &Tensor, h: usize, d: usize) -> Tensor {
    let (b, s) = (x.shape()[0], x.shape()[1]);
    let v = x.as_f32().unwrap();
    let mut out = vec![0.0; b * h * s * d];
    for (bi, si, hi, c) in (0..b).flat_map(|bi| (0..s).flat_map(move |si| (0..h).flat_map(move |hi| (0..d).map(move |c| (bi, si, hi, c))))) {
        out[((bi * h + hi) * s + si) * d + c] = v[((bi * s + si) * h + hi) * d + c];
    }
    Tensor::f32(vec![b, h, s, d], out)
}

/// The CPU executors (the reference and the fast one) run a `qkv_rope`
/// (`head`, the graph after the pass) as its parts, to the bits of the
/// graph it was made from; the reference's outputs of that graph.
fn head_runs_as_its_parts_on_the_cpu(
    graph: &graphc_ir::Graph,
    head: &graphc_ir::Graph,
    inputs: &HashMap<String, Tensor>,
    states: &HashMap<String, Tensor>,
    weights: &Weights,
    what: &str,
) -> HashMap<String, Tensor> {
    let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let want = reference::run(graph, inputs, states.clone(), weights).unwrap().outputs;
    let fast = graphc_backends::cpu::fast::Fast::new(graphc_backends::cpu::simd::Isa::best(), 2).unwrap();
    let fast_want = fast.run(graph, inputs, states.clone(), weights).unwrap().outputs;
    let on_cpu = [
        ("reference", reference::run(head, inputs, states.clone(), weights).unwrap().outputs, &want),
        ("fast", fast.run(head, inputs, states.clone(), weights).unwrap().outputs, &fast_want),
    ];
    for (executor, fused, unfused) in &on_cpu {
        for name in ["q_rot", "k_out", "v_out"] {
            assert!(
                bits(&fused[name]) == bits(&unfused[name]),
                "{what} {name}: the {executor} executor's qkv_rope differs from its parts in its bits"
            );
        }
    }
    want
}

/// Qwen2's head: each projection followed by its bias, q5_0 q and k beside
/// a q8_0 v (Qwen2.5's file), rotating by halves with a rotary_dim short of
/// the head. The `attention_head` pass makes it one `qkv_rope{bias}`; the
/// CPU executors run it as its parts to the unfused graph's bits, and the
/// device runs it as one kernel to the bits of the unfused graph on the
/// same device (its matmul, add, rope and append kernels). Control: the
/// same graph without the biases is far away.
#[test]
fn a_biased_head_of_mixed_types_runs_as_one_kernel() {
    let (k, hq, hk, d, cap, rotary_dim) = (256, 3, 2, 10, 8, 8);
    let (nq, nk) = (hq * d, hk * d);
    let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let w = |dtype: DType, n: usize, seed: u64| OneWeight { dtype, shape: vec![n, k], bytes: weight_bytes(dtype, n, k, seed) };
    let b = |n: usize, seed: u64| OneWeight { dtype: DType::F32, shape: vec![n], bytes: weight_bytes(DType::F32, 1, n, seed) };
    let weights = Weights(HashMap::from([
        ("wq".to_string(), w(DType::Q5_0, nq, 170)),
        ("wk".to_string(), w(DType::Q5_0, nk, 171)),
        ("wv".to_string(), w(DType::Q8_0, nk, 172)),
        ("bq".to_string(), b(nq, 173)),
        ("bk".to_string(), b(nk, 174)),
        ("bv".to_string(), b(nk, 175)),
    ]));
    for (bsz, s, positions, lengths) in [(2, 1, vec![5, 2], vec![5, 2]), (2, 5, vec![0, 1, 2, 3, 4, 3, 4, 5, 6, 7], vec![0, 3])] {
        let graph_text = |biased: bool| {
            let add = |n: usize, from: &str, bias: usize| match biased {
                true => format!("add %{from}, %{bias} : f32[{bsz}, {s}, {n}]"),
                false => format!("reshape{{shape=[{bsz}, {s}, {n}]}} %{from} : f32[{bsz}, {s}, {n}]"),
            };
            format!(
                "graph \"biased_head\" {{
  %0 = input{{name=\"x\"}} : f32[{bsz}, {s}, {k}]
  %1 = input{{name=\"positions\"}} : i32[{bsz}, {s}]
  %2 = input{{name=\"lengths\"}} : i32[{bsz}]
  %3 = weight{{name=\"wq\"}} : q5_0[{nq}, {k}]
  %4 = weight{{name=\"wk\"}} : q5_0[{nk}, {k}]
  %5 = weight{{name=\"wv\"}} : q8_0[{nk}, {k}]
  %6 = weight{{name=\"bq\"}} : f32[{nq}]
  %7 = weight{{name=\"bk\"}} : f32[{nk}]
  %8 = weight{{name=\"bv\"}} : f32[{nk}]
  %9 = matmul %0, %3 : f32[{bsz}, {s}, {nq}]
  %10 = {aq}
  %11 = matmul %0, %4 : f32[{bsz}, {s}, {nk}]
  %12 = {ak}
  %13 = matmul %0, %5 : f32[{bsz}, {s}, {nk}]
  %14 = {av}
  %15 = reshape{{shape=[{bsz}, {s}, {hq}, {d}]}} %10 : f32[{bsz}, {s}, {hq}, {d}]
  %16 = permute{{perm=[0, 2, 1, 3]}} %15 : f32[{bsz}, {hq}, {s}, {d}]
  %17 = reshape{{shape=[{bsz}, {s}, {hk}, {d}]}} %12 : f32[{bsz}, {s}, {hk}, {d}]
  %18 = permute{{perm=[0, 2, 1, 3]}} %17 : f32[{bsz}, {hk}, {s}, {d}]
  %19 = reshape{{shape=[{bsz}, {s}, {hk}, {d}]}} %14 : f32[{bsz}, {s}, {hk}, {d}]
  %20 = permute{{perm=[0, 2, 1, 3]}} %19 : f32[{bsz}, {hk}, {s}, {d}]
  %21 = rope{{style=neox, rotary_dim={rotary_dim}, theta=10000.0}} %16, %1 : f32[{bsz}, {hq}, {s}, {d}]
  %22 = rope{{style=neox, rotary_dim={rotary_dim}, theta=10000.0}} %18, %1 : f32[{bsz}, {hk}, {s}, {d}]
  %23 = state{{name=\"k_cache\"}} : f32[{bsz}, {hk}, {cap}, {d}]
  %24 = kv_append{{axis=2, cap={cap}}} %23, %22, %2 : f32[{bsz}, {hk}, {cap}, {d}]
  %25 = state_out{{name=\"k_cache\"}} %24 : f32[{bsz}, {hk}, {cap}, {d}]
  %26 = state{{name=\"v_cache\"}} : f32[{bsz}, {hk}, {cap}, {d}]
  %27 = kv_append{{axis=2, cap={cap}}} %26, %20, %2 : f32[{bsz}, {hk}, {cap}, {d}]
  %28 = state_out{{name=\"v_cache\"}} %27 : f32[{bsz}, {hk}, {cap}, {d}]
  %29 = output{{name=\"q_rot\"}} %21 : f32[{bsz}, {hq}, {s}, {d}]
  %30 = output{{name=\"k_out\"}} %24 : f32[{bsz}, {hk}, {cap}, {d}]
  %31 = output{{name=\"v_out\"}} %27 : f32[{bsz}, {hk}, {cap}, {d}]
}}
",
                aq = add(nq, "9", 6),
                ak = add(nk, "11", 7),
                av = add(nk, "13", 8),
            )
        };
        let graph = text::parse(&graph_text(true)).unwrap();
        let what = format!("b={bsz} s={s}");
        let (positions, lengths) = (Tensor::i32(vec![bsz, s], positions), Tensor::i32(vec![bsz], lengths));
        let inputs = HashMap::from([
            ("x".to_string(), t(&[bsz, s, k], 176 + s as u64)),
            ("positions".to_string(), positions),
            ("lengths".to_string(), lengths),
        ]);
        let caches = [("k_cache", t(&[bsz, hk, cap, d], 178)), ("v_cache", t(&[bsz, hk, cap, d], 179))];
        let states: HashMap<String, Tensor> = caches.iter().map(|(n, c)| (n.to_string(), c.clone())).collect();
        let mut head = graph.clone();
        assert_eq!(AttentionHead { cost: CostModel::Launches }.run(&mut head), 1, "{what}: the head formed");
        graphc_ir::verify(&mut head).unwrap();
        assert!(text::print(&head).contains("qkv_rope{bias=true"), "{what}: a biased head");
        let want = head_runs_as_its_parts_on_the_cpu(&graph, &head, &inputs, &states, &weights, &what);
        let unbiased = reference::run(&text::parse(&graph_text(false)).unwrap(), &inputs, states.clone(), &weights).unwrap().outputs;
        for name in ["q_rot", "k_out", "v_out"] {
            assert_separates(&format!("{what} {name}: the biases"), &want[name], &unbiased[name]);
        }
        let Some(mut fused) = open_graph(&head, &weights) else { return };
        let mut plain = open_graph(&graph, &weights).unwrap();
        for (name, cache) in &caches {
            fused.set_state(name, cache).unwrap();
            plain.set_state(name, cache).unwrap();
        }
        let got = fused.step(&inputs).unwrap();
        assert_eq!(fused.counters()["device_launches_last_step"], 1, "{what}: one launch");
        let alone = plain.step(&inputs).unwrap();
        for name in ["q_rot", "k_out", "v_out"] {
            assert!(bits(&got[name]) == bits(&alone[name]), "{what} {name}: differs from the unfused graph on the device in its bits");
        }
    }
}

/// A llama layer's head, made one `qkv_rope` op by the `attention_head`
/// pass, runs as one kernel (`matmul_qkv_rope`):
/// q, k and v projected from one `x`, q and k rotated by adjacent pairs
/// with a rotary_dim short of the head (features past it pass through),
/// k and v appended at each batch row's own offset, for every weight type,
/// decode (two rows at different positions) and prefill shapes. Heads of
/// 10 and 6 features (30, 20 and 12 weight rows) put weight boundaries
/// inside a workgroup's columns, and GQA has 3 q heads to 2 k heads. Every
/// result is bit for bit what the ops' own kernels give one at a time on
/// the same device, and the reference's values; the controls (k appended
/// unrotated, q unrotated) are far away. On the CPU, the reference and the
/// fast executor run the op as its parts (`cpu::parts`) to the bits of the
/// graph the pass started from.
#[test]
fn attention_inputs_run_as_one_kernel() {
    let (k, hq, hk, hv, d, dv, cap, rotary_dim) = (256, 3, 2, 2, 10, 6, 8, 8);
    let Some(dev) = device() else { return };
    let append = Op::KvAppend { axis: 2, cap: graphc_ir::Dim::konst(cap as i64), window: None };
    let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    // Every weight type rotating by adjacent pairs; rotating by halves, two.
    let cases = graphc_gpu::kernels::WEIGHT_DTYPES
        .map(|t| (t, RopeStyle::GptJ))
        .into_iter()
        .chain([(DType::F32, RopeStyle::Neox), (DType::Q4_1, RopeStyle::Neox)]);
    for (dtype, style) in cases {
        let rope = Op::Rope { style, rotary_dim, theta: 10000.0, scaling: RopeScaling::None };
        let style_name = style.name();
        let w = |n: usize, seed: u64| OneWeight { dtype, shape: vec![n, k], bytes: weight_bytes(dtype, n, k, seed) };
        let weights =
            Weights(HashMap::from([("wq".to_string(), w(hq * d, 160)), ("wk".to_string(), w(hk * d, 161)), ("wv".to_string(), w(hv * dv, 162))]));
        // Decode: two rows at their own positions and offsets; prefill: five tokens each.
        for (b, s, positions, lengths) in [(2, 1, vec![5, 2], vec![5, 2]), (2, 5, vec![0, 1, 2, 3, 4, 3, 4, 5, 6, 7], vec![0, 3])] {
            let (nq, nk, nv) = (hq * d, hk * d, hv * dv);
            let graph = text::parse(&format!(
                "graph \"attention_inputs\" {{
  %0 = input{{name=\"x\"}} : f32[{b}, {s}, {k}]
  %1 = input{{name=\"positions\"}} : i32[{b}, {s}]
  %2 = input{{name=\"lengths\"}} : i32[{b}]
  %3 = weight{{name=\"wq\"}} : {dt}[{nq}, {k}]
  %4 = weight{{name=\"wk\"}} : {dt}[{nk}, {k}]
  %5 = weight{{name=\"wv\"}} : {dt}[{nv}, {k}]
  %6 = matmul %0, %3 : f32[{b}, {s}, {nq}]
  %7 = matmul %0, %4 : f32[{b}, {s}, {nk}]
  %8 = matmul %0, %5 : f32[{b}, {s}, {nv}]
  %9 = reshape{{shape=[{b}, {s}, {hq}, {d}]}} %6 : f32[{b}, {s}, {hq}, {d}]
  %10 = permute{{perm=[0, 2, 1, 3]}} %9 : f32[{b}, {hq}, {s}, {d}]
  %11 = reshape{{shape=[{b}, {s}, {hk}, {d}]}} %7 : f32[{b}, {s}, {hk}, {d}]
  %12 = permute{{perm=[0, 2, 1, 3]}} %11 : f32[{b}, {hk}, {s}, {d}]
  %13 = reshape{{shape=[{b}, {s}, {hv}, {dv}]}} %8 : f32[{b}, {s}, {hv}, {dv}]
  %14 = permute{{perm=[0, 2, 1, 3]}} %13 : f32[{b}, {hv}, {s}, {dv}]
  %15 = rope{{style={style_name}, rotary_dim={rotary_dim}, theta=10000.0}} %10, %1 : f32[{b}, {hq}, {s}, {d}]
  %16 = rope{{style={style_name}, rotary_dim={rotary_dim}, theta=10000.0}} %12, %1 : f32[{b}, {hk}, {s}, {d}]
  %17 = state{{name=\"k_cache\"}} : f32[{b}, {hk}, {cap}, {d}]
  %18 = kv_append{{axis=2, cap={cap}}} %17, %16, %2 : f32[{b}, {hk}, {cap}, {d}]
  %19 = state_out{{name=\"k_cache\"}} %18 : f32[{b}, {hk}, {cap}, {d}]
  %20 = state{{name=\"v_cache\"}} : f32[{b}, {hv}, {cap}, {dv}]
  %21 = kv_append{{axis=2, cap={cap}}} %20, %14, %2 : f32[{b}, {hv}, {cap}, {dv}]
  %22 = state_out{{name=\"v_cache\"}} %21 : f32[{b}, {hv}, {cap}, {dv}]
  %23 = output{{name=\"q_rot\"}} %15 : f32[{b}, {hq}, {s}, {d}]
  %24 = output{{name=\"k_out\"}} %18 : f32[{b}, {hk}, {cap}, {d}]
  %25 = output{{name=\"v_out\"}} %21 : f32[{b}, {hv}, {cap}, {dv}]
}}
",
                dt = dtype_name(dtype)
            ))
            .unwrap();
            let what = format!("{} {style_name} b={b} s={s}", dtype_name(dtype));
            let (positions, lengths) = (Tensor::i32(vec![b, s], positions), Tensor::i32(vec![b], lengths));
            let x = t(&[b, s, k], 163 + s as u64);
            let inputs =
                HashMap::from([("x".to_string(), x.clone()), ("positions".to_string(), positions.clone()), ("lengths".to_string(), lengths.clone())]);
            let caches = [("k_cache", t(&[b, hk, cap, d], 164)), ("v_cache", t(&[b, hv, cap, dv], 165))];
            let mut head = graph.clone();
            assert_eq!(AttentionHead { cost: CostModel::Launches }.run(&mut head), 1, "{what}: the head formed");
            graphc_ir::verify(&mut head).unwrap();
            let states: HashMap<String, Tensor> = caches.iter().map(|(n, c)| (n.to_string(), c.clone())).collect();
            let want = head_runs_as_its_parts_on_the_cpu(&graph, &head, &inputs, &states, &weights, &what);
            let Some(mut g) = open_graph(&head, &weights) else { return };
            for (name, cache) in &caches {
                g.set_state(name, cache).unwrap();
            }
            let got = g.step(&inputs).unwrap();
            assert_eq!(g.counters()["device_qkv_rope_heads"], 1, "{what}: the head runs as one kernel");
            assert_eq!(g.counters()["device_launches_last_step"], 1, "{what}: one launch");
            for name in ["q_rot", "k_out", "v_out"] {
                let scale = want[name].as_f32().unwrap().iter().fold(1f32, |a, v| a.max(v.abs()));
                let diff = max_diff(&got[name], &want[name]);
                assert!(diff <= 4e-5 * scale, "{what} {name}: max |gpu - reference| = {diff:e} (scale {scale})");
            }
            // The ops one at a time on the same device.
            let project = |w: &str, h: usize, hd: usize| {
                let y = dev.run_op(&Op::MatMul, &[OpInput::Tensor(&x), OpInput::Weight(weights.weight(w).unwrap())]).unwrap();
                heads_major(&y, h, hd)
            };
            let (q, kk, v) = (project("wq", hq, d), project("wk", hk, d), project("wv", hv, dv));
            let q_rot = dev.run_op(&rope, &[OpInput::Tensor(&q), OpInput::Tensor(&positions)]).unwrap();
            let k_rot = dev.run_op(&rope, &[OpInput::Tensor(&kk), OpInput::Tensor(&positions)]).unwrap();
            let k_out = dev.run_op(&append, &[OpInput::Tensor(&caches[0].1), OpInput::Tensor(&k_rot), OpInput::Tensor(&lengths)]).unwrap();
            let v_out = dev.run_op(&append, &[OpInput::Tensor(&caches[1].1), OpInput::Tensor(&v), OpInput::Tensor(&lengths)]).unwrap();
            for (name, alone) in [("q_rot", &q_rot), ("k_out", &k_out), ("v_out", &v_out)] {
                assert!(bits(&got[name]) == bits(alone), "{what} {name}: differs from the ops' own kernels in its bits");
            }
            let unrotated = dev.run_op(&append, &[OpInput::Tensor(&caches[0].1), OpInput::Tensor(&kk), OpInput::Tensor(&lengths)]).unwrap();
            assert_separates(&format!("{what}: k appended rotated"), &got["k_out"], &unrotated);
            assert_separates(&format!("{what}: q rotated"), &got["q_rot"], &q);
            if dtype != DType::Q4_1 || style != RopeStyle::GptJ || s != 1 {
                continue;
            }
            // The appends' offsets are still checked on the host, though
            // the appends run inside the fused kernel.
            let mut past_cap = inputs.clone();
            past_cap.insert("lengths".to_string(), Tensor::i32(vec![b], vec![0, cap as i32]));
            let err = g.step(&past_cap).unwrap_err().to_string();
            assert!(err.contains("capacity") && err.contains("kv_append"), "{what}: an offset past the capacity must be refused: {err}");
            // Where the head is not legal it does not form, and the
            // results stay the same bits: q's projection read elsewhere
            // too (it would never be written). The unfused graph runs to
            // the same bits on a device that binds fewer than the kernel's
            // 10 buffers, which refuses the head, naming its limit.
            let text_with_q_raw = text::print(&graph).replace("\n}", "\n  %26 = output{name=\"q_raw\"} %6 : f32[2, 1, 30]\n}");
            let mut read_twice = text::parse(&text_with_q_raw).unwrap();
            assert_eq!(AttentionHead { cost: CostModel::Launches }.run(&mut read_twice), 0, "{what}: q's projection is read twice");
            let mut controls = vec![("q projection read twice", open_graph(&read_twice, &weights).unwrap())];
            if let Some(small) = wgpu_device().filter(|_| std::env::var("GRAPHC_TEST_DEVICE").map_or(true, |d| d == "wgpu")) {
                let small = std::sync::Arc::new({
                    let mut small = small;
                    small.limit_buffers(9);
                    small
                });
                let mut refused = graphc_gpu::exec::GpuGraph::new(small.clone(), &head, &weights).unwrap();
                for (name, cache) in &caches {
                    refused.set_state(name, cache).unwrap();
                }
                let err = refused.step(&inputs).unwrap_err().to_string();
                assert!(
                    err.contains("binding limits") && err.contains("--disable-pass attention_head"),
                    "{what}: the head refused on 9 buffers: {err}"
                );
                let g: Box<dyn graphc_gpu::exec::DeviceGraph> = Box::new(graphc_gpu::exec::GpuGraph::new(small, &graph, &weights).unwrap());
                controls.push(("9 buffers a kernel, the pass off", g));
            }
            for (control, mut g) in controls {
                for (name, cache) in &caches {
                    g.set_state(name, cache).unwrap();
                }
                let unfused = g.step(&inputs).unwrap();
                assert_eq!(g.counters()["device_qkv_rope_heads"], 0, "{control}: the group must not form");
                for name in ["q_rot", "k_out", "v_out"] {
                    assert!(bits(&unfused[name]) == bits(&got[name]), "{control} {name}: differs from the fused kernel in its bits");
                }
            }
        }
    }
}

/// A norm of a residual add whose sum is read again, made one `add_norm`
/// by the `residual_norm` pass (and the rest one `chain`), runs as one kernel that writes the sum and
/// its norm, bit for bit the add and norm kernels one at a time; the
/// reference runs the op as its parts to the unfused graph's bits.
#[test]
fn residual_norms_run_as_one_kernel() {
    let (rows, d) = (3, 300);
    for (kind, norm_attrs, bias) in [(NormKind::Rms, "kind=rms, eps=1e-6", ""), (NormKind::Layer, "kind=layer, eps=1e-5", ", %9")] {
        let graph = text::parse(&format!(
            "graph \"residual\" {{\n  %0 = input{{name=\"x\"}} : f32[{rows}, {d}]\n  %1 = input{{name=\"delta\"}} : f32[{rows}, {d}]\n  %2 = weight{{name=\"w\"}} : f32[{d}]\n  %9 = weight{{name=\"bias\"}} : f32[{d}]\n  %3 = add %0, %1 : f32[{rows}, {d}]\n  %4 = norm{{{norm_attrs}}} %3, %2{bias} : f32[{rows}, {d}]\n  %5 = mul %4, %1 : f32[{rows}, {d}]\n  %6 = add %3, %5 : f32[{rows}, {d}]\n  %7 = output{{name=\"h\"}} %3 : f32[{rows}, {d}]\n  %8 = output{{name=\"n\"}} %4 : f32[{rows}, {d}]\n  %10 = output{{name=\"y\"}} %6 : f32[{rows}, {d}]\n}}\n"
        ))
        .unwrap();
        let weight = |seed| OneWeight { dtype: DType::F32, shape: vec![d], bytes: weight_bytes(DType::F32, 1, d, seed) };
        let weights = Weights(HashMap::from([("w".to_string(), weight(100)), ("bias".to_string(), weight(101))]));
        let inputs = HashMap::from([("x".to_string(), t(&[rows, d], 102)), ("delta".to_string(), t(&[rows, d], 103))]);
        let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let mut fused = graph.clone();
        assert_eq!(ResidualNorm { cost: CostModel::Launches }.run(&mut fused), 1, "{kind:?}: the add_norm formed");
        graphc_ir::verify(&mut fused).unwrap();
        assert_eq!(ElementwiseChain { cost: CostModel::Launches }.run(&mut fused), 1, "{kind:?}: the mul folds into the second add");
        graphc_ir::verify(&mut fused).unwrap();
        let want = reference::run(&graph, &inputs, HashMap::new(), &weights).unwrap().outputs;
        // The reference runs the op as its parts, to the unfused bits.
        let parts = reference::run(&fused, &inputs, HashMap::new(), &weights).unwrap().outputs;
        for name in ["h", "n", "y"] {
            assert!(bits(&parts[name]) == bits(&want[name]), "{kind:?} {name}: the reference's add_norm differs from its parts in its bits");
        }
        let Some(mut g) = open_graph(&fused, &weights) else { return };
        let mut got = g.step(&inputs).unwrap();
        assert_eq!(g.counters()["device_fused_residual_norms"], 1, "{kind:?}: the first add is written by the norm's kernel");
        assert_eq!(g.counters()["device_launches_last_step"], 2, "{kind:?}: add_norm, then the mul + add chain");
        for name in ["h", "n", "y"] {
            assert_close(&format!("{kind:?} {name}"), &got[name], &want[name]);
        }

        // The unfused kernels, one op at a time on the same device.
        let dev = device().unwrap();
        let (x, delta) = (&inputs["x"], &inputs["delta"]);
        let sum = dev.run_op(&Op::Binary(BinaryOp::Add), &[OpInput::Tensor(x), OpInput::Tensor(delta)]).unwrap();
        let w = weights.weight("w").unwrap();
        let b = weights.weight("bias").unwrap();
        let norm_op = Op::Norm { kind, eps: if kind == NormKind::Rms { 1e-6 } else { 1e-5 } };
        let mut norm_inputs = vec![OpInput::Tensor(&sum), OpInput::Weight(w)];
        if kind == NormKind::Layer {
            norm_inputs.push(OpInput::Weight(b));
        }
        let normed = dev.run_op(&norm_op, &norm_inputs).unwrap();
        let (h, n) = (got.remove("h").unwrap(), got.remove("n").unwrap());
        assert!(bits(&h) == bits(&sum), "{kind:?}: the fused sum differs from the add kernel's in its bits");
        assert!(bits(&n) == bits(&normed), "{kind:?}: the fused norm differs from the norm kernel's in its bits");
        // Normalizing x alone (the add dropped) is far away.
        let mut x_inputs = vec![OpInput::Tensor(x), OpInput::Weight(w)];
        if kind == NormKind::Layer {
            x_inputs.push(OpInput::Weight(b));
        }
        assert_separates(&format!("{kind:?}: norm of x alone"), &n, &dev.run_op(&norm_op, &x_inputs).unwrap());
    }
}

/// An op of several results whose further result no `result` node reads
/// has nowhere to write it: the executor refuses it, naming the op.
#[test]
fn an_op_with_an_unread_further_result_is_refused() {
    let graph = text::parse(
        "graph \"sum_unread\" {\n  %0 = input{name=\"x\"} : f32[3, 64]\n  %1 = input{name=\"delta\"} : f32[3, 64]\n  %2 = weight{name=\"w\"} : f32[64]\n  %3 = add_norm{kind=rms, eps=1e-6} %0, %1, %2 : f32[3, 64]\n  %4 = output{name=\"n\"} %3 : f32[3, 64]\n}\n",
    )
    .unwrap();
    let weights =
        Weights(HashMap::from([("w".to_string(), OneWeight { dtype: DType::F32, shape: vec![64], bytes: weight_bytes(DType::F32, 1, 64, 7) })]));
    let inputs = HashMap::from([("x".to_string(), t(&[3, 64], 8)), ("delta".to_string(), t(&[3, 64], 9))]);
    let Some(mut g) = open_graph(&graph, &weights) else { return };
    let err = g.step(&inputs).unwrap_err().to_string();
    assert!(err.contains("add_norm has 2 results, and not each is read by a `result` node"), "{err}");
}

/// Weight-only values (Gemma's `1 + w` norm weights) run in the first step
/// only: later steps launch the norm alone, read the kept `1 + w`, and give
/// bit for bit what a first step gives on the same input.
#[test]
fn weight_only_values_are_computed_once() {
    let graph = text::parse(
        "graph \"fold\" {\n  %0 = input{name=\"x\"} : f32[3, 37]\n  %1 = weight{name=\"w\"} : f32[37]\n  %2 = const{value=1.0} : f32[1]\n  %3 = add %1, %2 : f32[37]\n  %4 = norm{kind=rms, eps=1e-6} %0, %3 : f32[3, 37]\n  %5 = output{name=\"y\"} %4 : f32[3, 37]\n}\n",
    )
    .unwrap();
    let w = OneWeight { dtype: DType::F32, shape: vec![37], bytes: weight_bytes(DType::F32, 1, 37, 70) };
    let x = |seed| HashMap::from([("x".to_string(), t(&[3, 37], seed))]);
    let Some(mut g) = open_graph(&graph, &w) else { return };
    assert_eq!(g.counters()["device_folded_nodes"], 2, "the const and the add are weight-only");
    g.step(&x(71)).unwrap();
    assert_eq!(g.counters()["device_launches_last_step"], 2, "first step: add, norm");
    let second = g.step(&x(72)).unwrap().remove("y").unwrap();
    assert_eq!(g.counters()["device_launches_last_step"], 1, "later steps: the norm alone");
    let want = reference::run(&graph, &x(72), HashMap::new(), &w).unwrap().outputs.remove("y").unwrap();
    assert_close("norm with a kept 1 + w", &second, &want);
    let mut fresh = open_graph(&graph, &w).unwrap();
    let first = fresh.step(&x(72)).unwrap().remove("y").unwrap();
    assert_eq!(second.as_f32().unwrap(), first.as_f32().unwrap(), "a kept value changed the result");
    // Without the `+ 1` the result differs: the test tells a dropped add.
    let plain = reference_op(&Op::Norm { kind: NormKind::Rms, eps: 1e-6 }, &[&x(72)["x"], &Tensor::f32(vec![37], bytemuck_f32(&w.bytes))]);
    assert_separates("norm with 1 + w vs with w", &second, &plain);
}

/// Step inputs are rewritten in place in the next step (so their bind
/// groups stay), except one a state kept: here the state is last step's
/// `x`, which the next step's `x` must not overwrite.
#[test]
fn a_state_kept_from_an_input_survives_the_next_step() {
    let graph = text::parse(
        "graph \"keep\" {\n  %0 = input{name=\"x\"} : f32[4]\n  %1 = state{name=\"s\"} : f32[4]\n  %2 = add %0, %1 : f32[4]\n  %3 = output{name=\"y\"} %2 : f32[4]\n  %4 = state_out{name=\"s\"} %0\n}\n",
    )
    .unwrap();
    let Some(mut g) = open_graph(&graph, &graphc_tests_free::NoWeights) else { return };
    g.set_state("s", &Tensor::f32(vec![4], vec![0.0; 4])).unwrap();
    let x = |v: f32| HashMap::from([("x".to_string(), Tensor::f32(vec![4], vec![v; 4]))]);
    assert_eq!(g.step(&x(1.0)).unwrap()["y"].as_f32().unwrap(), [1.0; 4]);
    assert_eq!(g.step(&x(10.0)).unwrap()["y"].as_f32().unwrap(), [11.0; 4], "the kept state was overwritten by the next input");
    assert_eq!(g.step(&x(100.0)).unwrap()["y"].as_f32().unwrap(), [110.0; 4]);
}

/// A permute that moves only axes of size 1 (decode's head transposes) is
/// the same bytes: no kernel; one that moves data is a copy. Both give the
/// reference's values, and a step's later kernels do not overwrite the
/// buffer the no-copy permute still reads.
#[test]
fn a_permute_of_unit_axes_runs_as_no_copy() {
    for (seq, copies) in [(1usize, 0u64), (5, 1)] {
        let graph = text::parse(&format!(
            "graph \"p\" {{\n  %0 = input{{name=\"x\"}} : f32[2, {seq}, 3, 4]\n  %1 = exp %0 : f32[2, {seq}, 3, 4]\n  %2 = permute{{perm=[0, 2, 1, 3]}} %1 : f32[2, 3, {seq}, 4]\n  %3 = neg %0 : f32[2, {seq}, 3, 4]\n  %4 = permute{{perm=[0, 2, 1, 3]}} %3 : f32[2, 3, {seq}, 4]\n  %5 = add %2, %4 : f32[2, 3, {seq}, 4]\n  %6 = output{{name=\"y\"}} %5 : f32[2, 3, {seq}, 4]\n}}\n"
        ))
        .unwrap();
        let inputs = HashMap::from([("x".to_string(), t(&[2, seq, 3, 4], 80 + seq as u64))]);
        let Some(mut g) = open_graph(&graph, &graphc_tests_free::NoWeights) else { return };
        for _ in 0..2 {
            let got = g.step(&inputs).unwrap().remove("y").unwrap();
            let want = reference::run(&graph, &inputs, HashMap::new(), &graphc_tests_free::NoWeights).unwrap().outputs.remove("y").unwrap();
            assert_close(&format!("permutes at seq {seq}"), &got, &want);
        }
        assert_eq!(g.counters()["device_launches_last_step"], 3 + 2 * copies, "seq {seq}: exp, neg, add and {} permute copies", 2 * copies);
        assert_eq!(g.counters()["device_aliased_permutes"], 2 * 2 * (1 - copies), "seq {seq}: permutes run as no copy over two steps");
    }
}

/// Every session `open::open` makes on wgpu shares the process's one
/// device (NVIDIA's Vulkan driver refused new ones after about a dozen in a
/// process, on an H200), and each counts the bind groups its own steps
/// built, not the shared device's: forty sessions in a row, each with the
/// first one's count.
#[test]
fn sessions_share_one_device_and_count_their_own_bindings() {
    let graph =
        text::parse("graph \"e\" {\n  %0 = input{name=\"x\"} : f32[3, 5]\n  %1 = exp %0 : f32[3, 5]\n  %2 = output{name=\"y\"} %1 : f32[3, 5]\n}\n")
            .unwrap();
    let inputs = HashMap::from([("x".to_string(), t(&[3, 5], 7))]);
    let on_wgpu = !matches!(std::env::var("GRAPHC_TEST_DEVICE").as_deref(), Ok("cuda") | Ok("metal"));
    let mut first = None;
    for session in 0..40 {
        let Some(mut g) = open_graph(&graph, &graphc_tests_free::NoWeights) else { return };
        let got = g.step(&inputs).unwrap().remove("y").unwrap();
        assert_close(
            &format!("session {session}"),
            &got,
            &reference::run(&graph, &inputs, HashMap::new(), &graphc_tests_free::NoWeights).unwrap().outputs.remove("y").unwrap(),
        );
        let built = g.counters()["device_bindings_built"];
        let first = *first.get_or_insert(built);
        assert!(!on_wgpu || first > 0, "a wgpu step builds its bind groups");
        assert_eq!(built, first, "session {session}: counts its own bind groups, not the device's");
    }
}

/// The shared wgpu device outlives sessions, so the bind groups it caches
/// must not keep a closed session's memory alive (a bind group holds every
/// buffer it binds): a group whose buffers graphc has dropped is evicted
/// when the next groups are built. `run_op` drops its buffers when it
/// returns, so after each of six runs the cache holds one run's groups.
#[test]
fn bind_groups_of_dropped_buffers_are_evicted() {
    if matches!(std::env::var("GRAPHC_TEST_DEVICE").as_deref(), Ok("cuda") | Ok("metal")) {
        eprintln!("SKIPPED: wgpu's bind-group cache (the device under test is not wgpu)");
        return;
    }
    let Some(d) = wgpu_device() else { return };
    let x = t(&[3, 5], 1);
    let mut after_one = None;
    for run in 0..6 {
        d.run_op(&Op::Unary(UnaryOp::Exp), &[OpInput::Tensor(&x)]).unwrap();
        let cached = d.cached_bind_groups();
        let first = *after_one.get_or_insert(cached);
        assert!(first > 0, "a run builds bind groups");
        assert_eq!(cached, first, "run {run}: the earlier runs' groups, whose buffers are gone, are still cached");
    }
}

fn bytemuck_f32(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn reductions_and_moe_routers() {
    let x = t(&[3, 5, 7], 60);
    for op in [graphc_ir::ReduceOp::Sum, graphc_ir::ReduceOp::Max, graphc_ir::ReduceOp::Mean] {
        for axis in 0..3 {
            if check(&format!("reduce {op:?} axis {axis}"), &Op::Reduce { op, axis }, &[&x]).is_none() {
                return;
            }
        }
    }
    // Ties (the repeated 0.5 and 2.0) go to the lower index.
    let scores = Tensor::f32(vec![2, 6], vec![0.5, 2.0, 0.5, -1.0, 2.0, 0.1, 3.0, -2.0, 0.25, 0.25, 1.0, 0.0]);
    for k in [1, 2, 3] {
        let got = check(&format!("top_k_mask k={k}"), &Op::TopKMask { axis: 1, k }, &[&scores]).unwrap();
        assert_eq!(max_diff(&got, &reference_op(&Op::TopKMask { axis: 1, k }, &[&scores])), 0.0, "a mask is exact");
    }
    check("top_k_mask along axis 0", &Op::TopKMask { axis: 0, k: 1 }, &[&scores]);
    // Rows where the second expert sits inside, then outside, the jitter band.
    let router = Tensor::f32(vec![3, 4], vec![1.0, 0.99, -0.5, 0.2, 0.3, 2.0, 1.7, 1.99, -1.0, -0.2, -0.3, -0.21]);
    let got = check("sparse_mixer", &Op::SparseMixer { jitter_eps: 0.01 }, &[&router]).unwrap();
    let wider = reference_op(&Op::SparseMixer { jitter_eps: 0.2 }, &[&router]);
    assert_separates_by("sparse_mixer: the jitter band matters", &got, &wider, 1e-3);
}

#[test]
fn concat_and_the_recurrent_layers_with_ragged_rows() {
    let (a, b) = (t(&[2, 3, 5], 70), t(&[2, 4, 5], 71));
    if check("concat axis 1", &Op::Concat { axis: 1 }, &[&a, &b]).is_none() {
        return;
    }
    check("concat axis 2", &Op::Concat { axis: 2 }, &[&a, &t(&[2, 3, 2], 72)]);
    // Row 0 advances 5 tokens, row 1 only 2 (its padding must not enter
    // the carried state).
    let lengths = Tensor::i32(vec![2], vec![5, 2]);
    let (x, w, state) = (t(&[2, 5, 6], 73), t(&[6, 4], 74), t(&[2, 3, 6], 75));
    let op = Op::CausalConv1d { kernel: 4 };
    let got = check("causal_conv1d", &op, &[&x, &w, &state, &lengths]).unwrap();
    let all_full = Tensor::i32(vec![2], vec![5, 5]);
    assert_separates("causal_conv1d: each row's own length", &got, &reference_op(&op, &[&x, &w, &state, &all_full]));
    // 2 key heads serving 4 value heads.
    let (q, k) = (t(&[2, 2, 5, 4], 76), t(&[2, 2, 5, 4], 77));
    let v = t(&[2, 4, 5, 3], 78);
    let g = Tensor::f32(vec![2, 4, 5], values(79, 40, -1.0, 0.0));
    let beta = Tensor::f32(vec![2, 4, 5], values(80, 40, 0.0, 1.0));
    let s0 = t(&[2, 4, 4, 3], 81);
    let got = check("gated_delta_rule", &Op::GatedDeltaRule, &[&q, &k, &v, &g, &beta, &s0, &lengths]).unwrap();
    let wrong = reference_op(&Op::GatedDeltaRule, &[&q, &k, &v, &g, &beta, &s0, &all_full]);
    assert_separates("gated_delta_rule: each row's own length", &got, &wrong);
}

#[test]
fn a_graph_with_an_op_without_a_kernel_is_refused_naming_op_target_and_node() {
    let graph = text::parse(
        "graph \"g\" {\n  %0 = input{name=\"x\"} : f32[4]\n  %1 = cast{dtype=i32} %0 : i32[4]\n  %2 = output{name=\"y\"} %1 : i32[4]\n}\n",
    )
    .unwrap();
    let e = graphc_gpu::lower::check_graph(&graph, "cuda").unwrap_err().to_string();
    assert!(e.contains("op `cast` has no cuda kernel") && e.contains("at `%1 = cast"), "{e}");
}

/// The block types the CPU computes but the GPU kernels do not decode
/// (the i-quants of 1 to 3 bits): a GPU plan reading one is refused when
/// compiled, naming the weight, its type and the target; the same graph
/// with a q4_k or an mxfp4 weight (the controls) passes.
#[test]
fn a_weight_of_a_type_without_a_gpu_kernel_is_refused_naming_tensor_type_and_target() {
    let (mut refused, mut passed) = (0, 0);
    for dtype in [DType::IQ2XXS, DType::IQ2XS, DType::IQ2S, DType::IQ3XXS, DType::IQ3S, DType::IQ1S, DType::IQ1M, DType::Q4K, DType::MXFP4] {
        let graph = text::parse(&format!(
            "graph \"g\" {{\n  %0 = input{{name=\"x\"}} : f32[1, 256]\n  %1 = weight{{name=\"blk.0.attn_q.weight\"}} : {dtype}[256, 256]\n  %2 = matmul %0, %1 : f32[1, 256]\n  %3 = output{{name=\"y\"}} %2 : f32[1, 256]\n}}\n"
        ))
        .unwrap();
        for target in ["wgpu", "cuda", "metal"] {
            let r = graphc_gpu::lower::check_graph(&graph, target);
            if graphc_gpu::kernels::WEIGHT_DTYPES.contains(&dtype) {
                assert!(r.is_ok(), "{dtype} on {target}: {r:?}");
                passed += 1;
                continue;
            }
            refused += 1;
            let e = r.unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "op `matmul` has no {target} kernel (weight `blk.0.attn_q.weight` is {dtype}, a block type with no {target} decoding kernel"
                )),
                "{e}"
            );
        }
    }
    assert_eq!((refused, passed), (7 * 3, 2 * 3), "seven types refused and two passed on each target");
}

/// The ops the norm and residual rules make (`norm_matmul`,
/// `norm_matmul_glu`, `matmul_add`, `norm_add`) run as one kernel each,
/// for every weight type, decode and prefill shapes, rows longer than a
/// workgroup (k = 512): each result bit for bit what the ops they replace
/// give through their own kernels on the same device, and the
/// reference's values. The controls (the norm dropped, the residual
/// dropped, another epsilon) are far away.
#[test]
fn norm_and_residual_ops_run_as_one_kernel_each() {
    let (n, k) = (37, 512);
    let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for dtype in graphc_gpu::kernels::WEIGHT_DTYPES {
        let dt = dtype_name(dtype);
        let w = |seed| OneWeight { dtype, shape: vec![n, k], bytes: weight_bytes(dtype, n, k, seed) };
        let mut weights = HashMap::from([("w".to_string(), w(170)), ("w_gate".to_string(), w(171)), ("w_up".to_string(), w(172))]);
        // A norm weight away from 1, so a dropped one shows.
        weights.insert("g".to_string(), OneWeight { dtype: DType::F32, shape: vec![k], bytes: weight_bytes(DType::F32, 1, k, 173) });
        let weights = Weights(weights);
        for m in [1, 11] {
            let head = format!(
                "  %0 = input{{name=\"x\"}} : f32[{m}, {k}]\n  %1 = weight{{name=\"g\"}} : f32[{k}]\n  %2 = weight{{name=\"w\"}} : {dt}[{n}, {k}]\n  %3 = weight{{name=\"w_gate\"}} : {dt}[{n}, {k}]\n  %4 = weight{{name=\"w_up\"}} : {dt}[{n}, {k}]\n  %5 = input{{name=\"r\"}} : f32[{m}, {n}]\n  %6 = input{{name=\"a\"}} : f32[{m}, {k}]\n"
            );
            let fused = format!(
                "graph \"fused\" {{\n{head}  %7 = norm_matmul{{eps=1e-5}} %0, %1, %2\n  %8 = norm_matmul_glu{{act=silu, eps=1e-5}} %0, %1, %3, %4\n  %9 = matmul_add %0, %2, %5\n  %10 = norm_add{{eps=1e-5}} %6, %0, %1\n  %11 = output{{name=\"y1\"}} %7\n  %12 = output{{name=\"y2\"}} %8\n  %13 = output{{name=\"y3\"}} %9\n  %14 = output{{name=\"y4\"}} %10\n}}\n"
            );
            let parts = format!(
                "graph \"parts\" {{\n{head}  %7 = norm{{kind=rms, eps=1e-5}} %0, %1\n  %8 = matmul %7, %2\n  %9 = matmul_glu{{act=silu}} %7, %3, %4\n  %10 = matmul %0, %2\n  %11 = add %5, %10\n  %12 = add %6, %7\n  %13 = output{{name=\"y1\"}} %8\n  %14 = output{{name=\"y2\"}} %9\n  %15 = output{{name=\"y3\"}} %11\n  %16 = output{{name=\"y4\"}} %12\n}}\n"
            );
            let parse = |src: &str| {
                let mut g = text::parse(src).unwrap();
                graphc_ir::verify(&mut g).unwrap();
                g
            };
            let (fused, parts) = (parse(&fused), parse(&parts));
            let inputs = HashMap::from([
                ("x".to_string(), t(&[m, k], 174 + m as u64)),
                ("r".to_string(), t(&[m, n], 175)),
                ("a".to_string(), t(&[m, k], 176)),
            ]);
            let Some(mut g) = open_graph(&fused, &weights) else { return };
            let got = g.step(&inputs).unwrap();
            let what = format!("{dt} m={m}");
            assert_eq!(g.counters()["device_launches_last_step"], 4, "{what}: one launch an op");
            let mut unfused = open_graph(&parts, &weights).unwrap();
            let alone = unfused.step(&inputs).unwrap();
            let want = reference::run(&fused, &inputs, HashMap::new(), &weights).unwrap().outputs;
            for y in ["y1", "y2", "y3", "y4"] {
                assert!(bits(&got[y]) == bits(&alone[y]), "{what} {y}: differs from the parts' own kernels in its bits");
                let scale = want[y].as_f32().unwrap().iter().fold(1f32, |a, v| a.max(v.abs()));
                let d = max_diff(&got[y], &want[y]);
                assert!(d <= 4e-5 * scale, "{what} {y}: max |gpu - reference| = {d:e} (scale {scale})");
            }
            // The controls: the parts with one of them left out or changed.
            let control = |from: &str, to: &str, y: &str| {
                let src = text::print(&parts).replace(from, to);
                reference::run(&parse(&src), &inputs, HashMap::new(), &weights).unwrap().outputs.remove(y).unwrap()
            };
            assert_separates(&format!("{what}: y1 without its norm"), &got["y1"], &control("matmul %7, %2", "matmul %0, %2", "y1"));
            assert_separates(
                &format!("{what}: y2 without its norm"),
                &got["y2"],
                &control("matmul_glu{act=silu} %7,", "matmul_glu{act=silu} %0,", "y2"),
            );
            assert_separates(&format!("{what}: y3 without its residual"), &got["y3"], &control("= add %5, %10", "= mul %5, %10", "y3"));
            assert_separates_by(&format!("{what}: y4 with eps 1e-1"), &got["y4"], &control("eps=1e-5", "eps=1e-1", "y4"), 1e-4);
        }
    }
}

/// `norm_matmul`s of one input and norm stack as `matmul`s of one input
/// do (`stacked_matmuls`, q/k/v of a Gemma layer) and, as a llama layer's
/// rotated and appended q/k/v (a `qkv_rope` of the `attention_head` pass),
/// run as its one `matmul_qkv_rope` kernel:
/// both forming the norm inside, bit for bit what the graph with the norm
/// as its own op gives on the same device (its projections stacked the
/// same way, plus a norm launch), and the reference's values.
#[test]
fn normed_projections_stack_and_form_the_layer_head() {
    let (k, hq, hk, d, cap) = (256, 3, 2, 10, 8);
    let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for dtype in [DType::Q4_1, DType::Q8_0, DType::F32] {
        let dt = dtype_name(dtype);
        let w = |n: usize, seed: u64| OneWeight { dtype, shape: vec![n, k], bytes: weight_bytes(dtype, n, k, seed) };
        let g = OneWeight { dtype: DType::F32, shape: vec![k], bytes: weight_bytes(DType::F32, 1, k, 180) };
        let weights = Weights(HashMap::from([
            ("wq".to_string(), w(hq * d, 181)),
            ("wk".to_string(), w(hk * d, 182)),
            ("wv".to_string(), w(hk * d, 183)),
            ("g".to_string(), g),
        ]));
        let (nq, nk) = (hq * d, hk * d);
        for (b, s) in [(2, 1), (2, 5)] {
            // The projections' source: the norm inside them, or as its own op (%20).
            let graph = |normed: bool, rotated: bool| {
                let project = |w: usize| match normed {
                    true => format!("norm_matmul{{eps=1e-5}} %0, %6, %{w}"),
                    false => format!("matmul %20, %{w}"),
                };
                let mut src = format!(
                    "graph \"heads\" {{\n  %0 = input{{name=\"x\"}} : f32[{b}, {s}, {k}]\n  %1 = input{{name=\"positions\"}} : i32[{b}, {s}]\n  %2 = input{{name=\"lengths\"}} : i32[{b}]\n  %3 = weight{{name=\"wq\"}} : {dt}[{nq}, {k}]\n  %4 = weight{{name=\"wk\"}} : {dt}[{nk}, {k}]\n  %5 = weight{{name=\"wv\"}} : {dt}[{nk}, {k}]\n  %6 = weight{{name=\"g\"}} : f32[{k}]\n"
                );
                if !normed {
                    src += "  %20 = norm{kind=rms, eps=1e-5} %0, %6\n";
                }
                src += &format!("  %7 = {}\n  %8 = {}\n  %9 = {}\n", project(3), project(4), project(5));
                if rotated {
                    src += &format!(
                        "  %10 = reshape{{shape=[{b}, {s}, {hq}, {d}]}} %7\n  %11 = permute{{perm=[0, 2, 1, 3]}} %10\n  %12 = reshape{{shape=[{b}, {s}, {hk}, {d}]}} %8\n  %13 = permute{{perm=[0, 2, 1, 3]}} %12\n  %14 = reshape{{shape=[{b}, {s}, {hk}, {d}]}} %9\n  %15 = permute{{perm=[0, 2, 1, 3]}} %14\n  %16 = rope{{style=gptj, rotary_dim={d}, theta=10000.0}} %11, %1\n  %17 = rope{{style=gptj, rotary_dim={d}, theta=10000.0}} %13, %1\n  %18 = state{{name=\"k_cache\"}} : f32[{b}, {hk}, {cap}, {d}]\n  %19 = kv_append{{axis=2, cap={cap}}} %18, %17, %2\n  %21 = state_out{{name=\"k_cache\"}} %19\n  %22 = state{{name=\"v_cache\"}} : f32[{b}, {hk}, {cap}, {d}]\n  %23 = kv_append{{axis=2, cap={cap}}} %22, %15, %2\n  %24 = state_out{{name=\"v_cache\"}} %23\n  %25 = output{{name=\"q\"}} %16\n  %26 = output{{name=\"k\"}} %19\n  %27 = output{{name=\"v\"}} %23\n}}\n"
                    );
                } else {
                    src += "  %25 = output{name=\"q\"} %7\n  %26 = output{name=\"k\"} %8\n  %27 = output{name=\"v\"} %9\n}\n";
                }
                let mut g = text::parse(&src).unwrap();
                graphc_ir::verify(&mut g).unwrap();
                g
            };
            let positions = Tensor::i32(vec![b, s], (0..b * s).map(|i| (i % s + 2 * (i / s)) as i32).collect());
            let inputs = HashMap::from([
                ("x".to_string(), t(&[b, s, k], 184 + s as u64)),
                ("positions".to_string(), positions),
                ("lengths".to_string(), Tensor::i32(vec![b], vec![0, 2])),
            ]);
            let caches = [("k_cache", t(&[b, hk, cap, d], 185)), ("v_cache", t(&[b, hk, cap, d], 186))];
            for rotated in [false, true] {
                let what = format!("{dt} b={b} s={s} rotated={rotated}");
                let run = |normed: bool| {
                    let mut graph = graph(normed, rotated);
                    // The layer head is the attention_head pass's op.
                    if rotated {
                        assert_eq!(AttentionHead { cost: CostModel::Launches }.run(&mut graph), 1, "the head formed");
                        graphc_ir::verify(&mut graph).unwrap();
                    }
                    let mut g = open_graph(&graph, &weights)?;
                    for (name, cache) in &caches {
                        g.set_state(name, cache).unwrap();
                    }
                    let out = g.step(&inputs).unwrap();
                    Some((graph, out, g.counters()))
                };
                let Some((fused_graph, got, counts)) = run(true) else { return };
                let (_, alone, alone_counts) = run(false).unwrap();
                let (group, launches) = if rotated { ("device_qkv_rope_heads", 1) } else { ("device_stacked_matmuls", 1) };
                assert!(counts[group] > 0, "{what}: the group formed ({counts:?})");
                assert_eq!(counts["device_launches_last_step"], launches, "{what}: one launch");
                assert_eq!(alone_counts["device_launches_last_step"], launches + 1, "{what}: the control's norm is a launch of its own");
                let states: HashMap<String, Tensor> = caches.iter().map(|(n, c)| (n.to_string(), c.clone())).collect();
                let want = reference::run(&fused_graph, &inputs, states, &weights).unwrap().outputs;
                for y in ["q", "k", "v"] {
                    assert!(bits(&got[y]) == bits(&alone[y]), "{what} {y}: differs from the norm's own kernel's in its bits");
                    let scale = want[y].as_f32().unwrap().iter().fold(1f32, |a, v| a.max(v.abs()));
                    let diff = max_diff(&got[y], &want[y]);
                    assert!(diff <= 4e-5 * scale, "{what} {y}: max |gpu - reference| = {diff:e} (scale {scale})");
                }
            }
        }
    }
}

/// `attention_project` over every weight type: each head's share of the
/// output projection, computed in the workgroup that finished the head
/// (short context: one launch), or in the merge of split key blocks (a
/// decode step deep into a long cache, or into a sliding window's ring
/// cache: two). Against the reference, which
/// projects each head's features with the others zeroed; the shares of a
/// position sum to the one projection. Controls: shares stored heads-major
/// (`[b, h, s, n]`, the attention's own layout), and one head's share
/// alone as the projection.
#[test]
fn attention_is_projected_by_head_for_every_weight_type() {
    use graphc_gpu::kernels::attention::KEYS_PER_SPLIT;
    let (b, nh, nkv, dv, n) = (2, 8, 2, 32, 24);
    for dtype in graphc_gpu::kernels::WEIGHT_DTYPES {
        // Short; split deep into a long cache; split over a ring cache of a
        // sliding window (Gemma's local layers past 512 positions).
        let ring = KEYS_PER_SPLIT + 60;
        let window = format!(", window={}, ring=true", KEYS_PER_SPLIT + 37);
        let cases = [
            (3, 40, 39, 1, String::new()),
            (1, 2 * KEYS_PER_SPLIT + 100, 2 * KEYS_PER_SPLIT + 60, 2, String::new()),
            (1, ring, 3 * ring + 5, 2, window),
        ];
        for (s, t_len, deepest, launches, attrs) in cases {
            let what = format!("{} s={s} t={t_len}{attrs}", dtype_name(dtype));
            let graph = text::parse(&format!(
                "graph \"project\" {{
  %0 = input{{name=\"q\"}} : f32[{b}, {nh}, {s}, {dv}]
  %1 = input{{name=\"k\"}} : f32[{b}, {nkv}, {t_len}, {dv}]
  %2 = input{{name=\"v\"}} : f32[{b}, {nkv}, {t_len}, {dv}]
  %3 = input{{name=\"positions\"}} : i32[{b}, {s}]
  %4 = weight{{name=\"w\"}} : {}[{n}, {}]
  %5 = attention_project{{n_heads={nh}, n_kv_heads={nkv}, scale=0.2, causal=true{attrs}}} %0, %1, %2, %3, %4
  %6 = output{{name=\"p\"}} %5
  %7 = attention{{n_heads={nh}, n_kv_heads={nkv}, scale=0.2, causal=true{attrs}}} %0, %1, %2, %3
  %8 = permute{{perm=[0, 2, 1, 3]}} %7
  %9 = reshape{{shape=[{b}, {s}, {}]}} %8
  %10 = matmul %9, %4
  %11 = output{{name=\"projected\"}} %10
}}
",
                dtype_name(dtype),
                nh * dv,
                nh * dv
            ))
            .unwrap();
            let mut graph = graph;
            graphc_ir::verify(&mut graph).unwrap();
            let weights = OneWeight { dtype, shape: vec![n, nh * dv], bytes: weight_bytes(dtype, n, nh * dv, 40) };
            let positions: Vec<i32> = (0..b * s).map(|i| (deepest - (i % 7) * 3) as i32).collect();
            let inputs = HashMap::from([
                ("q".to_string(), t(&[b, nh, s, dv], 41)),
                ("k".to_string(), t(&[b, nkv, t_len, dv], 42)),
                ("v".to_string(), t(&[b, nkv, t_len, dv], 43)),
                ("positions".to_string(), Tensor::i32(vec![b, s], positions)),
            ]);
            let want = reference::run(&graph, &inputs, HashMap::new(), &weights).unwrap().outputs;
            let Some(mut g) = open_graph(&graph, &weights) else { return };
            let got = g.step(&inputs).unwrap();
            // The project op's launches, then the unfused form's three: the
            // attention and its permute's copy, or the split attention's two
            // (a one-token permute is no copy); and the matmul.
            assert_eq!(g.counters()["device_launches_last_step"], launches + 3, "{what}");
            let p = &got["p"];
            assert_close(&format!("{what}: shares"), p, &want["p"]);
            // Each position's shares sum to the one projection.
            let shares = p.as_f32().unwrap();
            let summed: Vec<f32> = (0..b * s).flat_map(|r| (0..n).map(move |j| (0..nh).map(|h| shares[(r * nh + h) * n + j]).sum::<f32>())).collect();
            let summed = Tensor::f32(vec![b, s, n], summed);
            assert_close(&format!("{what}: shares summed"), &summed, &want["projected"]);
            let one_head: Vec<f32> = (0..b * s).flat_map(|r| shares[r * nh * n..][..n].to_vec()).collect();
            assert_separates(&format!("{what}: one head's share"), &want["projected"], &Tensor::f32(vec![b, s, n], one_head));
            if s > 1 {
                let heads_major = reference_op(&Op::Permute { perm: vec![0, 2, 1, 3] }, &[&want["p"]]);
                let heads_major = Tensor::f32(vec![b, s, nh, n], heads_major.as_f32().unwrap().to_vec());
                assert_separates(&format!("{what}: shares stored heads-major"), p, &heads_major);
            }
        }
    }
}

/// A layer tail's inputs (`[b, n_heads, n_kv_heads, dv, d, t]`): q of `s`
/// queries at the cache's last `s` positions, the K/V cache, the residual.
fn layer_tail_inputs([b, nh, nkv, dv, d, t_len]: [usize; 6], s: usize, seed: u64) -> HashMap<String, Tensor> {
    let positions: Vec<i32> = (0..s).map(|i| (t_len - s + i) as i32).collect();
    HashMap::from([
        ("q".to_string(), t(&[b, nh, s, dv], seed)),
        ("k".to_string(), t(&[b, nkv, t_len, dv], seed + 1)),
        ("v".to_string(), t(&[b, nkv, t_len, dv], seed + 2)),
        ("positions".to_string(), Tensor::i32(vec![b, s], positions)),
        ("residual".to_string(), t(&[b, s, d], seed + 3)),
    ])
}

/// A llama layer's tail with its output projection split by head
/// (`attention_project` pass): the shares' sum is formed by its readers, the
/// normed gated MLP (its rows staged in its prologue for a step of up to
/// `PREFILL_ROWS` rows, one or three here; summed into scratch first for
/// a longer prefill, twelve) and the down projection (in its epilogue),
/// so a decode step launches three kernels where the unfused graph
/// launches four. The folded sums keep the bits of the `add_partials`
/// kernel's (the ops run one at a time on the same device); the whole
/// agrees with the reference of the unfused graph. Control: the residual
/// left out of the sum.
#[test]
fn shares_are_summed_where_they_are_read() {
    use graphc_passes::attention_project::AttentionProject;
    let (b, nh, nkv, dv, d, f, t_len) = (1, 4, 2, 32, 64, 96, 40);
    for s in [1, 3, 12] {
        let graph = text::parse(&format!(
            "graph \"layer\" {{
  %0 = input{{name=\"q\"}} : f32[{b}, {nh}, {s}, {dv}]
  %1 = input{{name=\"k\"}} : f32[{b}, {nkv}, {t_len}, {dv}]
  %2 = input{{name=\"v\"}} : f32[{b}, {nkv}, {t_len}, {dv}]
  %3 = input{{name=\"positions\"}} : i32[{b}, {s}]
  %4 = input{{name=\"residual\"}} : f32[{b}, {s}, {d}]
  %5 = weight{{name=\"w_o\"}} : q4_1[{d}, {}]
  %6 = attention{{n_heads={nh}, n_kv_heads={nkv}, scale=0.2, causal=true}} %0, %1, %2, %3
  %7 = permute{{perm=[0, 2, 1, 3]}} %6
  %8 = reshape{{shape=[{b}, {s}, {}]}} %7
  %9 = matmul_add %8, %5, %4
  %10 = weight{{name=\"norm\"}} : f32[{d}]
  %11 = weight{{name=\"w_gate\"}} : q4_1[{f}, {d}]
  %12 = weight{{name=\"w_up\"}} : q4_1[{f}, {d}]
  %13 = weight{{name=\"w_down\"}} : q4_1[{d}, {f}]
  %14 = norm_matmul_glu{{act=silu, eps=1e-5}} %9, %10, %11, %12
  %15 = matmul_add %14, %13, %9
  %16 = output{{name=\"y\"}} %15
}}
",
            nh * dv,
            nh * dv
        ))
        .unwrap();
        let mut graph = graph;
        graphc_ir::verify(&mut graph).unwrap();
        let mut fused = graph.clone();
        assert_eq!(AttentionProject { cost: CostModel::Launches }.run(&mut fused), 1, "s={s}: the projection split by head");
        graphc_ir::verify(&mut fused).unwrap();
        let weight =
            |dtype, shape: [usize; 2], seed| OneWeight { dtype, shape: shape.to_vec(), bytes: weight_bytes(dtype, shape[0], shape[1], seed) };
        let weights = Weights(HashMap::from([
            ("w_o".to_string(), weight(DType::Q4_1, [d, nh * dv], 50)),
            ("norm".to_string(), OneWeight { dtype: DType::F32, shape: vec![d], bytes: weight_bytes(DType::F32, 1, d, 51) }),
            ("w_gate".to_string(), weight(DType::Q4_1, [f, d], 52)),
            ("w_up".to_string(), weight(DType::Q4_1, [f, d], 53)),
            ("w_down".to_string(), weight(DType::Q4_1, [d, f], 54)),
        ]));
        let inputs = layer_tail_inputs([b, nh, nkv, dv, d, t_len], s, 55);
        let want = reference::run(&graph, &inputs, HashMap::new(), &weights).unwrap().outputs;
        // The reference runs the fused ops as their definitions (`cpu::parts`).
        let parts = reference::run(&fused, &inputs, HashMap::new(), &weights).unwrap().outputs;
        assert_close(&format!("s={s}: the fused graph on the reference"), &parts["y"], &want["y"]);
        let Some(mut g) = open_graph(&fused, &weights) else { return };
        let got = g.step(&inputs).unwrap();
        let counters = g.counters();
        assert_eq!(counters["device_attention_projections"], 1, "s={s}");
        assert_eq!(counters["device_partials_in_readers"], 1, "s={s}: the sum is formed by both readers");
        // Staged: attention_project, the MLP, the down projection. Longer: the sum into scratch before the MLP.
        let staged = s <= graphc_gpu::kernels::matmul::PREFILL_ROWS as usize;
        assert_eq!(counters["device_launches_last_step"], if staged { 3 } else { 4 }, "s={s}");
        assert_close(&format!("s={s}: y"), &got["y"], &want["y"]);

        // The same ops one at a time: the sum by the `add_partials` kernel.
        let dev = device().unwrap();
        let w = |name: &str| OpInput::Weight(weights.weight(name).unwrap());
        let project = Op::AttentionProject { n_heads: nh, n_kv_heads: nkv, scale: 0.2, causal: true, window: None, softcap: None, ring: false };
        let tensor = |name: &str| OpInput::Tensor(&inputs[name]);
        let shares = dev.run_op(&project, &[tensor("q"), tensor("k"), tensor("v"), tensor("positions"), w("w_o")]).unwrap();
        let sum = dev.run_op(&Op::AddPartials { eps: None }, &[tensor("residual"), OpInput::Tensor(&shares)]).unwrap();
        let mlp = Op::NormMatMulGlu { act: UnaryOp::Silu, eps: 1e-5 };
        let h = dev.run_op(&mlp, &[OpInput::Tensor(&sum), w("norm"), w("w_gate"), w("w_up")]).unwrap();
        let y = dev.run_op(&Op::MatMulAdd, &[OpInput::Tensor(&h), w("w_down"), OpInput::Tensor(&sum)]).unwrap();
        let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert!(bits(&got["y"]) == bits(&y), "s={s}: the sums formed in the readers differ from the add_partials kernel's in their bits");
        // The residual left out of the sum is far away.
        let zeros = Tensor::f32(vec![b, s, d], vec![0.0; b * s * d]);
        let no_residual = dev.run_op(&Op::AddPartials { eps: None }, &[OpInput::Tensor(&zeros), OpInput::Tensor(&shares)]).unwrap();
        let h = dev.run_op(&mlp, &[OpInput::Tensor(&no_residual), w("norm"), w("w_gate"), w("w_up")]).unwrap();
        let wrong = dev.run_op(&Op::MatMulAdd, &[OpInput::Tensor(&h), w("w_down"), OpInput::Tensor(&no_residual)]).unwrap();
        assert_separates(&format!("s={s}: the residual left out"), &got["y"], &wrong);
    }
}

/// A Gemma layer's tail (sandwich norms) with its output projection split
/// by head: the shares' sum goes through the post-norm
/// (`add_partials{eps}`), formed by its readers: the normed GeGLU MLP (its
/// rows staged, then normed as `norm_add` norms) and the post-MLP
/// `norm_add` (its `a`, a staged row, before its own norm). A decode step
/// launches four kernels where the unfused graph launches six; a twelve-row
/// prefill sums into scratch first (one kernel, `add_partials_normed`).
/// Bits equal the ops one at a time on the same device, logits the
/// reference; control: the post-norm left out of the sum.
#[test]
fn shares_through_a_post_norm_are_summed_where_they_are_read() {
    use graphc_passes::attention_project::AttentionProject;
    let (b, nh, nkv, dv, d, f, t_len) = (1, 4, 1, 64, 96, 128, 40);
    for s in [1, 12] {
        let mut graph = text::parse(&format!(
            "graph \"gemma_tail\" {{
  %0 = input{{name=\"q\"}} : f32[{b}, {nh}, {s}, {dv}]
  %1 = input{{name=\"k\"}} : f32[{b}, {nkv}, {t_len}, {dv}]
  %2 = input{{name=\"v\"}} : f32[{b}, {nkv}, {t_len}, {dv}]
  %3 = input{{name=\"positions\"}} : i32[{b}, {s}]
  %4 = input{{name=\"residual\"}} : f32[{b}, {s}, {d}]
  %5 = weight{{name=\"w_o\"}} : q4_k[{d}, {}]
  %6 = weight{{name=\"post_attn\"}} : f32[{d}]
  %7 = attention{{n_heads={nh}, n_kv_heads={nkv}, scale=0.125, causal=true, softcap=30.0}} %0, %1, %2, %3
  %8 = permute{{perm=[0, 2, 1, 3]}} %7
  %9 = reshape{{shape=[{b}, {s}, {}]}} %8
  %10 = matmul %9, %5
  %11 = norm_add{{eps=1e-6}} %4, %10, %6
  %12 = weight{{name=\"pre_ffw\"}} : f32[{d}]
  %13 = weight{{name=\"w_gate\"}} : q5_0[{f}, {d}]
  %14 = weight{{name=\"w_up\"}} : q5_0[{f}, {d}]
  %15 = weight{{name=\"w_down\"}} : q8_0[{d}, {f}]
  %16 = weight{{name=\"post_ffw\"}} : f32[{d}]
  %17 = norm_matmul_glu{{act=gelu_tanh, eps=1e-6}} %11, %12, %13, %14
  %18 = matmul %17, %15
  %19 = norm_add{{eps=1e-6}} %11, %18, %16
  %20 = output{{name=\"y\"}} %19
}}
",
            nh * dv,
            nh * dv
        ))
        .unwrap();
        graphc_ir::verify(&mut graph).unwrap();
        let mut fused = graph.clone();
        assert_eq!(AttentionProject { cost: CostModel::Launches }.run(&mut fused), 1, "s={s}: the projection split by head");
        graphc_ir::verify(&mut fused).unwrap();
        let weight =
            |dtype, shape: [usize; 2], seed| OneWeight { dtype, shape: shape.to_vec(), bytes: weight_bytes(dtype, shape[0], shape[1], seed) };
        // Norm weights near 1 (Gemma's `1 + w`), so the post-norms matter.
        let norm =
            |seed| OneWeight { dtype: DType::F32, shape: vec![d], bytes: values(seed, d, 0.5, 1.5).iter().flat_map(|v| v.to_le_bytes()).collect() };
        let weights = Weights(HashMap::from([
            ("w_o".to_string(), weight(DType::Q4K, [d, nh * dv], 60)),
            ("post_attn".to_string(), norm(61)),
            ("pre_ffw".to_string(), norm(62)),
            ("w_gate".to_string(), weight(DType::Q5_0, [f, d], 63)),
            ("w_up".to_string(), weight(DType::Q5_0, [f, d], 64)),
            ("w_down".to_string(), weight(DType::Q8_0, [d, f], 65)),
            ("post_ffw".to_string(), norm(66)),
        ]));
        let inputs = layer_tail_inputs([b, nh, nkv, dv, d, t_len], s, 67);
        let want = reference::run(&graph, &inputs, HashMap::new(), &weights).unwrap().outputs;
        // The reference runs the fused ops as their definitions (`cpu::parts`).
        let parts = reference::run(&fused, &inputs, HashMap::new(), &weights).unwrap().outputs;
        assert_close(&format!("s={s}: the fused graph on the reference"), &parts["y"], &want["y"]);
        let Some(mut g) = open_graph(&fused, &weights) else { return };
        let got = g.step(&inputs).unwrap();
        let counters = g.counters();
        assert_eq!(counters["device_partials_in_readers"], 1, "s={s}: the sum is formed by both readers");
        // Staged: attention_project, the MLP, the down projection, the post-MLP norm_add. Longer: the sum into scratch first.
        let staged = s <= graphc_gpu::kernels::matmul::PREFILL_ROWS as usize;
        assert_eq!(counters["device_launches_last_step"], if staged { 4 } else { 5 }, "s={s}");
        assert_close(&format!("s={s}: y"), &got["y"], &want["y"]);

        // The same ops one at a time: the sum by the `add_partials_normed` kernel.
        let dev = device().unwrap();
        let w = |name: &str| OpInput::Weight(weights.weight(name).unwrap());
        let tensor = |name: &str| OpInput::Tensor(&inputs[name]);
        let project =
            Op::AttentionProject { n_heads: nh, n_kv_heads: nkv, scale: 0.125, causal: true, window: None, softcap: Some(30.0), ring: false };
        let shares = dev.run_op(&project, &[tensor("q"), tensor("k"), tensor("v"), tensor("positions"), w("w_o")]).unwrap();
        let tail = |sum: &Tensor| {
            let mlp = Op::NormMatMulGlu { act: UnaryOp::GeluTanh, eps: 1e-6 };
            let h = dev.run_op(&mlp, &[OpInput::Tensor(sum), w("pre_ffw"), w("w_gate"), w("w_up")]).unwrap();
            let down = dev.run_op(&Op::MatMul, &[OpInput::Tensor(&h), w("w_down")]).unwrap();
            dev.run_op(&Op::NormAdd { eps: 1e-6 }, &[OpInput::Tensor(sum), OpInput::Tensor(&down), w("post_ffw")]).unwrap()
        };
        let sum = dev.run_op(&Op::AddPartials { eps: Some(1e-6) }, &[tensor("residual"), OpInput::Tensor(&shares), w("post_attn")]).unwrap();
        let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert!(bits(&got["y"]) == bits(&tail(&sum)), "s={s}: the sums formed in the readers differ from the add_partials kernel's in their bits");
        // The post-norm left out of the sum is far away.
        let plain = dev.run_op(&Op::AddPartials { eps: None }, &[tensor("residual"), OpInput::Tensor(&shares)]).unwrap();
        assert_separates(&format!("s={s}: the post-norm left out"), &got["y"], &tail(&plain));
    }
}

/// Two sums, each read by two matmuls: the first is also the `x` of a
/// `matmul_add`, which forms only its residual, so that sum is launched
/// and kept for both its readers (formed by one and not launched, the
/// other would find no value); the second, read as that `matmul_add`'s
/// residual and a matmul's `x`, is formed by both. Against the reference.
#[test]
fn a_sum_some_reader_cannot_form_is_launched() {
    let (b, nh, nkv, dv, d, t_len, s) = (1, 2, 1, 32, 64, 20, 1);
    let mut graph = text::parse(&format!(
        "graph \"two_sums\" {{
  %0 = input{{name=\"q\"}} : f32[{b}, {nh}, {s}, {dv}]
  %1 = input{{name=\"k\"}} : f32[{b}, {nkv}, {t_len}, {dv}]
  %2 = input{{name=\"v\"}} : f32[{b}, {nkv}, {t_len}, {dv}]
  %3 = input{{name=\"positions\"}} : i32[{b}, {s}]
  %4 = input{{name=\"residual\"}} : f32[{b}, {s}, {d}]
  %5 = weight{{name=\"w_a\"}} : q4_1[{d}, {}]
  %6 = weight{{name=\"w_b\"}} : q8_0[{d}, {}]
  %7 = weight{{name=\"w_y\"}} : q4_1[{d}, {d}]
  %8 = weight{{name=\"w_z\"}} : q8_0[{d}, {d}]
  %9 = attention_project{{n_heads={nh}, n_kv_heads={nkv}, scale=0.2, causal=true}} %0, %1, %2, %3, %5
  %10 = add_partials %4, %9
  %11 = attention_project{{n_heads={nh}, n_kv_heads={nkv}, scale=0.2, causal=true}} %0, %1, %2, %3, %6
  %12 = add_partials %4, %11
  %13 = matmul_add %10, %7, %12
  %14 = matmul %10, %8
  %15 = output{{name=\"y\"}} %13
  %16 = output{{name=\"z\"}} %14
  %17 = matmul %12, %8
  %18 = output{{name=\"w\"}} %17
}}
",
        nh * dv,
        nh * dv
    ))
    .unwrap();
    graphc_ir::verify(&mut graph).unwrap();
    let weight = |dtype, shape: [usize; 2], seed| OneWeight { dtype, shape: shape.to_vec(), bytes: weight_bytes(dtype, shape[0], shape[1], seed) };
    let weights = Weights(HashMap::from([
        ("w_a".to_string(), weight(DType::Q4_1, [d, nh * dv], 80)),
        ("w_b".to_string(), weight(DType::Q8_0, [d, nh * dv], 81)),
        ("w_y".to_string(), weight(DType::Q4_1, [d, d], 82)),
        ("w_z".to_string(), weight(DType::Q8_0, [d, d], 83)),
    ]));
    let inputs = layer_tail_inputs([b, nh, nkv, dv, d, t_len], s, 84);
    let want = reference::run(&graph, &inputs, HashMap::new(), &weights).unwrap().outputs;
    let Some(mut g) = open_graph(&graph, &weights) else { return };
    let got = g.step(&inputs).unwrap();
    // The second sum formed by both its readers, the first launched.
    assert_eq!(g.counters()["device_partials_in_readers"], 1);
    assert_eq!(g.counters()["device_launches_last_step"], 6, "two projections, one sum, three matmuls");
    for name in ["y", "z", "w"] {
        assert_close(name, &got[name], &want[name]);
    }
}

/// An attention of heads normed before their rotation, with its appends
/// (Gemma 3's), made one `norm_rope_attention` by its pass, runs a decode
/// step (one row a sequence) as the attention's kernels alone: each
/// workgroup norms and rotates its q head and its kv head's new key, takes
/// the new key and value from workgroup memory where their cache row is
/// read, and one workgroup a kv head appends them. A longer step appends
/// first (one kernel), then attends. Cases: two sequences at their own
/// offsets (GQA 2:1), one split deep into a long cache, one split over a
/// ring of a sliding window (the new row overwrites the ring's oldest),
/// and a ragged prefill. Every result (the shares, both caches) is bit for
/// bit the unfused graph's on the same device, and the reference's values;
/// the controls (the new key left out of the attention, k appended
/// unnormed) are far away.
#[test]
fn normed_attention_keeps_the_bits_of_its_parts() {
    use graphc_gpu::kernels::attention::KEYS_PER_SPLIT;
    use graphc_passes::norm_rope_attention::NormRopeAttention;
    let (nh, nkv, d, dv, n, rotary_dim) = (4, 2, 64, 64, 24, 48);
    let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let long = 2 * KEYS_PER_SPLIT + 100;
    let ring = KEYS_PER_SPLIT + 60;
    let ring_window = KEYS_PER_SPLIT + 37;
    // (what, style, weight type, b, s, cap, window, lengths, launches fused
    // / unfused: the paired norm_ropes, the paired appends, the attention)
    let cases = [
        ("decode", RopeStyle::Neox, DType::Q4K, 2, 1, 40, None, vec![5, 2], 1, 3),
        ("decode gptj q8_0", RopeStyle::GptJ, DType::Q8_0, 2, 1, 40, None, vec![7, 0], 1, 3),
        ("decode split", RopeStyle::Neox, DType::Q4K, 1, 1, long, None, vec![long - 40], 2, 4),
        ("decode split ring", RopeStyle::Neox, DType::Q4K, 1, 1, ring, Some(ring_window), vec![3 * ring + 5], 2, 4),
        // (v's permute is a copy in both: more than one row, two kv heads.)
        ("prefill", RopeStyle::Neox, DType::Q4K, 2, 5, 40, None, vec![0, 3], 3, 4),
    ];
    for (what, style, dtype, b, s, cap, window, lengths, fused_launches, unfused_launches) in cases {
        let style_name = style.name();
        let rope = format!("style={style_name}, rotary_dim={rotary_dim}, theta=10000.0");
        let (append_attrs, attention_attrs) = match window {
            Some(w) => (format!(", window={w}"), format!(", window={w}, ring=true")),
            None => (String::new(), String::new()),
        };
        // The attention reads the caches after the appends (`%12, %15`), or
        // as they were (the control).
        let graph_text = |caches_read: &str| {
            format!(
                "graph \"normed_attention\" {{
  %0 = input{{name=\"q\"}} : f32[{b}, {s}, {nh}, {d}]
  %1 = input{{name=\"k\"}} : f32[{b}, {s}, {nkv}, {d}]
  %2 = input{{name=\"v\"}} : f32[{b}, {s}, {nkv}, {dv}]
  %3 = input{{name=\"positions\"}} : i32[{b}, {s}]
  %4 = input{{name=\"lengths\"}} : i32[{b}]
  %5 = weight{{name=\"q_norm\"}} : f32[{d}]
  %6 = weight{{name=\"k_norm\"}} : f32[{d}]
  %7 = weight{{name=\"w_o\"}} : {dt}[{n}, {cols}]
  %8 = norm_rope{{eps=1e-6, {rope}}} %0, %5, %3
  %9 = norm_rope{{eps=1e-6, {rope}}} %1, %6, %3
  %10 = permute{{perm=[0, 2, 1, 3]}} %2
  %11 = state{{name=\"k_cache\"}} : f32[{b}, {nkv}, {cap}, {d}]
  %12 = kv_append{{axis=2, cap={cap}{append_attrs}}} %11, %9, %4
  %13 = state_out{{name=\"k_cache\"}} %12
  %14 = state{{name=\"v_cache\"}} : f32[{b}, {nkv}, {cap}, {dv}]
  %15 = kv_append{{axis=2, cap={cap}{append_attrs}}} %14, %10, %4
  %16 = state_out{{name=\"v_cache\"}} %15
  %17 = attention_project{{n_heads={nh}, n_kv_heads={nkv}, scale=0.125, causal=true, softcap=20.0{attention_attrs}}} %8, {caches_read}, %3, %7
  %18 = output{{name=\"p\"}} %17
  %19 = output{{name=\"k_out\"}} %12
  %20 = output{{name=\"v_out\"}} %15
}}
",
                dt = dtype_name(dtype),
                cols = nh * dv,
            )
        };
        let mut graph = text::parse(&graph_text("%12, %15")).unwrap();
        graphc_ir::verify(&mut graph).unwrap();
        let what = format!("{what} ({style_name}, {})", dtype_name(dtype));
        let mut fused = graph.clone();
        assert_eq!(NormRopeAttention { cost: CostModel::Launches }.run(&mut fused), 1, "{what}: the op formed");
        graphc_ir::verify(&mut fused).unwrap();
        let norm_weight = |seed: u64| {
            let g = values(seed, d, 0.5, 1.5);
            OneWeight { dtype: DType::F32, shape: vec![d], bytes: bytemuck::cast_slice(&g).to_vec() }
        };
        let weights = Weights(HashMap::from([
            ("q_norm".to_string(), norm_weight(170)),
            ("k_norm".to_string(), norm_weight(171)),
            ("w_o".to_string(), OneWeight { dtype, shape: vec![n, nh * dv], bytes: weight_bytes(dtype, n, nh * dv, 172) }),
        ]));
        // Each sequence's new rows at the positions after its length.
        let positions: Vec<i32> = lengths.iter().flat_map(|&l| (0..s).map(move |i| (l + i) as i32)).collect();
        let inputs = HashMap::from([
            ("q".to_string(), t(&[b, s, nh, d], 173)),
            ("k".to_string(), t(&[b, s, nkv, d], 174)),
            ("v".to_string(), t(&[b, s, nkv, dv], 175)),
            ("positions".to_string(), Tensor::i32(vec![b, s], positions)),
            ("lengths".to_string(), Tensor::i32(vec![b], lengths.iter().map(|&l| l as i32).collect())),
        ]);
        let caches = HashMap::from([("k_cache".to_string(), t(&[b, nkv, cap, d], 176)), ("v_cache".to_string(), t(&[b, nkv, cap, dv], 177))]);
        let want = reference::run(&graph, &inputs, caches.clone(), &weights).unwrap().outputs;
        // The reference runs the op as its parts, to the unfused graph's bits.
        let parts = reference::run(&fused, &inputs, caches.clone(), &weights).unwrap().outputs;
        for name in ["p", "k_out", "v_out"] {
            assert!(bits(&parts[name]) == bits(&want[name]), "{what} {name}: the reference's parts differ from the unfused graph");
        }
        let run = |graph: &graphc_ir::Graph| {
            let mut g = open_graph(graph, &weights)?;
            for (name, cache) in &caches {
                g.set_state(name, cache).unwrap();
            }
            let got = g.step(&inputs).unwrap();
            Some((got, g.counters()))
        };
        let Some((got, counters)) = run(&fused) else { return };
        let (unfused, unfused_counters) = run(&graph).unwrap();
        assert_eq!(counters["device_normed_attentions"], 1, "{what}");
        assert_eq!(counters["device_launches_last_step"], fused_launches, "{what}: launches fused");
        assert_eq!(unfused_counters["device_launches_last_step"], unfused_launches, "{what}: launches unfused");
        for name in ["p", "k_out", "v_out"] {
            assert!(bits(&got[name]) == bits(&unfused[name]), "{what} {name}: differs from the unfused graph's kernels in its bits");
            assert_close(&format!("{what} {name}"), &got[name], &want[name]);
        }
        // Controls: the attention over the caches as they were (the new key
        // and value left out where they are read), and k appended unnormed.
        let mut stale_graph = text::parse(&graph_text("%11, %14")).unwrap();
        graphc_ir::verify(&mut stale_graph).unwrap();
        // (On the reference: a device appends the cache a state reads in place.)
        let stale = reference::run(&stale_graph, &inputs, caches.clone(), &weights).unwrap().outputs;
        assert_separates(&format!("{what}: the new key and value read"), &got["p"], &stale["p"]);
        let raw_k = reference_op(&Op::Permute { perm: vec![0, 2, 1, 3] }, &[&inputs["k"]]);
        let append = Op::KvAppend { axis: 2, cap: graphc_ir::Dim::konst(cap as i64), window };
        let unnormed = reference_op(&append, &[&caches["k_cache"], &raw_k, &inputs["lengths"]]);
        assert_separates(&format!("{what}: k appended normed"), &got["k_out"], &unnormed);
    }
}

/// gpt-oss's clamped SwiGLU after its clamps, `(u + 1) · (g · σ(1.702 ·
/// g))`, as one chain: bit for bit the ops' own kernels. Its `exp` reads a
/// product, which lavapipe reassociated with `exp`'s scaling by `log2 e`
/// while the product was only multiplied by the runtime 1.0 (13 of these
/// 111 values differed in their last bits); every value of a chain now
/// passes a barrier no compiler sees through (`Func::Stored`).
#[test]
fn a_chain_reading_a_product_through_exp_keeps_its_bits() {
    let unfused = text::parse(
        "graph \"clamped_swiglu\" {\n  %0 = input{name=\"u\"} : f32[3, 37]\n  %1 = input{name=\"g\"} : f32[3, 37]\n  %2 = const{value=1.0} : f32[1]\n  %3 = const{value=1.702} : f32[1]\n  %4 = add %0, %2 : f32[3, 37]\n  %5 = mul %1, %3 : f32[3, 37]\n  %6 = sigmoid %5 : f32[3, 37]\n  %7 = mul %1, %6 : f32[3, 37]\n  %8 = mul %4, %7 : f32[3, 37]\n  %9 = output{name=\"y\"} %8 : f32[3, 37]\n}\n",
    )
    .unwrap();
    let mut graph = unfused.clone();
    assert_eq!(ElementwiseChain { cost: CostModel::Launches }.run(&mut graph), 4, "one chain of five ops");
    graphc_ir::verify(&mut graph).unwrap();
    let inputs = HashMap::from([
        ("u".to_string(), Tensor::f32(vec![3, 37], values(50, 111, -7.0, 7.0))),
        ("g".to_string(), Tensor::f32(vec![3, 37], values(51, 111, -7.0, 7.0))),
    ]);
    let Some(mut fused) = open_graph(&graph, &graphc_tests_free::NoWeights) else { return };
    let got = fused.step(&inputs).unwrap().remove("y").unwrap();
    assert_eq!(fused.counters()["device_launches_last_step"], 1, "the chain is one launch");
    let want = open_graph(&unfused, &graphc_tests_free::NoWeights).unwrap().step(&inputs).unwrap().remove("y").unwrap();
    let bits = |t: &Tensor| t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert!(bits(&got) == bits(&want), "the fused chain differs from the ops' own kernels in its bits");
    assert_separates("clamped swiglu vs a plain product", &got, &reference_op(&Op::Binary(BinaryOp::Mul), &[&inputs["u"], &inputs["g"]]));
}
