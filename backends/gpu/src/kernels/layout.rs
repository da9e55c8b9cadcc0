//! Layout copies: `permute`, `narrow` and `contiguous` are all one strided
//! read — `y[i] = x[offset + Σ_k i_k · stride_k]` over the output's index
//! `(i_0, .., i_3)` — so they are one kernel; `concat` is one strided write
//! per input. (`reshape` is no kernel at
//! all: dense buffers are reinterpreted in place.)

use super::{thread_index, unravel4, WORKGROUP};
use crate::kir::*;

/// Buffers `x, y`; params `n` (output elements), `d1, d2, d3` (output dims
/// after the first, rank padded to 4 on the left), `offset`, `s0..s3`
/// (input element strides per output axis). Grid: `ceil(n / 256)`.
pub fn strided_copy() -> Kernel {
    let mut body = unravel4();
    body.push(store("y", var("i"), load("x", strided_index())));
    layout_kernel("strided_copy", body)
}

/// The inverse of `strided_copy`: a dense `x` written into `y` at
/// `offset + Σ_k i_k · stride_k` (one input of a `concat`). Buffers `x, y`;
/// params `n` (elements of `x`), `d1, d2, d3` (x's dims after the first,
/// rank padded to 4), `offset`, `s0..s3` (y's element strides per x axis).
/// Grid: `ceil(n / 256)`.
pub fn strided_store() -> Kernel {
    let mut body = unravel4();
    body.push(store("y", strided_index(), load("x", var("i"))));
    layout_kernel("strided_store", body)
}

fn strided_index() -> Expr {
    param("offset") + var("i0") * param("s0") + var("i1") * param("s1") + var("i2") * param("s2") + var("i3") * param("s3")
}

fn layout_kernel(name: &str, body: Vec<Stmt>) -> Kernel {
    let mut k = Kernel::new(name, WORKGROUP).input("x", Ty::F32).output("y", Ty::F32);
    for p in ["n", "d1", "d2", "d3", "offset", "s0", "s1", "s2", "s3"] {
        k = k.param(p, Ty::U32);
    }
    k.body(vec![let_("i", Ty::U32, thread_index()), if_(var("i").lt(param("n")), body)])
}
