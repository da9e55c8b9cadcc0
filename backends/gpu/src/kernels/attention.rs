//! Attention over the in-place KV cache, one workgroup per (row, query
//! head, query): GQA native (query head `h` reads kv head
//! `h / (n_heads / n_kv_heads)`), each query at its own position (ragged
//! batches and decode use the same kernel), causal / sliding-window masks,
//! ring caches, the score soft-cap, and sinks (gpt-oss's one logit per
//! query head that joins each softmax's denominator and weighs no value).
//!
//! Keys are visited in chunks of one per invocation with an online softmax
//! (running max and sum, accumulator rescaled per chunk), so any context
//! length fits the fixed workgroup memory. The accumulator row lives in
//! workgroup memory, one slot per output feature, each owned by one
//! invocation. No infinities are used: a masked score is never exponentiated.
//!
//! A decode step has few queries (a workgroup each) and, deep into a long
//! context, many keys: one workgroup a query would walk them all alone
//! while the device idles. There the keys are split (flash-decoding):
//! `attention_part` runs a workgroup per (query, block of
//! `KEYS_PER_SPLIT` keys) and writes each block's running max, sum and
//! unnormalized accumulator; `attention_merge` rescales the blocks to
//! their common max and divides once. `split_attention` says when: from
//! the keys the step's positions can see (`keys_bound`, known on the host
//! before a graph step is lowered), so a short context stays one launch
//! over a long cache.

use super::{dequant, rope, WORKGROUP};
use crate::kir::*;
use graphc_ir::{DType, RopeStyle};

/// Largest value head size (`dv`) the kernel holds.
pub const MAX_HEAD_DIM: u32 = 512;
const NEG_BIG: f32 = -3.0e38;

/// Keys one workgroup of `attention_part` visits (a whole number of chunks).
pub const KEYS_PER_SPLIT: usize = 2 * WORKGROUP as usize;

/// Fewer queries than this leave a device's cores idle, so their keys are
/// split where there are more than one block of them.
pub const SPLIT_BELOW_QUERIES: usize = 128;

/// How many key blocks an attention of `queries` queries that see at most
/// `keys` keys runs as (1: not split).
pub fn split_attention(queries: usize, keys: usize) -> usize {
    if queries < SPLIT_BELOW_QUERIES {
        keys.div_ceil(KEYS_PER_SPLIT).max(1)
    } else {
        1
    }
}

/// The keys bound a step whose queries sit at positions up to `max_position`
/// is lowered for: whole blocks, their count rounded up to a power of two,
/// so that a generation crosses few bounds (each one lowers and records
/// the step anew).
pub fn keys_bound(max_position: usize) -> usize {
    (max_position + 1).div_ceil(KEYS_PER_SPLIT).next_power_of_two() * KEYS_PER_SPLIT
}

/// Floats `attention_part` writes a (query, block): the accumulator's
/// `dv`, then the block's max and sum.
pub fn part_floats(dv: usize) -> usize {
    dv + 2
}

/// Buffers `q [b, n_heads, s, d]`, `k [b, n_kv_heads, t, d]`,
/// `v [b, n_kv_heads, t, dv]`, `positions i32 [b, s]`, `y [b, n_heads, s, dv]`.
/// Params `queries` (b·n_heads·s), `n_heads`, `n_kv_heads`, `s`, `t`, `d`,
/// `dv`, `scale`, `softcap` (0: none), `causal` (0/1), `window` (0: none),
/// `ring` (0/1). Grid: `queries` groups.
pub fn attention() -> Kernel {
    attention_kernel(Out::Y)
}

/// `attention` of an op with sinks: buffers `q, k, v, positions`, then
/// `sinks [n_heads]`, then `y`; the same params. Each query's running max
/// starts at its head's sink and its sum at 1 (the sink's own term), so
/// the sink joins the denominator as HF's concatenate-softmax-drop does.
pub fn attention_with_sinks() -> Kernel {
    attention_kernel_with(Out::Y, None, true)
}

/// `attention` with each query's head projected (the IR's
/// `attention_project`): buffers `q, k, v, positions`, then `w` (the
/// weight's bytes, `[n, n_heads · dv]` of `dtype`) and `p [b, s, n_heads,
/// n]` instead of `y`; `attention`'s params, then `n` and `row_bytes`.
/// The head's normalized output stays in workgroup memory, where
/// `project_head` reads it. Grid: `queries` groups.
pub fn attention_project(dtype: DType) -> Kernel {
    attention_kernel(Out::Project(dtype))
}

/// `attention` over one block of keys per workgroup: the same buffers and
/// params, then `splits`, writing `part [queries, splits, dv + 2]` (each
/// block's accumulator, max and sum; an empty block's are 0, `NEG_BIG`
/// and 0) instead of `y`. Grid: `queries · splits` groups.
pub fn attention_part() -> Kernel {
    attention_kernel(Out::Part)
}

/// `attention_project` of the IR's `norm_rope_attention`: q and the step's
/// new k normed and rotated in the kernel (`rope::norm_rope_row`, the
/// `norm_rope` kernel's arithmetic). Buffers `q [b, s, n_heads, d]` (before
/// its norm), `k_new [b, s, n_kv_heads, d]` (likewise), `v_new [b,
/// n_kv_heads, s, dv]`, `q_weight [d]`, `k_weight [d]`, `positions`,
/// `inv_freq`, `lengths i32 [b]`, `w`, then the caches `k`, `v` (read and
/// written) and `p`. Params: `attention_project`'s, then `eps`, `current`,
/// then the rope params. With `current` 1 (a step of one row a sequence,
/// `s` = 1), the new k and v rows come from `k_new`, `v_new` (each
/// workgroup norms and rotates its kv head's key itself, into workgroup
/// memory) wherever the cache row they are appended to (`lengths[b]`, in
/// a ring modulo `t`) is read, and the first query head of each kv head
/// writes them there; no workgroup reads that row from the cache. With
/// `current` 0 the cache holds them already (`norm_rope_append` ran).
pub fn norm_rope_attention_project(style: RopeStyle, dtype: DType) -> Kernel {
    attention_kernel_with(Out::Project(dtype), Some(style), false)
}

/// `attention_part` of the IR's `norm_rope_attention`: its buffers
/// (without `w`) and params (`attention_part`'s, then `eps`, `current`,
/// the rope params); the first block of the first query head of each kv
/// head writes the new rows.
pub fn norm_rope_attention_part(style: RopeStyle) -> Kernel {
    attention_kernel_with(Out::Part, Some(style), false)
}

/// The appends of `norm_rope_attention` where a step holds more than one
/// row a sequence: each new key row normed and rotated (as `norm_rope`)
/// and each value row copied into its cache row (`lengths[b] + si`, in a
/// ring modulo `t`). Buffers `k_new [b, s, n_kv_heads, d]`, `v_new [b,
/// n_kv_heads, s, dv]`, `k_weight`, `positions`, `inv_freq`, `lengths`,
/// `k`, `v` (the caches, in place); params `rows` (b·s·n_kv_heads),
/// `n_kv_heads`, `s`, `t`, `d`, `dv`, `ring`, `eps`, then the rope params.
/// Grid: `rows` groups.
pub fn norm_rope_append(style: RopeStyle) -> Kernel {
    let mut k = Kernel::new(&format!("norm_rope_append_{}", style.name()), WORKGROUP);
    for b in ["k_new", "v_new", "k_weight"] {
        k = k.input(b, Ty::F32);
    }
    k = k.input("positions", Ty::I32).input("inv_freq", Ty::F32).input("lengths", Ty::I32).output("k", Ty::F32).output("v", Ty::F32);
    for p in ["rows", "n_kv_heads", "s", "t", "d", "dv", "ring"] {
        k = k.param(p, Ty::U32);
    }
    k = k.param("eps", Ty::F32).shared("red", Ty::F32, WORKGROUP);
    // row = (bi · s + si) · n_kv_heads + kv_head of `k_new`.
    let mut row = vec![
        let_("kv_head", Ty::U32, var("row") % param("n_kv_heads")),
        let_("token", Ty::U32, var("row") / param("n_kv_heads")),
        let_("bi", Ty::U32, var("token") / param("s")),
        let_("si", Ty::U32, var("token") % param("s")),
        let_("dst", Ty::U32, append_row(var("bi"), var("si"))),
        let_("kv_row", Ty::U32, (var("bi") * param("n_kv_heads") + var("kv_head")) * param("t") + var("dst")),
    ];
    let to_cache = |out: Expr| vec![store("k", var("kv_row") * param("d") + var("c"), out)];
    row.extend(rope::norm_rope_row(style, "k_", "k_new", "k_weight", var("row") * param("d"), load("positions", var("token")), &to_cache));
    let v_row = ((var("bi") * param("n_kv_heads") + var("kv_head")) * param("s") + var("si")) * param("dv");
    row.push(for_(
        "c",
        local_id(),
        param("dv"),
        u(WORKGROUP),
        vec![store("v", var("kv_row") * param("dv") + var("c"), load("v_new", v_row + var("c")))],
    ));
    rope::with_rope_params(k).body(vec![let_("row", Ty::U32, group_index()), if_(var("row").lt(param("rows")), row)])
}

/// The cache row new row `si` of batch row `bi` is appended to, as
/// `kv_append` places it: `lengths[bi] + si`, modulo `t` in a ring.
fn append_row(bi: Expr, si: Expr) -> Expr {
    let dst = load("lengths", bi).cast(Ty::U32) + si;
    select(param("ring").eq(u(1)), dst.clone() % param("t"), dst)
}

/// What an attention kernel writes.
#[derive(Clone, Copy, PartialEq)]
enum Out {
    /// Each query's output, `y`.
    Y,
    /// Its block's accumulator, max and sum (`attention_part`).
    Part,
    /// Its head's share of the projection by a weight of this type (`attention_project`).
    Project(DType),
}

fn attention_kernel(kind: Out) -> Kernel {
    attention_kernel_with(kind, None, false)
}

/// An attention kernel; with `normed` (the rope style), q and the new k
/// rows normed and rotated in it (`norm_rope_attention_project`); with
/// `sinks`, a `sinks` buffer read where the online softmax starts (only
/// for `Out::Y`: a split's blocks leave the sink to the merge).
fn attention_kernel_with(kind: Out, normed: Option<RopeStyle>, sinks: bool) -> Kernel {
    let split = kind == Out::Part;
    assert!(!sinks || (kind == Out::Y && normed.is_none()), "sinks only in the plain attention kernel");
    let (name, out) = match kind {
        Out::Y if sinks => ("attention_sinks".to_string(), "y"),
        Out::Y => ("attention".to_string(), "y"),
        Out::Part => ("attention_part".to_string(), "part"),
        Out::Project(dtype) => (format!("attention_project_{}", dtype.to_string().to_lowercase()), "p"),
    };
    let name = match normed {
        Some(style) => format!("norm_rope_{name}_{}", style.name()),
        None => name,
    };
    let mut k = Kernel::new(&name, WORKGROUP).input("q", Ty::F32);
    if normed.is_some() {
        for b in ["k_new", "v_new", "q_weight", "k_weight"] {
            k = k.input(b, Ty::F32);
        }
        k = k.input("positions", Ty::I32).input("inv_freq", Ty::F32).input("lengths", Ty::I32);
    } else {
        k = k.input("k", Ty::F32).input("v", Ty::F32).input("positions", Ty::I32);
    }
    if sinks {
        k = k.input("sinks", Ty::F32);
    }
    if let Out::Project(_) = kind {
        k = k.input("w", Ty::U32);
    }
    if normed.is_some() {
        k = k.output("k", Ty::F32).output("v", Ty::F32);
    }
    k = k.output(out, Ty::F32);
    for p in ["queries", "n_heads", "n_kv_heads", "s", "t", "d", "dv"] {
        k = k.param(p, Ty::U32);
    }
    k = k.param("scale", Ty::F32).param("softcap", Ty::F32).param("causal", Ty::U32).param("window", Ty::U32).param("ring", Ty::U32);
    if split {
        k = k.param("splits", Ty::U32);
    }
    if let Out::Project(_) = kind {
        k = k.param("n", Ty::U32).param("row_bytes", Ty::U32);
    }
    k = k.shared("red", Ty::F32, WORKGROUP).shared("probs", Ty::F32, WORKGROUP).shared("acc", Ty::F32, MAX_HEAD_DIM);
    if normed.is_some() {
        k = rope::with_rope_params(k.param("eps", Ty::F32).param("current", Ty::U32))
            .shared("q_head", Ty::F32, MAX_HEAD_DIM)
            .shared("k_head", Ty::F32, MAX_HEAD_DIM)
            .shared("v_head", Ty::F32, MAX_HEAD_DIM);
    }

    // Which keys a query at position `pos` sees, as positions
    // `seen_lo..seen_hi`; position x is cache row x, or x % t in a ring (which
    // holds exactly the window's last positions, causal by construction).
    // A workgroup visits `lo..hi`: all of them, or its block's.
    let pos = || var("pos");
    let row_of = |x: Expr| select(param("ring").eq(u(1)), x.clone() % param("t"), x);
    let mut query = vec![
        let_("si", Ty::U32, var("qi") % param("s")),
        let_("head", Ty::U32, (var("qi") / param("s")) % param("n_heads")),
        let_("bi", Ty::U32, var("qi") / (param("s") * param("n_heads"))),
        let_("kv_head", Ty::U32, var("head") / (param("n_heads") / param("n_kv_heads"))),
        let_("kv_base", Ty::U32, (var("bi") * param("n_kv_heads") + var("kv_head")) * param("t")),
        let_("q_base", Ty::U32, var("qi") * param("d")),
        let_("pos", Ty::U32, load("positions", var("bi") * param("s") + var("si")).max(i(0)).cast(Ty::U32)),
        let_(
            "seen_hi",
            Ty::U32,
            select(param("ring").eq(u(1)), pos() + u(1), select(param("causal").eq(u(1)), (pos() + u(1)).min(param("t")), param("t"))),
        ),
        let_("seen_lo", Ty::U32, select(param("window").gt(u(0)).and(pos().ge(param("window"))), pos() + u(1) - param("window"), u(0))),
    ];
    if split {
        query.extend([
            let_("lo", Ty::U32, var("seen_lo") + var("blk") * u(KEYS_PER_SPLIT as u32)),
            let_("hi", Ty::U32, var("seen_hi").min(var("lo") + u(KEYS_PER_SPLIT as u32))),
        ]);
    } else {
        query.extend([let_("lo", Ty::U32, var("seen_lo")), let_("hi", Ty::U32, var("seen_hi"))]);
    }
    if let Some(style) = normed {
        query.extend(normed_prologue(style, split));
    }
    query.extend([
        for_("c", local_id(), param("dv"), u(WORKGROUP), vec![store_shared("acc", var("c"), f(0.0))]),
        // A sink is a score of its own, `exp(sink - m)` in the sum: 1 at `m = sink`.
        let_("m", Ty::F32, if sinks { load("sinks", var("head")) } else { f(NEG_BIG) }),
        let_("l", Ty::F32, f(if sinks { 1.0 } else { 0.0 })),
    ]);
    let mut chunk = vec![
        let_("x", Ty::U32, var("c0") + local_id()),
        let_("valid", Ty::Bool, var("x").lt(var("hi"))),
        let_("score", Ty::F32, f(NEG_BIG)),
        if_(
            var("valid"),
            vec![
                let_("k_base", Ty::U32, (var("kv_base") + row_of(var("x"))) * param("d")),
                let_("dot", Ty::F32, f(0.0)),
                match normed {
                    // The new key from workgroup memory where it is appended.
                    Some(_) => if_else(
                        row_of(var("x")).eq(var("new_row")),
                        vec![for_(
                            "c",
                            u(0),
                            param("d"),
                            u(1),
                            vec![assign("dot", var("dot") + load_shared("q_head", var("c")) * load_shared("k_head", var("c")))],
                        )],
                        vec![for_(
                            "c",
                            u(0),
                            param("d"),
                            u(1),
                            vec![assign("dot", var("dot") + load_shared("q_head", var("c")) * load("k", var("k_base") + var("c")))],
                        )],
                    ),
                    None => for_(
                        "c",
                        u(0),
                        param("d"),
                        u(1),
                        vec![assign("dot", var("dot") + load("q", var("q_base") + var("c")) * load("k", var("k_base") + var("c")))],
                    ),
                },
                assign("score", var("dot") * param("scale")),
                if_(param("softcap").gt(f(0.0)), vec![assign("score", param("softcap") * tanh(var("score") / param("softcap")))]),
            ],
        ),
    ];
    chunk.extend(workgroup_reduce("red", WORKGROUP, var("score"), BinOp::Max));
    chunk.extend([
        let_("m_new", Ty::F32, var("m").max(load_shared("red", u(0)))),
        let_("p", Ty::F32, select(var("valid"), call(Func::Exp, vec![var("score") - var("m_new")]), f(0.0))),
        store_shared("probs", local_id(), var("p")),
    ]);
    // The reduction's leading barrier also publishes `probs`.
    chunk.extend(workgroup_reduce("red", WORKGROUP, var("p"), BinOp::Add));
    chunk.extend([
        let_("rescale", Ty::F32, call(Func::Exp, vec![var("m") - var("m_new")])),
        assign("l", var("l") * var("rescale") + load_shared("red", u(0))),
        assign("m", var("m_new")),
        let_("n_keys", Ty::U32, (var("hi") - var("c0")).min(u(WORKGROUP))),
        for_(
            "c",
            local_id(),
            param("dv"),
            u(WORKGROUP),
            vec![
                let_("sum", Ty::F32, f(0.0)),
                for_("jj", u(0), var("n_keys"), u(1), {
                    let cached = || load("v", (var("kv_base") + row_of(var("c0") + var("jj"))) * param("dv") + var("c"));
                    match normed {
                        // The new value from workgroup memory where it is appended.
                        Some(_) => vec![
                            let_("value", Ty::F32, f(0.0)),
                            if_else(
                                row_of(var("c0") + var("jj")).eq(var("new_row")),
                                vec![assign("value", load_shared("v_head", var("c")))],
                                vec![assign("value", cached())],
                            ),
                            assign("sum", var("sum") + load_shared("probs", var("jj")) * var("value")),
                        ],
                        None => vec![assign("sum", var("sum") + load_shared("probs", var("jj")) * cached())],
                    }
                }),
                store_shared("acc", var("c"), load_shared("acc", var("c")) * var("rescale") + var("sum")),
            ],
        ),
    ]);
    query.push(for_("c0", var("lo"), var("hi"), u(WORKGROUP), chunk));
    if split {
        // This block's accumulator as it stands (relative to its max `m`),
        // then `m` and `l`, for `attention_merge`.
        let base = || var("gi") * (param("dv") + u(2));
        query.push(for_("c", local_id(), param("dv"), u(WORKGROUP), vec![store("part", base() + var("c"), load_shared("acc", var("c")))]));
        query.push(if_(
            local_id().eq(u(0)),
            vec![store("part", base() + param("dv"), var("m")), store("part", base() + param("dv") + u(1), var("l"))],
        ));
        k.body(vec![
            let_("gi", Ty::U32, group_index()),
            let_("qi", Ty::U32, var("gi") / param("splits")),
            let_("blk", Ty::U32, var("gi") % param("splits")),
            if_(var("qi").lt(param("queries")), query),
        ])
    } else {
        // The normalized output: stored, or kept for the head's projection.
        let normalized = select(var("l").gt(f(0.0)), load_shared("acc", var("c")) / var("l"), f(0.0));
        let keep = match kind {
            Out::Project(_) => store_shared("acc", var("c"), normalized),
            _ => store("y", var("qi") * param("dv") + var("c"), normalized),
        };
        query.push(for_("c", local_id(), param("dv"), u(WORKGROUP), vec![keep]));
        if let Out::Project(dtype) = kind {
            query.extend(project_head(dtype));
        }
        k.body(vec![let_("qi", Ty::U32, group_index()), if_(var("qi").lt(param("queries")), query)])
    }
}

/// The prologue of a `normed` attention (`norm_rope_attention_project`):
/// the query's head normed and rotated into `q_head`; with `current`, its
/// kv head's new key into `k_head` and value into `v_head`, their cache row
/// `new_row` (no row otherwise), written there by one workgroup of the kv
/// head (its first query head's; a split's first block).
fn normed_prologue(style: RopeStyle, split: bool) -> Vec<Stmt> {
    let token = || var("bi") * param("s") + var("si");
    let rope_pos = || load("positions", token());
    let q_row = (token() * param("n_heads") + var("head")) * param("d");
    let to_q = |out: Expr| vec![store_shared("q_head", var("c"), out)];
    let mut prologue = rope::norm_rope_row(style, "q_row_", "q", "q_weight", q_row, rope_pos(), &to_q);
    let first_head = (var("head") % (param("n_heads") / param("n_kv_heads"))).eq(u(0));
    let writes = if split { first_head.and(var("blk").eq(u(0))) } else { first_head };
    let cache_row = || var("kv_base") + var("new_row");
    let k_row = (token() * param("n_kv_heads") + var("kv_head")) * param("d");
    let to_k = |out: Expr| {
        vec![store_shared("k_head", var("c"), out.clone()), if_(var("writes"), vec![store("k", cache_row() * param("d") + var("c"), out)])]
    };
    let v_row = ((var("bi") * param("n_kv_heads") + var("kv_head")) * param("s") + var("si")) * param("dv");
    let mut current = vec![assign("new_row", append_row(var("bi"), var("si")))];
    current.extend(rope::norm_rope_row(style, "k_row_", "k_new", "k_weight", k_row, rope_pos(), &to_k));
    current.push(for_(
        "c",
        local_id(),
        param("dv"),
        u(WORKGROUP),
        vec![
            let_("value", Ty::F32, load("v_new", v_row + var("c"))),
            store_shared("v_head", var("c"), var("value")),
            if_(var("writes"), vec![store("v", cache_row() * param("dv") + var("c"), var("value"))]),
        ],
    ));
    prologue.extend([
        let_("writes", Ty::Bool, writes),
        // No cache row is `u32::MAX`: without `current`, every key is read from the cache.
        let_("new_row", Ty::U32, u(u32::MAX)),
        if_(param("current").eq(u(1)), current),
        Stmt::Barrier,
    ]);
    prologue
}

/// Query `qi`'s head's share of the projection: with its normalized
/// output in `acc` (written before this, each slot by its owner), row `j`
/// of `p[b, s, head]` is the dot product of `acc` with weight row `j`'s
/// `dv` columns of this head, decoded group by group (the `attention_project`
/// pass makes sure a head's columns are whole scale groups), summed in
/// column order. Params `n`, `row_bytes`, `n_heads`, `s`, `dv`.
fn project_head(dtype: DType) -> Vec<Stmt> {
    let (be, bb, ge) = (dtype.block_elems() as u32, dtype.block_bytes() as u32, dequant::group_elems(dtype));
    let mut group = vec![
        let_("col", Ty::U32, var("head_p") * param("dv") + var("gc") * u(ge)),
        let_("base", Ty::U32, var("j") * param("row_bytes") + (var("col") / u(be)) * u(bb)),
        let_("grp", Ty::U32, (var("col") % u(be)) / u(ge)),
    ];
    group.extend(dequant::group_setup(dtype, "w", var("base"), var("grp")));
    let element = dequant::group_element(dtype, "w", var("base"), var("grp"), var("le"));
    group.push(for_("le", u(0), u(ge), u(1), vec![assign("share", var("share") + load_shared("acc", var("gc") * u(ge) + var("le")) * element)]));
    let row =
        vec![let_("share", Ty::F32, f(0.0)), for_("gc", u(0), param("dv") / u(ge), u(1), group), store("p", var("p_base") + var("j"), var("share"))];
    vec![
        Stmt::Barrier,
        let_("head_p", Ty::U32, (var("qi") / param("s")) % param("n_heads")),
        // Query (b, head, s) writes row (b, s, head) of `p`.
        let_(
            "p_base",
            Ty::U32,
            (((var("qi") / (param("s") * param("n_heads"))) * param("s") + var("qi") % param("s")) * param("n_heads") + var("head_p")) * param("n"),
        ),
        for_("j", local_id(), param("n"), u(WORKGROUP), row),
    ]
}

/// `y = r + Σ_h p[.., h, ..]` (the IR's `add_partials`): each element's
/// shares summed left to right from 0, then added to the residual (with a
/// post-norm, `norm::add_partials_normed`). Buffers `r [rows, n]`,
/// `p [rows, heads, n]`, `y`; params `total` (rows · n), `n`, `heads`.
/// Grid: `ceil(total / 256)`.
pub fn add_partials() -> Kernel {
    let share = |h: Expr| load("p", (var("row") * param("heads") + h) * param("n") + var("col"));
    let mut body = vec![let_("row", Ty::U32, var("i") / param("n")), let_("col", Ty::U32, var("i") % param("n"))];
    body.extend(super::sum_of_shares("sum", share));
    body.push(store("y", var("i"), load("r", var("i")) + var("sum")));
    Kernel::new("add_partials", WORKGROUP)
        .input("r", Ty::F32)
        .input("p", Ty::F32)
        .output("y", Ty::F32)
        .param("total", Ty::U32)
        .param("n", Ty::U32)
        .param("heads", Ty::U32)
        .body(vec![let_("i", Ty::U32, super::thread_index()), if_(var("i").lt(param("total")), body)])
}

/// The blocks of `attention_part` merged: with `M` the largest block max,
/// each block's accumulator and sum weigh `exp(m - M)`, and `y` is their
/// weighted accumulators over their weighted sums (0 where no key was
/// visible). Buffers `part [queries, splits, dv + 2]`, `y [queries, dv]`;
/// params `queries`, `splits`, `dv`. Grid: `queries` groups.
pub fn attention_merge() -> Kernel {
    merge_kernel(None, false)
}

/// `attention_merge` of an op with sinks: buffers `part`, `sinks
/// [n_heads]`, `y`; params `queries, splits, dv, n_heads, s`. The sink
/// joins the common max and adds `exp(sink - M)` to the sum, once.
pub fn attention_merge_with_sinks() -> Kernel {
    merge_kernel(None, true)
}

/// `attention_merge` with each query's head projected as
/// `attention_project` projects it: buffers `part`, `w`, `p`; params
/// `queries, splits, dv`, then `n`, `row_bytes`, `n_heads`, `s`.
pub fn attention_merge_project(dtype: DType) -> Kernel {
    merge_kernel(Some(dtype), false)
}

fn merge_kernel(project: Option<DType>, sinks: bool) -> Kernel {
    assert!(!(sinks && project.is_some()), "attention_project has no sinks");
    let name = match project {
        None if sinks => "attention_merge_sinks".to_string(),
        None => "attention_merge".to_string(),
        Some(dtype) => format!("attention_merge_project_{}", dtype.to_string().to_lowercase()),
    };
    let mut k = Kernel::new(&name, WORKGROUP).input("part", Ty::F32);
    if sinks {
        k = k.input("sinks", Ty::F32);
    }
    k = match project {
        None => k.output("y", Ty::F32),
        Some(_) => k.input("w", Ty::U32).output("p", Ty::F32),
    };
    k = k.param("queries", Ty::U32).param("splits", Ty::U32).param("dv", Ty::U32);
    if project.is_some() {
        k = k.param("n", Ty::U32).param("row_bytes", Ty::U32).param("n_heads", Ty::U32).param("s", Ty::U32).shared("acc", Ty::F32, MAX_HEAD_DIM);
    }
    if sinks {
        k = k.param("n_heads", Ty::U32).param("s", Ty::U32);
    }
    // Query (b, head, s)'s sink.
    let sink = || load("sinks", (var("qi") / param("s")) % param("n_heads"));
    let block = |sp: Expr| (var("qi") * param("splits") + sp) * (param("dv") + u(2));
    let max_of = |sp: Expr| load("part", block(sp) + param("dv"));
    let weight = |sp: &str| call(Func::Exp, vec![max_of(var(sp)) - var("m")]);
    let merged = select(var("l").gt(f(0.0)), var("sum") / var("l"), f(0.0));
    let keep = match project {
        None => store("y", var("qi") * param("dv") + var("c"), merged),
        Some(_) => store_shared("acc", var("c"), merged),
    };
    let mut query = vec![
        let_("m", Ty::F32, if sinks { sink() } else { f(NEG_BIG) }),
        for_("sp", u(0), param("splits"), u(1), vec![assign("m", var("m").max(max_of(var("sp"))))]),
        let_("l", Ty::F32, if sinks { call(Func::Exp, vec![sink() - var("m")]) } else { f(0.0) }),
        for_("sp", u(0), param("splits"), u(1), vec![assign("l", var("l") + load("part", block(var("sp")) + param("dv") + u(1)) * weight("sp"))]),
        for_(
            "c",
            local_id(),
            param("dv"),
            u(WORKGROUP),
            vec![
                let_("sum", Ty::F32, f(0.0)),
                for_("sp", u(0), param("splits"), u(1), vec![assign("sum", var("sum") + load("part", block(var("sp")) + var("c")) * weight("sp"))]),
                keep,
            ],
        ),
    ];
    if let Some(dtype) = project {
        query.extend(project_head(dtype));
    }
    k.body(vec![let_("qi", Ty::U32, group_index()), if_(var("qi").lt(param("queries")), query)])
}
