//! What the GPU backends are told by their caller instead of reading the
//! environment: which devices may run, whether CUDA replays captured
//! graphs, where NVIDIA's compilers and the PTX cache are, which wgpu
//! backends to try. The library reads none of it from the shell: the
//! `graphc` command and the tests fill it from their documented variables
//! ([`GpuSettings::from_env`]); a program using the library builds it.

use crate::GpuError;
use std::path::PathBuf;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuSettings {
    /// `Some(true)`: CUDA on any architecture; `Some(false)`: off; `None`:
    /// on only for an architecture it has passed its parity run on
    /// (`cuda_rt::VERIFIED_ARCHS`).
    pub cuda: Option<bool>,
    /// Replay a decode step as one captured CUDA graph (never run on a GPU yet).
    pub cuda_graph: bool,
    /// Metal, which has never run on a Mac.
    pub metal: bool,
    /// The `nvidia` folder of PyPI's NVIDIA wheels (`tools/setup.sh`
    /// installs them into `$GRAPHC_CACHE/gpu-venv`): where NVRTC and
    /// `ptxas` are found when the two paths below are not given.
    pub nvidia_wheels: Option<PathBuf>,
    /// NVRTC's library (`libnvrtc.so.12`).
    pub nvrtc_lib: Option<PathBuf>,
    /// NVIDIA's PTX assembler.
    pub ptxas: Option<PathBuf>,
    /// Where compiled PTX is kept between processes; `None`: not kept.
    pub ptx_cache: Option<PathBuf>,
    /// Architectures (`sm_80`, `sm_90`) every kernel a graph lowers is also
    /// compiled for into the PTX cache (`tools/device-bundle`).
    pub ptx_record: Vec<String>,
    /// wgpu backends by name (`vulkan`, `metal`, `dx12`, `gl`, comma
    /// separated); `None`: Vulkan (Metal on macOS).
    pub wgpu_backends: Option<String>,
}

impl GpuSettings {
    /// The documented variables: `GRAPHC_CUDA`, `GRAPHC_CUDA_GRAPH`,
    /// `GRAPHC_METAL` (`1` on, `0` off; anything else is an error),
    /// `GRAPHC_CACHE` (default `~/.cache/graphc`: its `gpu-venv` wheels and
    /// `ptx` cache), `GRAPHC_NVRTC_LIB`, `GRAPHC_PTXAS`, `GRAPHC_PTX_CACHE`,
    /// `GRAPHC_PTX_RECORD`, `WGPU_BACKEND`. For binaries and tests to pass
    /// in: no library code calls it.
    pub fn from_env() -> Result<GpuSettings, GpuError> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let cache = var("GRAPHC_CACHE").or_else(|| var("HOME").map(|h| h.join(".cache/graphc")));
        let nvidia_wheels = cache.as_ref().and_then(|c| wheel_root(&c.join("gpu-venv/lib")));
        Ok(GpuSettings {
            cuda: flag("GRAPHC_CUDA")?,
            cuda_graph: flag("GRAPHC_CUDA_GRAPH")?.unwrap_or(false),
            metal: flag("GRAPHC_METAL")?.unwrap_or(false),
            nvidia_wheels,
            nvrtc_lib: var("GRAPHC_NVRTC_LIB"),
            ptxas: var("GRAPHC_PTXAS"),
            ptx_cache: var("GRAPHC_PTX_CACHE").or_else(|| cache.map(|c| c.join("ptx"))),
            ptx_record: std::env::var("GRAPHC_PTX_RECORD")
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect(),
            wgpu_backends: std::env::var("WGPU_BACKEND").ok().filter(|b| !b.is_empty()),
        })
    }

    /// NVRTC's library: `nvrtc_lib`, else the wheels' copy.
    pub fn nvrtc_path(&self) -> Option<PathBuf> {
        self.nvrtc_lib.clone().or_else(|| Some(self.nvidia_wheels.as_ref()?.join("cuda_nvrtc/lib/libnvrtc.so.12"))).filter(|p| p.is_file())
    }

    /// `ptxas`: the given one, else the wheels' copy.
    pub fn ptxas_path(&self) -> Option<PathBuf> {
        if let Some(p) = &self.ptxas {
            return Some(p.clone());
        }
        let p = self.nvidia_wheels.as_ref()?.join("cuda_nvcc/bin/ptxas");
        p.is_file().then_some(p)
    }
}

/// A flag read by value: unset `None`, `0` off, `1` on, anything else an error.
fn flag(name: &'static str) -> Result<Option<bool>, GpuError> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) if v == "0" => Ok(Some(false)),
        Ok(v) if v == "1" => Ok(Some(true)),
        Ok(value) => Err(GpuError::BadFlag { name, value }),
    }
}

/// The `nvidia` package folder under a venv's `lib/python3.*/site-packages`.
fn wheel_root(lib: &std::path::Path) -> Option<PathBuf> {
    let python = std::fs::read_dir(lib).ok()?.filter_map(|e| e.ok()).find(|e| e.file_name().to_string_lossy().starts_with("python"))?;
    let root = python.path().join("site-packages/nvidia");
    root.is_dir().then_some(root)
}
