//! graphc's backends. `cpu::reference` is the oracle: a direct, readable
//! executor of any verified graph that every later backend and pass is
//! checked against.

pub mod cpu;
pub mod tensor;

pub use tensor::{Tensor, WeightRef, WeightSource};
