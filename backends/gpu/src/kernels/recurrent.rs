//! Qwen3-Next's linear-attention layers: the causal depthwise convolution
//! and the gated delta rule, each row advanced by its own length. Both are
//! recurrences along the sequence, so each invocation owns what no other
//! touches — a channel of a row, a column of a head's state matrix — and
//! walks the tokens in order with the reference's arithmetic.

use super::{thread_index, WORKGROUP};
use crate::kir::*;

/// Sets local `out` to row `r` of `concat(state, x)` for channel `ch` of
/// batch row `bi` (branches, not a select: the other side's index would be
/// out of bounds).
fn conv_input(r: Expr) -> Vec<Stmt> {
    vec![if_else(
        r.clone().lt(var("keep")),
        vec![assign("xv", load("state", (var("bi") * var("keep") + r.clone()) * param("c") + var("ch")))],
        vec![assign("xv", load("x", (var("bi") * param("s") + r - var("keep")) * param("c") + var("ch")))],
    )]
}

/// `causal_conv1d`: buffers `x [b, s, c]`, `w [c, taps]`, `state [b, taps-1, c]`,
/// `lengths i32 [b]`, `y [b, s + taps - 1, c]`; params `lanes` (b·c), `s`,
/// `c`, `taps`. Grid: `ceil(lanes / 256)`, one (row, channel) per invocation.
pub fn causal_conv1d() -> Kernel {
    let mut tap = vec![let_("xv", Ty::F32, f(0.0))];
    tap.extend(conv_input(var("t") + var("j")));
    tap.push(assign("acc", var("acc") + load("w", var("ch") * param("taps") + var("j")) * var("xv")));
    let mut carry = vec![let_("xv", Ty::F32, f(0.0))];
    carry.extend(conv_input(var("n") + var("i")));
    carry.push(store("y", (var("bi") * (param("s") + var("keep")) + param("s") + var("i")) * param("c") + var("ch"), var("xv")));
    let body = vec![
        let_("bi", Ty::U32, var("lane") / param("c")),
        let_("ch", Ty::U32, var("lane") % param("c")),
        let_("keep", Ty::U32, param("taps") - u(1)),
        let_("n", Ty::U32, load("lengths", var("bi")).cast(Ty::U32)),
        for_(
            "t",
            u(0),
            param("s"),
            u(1),
            vec![
                let_("acc", Ty::F32, f(0.0)),
                for_("j", u(0), param("taps"), u(1), tap),
                store("y", (var("bi") * (param("s") + var("keep")) + var("t")) * param("c") + var("ch"), var("acc")),
            ],
        ),
        for_("i", u(0), var("keep"), u(1), carry),
    ];
    Kernel::new("causal_conv1d", WORKGROUP)
        .input("x", Ty::F32)
        .input("w", Ty::F32)
        .input("state", Ty::F32)
        .input("lengths", Ty::I32)
        .output("y", Ty::F32)
        .param("lanes", Ty::U32)
        .param("s", Ty::U32)
        .param("c", Ty::U32)
        .param("taps", Ty::U32)
        .body(vec![let_("lane", Ty::U32, thread_index()), if_(var("lane").lt(param("lanes")), body)])
}

/// `gated_delta_rule`: buffers `q, k [b, hk, s, dk]`, `v [b, hv, s, dv]`,
/// `g, beta [b, hv, s]`, `state [b, hv, dk, dv]`, `lengths i32 [b]`,
/// `y [b, hv, s + dk, dv]`; params `lanes` (b·hv·dv), `hk`, `hv`, `s`, `dk`,
/// `dv`. Invocation `(bi, h, j)` owns column `j` of head `h`'s state, kept
/// in `y`'s last `dk` rows (where the next state belongs) and updated there.
/// Grid: `ceil(lanes / 256)`.
pub fn gated_delta_rule() -> Kernel {
    let state_at = |i: Expr| var("base") + (param("s") + i) * param("dv") + var("j");
    let qk_at = |i: Expr| ((var("bi") * param("hk") + var("kh")) * param("s") + var("t")) * param("dk") + i;
    let token = vec![
        let_("gate", Ty::F32, call(Func::Exp, vec![load("g", var("gb_at"))])),
        for_("i", u(0), param("dk"), u(1), vec![store("y", state_at(var("i")), load("y", state_at(var("i"))) * var("gate"))]),
        let_("delta", Ty::F32, f(0.0)),
        for_("i", u(0), param("dk"), u(1), vec![assign("delta", var("delta") + load("y", state_at(var("i"))) * load("k", qk_at(var("i"))))]),
        assign("delta", (load("v", var("v_at")) - var("delta")) * load("beta", var("gb_at"))),
        for_(
            "i",
            u(0),
            param("dk"),
            u(1),
            vec![store("y", state_at(var("i")), load("y", state_at(var("i"))) + load("k", qk_at(var("i"))) * var("delta"))],
        ),
        let_("o", Ty::F32, f(0.0)),
        for_("i", u(0), param("dk"), u(1), vec![assign("o", var("o") + load("y", state_at(var("i"))) * load("q", qk_at(var("i"))))]),
        store("y", var("base") + var("t") * param("dv") + var("j"), var("o")),
    ];
    let mut step = vec![
        let_("gb_at", Ty::U32, (var("bi") * param("hv") + var("h")) * param("s") + var("t")),
        let_("v_at", Ty::U32, ((var("bi") * param("hv") + var("h")) * param("s") + var("t")) * param("dv") + var("j")),
    ];
    step.push(if_else(var("t").lt(var("n")), token, vec![store("y", var("base") + var("t") * param("dv") + var("j"), f(0.0))]));
    let body = vec![
        let_("j", Ty::U32, var("lane") % param("dv")),
        let_("h", Ty::U32, (var("lane") / param("dv")) % param("hv")),
        let_("bi", Ty::U32, var("lane") / (param("dv") * param("hv"))),
        let_("kh", Ty::U32, var("h") / (param("hv") / param("hk"))),
        let_("n", Ty::U32, load("lengths", var("bi")).cast(Ty::U32)),
        let_("base", Ty::U32, (var("bi") * param("hv") + var("h")) * (param("s") + param("dk")) * param("dv")),
        let_("state_base", Ty::U32, (var("bi") * param("hv") + var("h")) * param("dk") * param("dv")),
        for_(
            "i",
            u(0),
            param("dk"),
            u(1),
            vec![store("y", state_at(var("i")), load("state", var("state_base") + var("i") * param("dv") + var("j")))],
        ),
        for_("t", u(0), param("s"), u(1), step),
    ];
    let mut k = Kernel::new("gated_delta_rule", WORKGROUP);
    for name in ["q", "k", "v", "g", "beta", "state"] {
        k = k.input(name, Ty::F32);
    }
    k = k.input("lengths", Ty::I32).output("y", Ty::F32);
    for p in ["lanes", "hk", "hv", "s", "dk", "dv"] {
        k = k.param(p, Ty::U32);
    }
    k.body(vec![let_("lane", Ty::U32, thread_index()), if_(var("lane").lt(param("lanes")), body)])
}
