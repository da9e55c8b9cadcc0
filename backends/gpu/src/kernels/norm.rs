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
    let mut row = vec![let_("base", Ty::U32, var("row") * param("d"))];
    if residual {
        let at = var("base") + var("c");
        row.push(strided("c", vec![store("h", at.clone(), load("a", at.clone()) + load("b", at))]));
    }
    row.extend(scale_of_row(x_name, "", "eps", layer));
    let value = if layer {
        (x_at(var("c")) - var("mean")) * var("r") * load("w", var("c")) + load("bias", var("c"))
    } else {
        load("w", var("c")) * (x_at(var("c")) * var("r"))
    };
    row.push(strided("c", vec![store("y", var("base") + var("c"), value)]));
    k.body(vec![let_("row", Ty::U32, group_index()), if_(var("row").lt(param("rows")), row)])
}

/// A sandwich norm's residual add in one launch (the IR's `norm_add`):
/// `h = a + rms_norm(o, w_o)`, the norm formed as `norm` forms it and the
/// product rounded before the add (`Func::MulRounded`), so `h` is bit for
/// bit what the `norm` and `add` kernels give. Buffers `a, o, w_o, h`;
/// params `rows, d, eps_o`. Grid: `rows` groups.
pub fn norm_add() -> Kernel {
    let mut row = vec![let_("base", Ty::U32, var("row") * param("d"))];
    row.extend(norm_add_row(load("a", var("base") + var("c"))));
    Kernel::new("rms_norm_add", WORKGROUP)
        .input("a", Ty::F32)
        .input("o", Ty::F32)
        .input("w_o", Ty::F32)
        .output("h", Ty::F32)
        .param("rows", Ty::U32)
        .param("d", Ty::U32)
        .param("eps_o", Ty::F32)
        .rounded_ops()
        .shared("red", Ty::F32, WORKGROUP)
        .body(vec![let_("row", Ty::U32, group_index()), if_(var("row").lt(param("rows")), row)])
}

/// The IR's `add_partials{eps}` as one kernel: `y = r + rms_norm(s, w_a)`
/// with `s` the row's shares summed left to right from 0, staged in
/// workgroup memory (`os`: up to `MAX_STAGED_X` features, which the
/// `attention_project` pass checks) and normed by the loop and reduction
/// of `norm`, the product rounded before the add as `norm_add` rounds it.
/// Buffers `r, p [rows, heads, d], w_a, y`; params `rows, d, heads,
/// eps_a`. Grid: `rows` groups.
pub fn add_partials_normed() -> Kernel {
    let mut row = vec![let_("base", Ty::U32, var("row") * param("d"))];
    let (stage, a) = staged_partials(true);
    row.extend(stage);
    row.push(strided("c", vec![store("y", var("base") + var("c"), a)]));
    let k = Kernel::new("add_partials_normed", WORKGROUP).input("r", Ty::F32).input("p", Ty::F32).input("w_a", Ty::F32).output("y", Ty::F32);
    k.param("rows", Ty::U32)
        .param("d", Ty::U32)
        .param("heads", Ty::U32)
        .param("eps_a", Ty::F32)
        .rounded_ops()
        .shared("red", Ty::F32, WORKGROUP)
        .shared("os", Ty::F32, super::MAX_STAGED_X)
        .body(vec![let_("row", Ty::U32, group_index()), if_(var("row").lt(param("rows")), row)])
}

/// `norm_add` whose `a` is an `add_partials` formed here (`fuse`'s
/// `Group::Partials`): `a = r + s`, or with `norm`, as
/// `add_partials_normed` forms it, so `h` has the bits of that op's
/// kernel followed by `norm_add`'s. Buffers `r, p [rows, heads, d]`,
/// `w_a` (with `norm`), then `norm_add`'s `o, w_o, h`; params `rows, d,
/// eps_o, heads`, then `eps_a` (with `norm`). Grid: `rows` groups.
pub fn norm_add_partials(norm: bool) -> Kernel {
    let mut row = vec![let_("base", Ty::U32, var("row") * param("d"))];
    let (stage, a) = staged_partials(norm);
    row.extend(stage);
    row.extend(norm_add_row(a));
    let name = if norm { "rms_norm_add_normed_partials" } else { "rms_norm_add_partials" };
    let mut k = Kernel::new(name, WORKGROUP).input("r", Ty::F32).input("p", Ty::F32);
    if norm {
        k = k.input("w_a", Ty::F32);
    }
    k = k.input("o", Ty::F32).input("w_o", Ty::F32).output("h", Ty::F32);
    k = k.param("rows", Ty::U32).param("d", Ty::U32).param("eps_o", Ty::F32).param("heads", Ty::U32);
    if norm {
        k = k.param("eps_a", Ty::F32);
    }
    k.rounded_ops()
        .shared("red", Ty::F32, WORKGROUP)
        .shared("os", Ty::F32, super::MAX_STAGED_X)
        .body(vec![let_("row", Ty::U32, group_index()), if_(var("row").lt(param("rows")), row)])
}

/// `norm_add`'s row at `base`: `h = a + rms_norm(o, w_o)`, with `a` feature
/// `c`'s residual.
fn norm_add_row(a: Expr) -> Vec<Stmt> {
    let at = || var("base") + var("c");
    let mut row = scale_of_row("o", "_o", "eps_o", false);
    row.push(strided("c", vec![store("h", at(), a + post_normed(load("w_o", var("c")), load("o", at()), var("r_o")))]));
    row
}

/// A post-norm's term for one feature, `weight · (value · scale)`, the
/// product rounded before the residual add (`Func::MulRounded`) as the
/// unfused `norm` and `add` kernels round it: every kernel adding a
/// sandwich norm's output to a residual forms it here, so they agree in
/// their bits.
pub(super) fn post_normed(weight: Expr, value: Expr, scale: Expr) -> Expr {
    call(Func::MulRounded, vec![weight, value * scale])
}

/// Row `row`'s shares (`p`, `heads` of them) summed left to right from 0
/// into `os`, and the value of feature `c` of the sum added to `r`: with
/// `norm`, `r + rms_norm(s, w_a)` (`eps_a`; its scale `r_a`), as
/// `norm_add` forms it.
fn staged_partials(norm: bool) -> (Vec<Stmt>, Expr) {
    let share = |h: Expr| load("p", (var("row") * param("heads") + h) * param("d") + var("c"));
    let mut sum = super::sum_of_shares("os_sum", share);
    sum.push(store_shared("os", var("c"), var("os_sum")));
    let mut s = vec![strided("c", sum), Stmt::Barrier];
    let r = load("r", var("base") + var("c"));
    let a = if norm {
        s.extend(scale_of_row_of(|c| load_shared("os", c), param("d"), "_a", "eps_a", false));
        r + post_normed(load("w_a", var("c")), load_shared("os", var("c")), var("r_a"))
    } else {
        r + load_shared("os", var("c"))
    };
    (s, a)
}

/// A loop over the row's features `c` (`base + c` of a row-major buffer),
/// strided by the workgroup: the access every kernel here uses.
fn strided(var_name: &str, body: Vec<Stmt>) -> Stmt {
    for_(var_name, local_id(), param("d"), u(WORKGROUP), body)
}

/// The norm statistics of the row of buffer `x` at `base` (a local),
/// `d` features long: binds
/// `mean{suffix}` (0 for RMS; the row's mean for `layer`) and
/// `r{suffix}` = 1 / sqrt(mean((x - mean)²) + `eps`), summed by the
/// strided loop and tree reduction every norm kernel here uses, so two
/// kernels computing one row's norm agree in their bits.
fn scale_of_row(x: &str, suffix: &str, eps: &str, layer: bool) -> Vec<Stmt> {
    scale_of_row_at(x, var("base"), param("d"), suffix, eps, layer)
}

/// `scale_of_row` of the row at `base`, `len` features long (a kernel
/// whose row is not the norm kernel's: the matmuls that form their
/// input's RMS norm), by the same loop and reduction.
pub(super) fn scale_of_row_at(x: &str, base: Expr, len: Expr, suffix: &str, eps: &str, layer: bool) -> Vec<Stmt> {
    scale_of_row_of(|c| load(x, base.clone() + c), len, suffix, eps, layer)
}

/// `scale_of_row_at` of a row whose feature `c` is `x_at(c)` (a row staged
/// in workgroup memory), by the same loop and reduction.
pub(super) fn scale_of_row_of(x_at: impl Fn(Expr) -> Expr, len: Expr, suffix: &str, eps: &str, layer: bool) -> Vec<Stmt> {
    let name = |n: &str| format!("{n}{suffix}");
    let (mean, sum, sq, dx) = (name("mean"), name("sum"), name("sq"), name("dx"));
    let x_at = || x_at(var("c"));
    let strided = |name: &str, body: Vec<Stmt>| for_(name, local_id(), len.clone(), u(WORKGROUP), body);
    let mut s = vec![let_(&mean, Ty::F32, f(0.0))];
    if layer {
        s.push(let_(&sum, Ty::F32, f(0.0)));
        s.push(strided("c", vec![assign(&sum, var(&sum) + x_at())]));
        s.extend(workgroup_reduce("red", WORKGROUP, var(&sum), BinOp::Add));
        s.push(assign(&mean, load_shared("red", u(0)) / len.clone().cast(Ty::F32)));
    }
    s.push(let_(&sq, Ty::F32, f(0.0)));
    s.push(strided("c", vec![let_(&dx, Ty::F32, x_at() - var(&mean)), assign(&sq, var(&sq) + var(&dx) * var(&dx))]));
    s.extend(workgroup_reduce("red", WORKGROUP, var(&sq), BinOp::Add));
    s.push(let_(&name("r"), Ty::F32, f(1.0) / call(Func::Sqrt, vec![load_shared("red", u(0)) / len.cast(Ty::F32) + param(eps)])));
    s
}
