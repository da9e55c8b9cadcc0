//! The CUDA side: kernels compiled at run time by NVRTC through `cudarc`
//! (PTX cached by kernel hash and architecture in the process, and on disk
//! by a hash of the CUDA source: `GpuSettings::ptx_cache`), and clean detection of
//! what this machine lacks. cudarc *panics* when it cannot load a library,
//! so every entry here first checks that the library loads.
//!
//! cudarc loads `libnvrtc.so.12` by bare name. Where it is not on the
//! loader's path, `preload_nvrtc` loads it by absolute path first (the
//! caller's `GpuSettings`: its `nvrtc_lib`, else the wheels'); the dynamic
//! loader then resolves the bare name to the already-loaded library.
//!
//! `CudaDevice` runs the same kernel calls as wgpu through cudarc's driver
//! API: buffers as device allocations (views as pointer offsets), one
//! stream, kernels loaded from PTX compiled for the device's compute
//! capability. It passed its parity run on an H200 (sm_90; `tools/device-check`,
//! 2026-12-04: every kernel class against the CPU reference, the family
//! fixtures, SmolLM2's and Gemma 3's shapes end to end), so it is on where
//! the device is of a verified architecture ([`VERIFIED_ARCHS`]) and off
//! elsewhere unless `GpuSettings::cuda` is `Some(true)` (`GRAPHC_CUDA=1`;
//! DESIGN.md: unmeasured paths start off); `Some(false)` turns it off. `tools/gpu-check` (or
//! `tools/device-check`) is the run that verifies another architecture.
//! Compiling kernels needs no device.
#![allow(unsafe_code)]

use crate::device::{grid, BindingLimits, Device, Launch};
use crate::kir::Kernel;
use crate::{GpuError, GpuSettings};
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::{Mutex, OnceLock};

/// The architectures CI compiles every kernel for (A100, H100/H200).
pub const ARCHS: [&str; 2] = ["sm_80", "sm_90"];

/// `ptxas`, if the settings say where (or the wheels have it).
pub fn ptxas(settings: &GpuSettings) -> Option<PathBuf> {
    settings.ptxas_path()
}

/// Load NVRTC by the settings' path once a process (the first path given wins).
fn preload_nvrtc(settings: &GpuSettings) -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(|| {
        match settings.nvrtc_path() {
            // SAFETY: loading NVIDIA's NVRTC runs its initializers, which are
            // sound to run once; the handle is leaked so it stays loaded for
            // cudarc's by-name lookup.
            Some(p) => unsafe { libloading::Library::new(&p) }.map(std::mem::forget).is_ok(),
            None => false,
        }
    })
}

/// Whether NVRTC can be loaded here.
pub fn nvrtc_available(settings: &GpuSettings) -> bool {
    preload_nvrtc(settings);
    // SAFETY: only tries to dlopen the library and closes it again.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// CUDA C for `kernel` compiled to PTX for `arch` (`sm_80`, ...): from the
/// process's cache, else the disk cache (`settings.ptx_cache`), else NVRTC
/// (whose PTX the disk cache then keeps). Entries are keyed by a hash of
/// the CUDA source itself, so an emitter change never reads stale PTX.
pub fn compile_ptx(kernel: &Kernel, arch: &'static str, settings: &GpuSettings) -> Result<String, GpuError> {
    static CACHE: OnceLock<Mutex<HashMap<(u64, &'static str), String>>> = OnceLock::new();
    let key = (kernel.hash(), arch);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(ptx) = cache.lock().expect("ptx cache").get(&key) {
        return Ok(ptx.clone());
    }
    let source = crate::emit(kernel, crate::Target::Cuda)?;
    let file = settings.ptx_cache.as_ref().map(|dir| dir.join(ptx_file_name(kernel, &source, arch)));
    let cached = file.as_ref().and_then(|f| std::fs::read_to_string(f).ok()).filter(|ptx| ptx_is_for(ptx, kernel, arch));
    let ptx = match cached {
        Some(ptx) => ptx,
        None => {
            let ptx = nvrtc_compile(kernel, &source, arch, settings)?;
            if let Some(f) = &file {
                // A cache that cannot be written only costs a recompile.
                let _ = write_atomically(f, &ptx);
            }
            ptx
        }
    };
    cache.lock().expect("ptx cache").insert(key, ptx.clone());
    Ok(ptx)
}

/// CUDA C for `kernel` compiled by NVRTC to PTX for `arch`, bypassing
/// every cache (what the codegen tests check NVRTC with).
pub fn compile_ptx_uncached(kernel: &Kernel, arch: &'static str, settings: &GpuSettings) -> Result<String, GpuError> {
    let source = crate::emit(kernel, crate::Target::Cuda)?;
    nvrtc_compile(kernel, &source, arch, settings)
}

/// NVRTC's flags for every kernel, part of the PTX cache key.
///
/// `--fmad=false`: by default NVRTC contracts `a * b + c` into one FMA, and
/// in `a * b + c * d` which product it fuses is its own choice, made per
/// kernel after inlining and unrolling. The first run on an NVIDIA GPU (an
/// H200) found the fused gated matmul and the stacked projections differing
/// in their bits from the plain kernels of the same expression trees, which
/// lavapipe (no contraction) runs bit for bit. Without contraction CUDA
/// rounds every product, as the CPU reference and the WGSL run here do;
/// graphc's GPU decode and prefill are bound by launches and memory, not by
/// FMA throughput. The rest are NVRTC's defaults (IEEE division and square
/// root, no flush to zero), named so that the cache key holds them.
pub const NVRTC_FLAGS: [&str; 4] = ["--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true"];

fn nvrtc_compile(kernel: &Kernel, source: &str, arch: &'static str, settings: &GpuSettings) -> Result<String, GpuError> {
    if !nvrtc_available(settings) {
        return Err(GpuError::NoDevice {
            backend: "cuda",
            reason: format!(
                "kernel `{}` for {arch} is not in the PTX cache and NVRTC (libnvrtc.so.12) is not loadable: run tools/setup.sh (PyPI nvidia-cuda-nvrtc-cu12) or give its path (GRAPHC_NVRTC_LIB)",
                kernel.name
            ),
        });
    }
    let options = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        name: Some(format!("{}.cu", kernel.name)),
        options: NVRTC_FLAGS.iter().map(|f| f.to_string()).collect(),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, options).map_err(|e| GpuError::Kernel {
        kernel: kernel.name.clone(),
        target: "cuda",
        message: match e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
            other => other.to_string(),
        },
    })?;
    Ok(ptx.to_src())
}

/// `KERNEL-HASH-ARCH.ptx`: the hash is of [`NVRTC_FLAGS`] and the CUDA
/// source, so two kernels (or two emitter versions) share an entry only when
/// NVRTC would compile the same source the same way.
pub fn ptx_file_name(kernel: &Kernel, source: &str, arch: &str) -> String {
    let keyed = format!("{}\n{source}", NVRTC_FLAGS.join(" "));
    format!("{}-{:016x}-{arch}.ptx", kernel.name, xxhash_rust::xxh3::xxh3_64(keyed.as_bytes()))
}

/// A cache entry is used only if it is PTX for this kernel and arch (a
/// truncated or foreign file is recompiled and overwritten).
fn ptx_is_for(ptx: &str, kernel: &Kernel, arch: &str) -> bool {
    ptx.contains(&format!(".target {arch}")) && ptx.contains(&format!(".entry {}(", kernel.name))
}

fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Compiles `kernel` into the PTX cache for every arch `settings.ptx_record`
/// names (`sm_90`, `sm_80`; none: nothing). The GPU executors
/// call it for each kernel they lower, on any device, so a test run on
/// wgpu here records the PTX a CUDA run of the same tests will need on a
/// machine without NVRTC (`tools/device-bundle`).
pub fn record(kernel: &Kernel, settings: &GpuSettings) -> Result<(), GpuError> {
    for arch in &settings.ptx_record {
        compile_ptx(kernel, static_arch(arch), settings)?;
    }
    Ok(())
}

/// NVRTC takes the arch as `&'static str`: each name leaked once a process.
fn static_arch(arch: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<Vec<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Default::default).lock().expect("arch names");
    if let Some(&a) = names.iter().find(|&&a| a == arch) {
        return a;
    }
    let a: &'static str = Box::leak(arch.to_string().into_boxed_str());
    names.push(a);
    a
}

/// The architectures the CUDA path has passed its parity run on, with no
/// flag needed there: sm_90 (an H200, `tools/device-check`, 2026-12-04).
/// sm_80's PTX is compiled and assembled in CI but has never run.
pub const VERIFIED_ARCHS: [&str; 1] = ["sm_90"];

/// Whether CUDA may run on a device of `arch` (`sm_XY`, named `device`)
/// under `setting` (`GpuSettings::cuda`): on anywhere, off, or `None`: on
/// only for a [`VERIFIED_ARCHS`] architecture.
pub fn gate(setting: Option<bool>, arch: &str, device: &str) -> Result<(), GpuError> {
    match setting {
        Some(true) => Ok(()),
        Some(false) => Err(GpuError::SwitchedOff { backend: "cuda", flag: "GRAPHC_CUDA" }),
        None if VERIFIED_ARCHS.contains(&arch) => Ok(()),
        None => Err(GpuError::Unverified {
            backend: "cuda",
            device: format!("{device} ({arch})"),
            verified: VERIFIED_ARCHS.join(", "),
            flag: "GRAPHC_CUDA",
        }),
    }
}

/// `sm_XY` of the context's device.
fn arch_of(ctx: &CudaContext) -> Result<String, GpuError> {
    let (major, minor) = ctx.compute_capability().map_err(driver_err)?;
    Ok(format!("sm_{major}{minor}"))
}

/// A CUDA device can be used here: `GRAPHC_CUDA` is not `0`, the driver
/// library loads, device 0 exists, and its architecture is verified or the
/// flag is `1` ([`gate`]). Each "no" is an error saying which.
pub fn device_check(settings: &GpuSettings) -> Result<(), GpuError> {
    let setting = settings.cuda;
    if setting == Some(false) {
        return Err(GpuError::SwitchedOff { backend: "cuda", flag: "GRAPHC_CUDA" });
    }
    // SAFETY: only tries to dlopen the driver library and closes it again.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(GpuError::NoDevice { backend: "cuda", reason: "no CUDA driver (libcuda.so.1) on this machine".into() });
    }
    let ctx = CudaContext::new(0).map_err(|e| GpuError::NoDevice { backend: "cuda", reason: e.to_string() })?;
    let name = ctx.name().unwrap_or_else(|_| "CUDA device 0".into());
    gate(setting, &arch_of(&ctx)?, &name)
}

fn driver_err(e: cudarc::driver::DriverError) -> GpuError {
    GpuError::Device { backend: "cuda", message: e.to_string() }
}

/// A device allocation, or a byte range of one.
#[derive(Clone, Debug)]
pub struct CudaBuffer {
    slice: Arc<CudaSlice<u8>>,
    offset: u64,
    pub bytes: u64,
}

/// CUDA device 0, with kernels loaded from PTX on first use.
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// `sm_XY` of the device (NVRTC's target).
    arch: &'static str,
    name: String,
    functions: Mutex<HashMap<u64, CudaFunction>>,
    /// `GpuSettings::cuda_graph`: replayed decode steps run as one captured
    /// CUDA graph instead of their launches one by one ([`CapturedStep`]).
    graphs: bool,
    settings: GpuSettings,
}

/// A replayed step's launches captured once as a CUDA graph: a decode step
/// is ~200 launches, each a few µs of host and launch latency, which a
/// graph pays once. The graph holds the step's device pointers and
/// parameters, which a replay keeps (same buffers, states appended in
/// place, positions and lengths in buffers: `exec::Replay`).
///
/// Off unless `GpuSettings::cuda_graph` (`GRAPHC_CUDA_GRAPH=1`): written after the only GPU run this
/// project had (an H200), never run on one yet; `tools/device-check` runs
/// the CUDA parity and speed steps with it on beside it off.
struct CapturedStep(cudarc::driver::CudaGraph);

// SAFETY: a CudaGraph is not synchronized, so it must not be used from two
// threads at once; a CapturedStep is reached only through the `&mut
// GpuGraph` of one session (`Replay::prepared`), one thread at a time.
unsafe impl Send for CapturedStep {}
// SAFETY: as for Send: no two threads ever hold it at once.
unsafe impl Sync for CapturedStep {}

impl CudaDevice {
    /// Device 0, if [`device_check`] allows it.
    pub fn new(settings: &GpuSettings) -> Result<CudaDevice, GpuError> {
        device_check(settings)?;
        let ctx = CudaContext::new(0).map_err(driver_err)?;
        // NVRTC takes the arch as `&'static str`: one leaked name a device.
        let arch = static_arch(&arch_of(&ctx)?);
        let name = ctx.name().unwrap_or_else(|_| "CUDA device 0".into());
        let graphs = settings.cuda_graph;
        let stream = if graphs {
            // The legacy default stream cannot be captured: a stream of its
            // own. cudarc's event tracking (on once a context has streams)
            // would record events inside captures; graphc orders all of a
            // device's work on its one stream and waits itself, so it is
            // off, before this device allocates anything.
            // SAFETY: graphc's buffers are used on their device's stream only.
            unsafe { ctx.disable_event_tracking() };
            ctx.new_stream().map_err(driver_err)?
        } else {
            ctx.default_stream()
        };
        Ok(CudaDevice { ctx, stream, arch, name, functions: Mutex::new(HashMap::new()), graphs, settings: settings.clone() })
    }

    fn function(&self, kernel: &Kernel, key: u64) -> Result<CudaFunction, GpuError> {
        if let Some(f) = self.functions.lock().expect("function cache").get(&key) {
            return Ok(f.clone());
        }
        let ptx = compile_ptx(kernel, self.arch, &self.settings)?;
        let module = self.ctx.load_module(cudarc::nvrtc::Ptx::from_src(ptx)).map_err(driver_err)?;
        let f = module.load_function(&kernel.name).map_err(driver_err)?;
        self.functions.lock().expect("function cache").insert(key, f.clone());
        Ok(f)
    }

    fn pointer(&self, b: &CudaBuffer) -> u64 {
        let (ptr, _sync) = b.slice.device_ptr(&self.stream);
        ptr + b.offset
    }
}

impl Device for CudaDevice {
    type Buffer = CudaBuffer;
    fn target(&self) -> &'static str {
        "cuda"
    }
    fn settings(&self) -> &GpuSettings {
        &self.settings
    }
    fn label(&self) -> String {
        format!("{}, {}", self.name, self.arch)
    }
    fn upload(&self, bytes: &[u8]) -> Result<CudaBuffer, GpuError> {
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().max(4).next_multiple_of(4), 0);
        let slice = self.stream.clone_htod(&padded).map_err(driver_err)?;
        Ok(CudaBuffer { slice: Arc::new(slice), offset: 0, bytes: bytes.len() as u64 })
    }
    /// The last step's buffer rewritten where the size matches: the copy
    /// is queued on the one stream every launch uses, so it runs after the
    /// launches that read the old bytes. What lets a step replay here
    /// (`same_buffer`), as on wgpu. Written without a GPU to run it on:
    /// `tools/gpu-check`'s parity suite (the replay test) is its check.
    fn upload_reusing(&self, previous: Option<&CudaBuffer>, bytes: &[u8]) -> Result<CudaBuffer, GpuError> {
        match previous {
            Some(b) if b.bytes == bytes.len() as u64 && b.offset == 0 && !bytes.is_empty() => {
                let mut padded = bytes.to_vec();
                padded.resize(bytes.len().next_multiple_of(4), 0);
                self.ctx.bind_to_thread().map_err(driver_err)?;
                let dst = self.pointer(b);
                // SAFETY: `b` is a whole allocation made by `upload` for
                // this many bytes, padded the same way, so the copy stays
                // inside it; a copy from pageable host memory returns only
                // once `padded` has been staged, so it may be dropped after.
                unsafe { cudarc::driver::result::memcpy_htod_async(dst, &padded, self.stream.cu_stream()) }.map_err(driver_err)?;
                Ok(b.clone())
            }
            _ => self.upload(bytes),
        }
    }
    fn same_buffer(&self, a: &CudaBuffer, b: &CudaBuffer) -> bool {
        Arc::ptr_eq(&a.slice, &b.slice) && (a.offset, a.bytes) == (b.offset, b.bytes)
    }
    fn zeros(&self, bytes: u64) -> Result<CudaBuffer, GpuError> {
        let slice = self.stream.alloc_zeros::<u8>(bytes.max(4).next_multiple_of(4) as usize).map_err(driver_err)?;
        Ok(CudaBuffer { slice: Arc::new(slice), offset: 0, bytes })
    }
    fn view(&self, buf: &CudaBuffer, offset: u64, bytes: u64) -> CudaBuffer {
        assert!(offset + bytes <= buf.bytes, "view {offset}+{bytes} of a {}-byte buffer", buf.bytes);
        CudaBuffer { slice: buf.slice.clone(), offset: buf.offset + offset, bytes }
    }
    fn binding_limits(&self) -> BindingLimits {
        // Kernels index buffers with u32 element offsets: 4 GiB of words.
        // Buffers are kernel parameters (pointers): 4 KiB of them allows
        // hundreds; 64 bounds what a stacked kernel passes.
        BindingLimits { max_bytes: u32::MAX as u64, offset_alignment: 256, max_buffers: 64 }
    }
    fn run(&self, launches: &[Launch<'_, CudaBuffer>]) -> Result<(), GpuError> {
        for l in launches {
            l.check()?;
            let f = self.function(l.kernel, l.key)?;
            let pointers: Vec<u64> = l.buffers.iter().map(|b| self.pointer(b)).collect();
            let params: Vec<u32> = l.params.iter().map(|v| v.bits()).collect();
            let mut builder = self.stream.launch_builder(&f);
            for p in &pointers {
                builder.arg(p);
            }
            for p in &params {
                builder.arg(p);
            }
            let (x, y) = grid(l.groups);
            let cfg = LaunchConfig { grid_dim: (x, y, 1), block_dim: (l.kernel.workgroup_size, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: the arguments are the kernel's signature in order
            // (checked above against its IR): one device pointer per buffer,
            // then 4-byte scalars; the buffers outlive the stream's work
            // (`read` synchronizes before anything is dropped by the caller).
            unsafe { builder.launch(cfg) }.map_err(|e| GpuError::Launch { kernel: l.kernel.name.clone(), message: e.to_string() })?;
        }
        Ok(())
    }
    fn wait(&self) -> Result<(), GpuError> {
        self.stream.synchronize().map_err(driver_err)
    }
    /// With `GpuSettings::cuda_graph`: the launches captured as a CUDA graph
    /// (every kernel loaded first: loading a module is no stream work a
    /// capture may hold), which then runs once; else they run.
    fn run_prepared(&self, launches: &[Launch<'_, CudaBuffer>], prepared: &mut Option<Box<dyn std::any::Any + Send + Sync>>) -> Result<(), GpuError> {
        if !self.graphs {
            return self.run(launches);
        }
        for l in launches {
            l.check()?;
            self.function(l.kernel, l.key)?;
        }
        use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
        self.stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(driver_err)?;
        let recorded = self.run(launches);
        // The capture ends whatever the launches did, so the stream is
        // usable again.
        let graph = self.stream.end_capture(CUgraphInstantiate_flags(0));
        recorded?;
        let graph = graph
            .map_err(driver_err)?
            .ok_or_else(|| GpuError::Device { backend: "cuda", message: "capturing a step's launches made no graph".into() })?;
        graph.launch().map_err(driver_err)?;
        *prepared = Some(Box::new(CapturedStep(graph)));
        Ok(())
    }
    fn rerun(&self, prepared: &(dyn std::any::Any + Send + Sync)) -> Result<bool, GpuError> {
        match prepared.downcast_ref::<CapturedStep>() {
            Some(step) => step.0.launch().map(|_| true).map_err(driver_err),
            None => Ok(false),
        }
    }
    fn read(&self, buf: &CudaBuffer) -> Result<Vec<u8>, GpuError> {
        let start = buf.offset as usize;
        let view = buf.slice.slice(start..start + buf.bytes as usize);
        let bytes = self.stream.clone_dtoh(&view).map_err(driver_err)?;
        // A copy into pageable memory completes before returning; the
        // explicit wait keeps that true whatever memory the Vec is.
        self.stream.synchronize().map_err(driver_err)?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_is_on_by_default_only_where_it_was_verified() {
        assert!(gate(None, "sm_90", "NVIDIA H200").is_ok());
        let e = gate(None, "sm_80", "NVIDIA A100").unwrap_err().to_string();
        assert_eq!(e, "cuda is off on NVIDIA A100 (sm_80): it has passed its parity run only on sm_90; set GRAPHC_CUDA=1 to enable it");
        assert!(gate(Some(true), "sm_80", "NVIDIA A100").is_ok(), "GRAPHC_CUDA=1 enables an unverified architecture");
        for arch in ["sm_80", "sm_90"] {
            assert_eq!(gate(Some(false), arch, "d").unwrap_err().to_string(), "cuda is off: GRAPHC_CUDA=0");
        }
    }
}
