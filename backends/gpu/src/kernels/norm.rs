//! RMSNorm and LayerNorm over the last axis: one workgroup per row, the
//! row's sums reduced in workgroup memory.

use super::WORKGROUP;
use crate::kir::*;
use graphc_ir::NormKind;

/// `y = x / sqrt(mean(x²) + eps) * w` (Rms) or
/// `(x - mean) / sqrt(var + eps) * w + bias` (Layer, biased variance), rows
/// of `d`. Buffers `x, w, [bias,] y`; params `rows, d, eps`.
/// Grid: `rows` groups.
pub fn norm(kind: NormKind) -> Kernel {
    let layer = kind == NormKind::Layer;
    let mut k = Kernel::new(if layer { "layer_norm" } else { "rms_norm" }, WORKGROUP).input("x", Ty::F32).input("w", Ty::F32);
    if layer {
        k = k.input("bias", Ty::F32);
    }
    k = k.output("y", Ty::F32).param("rows", Ty::U32).param("d", Ty::U32).param("eps", Ty::F32).shared("red", Ty::F32, WORKGROUP);
    let x_at = |c: Expr| load("x", var("base") + c);
    let strided = |var_name: &str, body: Vec<Stmt>| for_(var_name, local_id(), param("d"), u(WORKGROUP), body);
    let mut row = vec![let_("base", Ty::U32, var("row") * param("d")), let_("mean", Ty::F32, f(0.0))];
    if layer {
        row.push(let_("sum", Ty::F32, f(0.0)));
        row.push(strided("c", vec![assign("sum", var("sum") + x_at(var("c")))]));
        row.extend(workgroup_reduce("red", WORKGROUP, var("sum"), BinOp::Add));
        row.push(assign("mean", load_shared("red", u(0)) / param("d").cast(Ty::F32)));
    }
    row.push(let_("sq", Ty::F32, f(0.0)));
    row.push(strided("c", vec![let_("dx", Ty::F32, x_at(var("c")) - var("mean")), assign("sq", var("sq") + var("dx") * var("dx"))]));
    row.extend(workgroup_reduce("red", WORKGROUP, var("sq"), BinOp::Add));
    row.push(let_("r", Ty::F32, f(1.0) / call(Func::Sqrt, vec![load_shared("red", u(0)) / param("d").cast(Ty::F32) + param("eps")])));
    let value = if layer {
        (x_at(var("c")) - var("mean")) * var("r") * load("w", var("c")) + load("bias", var("c"))
    } else {
        load("w", var("c")) * (x_at(var("c")) * var("r"))
    };
    row.push(strided("c", vec![store("y", var("base") + var("c"), value)]));
    k.body(vec![let_("row", Ty::U32, group_index()), if_(var("row").lt(param("rows")), row)])
}
