//! graphc as a library: compile a checkpoint (or load a plan), open a
//! session, prefill, decode, sample.
//!
//! ```no_run
//! use graphc::{CompileOptions, Model, SessionOptions, Sampling};
//! let model = Model::compile("SmolLM2-135M-Instruct.Q4_1.gguf".as_ref(), &CompileOptions::default(), None)?;
//! let mut session = model.session(&SessionOptions::default())?;
//! let prompt = model.encode("The capital of France is")?;
//! let out = session.generate(&prompt, 16, &Sampling::greedy(), |_| {})?;
//! println!("{}", model.decode(&out.tokens)?);
//! // Three sequences at different lengths, stepped together.
//! let mut batch = model.batch_session(3, &SessionOptions::default())?;
//! let first = batch.prefill_rows(&[&prompt[..], &prompt[..2], &prompt[..4]])?;
//! let next: Vec<u32> = first.iter().map(|l| graphc::sampling::argmax(l)).collect();
//! let _logits = batch.decode_rows(&next)?;
//! # Ok::<(), graphc::Error>(())
//! ```

// No `unsafe` here: it is confined to named modules (SIMD, the pool, mmap).
#![forbid(unsafe_code)]

pub mod conversation;
pub mod error;
pub mod model;
pub mod sampling;
pub mod session;

pub use conversation::{Conversation, Turn};
pub use error::Error;
pub use model::{CompileOptions, Model};
pub use sampling::Sampling;
pub use graphc_frontends::chat::{ChatOptions, Message};
pub use graphc_frontends::detokenize::{Detokenizer, Emitted};
pub use session::{Finish, Generation, GoOn, Kernels, Session, SessionOptions};

/// The process's peak resident memory (`VmHWM`), where the OS reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The README's library example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExample;
