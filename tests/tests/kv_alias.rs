//! Aliased K/V dedupe on a fused-KV graph (one latent read as both K and V,
//! through two identical `narrow().contiguous()` chains, 2 layers): after
//! the passes, one cache per layer instead of two, half the KV bytes per
//! token, and outputs over two steps identical on bit patterns with the
//! pass on and off. `tests/filetests/kv_alias/keeps_distinct_k_and_v.gir`
//! is the negative control (distinct K and V stay distinct).
//!
//! Guard: fails with `GRAPHC_DISABLE_PASSES=kv_alias`.

use graphc_backends::cpu::reference;
use graphc_backends::Tensor;
use graphc_ir::{text, verify, Graph, Op};
use graphc_passes::PassManager;
use graphc_tests::NoWeights;
use std::collections::HashMap;

fn fused_kv_graph() -> Graph {
    let mut src = String::from("graph \"fused_kv\" {\n  %x = input{name=\"x\"} : f32[batch, seq, 16]\n  %pos = input{name=\"positions\"} : i32[batch, seq]\n  %wq = input{name=\"wq\"} : f32[32, 16]\n  %wkv = input{name=\"wkv\"} : f32[8, 16]\n");
    let mut h = "%x".to_string();
    for l in 0..2 {
        src += &format!(
            r#"  layer {l} {{
    %q{l} = matmul {h}, %wq
    %qr{l} = reshape{{shape=[batch, seq, 4, 8]}} %q{l}
    %qh{l} = permute{{perm=[0, 2, 1, 3]}} %qr{l}
    %kv{l} = matmul {h}, %wkv
    %kvr{l} = reshape{{shape=[batch, seq, 1, 8]}} %kv{l}
    %kvh{l} = permute{{perm=[0, 2, 1, 3]}} %kvr{l}
    %ka{l} = narrow{{axis=3, start=0, len=8}} %kvh{l}
    %kc{l} = contiguous %ka{l}
    %va{l} = narrow{{axis=3, start=0, len=8}} %kvh{l}
    %vc{l} = contiguous %va{l}
    %ks{l} = state{{name="k.{l}"}} : f32[batch, 1, past, 8]
    %kall{l} = concat{{axis=2}} %ks{l}, %kc{l}
    %kout{l} = state_out{{name="k.{l}"}} %kall{l}
    %vs{l} = state{{name="v.{l}"}} : f32[batch, 1, past, 8]
    %vall{l} = concat{{axis=2}} %vs{l}, %vc{l}
    %vout{l} = state_out{{name="v.{l}"}} %vall{l}
    %att{l} = attention{{n_heads=4, n_kv_heads=1, scale=0.35355338, causal=true}} %qh{l}, %kall{l}, %vall{l}, %pos
    %ap{l} = permute{{perm=[0, 2, 1, 3]}} %att{l}
    %ar{l} = reshape{{shape=[batch, seq, 32]}} %ap{l}
    %h{l} = reshape{{shape=[batch, seq, 16, 2]}} %ar{l}
    %hs{l} = reduce_sum{{axis=3}} %h{l}
    %hh{l} = reshape{{shape=[batch, seq, 16]}} %hs{l}
  }}
"#
        );
        h = format!("%hh{l}");
    }
    src += &format!("  %y = output{{name=\"y\"}} {h}\n}}\n");
    let mut g = text::parse(&src).unwrap();
    verify(&mut g).unwrap();
    g
}

/// (state count, f32 elements per token of cache over all states)
fn kv_states(g: &Graph) -> (usize, usize) {
    let states: Vec<_> = g
        .nodes()
        .filter_map(|n| match &n.op {
            Op::State { ty, .. } => Some(ty.shape.iter().filter_map(|d| d.as_const()).product::<i64>() as usize),
            _ => None,
        })
        .collect();
    (states.len(), states.iter().sum())
}

fn optimized(disabled: &[&str]) -> (Graph, u64) {
    let mut g = fused_kv_graph();
    let disabled = graphc_tests::disabled_passes(disabled);
    let r = PassManager::default().run(&mut g, &disabled).unwrap();
    (g, r.rewrites("kv_alias").unwrap())
}

/// Two steps (a 3-token prefill, then one token), returning output bits.
fn two_steps(g: &Graph) -> Vec<u32> {
    let vals = |n: usize, k: f32| (0..n).map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * k).collect::<Vec<f32>>();
    let in_place = g.find_input("kv_lengths").is_some();
    let mut states: HashMap<String, Tensor> = HashMap::new();
    for n in g.nodes() {
        if let Op::State { name, .. } = &n.op {
            let rows = if in_place { 8 } else { 0 };
            states.insert(name.clone(), Tensor::f32(vec![1, 1, rows, 8], vec![0.0; rows * 8]));
        }
    }
    let mut out_bits = Vec::new();
    let mut len = 0;
    for (step, s) in [3usize, 1].into_iter().enumerate() {
        let mut inputs: HashMap<String, Tensor> = [
            ("x".to_string(), Tensor::f32(vec![1, s, 16], vals(s * 16, 1.0 + step as f32))),
            ("positions".to_string(), Tensor::i32(vec![1, s], (len..len + s).map(|p| p as i32).collect())),
            ("wq".to_string(), Tensor::f32(vec![32, 16], vals(512, 0.7))),
            ("wkv".to_string(), Tensor::f32(vec![8, 16], vals(128, 0.9))),
        ]
        .into();
        if in_place {
            inputs.insert("kv_lengths".into(), Tensor::i32(vec![1], vec![len as i32]));
        }
        let out = reference::run(g, &inputs, states, &NoWeights).unwrap();
        states = out.states;
        out_bits.extend(out.outputs["y"].as_f32().unwrap().iter().map(|v| v.to_bits()));
        len += s;
    }
    out_bits
}

#[test]
fn fused_kv_keeps_one_cache_per_layer_and_half_the_bytes() {
    let lowered = fused_kv_graph();
    assert_eq!(kv_states(&lowered), (4, 2 * 2 * 8), "lowered: K and V caches per layer");
    let (on, fired) = optimized(&[]);
    assert_eq!(fired, 2 * 3, "per layer: the V-side narrow and contiguous, and the V cache");
    assert_eq!(kv_states(&on), (2, 2 * 8), "one cache per layer: KV bytes per token halved");
    let attn_reads_one_cache = on.node_ids().filter(|&n| matches!(on.node(n).op, Op::Attention { .. })).all(|n| {
        let ins = on.inputs(n);
        ins[1] == ins[2]
    });
    assert!(attn_reads_one_cache, "attention reads the same cache as K and V");
}

#[test]
fn outputs_are_bit_identical_with_the_pass_on_and_off() {
    let (on, _) = optimized(&[]);
    let (off, fired) = optimized(&["kv_alias"]);
    assert_eq!(fired, 0);
    assert_eq!(kv_states(&off).0, 4);
    let (a, b) = (two_steps(&on), two_steps(&off));
    assert_eq!(a, b);
    assert!(a.iter().any(|&x| x != 0), "outputs are not all zero");
}
