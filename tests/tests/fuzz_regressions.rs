//! Every input a fuzz target once crashed on (`tests/fuzz-regressions/<target>/`,
//! each named for what it broke) replayed through the same body
//! (`graphc_tests::fuzz`), plus each target's seed corpus: a fuzz body that
//! panics on a real file, or on a crash it was fixed for, fails here.

use graphc_tests::fuzz;

fn replay(target: &str, files: &[std::path::PathBuf]) {
    for f in files {
        let data = std::fs::read(f).unwrap();
        let outcome = std::panic::catch_unwind(|| fuzz::run(target, &data));
        assert!(outcome.is_ok(), "fuzz target `{target}` panicked on {}", f.display());
    }
}

fn files_in(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir).map(|d| d.map(|e| e.unwrap().path()).collect()).unwrap_or_default();
    v.sort();
    v
}

#[test]
fn saved_crashes_stay_fixed() {
    let root = graphc_tests::repo_root().join("tests/fuzz-regressions");
    let mut total = 0;
    for target in fuzz::TARGETS {
        let files = files_in(&root.join(target));
        total += files.len();
        replay(target, &files);
    }
    println!("{total} saved crash inputs replayed");
}

#[test]
fn every_target_runs_its_seeds() {
    let dir = graphc_tests::temp_dir("fuzz-seed-replay");
    fuzz::write_seeds(&dir).unwrap();
    for target in fuzz::TARGETS {
        let files = files_in(&dir.join(target));
        assert!(!files.is_empty(), "no seeds for `{target}`");
        replay(target, &files);
    }
}

#[test]
fn the_seeds_reach_the_end_of_each_pipeline() {
    // A seed that stopped at the first check would leave the fuzzer nothing
    // deep to mutate: the whole seeds must compile and run.
    let dir = graphc_tests::temp_dir("fuzz-seed-depth");
    fuzz::write_seeds(&dir).unwrap();
    let tiny = std::fs::read(dir.join("gguf/tiny_llama.gguf")).unwrap();
    let g = graphc_frontends::GgufFile::from_bytes("tiny.gguf", tiny).unwrap();
    let ck = graphc_frontends::Checkpoint::from_gguf(g).unwrap();
    graphc::Model::compile_checkpoint(ck, "tiny.gguf", &Default::default(), None).unwrap();
    let st = std::fs::read(dir.join("safetensors/fused_kv")).unwrap();
    let (config, tensors) = fuzz::split_safetensors_input(&st).unwrap();
    let st = graphc_frontends::SafetensorsFile::from_bytes("s", tensors.to_vec(), "config.json", std::str::from_utf8(config).unwrap()).unwrap();
    graphc::Model::compile_checkpoint(graphc_frontends::Checkpoint::from_safetensors(st).unwrap(), "s", &Default::default(), None).unwrap();
    let plan = std::fs::read_to_string(dir.join("plan/tiny_llama.plan")).unwrap();
    let plan = graphc_ir::plan::Plan::from_json(&plan, "p").unwrap();
    let ck = graphc_frontends::Checkpoint::from_gguf(
        graphc_frontends::GgufFile::from_bytes("tiny.gguf", graphc_tests::GgufWriter::tiny_llama().to_bytes()).unwrap(),
    )
    .unwrap();
    graphc::Model::from_plan(plan, "p", ck, None).unwrap();
}
