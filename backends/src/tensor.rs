//! Host tensors the executors read and write, and weight views bound to
//! checkpoint bytes (never copied).

use graphc_ir::DType;

#[derive(Clone, Debug, PartialEq)]
pub enum Tensor {
    F32 { shape: Vec<usize>, data: Vec<f32> },
    I32 { shape: Vec<usize>, data: Vec<i32> },
}

impl Tensor {
    pub fn f32(shape: Vec<usize>, data: Vec<f32>) -> Tensor {
        assert_eq!(shape.iter().product::<usize>(), data.len(), "shape {shape:?} vs {} elements", data.len());
        Tensor::F32 { shape, data }
    }
    pub fn i32(shape: Vec<usize>, data: Vec<i32>) -> Tensor {
        assert_eq!(shape.iter().product::<usize>(), data.len(), "shape {shape:?} vs {} elements", data.len());
        Tensor::I32 { shape, data }
    }
    pub fn shape(&self) -> &[usize] {
        match self {
            Tensor::F32 { shape, .. } | Tensor::I32 { shape, .. } => shape,
        }
    }
    pub fn dtype(&self) -> DType {
        match self {
            Tensor::F32 { .. } => DType::F32,
            Tensor::I32 { .. } => DType::I32,
        }
    }
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            Tensor::F32 { data, .. } => Some(data),
            _ => None,
        }
    }
    pub fn as_i32(&self) -> Option<&[i32]> {
        match self {
            Tensor::I32 { data, .. } => Some(data),
            _ => None,
        }
    }
    pub fn numel(&self) -> usize {
        self.shape().iter().product()
    }
    pub fn bytes(&self) -> usize {
        self.numel() * 4
    }
}

/// A checkpoint tensor: storage type, row-major shape, and its bytes.
#[derive(Clone, Copy, Debug)]
pub struct WeightRef<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

impl<'a> WeightRef<'a> {
    /// Bytes of one row of a 2-D weight.
    pub fn row_bytes(&self) -> usize {
        self.bytes.len() / self.shape[0].max(1)
    }
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.bytes[r * rb..(r + 1) * rb]
    }
}

/// Where an executor finds `Weight { name }`'s bytes.
pub trait WeightSource: Sync {
    fn weight(&self, name: &str) -> Option<WeightRef<'_>>;
}
