//! Every kernel in the catalog emits for every target, and the emitted
//! source is a golden snapshot (one file per kernel per target), so a
//! codegen change is reviewed as a diff. The WGSL is validated by naga (the
//! MSL is naga's translation of that validated module).

use graphc_gpu::kernels::catalog;
use graphc_gpu::{emit, Target};

#[test]
fn every_kernel_emits_for_every_target_and_matches_its_snapshot() {
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_path("snapshots");
    let mut failures = vec![];
    for (_class, kernel) in catalog() {
        for target in Target::ALL {
            match emit(&kernel, target) {
                Ok(src) => settings.bind(|| insta::assert_snapshot!(format!("{}.{}", kernel.name, target.extension()), src)),
                Err(e) => failures.push(format!("{}: {e}", target.name())),
            }
        }
    }
    assert!(failures.is_empty(), "kernels that did not emit:\n{}", failures.join("\n"));
}

#[test]
fn kernel_names_are_unique() {
    let mut names: Vec<String> = catalog().into_iter().map(|(_, k)| k.name).collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "two catalog kernels share a name (their snapshots would collide)");
}

#[test]
fn an_ill_typed_kernel_is_an_error_naming_it() {
    use graphc_gpu::kir::*;
    let k = Kernel::new("bad_kernel", 64).input("x", Ty::F32).output("y", Ty::F32).body(vec![store("y", u(0), load("x", u(0)) + u(1))]);
    let err = emit(&k, Target::Wgsl).unwrap_err().to_string();
    assert!(err.contains("bad_kernel") && err.contains("Add of F32 and U32"), "{err}");
}

#[test]
fn a_shadowed_local_is_an_error() {
    use graphc_gpu::kir::*;
    let k = Kernel::new("shadowing", 64).output("y", Ty::F32).body(vec![
        let_("r", Ty::F32, f(1.0)),
        if_(local_id().eq(u(0)), vec![let_("r", Ty::F32, f(2.0)), store("y", u(0), var("r"))]),
    ]);
    let err = emit(&k, Target::Cuda).unwrap_err().to_string();
    assert!(err.contains("shadowing") && err.contains("`r` is declared while another `r` is in scope"), "{err}");
}

#[test]
fn the_readme_states_the_kernel_count() {
    let n = catalog().len();
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let claim = format!("**{n} kernels, each\nemitted for 3 targets: {} sources, 0 written by hand per target.**", n * 3);
    assert!(readme.contains(&claim), "README.md should say: {claim}");
}
