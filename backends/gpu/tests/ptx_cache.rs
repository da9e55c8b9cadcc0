//! The on-disk PTX cache (`GpuSettings::ptx_cache`): NVRTC's PTX is kept
//! under a name holding a hash of the CUDA source, a kept entry is read
//! back without NVRTC, a damaged one is recompiled and replaced, and
//! `GpuSettings::ptx_record` fills it for kernels lowered on any device
//! (what `tools/device-bundle` carries to a GPU machine without NVRTC).

use graphc_gpu::kernels::catalog;
use graphc_gpu::{cuda_rt, emit, GpuSettings, Target};

#[test]
fn ptx_is_kept_on_disk_read_back_and_recorded() {
    let dir = std::env::temp_dir().join(format!("graphc-ptx-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Where NVRTC is comes from the test's environment (tools/setup.sh's wheels).
    let settings = GpuSettings { ptx_cache: Some(dir.clone()), ptx_record: vec!["sm_80".into()], ..GpuSettings::from_env().unwrap() };
    assert!(cuda_rt::nvrtc_available(&settings), "NVRTC is not loadable: run tools/setup.sh");
    let kernels: Vec<_> = catalog().into_iter().map(|(_, k)| k).take(4).collect();
    let entry = |k: &graphc_gpu::kir::Kernel, arch: &str| dir.join(cuda_rt::ptx_file_name(k, &emit(k, Target::Cuda).unwrap(), arch));

    // Compiled by NVRTC, then kept.
    let ptx = cuda_rt::compile_ptx(&kernels[0], "sm_90", &settings).unwrap();
    assert_eq!(std::fs::read_to_string(entry(&kernels[0], "sm_90")).unwrap(), ptx);

    // A kept entry is what comes back (NVRTC would not write this comment).
    let planted = format!("// planted\n.version 8.0\n.target sm_90\n.visible .entry {}(\n)\n{{\n}}\n", kernels[1].name);
    std::fs::write(entry(&kernels[1], "sm_90"), &planted).unwrap();
    assert_eq!(cuda_rt::compile_ptx(&kernels[1], "sm_90", &settings).unwrap(), planted);

    // A damaged entry is recompiled and replaced.
    std::fs::write(entry(&kernels[2], "sm_90"), "truncated").unwrap();
    let ptx = cuda_rt::compile_ptx(&kernels[2], "sm_90", &settings).unwrap();
    assert!(ptx.contains(&format!(".entry {}(", kernels[2].name)), "{ptx}");
    assert_eq!(std::fs::read_to_string(entry(&kernels[2], "sm_90")).unwrap(), ptx);

    // Recording: the arch `ptx_record` names, and only it.
    assert!(!entry(&kernels[3], "sm_80").exists());
    cuda_rt::record(&kernels[3], &settings).unwrap();
    assert!(std::fs::read_to_string(entry(&kernels[3], "sm_80")).unwrap().contains(".target sm_80"));
    assert!(!entry(&kernels[3], "sm_90").exists());
    std::fs::remove_dir_all(&dir).ok();
}
