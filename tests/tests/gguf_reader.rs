//! The GGUF reader on hand-built files: both versions, every metadata value
//! type, a non-default alignment, an untied output head, and tensors of
//! types graphc reads but cannot compute.

use graphc::{CompileOptions, Model, SessionOptions};
use graphc_frontends::gguf::{GgmlType, GgufFile, MetaValue};
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
    let (mt, mu) = (Model::compile(&pt, &CompileOptions::default(), None).unwrap(), Model::compile(&pu, &CompileOptions::default(), None).unwrap());
    assert_eq!(mt.plan().model.facts["tied_output"], "true");
    assert_eq!(mu.plan().model.facts["tied_output"], "false");
    assert!(mu.plan().manifest.iter().any(|w| w.name == "output.weight"));
    assert!(!mt.plan().manifest.iter().any(|w| w.name == "output.weight"));
    let run = |m: &Model| m.session(&SessionOptions::default()).unwrap().prefill(&[3, 4]).unwrap();
    assert_ne!(run(&mt), run(&mu), "the untied head is really used");
}

/// A file with tensors of types graphc has no kernels for (tq2_0, tq1_0)
/// among its own reads whole when asked for any type: those two listed
/// with their GGML type, shape and size, and every tensor after them where
/// it is (the f32 values read back); read to compute with, it is refused
/// naming the first such tensor, its type, and how many there are.
#[test]
fn tensors_of_types_graphc_cannot_compute_are_read_and_listed_but_refused() {
    let w = GgufWriter::tiny_llama_with_uncomputable_types();
    let g = GgufFile::from_bytes_any_type("mixed.gguf", w.to_bytes()).unwrap();
    let listed: Vec<(&str, &str, &[usize], u64)> =
        g.uncomputable.iter().map(|t| (t.name.as_str(), t.ggml_type.name(), t.shape.as_slice(), t.bytes)).collect();
    assert_eq!(listed, [("blk.0.attn_extra.weight", "tq2_0", &[2, 256][..], 132), ("blk.1.ffn_extra.weight", "tq1_0", &[1, 256][..], 54)]);
    assert_eq!(g.uncomputable[0].ggml_type, GgmlType::from_id(35).unwrap());
    let at = |t: &graphc_frontends::gguf::UncomputableTensor| g.data.range(t.offset, t.bytes).unwrap();
    assert_eq!(at(&g.uncomputable[0])[..4], [0, 7, 14, 21], "the tq2_0 tensor's own bytes");
    assert_eq!(g.tensors.len(), w.tensors.len() - 2);
    for (name, _, ty, bytes) in w.tensors.iter().filter(|t| t.2 == 0) {
        let t = g.tensor(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!((g.tensor_bytes(t), *ty), (&bytes[..], 0), "{name} read back from its offset");
    }
    let e = GgufFile::from_bytes("mixed.gguf", w.to_bytes()).err().unwrap().to_string();
    assert!(e.contains("tensor `blk.0.attn_extra.weight` is tq2_0 (GGML type 35), which graphc cannot compute"), "{e}");
    assert!(e.contains("2 tensors of this file are of such types: tq1_0, tq2_0"), "{e}");
    assert!(e.contains("mixed.gguf"), "{e}");
    // The control: without them the same file reads to compute with.
    let mut plain = w;
    plain.tensors.retain(|t| t.2 == 0);
    assert!(GgufFile::from_bytes("plain.gguf", plain.to_bytes()).unwrap().uncomputable.is_empty());
}

/// A type id the format does not define (ggml removed 31, q4_0_4_4; 99 was
/// never one) is refused by the reader in either mode, naming the tensor.
#[test]
fn removed_and_unknown_ggml_types_are_refused_by_name() {
    for (id, says) in [(31u32, "has GGML type 31 (q4_0_4_4), which ggml has removed"), (99, "has unknown GGML type 99")] {
        let mut w = GgufWriter::tiny_llama();
        w.tensors.push(("odd.weight".into(), vec![1, 32], id, vec![0; 18]));
        let e = GgufFile::from_bytes_any_type("odd.gguf", w.to_bytes()).err().unwrap().to_string();
        assert!(e.contains(&format!("tensor `odd.weight` {says}")), "{e}");
    }
}
