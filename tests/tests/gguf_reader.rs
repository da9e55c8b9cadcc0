//! The GGUF reader on hand-built files: both versions, every metadata value
//! type, a non-default alignment, and an untied output head.

use graphc::{CompileOptions, Model, SessionOptions};
use graphc_frontends::gguf::{GgufFile, MetaValue};
use graphc_tests::{temp_dir, GgufWriter};

/// A GGUF holding one key of each of the 13 value types and one f32 tensor.
fn every_type(version: u32, alignment: Option<u32>) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&1u64.to_le_bytes());
    let n_kv = 13 + alignment.is_some() as u64;
    out.extend_from_slice(&n_kv.to_le_bytes());
    let key = |out: &mut Vec<u8>, k: &str, ty: u32| {
        out.extend_from_slice(&(k.len() as u64).to_le_bytes());
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(&ty.to_le_bytes());
    };
    key(&mut out, "u8", 0);
    out.push(200);
    key(&mut out, "i8", 1);
    out.push((-5i8) as u8);
    key(&mut out, "u16", 2);
    out.extend_from_slice(&60000u16.to_le_bytes());
    key(&mut out, "i16", 3);
    out.extend_from_slice(&(-300i16).to_le_bytes());
    key(&mut out, "u32", 4);
    out.extend_from_slice(&4_000_000_000u32.to_le_bytes());
    key(&mut out, "i32", 5);
    out.extend_from_slice(&(-70000i32).to_le_bytes());
    key(&mut out, "f32", 6);
    out.extend_from_slice(&1.5f32.to_le_bytes());
    key(&mut out, "bool", 7);
    out.push(1);
    key(&mut out, "string", 8);
    out.extend_from_slice(&3u64.to_le_bytes());
    out.extend_from_slice("héj".as_bytes()[..3].as_ref());
    key(&mut out, "array", 9);
    out.extend_from_slice(&5u32.to_le_bytes());
    out.extend_from_slice(&2u64.to_le_bytes());
    out.extend_from_slice(&7i32.to_le_bytes());
    out.extend_from_slice(&(-7i32).to_le_bytes());
    key(&mut out, "u64", 10);
    out.extend_from_slice(&(1u64 << 40).to_le_bytes());
    key(&mut out, "i64", 11);
    out.extend_from_slice(&(-(1i64 << 40)).to_le_bytes());
    key(&mut out, "f64", 12);
    out.extend_from_slice(&0.1f64.to_le_bytes());
    if let Some(a) = alignment {
        key(&mut out, "general.alignment", 4);
        out.extend_from_slice(&a.to_le_bytes());
    }
    // One tensor: f32[2, 3] (ne = [3, 2]) at relative offset 0.
    out.extend_from_slice(&1u64.to_le_bytes());
    out.push(b't');
    out.extend_from_slice(&2u32.to_le_bytes());
    out.extend_from_slice(&3u64.to_le_bytes());
    out.extend_from_slice(&2u64.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    let align = alignment.unwrap_or(32) as usize;
    while !out.len().is_multiple_of(align) {
        out.push(0xEE);
    }
    for i in 0..6 {
        out.extend_from_slice(&(i as f32).to_le_bytes());
    }
    out
}

#[test]
fn versions_2_and_3_and_every_value_type_read_back() {
    let dir = temp_dir("gguf-types");
    for (version, alignment) in [(2, None), (3, None), (3, Some(64))] {
        let p = dir.join(format!("v{version}.gguf"));
        std::fs::write(&p, every_type(version, alignment)).unwrap();
        let g = GgufFile::open(&p).unwrap();
        assert_eq!(g.version, version);
        assert_eq!(g.alignment, alignment.unwrap_or(32) as u64);
        let m = &g.metadata;
        assert_eq!(m["u8"], MetaValue::U8(200));
        assert_eq!(m["i8"], MetaValue::I8(-5));
        assert_eq!(m["u16"], MetaValue::U16(60000));
        assert_eq!(m["i16"], MetaValue::I16(-300));
        assert_eq!(m["u32"], MetaValue::U32(4_000_000_000));
        assert_eq!(m["i32"], MetaValue::I32(-70000));
        assert_eq!(m["f32"], MetaValue::F32(1.5));
        assert_eq!(m["bool"], MetaValue::Bool(true));
        assert_eq!(m["string"], MetaValue::Str("hé".into()));
        assert_eq!(m["array"], MetaValue::Array(vec![MetaValue::I32(7), MetaValue::I32(-7)]));
        assert_eq!(m["u64"], MetaValue::U64(1 << 40));
        assert_eq!(m["i64"], MetaValue::I64(-(1 << 40)));
        assert_eq!(m["f64"], MetaValue::F64(0.1));
        let t = g.tensor("t").unwrap();
        assert_eq!(t.shape, vec![2, 3], "row-major: GGUF's ne reversed");
        assert_eq!(t.offset % g.alignment, 0);
        let vals: Vec<f32> = g.tensor_bytes(t).chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(vals, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], "data found at the aligned offset");
    }
    let p = dir.join("v1.gguf");
    std::fs::write(&p, every_type(1, None)).unwrap();
    let e = GgufFile::open(&p).err().unwrap().to_string();
    assert!(e.contains("unsupported GGUF version 1"), "{e}");
}

#[test]
fn untied_output_uses_its_own_head() {
    let dir = temp_dir("gguf-untied");
    let tied = GgufWriter::tiny_llama();
    let head: Vec<f32> = (0..64).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.1).collect();
    let untied = GgufWriter::tiny_llama().f32_tensor("output.weight", &[8, 8], &head);
    let (pt, pu) = (tied.write(&dir, "tied.gguf"), untied.write(&dir, "untied.gguf"));
    let (mt, mu) = (
        Model::compile(&pt, &CompileOptions::default(), None).unwrap(),
        Model::compile(&pu, &CompileOptions::default(), None).unwrap(),
    );
    assert_eq!(mt.plan().model.facts["tied_output"], "true");
    assert_eq!(mu.plan().model.facts["tied_output"], "false");
    assert!(mu.plan().manifest.iter().any(|w| w.name == "output.weight"));
    assert!(!mt.plan().manifest.iter().any(|w| w.name == "output.weight"));
    let run = |m: &Model| m.session(&SessionOptions::default()).unwrap().prefill(&[3, 4]).unwrap();
    assert_ne!(run(&mt), run(&mu), "the untied head is really used");
}
