//! Filetests (cranelift style): every `tests/filetests/<kind>/*.gir` is a
//! graph in the text form with a `# test <kind>` header; the harness runs it
//! and keeps the result as an insta snapshot named after the file.
//!
//! `test verify`: parse and verify; the snapshot is the diagnostic, or `ok`
//! and the graph as the printer normalizes it.

use graphc_ir::{text, verify};
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

#[test]
fn verify_filetests() {
    let dir = repo_root().join("tests/filetests/verify");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "gir"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "expected the verify filetests in {}", dir.display());
    let mut ok = 0;
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap();
        assert!(src.starts_with("# test verify"), "{}: header", f.display());
        let out = run_verify(&src);
        ok += out.starts_with("ok") as usize;
        let name = f.file_stem().unwrap().to_str().unwrap().to_string();
        insta::with_settings!({ snapshot_path => "../filetests/verify/snapshots", prepend_module_to_snapshot => false, input_file => &f }, {
            insta::assert_snapshot!(name, out);
        });
    }
    // Exactly the files named ok_* verify; every other one is an error case.
    assert_eq!(ok, 1);
}
