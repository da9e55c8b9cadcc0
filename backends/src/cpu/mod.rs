//! CPU backends: the reference executor (the oracle) and the fast one
//! (SIMD, multithreaded, fused), sharing one run loop.

pub mod eval;
pub mod exec;
pub mod fast;
pub mod kernels;
pub mod moe;
pub mod parts;
#[allow(unsafe_code)] // a region's closure borrows the caller's stack (see the module)
pub mod pool;
pub mod reference;
#[allow(unsafe_code)] // target-feature intrinsics
pub mod simd;
