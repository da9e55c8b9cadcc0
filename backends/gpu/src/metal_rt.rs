//! The Metal side. Kernels are MSL from naga (`emit::msl`); the host
//! (`metal_rt/host.rs`, on `objc2-metal`) is built on macOS, and on Linux
//! only type-checked (`tools/metal-typecheck`: `--cfg
//! graphc_metal_typecheck`, never linked or run). It has never run on a
//! Mac, so the path is off unless `GpuSettings::metal` (`GRAPHC_METAL=1`); everywhere but macOS
//! this module says "Metal needs macOS".

use crate::{GpuError, GpuSettings};
use graphc_backends::WeightSource;
use graphc_ir::Graph;

#[cfg(any(target_os = "macos", graphc_metal_typecheck))]
mod host;
#[cfg(any(target_os = "macos", graphc_metal_typecheck))]
pub use host::{MetalBuffer, MetalDevice};

/// Whether a Metal device may be opened here: the settings enable it and
/// this is macOS (whether the system has a device, `MetalDevice::new` says).
pub fn device_check(settings: &GpuSettings) -> Result<(), GpuError> {
    if !settings.metal {
        return Err(GpuError::NotEnabled { backend: "metal", flag: "GRAPHC_METAL" });
    }
    if cfg!(target_os = "macos") {
        Ok(())
    } else {
        Err(GpuError::NoDevice { backend: "metal", reason: "Metal needs macOS".into() })
    }
}

/// `graph` on the default Metal device, its weights uploaded.
pub fn open(graph: &Graph, weights: &dyn WeightSource, settings: &GpuSettings) -> Result<Box<dyn crate::exec::DeviceGraph>, GpuError> {
    #[cfg(any(target_os = "macos", graphc_metal_typecheck))]
    {
        let device = std::sync::Arc::new(MetalDevice::new(settings)?);
        Ok(Box::new(crate::exec::GpuGraph::new(device, graph, weights)?))
    }
    #[cfg(not(any(target_os = "macos", graphc_metal_typecheck)))]
    {
        let _ = (graph, weights);
        device_check(settings)?;
        Err(GpuError::NoDevice { backend: "metal", reason: "Metal needs macOS".into() })
    }
}
