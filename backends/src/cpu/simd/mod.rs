//! SIMD kernels for the fast CPU backend, chosen at run time by CPU feature
//! detection. This module (and its children) is where the backend's `unsafe`
//! lives: every block says why it is sound.
//!
//! Two kernel classes:
//! - `dot_row`: one quantized (or half / f32) weight row against f32
//!   activations, dequantizing each block in registers. Decode is a chain of
//!   matrix-vector products, so this is the decode hot loop. Activations and
//!   accumulation stay f32 (docs/design.md, "Precision contract"): a block's
//!   contribution is `d * Σ q·x (+ m * Σ x)`, with `Σ x` per 32 elements
//!   computed once per activation row (`group_sums`).
//! - `tile`: an f32 register-blocked dot-product tile (`MR` activation rows ×
//!   `NR` weight rows) over weight rows dequantized once into a scratch
//!   buffer; prefill's matrix-matrix products run on it.
//!
//! `Isa::Portable` is plain Rust (the compiler may vectorize it), for CPUs
//! without AVX2/FMA/F16C and as a cross-check of the intrinsics paths.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod portable;

use graphc_ir::DType;

/// An instruction-set level the kernels are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    Portable,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512F on top of `Avx2` (wider f32 tiles and 32-element block
    /// dots; the row dots of the types it has no kernel for are the AVX2
    /// ones: see `dot_row`).
    Avx512,
}

impl Isa {
    pub const ALL: [Isa; 3] = [Isa::Portable, Isa::Avx2, Isa::Avx512];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    pub fn from_name(s: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name() == s)
    }

    /// Whether this CPU can run kernels compiled for `self` (detected once).
    pub fn available(self) -> bool {
        static BEST: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        self <= *BEST.get_or_init(|| *Isa::ALL.iter().rev().find(|i| i.detect()).unwrap_or(&Isa::Portable))
    }

    fn detect(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => Isa::Avx2.detect() && is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The widest level this CPU runs.
    pub fn best() -> Isa {
        *Isa::ALL.iter().rev().find(|i| i.available()).unwrap_or(&Isa::Portable)
    }
}

/// Sums of each 32 consecutive elements of `x` (the last group may be short).
pub fn group_sums(x: &[f32]) -> Vec<f32> {
    x.chunks(32).map(|c| c.iter().sum()).collect()
}

/// Whether `dot_row` has a kernel for `dtype` (every float and GGUF block type).
pub fn supports(dtype: DType) -> bool {
    dtype.is_float() || dtype.is_quantized()
}

/// `Σ_i w[i] * x[i]` for one weight row of `dtype` stored in `row` (a whole
/// number of blocks covering `x.len()` elements); `xsums = group_sums(x)`.
/// The kernel is `isa`'s own where it has one for `dtype`, else the next
/// narrower level's (`dot_row_at`): AVX-512 has its own for q4_0, q4_1,
/// q5_0, q8_0, q4_k and q6_k and runs AVX2's for the other types (q5_k,
/// q5_1, q2_k, q3_k, iq4_nl, iq4_xs, the iq2/iq3 types, f16, f32); AVX2
/// has one for every type but bf16, which is portable's everywhere.
pub fn dot_row(isa: Isa, dtype: DType, row: &[u8], x: &[f32], xsums: &[f32]) -> f32 {
    debug_assert_eq!(Some(row.len() as u64), dtype.storage_bytes(x.len() as u64));
    let mut level = isa;
    loop {
        if let Some(v) = dot_row_at(level, dtype, row, x, xsums) {
            return v;
        }
        level = match level {
            Isa::Avx512 => Isa::Avx2,
            _ => Isa::Portable,
        };
    }
}

/// `dot_row` by `isa`'s own kernel for `dtype` only: `None` where that
/// level has none (and `dot_row` falls back to a narrower one's), so a test
/// can see which kernel serves a type. Portable has every type.
pub fn dot_row_at(isa: Isa, dtype: DType, row: &[u8], x: &[f32], xsums: &[f32]) -> Option<f32> {
    assert!(isa.available(), "{} kernels on a CPU without them", isa.name());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512F (checked above), and AVX2/FMA/F16C
        // with it (`Isa::Avx512` implies `Isa::Avx2`); the kernel asserts
        // the lengths of `row`, `x` and `xsums`.
        Isa::Avx512 => unsafe { avx512::dot_row(dtype, row, x, xsums) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above); the kernels
        // read `row` and `x` only within the lengths asserted in `avx2::dot_row`.
        Isa::Avx2 => unsafe { avx2::dot_row(dtype, row, x, xsums) },
        Isa::Portable => Some(portable::dot_row(dtype, row, x, xsums)),
        #[cfg(not(target_arch = "x86_64"))]
        _ => None,
    }
}

/// `out[r] = dot_row(row r)` for the `out.len()` consecutive rows stored in
/// `rows`, in one call (the per-row dispatch costs as much as a short row's
/// arithmetic). Each row's result is what the ISA's row kernel for `dtype`
/// gives: `dot_rows4`'s where `has_rows4`, else `dot_row`'s.
pub fn dot_rows(isa: Isa, dtype: DType, rows: &[u8], x: &[f32], xsums: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        assert!(isa.available(), "{} kernels on a CPU without them", isa.name());
        // SAFETY: the CPU has AVX-512F and, with it, AVX2/FMA/F16C (checked
        // above); `avx512::dot_rows` asserts the lengths.
        if unsafe { avx512::dot_rows(dtype, rows, x, xsums, out) } {
            return;
        }
    }
    // AVX-512 without its own kernel for `dtype` runs AVX2's (`dot_row`).
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        assert!(isa.available(), "{} kernels on a CPU without them", isa.name());
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above; AVX-512F
        // brings them); `avx2::dot_rows` asserts the lengths.
        if unsafe { avx2::dot_rows(dtype, rows, x, xsums, out) } {
            return;
        }
    }
    let rb = rows.len() / out.len().max(1);
    for (o, row) in out.iter_mut().zip(rows.chunks_exact(rb.max(1))) {
        *o = dot_row(isa, dtype, row, x, xsums);
    }
}

/// Whether `dot_rows_multi` has a kernel for `dtype` at `isa` (AVX-512 and
/// AVX2: q4_0, q4_1, q5_0, q8_0, q4_k, q6_k).
pub fn has_rows_multi(isa: Isa, dtype: DType) -> bool {
    matches!(isa, Isa::Avx512 | Isa::Avx2) && matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q8_0 | DType::Q4K | DType::Q6K)
}

/// Most activation rows `dot_rows_multi` takes in one call.
pub const MULTI_ROWS: usize = 4;

/// `dot_rows` for 2 to `MULTI_ROWS` activation rows at once (`x`, with
/// their `xsums`), where `has_rows_multi`: each block is decoded once for
/// all of them. `out` is
/// `[weight row][activation row]`, each value the bits `dot_rows` gives for
/// that activation row alone. `false` (nothing written) elsewhere.
pub fn dot_rows_multi(isa: Isa, dtype: DType, rows: &[u8], x: &[&[f32]], xsums: &[&[f32]], out: &mut [f32]) -> bool {
    // The ISA's kernel at the row count (its const parameter) of `x`.
    #[cfg(target_arch = "x86_64")]
    macro_rules! by_row_count {
        ($isa:ident) => {
            match (x, xsums) {
                ([a, b], [sa, sb]) => $isa::dot_rows_multi::<2>(dtype, rows, [a, b], [sa, sb], out),
                ([a, b, c], [sa, sb, sc]) => $isa::dot_rows_multi::<3>(dtype, rows, [a, b, c], [sa, sb, sc], out),
                ([a, b, c, d], [sa, sb, sc, sd]) => $isa::dot_rows_multi::<4>(dtype, rows, [a, b, c, d], [sa, sb, sc, sd], out),
                _ => false,
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    if has_rows_multi(isa, dtype) {
        assert!(isa.available(), "{} kernels on a CPU without them", isa.name());
        // SAFETY: the CPU has the ISA's features (checked above: AVX-512F
        // brings AVX2/FMA/F16C); each `dot_rows_multi` asserts the lengths.
        return unsafe {
            match isa {
                Isa::Avx512 => by_row_count!(avx512),
                _ => by_row_count!(avx2),
            }
        };
    }
    let _ = (isa, dtype, rows, x, xsums, out);
    false
}

/// `dot_row` for four weight rows against one activation row, where the ISA
/// has a four-row kernel for `dtype` (AVX-512: q4_0, q4_1, q5_0): the
/// activations are loaded once per block for all four. A row's result does
/// not depend on the other three (pad a short group by repeating a row),
/// but it is a different summation order from `dot_row`'s: a caller uses
/// one or the other for a given `(isa, dtype)`, never a mix.
pub fn dot_rows4(isa: Isa, dtype: DType, rows: [&[u8]; 4], x: &[f32], xsums: &[f32]) -> Option<[f32; 4]> {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        assert!(isa.available(), "{} kernels on a CPU without them", isa.name());
        // SAFETY: the CPU has AVX-512F and, with it, AVX2/FMA/F16C (checked
        // above); `avx512::dot_rows4` asserts every row's length.
        return unsafe { avx512::dot_rows4(dtype, rows, x, xsums) };
    }
    let _ = (isa, dtype, rows, x, xsums);
    None
}

/// Whether `dot_rows4` has a kernel for `dtype` at `isa`.
pub fn has_rows4(isa: Isa, dtype: DType) -> bool {
    isa == Isa::Avx512 && matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q5_0)
}

/// One f32 tile's results: up to 8 activation rows × 4 weight rows.
pub type Tile = [[f32; 4]; 8];

/// Rows of activations per f32 tile, per weight rows (see `tile`).
pub fn tile_shape(isa: Isa) -> (usize, usize) {
    match isa {
        Isa::Avx512 => (6, 4),
        Isa::Avx2 => (3, 4),
        Isa::Portable => (2, 4),
    }
}

/// `out[i][j] = Σ_k x[i*ldx + k] * w[j*ldw + k]` for `i < mr`, `j < nr`, with
/// `(mr, nr) == tile_shape(isa)`; all rows are `k` long.
pub fn tile(isa: Isa, x: &[f32], ldx: usize, w: &[f32], ldw: usize, k: usize, out: &mut Tile) {
    let (mr, nr) = tile_shape(isa);
    assert!(x.len() >= (mr - 1) * ldx + k && w.len() >= (nr - 1) * ldw + k, "tile operands too short");
    #[cfg(target_arch = "x86_64")]
    match isa {
        Isa::Avx512 => {
            assert!(isa.available());
            // SAFETY: the CPU has AVX-512F (asserted); the operand lengths
            // cover every row read (asserted above).
            return unsafe { avx512::tile_6x4(x.as_ptr(), ldx, w.as_ptr(), ldw, k, out) };
        }
        Isa::Avx2 => {
            assert!(isa.available());
            // SAFETY: the CPU has AVX2 and FMA (asserted); the operand
            // lengths cover every row read (asserted above).
            return unsafe { avx2::tile_3x4(x.as_ptr(), ldx, w.as_ptr(), ldw, k, out) };
        }
        Isa::Portable => {}
    }
    portable::tile_2x4(x, ldx, w, ldw, k, out)
}

/// Weight rows per panel of `outer_tile`: stored k-major,
/// `panel[kk*PANEL + j]` = weight row `j`, element `kk`. 6 × 64 (24
/// accumulators; 4 vector loads and 6 broadcasts per 24 FMAs) measured 5%
/// faster than 12 × 32 and as fast as 8 × 48, which would waste part of a
/// panel on Gemma 3's widths (all multiples of 64) and not divide its head
/// dimension (prefill attention takes value columns a panel at a time).
pub const PANEL: usize = 64;
/// Activation rows per `outer_tile` call.
pub const OUTER_ROWS: usize = 6;

/// Whether `isa` has the outer-product GEMM kernel (`outer_tile`).
pub fn has_outer(isa: Isa) -> bool {
    isa == Isa::Avx512
}

/// Whether `dequantize` runs a vectorized decode of `dtype` at `isa`.
pub fn has_vectorized_dequantize(isa: Isa, dtype: DType) -> bool {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        return avx512::dequantizes(dtype);
    }
    let _ = (isa, dtype);
    false
}

/// `graphc_ir::quant::dequantize`, vectorized where the ISA has it (AVX-512:
/// q4_0, q4_1, q5_0, q8_0, q4_k, q6_k, mxfp4), with the same bits.
pub fn dequantize(isa: Isa, dtype: DType, bytes: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        assert!(isa.available());
        // SAFETY: AVX-512F and with it AVX2/F16C (asserted); the kernel
        // asserts that `bytes` holds `out.len()` elements' blocks.
        if unsafe { avx512::dequantize(dtype, bytes, out) } {
            return;
        }
    }
    let _ = isa;
    graphc_ir::quant::dequantize(dtype, bytes, out)
}

/// Lay `rows` (at most `PANEL`, each at least `k` long; missing rows are
/// zero) out k-major for `outer_tile`: `panel[kk*PANEL + j] = rows[j][kk]`.
pub fn pack_panel(isa: Isa, rows: &[&[f32]], k: usize, panel: &mut [f32]) {
    assert!(rows.len() <= PANEL && panel.len() >= k * PANEL && rows.iter().all(|r| r.len() >= k));
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        assert!(isa.available());
        // SAFETY: AVX-512F (asserted); the lengths are asserted above.
        return unsafe { avx512::pack_panel(rows, k, panel) };
    }
    let _ = isa;
    for kk in 0..k {
        for j in 0..PANEL {
            panel[kk * PANEL + j] = rows.get(j).map_or(0.0, |r| r[kk]);
        }
    }
}

/// `out[i*ldo + j] = Σ_kk x[i*ldx + kk] · w[kk*ldw + j]` for
/// `i < rows <= OUTER_ROWS`, `j < PANEL`, where `has_outer(isa)`: `w` is
/// k-major (a weight panel, `ldw` = `PANEL`, or value rows); each output is
/// one FMA chain in `kk` order.
#[allow(clippy::too_many_arguments)] // two strided operands and a strided output
pub fn outer_tile(isa: Isa, x: &[f32], ldx: usize, rows: usize, w: &[f32], ldw: usize, k: usize, out: &mut [f32], ldo: usize) {
    assert!(has_outer(isa) && isa.available(), "no outer-product kernel at {}", isa.name());
    assert!((1..=OUTER_ROWS).contains(&rows) && ldo >= PANEL && ldw >= PANEL && ldx >= k);
    assert!(x.len() >= (rows - 1) * ldx + k && out.len() >= (rows - 1) * ldo + PANEL);
    assert!(k == 0 || w.len() >= (k - 1) * ldw + PANEL);
    #[cfg(target_arch = "x86_64")]
    {
        let (xp, wp, op) = (x.as_ptr(), w.as_ptr(), out.as_mut_ptr());
        // SAFETY: AVX-512F (asserted); every row of `x`, `w` and `out` the
        // kernel touches is in bounds (asserted above).
        unsafe {
            match rows {
                6 => avx512::outer_tile::<6>(xp, ldx, wp, ldw, k, op, ldo),
                5 => avx512::outer_tile::<5>(xp, ldx, wp, ldw, k, op, ldo),
                4 => avx512::outer_tile::<4>(xp, ldx, wp, ldw, k, op, ldo),
                3 => avx512::outer_tile::<3>(xp, ldx, wp, ldw, k, op, ldo),
                2 => avx512::outer_tile::<2>(xp, ldx, wp, ldw, k, op, ldo),
                _ => avx512::outer_tile::<1>(xp, ldx, wp, ldw, k, op, ldo),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("has_outer is false off x86_64");
}

/// f32 dot product (any length), vectorized where the ISA allows.
pub fn dot_f32(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        assert!(isa.available());
        // SAFETY: features checked; both slices are `a.len()` long.
        return unsafe { avx2::dot_f32(a.as_ptr(), b.as_ptr(), a.len()) };
    }
    crate::cpu::kernels::dot(a, b)
}

/// `y[i] += alpha * x[i]`.
pub fn axpy(isa: Isa, alpha: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len());
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        assert!(isa.available());
        // SAFETY: features checked; both slices are `x.len()` long.
        return unsafe { avx2::axpy(alpha, x.as_ptr(), y.as_mut_ptr(), x.len()) };
    }
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

/// Attention scores: `out[j] = scale * (q · k[j*d .. (j+1)*d])`.
pub fn scores(isa: Isa, q: &[f32], k: &[f32], scale: f32, out: &mut [f32]) {
    let d = q.len();
    assert_eq!(k.len(), out.len() * d);
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        assert!(isa.available());
        // SAFETY: features checked; `k` holds `out.len()` rows of `d` (asserted).
        return unsafe { avx2::scores(q.as_ptr(), k.as_ptr(), d, scale, out) };
    }
    for (j, o) in out.iter_mut().enumerate() {
        *o = crate::cpu::kernels::dot(q, &k[j * d..(j + 1) * d]) * scale;
    }
}

/// Attention output: `o += Σ_j p[j] * v[j*dv .. (j+1)*dv]`, `dv = o.len()`.
pub fn weighted_sum(isa: Isa, p: &[f32], v: &[f32], o: &mut [f32]) {
    let dv = o.len();
    assert_eq!(v.len(), p.len() * dv);
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        assert!(isa.available());
        // SAFETY: features checked; `v` holds `p.len()` rows of `dv` (asserted).
        return unsafe { avx2::weighted_sum(p, v.as_ptr(), o) };
    }
    for (j, &pj) in p.iter().enumerate() {
        for (oi, vi) in o.iter_mut().zip(&v[j * dv..(j + 1) * dv]) {
            *oi += pj * vi;
        }
    }
}

/// `weighted_sum` for several rows sharing their value rows: row `r`'s
/// weights are `p[r*stride ..][..n]`, its output `o[r*dv .. (r+1)*dv]`. On
/// AVX-512 (with `dv` a multiple of `PANEL`, 64) up to 4 rows go together, each
/// value row loaded once for them; the arithmetic per element is the same
/// as `weighted_sum`'s at that level.
pub fn weighted_sum_rows(isa: Isa, p: &[f32], stride: usize, n: usize, v: &[f32], o: &mut [f32]) {
    let dv = v.len() / n.max(1);
    let rows = o.len() / dv.max(1);
    assert!(n == 0 || (v.len() == n * dv && o.len() == rows * dv));
    if n == 0 || rows == 0 {
        return;
    }
    assert!(p.len() >= (rows - 1) * stride + n, "weights too short");
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && dv.is_multiple_of(PANEL) {
        assert!(isa.available());
        let mut r = 0;
        while r < rows {
            let take = (rows - r).min(4);
            let (pp, oo) = (p[r * stride..].as_ptr(), o[r * dv..].as_mut_ptr());
            // SAFETY: AVX-512F checked; dv % PANEL == 0; rows r..r+take of `p`
            // (stride `stride`, `n` each) and of `o` (`dv` each) are in
            // bounds (asserted above), and `v` holds `n` rows of `dv`.
            unsafe {
                match take {
                    4 => avx512::weighted_sum_rows::<4>(pp, stride, n, v.as_ptr(), dv, oo),
                    3 => avx512::weighted_sum_rows::<3>(pp, stride, n, v.as_ptr(), dv, oo),
                    2 => avx512::weighted_sum_rows::<2>(pp, stride, n, v.as_ptr(), dv, oo),
                    _ => avx512::weighted_sum_rows::<1>(pp, stride, n, v.as_ptr(), dv, oo),
                }
            }
            r += take;
        }
        return;
    }
    for (r, o) in o.chunks_exact_mut(dv).enumerate() {
        weighted_sum(isa, &p[r * stride..r * stride + n], v, o);
    }
}

/// `x[i] = exp(x[i] - m)` in place; returns their sum. AVX-512 and AVX2:
/// a polynomial `exp` (relative error ~1e-7), 16 or 8 lanes at a time, the
/// same bits in each lane (`avx2::exp8`); portable: the reference's libm
/// `exp`, in order.
pub fn exp_shifted_sum(isa: Isa, x: &mut [f32], m: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        assert!(isa.available());
        // SAFETY: AVX-512F or AVX2 + FMA checked; the kernels stay within `x`.
        return unsafe {
            match isa {
                Isa::Avx512 => avx512::exp_shifted_sum(x, m),
                _ => avx2::exp_shifted_sum(x, m),
            }
        };
    }
    let _ = isa;
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = (*v - m).exp();
        sum += *v;
    }
    sum
}

/// Softmax's unnormalized terms in place: after the optional soft cap
/// `c · tanh(x / c)`, `x = exp(x - max)`; returns `(max, Σ x)`. (Split
/// attention merges chunks by these two.)
pub fn softmax_terms(isa: Isa, row: &mut [f32], softcap: Option<f32>) -> (f32, f32) {
    if let Some(c) = softcap {
        row.iter_mut().for_each(|v| *v = c * (*v / c).tanh());
    }
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    (m, exp_shifted_sum(isa, row, m))
}

/// Softmax in place, after the optional soft cap: the reference's
/// `softmax_in_place` with its exponentials from `exp_shifted_sum`.
pub fn softmax(isa: Isa, row: &mut [f32], softcap: Option<f32>) {
    let (_, sum) = softmax_terms(isa, row, softcap);
    row.iter_mut().for_each(|v| *v /= sum);
}

/// `softmax`, with an attention sink where there is one: `sink` joins the
/// max and the denominator (after the soft cap, which it skips) and is
/// dropped, as the reference's `softmax_with_sink`.
pub fn softmax_sink(isa: Isa, row: &mut [f32], softcap: Option<f32>, sink: Option<f32>) {
    let Some(sink) = sink else { return softmax(isa, row, softcap) };
    if let Some(c) = softcap {
        row.iter_mut().for_each(|v| *v = c * (*v / c).tanh());
    }
    let m = row.iter().copied().fold(sink, f32::max);
    let sum = exp_shifted_sum(isa, row, m) + (sink - m).exp();
    row.iter_mut().for_each(|v| *v /= sum);
}

/// A unary op in place. AVX-512 and AVX2 evaluate GELU (tanh form) and
/// SiLU with a polynomial `exp` (GELU's `1 + tanh` within ~2e-7, SiLU
/// within ~1e-7 relative; each lane the same bits at either width); every
/// other op, and every op on the portable level, is the reference's
/// definition (libm `tanh`/`exp`).
pub fn unary(isa: Isa, op: graphc_ir::op::UnaryOp, x: &mut [f32]) {
    use graphc_ir::op::UnaryOp;
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 && matches!(op, UnaryOp::GeluTanh | UnaryOp::Silu) {
        assert!(isa.available());
        // SAFETY: AVX-512F or AVX2 + FMA checked; the kernels stay within `x`.
        return unsafe {
            match (isa, op) {
                (Isa::Avx512, UnaryOp::GeluTanh) => avx512::gelu_tanh(x),
                (Isa::Avx512, _) => avx512::silu(x),
                (_, UnaryOp::GeluTanh) => avx2::gelu_tanh(x),
                _ => avx2::silu(x),
            }
        };
    }
    let _ = isa;
    let f = crate::cpu::reference::unary_fn(op);
    x.iter_mut().for_each(|v| *v = f(*v));
}
