//! graphc's passes. A pass is one file whose top comment states its rewrite,
//! when it is legal and what it counts; the manager runs them in order,
//! skips the ones switched off by name, re-verifies the graph after each, and
//! records how many rewrites each performed.

// No `unsafe` here: it is confined to named modules (SIMD, the pool, mmap).
#![forbid(unsafe_code)]

pub mod dead_code;
pub mod fuse_glu;
pub mod fuse_norm_rope;
pub mod hoist_sync;
pub mod kv_alias;
pub mod kv_append;
pub mod manager;
pub mod window_cache;

pub use manager::{PassManager, PassReport};
