//! graphc's GPU codegen. Every fused kernel is written once in the kernel
//! IR (`kir`, `kernels`) and emitted per target (`emit`): WGSL, run here on
//! wgpu (`wgpu_rt`); CUDA C, compiled by NVRTC (`cuda_rt`); MSL, translated
//! by naga from the validated WGSL module, run by `metal_rt` on macOS.

// `unsafe` only in the modules that allow it by name (cuda_rt's library
// loading and launches, metal_rt's host), each block with a `// SAFETY:`
// comment.
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod call;
pub mod cuda_rt;
pub mod device;
pub mod emit;
pub mod exec;
pub mod fuse;
pub mod kernels;
pub mod kir;
pub mod lower;
pub mod metal_rt;
pub mod open;
pub mod run_op;
pub mod settings;
pub mod stack;
pub mod wgpu_rt;

pub use emit::{emit, EmitError, Target};
pub use settings::GpuSettings;

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(transparent)]
    Emit(#[from] EmitError),
    #[error(transparent)]
    Lower(#[from] lower::LowerError),
    #[error("{backend}: no device: {reason}")]
    NoDevice { backend: &'static str, reason: String },
    #[error("{backend} is off: it has not passed its parity run on real hardware; set {flag}=1 to enable it")]
    NotEnabled { backend: &'static str, flag: &'static str },
    #[error("{backend} is off on {device}: it has passed its parity run only on {verified}; set {flag}=1 to enable it")]
    Unverified { backend: &'static str, device: String, verified: String, flag: &'static str },
    #[error("{backend} is off: {flag}=0")]
    SwitchedOff { backend: &'static str, flag: &'static str },
    #[error("kernel `{kernel}` on {target}: {message}")]
    Kernel { kernel: String, target: &'static str, message: String },
    #[error("launch of kernel `{kernel}`: {message}")]
    Launch { kernel: String, message: String },
    #[error("{backend} device: {message}")]
    Device { backend: &'static str, message: String },
    #[error("{name}={value:?}: flags are read by value, 1 (on) or 0 (off)")]
    BadFlag { name: &'static str, value: String },
}
