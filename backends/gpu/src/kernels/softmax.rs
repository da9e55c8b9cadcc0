//! Softmax over the last axis, one workgroup per row: max, sum of
//! exponentials, normalize (the reference's order), with the optional
//! logit soft-cap `c · tanh(x / c)` applied first.

use super::WORKGROUP;
use crate::kir::*;

/// Buffers `x, y`; params `rows`, `d` (row length), `softcap` (0: none).
/// Grid: `rows` groups.
pub fn softmax() -> Kernel {
    let capped = |v: Expr| select(param("softcap").gt(f(0.0)), param("softcap") * tanh(v.clone() / param("softcap")), v);
    let strided = |body: Vec<Stmt>| for_("c", local_id(), param("d"), u(WORKGROUP), body);
    let mut row = vec![
        let_("base", Ty::U32, var("row") * param("d")),
        let_("m", Ty::F32, f(-3.0e38)),
        strided(vec![assign("m", var("m").max(capped(load("x", var("base") + var("c")))))]),
    ];
    row.extend(workgroup_reduce("red", WORKGROUP, var("m"), BinOp::Max));
    row.push(assign("m", load_shared("red", u(0))));
    row.push(let_("sum", Ty::F32, f(0.0)));
    row.push(strided(vec![
        let_("e", Ty::F32, call(Func::Exp, vec![capped(load("x", var("base") + var("c"))) - var("m")])),
        store("y", var("base") + var("c"), var("e")),
        assign("sum", var("sum") + var("e")),
    ]));
    row.extend(workgroup_reduce("red", WORKGROUP, var("sum"), BinOp::Add));
    row.push(let_("total", Ty::F32, load_shared("red", u(0))));
    row.push(strided(vec![store("y", var("base") + var("c"), load("y", var("base") + var("c")) / var("total"))]));
    Kernel::new("softmax", WORKGROUP)
        .input("x", Ty::F32)
        .output("y", Ty::F32)
        .param("rows", Ty::U32)
        .param("d", Ty::U32)
        .param("softcap", Ty::F32)
        .shared("red", Ty::F32, WORKGROUP)
        .body(vec![let_("row", Ty::U32, group_index()), if_(var("row").lt(param("rows")), row)])
}
