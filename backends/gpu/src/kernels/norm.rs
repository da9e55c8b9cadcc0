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
    norm_kernel(kind, false)
}

/// The residual add and the norm of its sum in one launch: `h = a + b`
/// written out (the residual stream's next value) and `y = norm(h)` as
/// `norm` forms it from those same values, so both are bit for bit what
/// the `add` and `norm` kernels give. Buffers `a, b, w, [bias,] h, y`
/// (`a`, `b`, `h` of one shape); params and grid as `norm`'s. Each
/// invocation reads back only the `h` elements it wrote itself.
pub fn add_norm(kind: NormKind) -> Kernel {
    norm_kernel(kind, true)
}

fn norm_kernel(kind: NormKind, residual: bool) -> Kernel {
    let layer = kind == NormKind::Layer;
    let name = match (residual, layer) {
        (false, false) => "rms_norm",
        (false, true) => "layer_norm",
        (true, false) => "add_rms_norm",
        (true, true) => "add_layer_norm",
    };
    let mut k = Kernel::new(name, WORKGROUP);
    k = if residual { k.input("a", Ty::F32).input("b", Ty::F32) } else { k.input("x", Ty::F32) };
    k = k.input("w", Ty::F32);
    if layer {
        k = k.input("bias", Ty::F32);
    }
    if residual {
        k = k.output("h", Ty::F32);
    }
    k = k.output("y", Ty::F32).param("rows", Ty::U32).param("d", Ty::U32).param("eps", Ty::F32).shared("red", Ty::F32, WORKGROUP);
    let x_name = if residual { "h" } else { "x" };
    let x_at = |c: Expr| load(x_name, var("base") + c);
    let strided = |var_name: &str, body: Vec<Stmt>| for_(var_name, local_id(), param("d"), u(WORKGROUP), body);
    let mut row = vec![let_("base", Ty::U32, var("row") * param("d"))];
    if residual {
        let at = var("base") + var("c");
        row.push(strided("c", vec![store("h", at.clone(), load("a", at.clone()) + load("b", at))]));
    }
    row.push(let_("mean", Ty::F32, f(0.0)));
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

/// A sandwich norm's residual step in one launch (Gemma 2/3: the block's
/// output normed, added to the residual stream, and the sum normed for the
/// next block): `h = a + rms_norm(o, w_o)` written out and `y =
/// rms_norm(h, w)`, each norm formed as `norm` forms it (same strided sums
/// and reduction), the product added to `a` rounded first
/// (`Func::MulRounded`), so `h` and `y` are bit for bit what the `norm`,
/// `add` and `norm` kernels give. Buffers `a, o, w_o, w, h, y` (`a`, `o`,
/// `h`, `y` of one shape); params `rows, d, eps_o, eps`. Grid: `rows`
/// groups. Each invocation reads back only the `h` elements it wrote.
pub fn norm_add_norm() -> Kernel {
    let strided = |var_name: &str, body: Vec<Stmt>| for_(var_name, local_id(), param("d"), u(WORKGROUP), body);
    let at = || var("base") + var("c");
    // `norm`'s RMS statements over `x`: binds `{r}`.
    let rms = |x: &str, mean: &str, sq: &str, dx: &str, r: &str, eps: &str| {
        let mut s = vec![
            let_(mean, Ty::F32, f(0.0)),
            let_(sq, Ty::F32, f(0.0)),
            strided("c", vec![let_(dx, Ty::F32, load(x, at()) - var(mean)), assign(sq, var(sq) + var(dx) * var(dx))]),
        ];
        s.extend(workgroup_reduce("red", WORKGROUP, var(sq), BinOp::Add));
        s.push(let_(r, Ty::F32, f(1.0) / call(Func::Sqrt, vec![load_shared("red", u(0)) / param("d").cast(Ty::F32) + param(eps)])));
        s
    };
    let mut row = vec![let_("base", Ty::U32, var("row") * param("d"))];
    row.extend(rms("o", "mean_o", "sq_o", "dx_o", "r_o", "eps_o"));
    let normed_o = call(Func::MulRounded, vec![load("w_o", var("c")), load("o", at()) * var("r_o")]);
    row.push(strided("c", vec![store("h", at(), load("a", at()) + normed_o)]));
    row.extend(rms("h", "mean", "sq", "dx", "r", "eps"));
    row.push(strided("c", vec![store("y", at(), load("w", var("c")) * (load("h", at()) * var("r")))]));
    Kernel::new("rms_norm_add_rms_norm", WORKGROUP)
        .input("a", Ty::F32)
        .input("o", Ty::F32)
        .input("w_o", Ty::F32)
        .input("w", Ty::F32)
        .output("h", Ty::F32)
        .output("y", Ty::F32)
        .param("rows", Ty::U32)
        .param("d", Ty::U32)
        .param("eps_o", Ty::F32)
        .param("eps", Ty::F32)
        .shared("red", Ty::F32, WORKGROUP)
        .body(vec![let_("row", Ty::U32, group_index()), if_(var("row").lt(param("rows")), row)])
}
