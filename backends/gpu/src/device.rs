//! What a GPU runtime provides, so the graph executor (`exec`) and the
//! one-op runner the parity checks use are written once for every target:
//! buffers (and byte ranges of them), batched launches, read-back.

use crate::call::{Arg, ArgInfo, KernelCall};
pub use crate::call::{BindingLimits, Value};
use crate::kir::Kernel;
use crate::GpuError;
use graphc_backends::{Tensor, WeightRef};

/// One kernel launch: the kernel (and its `Kernel::hash`, computed once
/// by whoever keeps the call), its buffers in binding order, its
/// parameters in declaration order, and the number of workgroups.
pub struct Launch<'a, B> {
    pub kernel: &'a Kernel,
    pub key: u64,
    pub buffers: Vec<&'a B>,
    pub params: Vec<Value>,
    pub groups: u32,
}

impl<B> Launch<'_, B> {
    /// The launch's arguments against its kernel's signature.
    pub fn check(&self) -> Result<(), GpuError> {
        let k = self.kernel;
        let bad = |message: String| GpuError::Launch { kernel: k.name.clone(), message };
        if self.buffers.len() != k.buffers.len() {
            return Err(bad(format!("{} buffers given, the kernel takes {}", self.buffers.len(), k.buffers.len())));
        }
        if self.params.len() != k.params.len() {
            return Err(bad(format!("{} parameters given, the kernel takes {}", self.params.len(), k.params.len())));
        }
        for ((name, ty), v) in k.params.iter().zip(&self.params) {
            if v.ty() != *ty {
                return Err(bad(format!("parameter `{name}` is {ty:?}, given {v:?}")));
            }
        }
        Ok(())
    }
}

/// `(x, y)` grid for `groups` workgroups: at most 65535 along x (every
/// target's limit); the kernels' `group_index` undoes the split.
pub fn grid(groups: u32) -> (u32, u32) {
    let x = groups.clamp(1, 65535);
    (x, groups.div_ceil(x))
}

/// An op's input on the host: an activation or a checkpoint tensor.
#[derive(Clone, Copy, Debug)]
pub enum OpInput<'a> {
    Tensor(&'a Tensor),
    Weight(WeightRef<'a>),
}

impl OpInput<'_> {
    pub fn info(&self) -> ArgInfo {
        match self {
            OpInput::Tensor(t) => ArgInfo { dtype: t.dtype(), shape: t.shape().to_vec() },
            OpInput::Weight(w) => ArgInfo { dtype: w.dtype, shape: w.shape.to_vec() },
        }
    }
}

/// The bytes of a host tensor.
pub fn tensor_bytes(t: &Tensor) -> &[u8] {
    match t {
        Tensor::F32 { data, .. } => bytemuck::cast_slice(data),
        Tensor::I32 { data, .. } => bytemuck::cast_slice(data),
    }
}

pub trait Device {
    type Buffer: Clone;
    /// The backend's name in errors and plans (`wgpu`, `cuda`).
    fn target(&self) -> &'static str;
    /// What the caller told the GPU backends (the PTX to record, ...).
    fn settings(&self) -> &crate::GpuSettings;
    /// The adapter or device as its driver names it.
    fn label(&self) -> String;
    fn upload(&self, bytes: &[u8]) -> Result<Self::Buffer, GpuError>;
    /// `bytes` on the device, written into `previous` (the last step's
    /// buffer for the same input) where the target can order that after
    /// the work that read it and the size matches, else a new upload. A
    /// kept buffer keeps what was built on it (wgpu's bind groups).
    fn upload_reusing(&self, previous: Option<&Self::Buffer>, bytes: &[u8]) -> Result<Self::Buffer, GpuError> {
        let _ = previous;
        self.upload(bytes)
    }
    /// Whether `a` and `b` are the same bytes on the device (one allocation,
    /// one range): what lets the graph executor replay a step's launches.
    /// `false` where the target cannot tell, so nothing is replayed there.
    fn same_buffer(&self, a: &Self::Buffer, b: &Self::Buffer) -> bool {
        let _ = (a, b);
        false
    }
    /// Binding objects the target has built so far on the calling thread
    /// (wgpu's bind groups; 0 where there are none): a decode step in the
    /// steady state builds none. Per thread, because sessions on other
    /// threads may share the device, and a session counts its own.
    fn bindings_built(&self) -> usize {
        0
    }
    fn zeros(&self, bytes: u64) -> Result<Self::Buffer, GpuError>;
    /// Bytes `offset .. offset + bytes` of `buf`, bound on their own.
    fn view(&self, buf: &Self::Buffer, offset: u64, bytes: u64) -> Self::Buffer;
    fn binding_limits(&self) -> BindingLimits;
    /// Runs `launches` in order (one submission where the target has them).
    fn run(&self, launches: &[Launch<'_, Self::Buffer>]) -> Result<(), GpuError>;
    /// Blocks until the work submitted so far has finished (what timing a
    /// launch on its own needs); a target whose `run` already waits keeps
    /// this default.
    fn wait(&self) -> Result<(), GpuError> {
        Ok(())
    }
    /// `run`, keeping in `prepared` what the target built for `launches`
    /// (wgpu), for `rerun` to run them again as they are; the rest only run.
    fn run_prepared(
        &self,
        launches: &[Launch<'_, Self::Buffer>],
        prepared: &mut Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Result<(), GpuError> {
        let _ = prepared;
        self.run(launches)
    }
    /// Runs again what `run_prepared` kept in `prepared`, without the
    /// launches; `false` where that is not possible (nothing kept, or the
    /// target's state it points into changed), and the caller runs them.
    fn rerun(&self, prepared: &(dyn std::any::Any + Send + Sync)) -> Result<bool, GpuError> {
        let _ = prepared;
        Ok(false)
    }
    /// Copies a buffer back (after the work before it).
    fn read(&self, buf: &Self::Buffer) -> Result<Vec<u8>, GpuError>;

    fn read_f32(&self, buf: &Self::Buffer) -> Result<Vec<f32>, GpuError> {
        Ok(self.read(buf)?.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }
}

/// The buffers a call binds, in order: its inputs (or byte ranges of them),
/// the buffers it owns (`call_buffers`: its uploaded constants and its
/// op's scratch), the op's `result`, and a fused group's further results
/// (`extra`, in order).
pub fn bind_args<D: Device>(
    dev: &D,
    args: &[Arg],
    inputs: &[D::Buffer],
    result: &D::Buffer,
    extra: &[D::Buffer],
    owned: &[D::Buffer],
) -> Vec<D::Buffer> {
    let mut owned = owned.iter();
    let mut extra = extra.iter();
    args.iter()
        .map(|a| match a {
            Arg::Input(i) => inputs[*i].clone(),
            Arg::InputRange { input, offset, bytes } => dev.view(&inputs[*input], *offset, *bytes),
            Arg::InPlace(_) | Arg::Output => result.clone(),
            Arg::Constant(_) | Arg::Scratch(_) => owned.next().expect("one owned buffer per constant and scratch (call_buffers)").clone(),
            Arg::ExtraOutput(_) => extra.next().expect("one buffer per further result").clone(),
            Arg::ExtraInPlace(i) => inputs[*i].clone(),
        })
        .collect()
}

/// The buffers a call owns, in argument order: each host constant
/// (`Arg::Constant`: RoPE's frequencies) uploaded, and its op's `scratch`
/// (`op_scratch`) where it names one. The graph executor keeps them with
/// the cached call, so each is made once and its bindings stay the same
/// across steps.
pub fn call_buffers<D: Device>(dev: &D, args: &[Arg], scratch: Option<&D::Buffer>) -> Result<Vec<D::Buffer>, GpuError> {
    args.iter()
        .filter_map(|a| match a {
            Arg::Constant(v) => Some(dev.upload(bytemuck::cast_slice(v))),
            Arg::Scratch(_) => Some(Ok(scratch.expect("an op's scratch is made before its calls' buffers (op_scratch)").clone())),
            _ => None,
        })
        .collect()
}

/// The scratch buffer an op's calls share: as large as the largest any of
/// them names, or none.
pub fn op_scratch<D: Device>(dev: &D, calls: &[KernelCall]) -> Result<Option<D::Buffer>, GpuError> {
    let bytes = calls.iter().flat_map(|c| &c.args).filter_map(|a| if let Arg::Scratch(b) = a { Some(*b) } else { None }).max();
    bytes.map(|b| dev.zeros(b.max(4))).transpose()
}
