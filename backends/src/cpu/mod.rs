//! CPU backends: the reference executor (the oracle) and the fast one
//! (SIMD, multithreaded, fused), sharing one run loop.

pub mod exec;
pub mod fast;
pub mod kernels;
pub mod pool;
pub mod reference;
pub mod simd;
