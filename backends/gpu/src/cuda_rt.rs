//! The CUDA side: kernels compiled at run time by NVRTC through `cudarc`
//! (PTX cached by kernel hash and architecture), and clean detection of
//! what this machine lacks. cudarc *panics* when it cannot load a library,
//! so every entry here first checks that the library loads.
//!
//! cudarc loads `libnvrtc.so.12` by bare name. Where it is not on the
//! loader's path, `preload_nvrtc` loads it by absolute path first (from
//! `GRAPHC_NVRTC_LIB`, else the venv `tools/setup.sh` makes); the dynamic
//! loader then resolves the bare name to the already-loaded library.
//!
//! CUDA has never run a parity check on real hardware from this crate, so
//! the CUDA *device* path is off unless `GRAPHC_CUDA=1` (DESIGN.md:
//! unmeasured fast paths start off); compiling kernels needs no device.
#![allow(unsafe_code)]

use crate::kir::Kernel;
use crate::GpuError;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// The architectures CI compiles every kernel for (A100, H100/H200).
pub const ARCHS: [&str; 2] = ["sm_80", "sm_90"];

/// Where the PyPI NVIDIA wheels are, if `tools/setup.sh` installed them:
/// the `nvidia` package folder of `$GRAPHC_CACHE/gpu-venv` (default
/// `~/.cache/graphc`).
pub fn wheel_root() -> Option<PathBuf> {
    let cache = match std::env::var_os("GRAPHC_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/graphc"),
    };
    let lib = cache.join("gpu-venv/lib");
    let python = std::fs::read_dir(&lib).ok()?.filter_map(|e| e.ok()).find(|e| e.file_name().to_string_lossy().starts_with("python"))?;
    let root = python.path().join("site-packages/nvidia");
    root.is_dir().then_some(root)
}

/// `ptxas` from `nvidia-cuda-nvcc-cu12`, if installed (`GRAPHC_PTXAS` overrides).
pub fn ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GRAPHC_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let p = wheel_root()?.join("cuda_nvcc/bin/ptxas");
    p.is_file().then_some(p)
}

fn preload_nvrtc() -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(|| {
        let path = std::env::var_os("GRAPHC_NVRTC_LIB")
            .map(PathBuf::from)
            .or_else(|| Some(wheel_root()?.join("cuda_nvrtc/lib/libnvrtc.so.12")))
            .filter(|p| p.is_file());
        match path {
            // SAFETY: loading NVIDIA's NVRTC runs its initializers, which are
            // sound to run once; the handle is leaked so it stays loaded for
            // cudarc's by-name lookup.
            Some(p) => unsafe { libloading::Library::new(&p) }.map(std::mem::forget).is_ok(),
            None => false,
        }
    })
}

/// Whether NVRTC can be loaded here.
pub fn nvrtc_available() -> bool {
    preload_nvrtc();
    // SAFETY: only tries to dlopen the library and closes it again.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// CUDA C for `kernel` compiled by NVRTC to PTX for `arch` (`sm_80`, ...).
/// Cached per process by kernel hash and architecture.
pub fn compile_ptx(kernel: &Kernel, arch: &'static str) -> Result<String, GpuError> {
    static CACHE: OnceLock<Mutex<HashMap<(u64, &'static str), String>>> = OnceLock::new();
    let key = (kernel.hash(), arch);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(ptx) = cache.lock().expect("ptx cache").get(&key) {
        return Ok(ptx.clone());
    }
    if !nvrtc_available() {
        return Err(GpuError::NoDevice {
            backend: "cuda",
            reason: "NVRTC (libnvrtc.so.12) is not loadable: run tools/setup.sh (PyPI nvidia-cuda-nvrtc-cu12) or set GRAPHC_NVRTC_LIB".into(),
        });
    }
    let source = crate::emit(kernel, crate::Target::Cuda)?;
    let options = cudarc::nvrtc::CompileOptions { arch: Some(arch), name: Some(format!("{}.cu", kernel.name)), ..Default::default() };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(&source, options).map_err(|e| GpuError::Kernel {
        kernel: kernel.name.clone(),
        target: "cuda",
        message: match e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
            other => other.to_string(),
        },
    })?;
    let ptx = ptx.to_src();
    cache.lock().expect("ptx cache").insert(key, ptx.clone());
    Ok(ptx)
}

/// Whether `GRAPHC_CUDA` enables the CUDA device path (`1` on, `0` or unset off).
pub fn enabled() -> Result<bool, GpuError> {
    crate::flag("GRAPHC_CUDA")
}

/// A CUDA device can be used here: the flag is on, the driver library
/// loads and device 0 exists. Each "no" is an error saying which.
pub fn device_check() -> Result<(), GpuError> {
    if !enabled()? {
        return Err(GpuError::NotEnabled { backend: "cuda", flag: "GRAPHC_CUDA" });
    }
    // SAFETY: only tries to dlopen the driver library and closes it again.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(GpuError::NoDevice { backend: "cuda", reason: "no CUDA driver (libcuda.so.1) on this machine".into() });
    }
    cudarc::driver::CudaContext::new(0).map(|_| ()).map_err(|e| GpuError::NoDevice { backend: "cuda", reason: e.to_string() })
}
