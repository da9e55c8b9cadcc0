//! Prefill-then-decode must compute what one prefill of the whole sequence
//! computes: the cache hand-off loses nothing. On the reference executor each
//! logit is the same f32 computation either way (same rows, same dot order),
//! so the comparison is on bit patterns. The fast backend picks its matmul
//! kernel by the number of rows in a step (row dots for a decode step,
//! dequantized tiles for a prefill), which sums in another order: there the
//! bound is a tolerance, with the same control.

use graphc::{CompileOptions, Kernels, Model, SessionOptions};
use graphc_backends::cpu::simd::Isa;
use graphc_tests::{temp_dir, GgufWriter};

fn check(kernels: Kernels, same: impl Fn(&[f32], &[f32], usize)) {
    let dir = temp_dir(&format!("kv-consistency-{}", kernels.name()));
    let ck = GgufWriter::tiny_llama().write(&dir, "tiny.gguf");
    let m = Model::compile(&ck, &CompileOptions::default(), None).unwrap();
    let opts = SessionOptions { kernels: Some(kernels), ..Default::default() };
    let seq = [3u32, 5, 4, 7, 6, 3, 3];
    let mut s = m.session(&opts).unwrap();
    let mut step = s.prefill(&seq[..2]).unwrap();
    for (i, &t) in seq.iter().enumerate().skip(2) {
        step = s.decode(t).unwrap();
        let mut full = m.session(&opts).unwrap();
        let whole = full.prefill(&seq[..=i]).unwrap();
        same(&step, &whole, i + 1);
    }
    // The control: a different history gives different logits (by far more
    // than the fast path's tolerance), so equality above is not vacuous.
    let mut other = m.session(&opts).unwrap();
    let mut alt = seq.to_vec();
    alt[0] = 4;
    let alt_logits = other.prefill(&alt).unwrap();
    let max = alt_logits.iter().zip(&step).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(max > 100.0 * FAST_TOLERANCE, "a different history must change the logits: max |Δ| {max}");
}

/// Why 1e-5: the tiny model's logits are O(1) sums over 16-64 products; two
/// f32 summation orders differ by a few ulps of that.
const FAST_TOLERANCE: f32 = 1e-5;

#[test]
fn incremental_decode_equals_full_prefill_bit_for_bit() {
    check(Kernels::Reference, |a, b, n| {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(a), bits(b), "after {n} tokens");
    });
}

#[test]
fn incremental_decode_equals_full_prefill_on_the_fast_backend() {
    check(Kernels::Fast(Isa::best()), |a, b, n| {
        let max = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(max <= FAST_TOLERANCE, "after {n} tokens: max |Δlogit| {max}");
    });
}
