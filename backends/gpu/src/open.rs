//! Opening a device for a graph: the runtime by name, and the process's
//! one shared wgpu device.

use crate::device::Device;
use crate::exec::{DeviceGraph, GpuGraph};
use crate::GpuError;
use graphc_backends::WeightSource;
use graphc_ir::Graph;
use std::sync::Arc;

/// Opens `device` (`wgpu`, `cuda` or `metal`) and uploads `graph`'s weights to it.
pub fn open(device: &str, graph: &Graph, weights: &dyn WeightSource, settings: &crate::GpuSettings) -> Result<Box<dyn DeviceGraph>, GpuError> {
    match device {
        "wgpu" => Ok(Box::new(GpuGraph::new(shared_wgpu_device(settings)?, graph, weights)?)),
        "cuda" => Ok(Box::new(GpuGraph::new(Arc::new(crate::cuda_rt::CudaDevice::new(settings)?), graph, weights)?)),
        "metal" => crate::metal_rt::open(graph, weights, settings),
        other => Err(GpuError::NoDevice { backend: "gpu", reason: format!("`{other}` is not a GPU device graphc runs graphs on") }),
    }
}

/// The process's one wgpu device, made by the first session that needs it
/// and kept: every later session shares it (and its compiled pipelines).
/// An instance and device a session cost a driver start each, and NVIDIA's
/// Vulkan driver (on an H200) refused to make more after about a dozen in
/// one process: "vulkan drivers/libraries could not be loaded" half-way
/// through the family fixtures. CUDA needs no such cache (cudarc's contexts
/// are the device's one primary context). The first session's settings
/// make it; a later session with other settings gets a device of its own.
fn shared_wgpu_device(settings: &crate::GpuSettings) -> Result<Arc<crate::wgpu_rt::WgpuDevice>, GpuError> {
    static SHARED: std::sync::Mutex<Option<Arc<crate::wgpu_rt::WgpuDevice>>> = std::sync::Mutex::new(None);
    let mut shared = SHARED.lock().expect("shared wgpu device");
    if let Some(device) = &*shared {
        if device.settings() == settings {
            return Ok(device.clone());
        }
        return Ok(Arc::new(crate::wgpu_rt::WgpuDevice::new(settings)?));
    }
    let device = Arc::new(crate::wgpu_rt::WgpuDevice::new(settings)?);
    *shared = Some(device.clone());
    Ok(device)
}
