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

pub mod error;
pub mod model;
pub mod sampling;
pub mod session;

pub use error::Error;
pub use model::{CompileOptions, Model};
pub use sampling::Sampling;
pub use session::{Generation, Session, SessionOptions};
