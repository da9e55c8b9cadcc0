//! graphc's backends. `cpu::reference` is the oracle: a direct, readable
//! executor of any verified graph that every later backend and pass is
//! checked against.

// `unsafe` only in the modules that allow it by name, each block with a
// `// SAFETY:` comment (clippy checks).
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cpu;
pub mod fold;
pub mod tensor;

pub use tensor::{Tensor, WeightRef, WeightSource};
