//! CUDA without a GPU: every catalog kernel's CUDA C compiles through NVRTC
//! to PTX for sm_80 and sm_90 (no cache: NVRTC itself runs), and `ptxas`
//! assembles that PTX. NVRTC and
//! ptxas come from PyPI (`tools/setup.sh` installs them); their absence is
//! a failure here, not a skip, because CI installs them. A machine without
//! a CUDA device gets an error from `device_check`, never a panic.

use graphc_gpu::{cuda_rt, GpuSettings};

/// Where NVRTC and ptxas are: the test's environment (tools/setup.sh's wheels).
fn settings() -> GpuSettings {
    GpuSettings::from_env().unwrap()
}
use graphc_gpu::kernels::catalog;

#[test]
fn every_kernel_compiles_through_nvrtc_and_ptxas() {
    assert!(
        cuda_rt::nvrtc_available(&settings()),
        "NVRTC is not loadable: run tools/setup.sh (installs PyPI nvidia-cuda-nvrtc-cu12 into ~/.cache/graphc/gpu-venv) or set GRAPHC_NVRTC_LIB"
    );
    let ptxas = cuda_rt::ptxas(&settings()).expect("ptxas not found: run tools/setup.sh (PyPI nvidia-cuda-nvcc-cu12) or set GRAPHC_PTXAS");
    let dir = std::env::temp_dir().join(format!("graphc-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut compiled = 0;
    let mut without_math = std::collections::BTreeSet::new();
    for (_, kernel) in catalog() {
        for arch in cuda_rt::ARCHS {
            let ptx = cuda_rt::compile_ptx_uncached(&kernel, arch, &settings()).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                ptx.contains(&format!(".target {arch}")) && ptx.contains(&format!(".entry {}", kernel.name)),
                "{}: PTX lacks its entry",
                kernel.name
            );
            // No kernel asks for an FMA, and `--fmad=false` forms none
            // (`NVRTC_FLAGS`; the control is in the test below). CUDA's
            // math functions (expf, tanhf, ...) compute with FMAs of their
            // own, so only kernels calling none are checked.
            let source = graphc_gpu::emit(&kernel, graphc_gpu::Target::Cuda).unwrap();
            if !MATH_FUNCTIONS.iter().any(|f| source.contains(&format!("{f}("))) {
                assert!(!ptx.contains("fma.rn"), "{}: NVRTC contracted a product and a sum into an FMA", kernel.name);
                without_math.insert(kernel.name.clone());
            }
            let path = dir.join(format!("{}.{arch}.ptx", kernel.name));
            std::fs::write(&path, &ptx).unwrap();
            let out = std::process::Command::new(&ptxas)
                .arg(format!("-arch={arch}"))
                .arg(&path)
                .arg("-o")
                .arg(path.with_extension("cubin"))
                .output()
                .unwrap();
            assert!(out.status.success(), "ptxas -arch={arch} rejected {}: {}", kernel.name, String::from_utf8_lossy(&out.stderr));
            compiled += 1;
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(compiled, catalog().len() * cuda_rt::ARCHS.len());
    // Every plain matmul (dequantize-into-dot, the sums a contraction
    // would change) was among the kernels checked.
    for dtype in graphc_gpu::kernels::WEIGHT_DTYPES {
        let name = format!("matmul_{dtype}");
        assert!(without_math.contains(&name), "{name} was not checked for FMAs: {without_math:?}");
    }
}

/// CUDA's math library calls as the CUDA emitter writes them.
const MATH_FUNCTIONS: [&str; 8] = ["expf", "logf", "sqrtf", "rsqrtf", "tanhf", "sinf", "cosf", "powf"];

#[test]
fn a_bad_kernel_is_a_compile_error_naming_it() {
    use graphc_gpu::kir::*;
    if !cuda_rt::nvrtc_available(&settings()) {
        panic!("NVRTC is not loadable: run tools/setup.sh");
    }
    // Type-correct, but its name is not a C identifier.
    let k = Kernel::new("not-an-identifier", 64).output("y", Ty::F32).body(vec![store("y", u(0), f(1.0))]);
    let err = cuda_rt::compile_ptx_uncached(&k, "sm_80", &settings()).unwrap_err().to_string();
    assert!(err.contains("kernel `not-an-identifier` on cuda"), "{err}");
}

#[test]
fn no_cuda_device_is_an_error_not_a_panic() {
    match cuda_rt::device_check(&settings()) {
        Ok(()) => eprintln!("a CUDA device is present and enabled"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("cuda"), "{msg}");
            eprintln!("no CUDA device here: {msg}");
        }
    }
}

/// What keeps a fused kernel's sum of a product equal to the unfused
/// kernels' (which store the product, rounded, first): on CUDA, NVRTC's
/// `--fmad=false` (`cuda_rt::NVRTC_FLAGS`), and `Func::MulRounded` /
/// `AddRounded` (`__fmul_rn`, `__fadd_rn`), which no flag may contract.
/// Checked on the PTX (no GPU needed): the same source compiled with
/// NVRTC's default flags has the FMA (the control: the check sees one).
#[test]
fn products_and_sums_are_never_contracted_into_an_fma() {
    use graphc_gpu::kir::*;
    assert!(cuda_rt::nvrtc_available(&settings()), "NVRTC is not loadable: run tools/setup.sh");
    let sum_of_product = |product: Expr| {
        Kernel::new("sum_of_product", 64)
            .input("a", Ty::F32)
            .input("b", Ty::F32)
            .input("c", Ty::F32)
            .output("y", Ty::F32)
            .rounded_ops()
            .body(vec![store("y", local_id(), load("a", local_id()) + product)])
    };
    let fmas = |kernel: &Kernel| {
        let ptx = cuda_rt::compile_ptx_uncached(kernel, "sm_90", &settings()).unwrap_or_else(|e| panic!("{e}"));
        ptx.matches("fma.rn.f32").count()
    };
    let (b, c) = (load("b", local_id()), load("c", local_id()));
    let plain = sum_of_product(b.clone() * c.clone());
    assert_eq!(fmas(&plain), 0, "graphc's flags: a plain a + b * c stays a multiply and an add");
    // The control: NVRTC's defaults contract the very same source.
    let source = graphc_gpu::emit(&plain, graphc_gpu::Target::Cuda).unwrap();
    let defaults = cudarc::nvrtc::CompileOptions { arch: Some("sm_90"), ..Default::default() };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(&source, defaults).unwrap().to_src();
    assert_eq!(ptx.matches("fma.rn.f32").count(), 1, "NVRTC's default flags contract a + b * c (the control)");
    assert_eq!(fmas(&sum_of_product(call(Func::MulRounded, vec![b.clone(), c.clone()]))), 0, "a + MulRounded(b, c) must stay a multiply and an add");
    // The rounded add (a fused chain's) keeps a plain product apart too.
    let rounded_sum = Kernel::new("rounded_sum", 64)
        .input("a", Ty::F32)
        .input("b", Ty::F32)
        .input("c", Ty::F32)
        .output("y", Ty::F32)
        .rounded_ops()
        .body(vec![store("y", local_id(), call(Func::AddRounded, vec![load("a", local_id()), b * c]))]);
    assert_eq!(fmas(&rounded_sum), 0, "AddRounded(a, b * c) must stay a multiply and an add");
}
