//! Filetests (cranelift style): every `tests/filetests/<kind>/*.gir` is a
//! graph in the text form with a `# test <kind>` header; the harness runs it
//! and keeps the result as an insta snapshot named after the file.
//!
//! `test verify`: parse and verify; the snapshot is the diagnostic, or `ok`
//! and the graph as the printer normalizes it.
//! `test pass NAME`: parse, verify, run that one pass (through the pass
//! manager, with every other pass off; `test pass NAME for cpu`, as a CPU
//! plan's); the snapshot is the rewrite count and the graph after it.

use graphc_ir::{text, verify};
use graphc_passes::{CostModel, PassManager};
use graphc_tests::repo_root;

fn run_verify(src: &str) -> String {
    match text::parse(src) {
        Err(e) => format!("parse error: {e}"),
        Ok(mut g) => match verify(&mut g) {
            Err(e) => e.to_string(),
            Ok(()) => format!("ok\n{}", text::print(&g)),
        },
    }
}

fn run_pass(src: &str, pass: &str) -> String {
    let mut g = text::parse(src).expect("pass filetests hold valid graphs");
    verify(&mut g).expect("pass filetests hold verified graphs");
    // `# test pass NAME for cpu`: a CPU plan's passes; else a GPU plan's.
    let cpu = src.lines().next().is_some_and(|l| l.ends_with(" for cpu"));
    let pm = PassManager::for_cost(if cpu { CostModel::Passes } else { CostModel::Launches });
    let off: Vec<String> = pm.names().into_iter().filter(|n| *n != pass).map(String::from).collect();
    let report = pm.run(&mut g, &off).unwrap();
    format!("{pass}: {} rewrites\n{}", report.rewrites(pass).unwrap(), text::print(&g))
}

fn gir_files(kind: &str) -> Vec<std::path::PathBuf> {
    let dir = repo_root().join("tests/filetests").join(kind);
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "gir")).collect();
    files.sort();
    files
}

/// Runs `tests/filetests/<pass>/*.gir`; a file named `keeps_*` must see no
/// rewrite, every other one at least one.
fn pass_filetests(pass: &str, expect_files: usize) {
    let files = gir_files(pass);
    assert_eq!(files.len(), expect_files, "{pass} filetests");
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap();
        assert!(src.starts_with(&format!("# test pass {pass}")), "{}: header", f.display());
        let out = run_pass(&src, pass);
        let name = f.file_stem().unwrap().to_str().unwrap().to_string();
        let fired = !out.starts_with(&format!("{pass}: 0 "));
        assert_eq!(fired, !name.starts_with("keeps"), "{name}: {out}");
        let snapshots = format!("../filetests/{pass}/snapshots");
        insta::with_settings!({ snapshot_path => snapshots, prepend_module_to_snapshot => false, input_file => &f }, {
            insta::assert_snapshot!(name, out);
        });
    }
}

#[test]
fn kv_append_filetests() {
    pass_filetests("kv_append", 3);
}

#[test]
fn moe_dispatch_filetests() {
    pass_filetests("moe_dispatch", 7);
}

#[test]
fn kv_alias_filetests() {
    pass_filetests("kv_alias", 2);
}

#[test]
fn hoist_sync_filetests() {
    pass_filetests("hoist_sync", 3);
}

/// `tests/filetests/fuse/*.gir`: `# test rule NAME` runs the fuse pass
/// with that rule alone (the snapshot: its firings, the fused nodes kept,
/// the graph); `# test pass fuse` runs every rule. A file whose name says
/// `keeps` must keep no fused node, every other one at least one; every
/// rule has a file of each kind (its negative case: a legality guard).
#[test]
fn fuse_rule_filetests() {
    let pm = PassManager::default();
    let rules = pm.rule_names();
    let mut seen: Vec<(String, bool)> = vec![];
    for f in gir_files("fuse") {
        let src = std::fs::read_to_string(&f).unwrap();
        let header = src.lines().next().unwrap();
        let only: Option<String> = match header.strip_prefix("# test rule ") {
            Some(rule) => Some(rule.trim().to_string()),
            None => {
                assert_eq!(header, "# test pass fuse", "{}: header", f.display());
                None
            }
        };
        let mut g = text::parse(&src).expect("fuse filetests hold valid graphs");
        verify(&mut g).expect("fuse filetests hold verified graphs");
        let mut off: Vec<String> = pm.names().into_iter().filter(|n| *n != "fuse").map(String::from).collect();
        if let Some(rule) = &only {
            assert!(rules.contains(rule), "{}: no rule `{rule}`", f.display());
            off.extend(rules.iter().filter(|r| *r != rule).cloned());
        }
        let report = pm.run(&mut g, &off).unwrap();
        let record = report.records.iter().find(|r| r.name == "fuse").unwrap();
        let fired: Vec<String> = record.rules.iter().filter(|r| r.enabled).map(|r| format!("{} fired {}", r.name, r.fired)).collect();
        let out = format!("{}; fuse kept {}\n{}", fired.join(", "), record.rewrites, text::print(&g));
        let name = f.file_stem().unwrap().to_str().unwrap().to_string();
        let keeps = name.contains("keeps");
        assert_eq!(record.rewrites == 0, keeps, "{name}: {out}");
        assert_eq!(record.stopped, None, "{name}: the rules stopped early");
        if let Some(rule) = only {
            seen.push((rule, keeps));
        }
        insta::with_settings!({ snapshot_path => "../filetests/fuse/snapshots", prepend_module_to_snapshot => false, input_file => &f }, {
            insta::assert_snapshot!(name, out);
        });
    }
    for rule in &rules {
        for keeps in [false, true] {
            assert!(seen.contains(&(rule.clone(), keeps)), "rule `{rule}` has no {} filetest", if keeps { "negative" } else { "positive" });
        }
    }
}

#[test]
fn window_cache_filetests() {
    pass_filetests("window_cache", 2);
}

#[test]
fn attention_head_filetests() {
    pass_filetests("attention_head", 12);
}

#[test]
fn attention_project_filetests() {
    pass_filetests("attention_project", 8);
}

#[test]
fn norm_rope_attention_filetests() {
    pass_filetests("norm_rope_attention", 6);
}

#[test]
fn residual_norm_filetests() {
    pass_filetests("residual_norm", 7);
}

#[test]
fn elementwise_chain_filetests() {
    pass_filetests("elementwise_chain", 5);
}

#[test]
fn dead_code_filetests() {
    pass_filetests("dead_code", 2);
}

/// Every pass the manager runs has filetests of its own (a pass added
/// without them fails here).
#[test]
fn every_pass_has_filetests() {
    for pass in PassManager::default().names() {
        let dir = repo_root().join("tests/filetests").join(pass);
        assert!(dir.is_dir() && !gir_files(pass).is_empty(), "pass `{pass}` has no filetests in tests/filetests/{pass}/");
    }
}

#[test]
fn verify_filetests() {
    let files = gir_files("verify");
    assert!(files.len() >= 10, "expected the verify filetests");
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap();
        assert!(src.starts_with("# test verify"), "{}: header", f.display());
        let out = run_verify(&src);
        let name = f.file_stem().unwrap().to_str().unwrap().to_string();
        // Exactly the files named ok_* verify; every other one is an error case.
        assert_eq!(out.starts_with("ok"), name.starts_with("ok_"), "{name}: {out}");
        insta::with_settings!({ snapshot_path => "../filetests/verify/snapshots", prepend_module_to_snapshot => false, input_file => &f }, {
            insta::assert_snapshot!(name, out);
        });
    }
}
