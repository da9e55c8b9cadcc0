//! The WGSL runtime on wgpu: device selection, buffers, pipelines cached by
//! kernel hash, and launches recorded into one command buffer per
//! submission (a decode step is one `submit`).
//!
//! Errors are values: no adapter is `GpuError::NoDevice`, a kernel wgpu
//! rejects is `GpuError::Kernel` naming it (an error scope is pushed around
//! pipeline creation, so wgpu's default handler, which panics, never sees it).

use crate::device::{grid, BindingLimits, Device, Launch};
use crate::kir::Kernel;
use crate::{GpuError, GpuSettings};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A device buffer, or a byte range of one: its size in bytes is what the
/// caller asked for (the allocation is padded to a whole word).
#[derive(Clone, Debug)]
pub struct GpuBuffer {
    buffer: Arc<wgpu::Buffer>,
    pub bytes: u64,
    offset: u64,
    /// Unique per allocation (views share it): the bind-group cache's key.
    id: u64,
}

fn next_buffer_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl GpuBuffer {
    /// Bytes `offset .. offset + bytes` of this buffer, bound on their own
    /// (`offset` a multiple of the device's storage offset alignment).
    pub fn view(&self, offset: u64, bytes: u64) -> GpuBuffer {
        assert!(offset + bytes <= self.bytes, "view {offset}+{bytes} of a {}-byte buffer", self.bytes);
        GpuBuffer { buffer: self.buffer.clone(), bytes, offset: self.offset + offset, id: self.id }
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
    max_buffers_override: Option<u32>,
    /// Every launch's parameters of one `run`, each at its own aligned
    /// offset of one uniform buffer (kept and grown; the lock spans
    /// writing it and submitting, so concurrent runs cannot interleave).
    params_arena: Mutex<Option<GpuBuffer>>,
    bind_groups: Mutex<HashMap<BindGroupKey, CachedGroup>>,
    settings: GpuSettings,
}

/// Launches made ready to encode: their parameters packed as the arena
/// holds them, and each one's pipeline, bind group and grid.
struct Prepared {
    params: Vec<u8>,
    /// The arena the bind groups point into (a grown arena is a new one).
    arena_id: u64,
    dispatches: Vec<(Arc<Pipeline>, wgpu::BindGroup, (u32, u32))>,
}

/// A bind group is the pipeline, each binding's (buffer, offset, size), and
/// where the parameters sit in the arena.
type BindGroupKey = (u64, Vec<(u64, u64, u64)>, u64, u64);

thread_local! {
    /// Bind groups created on this thread (each costs wgpu a validation):
    /// `Device::bindings_built`, per thread since sessions share a device.
    static BIND_GROUPS_BUILT_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A cached bind group and the allocations it binds, held weakly: a bind
/// group keeps wgpu's memory of every buffer it binds alive, and the device
/// outlives sessions (one a process), so a group whose allocations are all
/// gone from graphc (its session closed, an arena outgrown) is evicted at
/// the next step that builds groups, and the memory with it.
struct CachedGroup {
    group: wgpu::BindGroup,
    binds: Vec<std::sync::Weak<wgpu::Buffer>>,
}

/// Bind groups kept before the cache is dropped and refilled (a step's
/// inputs are new buffers each time, so their groups never hit).
const MAX_BIND_GROUPS: usize = 8192;

impl WgpuDevice {
    /// The first adapter of the backends `settings.wgpu_backends` names
    /// (when it is `None`, Vulkan, or Metal on macOS: with every backend
    /// allowed, a missing Vulkan silently falls back to a GL adapter with
    /// other limits).
    pub fn new(settings: &GpuSettings) -> Result<WgpuDevice, GpuError> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = match &settings.wgpu_backends {
            Some(names) => wgpu::Backends::from_comma_list(names),
            None if cfg!(target_os = "macos") => wgpu::Backends::METAL,
            None => wgpu::Backends::VULKAN,
        };
        let instance = wgpu::Instance::new(desc);
        // A discrete GPU over an integrated one where a machine has both.
        let options = wgpu::RequestAdapterOptions { power_preference: wgpu::PowerPreference::HighPerformance, ..Default::default() };
        let adapter =
            pollster::block_on(instance.request_adapter(&options)).map_err(|e| GpuError::NoDevice { backend: "wgpu", reason: e.to_string() })?;
        let adapter_name = adapter.get_info().name;
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("graphc"),
            required_limits: limits,
            ..Default::default()
        }))
        .map_err(|e| GpuError::NoDevice { backend: "wgpu", reason: e.to_string() })?;
        Ok(WgpuDevice {
            device,
            queue,
            adapter_name,
            pipelines: Mutex::new(HashMap::new()),
            max_binding_override: None,
            max_buffers_override: None,
            params_arena: Mutex::new(None),
            bind_groups: Mutex::new(HashMap::new()),
            settings: settings.clone(),
        })
    }

    fn buffer(&self, bytes: u64, usage: wgpu::BufferUsages) -> GpuBuffer {
        let size = bytes.max(4).next_multiple_of(4);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor { label: None, size, usage, mapped_at_creation: false });
        GpuBuffer { buffer: Arc::new(buffer), bytes, offset: 0, id: next_buffer_id() }
    }

    /// Bind groups in the cache (what `CachedGroup` eviction is tested by).
    pub fn cached_bind_groups(&self) -> usize {
        self.bind_groups.lock().expect("bind group cache").len()
    }

    pub fn binding_limits(&self) -> BindingLimits {
        let l = self.device.limits();
        let max_bytes = self.max_binding_override.unwrap_or(l.max_storage_buffer_binding_size).min(l.max_storage_buffer_binding_size);
        let max_buffers = self.max_buffers_override.unwrap_or(l.max_storage_buffers_per_shader_stage).min(l.max_storage_buffers_per_shader_stage);
        BindingLimits { max_bytes, offset_alignment: l.min_storage_buffer_offset_alignment as u64, max_buffers }
    }

    /// Lower the storage buffers one kernel may bind (to exercise the
    /// unstacked fallback of a stacked pair).
    pub fn limit_buffers(&mut self, max_buffers: u32) {
        self.max_buffers_override = Some(max_buffers);
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

    fn pipeline(&self, kernel: &Kernel, key: u64) -> Result<Arc<Pipeline>, GpuError> {
        if let Some(p) = self.pipelines.lock().expect("pipeline cache").get(&key) {
            return Ok(p.clone());
        }
        let source = crate::emit(kernel, crate::Target::Wgsl)?;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(&kernel.name), source: wgpu::ShaderSource::Wgsl(source.into()) });
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
    /// Each launch's arguments are checked against its kernel first. The
    /// parameters of all launches go up in one write; bind groups are
    /// reused while their buffers are (the buffer plan keeps them).
    pub fn run(&self, launches: &[Launch<'_, GpuBuffer>]) -> Result<(), GpuError> {
        let mut arena = self.params_arena.lock().expect("params arena");
        let prepared = self.prepare(launches, &mut arena)?;
        self.encode(&prepared, &arena)
    }

    /// `run`, keeping what it built in `prepared` for `rerun` (the graph
    /// executor's replayed steps): then no parameter packing, pipeline
    /// lookup or bind-group keying again, only the parameters rewritten and
    /// the dispatches encoded.
    pub fn run_prepared(
        &self,
        launches: &[Launch<'_, GpuBuffer>],
        prepared: &mut Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Result<(), GpuError> {
        let mut arena = self.params_arena.lock().expect("params arena");
        let built = self.prepare(launches, &mut arena)?;
        self.encode(&built, &arena)?;
        *prepared = Some(Box::new(built));
        Ok(())
    }

    /// Packs the launches' parameters into the arena's layout (growing the
    /// arena if they do not fit) and finds or builds each one's pipeline and
    /// bind group.
    fn prepare(&self, launches: &[Launch<'_, GpuBuffer>], arena: &mut Option<GpuBuffer>) -> Result<Prepared, GpuError> {
        let align = self.device.limits().min_uniform_buffer_offset_alignment as usize;
        let mut params = vec![];
        let mut offsets = vec![];
        for l in launches {
            l.check()?;
            offsets.push(params.len() as u64);
            if !l.params.is_empty() {
                let words: Vec<u32> = l.params.iter().map(|v| v.bits()).collect();
                params.extend_from_slice(bytemuck::cast_slice(&words));
                params.resize(params.len().next_multiple_of(align), 0);
            }
        }
        if arena.as_ref().is_none_or(|a| a.bytes < params.len() as u64) {
            let size = (params.len() as u64).max(4096).next_power_of_two();
            *arena = Some(self.buffer(size, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST));
        }
        let arena = arena.as_ref().expect("made above");
        let mut cache = self.bind_groups.lock().expect("bind group cache");
        if cache.len() > MAX_BIND_GROUPS {
            cache.clear();
        }
        let mut dispatches = vec![];
        let mut built_any = false;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        for (l, &at) in launches.iter().zip(&offsets) {
            let pipeline = self.pipeline(l.kernel, l.key)?;
            let key: BindGroupKey = (l.key, l.buffers.iter().map(|b| (b.id, b.offset, b.bytes)).collect(), at, arena.id);
            let group = match cache.get(&key) {
                Some(cached) => cached.group.clone(),
                None => {
                    let mut entries: Vec<wgpu::BindGroupEntry> =
                        l.buffers.iter().enumerate().map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.binding() }).collect();
                    if !l.params.is_empty() {
                        let size = std::num::NonZeroU64::new((l.params.len() as u64 * 4).next_multiple_of(16));
                        let resource = wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: &arena.buffer, offset: at, size });
                        entries.push(wgpu::BindGroupEntry { binding: l.kernel.buffers.len() as u32, resource });
                    }
                    let group =
                        self.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &pipeline.layout, entries: &entries });
                    BIND_GROUPS_BUILT_HERE.with(|n| n.set(n.get() + 1));
                    built_any = true;
                    let binds = l.buffers.iter().map(|b| &b.buffer).chain([&arena.buffer]).map(Arc::downgrade).collect();
                    cache.insert(key, CachedGroup { group: group.clone(), binds });
                    group
                }
            };
            dispatches.push((pipeline, group, grid(l.groups)));
        }
        if built_any {
            cache.retain(|_, cached| cached.binds.iter().all(|b| b.strong_count() > 0));
        }
        if let Some(e) = pollster::block_on(scope.pop()) {
            // Name the launch: the first whose buffers wgpu refuses.
            cache.clear();
            let culprit = launches.iter().find(|l| l.buffers.iter().any(|b| b.offset + b.bytes.next_multiple_of(4) > b.buffer.size()));
            let kernel = culprit.map_or_else(|| "one of this step's kernels".to_string(), |l| l.kernel.name.clone());
            return Err(GpuError::Launch { kernel, message: format!("wgpu refused its buffers: {e}") });
        }
        Ok(Prepared { params, arena_id: arena.id, dispatches })
    }

    /// Writes the prepared parameters and records the dispatches into one
    /// submission.
    fn encode(&self, prepared: &Prepared, arena: &Option<GpuBuffer>) -> Result<(), GpuError> {
        let arena = arena.as_ref().expect("prepared against this arena");
        if !prepared.params.is_empty() {
            self.queue.write_buffer(&arena.buffer, 0, &prepared.params);
        }
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let memory = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
            for (pipeline, group, (x, y)) in &prepared.dispatches {
                pass.set_pipeline(&pipeline.pipeline);
                pass.set_bind_group(0, group, &[]);
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
    fn settings(&self) -> &GpuSettings {
        &self.settings
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
    /// A queue write is ordered after everything submitted before it.
    fn upload_reusing(&self, previous: Option<&GpuBuffer>, bytes: &[u8]) -> Result<GpuBuffer, GpuError> {
        match previous {
            Some(b) if b.bytes == bytes.len() as u64 && b.offset == 0 && !bytes.is_empty() => {
                let mut padded = bytes.to_vec();
                padded.resize(bytes.len().next_multiple_of(4), 0);
                self.queue.write_buffer(&b.buffer, 0, &padded);
                Ok(b.clone())
            }
            _ => Ok(WgpuDevice::upload(self, bytes)),
        }
    }
    fn bindings_built(&self) -> usize {
        BIND_GROUPS_BUILT_HERE.with(|n| n.get())
    }
    fn same_buffer(&self, a: &GpuBuffer, b: &GpuBuffer) -> bool {
        (a.id, a.offset, a.bytes) == (b.id, b.offset, b.bytes)
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
    fn wait(&self) -> Result<(), GpuError> {
        self.device.poll(wgpu::PollType::wait_indefinitely()).map(|_| ()).map_err(|e| GpuError::Device { backend: "wgpu", message: e.to_string() })
    }
    fn run_prepared(&self, launches: &[Launch<'_, GpuBuffer>], prepared: &mut Option<Box<dyn std::any::Any + Send + Sync>>) -> Result<(), GpuError> {
        WgpuDevice::run_prepared(self, launches, prepared)
    }
    fn rerun(&self, prepared: &(dyn std::any::Any + Send + Sync)) -> Result<bool, GpuError> {
        let arena = self.params_arena.lock().expect("params arena");
        match prepared.downcast_ref::<Prepared>() {
            Some(p) if arena.as_ref().map(|a| a.id) == Some(p.arena_id) => self.encode(p, &arena).map(|()| true),
            _ => Ok(false),
        }
    }
    fn read(&self, buf: &GpuBuffer) -> Result<Vec<u8>, GpuError> {
        WgpuDevice::read(self, buf)
    }
}
