//! The Metal side. Kernels are MSL from naga (`emit::msl`); the host
//! (`metal_rt/host.rs`, on `objc2-metal`) is built on macOS, and on Linux
//! only type-checked (`tools/metal-typecheck`: `--cfg
//! graphc_metal_typecheck`, never linked or run). It has never run on a
//! Mac, so the path is off unless `GRAPHC_METAL=1`; everywhere but macOS
//! this module says "Metal needs macOS".

use crate::GpuError;
use graphc_backends::WeightSource;
use graphc_ir::Graph;

#[cfg(any(target_os = "macos", graphc_metal_typecheck))]
mod host;
#[cfg(any(target_os = "macos", graphc_metal_typecheck))]
pub use host::{MetalBuffer, MetalDevice};

/// Whether `GRAPHC_METAL` enables the Metal path (`1` on, `0` or unset off).
pub fn enabled() -> Result<bool, GpuError> {
    crate::flag("GRAPHC_METAL")
}

/// Whether a Metal device may be opened here: the flag is on and this is
/// macOS (whether the system has a device, `MetalDevice::new` says).
pub fn device_check() -> Result<(), GpuError> {
    if !enabled()? {
        return Err(GpuError::NotEnabled { backend: "metal", flag: "GRAPHC_METAL" });
    }
    if cfg!(target_os = "macos") {
        Ok(())
    } else {
        Err(GpuError::NoDevice { backend: "metal", reason: "Metal needs macOS".into() })
    }
}

/// `graph` on the default Metal device, its weights uploaded.
pub fn open(graph: &Graph, weights: &dyn WeightSource) -> Result<Box<dyn crate::exec::DeviceGraph>, GpuError> {
    #[cfg(any(target_os = "macos", graphc_metal_typecheck))]
    {
        let device = std::sync::Arc::new(MetalDevice::new()?);
        Ok(Box::new(crate::exec::GpuGraph::new(device, graph, weights)?))
    }
    #[cfg(not(any(target_os = "macos", graphc_metal_typecheck)))]
    {
        let _ = (graph, weights);
        device_check()?;
        Err(GpuError::NoDevice { backend: "metal", reason: "Metal needs macOS".into() })
    }
}
