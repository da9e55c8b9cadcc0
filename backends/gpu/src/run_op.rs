//! Running one op by itself on a device: what the parity checks run every
//! kernel class through (the graph executor keeps buffers resident instead).

use crate::call::{Arg, ArgInfo};
use crate::device::{bind_args, call_buffers, op_scratch, tensor_bytes, Device, Launch, OpInput};
use crate::lower::lower;
use crate::GpuError;
use graphc_backends::Tensor;

pub trait RunOp: Device + Sized {
    /// Runs one op: uploads its inputs, launches its kernel(s), reads the
    /// result back. (What the parity checks run every kernel class
    /// through; the graph executor keeps buffers resident instead.)
    fn run_op(&self, op: &graphc_ir::Op, inputs: &[OpInput<'_>]) -> Result<Tensor, GpuError> {
        let infos: Vec<ArgInfo> = inputs.iter().map(|i| i.info()).collect();
        let calls = lower(op, &infos, self.target(), self.binding_limits())?;
        for c in &calls {
            crate::cuda_rt::record(&c.kernel, self.settings())?;
        }
        if let graphc_ir::Op::KvAppend { axis, window, .. } = op {
            let lengths = match inputs[2] {
                OpInput::Tensor(t) => t.as_i32().unwrap_or_default(),
                OpInput::Weight(_) => &[],
            };
            crate::lower::check_append(infos[0].shape[*axis], infos[1].shape[*axis], *window, lengths)?;
        }
        let uploaded: Vec<Self::Buffer> = inputs
            .iter()
            .map(|i| match i {
                OpInput::Tensor(t) => self.upload(tensor_bytes(t)),
                OpInput::Weight(w) => self.upload(w.bytes),
            })
            .collect::<Result<_, _>>()?;
        let out_shape = calls[0].out_shape.clone();
        let result = match calls[0].args.iter().find_map(|a| if let Arg::InPlace(i) = a { Some(*i) } else { None }) {
            Some(i) => uploaded[i].clone(),
            None => self.zeros(out_shape.iter().product::<usize>() as u64 * 4)?,
        };
        let scratch = op_scratch(self, &calls)?;
        let bound: Vec<Vec<Self::Buffer>> = calls
            .iter()
            .map(|c| Ok(bind_args(self, &c.args, &uploaded, &result, &[], &call_buffers(self, &c.args, scratch.as_ref())?)))
            .collect::<Result<_, GpuError>>()?;
        let launches: Vec<Launch<'_, Self::Buffer>> = calls
            .iter()
            .zip(&bound)
            .map(|(c, b)| Launch { kernel: &c.kernel, key: c.kernel.hash(), buffers: b.iter().collect(), params: c.params.clone(), groups: c.groups })
            .collect();
        self.run(&launches)?;
        Ok(Tensor::f32(out_shape, self.read_f32(&result)?))
    }
}

impl<D: Device> RunOp for D {}
