//! Reductions along one axis and the MoE routers built on them. A tensor is
//! viewed as `[outer, len, inner]` around the axis; each invocation owns
//! one line (`len` values, `inner` apart) and walks it in order, as the
//! reference does — router lines are a handful of experts, so one
//! invocation per line is the right size.

use super::{thread_index, WORKGROUP};
use crate::kir::*;
use graphc_ir::ReduceOp;

/// Where element `j` of the invocation's line (`o`, `in`) is.
fn line_index(j: Expr) -> Expr {
    (var("o") * param("len") + j) * param("inner") + var("in")
}

fn line_setup() -> Vec<Stmt> {
    vec![let_("o", Ty::U32, var("line") / param("inner")), let_("in", Ty::U32, var("line") % param("inner"))]
}

/// `y[o, 0, i] = op(x[o, :, i])` (sum, max, mean). Buffers `x, y`; params
/// `lines` (= outer · inner), `len`, `inner`. Grid: `ceil(lines / 256)`.
pub fn reduce(op: ReduceOp) -> Kernel {
    let name = match op {
        ReduceOp::Sum => "reduce_sum",
        ReduceOp::Max => "reduce_max",
        ReduceOp::Mean => "reduce_mean",
    };
    let x_at = |j: Expr| load("x", line_index(j));
    let (init, combine) = match op {
        ReduceOp::Max => (f(f32::NEG_INFINITY), var("acc").max(x_at(var("j")))),
        _ => (f(0.0), var("acc") + x_at(var("j"))),
    };
    let mut body = line_setup();
    body.push(let_("acc", Ty::F32, init));
    body.push(for_("j", u(0), param("len"), u(1), vec![assign("acc", combine)]));
    let result = if op == ReduceOp::Mean { var("acc") / param("len").cast(Ty::F32) } else { var("acc") };
    body.push(store("y", var("line"), result));
    Kernel::new(name, WORKGROUP)
        .input("x", Ty::F32)
        .output("y", Ty::F32)
        .param("lines", Ty::U32)
        .param("len", Ty::U32)
        .param("inner", Ty::U32)
        .body(vec![let_("line", Ty::U32, thread_index()), if_(var("line").lt(param("lines")), body)])
}

/// `1.0` where `x` is among the `k` largest of its line, ties to the lower
/// index (`top_k_mask`). One invocation per element: its rank is the count
/// of line members that order before it. Buffers `x, y`; params `n`
/// (elements), `len`, `inner`, `k`. Grid: `ceil(n / 256)`.
pub fn top_k_mask() -> Kernel {
    let body = vec![
        let_("inner_i", Ty::U32, var("e") % param("inner")),
        let_("jj", Ty::U32, (var("e") / param("inner")) % param("len")),
        let_("oo", Ty::U32, var("e") / (param("inner") * param("len"))),
        let_("v", Ty::F32, load("x", var("e"))),
        let_("ahead", Ty::U32, u(0)),
        for_(
            "l",
            u(0),
            param("len"),
            u(1),
            vec![
                let_("w", Ty::F32, load("x", (var("oo") * param("len") + var("l")) * param("inner") + var("inner_i"))),
                if_(var("w").gt(var("v")).or(var("w").eq(var("v")).and(var("l").lt(var("jj")))), vec![assign("ahead", var("ahead") + u(1))]),
            ],
        ),
        store("y", var("e"), select(var("ahead").lt(param("k")), f(1.0), f(0.0))),
    ];
    Kernel::new("top_k_mask", WORKGROUP)
        .input("x", Ty::F32)
        .output("y", Ty::F32)
        .param("n", Ty::U32)
        .param("len", Ty::U32)
        .param("inner", Ty::U32)
        .param("k", Ty::U32)
        .body(vec![let_("e", Ty::U32, thread_index()), if_(var("e").lt(param("n")), body)])
}

/// PhiMoE's sparsemixer (`sparse_mixer`, top 2) on rows of `len` router
/// scores (the last axis), one invocation per row, in the reference's
/// steps: the first expert, its masked softmax weight, then the same over
/// the rest. Buffers `x, y`; params `rows`, `len`, `jitter_eps`. Grid:
/// `ceil(rows / 256)`.
pub fn sparse_mixer() -> Kernel {
    let s = |j: Expr| load("x", var("base") + j);
    // Softmax weight of `pick` among the line (without `skip`, if any),
    // masking scores too far below `top`: leaves it in `weight_name`.
    let weight = |tag: &str, top: Expr, pick: Expr, skip: Expr| -> Vec<Stmt> {
        let (m, sum, keep) = (format!("m_{tag}"), format!("sum_{tag}"), format!("keep_{tag}"));
        let kept = |j: Expr| {
            let sj = s(j.clone());
            j.ne(skip.clone()).and(((top.clone() - sj.clone()) / call(Func::Abs, vec![sj]).max(top.clone())).le(param("two_eps")))
        };
        vec![
            let_(&m, Ty::F32, f(f32::NEG_INFINITY)),
            for_(
                &format!("j_{tag}"),
                u(0),
                param("len"),
                u(1),
                vec![if_(kept(var(&format!("j_{tag}"))), vec![assign(&m, var(&m).max(s(var(&format!("j_{tag}")))))])],
            ),
            let_(&sum, Ty::F32, f(0.0)),
            for_(
                &format!("k_{tag}"),
                u(0),
                param("len"),
                u(1),
                vec![
                    let_(&keep, Ty::Bool, kept(var(&format!("k_{tag}")))),
                    if_(var(&keep), vec![assign(&sum, var(&sum) + call(Func::Exp, vec![s(var(&format!("k_{tag}"))) - var(&m)]))]),
                ],
            ),
            store("y", var("base") + pick.clone(), call(Func::Exp, vec![s(pick) - var(&m)]) / var(&sum)),
        ]
    };
    let mut body = vec![
        let_("base", Ty::U32, var("row") * param("len")),
        for_("z", u(0), param("len"), u(1), vec![store("y", var("base") + var("z"), f(0.0))]),
        let_("first", Ty::U32, u(0)),
        for_("a", u(1), param("len"), u(1), vec![if_(s(var("a")).gt(s(var("first"))), vec![assign("first", var("a"))])]),
        // The second: the first index of the largest of the others.
        let_("second", Ty::U32, select(var("first").eq(u(0)), u(1), u(0))),
        for_(
            "b",
            u(0),
            param("len"),
            u(1),
            vec![if_(var("b").ne(var("first")).and(s(var("b")).gt(s(var("second")))), vec![assign("second", var("b"))])],
        ),
    ];
    // `len` is never an index, so "skip nothing" for the first weight.
    body.extend(weight("first", s(var("first")), var("first"), param("len")));
    body.extend(weight("second", s(var("second")), var("second"), var("first")));
    Kernel::new("sparse_mixer", WORKGROUP)
        .input("x", Ty::F32)
        .output("y", Ty::F32)
        .param("rows", Ty::U32)
        .param("len", Ty::U32)
        .param("two_eps", Ty::F32)
        .body(vec![let_("row", Ty::U32, thread_index()), if_(var("row").lt(param("rows")), body)])
}
