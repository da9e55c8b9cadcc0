//! graphc as a library (the `graphc-runtime` crate, re-exported): compile a
//! checkpoint (or load a plan), open a session, prefill, decode, sample.
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

// The runtime is its own crate (`runtime/`); `graphc` is it plus the command.
pub use graphc_runtime::*;
pub use graphc_runtime::{batcher, conversation, error, model, sampling, session};

/// The README's library example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExample;

/// The full library tour (`docs/library.md`), compiled the same way.
#[cfg(doctest)]
#[doc = include_str!("../../docs/library.md")]
pub struct LibraryGuide;
