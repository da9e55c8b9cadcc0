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
    let k = Kernel::new("shadowing", 64)
        .output("y", Ty::F32)
        .body(vec![let_("r", Ty::F32, f(1.0)), if_(local_id().eq(u(0)), vec![let_("r", Ty::F32, f(2.0)), store("y", u(0), var("r"))])]);
    let err = emit(&k, Target::Cuda).unwrap_err().to_string();
    assert!(err.contains("shadowing") && err.contains("`r` is declared while another `r` is in scope"), "{err}");
}

#[test]
fn the_gpu_notes_state_the_kernel_count() {
    let n = catalog().len();
    let notes = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/gpu.md")).unwrap();
    let claim = format!("**{n} kernels, each\nemitted for 3 targets: {} sources, 0 written by hand per target.**", n * 3);
    assert!(notes.contains(&claim), "docs/gpu.md should say: {claim}");
}

/// What the Metal host binds besides a kernel's buffers, read off naga's
/// module, against what the kernel IR declares and what the MSL text says:
/// one threadgroup length per workgroup array (4-byte elements, rounded to
/// 16 as Metal requires), one sizes-buffer member per runtime-sized buffer,
/// in binding order. A host that set these from anything else would read
/// out of bounds or zero on real Metal, which nothing here runs.
#[test]
fn metal_bindings_match_the_kernel_and_its_msl() {
    use graphc_gpu::emit::msl;
    for (_class, kernel) in catalog() {
        let t = msl::translate(&kernel).unwrap_or_else(|e| panic!("{e}"));
        // naga renames some names (`chain_89f06624` is `chain_89f06624_`):
        // the host must look up the translated one.
        assert!(t.source.contains(&format!("kernel void {}(", t.entry_point)), "{}: entry point `{}`", kernel.name, t.entry_point);
        let shared: Vec<u32> = kernel.shared.iter().map(|s| (s.len * 4).next_multiple_of(16)).collect();
        assert_eq!(t.threadgroup_bytes, shared, "{}: threadgroup lengths", kernel.name);
        let args = t.source.lines().filter(|l| l.trim_start().starts_with(", threadgroup ")).count();
        assert_eq!(args, shared.len(), "{}: threadgroup arguments in the MSL", kernel.name);
        let buffers: Vec<u32> = (0..kernel.buffers.len() as u32).collect();
        assert_eq!(t.sized_bindings, buffers, "{}: sized bindings", kernel.name);
        let members = t.source.lines().filter(|l| l.trim_start().starts_with("uint size")).count();
        assert_eq!(members, buffers.len(), "{}: _mslBufferSizes members", kernel.name);
        assert!(t.source.contains(&format!("[[buffer({})]]", msl::SIZES_SLOT)) || buffers.is_empty(), "{}", kernel.name);
    }
    // One kernel spelled out: attention's `red`, `probs` (256 f32) and `acc` (512 f32).
    let attention = catalog().into_iter().find(|(_, k)| k.name == "attention").expect("attention kernel").1;
    let t = msl::translate(&attention).unwrap();
    assert_eq!(t.threadgroup_bytes, [1024, 1024, 2048]);
    assert_eq!(t.sized_bindings, [0, 1, 2, 3, 4]);
}

/// The rounded arithmetic on targets without a non-contracting multiply
/// (WGSL, and the MSL naga makes of it): each rounded operand and value
/// passes `Func::Stored`'s barrier, its bits xor'd with a zero made from
/// the runtime 1.0 `kir::ROUNDING_ONE`, and a kernel that uses it without
/// declaring the parameter is refused. An xor with a value the compiler
/// cannot know is integer arithmetic no float rewrite crosses: no FMA
/// contraction, no reassociation (a product's `(b·c)·one` alone was
/// reassociated by lavapipe with a later `exp`; see gpu_parity's
/// `a_chain_reading_a_product_through_exp_keeps_its_bits`). Checked on
/// numbers: through the barrier the sum is the stored product's,
/// `round(round(b·c) + a)`, while contracting the plain `b·c + a` is not
/// (the control), on inputs where the two differ.
#[test]
fn rounded_ops_survive_contraction_on_wgsl() {
    use graphc_gpu::kir::*;
    let kernel = |rounded: bool| {
        let k = Kernel::new("sum_of_product", 64).input("a", Ty::F32).input("b", Ty::F32).input("c", Ty::F32).output("y", Ty::F32);
        let k = if rounded { k.rounded_ops() } else { k };
        let product = call(Func::MulRounded, vec![load("b", local_id()), load("c", local_id())]);
        k.body(vec![store("y", local_id(), call(Func::AddRounded, vec![load("a", local_id()), product]))])
    };
    let err = emit(&kernel(false), Target::Wgsl).unwrap_err().to_string();
    assert!(err.contains("sum_of_product") && err.contains(ROUNDING_ONE), "{err}");
    let wgsl = emit(&kernel(true), Target::Wgsl).unwrap();
    let barrier = "^ (bitcast<u32>(params.rounding_one) ^ 0x3f800000u))";
    assert!(wgsl.contains(&format!("bitcast<f32>(bitcast<u32>((b[lid.x] * c[lid.x])) {barrier}")), "{wgsl}");
    assert!(wgsl.contains(&format!("bitcast<f32>(bitcast<u32>(a[lid.x]) {barrier}")), "{wgsl}");
    let mut seed = 0x2545F4914F6CDD1Du64;
    let mut rand = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
    };
    let (one, mut plain_differs) = (std::hint::black_box(1.0f32), 0);
    let barrier = |x: f32| f32::from_bits(x.to_bits() ^ (one.to_bits() ^ 0x3f80_0000));
    for _ in 0..10_000 {
        let (a, b, c) = (rand(), rand(), rand());
        let stored = a + b * c; // Rust never contracts: the unfused kernels' sum
        assert_eq!(barrier(barrier(a) + barrier(barrier(b * c))).to_bits(), stored.to_bits(), "{a} + {b} * {c}");
        plain_differs += (b.mul_add(c, a).to_bits() != stored.to_bits()) as usize;
    }
    assert!(plain_differs > 1000, "the inputs must tell a contracted plain product apart ({plain_differs})");
}
