//! `graphc compile -o PLAN` writes atomically: a failed compile, or a
//! failed write, never leaves a truncated plan or clobbers a good one.

use graphc::{CompileOptions, Model};
use graphc_tests::{temp_dir, GgufWriter};

#[test]
fn a_failed_compile_leaves_the_good_plan_alone() {
    let dir = temp_dir("bad-atomic");
    let ck = GgufWriter::tiny_llama().write(&dir, "a.gguf");
    let plan = dir.join("a.plan");
    let good = Model::compile(&ck, &CompileOptions::default(), None).unwrap();
    good.write_plan(&plan).unwrap();
    let before = std::fs::read(&plan).unwrap();
    // `graphc compile` of a broken checkpoint onto the same plan path.
    let broken = dir.join("broken.gguf");
    std::fs::write(&broken, &GgufWriter::tiny_llama().to_bytes()[..700]).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(["compile", broken.to_str().unwrap(), "-o", plan.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("truncated"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&plan).unwrap(), before, "the good plan was overwritten");
    // A write that fails (its target is a folder) reports it, leaves no
    // temporary file beside it.
    let folder = dir.join("taken");
    std::fs::create_dir(&folder).unwrap();
    let e = good.write_plan(&folder).unwrap_err().to_string();
    assert!(e.contains("cannot write plan") && e.contains("taken"), "{e}");
    let leftovers: Vec<_> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n.to_string_lossy().contains(".tmp")).collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    assert!(Model::load(&plan, None).is_ok(), "the good plan still loads");
}
