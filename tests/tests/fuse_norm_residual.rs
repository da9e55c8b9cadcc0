//! The norm and residual rules' ops (`norm_matmul`, `norm_matmul_glu`,
//! `matmul_add`, `norm_add`: passes/src/rules/{norm,residual}.rs) on the
//! CPU: on the fast backend at every instruction set this CPU runs and on
//! the reference executor, each result is bit for bit what the ops it
//! replaces give there, and the fast backend's fused arms ran. The inputs
//! separate the right answer from the likely mistakes (the norm left out,
//! the residual left out, another epsilon), shown far away.
//!
//! Which plans hold them: a GPU plan every one the rules make (its cost is
//! launches); a CPU plan keeps a norm that several projections read as one
//! op (its cost is passes over memory: `passes/src/cost.rs`), asserted on
//! SmolLM2 here.

use graphc::{CompileOptions, Model};
use graphc_backends::cpu::fast::Fast;
use graphc_backends::cpu::reference;
use graphc_backends::cpu::simd::Isa;
use graphc_backends::{Tensor, WeightRef, WeightSource};
use graphc_ir::{text, verify, DType, Op};
use std::collections::HashMap;

fn values(seed: u64, n: usize) -> Vec<f32> {
    (0..n).map(|i| (((i as u64 * 2654435761 + seed * 40503) % 2001) as f32 / 1000.0) - 1.0).collect()
}

struct Weights(HashMap<&'static str, (DType, Vec<usize>, Vec<u8>)>);

impl WeightSource for Weights {
    fn weight(&self, name: &str) -> Option<WeightRef<'_>> {
        self.0.get(name).map(|(dtype, shape, bytes)| WeightRef { dtype: *dtype, shape, bytes })
    }
}

const HEAD: &str = "  %0 = input{name=\"x\"} : f32[M, 256]
  %1 = weight{name=\"g\"} : f32[256]
  %2 = weight{name=\"w\"} : q8_0[40, 256]
  %3 = weight{name=\"w_gate\"} : q8_0[40, 256]
  %4 = weight{name=\"w_up\"} : q8_0[40, 256]
  %5 = input{name=\"r\"} : f32[M, 40]
  %6 = input{name=\"a\"} : f32[M, 256]
";

const FUSED: &str = "  %7 = norm_matmul{eps=1e-5} %0, %1, %2
  %8 = norm_matmul_glu{act=silu, eps=1e-5} %0, %1, %3, %4
  %9 = matmul_add %0, %2, %5
  %10 = norm_add{eps=1e-5} %6, %0, %1
";

const PARTS: &str = "  %7 = norm{kind=rms, eps=1e-5} %0, %1
  %8 = matmul %7, %2
  %9 = matmul_glu{act=silu} %7, %3, %4
  %10 = matmul %0, %2
  %11 = add %5, %10
  %12 = add %6, %7
";

fn graph(m: usize, body: &str, outputs: [usize; 4]) -> graphc_ir::Graph {
    let outs: String = outputs.iter().enumerate().map(|(i, n)| format!("  %{} = output{{name=\"y{}\"}} %{n}\n", 20 + i, i + 1)).collect();
    let src = format!("graph \"g\" {{\n{}{body}{outs}}}\n", HEAD.replace('M', &m.to_string()));
    let mut g = text::parse(&src).unwrap();
    verify(&mut g).unwrap();
    g
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn fused_ops_are_their_parts_bit_for_bit_on_every_cpu_backend() {
    let g_weight: Vec<u8> = values(7, 256).iter().map(|v| 1.0 + 0.5 * v).flat_map(f32::to_le_bytes).collect();
    let weights = Weights(HashMap::from([
        ("g", (DType::F32, vec![256], g_weight)),
        ("w", (DType::Q8_0, vec![40, 256], graphc_tests::q8_0_weights(40, 256, 1))),
        ("w_gate", (DType::Q8_0, vec![40, 256], graphc_tests::q8_0_weights(40, 256, 2))),
        ("w_up", (DType::Q8_0, vec![40, 256], graphc_tests::q8_0_weights(40, 256, 3))),
    ]));
    for m in [1, 7] {
        let fused = graph(m, FUSED, [7, 8, 9, 10]);
        let parts = graph(m, PARTS, [8, 9, 11, 12]);
        let inputs = HashMap::from([
            ("x".to_string(), Tensor::f32(vec![m, 256], values(11, m * 256))),
            ("r".to_string(), Tensor::f32(vec![m, 40], values(12, m * 40))),
            ("a".to_string(), Tensor::f32(vec![m, 256], values(13, m * 256))),
        ]);
        let want = reference::run(&parts, &inputs, HashMap::new(), &weights).unwrap().outputs;
        let got = reference::run(&fused, &inputs, HashMap::new(), &weights).unwrap().outputs;
        for y in ["y1", "y2", "y3", "y4"] {
            assert!(bits(&got[y]) == bits(&want[y]), "reference m={m} {y}: the fused op differs from its parts");
        }
        for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
            let fast = Fast::new(isa, 2).unwrap();
            let want = fast.run(&parts, &inputs, HashMap::new(), &weights).unwrap().outputs;
            let got = fast.run(&fused, &inputs, HashMap::new(), &weights).unwrap().outputs;
            for y in ["y1", "y2", "y3", "y4"] {
                assert!(bits(&got[y]) == bits(&want[y]), "{isa:?} m={m} {y}: the fused op differs from its parts");
            }
            let counts = fast.kernel_counts();
            for arm in ["norm_matmul", "norm_matmul_glu", "matmul_add", "norm_add"] {
                assert_eq!(counts.get(arm), Some(&1), "{isa:?}: the `{arm}` arm ran ({counts:?})");
            }
        }
        // The controls: the parts with one left out or changed.
        let control = |from: &str, to: &str, y: &str| {
            let g = graph(m, &PARTS.replace(from, to), [8, 9, 11, 12]);
            reference::run(&g, &inputs, HashMap::new(), &weights).unwrap().outputs.remove(y).unwrap()
        };
        let far = |what: &str, y: &str, wrong: &Tensor, min: f32| {
            let d = got[y].as_f32().unwrap().iter().zip(wrong.as_f32().unwrap()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(d > min, "m={m} {what}: the input does not separate it (max difference {d:e})");
        };
        far("y1 without its norm", "y1", &control("matmul %7, %2", "matmul %0, %2", "y1"), 1e-2);
        far("y2 without its norm", "y2", &control("matmul_glu{act=silu} %7,", "matmul_glu{act=silu} %0,", "y2"), 1e-3);
        far("y3 without its residual", "y3", &control("= add %5, %10", "= mul %5, %10", "y3"), 1e-2);
        far("y4 with eps 1e-1", "y4", &control("eps=1e-5", "eps=1e-1", "y4"), 1e-2);
    }
}

/// The plan's device picks what extraction minimizes: on a GPU every
/// norm is formed by its readers (no norm op left); on the CPU a norm
/// read by q, k and v stays one op, and the rest fuse as on the GPU.
#[test]
fn a_cpu_plan_keeps_the_shared_norm_and_a_gpu_plan_fuses_it() {
    let count = |m: &Model, pick: fn(&Op) -> bool| m.graph().nodes().filter(|n| pick(&n.op)).count();
    let cpu = Model::compile(&graphc_tests::smollm2(), &CompileOptions { device: Some("cpu".into()), ..Default::default() }, None).unwrap();
    let gpu = Model::compile(&graphc_tests::smollm2(), &CompileOptions { device: Some("wgpu".into()), ..Default::default() }, None).unwrap();
    // The GPU plan: q, k and v forming their norm inside each layer's
    // `qkv_rope` (the `attention_head` pass), the output head a norm_matmul.
    assert_eq!(count(&gpu, |op| matches!(op, Op::QkvRope { eps: Some(_), .. })), 30);
    assert_eq!(count(&gpu, |op| matches!(op, Op::NormMatMul { .. })), 1);
    assert_eq!(count(&gpu, |op| matches!(op, Op::Norm { .. })), 0);
    // The CPU plan: each layer's attention norm one op read by three
    // matmuls; the MLP's norm, read by gate and up in the input graph, one
    // op before its matmul_glu; the output head's norm, read once, fused.
    assert_eq!(count(&cpu, |op| matches!(op, Op::NormMatMul { .. })), 1);
    assert_eq!(count(&cpu, |op| matches!(op, Op::Norm { .. })), 30 * 2);
    assert_eq!(count(&cpu, |op| matches!(op, Op::MatMulAdd)), 30 * 2, "both residual adds of every layer");
    // On the GPU the attention's output projection is split by head
    // (`attention_project`), its residual add an `add_partials`.
    assert_eq!(count(&gpu, |op| matches!(op, Op::MatMulAdd)), 30, "the MLP's residual add of every layer");
    assert_eq!(count(&gpu, |op| matches!(op, Op::AddPartials { eps: None })), 30, "the attention's residual add of every layer");
}
