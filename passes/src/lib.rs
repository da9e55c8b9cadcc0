//! graphc's passes. A pass is one file whose top comment states its rewrite,
//! when it is legal and what it counts; fusions are rules (`rules/`, on an
//! e-graph: `fuse.rs`, `egraph.rs`). The manager runs the passes in order,
//! skips the ones switched off by name, re-verifies the graph after each, and
//! records how many rewrites each performed.

// No `unsafe` here: it is confined to named modules (SIMD, the pool, mmap).
#![forbid(unsafe_code)]

pub mod attention_head;
pub mod attention_project;
pub mod cost;
pub mod dead_code;
pub mod egraph;
pub mod elementwise_chain;
pub mod fuse;
pub mod hoist_sync;
pub mod kv_alias;
pub mod kv_append;
pub mod manager;
pub mod moe_dispatch;
pub mod norm_rope_attention;
pub mod pass;
pub mod reach;
pub mod residual_norm;
pub mod results;
pub mod rules;
pub mod window_cache;

pub use cost::CostModel;
pub use manager::{PassManager, PassReport};
pub use pass::{Outcome, Pass};
