//! graphc's dequantization of every GGUF block type, bit for bit against
//! blocks decoded by the `gguf` Python package (`tests/fixtures/quant_blocks.json`,
//! made by `tools/make_quant_fixtures.py`); and the GGUF reader's table of
//! every GGML type's block size against the package's.

use graphc_frontends::gguf::GgmlType;
use graphc_ir::{quant::dequantize, DType};
use graphc_tests::repo_root;

/// Every GGUF block type graphc computes.
fn block_types() -> impl Iterator<Item = DType> {
    DType::ALL.into_iter().filter(|t| t.block_elems() > 1)
}

fn fixture() -> serde_json::Value {
    let p = repo_root().join("tests/fixtures/quant_blocks.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The fixture's blocks of `dtype` and the package's decoding of them.
fn blocks(v: &serde_json::Value, dtype: DType) -> (Vec<u8>, Vec<u32>) {
    let t = &v["types"][dtype.name()];
    let hex = t["bytes_hex"].as_str().unwrap_or_else(|| panic!("no {dtype} in the fixture"));
    let bytes = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    let want = t["f32_bits"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    (bytes, want)
}

/// The elements where graphc's decoding of `bytes` as `dtype` differs from
/// `want` in any bit: `(index, got, want)`.
fn mismatches(dtype: DType, bytes: &[u8], want: &[u32]) -> Vec<(usize, f32, f32)> {
    let mut out = vec![0f32; want.len()];
    dequantize(dtype, bytes, &mut out);
    out.iter().zip(want).enumerate().filter(|(_, (g, w))| g.to_bits() != **w).map(|(i, (g, w))| (i, *g, f32::from_bits(*w))).collect()
}

#[test]
fn every_block_type_matches_the_gguf_package_bit_for_bit() {
    let v = fixture();
    let mut checked = Vec::new();
    for dtype in block_types() {
        let (bytes, want) = blocks(&v, dtype);
        assert_eq!(want.len(), 4 * dtype.block_elems(), "{dtype}: four blocks");
        let bad = mismatches(dtype, &bytes, &want);
        assert!(bad.is_empty(), "{dtype}: {} elements differ, first (index, graphc, gguf): {:?}", bad.len(), &bad[..bad.len().min(4)]);
        // The fixture has varied values (not all one number), so a wrong
        // nibble order or scale index cannot pass by accident.
        // (iq1's points take three values, shifted by a delta of two signs,
        // under a scale per sub-block: fewer distinct values by design.)
        let distinct: std::collections::HashSet<u32> = want.iter().copied().collect();
        let floor = if matches!(dtype, DType::IQ1S | DType::IQ1M) { want.len() / 16 } else { want.len() / 8 };
        assert!(distinct.len() > floor, "{dtype}: fixture too uniform ({} distinct values)", distinct.len());
        checked.push(dtype.name());
    }
    assert_eq!(checked.len(), 20);
}

/// The control for the test above: a block with one wrong byte (a planted
/// corruption of the fixture's quants, a scale, the high bits) is caught at
/// the elements it decodes, for every type; and iq4_nl's blocks read as
/// q4_0's (the same 32 elements in 18 bytes: a plausible mix-up) differ almost
/// everywhere.
#[test]
fn a_planted_wrong_block_fails_the_comparison() {
    let v = fixture();
    for dtype in block_types() {
        let (bytes, want) = blocks(&v, dtype);
        let bb = dtype.block_bytes();
        // Block 2's last byte (quants, or q6_k's d) and its byte 5 (a
        // scale, the q5 high bits, or quants) flipped in one bit each.
        for at in [2 * bb + bb - 1, 2 * bb + 5] {
            let mut planted = bytes.clone();
            planted[at] ^= 0x10;
            let bad = mismatches(dtype, &planted, &want);
            assert!(!bad.is_empty(), "{dtype}: flipping byte {at} went unnoticed");
            let block = 2 * dtype.block_elems()..3 * dtype.block_elems();
            assert!(bad.iter().all(|(i, _, _)| block.contains(i)), "{dtype}: byte {at} of block 2 changed elements outside it: {bad:?}");
        }
    }
    let (bytes, want) = blocks(&v, DType::IQ4NL);
    let bad = mismatches(DType::Q4_0, &bytes, &want);
    assert!(bad.len() > want.len() * 3 / 4, "iq4_nl read as q4_0: only {} of {} differ", bad.len(), want.len());
}

/// Every GGML type id the `gguf` package knows is one the reader sizes the
/// same way (so a file of any of them reads, offsets checked), and the
/// types graphc computes have their `DType`'s name and block. The one
/// difference is q8_1, whose ggml block is 36 bytes (two f16 and 32
/// quants); the package's 40 dates from f32 scales.
#[test]
fn the_readers_ggml_type_table_is_the_gguf_packages() {
    let v = fixture();
    let table = v["ggml_types"].as_object().unwrap();
    for (id, t) in table {
        let id: u32 = id.parse().unwrap();
        let (name, elems, bytes) = (t[0].as_str().unwrap(), t[1].as_u64().unwrap(), t[2].as_u64().unwrap());
        let ours = GgmlType::from_id(id).unwrap_or_else(|| panic!("GGML type {id} ({name}) unknown to the reader"));
        let want_bytes = if name == "q8_1" { 36 } else { bytes };
        assert_eq!((ours.name(), ours.block_elems(), ours.block_bytes()), (name, elems, want_bytes), "GGML type {id}");
    }
    assert_eq!(GgmlType::all().count(), table.len(), "the reader knows a type the package does not");
    let mut computed = Vec::new();
    for t in GgmlType::all() {
        if let Some(d) = t.dtype() {
            assert_eq!((d.name(), d.block_elems() as u64, d.block_bytes() as u64), (t.name(), t.block_elems(), t.block_bytes()));
            computed.push(d);
        }
    }
    for d in block_types() {
        assert!(computed.contains(&d), "{d} is read from no GGML type");
    }
}
