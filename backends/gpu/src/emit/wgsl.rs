//! WGSL spelling of the kernel IR. Buffers bind to group 0 in declaration
//! order; the scalar parameters are one uniform struct bound after them.

use super::{body, float_digits, Dialect};
use crate::kir::{BinOp, Builtin, Func, Kernel, Ty, ROUNDING_ONE};
use std::fmt::Write;

struct Wgsl;

impl Dialect for Wgsl {
    fn ty(&self, ty: Ty) -> &'static str {
        match ty {
            Ty::F32 => "f32",
            Ty::I32 => "i32",
            Ty::U32 => "u32",
            Ty::Bool => "bool",
        }
    }
    fn f32_lit(&self, v: f32) -> String {
        if !v.is_finite() {
            // WGSL has no literal for infinities or NaN.
            return format!("bitcast<f32>({}u)", v.to_bits());
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
            format!("({v}i)")
        } else {
            format!("{v}i")
        }
    }
    fn u32_lit(&self, v: u32) -> String {
        format!("{v}u")
    }
    fn builtin(&self, b: Builtin, axis: u8) -> String {
        let axis = ["x", "y", "z"][axis as usize];
        match b {
            Builtin::LocalId => format!("lid.{axis}"),
            Builtin::GroupId => format!("wid.{axis}"),
            Builtin::NumGroups => format!("nwg.{axis}"),
        }
    }
    fn param(&self, name: &str) -> String {
        format!("params.{name}")
    }
    fn func(&self, f: Func, args: &[String]) -> String {
        let name = match f {
            Func::Exp => "exp",
            Func::Log => "log",
            Func::Sqrt => "sqrt",
            Func::InvSqrt => "inverseSqrt",
            Func::Tanh => "tanh",
            Func::Sin => "sin",
            Func::Cos => "cos",
            Func::Abs => "abs",
            Func::Pow => "pow",
            Func::HalfToF32 => return format!("unpack2x16float({}).x", args[0]),
            Func::BitsToF32 => return format!("bitcast<f32>({})", args[0]),
            // WGSL has no non-contracting multiply: a rounded op's operands
            // and value pass through the barrier (see `Func::Stored`).
            Func::MulRounded => return stored(&format!("({} * {})", args[0], args[1])),
            Func::AddRounded => return stored(&format!("({} + {})", stored(&args[0]), stored(&args[1]))),
            Func::SubRounded => return stored(&format!("({} - {})", stored(&args[0]), stored(&args[1]))),
            Func::Stored => return stored(&args[0]),
        };
        format!("{name}({})", args.join(", "))
    }
    fn min_max(&self, op: BinOp, _ty: Ty, a: &str, b: &str) -> String {
        let name = if op == BinOp::Min { "min" } else { "max" };
        format!("{name}({a}, {b})")
    }
    fn cast(&self, ty: Ty, a: &str) -> String {
        format!("{}({a})", self.ty(ty))
    }
    fn select(&self, c: &str, a: &str, b: &str) -> String {
        format!("select({b}, {a}, {c})")
    }
    fn declare(&self, name: &str, ty: Ty, value: &str) -> String {
        format!("var {name}: {} = {value};", self.ty(ty))
    }
    fn barrier(&self) -> &'static str {
        "workgroupBarrier();"
    }
}

/// The kernel as a WGSL module with one compute entry point named after it.
/// Call after `Kernel::check` (`emit::emit` does).
pub fn emit(k: &Kernel) -> String {
    let mut out = format!("// graphc kernel `{}` (generated from the kernel IR; do not edit)\n\n", k.name);
    for (binding, b) in k.buffers.iter().enumerate() {
        let access = if b.writable { "read_write" } else { "read" };
        let _ = writeln!(out, "@group(0) @binding({binding}) var<storage, {access}> {}: array<{}>;", b.name, Wgsl.ty(b.elem));
    }
    if !k.params.is_empty() {
        out.push_str("\nstruct Params {\n");
        for (name, ty) in &k.params {
            let _ = writeln!(out, "    {name}: {},", Wgsl.ty(*ty));
        }
        out.push_str("}\n");
        let _ = writeln!(out, "@group(0) @binding({}) var<uniform> params: Params;", k.buffers.len());
    }
    for s in &k.shared {
        let _ = writeln!(out, "var<workgroup> {}: array<{}, {}>;", s.name, Wgsl.ty(s.elem), s.len);
    }
    let _ = write!(
        out,
        "\n@compute @workgroup_size({})\nfn {}(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n",
        k.workgroup_size, k.name
    );
    out.push_str(&body(k, &Wgsl));
    out.push_str("}\n");
    out
}

/// `x` through `Func::Stored`'s barrier: its bits xor a zero read from the
/// params (`bits(1.0) ^ bits(ROUNDING_ONE)`).
fn stored(x: &str) -> String {
    format!("bitcast<f32>(bitcast<u32>({x}) ^ (bitcast<u32>(params.{ROUNDING_ONE}) ^ 0x3f800000u))")
}
