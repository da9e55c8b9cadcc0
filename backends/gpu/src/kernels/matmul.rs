//! Dequantize-into-matmul and the embedding gather, for every weight type:
//! the weight is read as checkpoint bytes and decoded inside the kernel
//! (`dequant`), a group's scales once per group; no dequantized copy exists.

use super::{dequant, elementwise, norm, rope, sum_of_shares, thread_index, MAX_STAGED_X, WORKGROUP};
use crate::kir::*;
use graphc_ir::{DType, RopeStyle, UnaryOp};

fn type_name(dtype: DType) -> String {
    dtype.to_string().to_lowercase()
}

/// Rows of `x` a prefill matmul workgroup takes at once: each decoded
/// weight is used `PREFILL_ROWS` times (a decode step uses the 1-row kernel).
pub const PREFILL_ROWS: u32 = 8;

/// Invocations that share one output column (they split its blocks).
/// Rows are short (576 features = 18 q4_1 blocks in SmolLM2), so a whole
/// workgroup per column would leave most of it idle.
pub const THREADS_PER_COLUMN: u32 = 8;

/// Output columns per workgroup.
pub const COLUMNS_PER_GROUP: u32 = WORKGROUP / THREADS_PER_COLUMN;

/// `y[r, j] = Σ_c x[r, c] · w[j, c]` (`x · wᵀ`, w in checkpoint layout),
/// for `rows` rows of `x` per workgroup (1 or `PREFILL_ROWS`).
/// Buffers `x f32 [m, k]`, `w u32` (the bytes of `n` weight rows), `y`;
/// params `m, n, k, row_bytes` (bytes per weight row), `y_cols` (y's row
/// length) and `j0` (the column of y weight row 0 writes: a weight too
/// large for one binding runs as several launches over row ranges). Grid:
/// `ceil(n / COLUMNS_PER_GROUP) · ceil(m / rows)` groups. Each column's
/// `THREADS_PER_COLUMN` invocations sum interleaved whole blocks; a
/// segmented reduction adds their partial sums.
pub fn matmul(dtype: DType, rows: u32, edges: Edges) -> Kernel {
    dense(dtype, rows, Mode::Plain, edges)
}

/// What a `dense` kernel does besides its products: before them, form the
/// RMS norm of each row of `x` it reads (`norm`: the IR's `norm_matmul`,
/// `norm_matmul_glu`); after them, add a residual to what it stores
/// (`residual`: `matmul_add`; plain matmuls only).
///
/// The norm: buffer `norm_w` (its weight, `[k]`) after `x`, param `eps` last.
/// Each workgroup sums its rows' squares by the loop and reduction the
/// `norm` kernel uses (`norm::scale_of_row_at`) and reads `x` as
/// `norm_w · (x · r)`, the `norm` kernel's expression: the products see the
/// values the `norm` kernel would have stored, bit for bit, and no launch
/// or round trip through memory is spent on them. The residual: buffer
/// `r` (of `y`'s shape) after the weights, added to each stored sum.
///
/// Either of `x` and `r` may be a sum the IR's `add_partials` defines,
/// formed here where it is read (`x_partials`, `r_partials`): the value,
/// then buffer `xp` (after `x`) or `rp` (after `r`) of `heads` shares per
/// row (`[rows, heads, cols]`), and param `heads` last. Each element is
/// `value + s` with `s` the shares summed left to right from 0, as the
/// `add_partials` kernel forms it; with `x_partials_norm`, `x` is the
/// post-normed sum (`add_partials{eps}`: `value + rms_norm(s, xg)` as
/// `norm_add` forms it: buffer `xg` after `xp`, param `eps_p` after
/// `heads`, and the kernel's rounding parameter last). The tile's rows of `x` so formed are
/// staged in workgroup memory once (a decode step's few rows: `rows · k`
/// at most `MAX_STAGED_X`, checked where it is lowered), where the norm
/// and the products read them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Edges {
    pub norm: bool,
    pub residual: bool,
    pub x_partials: bool,
    pub x_partials_norm: bool,
    pub r_partials: bool,
}

impl Edges {
    pub const NONE: Edges = Edges { norm: false, residual: false, x_partials: false, x_partials_norm: false, r_partials: false };
    pub const NORM: Edges = Edges { norm: true, ..Edges::NONE };
    pub const RESIDUAL: Edges = Edges { residual: true, ..Edges::NONE };
}

/// The gated MLP's two projections and their product in one launch:
/// `y[r, j] = act(x[r]·w_gate[j]) · (x[r]·w_up[j])`, each dot product
/// summed exactly as `matmul` sums it and the product as the `glu` kernel
/// forms it, so the result is what `glu(matmul, matmul)` gives with two
/// fewer launches and neither projection written to memory. Buffers
/// `x, w_gate, w_up` (same type, same rows), `y`; params and grid as
/// `matmul`'s.
pub fn matmul_glu(dtype: DType, rows: u32, act: UnaryOp, edges: Edges) -> Kernel {
    dense(dtype, rows, Mode::Gated(act), edges)
}

/// Several projections of one `x` in one launch (a layer's q, k and v):
/// weights `w0 .. w{count-1}` of one type and row length, stacked along
/// the output columns; column `j` of the stack is row `j - n_before` of
/// the weight it falls in, summed exactly as `matmul` sums it and stored
/// to that weight's own output. Buffers `x`, `w0 ..`, `y0 ..`; params
/// `m, n` (all weights' rows), `k, row_bytes`, and `n0 ..` (each weight's
/// rows but the last's). Grid as `matmul`'s over `n` columns.
pub fn matmul_stacked(dtype: DType, rows: u32, count: u32, edges: Edges) -> Kernel {
    dense(dtype, rows, Mode::Stacked(count), edges)
}

/// `matmul_stacked` over weights of different types with one block size
/// (Gemma 3's q5_0 q and k beside a q8_0 v): weight `i` is decoded as
/// `types[i]`, its rows `row_bytes{i}` bytes apart; params `m, n, k,
/// row_bytes0 ..`, then `n0 ..`. Each column is summed exactly as
/// `matmul` over its own weight sums it.
pub fn matmul_stacked_mixed(types: &[DType], rows: u32, edges: Edges) -> Kernel {
    let block_elems = types[0].block_elems();
    assert!(types.iter().all(|t| t.block_elems() == block_elems), "a mixed stack shares one block size: {types:?}");
    dense_of(types[0], rows, Mode::Stacked(types.len() as u32), types, edges)
}

/// A llama layer's attention inputs in one launch: its q, k and v
/// projections of `x` stacked as `matmul_stacked` stacks them, with the
/// ops that follow them in the graph done in the epilogue: q and k rotated
/// (`rope`), q stored heads-major (`[b, hq, s, d]`, the
/// permuted layout), k and v appended into their caches (`kv_append` at
/// each batch row's `lengths[b]`, modulo `cap` in a ring). A pair's two
/// features are neighbouring columns of one workgroup (pairs start at even
/// columns, and every weight's rows and the head size are even), so a
/// column reads its partner's sum from workgroup memory. Every value is
/// formed with the expressions of `matmul_stacked`, `rope` and
/// `kv_append`: the result is theirs bit for bit, with four launches
/// fewer per layer and none of q, k, v or rotated k in memory.
/// Buffers `x`, `w0 w1 w2` (q, k, v weights), `positions i32 [b, s]`,
/// `inv_freq`, `q` (out), `k_cache`, `v_cache` (written in place),
/// `lengths i32 [b]`; params `matmul_stacked`'s (`m, n, k, row_bytes, n0,
/// n1`), then `s` (tokens per batch row: row `t` of `x` is token `t % s`
/// of batch row `t / s`), `d` (q and k head size), `dv`, `hq`, `hk`, `hv`
/// (heads of each), `cap`, `ring` (0/1), then `rope`'s `half`,
/// `pos_divisor`, `magnitude`. Grid as `matmul_stacked`'s.
///
/// Rotating by halves (`RopeStyle::Neox`, pairs `(c, c + half)`), a
/// workgroup's columns are laid out pair by pair: q's or k's column `jl`
/// of the stack computes weight row `jr` (within a head: column `2p` is
/// feature `p`, column `2p + 1` feature `p + half`; features past the
/// rotary part keep their place), so the partner is again the neighbouring
/// column.
///
/// `types`: the three weights' types (one block size; where they differ,
/// each weight's rows are `row_bytes{i}` apart, as `matmul_stacked_mixed`
/// takes them). `bias`: buffers `b0 b1 b2` after `lengths`, each
/// projection's bias, added to a column's sum before the rotation (as the
/// `add` that follows the projection in the graph adds it).
pub fn matmul_qkv_rope(types: [DType; 3], bias: bool, rows: u32, style: RopeStyle, edges: Edges) -> Kernel {
    let block_elems = types[0].block_elems();
    assert!(types.iter().all(|t| t.block_elems() == block_elems), "a head's weights share one block size: {types:?}");
    let mixed: &[DType] = if types.iter().all(|&t| t == types[0]) { &[] } else { &types };
    dense_of(types[0], rows, Mode::QkvRope(style, bias), mixed, edges)
}

/// What one `dense` kernel computes per output column.
#[derive(Clone, Copy)]
enum Mode {
    /// `x · wᵀ`.
    Plain,
    /// `act(x · w_gateᵀ) · (x · w_upᵀ)`.
    Gated(UnaryOp),
    /// Column ranges of `count` weights, each to its own output.
    Stacked(u32),
    /// The stack of q, k, v with rotation and cache appends (`matmul_qkv_rope`),
    /// and with each projection's bias where set.
    QkvRope(RopeStyle, bool),
}

/// One weight's blocks `blk` of weight row `row` (a local), accumulated
/// into `{prefix}{r}` for each of the tile's rows; `base` names the row's
/// byte offset.
/// `x`'s rows a kernel reads: how many, and whether it reads them normed
/// (`Edges::norm`).
#[derive(Clone, Copy)]
struct Tile {
    rows: u32,
    norm: bool,
    /// `x`'s tile rows are staged in workgroup array `xs`, row after row.
    staged: bool,
}

fn accumulate(dtype: DType, tile: Tile, w: &str, base: &str, row: &str, prefix: &str, row_bytes: &str) -> Vec<Stmt> {
    let Tile { rows, norm, staged } = tile;
    let (be, bb, ge) = (dtype.block_elems() as u32, dtype.block_bytes() as u32, dequant::group_elems(dtype));
    let mut element = vec![
        let_("v", Ty::F32, dequant::group_element(dtype, w, var(base), var("grp"), var("l"))),
        let_("col", Ty::U32, var("blk") * u(be) + var("grp") * u(ge) + var("l")),
    ];
    for r in 0..rows {
        let a = format!("{prefix}{r}");
        let mut x = if staged { load_shared("xs", u(r) * param("k") + var("col")) } else { load("x", (var("r0") + u(r)) * param("k") + var("col")) };
        if norm {
            x = load("norm_w", var("col")) * (x * var(&format!("r_norm{r}")));
        }
        let add = assign(&a, var(&a) + x * var("v"));
        // Rows past `m` in the last tile are not read.
        element.push(if r == 0 { add } else { if_((var("r0") + u(r)).lt(param("m")), vec![add]) });
    }
    let mut group = dequant::group_setup(dtype, w, var(base), var("grp"));
    group.push(for_("l", u(0), u(ge), u(1), element));
    vec![let_(base, Ty::U32, var(row) * param(row_bytes) + var("blk") * u(bb)), for_("grp", u(0), u(be / ge), u(1), group)]
}

/// `matmul`, `matmul_glu` or `matmul_stacked` (`mode`): the sums kept
/// per row are `acc{r}` (one weight, or the stack's weight of the
/// column), or `gate{r}` and `up{r}`.
fn dense(dtype: DType, rows: u32, mode: Mode, edges: Edges) -> Kernel {
    dense_of(dtype, rows, mode, &[], edges)
}

/// `dense`, with a stack's weights of the `mixed` types where not empty.
fn dense_of(dtype: DType, rows: u32, mode: Mode, mixed: &[DType], edges: Edges) -> Kernel {
    assert!(!edges.residual || matches!(mode, Mode::Plain), "a residual epilogue is a plain matmul's");
    assert!(!edges.r_partials || edges.residual, "residual partials need a residual");
    assert!(!edges.x_partials || !edges.r_partials, "x's partials or r's, not both");
    assert!(!edges.x_partials_norm || edges.x_partials, "a post-norm of x's partials needs them");
    let tile = Tile { rows, norm: edges.norm, staged: edges.x_partials };
    let be = dtype.block_elems() as u32;
    // Weight `i`'s type and row stride parameter.
    let weight = |i: u32| match mixed.get(i as usize) {
        Some(&t) => (t, format!("row_bytes{i}")),
        None => (dtype, "row_bytes".to_string()),
    };
    let prefixes: &[&str] = match mode {
        Mode::Gated(_) => &["gate", "up"],
        _ => &["acc"],
    };
    let column_groups = (param("n") + u(COLUMNS_PER_GROUP - 1)) / u(COLUMNS_PER_GROUP);
    let mut out = vec![
        let_("lane", Ty::U32, local_id() % u(THREADS_PER_COLUMN)),
        let_("j", Ty::U32, (var("g") % column_groups.clone()) * u(COLUMNS_PER_GROUP) + local_id() / u(THREADS_PER_COLUMN)),
        let_("r0", Ty::U32, (var("g") / column_groups.clone()) * u(rows)),
    ];
    for prefix in prefixes {
        out.extend((0..rows).map(|r| let_(&format!("{prefix}{r}"), Ty::F32, f(0.0))));
    }
    // Tile row `r`'s row of `x`; a row past `m` takes the last row's (never
    // stored), as every invocation must reach the barriers of a row's norm.
    let x_row = |r: u32| select((var("r0") + u(r)).lt(param("m")), var("r0") + u(r), param("m") - u(1));
    if edges.x_partials {
        // The tile's rows `add_partials` defines, formed once into `xs`.
        for r in 0..rows {
            let share = |h: Expr| load("xp", (x_row(r) * param("heads") + h) * param("k") + var("c"));
            let mut stage = sum_of_shares("xs_sum", share);
            // With a post-norm, the sum alone first; normed and added below.
            let value = if edges.x_partials_norm { var("xs_sum") } else { load("x", x_row(r) * param("k") + var("c")) + var("xs_sum") };
            stage.push(store_shared("xs", u(r) * param("k") + var("c"), value));
            out.push(for_("c", local_id(), param("k"), u(WORKGROUP), stage));
        }
        out.push(Stmt::Barrier);
        if edges.x_partials_norm {
            // `r + rms_norm(s, xg)` as `norm_add` forms it, each feature by its owner.
            for r in 0..rows {
                out.extend(norm::scale_of_row_of(|c| load_shared("xs", u(r) * param("k") + c), param("k"), &format!("_p{r}"), "eps_p", false));
                let at = u(r) * param("k") + var("c");
                let normed = norm::post_normed(load("xg", var("c")), load_shared("xs", at.clone()), var(&format!("r_p{r}")));
                let value = load("x", x_row(r) * param("k") + var("c")) + normed;
                out.push(for_("c", local_id(), param("k"), u(WORKGROUP), vec![store_shared("xs", at, value)]));
            }
            out.push(Stmt::Barrier);
        }
    }
    if edges.norm && edges.x_partials {
        for r in 0..rows {
            out.extend(norm::scale_of_row_of(|c| load_shared("xs", u(r) * param("k") + c), param("k"), &format!("_norm{r}"), "eps", false));
        }
    } else if edges.norm {
        // Each tile row's norm scale `r_norm{r}`.
        for r in 0..rows {
            out.extend(norm::scale_of_row_at("x", x_row(r) * param("k"), param("k"), &format!("_norm{r}"), "eps", false));
        }
    }
    // For a stack: which weight column `j` falls in (`which`), and its row there (`jl`).
    let count = match mode {
        Mode::Stacked(count) => count,
        Mode::QkvRope(..) => 3,
        _ => 0,
    };
    // The stack's first column of weight `i` (i ≥ 1).
    let first_row = |i: u32| (1..i).fold(param("n0"), |sum, b| sum + param(&format!("n{b}")));
    if count > 0 {
        out.push(let_("which", Ty::U32, u(0)));
        out.push(let_("jl", Ty::U32, var("j")));
        for i in 1..count {
            let past = var("j").ge(first_row(i));
            out.push(if_(past, vec![assign("which", u(i)), assign("jl", var("j") - first_row(i))]));
        }
    }
    // Rotating by halves: the weight row a q or k column computes (`jr`).
    let row_of_column = if let Mode::QkvRope(RopeStyle::Neox, _) = mode {
        let within = || var("jl") % param("d");
        let pair_member = (var("jl") / param("d")) * param("d") + within() / u(2) + (within() % u(2)) * param("half");
        out.push(let_("jr", Ty::U32, var("jl")));
        out.push(if_(var("which").lt(u(2)).and(within().lt(param("half") * u(2))), vec![assign("jr", pair_member)]));
        "jr"
    } else {
        "jl"
    };
    let blocks: Vec<Stmt> = match mode {
        Mode::Plain => accumulate(dtype, tile, "w", "base", "j", "acc", "row_bytes"),
        // The dequantizer's locals live in each weight's own group loop.
        Mode::Gated(_) => [
            accumulate(dtype, tile, "w_gate", "base_gate", "j", "gate", "row_bytes"),
            accumulate(dtype, tile, "w_up", "base_up", "j", "up", "row_bytes"),
        ]
        .concat(),
        Mode::Stacked(_) | Mode::QkvRope(..) => (0..count)
            .map(|i| {
                let (t, row_bytes) = weight(i);
                if_(var("which").eq(u(i)), accumulate(t, tile, &format!("w{i}"), "base", row_of_column, "acc", &row_bytes))
            })
            .collect(),
    };
    out.push(if_(var("j").lt(param("n")), vec![for_("blk", var("lane"), param("k") / u(be), u(THREADS_PER_COLUMN), blocks)]));
    for r in 0..rows {
        let value = match mode {
            Mode::Plain | Mode::Stacked(_) | Mode::QkvRope(..) => {
                out.extend(segmented_reduce("red", WORKGROUP, THREADS_PER_COLUMN, var(&format!("acc{r}")), BinOp::Add));
                if let Mode::QkvRope(_, true) = mode {
                    // The bias joins the sum where the partner column reads it.
                    let add_bias = (0..count)
                        .map(|i| {
                            let biased = load_shared("red", local_id()) + load(&format!("b{i}"), var(row_of_column));
                            if_(var("which").eq(u(i)), vec![store_shared("red", local_id(), biased)])
                        })
                        .collect();
                    out.push(if_(var("lane").eq(u(0)).and(var("j").lt(param("n"))), add_bias));
                    out.push(Stmt::Barrier);
                }
                load_shared("red", local_id())
            }
            Mode::Gated(act) => {
                out.extend(segmented_reduce("red", WORKGROUP, THREADS_PER_COLUMN, var(&format!("gate{r}")), BinOp::Add));
                out.push(let_(&format!("g{r}"), Ty::F32, load_shared("red", local_id())));
                out.extend(segmented_reduce("red", WORKGROUP, THREADS_PER_COLUMN, var(&format!("up{r}")), BinOp::Add));
                elementwise::unary_expr(act, var(&format!("g{r}"))) * load_shared("red", local_id())
            }
        };
        let row_ok = var("lane").eq(u(0)).and(var("j").lt(param("n"))).and((var("r0") + u(r)).lt(param("m")));
        let stores = match mode {
            Mode::Stacked(count) => (0..count)
                .map(|i| {
                    // The last weight's rows: what the others leave of `n`.
                    let n_i = if i + 1 < count { param(&format!("n{i}")) } else { param("n") - first_row(i) };
                    if_(var("which").eq(u(i)), vec![store(&format!("y{i}"), (var("r0") + u(r)) * n_i + var("jl"), value.clone())])
                })
                .collect(),
            Mode::QkvRope(style, _) => qkv_rope_stores(r, value, style),
            _ => {
                let at = (var("r0") + u(r)) * param("y_cols") + param("j0") + var("j");
                if edges.r_partials {
                    let share = |h: Expr| load("rp", ((var("r0") + u(r)) * param("heads") + h) * param("y_cols") + param("j0") + var("j"));
                    let mut stmts = sum_of_shares("r_sum", share);
                    stmts.push(store("y", at.clone(), value + (load("r", at) + var("r_sum"))));
                    stmts
                } else {
                    let value = if edges.residual { value + load("r", at.clone()) } else { value };
                    vec![store("y", at, value)]
                }
            }
        };
        out.push(if_(row_ok, stores));
    }
    let suffix = if rows == 1 { String::new() } else { format!("_x{rows}") };
    let prefix = if edges.norm { "norm_" } else { "" };
    let name = match mode {
        Mode::Plain if edges.residual => format!("matmul_add_{}{suffix}", type_name(dtype)),
        Mode::Plain => format!("matmul_{}{suffix}", type_name(dtype)),
        Mode::Gated(act) => format!("matmul_glu_{}_{}{suffix}", act.name(), type_name(dtype)),
        Mode::Stacked(count) if !mixed.is_empty() => {
            format!("matmul{count}_{}{suffix}", mixed.iter().map(|&t| type_name(t)).collect::<Vec<_>>().join("_"))
        }
        Mode::Stacked(count) => format!("matmul{count}_{}{suffix}", type_name(dtype)),
        Mode::QkvRope(style, bias) => {
            let types =
                if mixed.is_empty() { type_name(dtype).to_string() } else { mixed.iter().map(|&t| type_name(t)).collect::<Vec<_>>().join("_") };
            format!("matmul_qkv_rope_{}_{types}{}{suffix}", style.name(), if bias { "_bias" } else { "" })
        }
    };
    let partials = match (edges.x_partials, edges.r_partials) {
        (true, _) if edges.x_partials_norm => "_xpn",
        (true, _) => "_xp",
        (_, true) => "_rp",
        _ => "",
    };
    let name = format!("{prefix}{name}{partials}");
    let tiles = (param("m") + u(rows - 1)) / u(rows);
    let mut kernel = Kernel::new(&name, WORKGROUP).input("x", Ty::F32);
    if edges.x_partials {
        kernel = kernel.input("xp", Ty::F32);
    }
    if edges.x_partials_norm {
        kernel = kernel.input("xg", Ty::F32);
    }
    if edges.norm {
        kernel = kernel.input("norm_w", Ty::F32);
    }
    kernel = match mode {
        Mode::Plain if edges.r_partials => kernel.input("w", Ty::U32).input("r", Ty::F32).input("rp", Ty::F32).output("y", Ty::F32),
        Mode::Plain if edges.residual => kernel.input("w", Ty::U32).input("r", Ty::F32).output("y", Ty::F32),
        Mode::Plain => kernel.input("w", Ty::U32).output("y", Ty::F32),
        Mode::Gated(_) => kernel.input("w_gate", Ty::U32).input("w_up", Ty::U32).output("y", Ty::F32),
        Mode::Stacked(count) => {
            let with_weights = (0..count).fold(kernel, |k, i| k.input(&format!("w{i}"), Ty::U32));
            (0..count).fold(with_weights, |k, i| k.output(&format!("y{i}"), Ty::F32))
        }
        Mode::QkvRope(_, bias) => {
            let head = (0..3)
                .fold(kernel, |k, i| k.input(&format!("w{i}"), Ty::U32))
                .input("positions", Ty::I32)
                .input("inv_freq", Ty::F32)
                .output("q", Ty::F32)
                .output("k_cache", Ty::F32)
                .output("v_cache", Ty::F32)
                .input("lengths", Ty::I32);
            match bias {
                true => (0..3).fold(head, |k, i| k.input(&format!("b{i}"), Ty::F32)),
                false => head,
            }
        }
    };
    kernel = kernel.param("m", Ty::U32).param("n", Ty::U32).param("k", Ty::U32);
    kernel = match mixed.len() {
        0 => kernel.param("row_bytes", Ty::U32),
        types => (0..types).fold(kernel, |k, i| k.param(&format!("row_bytes{i}"), Ty::U32)),
    };
    kernel = match mode {
        Mode::Stacked(count) => (0..count - 1).fold(kernel, |k, i| k.param(&format!("n{i}"), Ty::U32)),
        Mode::QkvRope(..) => {
            let stacked = kernel.param("n0", Ty::U32).param("n1", Ty::U32);
            let shape = ["s", "d", "dv", "hq", "hk", "hv", "cap", "ring"].iter().fold(stacked, |k, p| k.param(p, Ty::U32));
            rope::with_rope_params(shape)
        }
        _ => kernel.param("y_cols", Ty::U32).param("j0", Ty::U32),
    };
    if edges.norm {
        kernel = kernel.param("eps", Ty::F32);
    }
    if edges.x_partials || edges.r_partials {
        kernel = kernel.param("heads", Ty::U32);
    }
    if edges.x_partials_norm {
        kernel = kernel.param("eps_p", Ty::F32).rounded_ops();
    }
    if edges.x_partials {
        kernel = kernel.shared("xs", Ty::F32, MAX_STAGED_X);
    }
    kernel.shared("red", Ty::F32, WORKGROUP).body(vec![let_("g", Ty::U32, group_index()), if_(var("g").lt(column_groups * tiles), out)])
}

/// `matmul_qkv_rope`'s epilogue for tile row `r`, run by a column's lane 0
/// once its sum `value` is in workgroup memory: column `jl` of weight
/// `which` is feature `c` of head `jl / d` (`dv` for v; for q and k
/// rotated by halves, the feature of its weight row `jr`).
fn qkv_rope_stores(r: u32, value: Expr, style: RopeStyle) -> Vec<Stmt> {
    let head_feature = |d: &str| vec![let_("head", Ty::U32, var("jl") / param(d)), let_("c", Ty::U32, var("jl") % param(d))];
    let rotated_feature = || match style {
        RopeStyle::GptJ => head_feature("d"),
        RopeStyle::Neox => vec![let_("head", Ty::U32, var("jl") / param("d")), let_("c", Ty::U32, var("jr") % param("d"))],
    };
    // The partner sits one column over: after an even column (within the head), before an odd one.
    let even_column = match style {
        RopeStyle::GptJ => (var("c") % u(2)).eq(u(0)),
        RopeStyle::Neox => ((var("jl") % param("d")) % u(2)).eq(u(0)),
    };
    // The cache row `kv_append` writes this token to.
    let cache_row = vec![
        let_("dst", Ty::U32, load("lengths", var("bi")).cast(Ty::U32) + var("si")),
        if_(param("ring").eq(u(1)), vec![assign("dst", var("dst") % param("cap"))]),
    ];
    // The partner column's lane 0: one column over (the pair is `c`, `c ± 1`).
    let partner_sum = load_shared("red", select(even_column, local_id() + u(THREADS_PER_COLUMN), local_id() - u(THREADS_PER_COLUMN)));
    let rotate = || {
        let mut s = vec![let_("pos", Ty::I32, load("positions", var("row")))];
        s.extend(rope::rotated_from(style, var("pos"), var("own"), partner_sum.clone()));
        s
    };
    let mut q = rotated_feature();
    q.extend(rotate());
    q.push(store("q", ((var("bi") * param("hq") + var("head")) * param("s") + var("si")) * param("d") + var("c"), var("out")));
    let mut k = rotated_feature();
    k.extend(rotate());
    k.extend(cache_row.clone());
    k.push(store("k_cache", ((var("bi") * param("hk") + var("head")) * param("cap") + var("dst")) * param("d") + var("c"), var("out")));
    let mut v = head_feature("dv");
    v.extend(cache_row);
    v.push(store("v_cache", ((var("bi") * param("hv") + var("head")) * param("cap") + var("dst")) * param("dv") + var("c"), var("own")));
    vec![
        let_("row", Ty::U32, var("r0") + u(r)),
        let_("bi", Ty::U32, var("row") / param("s")),
        let_("si", Ty::U32, var("row") % param("s")),
        let_("own", Ty::F32, value),
        if_(var("which").eq(u(0)), q),
        if_(var("which").eq(u(1)), k),
        if_(var("which").eq(u(2)), v),
    ]
}

/// `y[t, :] = table[ids[t], :]` decoded to f32, for the ids in table rows
/// `row_lo .. row_lo + rows` (a table too large for one binding runs as
/// several launches over row ranges; each writes only its ids' rows).
/// Buffers `table u32` (the bytes of those rows), `ids i32 [n_ids]`,
/// `y f32 [n_ids, d]`; params `n` (= n_ids · d), `d`, `rows`, `row_bytes`,
/// `row_lo`. Ids are checked on the host before launch. Grid: `ceil(n / 256)`.
pub fn gather(dtype: DType) -> Kernel {
    let (be, bb, ge) = (dtype.block_elems() as u32, dtype.block_bytes() as u32, dequant::group_elems(dtype));
    let mut row = vec![
        let_("col", Ty::U32, var("i") % param("d")),
        let_("base", Ty::U32, (var("id").cast(Ty::U32) - param("row_lo")) * param("row_bytes") + (var("col") / u(be)) * u(bb)),
        let_("grp", Ty::U32, (var("col") % u(be)) / u(ge)),
        let_("l", Ty::U32, var("col") % u(ge)),
    ];
    row.extend(dequant::group_setup(dtype, "table", var("base"), var("grp")));
    row.push(store("y", var("i"), dequant::group_element(dtype, "table", var("base"), var("grp"), var("l"))));
    let local = var("id").cast(Ty::U32) - param("row_lo");
    let mine = var("id").ge(i(0)).and(var("id").cast(Ty::U32).ge(param("row_lo"))).and(local.lt(param("rows")));
    let body = vec![let_("id", Ty::I32, load("ids", var("i") / param("d"))), if_(mine, row)];
    Kernel::new(&format!("gather_{}", type_name(dtype)), WORKGROUP)
        .input("table", Ty::U32)
        .input("ids", Ty::I32)
        .output("y", Ty::F32)
        .param("n", Ty::U32)
        .param("d", Ty::U32)
        .param("rows", Ty::U32)
        .param("row_bytes", Ty::U32)
        .param("row_lo", Ty::U32)
        .body(vec![let_("i", Ty::U32, thread_index()), if_(var("i").lt(param("n")), body)])
}
