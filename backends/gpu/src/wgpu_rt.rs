//! The WGSL runtime on wgpu: device selection, buffers, pipelines cached by
//! kernel hash, and launches recorded into one command buffer per
//! submission (a decode step is one `submit`).
//!
//! Errors are values: no adapter is `GpuError::NoDevice`, a kernel wgpu
//! rejects is `GpuError::Kernel` naming it (an error scope is pushed around
//! pipeline creation, so wgpu's default handler, which panics, never sees it).

use crate::device::{grid, BindingLimits, Device, Launch};
use crate::kir::Kernel;
use crate::GpuError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A device buffer, or a byte range of one: its size in bytes is what the
/// caller asked for (the allocation is padded to a whole word).
#[derive(Clone, Debug)]
pub struct GpuBuffer {
    buffer: Arc<wgpu::Buffer>,
    pub bytes: u64,
    offset: u64,
}

impl GpuBuffer {
    /// Bytes `offset .. offset + bytes` of this buffer, bound on their own
    /// (`offset` a multiple of the device's storage offset alignment).
    pub fn view(&self, offset: u64, bytes: u64) -> GpuBuffer {
        assert!(offset + bytes <= self.bytes, "view {offset}+{bytes} of a {}-byte buffer", self.bytes);
        GpuBuffer { buffer: self.buffer.clone(), bytes, offset: self.offset + offset }
    }

    fn binding(&self) -> wgpu::BindingResource<'_> {
        let size = self.bytes.max(4).next_multiple_of(4).min(self.buffer.size() - self.offset);
        wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: &self.buffer, offset: self.offset, size: std::num::NonZeroU64::new(size) })
    }
}

struct Pipeline {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

pub struct WgpuDevice {
    device: wgpu::Device,
    queue: wgpu::Queue,
    /// The adapter as wgpu names it (`llvmpipe (LLVM ...)` on lavapipe).
    pub adapter_name: String,
    pipelines: Mutex<HashMap<u64, Arc<Pipeline>>>,
    /// A smaller binding limit than the device's (tests of the split path).
    max_binding_override: Option<u64>,
}

impl WgpuDevice {
    /// The first adapter of the backends `WGPU_BACKEND` names (Vulkan when
    /// it is unset: with every backend allowed, a missing Vulkan silently
    /// falls back to a GL adapter with other limits).
    pub fn new() -> Result<WgpuDevice, GpuError> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        if std::env::var_os("WGPU_BACKEND").is_none() {
            desc.backends = wgpu::Backends::VULKAN;
        }
        let instance = wgpu::Instance::new(desc);
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
            .map_err(|e| GpuError::NoDevice { backend: "wgpu", reason: e.to_string() })?;
        let adapter_name = adapter.get_info().name;
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("graphc"),
            required_limits: limits,
            ..Default::default()
        }))
        .map_err(|e| GpuError::NoDevice { backend: "wgpu", reason: e.to_string() })?;
        Ok(WgpuDevice { device, queue, adapter_name, pipelines: Mutex::new(HashMap::new()), max_binding_override: None })
    }

    fn buffer(&self, bytes: u64, usage: wgpu::BufferUsages) -> GpuBuffer {
        let size = bytes.max(4).next_multiple_of(4);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor { label: None, size, usage, mapped_at_creation: false });
        GpuBuffer { buffer: Arc::new(buffer), bytes, offset: 0 }
    }

    pub fn binding_limits(&self) -> BindingLimits {
        let l = self.device.limits();
        let max_bytes = self.max_binding_override.unwrap_or(l.max_storage_buffer_binding_size).min(l.max_storage_buffer_binding_size);
        BindingLimits { max_bytes, offset_alignment: l.min_storage_buffer_offset_alignment as u64 }
    }

    /// Lower the largest binding the lowering may use (to exercise the
    /// split of large weights on small inputs).
    pub fn limit_binding_bytes(&mut self, max_bytes: u64) {
        self.max_binding_override = Some(max_bytes);
    }

    /// A storage buffer holding `data` (padded with zeros to a whole word).
    pub fn upload(&self, data: &[u8]) -> GpuBuffer {
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let buf = self.buffer(data.len() as u64, usage);
        let mut padded = data.to_vec();
        padded.resize(data.len().max(4).next_multiple_of(4), 0);
        self.queue.write_buffer(&buf.buffer, 0, &padded);
        buf
    }

    /// A zeroed storage buffer of `bytes`.
    pub fn zeros(&self, bytes: u64) -> GpuBuffer {
        self.buffer(bytes, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC)
    }

    fn pipeline(&self, kernel: &Kernel) -> Result<Arc<Pipeline>, GpuError> {
        let key = kernel.hash();
        if let Some(p) = self.pipelines.lock().expect("pipeline cache").get(&key) {
            return Ok(p.clone());
        }
        let source = crate::emit(kernel, crate::Target::Wgsl)?;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&kernel.name),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&kernel.name),
            layout: None,
            module: &module,
            entry_point: Some(&kernel.name),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(GpuError::Kernel { kernel: kernel.name.clone(), target: "wgpu", message: e.to_string() });
        }
        let layout = pipeline.get_bind_group_layout(0);
        let p = Arc::new(Pipeline { pipeline, layout });
        self.pipelines.lock().expect("pipeline cache").insert(key, p.clone());
        Ok(p)
    }

    /// Records `launches` in order into one command buffer and submits it.
    /// Each launch's arguments are checked against its kernel first.
    pub fn run(&self, launches: &[Launch<'_, GpuBuffer>]) -> Result<(), GpuError> {
        let mut prepared = vec![];
        for l in launches {
            l.check()?;
            let k = l.kernel;
            let bad = |message: String| GpuError::Launch { kernel: k.name.clone(), message };
            let pipeline = self.pipeline(k)?;
            let mut entries: Vec<wgpu::BindGroupEntry> = l
                .buffers
                .iter()
                .enumerate()
                .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.binding() })
                .collect();
            let params_buf;
            if !k.params.is_empty() {
                let words: Vec<u32> = l.params.iter().map(|v| v.bits()).collect();
                let mut bytes: Vec<u8> = bytemuck::cast_slice(&words).to_vec();
                bytes.resize(bytes.len().next_multiple_of(16), 0);
                params_buf = self.buffer(bytes.len() as u64, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
                self.queue.write_buffer(&params_buf.buffer, 0, &bytes);
                entries.push(wgpu::BindGroupEntry { binding: k.buffers.len() as u32, resource: params_buf.buffer.as_entire_binding() });
            }
            let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
            let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &pipeline.layout, entries: &entries });
            if let Some(e) = pollster::block_on(scope.pop()) {
                return Err(bad(format!("wgpu refused its buffers: {e}")));
            }
            prepared.push((pipeline, bind_group, grid(l.groups)));
        }
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let memory = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
            for (pipeline, bind_group, (x, y)) in &prepared {
                pass.set_pipeline(&pipeline.pipeline);
                pass.set_bind_group(0, bind_group, &[]);
                pass.dispatch_workgroups(*x, *y, 1);
            }
        }
        self.queue.submit([encoder.finish()]);
        let device_err = |message: String| GpuError::Device { backend: "wgpu", message };
        if let Some(e) = pollster::block_on(memory.pop()) {
            return Err(device_err(format!("out of memory: {e}")));
        }
        if let Some(e) = pollster::block_on(validation.pop()) {
            return Err(device_err(e.to_string()));
        }
        Ok(())
    }

    /// Copies `buf` back to the host (waits for the work before it).
    pub fn read(&self, buf: &GpuBuffer) -> Result<Vec<u8>, GpuError> {
        let size = buf.bytes.max(4).next_multiple_of(4);
        let staging = self.buffer(size, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        encoder.copy_buffer_to_buffer(&buf.buffer, buf.offset, &staging.buffer, 0, size);
        self.queue.submit([encoder.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.buffer.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        let device_err = |message: String| GpuError::Device { backend: "wgpu", message };
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| device_err(e.to_string()))?;
        rx.recv().map_err(|e| device_err(e.to_string()))?.map_err(|e| device_err(e.to_string()))?;
        let view = staging.buffer.get_mapped_range(..).map_err(|e| device_err(e.to_string()))?;
        Ok(view[..buf.bytes as usize].to_vec())
    }
}

impl Device for WgpuDevice {
    type Buffer = GpuBuffer;
    fn target(&self) -> &'static str {
        "wgpu"
    }
    fn label(&self) -> String {
        self.adapter_name.clone()
    }
    fn upload(&self, bytes: &[u8]) -> Result<GpuBuffer, GpuError> {
        Ok(WgpuDevice::upload(self, bytes))
    }
    fn zeros(&self, bytes: u64) -> Result<GpuBuffer, GpuError> {
        Ok(WgpuDevice::zeros(self, bytes))
    }
    fn view(&self, buf: &GpuBuffer, offset: u64, bytes: u64) -> GpuBuffer {
        buf.view(offset, bytes)
    }
    fn binding_limits(&self) -> BindingLimits {
        WgpuDevice::binding_limits(self)
    }
    fn run(&self, launches: &[Launch<'_, GpuBuffer>]) -> Result<(), GpuError> {
        WgpuDevice::run(self, launches)
    }
    fn read(&self, buf: &GpuBuffer) -> Result<Vec<u8>, GpuError> {
        WgpuDevice::read(self, buf)
    }
}
