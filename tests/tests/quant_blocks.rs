//! graphc's dequantization of every GGUF block type, bit for bit against
//! blocks decoded by the `gguf` Python package (`tests/fixtures/quant_blocks.json`,
//! made by `tools/make_quant_fixtures.py`).

use graphc_ir::{quant::dequantize, DType};
use graphc_tests::repo_root;

#[test]
fn every_block_type_matches_the_gguf_package_bit_for_bit() {
    let p = repo_root().join("tests/fixtures/quant_blocks.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let types = v["types"].as_object().unwrap();
    let mut checked = Vec::new();
    for dtype in [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4K, DType::Q5K, DType::Q6K] {
        let t = &types[dtype.name()];
        let hex = t["bytes_hex"].as_str().unwrap();
        let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        let want: Vec<u32> = t["f32_bits"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        let mut out = vec![0f32; want.len()];
        dequantize(dtype, &bytes, &mut out);
        let got: Vec<u32> = out.iter().map(|x| x.to_bits()).collect();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{dtype} element {i}: {} vs {}", f32::from_bits(*g), f32::from_bits(*w));
        }
        // The fixture has varied values (not all one number), so a wrong
        // nibble order or scale index cannot pass by accident.
        let distinct: std::collections::HashSet<u32> = want.iter().copied().collect();
        assert!(distinct.len() > want.len() / 8, "{dtype}: fixture too uniform");
        checked.push(dtype.name());
    }
    assert_eq!(checked.len(), 7);
}
