//! The fused kernels, each written once in the kernel IR (`kir`), one file
//! per kernel class. Each generator's doc comment is its host contract: the
//! buffers and parameters in binding order, and the grid it is launched on.
//! `catalog()` lists one instance of every kernel (for the golden
//! snapshots, naga validation and the NVRTC compile test).

pub mod attention;
pub mod dequant;
pub mod elementwise;
pub mod kv_append;
pub mod layout;
pub mod matmul;
pub mod norm;
pub mod recurrent;
pub mod reduce;
pub mod rope;
pub mod softmax;

use crate::kir::{assign, f, for_, group_index, let_, local_id, param, u, var, Expr, Kernel, Stmt, Ty};
use graphc_ir::{BinaryOp, ChainExpr, DType, NormKind, ReduceOp, RopeStyle, UnaryOp};

/// Invocations per workgroup for every kernel here: a power of two (the
/// tree reductions need one) that every target and lavapipe allow.
pub const WORKGROUP: u32 = 256;

/// The invocation's linear index over the whole grid (one-element-per-thread kernels).
pub fn thread_index() -> Expr {
    group_index() * u(WORKGROUP) + local_id()
}

/// `share(h)` for `h` in `0..heads` (a parameter) summed left to right
/// from 0 into local `sum`: how every kernel that forms the IR's
/// `add_partials` sums the shares (alone, or in a reader's prologue or
/// epilogue), so each of them gives the same bits.
pub(crate) fn sum_of_shares(sum: &str, share: impl Fn(Expr) -> Expr) -> Vec<Stmt> {
    vec![let_(sum, Ty::F32, f(0.0)), for_("hp", u(0), param("heads"), u(1), vec![assign(sum, var(sum) + share(var("hp")))])]
}

/// Statements splitting the linear index `i` into `i0..i3` over a rank-4
/// shape `[_, d1, d2, d3]` (params): the broadcasting and layout kernels'
/// index math.
pub fn unravel4() -> Vec<crate::kir::Stmt> {
    use crate::kir::*;
    vec![
        let_("i3", Ty::U32, var("i") % param("d3")),
        let_("rest", Ty::U32, var("i") / param("d3")),
        let_("i2", Ty::U32, var("rest") % param("d2")),
        assign("rest", var("rest") / param("d2")),
        let_("i1", Ty::U32, var("rest") % param("d1")),
        let_("i0", Ty::U32, var("rest") / param("d1")),
    ]
}

/// The weight storage types the matmul and gather kernels read.
pub const WEIGHT_DTYPES: [DType; 15] = [
    DType::F32,
    DType::F16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::IQ4NL,
    DType::IQ4XS,
    DType::MXFP4,
];

/// Most features a kernel stages in workgroup memory (rows of `x` formed
/// from an `add_partials`: `matmul::Edges::x_partials`; a row of a sum
/// in the `norm` kernels): 12 KiB of the 16 KiB of workgroup memory every
/// target gives.
pub const MAX_STAGED_X: u32 = 3072;

/// One instance of every kernel, grouped by class: `(class, kernel)`.
pub fn catalog() -> Vec<(&'static str, Kernel)> {
    let mut all = vec![];
    for op in [UnaryOp::Silu, UnaryOp::GeluTanh, UnaryOp::GeluErf, UnaryOp::Exp] {
        all.push(("elementwise", elementwise::unary(op)));
    }
    for op in [BinaryOp::Add, BinaryOp::Mul] {
        all.push(("elementwise", elementwise::binary(op)));
    }
    // Gemma 2's final logit soft-cap, `c * tanh(x / c)`, as one chain.
    let softcap = ChainExpr::Binary(
        BinaryOp::Mul,
        Box::new(ChainExpr::Unary(
            UnaryOp::Tanh,
            Box::new(ChainExpr::Binary(BinaryOp::Div, Box::new(ChainExpr::Input(0)), Box::new(ChainExpr::Input(1)))),
        )),
        Box::new(ChainExpr::Input(1)),
    );
    all.push(("elementwise", elementwise::chain(&softcap, 2)));
    all.push(("glu", elementwise::glu(UnaryOp::Silu)));
    all.push(("glu", elementwise::glu(UnaryOp::GeluTanh)));
    all.push(("norm", norm::norm(NormKind::Rms)));
    all.push(("norm", norm::norm(NormKind::Layer)));
    all.push(("norm", norm::add_norm(NormKind::Rms)));
    all.push(("norm", norm::add_norm(NormKind::Layer)));
    all.push(("rope", rope::rope(RopeStyle::Neox)));
    all.push(("rope", rope::rope(RopeStyle::GptJ)));
    all.push(("rope", rope::norm_rope(RopeStyle::Neox)));
    all.push(("softmax", softmax::softmax()));
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Mean] {
        all.push(("reduce", reduce::reduce(op)));
    }
    all.push(("router", reduce::top_k_mask()));
    all.push(("router", reduce::sparse_mixer()));
    all.push(("norm", norm::norm_add()));
    // Each matmul kind plain and with its input's norm (and a plain one with its residual add).
    let (none, normed) = (matmul::Edges::NONE, matmul::Edges::NORM);
    for dtype in WEIGHT_DTYPES {
        for rows in [1, matmul::PREFILL_ROWS] {
            for edges in [none, normed, matmul::Edges::RESIDUAL] {
                all.push(("matmul", matmul::matmul(dtype, rows, edges)));
            }
            for edges in [none, normed] {
                all.push(("matmul_glu", matmul::matmul_glu(dtype, rows, UnaryOp::Silu, edges)));
                all.push(("matmul_stacked", matmul::matmul_stacked(dtype, rows, 3, edges)));
            }
        }
        all.push(("gather", matmul::gather(dtype)));
    }
    for dtype in WEIGHT_DTYPES {
        for edges in [none, normed] {
            all.push(("matmul_qkv_rope", matmul::matmul_qkv_rope([dtype; 3], false, 1, RopeStyle::GptJ, edges)));
        }
    }
    for edges in [none, normed] {
        all.push(("matmul_qkv_rope", matmul::matmul_qkv_rope([DType::Q4_1; 3], false, matmul::PREFILL_ROWS, RopeStyle::GptJ, edges)));
        // Rotating by halves (Gemma 1/2, Qwen2): one weight type, decode and prefill.
        all.push(("matmul_qkv_rope", matmul::matmul_qkv_rope([DType::F32; 3], false, 1, RopeStyle::Neox, edges)));
        all.push(("matmul_qkv_rope", matmul::matmul_qkv_rope([DType::F32; 3], false, matmul::PREFILL_ROWS, RopeStyle::Neox, edges)));
        // Qwen2.5's head: q5_0 q and k beside a q8_0 v, with biases.
        let qwen25 = [DType::Q5_0, DType::Q5_0, DType::Q8_0];
        all.push(("matmul_qkv_rope", matmul::matmul_qkv_rope(qwen25, true, 1, RopeStyle::Neox, edges)));
        all.push(("matmul_qkv_rope", matmul::matmul_qkv_rope(qwen25, true, matmul::PREFILL_ROWS, RopeStyle::Neox, edges)));
        // Gemma 3's q and k beside a v of another type with the same block size.
        all.push(("matmul_stacked", matmul::matmul_stacked_mixed(&[DType::Q5_0, DType::Q5_0, DType::Q8_0], 1, edges)));
        all.push(("matmul_stacked", matmul::matmul_stacked_mixed(&[DType::Q5_0, DType::Q5_0, DType::Q8_0], matmul::PREFILL_ROWS, edges)));
        // Two of a type where the third's block size differs.
        all.push(("matmul_stacked", matmul::matmul_stacked(DType::Q5_0, 1, 2, edges)));
        // GeGLU's (Gemma's) activation in the fused epilogue.
        all.push(("matmul_glu", matmul::matmul_glu(DType::Q4K, 1, UnaryOp::GeluTanh, edges)));
    }
    all.push(("attention", attention::attention()));
    all.push(("attention", attention::attention_part()));
    all.push(("attention", attention::attention_merge()));
    all.push(("attention", attention::attention_with_sinks()));
    all.push(("attention", attention::attention_merge_with_sinks()));
    for (lower, upper) in [(true, true), (true, false), (false, true)] {
        all.push(("elementwise", elementwise::clamp(lower, upper)));
    }
    // Attention projected by head (`attention_project`), whole or merged
    // from split blocks, over each weight type; and the shares' sum, alone
    // or formed where a matmul reads it (x staged in its prologue, a
    // residual in its epilogue).
    for dtype in WEIGHT_DTYPES {
        all.push(("attention_project", attention::attention_project(dtype)));
        all.push(("attention_project", attention::attention_merge_project(dtype)));
        let staged = matmul::Edges { x_partials: true, ..none };
        all.push(("matmul_partials", matmul::matmul_glu(dtype, 1, UnaryOp::Silu, matmul::Edges { norm: true, ..staged })));
        all.push(("matmul_partials", matmul::matmul(dtype, 1, staged)));
    }
    // Gemma 3's attention (`norm_rope_attention`): q and the new k normed
    // and rotated in the attention's kernels, whole or split, over each
    // weight type; and the appends of a longer step.
    for dtype in WEIGHT_DTYPES {
        all.push(("norm_rope_attention", attention::norm_rope_attention_project(RopeStyle::Neox, dtype)));
    }
    all.push(("norm_rope_attention", attention::norm_rope_attention_project(RopeStyle::GptJ, DType::Q4K)));
    all.push(("norm_rope_attention", attention::norm_rope_attention_part(RopeStyle::Neox)));
    all.push(("norm_rope_attention", attention::norm_rope_append(RopeStyle::Neox)));
    all.push(("attention_project", attention::add_partials()));
    all.push(("norm", norm::add_partials_normed()));
    all.push(("norm", norm::norm_add_partials(false)));
    all.push(("norm", norm::norm_add_partials(true)));
    // Gemma's: the sum through its post-norm, staged; and the post-norm's
    // residual add reading it.
    for dtype in [DType::Q5_0, DType::Q4K] {
        let normed = matmul::Edges { x_partials: true, x_partials_norm: true, norm: true, ..none };
        all.push(("matmul_partials", matmul::matmul_glu(dtype, 1, UnaryOp::GeluTanh, normed)));
    }
    // A decode step of three slots: one tile of three staged rows.
    let staged = matmul::Edges { x_partials: true, norm: true, ..none };
    all.push(("matmul_partials", matmul::matmul_glu(DType::Q4_1, 3, UnaryOp::Silu, staged)));
    for rows in [1, matmul::PREFILL_ROWS] {
        let residual = matmul::Edges { r_partials: true, ..matmul::Edges::RESIDUAL };
        all.push(("matmul_partials", matmul::matmul(DType::Q4_1, rows, residual)));
    }
    all.push(("kv_append", kv_append::kv_append()));
    // Stacked pairs (`crate::stack`): a layer's K and V appends, its q and
    // k rotations (with and without the q/k norm).
    all.push(("stacked", crate::stack::stack_kernels(&kv_append::kv_append(), &kv_append::kv_append())));
    all.push(("stacked", crate::stack::stack_kernels(&rope::rope(RopeStyle::GptJ), &rope::rope(RopeStyle::GptJ))));
    all.push(("stacked", crate::stack::stack_kernels(&rope::norm_rope(RopeStyle::Neox), &rope::norm_rope(RopeStyle::Neox))));
    all.push(("layout", layout::strided_copy()));
    all.push(("layout", layout::strided_store()));
    all.push(("recurrent", recurrent::causal_conv1d()));
    all.push(("recurrent", recurrent::gated_delta_rule()));
    all
}
