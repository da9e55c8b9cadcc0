//! graphc's runtime: compile a checkpoint (or load a plan) into a `Model`,
//! open `Session`s on it (one row or a batch of rows at different lengths),
//! prefill, decode, sample, generate, and hold a `Conversation`. The
//! `graphc` command and any server are built on it.

// No `unsafe` here: it is confined to named modules (SIMD, the pool, mmap).
#![forbid(unsafe_code)]

pub mod batcher;
pub mod conversation;
pub mod error;
pub mod json_mode;
pub mod json_pattern;
pub mod json_schema;
pub mod model;
pub mod sampling;
pub mod session;
pub mod vocabulary;

pub use batcher::{Batcher, BatcherOptions, Event, FinishReason, Limits, Request};
pub use conversation::{Conversation, Turn};
pub use error::Error;
pub use graphc_frontends::chat::{ChatOptions, FunctionCall, Message, ToolCall};
pub use graphc_frontends::detokenize::{Detokenizer, Emitted};
pub use graphc_frontends::{reasoning, tool_calls};
pub use graphc_gpu::GpuSettings;
pub use model::{CompileOptions, Model};
pub use sampling::{Format, Penalties, Sampling};
pub use session::{Finish, Generation, GoOn, Kernels, Session, SessionOptions};

/// The process's peak resident memory (`VmHWM`), where the OS reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
