//! Rotary embedding, and the fused per-head q/k norm + transpose + rotation
//! (`norm_rope`). Pair `i` at position `p` turns by `p' · inv_freq[i]`; the
//! host passes `inv_freq` (`RopeScaling::inv_freq`, the CPU's values) so
//! every backend rotates by the same f32 angles.
//!
//! The angle is reduced to [-π, π] here (Cody–Waite, two-part 2π) before
//! `sin`/`cos`: WGSL and Metal only bound their error inside that range,
//! and angles reach thousands of radians at long contexts.

use super::{thread_index, WORKGROUP};
use crate::kir::*;
use graphc_ir::RopeStyle;

/// `2π = TWO_PI_HI + TWO_PI_LO`, with `TWO_PI_HI` exact in 8 bits so
/// `k · TWO_PI_HI` is exact for the `k` any real position gives.
const TWO_PI_HI: f32 = 6.28125;
const TWO_PI_LO: f32 = 0.001_935_307_2;

/// Statements binding `sin_a`, `cos_a` (times `magnitude`) for pair `pair`
/// at position `pos` (an i32). Positions are non-negative, so truncating
/// `a / 2π + 1/2` rounds to the nearest turn.
fn angle(pair: Expr, pos: Expr) -> Vec<Stmt> {
    vec![
        let_("a", Ty::F32, (pos.cast(Ty::F32) / param("pos_divisor")) * load("inv_freq", pair)),
        let_("turns", Ty::F32, (var("a") * f(1.0 / (2.0 * std::f32::consts::PI)) + f(0.5)).cast(Ty::I32).cast(Ty::F32)),
        let_("a_reduced", Ty::F32, (var("a") - var("turns") * f(TWO_PI_HI)) - var("turns") * f(TWO_PI_LO)),
        let_("sin_a", Ty::F32, call(Func::Sin, vec![var("a_reduced")]) * param("magnitude")),
        let_("cos_a", Ty::F32, call(Func::Cos, vec![var("a_reduced")]) * param("magnitude")),
    ]
}

/// Output feature `c` of a row rotated to `pos` (an i32), from `value(j)`
/// (the row's feature `j`): pairs `(i, i + half)` (Neox) or `(2i, 2i + 1)`
/// (GptJ); features past `2 · half` pass through.
fn rotated(style: RopeStyle, pos: Expr, value: &dyn Fn(Expr) -> Expr) -> Vec<Stmt> {
    rotated_from(style, pos, value(var("c")), value(partner(style)))
}

/// The feature `c` forms a pair with: `c ± half` (Neox) or `c ± 1` (GptJ).
fn partner(style: RopeStyle) -> Expr {
    let c = || var("c");
    match style {
        RopeStyle::Neox => select(c().lt(param("half")), c() + param("half"), c() - param("half")),
        RopeStyle::GptJ => select((c() % u(2)).eq(u(0)), c() + u(1), c() - u(1)),
    }
}

/// `rotated`, given feature `c`'s value (`own`) and its partner's
/// (`partner_value`) as expressions: binds `out`. Used as is by a kernel
/// that holds both values itself (the projection epilogue of
/// `matmul::matmul_qkv_rope`), so it rotates with the same expressions.
pub(super) fn rotated_from(style: RopeStyle, pos: Expr, own: Expr, partner_value: Expr) -> Vec<Stmt> {
    let c = || var("c");
    let (pair, first) = match style {
        RopeStyle::Neox => (select(c().lt(param("half")), c(), c() - param("half")), c().lt(param("half"))),
        RopeStyle::GptJ => (c() / u(2), (c() % u(2)).eq(u(0))),
    };
    let mut body = vec![let_("out", Ty::F32, own.clone())];
    let mut turn = angle(pair, pos);
    turn.push(let_("x_self", Ty::F32, own));
    turn.push(let_("x_partner", Ty::F32, partner_value));
    // Same products as the reference: x0·cos − x1·sin and x0·sin + x1·cos,
    // each product rounded before the sum as the reference's are (no FMA:
    // the rounded sum rounds its operands): the rotation is then the same
    // arithmetic in every kernel that uses it, whether its values come
    // from memory (`rope`) or from the projection's registers
    // (`matmul_qkv_rope`), on every compiler.
    let product = |x: &str, t: &str| var(x) * var(t);
    turn.push(assign(
        "out",
        select(
            first,
            call(Func::SubRounded, vec![product("x_self", "cos_a"), product("x_partner", "sin_a")]),
            call(Func::AddRounded, vec![product("x_partner", "sin_a"), product("x_self", "cos_a")]),
        ),
    ));
    body.push(if_(c().lt(param("half") * u(2)), turn));
    body
}

pub(super) fn with_rope_params(k: Kernel) -> Kernel {
    k.param("half", Ty::U32).param("pos_divisor", Ty::F32).param("magnitude", Ty::F32).rounded_ops()
}

/// `x [b, h, s, d]`, `pos i32 [b, s]`, `inv_freq [half]` → `y` of x's shape.
/// Params `n` (elements), `h`, `s`, `d`, then `half` (rotary_dim / 2),
/// `pos_divisor` (the linear scaling factor, else 1), `magnitude`.
/// Grid: `ceil(n / 256)`, one output feature per invocation.
pub fn rope(style: RopeStyle) -> Kernel {
    let k = Kernel::new(&format!("rope_{}", style.name()), WORKGROUP)
        .input("x", Ty::F32)
        .input("positions", Ty::I32)
        .input("inv_freq", Ty::F32)
        .output("y", Ty::F32)
        .param("n", Ty::U32)
        .param("h", Ty::U32)
        .param("s", Ty::U32)
        .param("d", Ty::U32);
    let mut body = vec![
        let_("row", Ty::U32, var("i") / param("d")),
        let_("c", Ty::U32, var("i") % param("d")),
        let_("b", Ty::U32, var("row") / (param("h") * param("s"))),
        let_("pos", Ty::I32, load("positions", var("b") * param("s") + var("row") % param("s"))),
    ];
    body.extend(rotated(style, var("pos"), &|j| load("x", var("row") * param("d") + j)));
    body.push(store("y", var("i"), var("out")));
    with_rope_params(k).body(vec![let_("i", Ty::U32, thread_index()), if_(var("i").lt(param("n")), body)])
}

/// `rope(permute{0,2,1,3}(rms_norm(x, w)))` in one pass: `x [b, s, h, d]`,
/// `w [d]`, `pos i32 [b, s]`, `inv_freq` → `y [b, h, s, d]`. Params `rows`
/// (b·s·h), `h`, `s`, `d`, `eps`, then the rope params. Grid: `rows`
/// groups, one input row (a head of a token) per group.
pub fn norm_rope(style: RopeStyle) -> Kernel {
    let k = Kernel::new(&format!("norm_rope_{}", style.name()), WORKGROUP)
        .input("x", Ty::F32)
        .input("w", Ty::F32)
        .input("positions", Ty::I32)
        .input("inv_freq", Ty::F32)
        .output("y", Ty::F32)
        .param("rows", Ty::U32)
        .param("h", Ty::U32)
        .param("s", Ty::U32)
        .param("d", Ty::U32)
        .param("eps", Ty::F32)
        .shared("red", Ty::F32, WORKGROUP);
    // row = (bi · s + si) · h + hi of the input; the output is heads-major.
    let mut row = vec![
        let_("hi", Ty::U32, var("row") % param("h")),
        let_("token", Ty::U32, var("row") / param("h")),
        let_("bi", Ty::U32, var("token") / param("s")),
        let_("si", Ty::U32, var("token") % param("s")),
        let_("out_base", Ty::U32, ((var("bi") * param("h") + var("hi")) * param("s") + var("si")) * param("d")),
    ];
    let store_out = |out: Expr| vec![store("y", var("out_base") + var("c"), out)];
    row.extend(norm_rope_row(style, "", "x", "w", var("row") * param("d"), load("positions", var("token")), &store_out));
    with_rope_params(k).body(vec![let_("row", Ty::U32, group_index()), if_(var("row").lt(param("rows")), row)])
}

/// One head row normed and rotated, as `norm_rope` computes it: the row of
/// `d` features of buffer `x` at `base`, its RMS (reduced in workgroup
/// memory `red`, param `eps`) times weight `w`, rotated to `pos` (an i32).
/// For each feature `c` (one invocation each, strided over the workgroup)
/// `sink(out)` takes its value. Every invocation must reach it (it has
/// barriers). The locals it binds are named with `prefix`, so a kernel can
/// norm several rows in one scope; the row's squares are read from `x`
/// before the reduction's barriers, and `x` is read again after them.
pub(super) fn norm_rope_row(style: RopeStyle, prefix: &str, x: &str, w: &str, base: Expr, pos: Expr, sink: &dyn Fn(Expr) -> Vec<Stmt>) -> Vec<Stmt> {
    let (base_name, sq, value, r) = (format!("{prefix}base"), format!("{prefix}sq"), format!("{prefix}v"), format!("{prefix}r"));
    let mut row = vec![
        let_(&base_name, Ty::U32, base),
        let_(&sq, Ty::F32, f(0.0)),
        for_(
            "c",
            local_id(),
            param("d"),
            u(WORKGROUP),
            vec![let_(&value, Ty::F32, load(x, var(&base_name) + var("c"))), assign(&sq, var(&sq) + var(&value) * var(&value))],
        ),
    ];
    row.extend(workgroup_reduce("red", WORKGROUP, var(&sq), BinOp::Add));
    row.push(let_(&r, Ty::F32, f(1.0) / call(Func::Sqrt, vec![load_shared("red", u(0)) / param("d").cast(Ty::F32) + param("eps")])));
    let mut feature = rotated(style, pos, &|j| load(w, j.clone()) * (load(x, var(&base_name) + j) * var(&r)));
    feature.extend(sink(var("out")));
    row.push(for_("c", local_id(), param("d"), u(WORKGROUP), feature));
    row
}
