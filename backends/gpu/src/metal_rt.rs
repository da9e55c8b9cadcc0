//! The Metal host side. Kernels are MSL from naga (`emit::msl`); running
//! them needs macOS, and no Metal run has passed a parity check yet, so the
//! path is also off unless `GRAPHC_METAL=1`. Everywhere else this is a stub
//! that says so.

use crate::GpuError;

/// Whether `GRAPHC_METAL` enables the Metal path (`1` on, `0` or unset off).
pub fn enabled() -> Result<bool, GpuError> {
    crate::flag("GRAPHC_METAL")
}

/// A Metal device can be used here: never on this build (no host side is
/// written yet); on other systems, "Metal needs macOS".
pub fn device_check() -> Result<(), GpuError> {
    if !enabled()? {
        return Err(GpuError::NotEnabled { backend: "metal", flag: "GRAPHC_METAL" });
    }
    if cfg!(target_os = "macos") {
        Err(GpuError::NoDevice { backend: "metal", reason: "the Metal host runtime is not written yet (MSL is emitted and snapshotted)".into() })
    } else {
        Err(GpuError::NoDevice { backend: "metal", reason: "Metal needs macOS".into() })
    }
}
