//! The fast CPU kernels against the reference definitions, at every
//! instruction-set level this CPU runs (each level is its own code path:
//! AVX-512 tiles, AVX2 intrinsics, portable Rust).
//!
//! Inputs are chosen to separate right from likely-wrong: random blocks with
//! every scale and min nonzero (a kernel that drops the q4_1 min, a q5 high
//! bit or a q6_k sub-block scale is off by far more than the tolerance),
//! sizes that are not multiples of any tile, GQA with n_heads ≠ n_kv_heads,
//! and ragged rows at different positions with a sliding window.

use graphc_backends::cpu::fast::{attention, matmul, Fast};
use graphc_backends::cpu::kernels::matmul_weight;
use graphc_backends::cpu::pool::SpinPool;
use graphc_backends::cpu::reference;
use graphc_backends::cpu::simd::{self, Isa};
use graphc_backends::{Tensor, WeightRef};
use graphc_ir::op::{Op, UnaryOp};
use graphc_ir::DType;
use half::f16;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f32(&mut self) -> f32 {
        (self.next() % 2_000_001) as f32 / 1_000_000.0 - 1.0
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

fn isas() -> Vec<Isa> {
    let v: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.available()).collect();
    println!("instruction sets on this CPU: {:?}", v.iter().map(|i| i.name()).collect::<Vec<_>>());
    v
}

/// Random bytes for `rows` rows of `k` elements of `dtype`, with every f16
/// field a finite value of moderate size.
fn random_weights(dtype: DType, rows: usize, k: usize, rng: &mut Rng) -> Vec<u8> {
    let f16_bytes = |rng: &mut Rng, scale: f32| f16::from_f32(rng.f32() * scale).to_le_bytes();
    let mut out = Vec::new();
    let n_blocks = rows * k / dtype.block_elems();
    match dtype {
        DType::F32 => (0..rows * k).for_each(|_| out.extend(rng.f32().to_le_bytes())),
        DType::F16 => (0..rows * k).for_each(|_| out.extend(f16_bytes(rng, 1.0))),
        DType::BF16 => (0..rows * k).for_each(|_| out.extend(&rng.f32().to_le_bytes()[2..])),
        _ => {
            for _ in 0..n_blocks {
                let mut block: Vec<u8> = (0..dtype.block_bytes()).map(|_| rng.byte()).collect();
                // The f16 fields: d (and m / dmin) at the front; q6_k's and
                // q3_k's d, q2_k's d and dmin, at the end.
                match dtype {
                    DType::Q4_1 | DType::Q4K | DType::Q5K | DType::Q5_1 => {
                        block[0..2].copy_from_slice(&f16_bytes(rng, 0.05));
                        block[2..4].copy_from_slice(&f16_bytes(rng, 0.05));
                    }
                    DType::Q6K => block[208..210].copy_from_slice(&f16_bytes(rng, 0.01)),
                    DType::Q2K => {
                        block[80..82].copy_from_slice(&f16_bytes(rng, 0.05));
                        block[82..84].copy_from_slice(&f16_bytes(rng, 0.05));
                    }
                    DType::Q3K => block[108..110].copy_from_slice(&f16_bytes(rng, 0.01)),
                    DType::IQ4NL | DType::IQ4XS => block[0..2].copy_from_slice(&f16_bytes(rng, 0.002)),
                    DType::IQ1M => iq1_m_scale(&mut block, f16::from_f32(rng.f32() * 0.05)),
                    // An E8M0 scale byte, 2^(e - 127): 2^-9 .. 2^-5.
                    DType::MXFP4 => block[0] = 118 + rng.byte() % 5,
                    _ => block[0..2].copy_from_slice(&f16_bytes(rng, 0.05)),
                }
                out.extend(block);
            }
        }
    }
    out
}

/// Set an iq1_m block's f16 scale, which it keeps in the top nibbles of
/// its four scale words (bytes 49, 51, 53, 55).
fn iq1_m_scale(block: &mut [u8], d: f16) {
    let bits = d.to_bits();
    for k in 0..4 {
        block[49 + 2 * k] = (block[49 + 2 * k] & 0x0F) | ((((bits >> (4 * k)) & 0xF) as u8) << 4);
    }
}

fn dequantized(dtype: DType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut w = vec![0f32; n];
    graphc_ir::quant::dequantize(dtype, bytes, &mut w);
    w
}

/// Every weight type a matmul reads (all but the integer types).
fn weight_types() -> impl Iterator<Item = DType> {
    DType::ALL.into_iter().filter(|t| !matches!(t, DType::I32 | DType::U32))
}

/// The block types added after the first seven (their row dots are AVX2's
/// on AVX-512 too).
const NEWER_TYPES: [DType; 6] = [DType::Q5_1, DType::Q2K, DType::Q3K, DType::IQ4NL, DType::IQ4XS, DType::MXFP4];

/// The codebook types (their row dots are AVX2's on AVX-512 too).
const CODEBOOK_TYPES: [DType; 7] = [DType::IQ2XXS, DType::IQ2XS, DType::IQ2S, DType::IQ3XXS, DType::IQ3S, DType::IQ1S, DType::IQ1M];

/// The type whose row dot is portable's on every CPU: bf16.
fn portable_only(dtype: DType) -> bool {
    dtype == DType::BF16
}

/// Why 1e-5 of Σ|w·x|: both sides are f32 sums of the same products in a
/// different order; the rounding error of such a sum is bounded by about
/// k·ε·Σ|w·x| and in practice ~√k·ε ≈ 1e-6 of it for k = 512.
fn close(got: f32, want: f64, scale: f64) -> bool {
    ((got as f64) - want).abs() <= 1e-5 * scale + 1e-6
}

#[test]
fn dot_row_matches_dequantize_then_dot_for_every_type_and_isa() {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let k = 512;
    for dtype in weight_types() {
        let row = random_weights(dtype, 1, k, &mut rng);
        let x: Vec<f32> = (0..k).map(|_| rng.f32()).collect();
        let w = dequantized(dtype, &row, k);
        let want: f64 = w.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
        let scale: f64 = w.iter().zip(&x).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
        assert!(scale > 1.0, "{dtype}: the test row must not be ~zero (Σ|w·x| = {scale})");
        let sums = simd::group_sums(&x);
        for isa in isas() {
            let got = simd::dot_row(isa, dtype, &row, &x, &sums);
            assert!(close(got, want, scale), "{dtype} on {}: {got} vs {want} (Σ|w·x| {scale})", isa.name());
        }
    }
}

/// Which kernel serves each type's row dot, run, not assumed: every level's
/// own kernel (`dot_row_at`) where it has one — portable for every type,
/// AVX2 for every type but bf16 (the newer types included), AVX-512 for
/// q4_0, q4_1, q5_0, q8_0, q4_k and q6_k — and where a level has none,
/// `dot_row` there gives the next narrower level's bits.
#[test]
fn each_isa_runs_its_own_row_kernel_or_the_next_narrower_ones_bits() {
    let mut rng = Rng(0x6a09e667f3bcc908);
    let k = 512;
    let own = |isa: Isa, dtype: DType| match isa {
        Isa::Portable => true,
        Isa::Avx2 => !portable_only(dtype),
        Isa::Avx512 => matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q8_0 | DType::Q4K | DType::Q6K),
    };
    let mut engaged = std::collections::BTreeMap::<&str, usize>::new();
    for dtype in weight_types() {
        let row = random_weights(dtype, 1, k, &mut rng);
        let x: Vec<f32> = (0..k).map(|_| rng.f32()).collect();
        let sums = simd::group_sums(&x);
        for isa in isas() {
            let at = simd::dot_row_at(isa, dtype, &row, &x, &sums);
            assert_eq!(at.is_some(), own(isa, dtype), "{dtype} on {}: its own kernel or not", isa.name());
            let got = simd::dot_row(isa, dtype, &row, &x, &sums);
            let want = match (at, isa) {
                (Some(v), _) => v,
                // AVX2's own kernel, or portable's where AVX2 has none either (bf16).
                (None, Isa::Avx512) => {
                    simd::dot_row_at(Isa::Avx2, dtype, &row, &x, &sums).or_else(|| simd::dot_row_at(Isa::Portable, dtype, &row, &x, &sums)).unwrap()
                }
                (None, _) => simd::dot_row_at(Isa::Portable, dtype, &row, &x, &sums).unwrap(),
            };
            assert_eq!(got.to_bits(), want.to_bits(), "{dtype} on {}: {got} vs {want}", isa.name());
            if at.is_some() && (NEWER_TYPES.contains(&dtype) || CODEBOOK_TYPES.contains(&dtype)) {
                *engaged.entry(isa.name()).or_default() += 1;
            }
        }
    }
    println!("newer types' own row kernels run, by level: {engaged:?}");
    for isa in isas().into_iter().filter(|&i| i != Isa::Avx512) {
        assert_eq!(engaged.get(isa.name()), Some(&(NEWER_TYPES.len() + CODEBOOK_TYPES.len())), "{}: {engaged:?}", isa.name());
    }
}

/// The negative controls for the newer types' row dots: a kernel that
/// drops q5_1's or q2_k's mins, q3_k's `- 4` where an `hmask` bit is
/// clear, or iq4_xs's scale bias of 32 is far outside the tolerance.
#[test]
fn the_row_dot_test_separates_the_newer_types_likely_mistakes() {
    let mut rng = Rng(13);
    let k = 512;
    let f16_at = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32() as f64;
    for dtype in [DType::Q5_1, DType::Q2K, DType::Q3K, DType::IQ4XS] {
        let row = random_weights(dtype, 1, k, &mut rng);
        let x: Vec<f32> = (0..k).map(|_| rng.f32()).collect();
        let w = dequantized(dtype, &row, k);
        let want: f64 = w.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
        let scale: f64 = w.iter().zip(&x).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
        let blocks = row.chunks_exact(dtype.block_bytes()).zip(x.chunks_exact(dtype.block_elems()));
        // The term the mistaken kernel leaves out (or adds).
        let term: f64 = match dtype {
            DType::Q5_1 => blocks.map(|(b, xs)| f16_at(b, 2) * xs.iter().map(|&v| v as f64).sum::<f64>()).sum(),
            DType::Q2K => blocks
                .map(|(b, xs)| {
                    (0..16)
                        .map(|is| f16_at(b, 82) * (b[is] >> 4) as f64 * xs[16 * is..16 * is + 16].iter().map(|&v| v as f64).sum::<f64>())
                        .sum::<f64>()
                })
                .sum(),
            DType::Q3K => blocks
                .map(|(b, xs)| {
                    let sc = graphc_ir::quant::q3_k_scales(&b[96..108]);
                    (0..256)
                        .filter(|&e| b[e % 32] & (1 << (e / 32)) == 0)
                        .map(|e| f16_at(b, 108) * (sc[e / 16] as f64 - 32.0) * 4.0 * xs[e] as f64)
                        .sum::<f64>()
                })
                .sum(),
            _ => blocks
                .map(|(b, xs)| {
                    let d = f16_at(b, 0);
                    (0..256)
                        .map(|e| {
                            let (ib, j) = (e / 32, e % 32);
                            let q = b[8 + 16 * ib + j % 16];
                            let nibble = if j < 16 { q & 0xF } else { q >> 4 };
                            32.0 * d * graphc_ir::quant::IQ4_VALUES[nibble as usize] as f64 * xs[e] as f64
                        })
                        .sum::<f64>()
                })
                .sum(),
        };
        assert!(!close((want - term) as f32, want, scale), "{dtype}: leaving out {term} of {want} must be detectable (Σ|w·x| {scale})");
    }
}

#[test]
fn four_row_dots_match_dequantize_then_dot_and_do_not_depend_on_their_group() {
    let mut rng = Rng(0x2545f4914f6cdd1d);
    let k = 768; // 24 blocks of 32, 3 of 256
    for dtype in weight_types() {
        let rows = random_weights(dtype, 5, k, &mut rng);
        let rb = rows.len() / 5;
        let row = |r: usize| &rows[r * rb..(r + 1) * rb];
        let x: Vec<f32> = (0..k).map(|_| rng.f32()).collect();
        let sums = simd::group_sums(&x);
        for isa in isas() {
            let Some(got) = simd::dot_rows4(isa, dtype, [row(0), row(1), row(2), row(3)], &x, &sums) else {
                assert!(!simd::has_rows4(isa, dtype), "{dtype} on {}: has_rows4 but no kernel", isa.name());
                continue;
            };
            assert!(simd::has_rows4(isa, dtype));
            for (r, g) in got.iter().enumerate() {
                let w = dequantized(dtype, row(r), k);
                let want: f64 = w.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
                let scale: f64 = w.iter().zip(&x).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
                assert!(close(*g, want, scale), "{dtype} on {} row {r}: {g} vs {want}", isa.name());
            }
            // The same row in another slot, beside other rows (or itself):
            // the same bits, so a padded group or another thread split
            // changes nothing.
            let moved = simd::dot_rows4(isa, dtype, [row(4), row(2), row(2), row(0)], &x, &sums).unwrap();
            assert_eq!(moved[1].to_bits(), got[2].to_bits(), "{dtype} on {}", isa.name());
            assert_eq!(moved[3].to_bits(), got[0].to_bits(), "{dtype} on {}", isa.name());
        }
    }
}

#[test]
fn a_run_of_rows_gives_each_row_its_row_kernels_bits() {
    // `dot_rows` (one call per task's rows) must be `dot_row` per row, or
    // `dot_rows4` where the ISA has it: 7 rows, so a group of 4 and a padded 3.
    let mut rng = Rng(0x853c49e6748fea9b);
    let (n, k) = (7, 512);
    for dtype in weight_types() {
        let rows = random_weights(dtype, n, k, &mut rng);
        let rb = rows.len() / n;
        let x: Vec<f32> = (0..k).map(|_| rng.f32()).collect();
        let sums = simd::group_sums(&x);
        for isa in isas() {
            let mut got = vec![0f32; n];
            simd::dot_rows(isa, dtype, &rows, &x, &sums, &mut got);
            for (r, g) in got.iter().enumerate() {
                let row = &rows[r * rb..(r + 1) * rb];
                let want = if simd::has_rows4(isa, dtype) {
                    simd::dot_rows4(isa, dtype, [row; 4], &x, &sums).unwrap()[0]
                } else {
                    simd::dot_row(isa, dtype, row, &x, &sums)
                };
                assert_eq!(g.to_bits(), want.to_bits(), "{dtype} on {} row {r}: {g} vs {want}", isa.name());
            }
        }
    }
}

#[test]
fn panels_are_the_rows_laid_out_k_major_on_every_isa() {
    // 21 rows (a missing 11 are zero) of 37: two 16 × 16 register blocks
    // and a remainder of 5 columns.
    let mut rng = Rng(5);
    let k = 37;
    let rows: Vec<Vec<f32>> = (0..21).map(|_| (0..k + 3).map(|_| rng.f32()).collect()).collect();
    let refs: Vec<&[f32]> = rows.iter().map(|r| r.as_slice()).collect();
    for isa in isas() {
        let mut panel = vec![f32::NAN; k * simd::PANEL];
        simd::pack_panel(isa, &refs, k, &mut panel);
        for kk in 0..k {
            for j in 0..simd::PANEL {
                let want = if j < rows.len() { rows[j][kk] } else { 0.0 };
                assert_eq!(panel[kk * simd::PANEL + j].to_bits(), want.to_bits(), "{} [{kk}][{j}]", isa.name());
            }
        }
    }
}

#[test]
fn column_blocks_fill_the_matrix_and_a_block_that_skips_a_row_is_refused() {
    use graphc_backends::cpu::pool::collect_column_blocks;
    // 3 rows of 10 in blocks of 4 columns: 4, 4 and a narrower 2.
    let fill = |skip: Option<usize>| {
        let pool = SpinPool::new(2);
        collect_column_blocks(&pool, 3, 10, 4, |t, block| {
            let width = block.columns().len();
            for r in 0..3 {
                if skip != Some(t) || r < 2 {
                    block.push_row(&vec![(10 * t + r) as f32; width]);
                }
            }
        })
    };
    let m = fill(None);
    let want: Vec<f32> = (0..3).flat_map(|r| (0..10).map(move |c| (10 * (c / 4) + r) as f32)).collect();
    assert_eq!(m, want);
    let short = std::panic::catch_unwind(|| fill(Some(1)));
    assert!(short.is_err(), "a block that leaves a row unwritten must not yield a matrix");
}

#[test]
fn vectorized_dequantization_is_the_references_bits() {
    let mut rng = Rng(31);
    let k = 512;
    if Isa::Avx512.available() {
        for dtype in [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4K, DType::Q6K, DType::MXFP4] {
            assert!(simd::has_vectorized_dequantize(Isa::Avx512, dtype), "{dtype}: AVX-512's own decode");
        }
    }
    for dtype in weight_types() {
        let bytes = random_weights(dtype, 3, k, &mut rng);
        let want = dequantized(dtype, &bytes, 3 * k);
        for isa in isas() {
            let mut got = vec![f32::NAN; 3 * k];
            simd::dequantize(isa, dtype, &bytes, &mut got);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "{dtype} on {}: [{i}] {g} vs {w}", isa.name());
            }
        }
    }
}

#[test]
fn softmax_exponentials_are_within_1e6_relative_on_every_isa() {
    // Scores minus their max span 0 down to far below f32's range (they
    // must give 0) and a masked -inf; 37 of them: two vectors and a tail.
    let mut x: Vec<f32> = (0..37).map(|i| -(i as f32) * 0.7).collect();
    x[20] = -120.0;
    x[21] = f32::NEG_INFINITY;
    x[22] = -1.0e4;
    let m = 0.25f32;
    for isa in isas() {
        let mut got = x.clone();
        let sum = simd::exp_shifted_sum(isa, &mut got, m);
        let mut want_sum = 0f64;
        for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
            let want = ((v - m) as f64).exp();
            want_sum += want;
            assert!((g as f64 - want).abs() <= 1e-6 * want + 1e-37, "{} [{i}] exp({}) = {g}, want {want}", isa.name(), v - m);
        }
        assert!((sum as f64 - want_sum).abs() <= 1e-6 * want_sum, "{}: sum {sum} vs {want_sum}", isa.name());
    }
}

/// The AVX2 exponentials (`exp_shifted_sum`, SiLU, GELU) compute each lane
/// as AVX-512's do, bit for bit: 8 lanes with `2^n` as two exact-or-once
/// rounded products against `vscalefps` on 16. The inputs reach the
/// clamp at both ends (0, subnormal and inf results), the masked -inf and
/// a NaN; lengths are whole 16-lane vectors, so no element falls to
/// either ISA's scalar tail. A one-product `2^n` (the likely shortcut)
/// differs on the subnormal results and is caught.
#[test]
fn avx2_exponentials_are_avx512s_bits() {
    if !Isa::Avx512.available() {
        println!("skipped: this CPU has no AVX-512 to compare AVX2 with");
        return;
    }
    let mut x: Vec<f32> = (0..4096).map(|i| (i as f32 - 2048.0) * 0.0625 + (i % 13) as f32 * 1e-3).collect();
    x.extend([-1.0e4, f32::NEG_INFINITY, 1.0e4, f32::NAN, -87.5, -100.0, -103.0, -110.0, 88.8, 89.0, 0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5]);
    let subnormal_inputs = x.iter().filter(|&&v| (-110.0..-87.5).contains(&v)).count();
    assert!(subnormal_inputs > 0 && x.len().is_multiple_of(16));
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
    let run = |isa: Isa, f: &dyn Fn(Isa, &mut Vec<f32>)| {
        let mut v = x.clone();
        f(isa, &mut v);
        bits(&v)
    };
    let exp = |isa: Isa, v: &mut Vec<f32>| {
        simd::exp_shifted_sum(isa, v, 0.0);
    };
    let silu = |isa: Isa, v: &mut Vec<f32>| simd::unary(isa, UnaryOp::Silu, v);
    let gelu = |isa: Isa, v: &mut Vec<f32>| simd::unary(isa, UnaryOp::GeluTanh, v);
    for (name, f) in [("exp", &exp as &dyn Fn(Isa, &mut Vec<f32>)), ("silu", &silu), ("gelu_tanh", &gelu)] {
        let (a, b) = (run(Isa::Avx2, f), run(Isa::Avx512, f));
        let first = a.iter().zip(&b).position(|(p, q)| p != q);
        assert!(
            first.is_none(),
            "{name}: AVX2 and AVX-512 differ at x = {}: {:#x} vs {:#x}",
            x[first.unwrap()],
            a[first.unwrap()],
            b[first.unwrap()]
        );
    }
    // The exponentials reach the subnormals, where a rounding difference shows.
    let mut e = x.clone();
    simd::exp_shifted_sum(Isa::Avx2, &mut e, 0.0);
    assert!(e.iter().any(|v| v.is_subnormal()), "no subnormal exponential: the test would not see a double rounding");
}

#[test]
fn silu_is_within_1e6_relative_of_f64_on_every_isa() {
    // 16-lane blocks and a tail; far negative (exp(-x) overflows: -0) and
    // far positive inputs included.
    let x: Vec<f32> = (0..45).map(|i| (i as f32 - 22.0) * 0.9).chain([-200.0, 120.0, 0.0]).collect();
    for isa in isas() {
        let mut got = x.clone();
        simd::unary(isa, UnaryOp::Silu, &mut got);
        for (&g, &v) in got.iter().zip(&x) {
            let want = v as f64 / (1.0 + (-(v as f64)).exp());
            assert!((g as f64 - want).abs() <= 1e-6 * want.abs() + 1e-30, "{} silu({v}) = {g}, want {want}", isa.name());
        }
    }
}

#[test]
fn the_row_dot_test_separates_a_kernel_that_drops_the_min() {
    // The negative control for the test above: the q4_1 row without its
    // `m * Σx` term is far outside the tolerance.
    let mut rng = Rng(7);
    let k = 512;
    let row = random_weights(DType::Q4_1, 1, k, &mut rng);
    let x: Vec<f32> = (0..k).map(|_| rng.f32()).collect();
    let w = dequantized(DType::Q4_1, &row, k);
    let want: f64 = w.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
    let scale: f64 = w.iter().zip(&x).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
    let mins: f64 = row
        .chunks_exact(20)
        .zip(x.chunks_exact(32))
        .map(|(b, xs)| f16::from_le_bytes([b[2], b[3]]).to_f32() as f64 * xs.iter().map(|&v| v as f64).sum::<f64>())
        .sum();
    assert!(!close((want - mins) as f32, want, scale), "dropping the mins ({mins}) must be detectable");
}

#[test]
fn matmul_rows_and_tiled_paths_match_the_reference() {
    let mut rng = Rng(42);
    // n = 37 rows: not a multiple of the tile (4) or the task size (20 on 2 threads);
    // m = 1 and 3 take the row path, 7 and 13 the tiled one with remainders.
    let (n, k) = (37, 256);
    for dtype in [DType::Q4_1, DType::Q8_0, DType::Q4K, DType::Q6K, DType::Q5_0, DType::F16].into_iter().chain(NEWER_TYPES) {
        let bytes = random_weights(dtype, n, k, &mut rng);
        let shape = [n, k];
        let w = WeightRef { dtype, shape: &shape, bytes: &bytes };
        for m in [1, 3, 7, 13] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.f32()).collect();
            let want = matmul_weight(&x, m, k, w);
            for isa in isas() {
                let got = matmul::matmul(&SpinPool::new(2), isa, &x, m, k, w);
                for (i, (g, r)) in got.iter().zip(&want).enumerate() {
                    assert!((g - r).abs() <= 1e-4 * (1.0 + r.abs()), "{dtype} m={m} {}: [{i}] {g} vs {r}", isa.name());
                }
            }
        }
    }
}

/// The matrix-vector path splits rows into tasks by bytes (about 256 KiB,
/// a multiple of the thread count): each output is still one dot product
/// whose order does not depend on the split, so its bits are the same on
/// 1, 2 and 3 threads. 3001 rows of 512: several tasks a thread, a last
/// task and a last four-row group both short.
#[test]
fn matvec_bits_do_not_depend_on_the_thread_count() {
    let mut rng = Rng(7);
    let (n, k) = (3001, 512);
    for dtype in [DType::Q5_0, DType::Q8_0, DType::Q4K, DType::Q4_1].into_iter().chain(NEWER_TYPES) {
        let bytes = random_weights(dtype, n, k, &mut rng);
        let shape = [n, k];
        let w = WeightRef { dtype, shape: &shape, bytes: &bytes };
        for m in [1, 2] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.f32()).collect();
            for isa in isas() {
                let bits =
                    |threads: usize| -> Vec<u32> { matmul::matmul(&SpinPool::new(threads), isa, &x, m, k, w).iter().map(|v| v.to_bits()).collect() };
                let one = bits(1);
                for threads in [2, 3] {
                    assert!(bits(threads) == one, "{dtype} m={m} {}: {threads} threads differ from 1", isa.name());
                }
            }
        }
    }
}

/// A batch's decode decodes each q4_0/q4_1/q5_0/q8_0/q4_k/q6_k block once
/// for all its rows (`simd::dot_rows_multi`, groups of up to four: 2..=8 rows), with
/// each row's own arithmetic: every row's results are the bits of that row
/// run alone, for every type (the others take the per-row path below 4
/// rows; from 4 on they take the tiled path, whose sums are in another
/// order, so they are checked at 2 and 3 only).
#[test]
fn batch_rows_give_the_bits_of_each_row_alone() {
    let mut rng = Rng(11);
    let (n, k) = (1001, 256);
    for dtype in [DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4K, DType::Q6K, DType::F16].into_iter().chain(NEWER_TYPES) {
        let bytes = random_weights(dtype, n, k, &mut rng);
        let shape = [n, k];
        let w = WeightRef { dtype, shape: &shape, bytes: &bytes };
        for m in 2..=matmul::MULTI_MAX_ROWS {
            let x: Vec<f32> = (0..m * k).map(|_| rng.f32()).collect();
            for isa in isas() {
                if m >= matmul::GEMM_MIN_ROWS && !simd::has_rows_multi(isa, dtype) {
                    continue;
                }
                assert!(matmul::uses_row_dots(isa, dtype, m), "{dtype} m={m} {}: row dots", isa.name());
                let pool = SpinPool::new(2);
                let together: Vec<u32> = matmul::matmul(&pool, isa, &x, m, k, w).iter().map(|v| v.to_bits()).collect();
                let alone: Vec<u32> = x.chunks_exact(k).flat_map(|row| matmul::matmul(&pool, isa, row, 1, k, w)).map(|v| v.to_bits()).collect();
                assert!(together == alone, "{dtype} m={m} {}: a batch row differs from the row alone", isa.name());
            }
        }
    }
}

/// A MoE expert's rows, gathered out of a batch, are multiplied on the
/// path the whole batch takes (`matmul_on_path`): on either path a row's
/// bits do not depend on the other rows, so each gathered row gets the
/// bits it has in the batch. Batches of 3 (row dots) and 13 (tiled: the
/// f32 and block types without multi-row kernels), subsets of 1, 2, 5
/// rows. The control: a subset of 5 on its own path (row dots), where
/// the batch of 13 was tiled, differs for some type.
#[test]
fn gathered_rows_on_the_batch_path_keep_their_bits() {
    let mut rng = Rng(19);
    let (n, k) = (45, 256);
    let mut own_path_differs = false;
    for dtype in [DType::F32, DType::F16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4K, DType::Q6K].into_iter().chain(NEWER_TYPES) {
        let bytes = random_weights(dtype, n, k, &mut rng);
        let shape = [n, k];
        let w = WeightRef { dtype, shape: &shape, bytes: &bytes };
        for m in [3, 13] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.f32()).collect();
            for isa in isas() {
                let pool = SpinPool::new(2);
                let batch: Vec<u32> = matmul::matmul(&pool, isa, &x, m, k, w).iter().map(|v| v.to_bits()).collect();
                for subset in [&[1][..], &[0, 2], &[0, 3, 4, 9, 12]] {
                    let subset: Vec<usize> = subset.iter().copied().filter(|&r| r < m).collect();
                    let xs: Vec<f32> = subset.iter().flat_map(|&r| &x[r * k..(r + 1) * k]).copied().collect();
                    let want: Vec<u32> = subset.iter().flat_map(|&r| &batch[r * n..(r + 1) * n]).copied().collect();
                    let got: Vec<u32> = matmul::matmul_on_path(&pool, isa, &xs, subset.len(), k, w, m).iter().map(|v| v.to_bits()).collect();
                    assert!(got == want, "{dtype} {} m={m} rows {subset:?}: gathered rows differ from the batch's", isa.name());
                    let own: Vec<u32> = matmul::matmul(&pool, isa, &xs, subset.len(), k, w).iter().map(|v| v.to_bits()).collect();
                    own_path_differs |= own != want;
                }
            }
        }
    }
    assert!(own_path_differs, "no subset's own path differs: the test shows nothing");
}

fn attention_case(
    rng: &mut Rng,
    (b, nh, nkv, s, t, d): (usize, usize, usize, usize, usize, usize),
    pos: Vec<i32>,
    window: Option<usize>,
    softcap: Option<f32>,
) {
    let q: Vec<f32> = (0..b * nh * s * d).map(|_| rng.f32()).collect();
    let k: Vec<f32> = (0..b * nkv * t * d).map(|_| rng.f32() * 3.0).collect();
    let v: Vec<f32> = (0..b * nkv * t * d).map(|_| rng.f32()).collect();
    let op = Op::Attention { n_heads: nh, n_kv_heads: nkv, scale: 0.3, causal: true, window, softcap, ring: false, sinks: false };
    let args = [
        Tensor::f32(vec![b, nh, s, d], q.clone()),
        Tensor::f32(vec![b, nkv, t, d], k.clone()),
        Tensor::f32(vec![b, nkv, t, d], v.clone()),
        Tensor::i32(vec![b, s], pos.clone()),
    ];
    let want = reference::eval_op(&op, &args).unwrap();
    let sh = attention::AttentionShape { batch: b, n_heads: nh, n_kv_heads: nkv, seq: s, keys: t, head_dim: d, v_dim: d };
    let pr = attention::AttentionParams { scale: 0.3, causal: true, window, softcap, ring: false };
    for isa in isas() {
        let got = attention::attention(&SpinPool::new(3), isa, &sh, &pr, &attention::AttentionInputs { q: &q, k: &k, v: &v, pos: &pos, sinks: None });
        for (i, (g, r)) in got.iter().zip(want.as_f32().unwrap()).enumerate() {
            assert!((g - r).abs() <= 1e-5, "{} window {window:?}: [{i}] {g} vs {r}", isa.name());
        }
    }
}

#[test]
fn attention_matches_the_reference_gqa_ragged_windowed() {
    let mut rng = Rng(3);
    // 3 rows, each at its own position (ragged), 6 query heads on 2 kv heads,
    // a cache of capacity 40 of which each row sees a different prefix.
    attention_case(&mut rng, (3, 6, 2, 1, 40, 24), vec![5, 17, 38], None, None);
    attention_case(&mut rng, (3, 6, 2, 1, 40, 24), vec![5, 17, 38], Some(8), Some(5.0));
    // Head dim 264: past the 128 columns the weighted sum keeps in
    // registers at once (Gemma 3's is 256), and not a multiple of 16.
    attention_case(&mut rng, (1, 2, 1, 3, 9, 264), vec![2, 5, 8], None, None);
    // Prefill: two rows of 4 queries each.
    attention_case(&mut rng, (2, 4, 1, 4, 12, 16), vec![0, 1, 2, 3, 6, 7, 8, 9], Some(3), None);
    // Enough (row, kv head, position) triples for one task per GQA group
    // (4 query heads share their keys: one register tile of scores, and on
    // AVX-512 one pass over V for the 4 of them, at dv = 64 and 128).
    let pos: Vec<i32> = (0..2).flat_map(|b| (0..5).map(move |i| 3 * b + i)).collect();
    attention_case(&mut rng, (2, 8, 2, 5, 20, 64), pos.clone(), None, Some(4.0));
    attention_case(&mut rng, (2, 8, 2, 5, 20, 128), pos, Some(3), None);
}

/// A window's ring cache: the keys of a full cache of `t` rows laid out as
/// a ring of `ring` rows (position `x` in row `x % ring`, the last `ring`
/// positions kept) must give what the full cache gives, on the reference
/// and on the fast kernel at every ISA. Rows sit at different positions, so
/// one wraps (two runs of rows), one does not, one has barely started.
#[test]
fn ring_attention_equals_full_cache_attention() {
    let mut rng = Rng(11);
    let (b, nh, nkv, d, t, ring, window) = (3, 4, 2, 20, 40, 9, 5);
    let pos = vec![37i32, 8, 2];
    let q: Vec<f32> = (0..b * nh * d).map(|_| rng.f32()).collect();
    let k: Vec<f32> = (0..b * nkv * t * d).map(|_| rng.f32() * 3.0).collect();
    let v: Vec<f32> = (0..b * nkv * t * d).map(|_| rng.f32()).collect();
    let to_ring = |full: &[f32]| {
        let mut r = vec![f32::NAN; b * nkv * ring * d];
        for (bi, &end) in pos.iter().enumerate() {
            for h in 0..nkv {
                // What a row holds after appending positions 0..=end: the last `ring`.
                let end = end as usize;
                for x in end.saturating_sub(ring - 1)..=end {
                    let (src, dst) = (((bi * nkv + h) * t + x) * d, ((bi * nkv + h) * ring + x % ring) * d);
                    r[dst..dst + d].copy_from_slice(&full[src..src + d]);
                }
            }
        }
        r
    };
    let (kr, vr) = (to_ring(&k), to_ring(&v));
    let full_op =
        Op::Attention { n_heads: nh, n_kv_heads: nkv, scale: 0.3, causal: true, window: Some(window), softcap: None, ring: false, sinks: false };
    let ring_op =
        Op::Attention { n_heads: nh, n_kv_heads: nkv, scale: 0.3, causal: true, window: Some(window), softcap: None, ring: true, sinks: false };
    let args = |k: &[f32], v: &[f32], rows| {
        [
            Tensor::f32(vec![b, nh, 1, d], q.clone()),
            Tensor::f32(vec![b, nkv, rows, d], k.to_vec()),
            Tensor::f32(vec![b, nkv, rows, d], v.to_vec()),
            Tensor::i32(vec![b, 1], pos.clone()),
        ]
    };
    let want = reference::eval_op(&full_op, &args(&k, &v, t)).unwrap();
    let got = reference::eval_op(&ring_op, &args(&kr, &vr, ring)).unwrap();
    let bits = |x: &Tensor| x.as_f32().unwrap().iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    // The reference reads the same keys in the same order: the same bits.
    assert_eq!(bits(&got), bits(&want), "reference: ring vs full cache");
    let sh = attention::AttentionShape { batch: b, n_heads: nh, n_kv_heads: nkv, seq: 1, keys: ring, head_dim: d, v_dim: d };
    let pr = attention::AttentionParams { scale: 0.3, causal: true, window: Some(window), softcap: None, ring: true };
    for isa in isas() {
        let got =
            attention::attention(&SpinPool::new(2), isa, &sh, &pr, &attention::AttentionInputs { q: &q, k: &kr, v: &vr, pos: &pos, sinks: None });
        // Up to summation blocking (the wrapped row scores in two runs); a
        // NaN (an unwritten ring row read) fails this too.
        for (i, (g, r)) in got.iter().zip(want.as_f32().unwrap()).enumerate() {
            assert!((g - r).abs() <= 1e-5, "{} ring: [{i}] {g} vs {r}", isa.name());
        }
    }
    // The same ring read as a full cache (no `ring`) is a different answer.
    let wrong = reference::eval_op(&full_op, &args(&kr, &vr, ring));
    assert!(wrong.is_err() || bits(&wrong.unwrap()) != bits(&want));
}

/// Prefill on the outer-product path (AVX-512): 16 queries per row with a
/// window, read from a full cache and from a ring of `window + 15` rows
/// that has wrapped, against the reference on the full cache; GQA 4:1, and
/// rows at different positions (the second row's window starts at 0).
#[test]
fn prefill_attention_panels_match_the_reference_on_full_and_ring_caches() {
    let mut rng = Rng(19);
    let (b, nh, nkv, s, d, t, window) = (2, 8, 2, 16, 48, 80, 10);
    let ring = window + s - 1;
    let pos: Vec<i32> = (0..s as i32).map(|i| 50 + i).chain((0..s as i32).map(|i| 2 + i)).collect();
    let q: Vec<f32> = (0..b * nh * s * d).map(|_| rng.f32()).collect();
    let k: Vec<f32> = (0..b * nkv * t * d).map(|_| rng.f32() * 3.0).collect();
    let v: Vec<f32> = (0..b * nkv * t * 64).map(|_| rng.f32()).collect();
    let to_ring = |full: &[f32], w: usize| {
        let mut r = vec![f32::NAN; b * nkv * ring * w];
        for bi in 0..b {
            let end = pos[bi * s + s - 1] as usize;
            for h in 0..nkv {
                for x in end.saturating_sub(ring - 1)..=end {
                    let (src, dst) = (((bi * nkv + h) * t + x) * w, ((bi * nkv + h) * ring + x % ring) * w);
                    r[dst..dst + w].copy_from_slice(&full[src..src + w]);
                }
            }
        }
        r
    };
    let (kr, vr) = (to_ring(&k, d), to_ring(&v, 64));
    let op =
        Op::Attention { n_heads: nh, n_kv_heads: nkv, scale: 0.2, causal: true, window: Some(window), softcap: Some(6.0), ring: false, sinks: false };
    let want = reference::eval_op(
        &op,
        &[
            Tensor::f32(vec![b, nh, s, d], q.clone()),
            Tensor::f32(vec![b, nkv, t, d], k.clone()),
            Tensor::f32(vec![b, nkv, t, 64], v.clone()),
            Tensor::i32(vec![b, s], pos.clone()),
        ],
    )
    .unwrap();
    let want = want.as_f32().unwrap();
    let mut engaged = 0;
    for isa in isas() {
        for (keys, ring_flag, kk, vv) in [(t, false, &k, &v), (ring, true, &kr, &vr)] {
            let sh = attention::AttentionShape { batch: b, n_heads: nh, n_kv_heads: nkv, seq: s, keys, head_dim: d, v_dim: 64 };
            let pr = attention::AttentionParams { scale: 0.2, causal: true, window: Some(window), softcap: Some(6.0), ring: ring_flag };
            let inputs = attention::AttentionInputs { q: &q, k: kk, v: vv, pos: &pos, sinks: None };
            let pool = SpinPool::new(2);
            engaged += attention::prefill_panels(&pool, isa, &sh, &pr, &inputs).is_some() as usize;
            let got = attention::attention(&pool, isa, &sh, &pr, &inputs);
            for (i, (g, r)) in got.iter().zip(want).enumerate() {
                assert!((g - r).abs() <= 1e-5, "{} ring {ring_flag}: [{i}] {g} vs {r}", isa.name());
            }
        }
    }
    if Isa::Avx512.available() {
        assert_eq!(engaged, 2, "the panel path must serve both caches on AVX-512");
    }
}

/// Decode over long caches, split into chunks of `SPLIT_KEYS` keys and
/// merged: rows at positions spanning several chunks, one chunk, and a
/// chunk boundary, with and without a window, from a full cache and from a
/// wrapped ring, against the reference on the full cache.
#[test]
fn split_decode_attention_matches_the_reference() {
    let mut rng = Rng(23);
    let (b, nh, nkv, d, t) = (3, 8, 2, 32, 700);
    let pos = vec![650i32, attention::SPLIT_KEYS as i32, 5];
    let q: Vec<f32> = (0..b * nh * d).map(|_| rng.f32()).collect();
    let k: Vec<f32> = (0..b * nkv * t * d).map(|_| rng.f32() * 3.0).collect();
    let v: Vec<f32> = (0..b * nkv * t * d).map(|_| rng.f32()).collect();
    let mut engaged = 0;
    for (window, softcap) in [(None, None), (Some(300), Some(5.0))] {
        let op = Op::Attention { n_heads: nh, n_kv_heads: nkv, scale: 0.25, causal: true, window, softcap, ring: false, sinks: false };
        let args = [
            Tensor::f32(vec![b, nh, 1, d], q.clone()),
            Tensor::f32(vec![b, nkv, t, d], k.clone()),
            Tensor::f32(vec![b, nkv, t, d], v.clone()),
            Tensor::i32(vec![b, 1], pos.clone()),
        ];
        let want = reference::eval_op(&op, &args).unwrap();
        let want = want.as_f32().unwrap();
        // The window's ring: the last `ring` positions of each row.
        let ring = 320;
        let to_ring = |full: &[f32]| {
            let mut r = vec![f32::NAN; b * nkv * ring * d];
            for (bi, &end) in pos.iter().enumerate() {
                for h in 0..nkv {
                    for x in (end as usize).saturating_sub(ring - 1)..=end as usize {
                        let (src, dst) = (((bi * nkv + h) * t + x) * d, ((bi * nkv + h) * ring + x % ring) * d);
                        r[dst..dst + d].copy_from_slice(&full[src..src + d]);
                    }
                }
            }
            r
        };
        let (kr, vr) = (to_ring(&k), to_ring(&v));
        let mut caches = vec![(t, false, k.clone(), v.clone())];
        if window.is_some() {
            caches.push((ring, true, kr, vr));
        }
        for isa in isas() {
            for (keys, ring_flag, kk, vv) in &caches {
                let sh = attention::AttentionShape { batch: b, n_heads: nh, n_kv_heads: nkv, seq: 1, keys: *keys, head_dim: d, v_dim: d };
                let pr = attention::AttentionParams { scale: 0.25, causal: true, window, softcap, ring: *ring_flag };
                let inputs = attention::AttentionInputs { q: &q, k: kk, v: vv, pos: &pos, sinks: None };
                let pool = SpinPool::new(2);
                engaged += attention::decode_split(&pool, isa, &sh, &pr, &inputs).is_some() as usize;
                let got = attention::attention(&pool, isa, &sh, &pr, &inputs);
                for (i, (g, r)) in got.iter().zip(want).enumerate() {
                    assert!((g - r).abs() <= 1e-5, "{} window {window:?} ring {ring_flag}: [{i}] {g} vs {r}", isa.name());
                }
            }
        }
    }
    assert_eq!(engaged, 3 * isas().len(), "the split path serves every long-cache case");
}

/// Attention sinks (gpt-oss) on each of the three paths — prefill
/// panels, split decode over a long cache, per-position decode — against
/// the reference, and the reference against the definition in f64 (the
/// sink concatenated to each head's scores, softmaxed, dropped). Control:
/// the same attention without its sinks is far outside the bound.
#[test]
fn attention_sinks_match_the_reference_on_every_path() {
    let mut rng = Rng(41);
    // A head of 64: one panel of values, so the prefill panels take it.
    let (b, nh, nkv, d, t) = (2, 6, 2, 64, 400);
    let k: Vec<f32> = (0..b * nkv * t * d).map(|_| rng.f32() * 2.0).collect();
    let v: Vec<f32> = (0..b * nkv * t * d).map(|_| rng.f32()).collect();
    // Sinks of the scores' size: each moves a head's weights by tens of percent.
    let sinks: Vec<f32> = (0..nh).map(|h| [-1.0, 0.5, 2.0, 3.5, 1.0, 0.0][h] + rng.f32() * 0.1).collect();
    let mut paths = std::collections::BTreeMap::<&str, usize>::new();
    for (s, pos) in [(5usize, vec![20i32, 21, 22, 23, 24, 3, 4, 5, 6, 7]), (1, vec![350, 9]), (1, vec![40, 9])] {
        let q: Vec<f32> = (0..b * nh * s * d).map(|_| rng.f32()).collect();
        let args = |with: bool| {
            let mut a = vec![
                Tensor::f32(vec![b, nh, s, d], q.clone()),
                Tensor::f32(vec![b, nkv, t, d], k.clone()),
                Tensor::f32(vec![b, nkv, t, d], v.clone()),
                Tensor::i32(vec![b, s], pos.clone()),
            ];
            if with {
                a.push(Tensor::f32(vec![nh], sinks.clone()));
            }
            a
        };
        let op =
            |with| Op::Attention { n_heads: nh, n_kv_heads: nkv, scale: 0.3, causal: true, window: None, softcap: None, ring: false, sinks: with };
        let want = reference::eval_op(&op(true), &args(true)).unwrap();
        let want = want.as_f32().unwrap();
        let without = reference::eval_op(&op(false), &args(false)).unwrap();
        let far = want.iter().zip(without.as_f32().unwrap()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(far > 1e-2, "sinks change the answer by only {far}: the case separates nothing");
        // The definition, in f64, for every row.
        for bi in 0..b {
            for h in 0..nh {
                for si in 0..s {
                    let p = pos[bi * s + si] as usize;
                    let kv = (bi * nkv + h / (nh / nkv)) * t;
                    let qr = &q[((bi * nh + h) * s + si) * d..][..d];
                    let mut logits: Vec<f64> =
                        (0..=p).map(|j| 0.3 * qr.iter().zip(&k[(kv + j) * d..][..d]).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>()).collect();
                    logits.push(sinks[h] as f64);
                    let m = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = logits.iter().map(|x| (x - m).exp()).sum();
                    for c in 0..d {
                        let o: f64 = (0..=p).map(|j| (logits[j] - m).exp() / z * v[(kv + j) * d + c] as f64).sum();
                        let got = want[((bi * nh + h) * s + si) * d + c];
                        assert!((got as f64 - o).abs() <= 1e-5, "reference [{bi},{h},{si},{c}]: {got} vs {o}");
                    }
                }
            }
        }
        let sh = attention::AttentionShape { batch: b, n_heads: nh, n_kv_heads: nkv, seq: s, keys: t, head_dim: d, v_dim: d };
        let pr = attention::AttentionParams { scale: 0.3, causal: true, window: None, softcap: None, ring: false };
        for isa in isas() {
            let pool = SpinPool::new(2);
            let inputs = attention::AttentionInputs { q: &q, k: &k, v: &v, pos: &pos, sinks: Some(&sinks) };
            let path = if attention::prefill_panels(&pool, isa, &sh, &pr, &inputs).is_some() {
                "prefill_panels"
            } else if attention::decode_split(&pool, isa, &sh, &pr, &inputs).is_some() {
                "decode_split"
            } else {
                "per_position"
            };
            *paths.entry(path).or_default() += 1;
            let got = attention::attention(&pool, isa, &sh, &pr, &inputs);
            for (i, (g, r)) in got.iter().zip(want).enumerate() {
                assert!((g - r).abs() <= 1e-5, "{} {path}: [{i}] {g} vs {r}", isa.name());
            }
        }
    }
    println!("paths run with sinks: {paths:?}");
    assert!(paths.contains_key("decode_split") && paths.contains_key("per_position"), "{paths:?}");
    if Isa::Avx512.available() {
        assert!(paths.contains_key("prefill_panels"), "{paths:?}");
    }
}

#[test]
fn fast_executor_equals_reference_on_a_tiny_llama_and_counts_its_kernels() {
    let dir = graphc_tests::temp_dir("fast_tiny");
    let path = graphc_tests::GgufWriter::tiny_llama().write(&dir, "tiny.gguf");
    let model = graphc::Model::compile(&path, &graphc::CompileOptions::default(), None).unwrap();
    let prompt = [1u32, 5, 0, 3, 7, 2];
    let run = |kernels| {
        let mut s = model.session(&graphc::SessionOptions { threads: Some(2), kernels: Some(kernels), ..Default::default() }).unwrap();
        let mut logits = s.prefill(&prompt).unwrap();
        let mut all = logits.clone();
        for t in [4u32, 6, 1] {
            logits = s.decode(t).unwrap();
            all.extend_from_slice(&logits);
        }
        (all, s.kernel_counts())
    };
    let (want, counts) = run(graphc::Kernels::Reference);
    assert!(counts.is_empty());
    for isa in isas() {
        let (got, counts) = run(graphc::Kernels::Fast(isa));
        let max = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        println!("{}: max |Δlogit| {max:.2e}, kernels {counts:?}", isa.name());
        assert!(max <= 1e-4, "{}: max |Δlogit| {max}", isa.name());
        for k in ["matmul_rows", "matmul_tiled", "attention", "rope", "view"] {
            assert!(counts.get(k).copied().unwrap_or(0) > 0, "{}: fast kernel `{k}` never ran: {counts:?}", isa.name());
        }
    }
}

/// A llama GGUF (2 layers, hidden 256, 2 heads of 128 on one KV head, FFN
/// 256, vocab 8) whose every matrix is one of the newer block types, each
/// type in several roles (q/k/v/o, gate/up/down, and the tied embedding
/// table and head as iq4_xs): compiled from the file, prefilled and decoded
/// on the fast kernels at every ISA against the reference executor.
#[test]
fn a_tiny_llama_in_the_newer_block_types_runs_on_the_fast_kernels() {
    tiny_llama_in_types(&NEWER_TYPES, DType::IQ4XS, 0xbb67ae8584caa73b);
}

/// The same for the codebook types (iq2_xxs, iq2_xs, iq2_s, iq3_xxs,
/// iq3_s; the embedding table and head as iq2_xxs).
#[test]
fn a_tiny_llama_in_the_iq2_and_iq3_types_runs_on_the_fast_kernels() {
    tiny_llama_in_types(&CODEBOOK_TYPES, DType::IQ2XXS, 0x3c6ef372fe94f82b);
}

/// A tiny llama whose matrices cycle through `types` (each in two roles at
/// least), its tied embedding table and head of type `embedding`, run on
/// every ISA's fast kernels against the reference executor.
fn tiny_llama_in_types(types: &[DType], embedding: DType, seed: u64) {
    let (d, kv) = (256u64, 128u64);
    let mut rng = Rng(seed);
    // Random quants, with each f16 scale sized so that weights are O(0.05)
    // and activations stay O(1) through both layers.
    let mut matrix = |dtype: DType, rows: u64| -> Vec<u8> {
        let scales: &[(usize, f32)] = match dtype {
            DType::Q5_1 => &[(0, 0.004), (2, 0.06)],
            DType::Q2K => &[(80, 0.002), (82, 0.002)],
            DType::Q3K => &[(108, 0.0005)],
            DType::IQ4NL => &[(0, 0.0005)],
            DType::IQ2XXS | DType::IQ2XS | DType::IQ2S | DType::IQ3XXS | DType::IQ3S => &[(0, 0.0002)],
            DType::IQ1S => &[(0, 0.003)],
            DType::IQ1M | DType::MXFP4 => &[],
            _ => &[(0, 0.00003)],
        };
        let mut out: Vec<u8> = (0..rows * d / dtype.block_elems() as u64 * dtype.block_bytes() as u64).map(|_| rng.byte()).collect();
        for block in out.chunks_exact_mut(dtype.block_bytes()) {
            for &(at, scale) in scales {
                block[at..at + 2].copy_from_slice(&f16::from_f32(rng.f32() * scale).to_le_bytes());
            }
            if dtype == DType::IQ1M {
                iq1_m_scale(block, f16::from_f32(rng.f32() * 0.003));
            }
            if dtype == DType::MXFP4 {
                block[0] = 119 + rng.byte() % 3; // 2^-9 .. 2^-7, halved
            }
        }
        out
    };
    let ggml_id = |dtype: DType| match dtype {
        DType::Q5_1 => 7,
        DType::Q2K => 10,
        DType::Q3K => 11,
        DType::IQ2XXS => 16,
        DType::IQ2XS => 17,
        DType::IQ3XXS => 18,
        DType::IQ4NL => 20,
        DType::IQ3S => 21,
        DType::IQ2S => 22,
        DType::IQ4XS => 23,
        DType::IQ1S => 19,
        DType::IQ1M => 29,
        DType::MXFP4 => 39,
        other => panic!("no GGML id here for {other}"),
    };
    let mut w = graphc_tests::GgufWriter::tiny_llama()
        .set_meta("llama.embedding_length", graphc_tests::Meta::U32(d as u32))
        .set_meta("llama.feed_forward_length", graphc_tests::Meta::U32(d as u32));
    w.tensors.clear();
    let mut cycle = types.iter().copied().cycle();
    let mut push = |w: &mut graphc_tests::GgufWriter, name: String, dtype: DType, rows: u64| {
        let bytes = matrix(dtype, rows);
        w.tensors.push((name, vec![rows, d], ggml_id(dtype), bytes));
    };
    push(&mut w, "token_embd.weight".into(), embedding, 8);
    let mut used = std::collections::BTreeMap::<String, usize>::new();
    for l in 0..2 {
        w = w.f32_tensor(&format!("blk.{l}.attn_norm.weight"), &[d], &vec![1.0; d as usize]);
        w = w.f32_tensor(&format!("blk.{l}.ffn_norm.weight"), &[d], &vec![1.0; d as usize]);
        for (m, rows) in [("attn_q", d), ("attn_k", kv), ("attn_v", kv), ("attn_output", d), ("ffn_gate", d), ("ffn_up", d), ("ffn_down", d)] {
            let dtype = cycle.next().unwrap();
            *used.entry(dtype.name().into()).or_default() += 1;
            push(&mut w, format!("blk.{l}.{m}.weight"), dtype, rows);
        }
    }
    w = w.f32_tensor("output_norm.weight", &[d], &vec![1.0; d as usize]);
    assert!(used.len() == types.len() && used.values().all(|&n| n >= 2), "{used:?}");
    let dir = graphc_tests::temp_dir("fast_newer_types");
    let path = w.write(&dir, &format!("types-{seed:x}.gguf"));
    let model = graphc::Model::compile(&path, &graphc::CompileOptions::default(), None).unwrap();
    let prompt = [1u32, 5, 0, 3, 7, 2];
    let run = |kernels| {
        let mut s = model.session(&graphc::SessionOptions { threads: Some(2), kernels: Some(kernels), ..Default::default() }).unwrap();
        let mut all = s.prefill(&prompt).unwrap();
        for t in [4u32, 6, 1] {
            all.extend(s.decode(t).unwrap());
        }
        (all, s.kernel_counts())
    };
    let (want, _) = run(graphc::Kernels::Reference);
    let peak = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(want.iter().all(|v| v.is_finite()) && peak > 0.1, "the logits must be finite and not ~0: peak {peak}");
    for isa in isas() {
        let (got, counts) = run(graphc::Kernels::Fast(isa));
        let max = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        println!("{}: max |Δlogit| {max:.2e} of peak {peak:.2}, kernels {counts:?}", isa.name());
        assert!(max <= 1e-5 * peak.max(1.0), "{}: max |Δlogit| {max} (peak {peak})", isa.name());
        for k in ["matmul_rows", "matmul_tiled"] {
            assert!(counts.get(k).copied().unwrap_or(0) > 0, "{}: fast kernel `{k}` never ran: {counts:?}", isa.name());
        }
    }
}

#[test]
fn kernels_this_cpu_cannot_run_are_refused() {
    for isa in Isa::ALL.into_iter().filter(|i| !i.available()) {
        let e = Fast::new(isa, 1).err().expect("refused");
        assert!(e.contains(isa.name()), "{e}");
    }
    assert!(Fast::new(Isa::Portable, 2).is_ok());
}

#[test]
fn a_spin_pool_runs_regions_published_before_its_workers_start() {
    // A region right after `new` (the workers may not be running yet), many
    // regions back to back, and regions from pools on several threads at once.
    let work = || {
        for _ in 0..200 {
            let pool = SpinPool::new(3);
            let mut out = vec![0usize; 64];
            graphc_backends::cpu::pool::for_each_chunk_mut(&pool, &mut out, 4, |i, c| c.iter_mut().for_each(|v| *v = i));
            assert_eq!(out, (0..64).map(|j| j / 4).collect::<Vec<_>>());
        }
    };
    let threads: Vec<_> = (0..4).map(|_| std::thread::spawn(work)).collect();
    // A watchdog, not a speed assertion: the work takes well under a second;
    // a lost wake-up would hang forever, so fail loudly instead.
    let t0 = std::time::Instant::now();
    while !threads.iter().all(|t| t.is_finished()) {
        assert!(t0.elapsed() < std::time::Duration::from_secs(120), "a spin-pool region never completed (lost wake-up)");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn gelu_tanh_matches_the_reference_on_every_isa() {
    // -12 .. 12 in uneven steps (past where tanh saturates, through 0), and a
    // length that is not a multiple of 16 so the scalar tail runs too.
    let xs: Vec<f32> = (0..1001).map(|i| -12.0 + i as f32 * 0.024 + (i % 7) as f32 * 1e-4).collect();
    let f = |x: f32| {
        let c = (2.0f64 / std::f64::consts::PI).sqrt();
        let x = x as f64;
        (0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())) as f32
    };
    for isa in isas() {
        let mut got = xs.clone();
        simd::unary(isa, UnaryOp::GeluTanh, &mut got);
        for (x, g) in xs.iter().zip(&got) {
            let want = f(*x);
            // ~1e-7 relative error on `1 + tanh`, times 0.5 |x|.
            assert!((g - want).abs() <= 1e-6 * (1.0 + x.abs()), "{} gelu({x}) = {g}, want {want}", isa.name());
        }
    }
    // The control: the erf form differs from the tanh form by far more here.
    let erf_form = |x: f32| 0.5 * x * (1.0 + erf_f64(x as f64 / std::f64::consts::SQRT_2) as f32);
    let worst = xs.iter().map(|&x| (erf_form(x) - f(x)).abs()).fold(0f32, f32::max);
    assert!(worst > 1e-4, "tanh and erf forms must be told apart: {worst}");
}

fn erf_f64(x: f64) -> f64 {
    // Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7): enough to tell the forms apart.
    let t = 1.0 / (1.0 + 0.3275911 * x.abs());
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * (-x * x).exp();
    y.copysign(x)
}

/// The AVX2 row kernels' results, pinned on bit patterns: a kernel rewritten
/// for speed (another instruction mix, the same FMAs in the same order) must
/// not change one bit. Each value folds the bits of `dot_row` on 8 rows of
/// 512 random elements; the expectations are what the kernels gave at commit
/// fa0516b, before the q4_0, q4_1, q4_k, q5_0, q5_1 and q8_0 kernels moved
/// to 128-bit halves converted from memory, and kept since they moved back
/// to 256-bit lanes widened eight bytes at a time and every row kernel
/// prefetches its weights. Any change of summation order (the likely
/// mistake) changes them.
#[test]
fn avx2_row_kernels_keep_their_bits() {
    if !Isa::Avx2.available() {
        println!("skipped: this CPU has no AVX2");
        return;
    }
    let fold = |dtype: DType| {
        let mut rng = Rng(0xa0761d6478bd642f);
        let (rows, k) = (8, 512);
        let bytes = random_weights(dtype, rows, k, &mut rng);
        let x: Vec<f32> = (0..k).map(|_| rng.f32()).collect();
        let sums = simd::group_sums(&x);
        let rb = bytes.len() / rows;
        // FNV-1a over the results' bits.
        bytes.chunks_exact(rb).fold(0xcbf29ce484222325u64, |h, row| {
            let v = simd::dot_row_at(Isa::Avx2, dtype, row, &x, &sums).expect("an AVX2 kernel");
            (h ^ v.to_bits() as u64).wrapping_mul(0x100000001b3)
        })
    };
    let want = [
        (DType::F32, 0xcefd960cb358af70),
        (DType::F16, 0xbecb02d9326d7743),
        // Re-pinned when q4_0 moved to two accumulators (even and odd
        // blocks summed apart, as q4_1): a deliberate reorder, 1.65x faster.
        (DType::Q4_0, 0xa393a72eee9e18f8),
        (DType::Q4_1, 0x96fe7873b3516cdf),
        (DType::Q5_0, 0x761ba1d9232f46f3),
        (DType::Q8_0, 0x0e59e8265ed6388f),
        (DType::Q4K, 0x80fce7f56b92d748),
        (DType::Q5K, 0x73fd617462f2da01),
        (DType::Q6K, 0x1be841c07dc14e71),
        (DType::Q5_1, 0xd45c8178b8bec9bf),
        (DType::Q2K, 0xb4ffee2bf3f8da0e),
        (DType::Q3K, 0x47e25829d1e25194),
        (DType::IQ4NL, 0xc823f05b189f9c0b),
        (DType::IQ4XS, 0xbb225fac6437621b),
        // The codebook types' kernels as first written (2026-12-07).
        (DType::IQ2XXS, 0xbf8fff2bb5e1da6b),
        (DType::IQ2XS, 0x1ad18368dd81fbb5),
        (DType::IQ2S, 0xe56b7e8b1aa63803),
        (DType::IQ3XXS, 0x1cce7a7977c52ddd),
        (DType::IQ3S, 0xc73b98c989664d99),
        (DType::IQ1S, 0x5a5d7098a436a589),
        (DType::IQ1M, 0xce0b47a153ac8395),
        // MXFP4's kernel as first written (2026-12-07).
        (DType::MXFP4, 0x443be9badfd2784a),
    ];
    let got: Vec<(DType, u64)> = weight_types().filter(|&t| !portable_only(t)).map(|t| (t, fold(t))).collect();
    for ((t, h), (_, w)) in got.iter().zip(&want) {
        println!("{t}: {h:#018x} (pinned {w:#018x})");
    }
    assert_eq!(got, want);
}

/// The AVX-512 row kernels' results, pinned on bit patterns as
/// `avx2_row_kernels_keep_their_bits` pins AVX2's: a kernel rewritten for
/// speed (another instruction mix or prefetch, the same FMAs in the same
/// order) must not change one bit. Each value folds the bits of one row at a
/// time (`dot_row`), of a run of 7 rows in one call (`dot_rows`: the
/// four-row kernels for q4_0, q4_1 and q5_0, a padded last group), and of a
/// batch of 2 and of 3 activation rows (`dot_rows_multi`). The expectations
/// are what the kernels gave at commit 068b589, before the four-row kernels
/// took `d` from memory and prefetched the next group as one run.
#[test]
fn avx512_row_kernels_keep_their_bits() {
    if !Isa::Avx512.available() {
        println!("skipped: this CPU has no AVX-512");
        return;
    }
    let fold = |dtype: DType| {
        let mut rng = Rng(0x1d8e4e27c47d124f);
        let (rows, k) = (7, 512);
        let bytes = random_weights(dtype, rows, k, &mut rng);
        let xs: Vec<Vec<f32>> = (0..3).map(|_| (0..k).map(|_| rng.f32()).collect()).collect();
        let sums: Vec<Vec<f32>> = xs.iter().map(|x| simd::group_sums(x)).collect();
        let rb = bytes.len() / rows;
        let mut values: Vec<f32> =
            bytes.chunks_exact(rb).map(|row| simd::dot_row_at(Isa::Avx512, dtype, row, &xs[0], &sums[0]).expect("an AVX-512 kernel")).collect();
        let mut run = vec![0f32; rows];
        simd::dot_rows(Isa::Avx512, dtype, &bytes, &xs[0], &sums[0], &mut run);
        values.extend(run);
        for m in [2, 3] {
            let x: Vec<&[f32]> = xs[..m].iter().map(|v| &v[..]).collect();
            let s: Vec<&[f32]> = sums[..m].iter().map(|v| &v[..]).collect();
            let mut out = vec![0f32; rows * m];
            assert!(simd::dot_rows_multi(Isa::Avx512, dtype, &bytes, &x, &s, &mut out), "{dtype}: a multi-row kernel");
            values.extend(out);
        }
        // FNV-1a over the results' bits.
        values.iter().fold(0xcbf29ce484222325u64, |h, v| (h ^ v.to_bits() as u64).wrapping_mul(0x100000001b3))
    };
    let want = [
        (DType::Q4_0, 0x7d4443e931a2f577),
        (DType::Q4_1, 0x2f729570c7280b74),
        (DType::Q5_0, 0x60d5b81d0bd94bb3),
        (DType::Q8_0, 0xe0a9097d6757021a),
        (DType::Q4K, 0xbc16a059f355b064),
        (DType::Q6K, 0xa0820b61e5518f05),
    ];
    let got: Vec<(DType, u64)> = want.iter().map(|&(t, _)| (t, fold(t))).collect();
    for ((t, h), (_, w)) in got.iter().zip(&want) {
        println!("{t}: {h:#018x} (pinned {w:#018x})");
    }
    assert_eq!(got, want);
}
