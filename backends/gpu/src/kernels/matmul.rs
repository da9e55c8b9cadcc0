//! Dequantize-into-matmul and the embedding gather, for every weight type:
//! the weight is read as checkpoint bytes and decoded element by element
//! (`dequant::element`) inside the kernel; no dequantized copy exists.

use super::{dequant, thread_index, WORKGROUP};
use crate::kir::*;
use graphc_ir::DType;

fn type_name(dtype: DType) -> String {
    dtype.to_string().to_lowercase()
}

/// `y[r, j] = Σ_c x[r, c] · w[j, c]` (`x · wᵀ`, w in checkpoint layout).
/// Buffers `x f32 [m, k]`, `w u32` (the weight's bytes), `y f32 [m, n]`;
/// params `m, n, k, row_bytes` (bytes per weight row). Grid: `m · n`
/// groups, one output per group; each invocation sums whole blocks, the
/// workgroup adds the partial sums.
pub fn matmul(dtype: DType) -> Kernel {
    let (be, bb) = (dtype.block_elems() as u32, dtype.block_bytes() as u32);
    let mut block = vec![
        let_("base", Ty::U32, var("j") * param("row_bytes") + var("blk") * u(bb)),
        let_("x_base", Ty::U32, var("r") * param("k") + var("blk") * u(be)),
    ];
    let mut per_element = dequant::element(dtype, "w", var("base"), var("e"));
    per_element.push(assign("acc", var("acc") + load("x", var("x_base") + var("e")) * var("out")));
    block.push(for_("e", u(0), u(be), u(1), per_element));
    let mut out = vec![
        let_("j", Ty::U32, var("g") % param("n")),
        let_("r", Ty::U32, var("g") / param("n")),
        let_("acc", Ty::F32, f(0.0)),
        for_("blk", local_id(), param("k") / u(be), u(WORKGROUP), block),
    ];
    out.extend(workgroup_reduce("red", WORKGROUP, var("acc"), BinOp::Add));
    out.push(if_(local_id().eq(u(0)), vec![store("y", var("g"), load_shared("red", u(0)))]));
    Kernel::new(&format!("matmul_{}", type_name(dtype)), WORKGROUP)
        .input("x", Ty::F32)
        .input("w", Ty::U32)
        .output("y", Ty::F32)
        .param("m", Ty::U32)
        .param("n", Ty::U32)
        .param("k", Ty::U32)
        .param("row_bytes", Ty::U32)
        .shared("red", Ty::F32, WORKGROUP)
        .body(vec![let_("g", Ty::U32, group_index()), if_(var("g").lt(param("m") * param("n")), out)])
}

/// `y[t, :] = table[ids[t], :]` decoded to f32. Buffers `table u32` (the
/// weight's bytes), `ids i32 [n_ids]`, `y f32 [n_ids, d]`; params `n`
/// (= n_ids · d), `d`, `rows` (table rows), `row_bytes`. Ids are checked
/// on the host before launch; one outside the table leaves its row 0.
/// Grid: `ceil(n / 256)`.
pub fn gather(dtype: DType) -> Kernel {
    let (be, bb) = (dtype.block_elems() as u32, dtype.block_bytes() as u32);
    let mut body = vec![
        let_("id", Ty::I32, load("ids", var("i") / param("d"))),
        let_("col", Ty::U32, var("i") % param("d")),
        let_("base", Ty::U32, var("id").cast(Ty::U32) * param("row_bytes") + (var("col") / u(be)) * u(bb)),
        let_("e", Ty::U32, var("col") % u(be)),
    ];
    body.extend(dequant::element(dtype, "table", var("base"), var("e")));
    body.push(store("y", var("i"), var("out")));
    let valid = var("id").ge(i(0)).and(var("id").cast(Ty::U32).lt(param("rows")));
    let body = vec![
        let_("id", Ty::I32, load("ids", var("i") / param("d"))),
        if_else(valid, body[1..].to_vec(), vec![store("y", var("i"), f(0.0))]),
    ];
    Kernel::new(&format!("gather_{}", type_name(dtype)), WORKGROUP)
        .input("table", Ty::U32)
        .input("ids", Ty::I32)
        .output("y", Ty::F32)
        .param("n", Ty::U32)
        .param("d", Ty::U32)
        .param("rows", Ty::U32)
        .param("row_bytes", Ty::U32)
        .body(vec![let_("i", Ty::U32, thread_index()), if_(var("i").lt(param("n")), body)])
}
