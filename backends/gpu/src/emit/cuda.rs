//! CUDA C spelling of the kernel IR: one `extern "C" __global__` function
//! per kernel, buffers as pointers then scalar parameters by value (the
//! order `cuda_rt` launches with). Needs no header, so NVRTC compiles it
//! without a CUDA toolkit's include folder.

use super::{body, float_digits, Dialect};
use crate::kir::{BinOp, Builtin, Func, Kernel, Ty};

struct Cuda;

/// An IEEE half's bits to f32 in one PTX instruction (what `__half2float`
/// does, without `cuda_fp16.h`).
const PRELUDE: &str = "__device__ __forceinline__ float graphc_half_to_float(unsigned int bits) {
    float f;
    unsigned short h = (unsigned short)(bits & 0xffffu);
    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));
    return f;
}
";

impl Dialect for Cuda {
    fn ty(&self, ty: Ty) -> &'static str {
        match ty {
            Ty::F32 => "float",
            Ty::I32 => "int",
            Ty::U32 => "unsigned int",
            Ty::Bool => "bool",
        }
    }
    fn f32_lit(&self, v: f32) -> String {
        if !v.is_finite() {
            return format!("__uint_as_float({}u)", v.to_bits());
        }
        let s = format!("{}f", float_digits(v));
        if v.is_sign_negative() {
            format!("({s})")
        } else {
            s
        }
    }
    fn i32_lit(&self, v: i32) -> String {
        if v < 0 {
            format!("({v})")
        } else {
            v.to_string()
        }
    }
    fn u32_lit(&self, v: u32) -> String {
        format!("{v}u")
    }
    fn builtin(&self, b: Builtin, axis: u8) -> String {
        let axis = ["x", "y", "z"][axis as usize];
        match b {
            Builtin::LocalId => format!("threadIdx.{axis}"),
            Builtin::GroupId => format!("blockIdx.{axis}"),
            Builtin::NumGroups => format!("gridDim.{axis}"),
        }
    }
    fn param(&self, name: &str) -> String {
        name.to_string()
    }
    fn func(&self, f: Func, args: &[String]) -> String {
        let name = match f {
            Func::Exp => "expf",
            Func::Log => "logf",
            Func::Sqrt => "sqrtf",
            Func::InvSqrt => "rsqrtf",
            Func::Tanh => "tanhf",
            Func::Sin => "sinf",
            Func::Cos => "cosf",
            Func::Abs => "fabsf",
            Func::Pow => "powf",
            Func::HalfToF32 => "graphc_half_to_float",
            Func::BitsToF32 => "__uint_as_float",
            Func::MulRounded => "__fmul_rn",
            Func::AddRounded => "__fadd_rn",
            Func::SubRounded => "__fsub_rn",
            // nvcc does not reassociate, and contracts nothing (`--fmad=false`).
            Func::Stored => return format!("({})", args[0]),
        };
        format!("{name}({})", args.join(", "))
    }
    fn min_max(&self, op: BinOp, ty: Ty, a: &str, b: &str) -> String {
        let name = match (op, ty) {
            (BinOp::Min, Ty::F32) => "fminf",
            (BinOp::Max, Ty::F32) => "fmaxf",
            (BinOp::Min, _) => "min",
            _ => "max",
        };
        format!("{name}({a}, {b})")
    }
    fn cast(&self, ty: Ty, a: &str) -> String {
        format!("(({}){a})", self.ty(ty))
    }
    fn select(&self, c: &str, a: &str, b: &str) -> String {
        format!("({c} ? {a} : {b})")
    }
    fn declare(&self, name: &str, ty: Ty, value: &str) -> String {
        format!("{} {name} = {value};", self.ty(ty))
    }
    fn barrier(&self) -> &'static str {
        "__syncthreads();"
    }
}

/// The kernel as a CUDA C translation unit. Call after `Kernel::check`.
pub fn emit(k: &Kernel) -> String {
    let mut args: Vec<String> = k
        .buffers
        .iter()
        .map(|b| {
            let c = if b.writable { "" } else { "const " };
            format!("{c}{}* __restrict__ {}", Cuda.ty(b.elem), b.name)
        })
        .collect();
    args.extend(k.params.iter().map(|(n, t)| format!("{} {n}", Cuda.ty(*t))));
    let mut out = format!("// graphc kernel `{}` (generated from the kernel IR; do not edit)\n\n{PRELUDE}\n", k.name);
    out.push_str(&format!("extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{\n", k.workgroup_size, k.name, args.join(", ")));
    for s in &k.shared {
        out.push_str(&format!("    __shared__ {} {}[{}];\n", Cuda.ty(s.elem), s.name, s.len));
    }
    out.push_str(&body(k, &Cuda));
    out.push_str("}\n");
    out
}
