//! graphc's IR: dtypes (incl. GGUF block types), symbolic shapes, the op set,
//! the graph, its verifier and text form, and the serialized plan.

// No `unsafe` here: it is confined to named modules (SIMD, the pool, mmap).
#![forbid(unsafe_code)]

pub mod dot;
pub mod dtype;
pub mod graph;
pub mod io;
pub mod op;
pub mod plan;
pub mod quant;
pub mod quant_grids;
pub mod shape;
pub mod signature;
pub mod text;
pub mod verify;

pub use dtype::DType;
pub use graph::{Graph, Node, NodeId};
pub use op::{BinaryOp, ChainExpr, NormKind, Op, OpKind, ReduceOp, RopeScaling, RopeStyle, UnaryOp};
pub use shape::{Dim, Shape, TensorType};
pub use verify::{verify, VerifyError};
