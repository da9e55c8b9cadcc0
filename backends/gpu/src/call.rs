//! A kernel call, as the lowering makes it and every runtime launches it:
//! the kernel, where each argument comes from, its parameter values, its
//! grid, and what a device's bindings allow.

use crate::kir::Kernel;
use graphc_ir::DType;

/// Where a kernel argument comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// The op's input `i`.
    Input(usize),
    /// Bytes `offset .. offset + bytes` of input `input` (a weight too large
    /// for one binding, split by rows).
    InputRange { input: usize, offset: u64, bytes: u64 },
    /// The op's input `i`, written in place; it is also the op's result.
    InPlace(usize),
    /// A constant the host computes once per op (RoPE's `inv_freq`).
    Constant(Vec<f32>),
    /// A device buffer of this many bytes that the op's calls share and
    /// nothing else reads: written by one call, read by a later one (split
    /// attention's blocks). It lives as long as the op's calls.
    Scratch(u64),
    /// The op's result, a fresh f32 buffer (all of an op's calls write
    /// their parts of the same one).
    Output,
    /// A further result of a fused group, of this shape (f32): the `i`-th
    /// `ExtraOutput` of a call is the value of the group's `i`-th
    /// co-produced node (`add_norm`'s residual sum).
    ExtraOutput(Vec<usize>),
    /// A further result of a fused group written in place into input `i`
    /// (the second of two stacked `kv_append`s): in order with the
    /// `ExtraOutput`s, the value of the group's next co-produced node.
    ExtraInPlace(usize),
}

/// One launch of one kernel for (part of) one op.
#[derive(Clone, Debug)]
pub struct KernelCall {
    pub kernel: Kernel,
    pub args: Vec<Arg>,
    pub params: Vec<Value>,
    pub groups: u32,
    /// The result's shape (f32).
    pub out_shape: Vec<usize>,
}

/// What the lowering needs of one input: its storage type and shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgInfo {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

/// A scalar kernel parameter's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    U32(u32),
    I32(i32),
    F32(f32),
}

impl Value {
    pub fn ty(self) -> crate::kir::Ty {
        match self {
            Value::U32(_) => crate::kir::Ty::U32,
            Value::I32(_) => crate::kir::Ty::I32,
            Value::F32(_) => crate::kir::Ty::F32,
        }
    }
    /// The 4 bytes the kernel reads, as a word.
    pub fn bits(self) -> u32 {
        match self {
            Value::U32(v) => v,
            Value::I32(v) => v as u32,
            Value::F32(v) => v.to_bits(),
        }
    }
}

/// What the lowering must respect of a device.
#[derive(Clone, Copy, Debug)]
pub struct BindingLimits {
    /// Largest storage buffer one binding may cover.
    pub max_bytes: u64,
    /// Storage binding offsets are multiples of this.
    pub offset_alignment: u64,
    /// Storage buffers one kernel may bind (a stacked pair over it runs
    /// as its two calls).
    pub max_buffers: u32,
}
