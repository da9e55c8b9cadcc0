//! Prefill-then-decode must compute what one prefill of the whole sequence
//! computes: the cache hand-off loses nothing. Each logit is the same f32
//! computation either way (same rows, same dot order), so the comparison is
//! on bit patterns.

use graphc::{CompileOptions, Model, SessionOptions};
use graphc_tests::{temp_dir, GgufWriter};

#[test]
fn incremental_decode_equals_full_prefill_bit_for_bit() {
    let dir = temp_dir("kv-consistency");
    let ck = GgufWriter::tiny_llama().write(&dir, "tiny.gguf");
    let m = Model::compile(&ck, &CompileOptions::default(), None).unwrap();
    let seq = [3u32, 5, 4, 7, 6, 3, 3];
    let mut s = m.session(&SessionOptions::default()).unwrap();
    let mut step = s.prefill(&seq[..2]).unwrap();
    for (i, &t) in seq.iter().enumerate().skip(2) {
        step = s.decode(t).unwrap();
        let mut full = m.session(&SessionOptions::default()).unwrap();
        let whole = full.prefill(&seq[..=i]).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&step), bits(&whole), "after {} tokens", i + 1);
    }
    // The control: a different history gives different logits, so equality above is not vacuous.
    let mut other = m.session(&SessionOptions::default()).unwrap();
    let mut alt = seq.to_vec();
    alt[0] = 4;
    assert_ne!(other.prefill(&alt).unwrap(), step);
}
