//! CPU backends.

pub mod kernels;
pub mod reference;
