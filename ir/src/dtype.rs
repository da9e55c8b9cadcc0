//! Element and storage types. Quantized GGUF block types are storage types:
//! a `Weight` may have one, and a backend dequantizes it inside the kernel
//! that reads it. Activations are always one of the plain types.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    I32,
    U32,
    Q4_0,
    Q4_1,
    Q5_0,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
    Q5_1,
    Q2K,
    Q3K,
    IQ4NL,
    IQ4XS,
    IQ2XXS,
    IQ2XS,
    IQ2S,
    IQ3XXS,
    IQ3S,
    IQ1S,
    IQ1M,
    MXFP4,
}

impl DType {
    pub const ALL: [DType; 25] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::U32,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q8_0,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::Q5_1,
        DType::Q2K,
        DType::Q3K,
        DType::IQ4NL,
        DType::IQ4XS,
        DType::IQ2XXS,
        DType::IQ2XS,
        DType::IQ2S,
        DType::IQ3XXS,
        DType::IQ3S,
        DType::IQ1S,
        DType::IQ1M,
        DType::MXFP4,
    ];

    /// Elements per block (1 for plain types).
    pub fn block_elems(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 | DType::I32 | DType::U32 => 1,
            DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0 | DType::IQ4NL | DType::MXFP4 => 32,
            DType::Q2K | DType::Q3K | DType::Q4K | DType::Q5K | DType::Q6K | DType::IQ4XS => 256,
            DType::IQ2XXS | DType::IQ2XS | DType::IQ2S | DType::IQ3XXS | DType::IQ3S | DType::IQ1S | DType::IQ1M => 256,
        }
    }

    /// Elements of a row that share one scale (and min): a block, or a
    /// k-quant's sub-block (1 for plain types). The smallest run of
    /// columns a kernel can decode on its own.
    pub fn scale_group_elems(self) -> usize {
        match self {
            DType::Q6K | DType::Q2K | DType::Q3K | DType::IQ2XS | DType::IQ2S | DType::IQ1M => 16,
            DType::Q4K | DType::Q5K | DType::IQ4XS | DType::IQ2XXS | DType::IQ3XXS | DType::IQ3S | DType::IQ1S => 32,
            other => other.block_elems(),
        }
    }

    /// Bytes per block (the element size for plain types).
    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q8_0 => 34,
            DType::Q4K => 144,
            DType::Q5K => 176,
            DType::Q6K => 210,
            DType::Q5_1 => 24,
            DType::Q2K => 84,
            DType::Q3K => 110,
            DType::IQ4NL => 18,
            DType::IQ4XS => 136,
            DType::IQ2XXS => 66,
            DType::IQ2XS => 74,
            DType::IQ2S => 82,
            DType::IQ3XXS => 98,
            DType::IQ3S => 110,
            DType::IQ1S => 50,
            DType::IQ1M => 56,
            DType::MXFP4 => 17,
        }
    }

    pub fn is_quantized(self) -> bool {
        self.block_elems() > 1
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::U32)
    }

    /// Bytes for `n_elems` elements, or `None` when `n_elems` is not a whole
    /// number of blocks or the product overflows.
    pub fn storage_bytes(self, n_elems: u64) -> Option<u64> {
        let be = self.block_elems() as u64;
        if !n_elems.is_multiple_of(be) {
            return None;
        }
        (n_elems / be).checked_mul(self.block_bytes() as u64)
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q8_0 => "q8_0",
            DType::Q4K => "q4_k",
            DType::Q5K => "q5_k",
            DType::Q6K => "q6_k",
            DType::Q5_1 => "q5_1",
            DType::Q2K => "q2_k",
            DType::Q3K => "q3_k",
            DType::IQ4NL => "iq4_nl",
            DType::IQ4XS => "iq4_xs",
            DType::IQ2XXS => "iq2_xxs",
            DType::IQ2XS => "iq2_xs",
            DType::IQ2S => "iq2_s",
            DType::IQ3XXS => "iq3_xxs",
            DType::IQ3S => "iq3_s",
            DType::IQ1S => "iq1_s",
            DType::IQ1M => "iq1_m",
            DType::MXFP4 => "mxfp4",
        }
    }

    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
