//! graphc's GPU codegen. Every fused kernel is written once in the kernel
//! IR (`kir`, `kernels`) and emitted per target (`emit`): WGSL, run here on
//! wgpu (`wgpu_rt`); CUDA C, compiled by NVRTC (`cuda_rt`); MSL, translated
//! by naga from the validated WGSL module.

pub mod emit;
pub mod kernels;
pub mod kir;

pub use emit::{emit, EmitError, Target};
