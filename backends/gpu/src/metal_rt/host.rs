//! The Metal host: the same kernel calls as wgpu and CUDA, on the system's
//! default Metal device through `objc2-metal` — the bindings wgpu's own
//! Metal backend uses (the older `metal` crate is superseded by them, and
//! unlike it they can be type-checked on Linux: `tools/metal-typecheck`).
//!
//! - Kernels: naga's MSL of the validated WGSL module (`emit::msl`),
//!   compiled by `newLibraryWithSource` (MSL 2.4, fast math off), pipelines
//!   cached by kernel hash. naga's entry point name is used (it renames
//!   some).
//! - Buffers: shared storage (one memory for CPU and GPU on Apple silicon),
//!   so upload is a copy into a new buffer and read-back a copy out of it.
//! - Launches: one command buffer and one compute encoder per `run`; per
//!   launch the pipeline, buffer `i` at slot `i` (views as offsets), the
//!   parameters by `setBytes` at the slot after them, each workgroup
//!   array's threadgroup length, and the sizes buffer (byte size of every
//!   bound buffer) at `msl::SIZES_SLOT`, which naga's bounds checks read.
//!   This is the binding model wgpu-hal's Metal backend uses for the same
//!   naga output.
//! - `run` waits for its command buffer and checks its status, so an error
//!   on the GPU is reported by the `run` that caused it. A step's outputs
//!   are read right after its one `run`, so the wait costs no overlap.
//!
//! Never run: no Mac has been available to this repo's sessions. The path
//! is off unless `GRAPHC_METAL=1`, and `tools/metal-check` is the one
//! command that verifies it on a Mac.
#![allow(unsafe_code)]

use crate::device::{grid, BindingLimits, Device, Launch};
use crate::emit::msl::{translate, MslKernel, SIZES_SLOT};
use crate::kir::Kernel;
use crate::{GpuError, GpuSettings};
use objc2::rc::Retained;
use objc2::runtime::ProtocolObject;
use objc2_foundation::NSString;
use objc2_metal::{
    MTLBuffer, MTLCommandBuffer, MTLCommandBufferStatus, MTLCommandEncoder, MTLCommandQueue, MTLCompileOptions, MTLComputeCommandEncoder,
    MTLComputePipelineState, MTLCreateSystemDefaultDevice, MTLDevice, MTLLanguageVersion, MTLLibrary, MTLResourceOptions, MTLSize,
};
use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

fn device_err(message: String) -> GpuError {
    GpuError::Device { backend: "metal", message }
}

/// A shared-storage Metal buffer, or a byte range of one.
#[derive(Clone, Debug)]
pub struct MetalBuffer {
    buffer: Retained<ProtocolObject<dyn MTLBuffer>>,
    offset: u64,
    pub bytes: u64,
}

impl MetalBuffer {
    /// The size the kernel sees: whole words, within the allocation.
    fn bound_bytes(&self) -> u64 {
        self.bytes.max(4).next_multiple_of(4).min(self.buffer.length() as u64 - self.offset)
    }
}

struct Pipeline {
    state: Retained<ProtocolObject<dyn MTLComputePipelineState>>,
    kernel: MslKernel,
}

/// The system's default Metal device and one command queue.
pub struct MetalDevice {
    device: Retained<ProtocolObject<dyn MTLDevice>>,
    queue: Retained<ProtocolObject<dyn MTLCommandQueue>>,
    name: String,
    pipelines: Mutex<HashMap<u64, Arc<Pipeline>>>,
    settings: GpuSettings,
}

impl MetalDevice {
    /// The default device, if `settings.metal` and the system has one.
    pub fn new(settings: &GpuSettings) -> Result<MetalDevice, GpuError> {
        super::device_check(settings)?;
        let device = MTLCreateSystemDefaultDevice()
            .ok_or_else(|| GpuError::NoDevice { backend: "metal", reason: "MTLCreateSystemDefaultDevice returned no device".into() })?;
        let queue = device.newCommandQueue().ok_or_else(|| device_err("newCommandQueue returned no queue".into()))?;
        let name = device.name().to_string();
        Ok(MetalDevice { device, queue, name, pipelines: Mutex::new(HashMap::new()), settings: settings.clone() })
    }

    fn pipeline(&self, kernel: &Kernel, key: u64) -> Result<Arc<Pipeline>, GpuError> {
        if let Some(p) = self.pipelines.lock().expect("pipeline cache").get(&key) {
            return Ok(p.clone());
        }
        kernel.check().map_err(crate::EmitError::from)?;
        let msl = translate(kernel)?;
        let kernel_err = |message: String| GpuError::Kernel { kernel: kernel.name.clone(), target: "metal", message };
        let options = MTLCompileOptions::new();
        options.setLanguageVersion(MTLLanguageVersion::Version2_4);
        // Metal compiles with fast math unless told otherwise: reassociated
        // sums and approximate `exp`/`tanh`, where graphc's contract is the
        // reference's f32 arithmetic. `mathMode` replaces this setter from
        // macOS 15 on; the setter works on every version.
        #[allow(deprecated)]
        options.setFastMathEnabled(false);
        let library = self
            .device
            .newLibraryWithSource_options_error(&NSString::from_str(&msl.source), Some(&options))
            .map_err(|e| kernel_err(format!("the Metal compiler rejected naga's MSL: {}", e.localizedDescription())))?;
        let function = library
            .newFunctionWithName(&NSString::from_str(&msl.entry_point))
            .ok_or_else(|| kernel_err(format!("the library has no function `{}`", msl.entry_point)))?;
        let state = self
            .device
            .newComputePipelineStateWithFunction_error(&function)
            .map_err(|e| kernel_err(format!("pipeline: {}", e.localizedDescription())))?;
        let max_threads = state.maxTotalThreadsPerThreadgroup();
        if (kernel.workgroup_size as usize) > max_threads {
            return Err(kernel_err(format!("workgroup of {} threads; this device's pipeline allows {max_threads}", kernel.workgroup_size)));
        }
        let p = Arc::new(Pipeline { state, kernel: msl });
        self.pipelines.lock().expect("pipeline cache").insert(key, p.clone());
        Ok(p)
    }

    fn new_buffer(&self, bytes: u64) -> Result<MetalBuffer, GpuError> {
        let size = bytes.max(4).next_multiple_of(4) as usize;
        let buffer = self
            .device
            .newBufferWithLength_options(size, MTLResourceOptions::StorageModeShared)
            .ok_or_else(|| device_err(format!("could not allocate a {size}-byte buffer")))?;
        Ok(MetalBuffer { buffer, offset: 0, bytes })
    }

    /// The bytes of a shared-storage buffer's range.
    fn contents(&self, buf: &MetalBuffer) -> *mut u8 {
        // `contents` is the CPU address of a shared-storage allocation.
        buf.buffer.contents().as_ptr().cast::<u8>().wrapping_add(buf.offset as usize)
    }
}

impl Device for MetalDevice {
    type Buffer = MetalBuffer;
    fn target(&self) -> &'static str {
        "metal"
    }
    fn settings(&self) -> &GpuSettings {
        &self.settings
    }
    fn label(&self) -> String {
        self.name.clone()
    }
    fn upload(&self, bytes: &[u8]) -> Result<MetalBuffer, GpuError> {
        let buf = self.new_buffer(bytes.len() as u64)?;
        let dst = self.contents(&buf);
        // SAFETY: the buffer was just allocated with at least `bytes.len()`
        // bytes of shared storage and no GPU work uses it yet; its padding
        // past `bytes.len()` (to a whole word) is zeroed too.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len());
            std::ptr::write_bytes(dst.add(bytes.len()), 0, buf.buffer.length() - bytes.len());
        }
        Ok(buf)
    }
    /// `run` waited for the work that read it, so it is written in place.
    fn upload_reusing(&self, previous: Option<&MetalBuffer>, bytes: &[u8]) -> Result<MetalBuffer, GpuError> {
        match previous {
            Some(b) if b.bytes == bytes.len() as u64 && b.offset == 0 => {
                // SAFETY: a shared-storage allocation of at least `bytes`
                // bytes (its recorded size) that no GPU work is using: every
                // `run` waits for its command buffer.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.contents(b), bytes.len()) };
                Ok(b.clone())
            }
            _ => self.upload(bytes),
        }
    }
    /// One allocation (the same Objective-C object) and one range: what
    /// lets a decode step replay here, its inputs rewritten in place.
    fn same_buffer(&self, a: &MetalBuffer, b: &MetalBuffer) -> bool {
        std::ptr::eq(Retained::as_ptr(&a.buffer), Retained::as_ptr(&b.buffer)) && (a.offset, a.bytes) == (b.offset, b.bytes)
    }
    fn zeros(&self, bytes: u64) -> Result<MetalBuffer, GpuError> {
        // Metal does not promise new buffers are zeroed.
        let buf = self.new_buffer(bytes)?;
        // SAFETY: as in `upload`: a fresh shared-storage allocation of
        // `length()` bytes that no GPU work uses yet.
        unsafe { std::ptr::write_bytes(self.contents(&buf), 0, buf.buffer.length()) };
        Ok(buf)
    }
    fn view(&self, buf: &MetalBuffer, offset: u64, bytes: u64) -> MetalBuffer {
        assert!(offset + bytes <= buf.bytes, "view {offset}+{bytes} of a {}-byte buffer", buf.bytes);
        MetalBuffer { buffer: buf.buffer.clone(), offset: buf.offset + offset, bytes }
    }
    fn binding_limits(&self) -> BindingLimits {
        // Kernels index buffers with u32 element offsets and the sizes
        // buffer holds u32 byte counts; 256 is the strictest offset
        // alignment Metal asks of a buffer binding (constant, on macOS).
        let max_bytes = (self.device.maxBufferLength() as u64).min(u32::MAX as u64);
        // 31 buffer slots a stage; naga's MSL takes slot 30 for its sizes
        // buffer, and the parameters one more.
        BindingLimits { max_bytes, offset_alignment: 256, max_buffers: 29 }
    }
    fn run(&self, launches: &[Launch<'_, MetalBuffer>]) -> Result<(), GpuError> {
        let pipelines: Vec<Arc<Pipeline>> =
            launches.iter().map(|l| l.check().and_then(|()| self.pipeline(l.kernel, l.key))).collect::<Result<_, _>>()?;
        let commands = self.queue.commandBuffer().ok_or_else(|| device_err("commandBuffer returned none".into()))?;
        let encoder = commands.computeCommandEncoder().ok_or_else(|| device_err("computeCommandEncoder returned none".into()))?;
        for (l, p) in launches.iter().zip(&pipelines) {
            encoder.setComputePipelineState(&p.state);
            for (slot, b) in l.buffers.iter().enumerate() {
                // SAFETY: the buffer is alive (the launch borrows it) and
                // `offset` lies inside it (`view` checks); slot `i` is the
                // kernel's buffer `i` (emit::msl binds them so).
                unsafe { encoder.setBuffer_offset_atIndex(Some(&b.buffer), b.offset as usize, slot) };
            }
            if !l.params.is_empty() {
                // naga's `Params` struct: one 4-byte member per parameter.
                let mut words: Vec<u32> = l.params.iter().map(|v| v.bits()).collect();
                words.resize(words.len().next_multiple_of(4), 0);
                set_bytes(&encoder, &words, l.buffers.len());
            }
            for (index, &bytes) in p.kernel.threadgroup_bytes.iter().enumerate() {
                // SAFETY: one length per workgroup array the kernel uses, in
                // the order naga declares them, each a multiple of 16.
                unsafe { encoder.setThreadgroupMemoryLength_atIndex(bytes as usize, index) };
            }
            if !p.kernel.sized_bindings.is_empty() {
                let sizes: Vec<u32> = p.kernel.sized_bindings.iter().map(|&b| l.buffers[b as usize].bound_bytes() as u32).collect();
                set_bytes(&encoder, &sizes, SIZES_SLOT as usize);
            }
            let (x, y) = grid(l.groups);
            let groups = MTLSize { width: x as usize, height: y as usize, depth: 1 };
            let threads = MTLSize { width: l.kernel.workgroup_size as usize, height: 1, depth: 1 };
            encoder.dispatchThreadgroups_threadsPerThreadgroup(groups, threads);
        }
        encoder.endEncoding();
        commands.commit();
        commands.waitUntilCompleted();
        if commands.status() != MTLCommandBufferStatus::Completed {
            let reason = commands.error().map_or_else(|| format!("status {:?}", commands.status()), |e| e.localizedDescription().to_string());
            let kernels: Vec<&str> = launches.iter().map(|l| l.kernel.name.as_str()).collect();
            return Err(GpuError::Launch { kernel: kernels.join(", "), message: format!("the command buffer failed: {reason}") });
        }
        Ok(())
    }
    fn read(&self, buf: &MetalBuffer) -> Result<Vec<u8>, GpuError> {
        let mut out = vec![0u8; buf.bytes as usize];
        // SAFETY: `run` waited for all GPU work, so the shared-storage range
        // `offset .. offset + bytes` (inside the allocation: `view` checks)
        // is not being written.
        unsafe { std::ptr::copy_nonoverlapping(self.contents(buf), out.as_mut_ptr(), out.len()) };
        Ok(out)
    }
}

/// `data` as an inline constant buffer at `slot` (Metal copies it).
fn set_bytes(encoder: &ProtocolObject<dyn MTLComputeCommandEncoder>, data: &[u32], slot: usize) {
    let ptr = NonNull::new(data.as_ptr().cast_mut().cast::<c_void>()).expect("a Vec's pointer is not null");
    // SAFETY: `ptr` points at `size_of_val(data)` readable bytes, which
    // Metal copies before `setBytes` returns.
    unsafe { encoder.setBytes_length_atIndex(ptr, std::mem::size_of_val(data), slot) };
}
