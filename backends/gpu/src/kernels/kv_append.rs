//! `KvAppend` on the device: the new rows are written into the resident
//! cache at each batch row's own offset (`lengths[b]`, modulo the capacity
//! in a ring); nothing else of the cache is touched. The host checks the
//! offsets against the capacity before launch (the same error the CPU
//! gives), so the kernel never writes out of bounds.

use super::{thread_index, WORKGROUP};
use crate::kir::*;

/// Viewed as `cache [outer, cap, inner]` and `new [outer, s, inner]`, where
/// outer row `o` belongs to batch row `o / outer_per_batch`.
/// Buffers `cache` (read-write, in place), `new_rows`, `lengths i32 [b]`; params
/// `n` (elements of `new`), `s`, `inner`, `cap`, `outer_per_batch`, `ring`
/// (0/1). Grid: `ceil(n / 256)`.
pub fn kv_append() -> Kernel {
    let mut k = Kernel::new("kv_append", WORKGROUP).output("cache", Ty::F32).input("new_rows", Ty::F32).input("lengths", Ty::I32);
    for p in ["n", "s", "inner", "cap", "outer_per_batch", "ring"] {
        k = k.param(p, Ty::U32);
    }
    k.body(vec![
        let_("i", Ty::U32, thread_index()),
        if_(
            var("i").lt(param("n")),
            vec![
                let_("feature", Ty::U32, var("i") % param("inner")),
                let_("row", Ty::U32, (var("i") / param("inner")) % param("s")),
                let_("outer", Ty::U32, var("i") / (param("inner") * param("s"))),
                let_("dst", Ty::U32, load("lengths", var("outer") / param("outer_per_batch")).cast(Ty::U32) + var("row")),
                if_(param("ring").eq(u(1)), vec![assign("dst", var("dst") % param("cap"))]),
                store("cache", (var("outer") * param("cap") + var("dst")) * param("inner") + var("feature"), load("new_rows", var("i"))),
            ],
        ),
    ])
}
