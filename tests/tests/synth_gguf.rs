//! `tools/synth-gguf.py` (what `tools/device-check` runs where the real
//! checkpoints cannot go): a checkpoint rebuilt from a real one's header
//! with made-up weights is the same file shape for shape — same size, same
//! optimized graph (so the same kernels and bytes moved) — while its
//! weights differ, and it runs to finite, non-constant logits.

use graphc::{CompileOptions, Model, SessionOptions};

fn synth(real: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    let script = graphc_tests::repo_root().join("tools/synth-gguf.py");
    let header = dir.join("model.header");
    let out = dir.join("model.gguf");
    for args in [["header", real.to_str().unwrap(), header.to_str().unwrap()], ["fill", header.to_str().unwrap(), out.to_str().unwrap()]] {
        let run = std::process::Command::new("python3").arg(&script).args(args).output().expect("python3 runs");
        assert!(run.status.success(), "synth-gguf.py {}: {}", args[0], String::from_utf8_lossy(&run.stderr));
    }
    out
}

#[test]
fn a_synthetic_smollm2_is_the_real_one_shape_for_shape() {
    let real = graphc_tests::smollm2();
    let dir = std::env::temp_dir().join(format!("graphc-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = synth(&real, &dir);
    assert_eq!(std::fs::metadata(&fake).unwrap().len(), std::fs::metadata(&real).unwrap().len());

    let opts = CompileOptions { max_seq: Some(32), ..Default::default() };
    let real_model = Model::compile(&real, &opts, None).unwrap();
    let fake_model = Model::compile(&fake, &opts, None).unwrap();
    let text = |m: &Model| graphc_ir::text::print(m.graph());
    assert_eq!(text(&fake_model), text(&real_model), "the optimized graphs differ");

    // The same bytes in the header, other bytes after it.
    let (real_bytes, fake_bytes) = (std::fs::read(&real).unwrap(), std::fs::read(&fake).unwrap());
    let header = std::fs::metadata(dir.join("model.header")).unwrap().len() as usize;
    assert_eq!(real_bytes[..header], fake_bytes[..header]);
    let differing = real_bytes[header..].iter().zip(&fake_bytes[header..]).filter(|(a, b)| a != b).count();
    assert!(differing > (real_bytes.len() - header) / 2, "only {differing} weight bytes differ");

    let mut session = fake_model.session(&SessionOptions { check_finite: true, ..Default::default() }).unwrap();
    let logits = session.prefill(&[1, 2, 3, 4]).unwrap();
    assert!(logits.iter().all(|x| x.is_finite()) && logits.iter().any(|&x| x != logits[0]), "flat or non-finite logits");
    let logits = session.decode(5).unwrap();
    assert!(logits.iter().all(|x| x.is_finite()));
    std::fs::remove_dir_all(&dir).ok();
}
