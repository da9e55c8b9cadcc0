//! The op set. Each variant's doc comment is its semantics; the CPU reference
//! executor (`graphc-backends::cpu::reference`) is their executable definition.
//!
//! Layout convention: tensors are dense and row-major. Attention-shaped values
//! are `[batch, heads, seq, head_dim]`; hidden states `[batch, seq, hidden]`.

use crate::shape::{Dim, Shape, TensorType};
use crate::DType;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnaryOp {
    Neg,
    Exp,
    Sqrt,
    /// `1 / sqrt(x)`
    Rsqrt,
    /// `1 / x`
    Recip,
    Tanh,
    /// `1 / (1 + exp(-x))`
    Sigmoid,
    /// `x * sigmoid(x)`
    Silu,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` — not the erf form.
    GeluTanh,
    /// `0.5 x (1 + erf(x / sqrt 2))` — not the tanh form.
    GeluErf,
    /// `ln(1 + exp(x))`, and `x` itself past 20 (torch's threshold).
    Softplus,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 11] = [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Recip,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Silu,
        UnaryOp::GeluTanh,
        UnaryOp::GeluErf,
        UnaryOp::Softplus,
    ];

    /// Its mnemonic in the text form.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Exp => "exp",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Recip => "recip",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Silu => "silu",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::GeluErf => "gelu_erf",
            UnaryOp::Softplus => "softplus",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 6] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min];

    /// Its mnemonic in the text form.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    Sum,
    Max,
    Mean,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NormKind {
    /// `x / sqrt(mean(x^2) + eps) * weight`
    Rms,
    /// `(x - mean) / sqrt(var + eps) * weight + bias` (biased variance)
    Layer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RopeStyle {
    /// Rotates pairs `(i, i + rotary_dim/2)` (GPT-NeoX, HF `rotate_half`).
    Neox,
    /// Rotates adjacent pairs `(2i, 2i+1)` (GPT-J, and llama GGUFs, whose
    /// converter permuted Q/K rows for this form).
    GptJ,
}

impl RopeStyle {
    /// Its spelling in the text form (`style=neox`, `style=gptj`).
    pub fn name(self) -> &'static str {
        match self {
            RopeStyle::Neox => "neox",
            RopeStyle::GptJ => "gptj",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (HF "linear").
    Linear {
        factor: f32,
    },
    /// Per-pair frequency factors: pair `i` turns `factors[i]` times slower
    /// (its frequency divided by it), and the rotated features are
    /// multiplied by `attention_factor`. Phi-3's LongRoPE (HF scales cos
    /// and sin by the attention factor; which factor set applies is decided
    /// once, when the graph is built) and llama.cpp's `rope_freqs` tensor
    /// of Llama 3 GGUFs (attention factor 1). `rotary_dim / 2` entries.
    FreqFactors {
        factors: Vec<f32>,
        attention_factor: f32,
    },
    /// Llama 3's frequency scaling (HF `rope_type: "llama3"`): wavelengths
    /// longer than `original_context / low_freq_factor` turn `factor` times
    /// slower, shorter than `original_context / high_freq_factor` are kept,
    /// and those between are blended; computed in f32 in HF's order.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_context: usize,
    },
    /// YaRN (HF `rope_type: "yarn"`, llama.cpp `rope.scaling.type = yarn`):
    /// pairs that turn more than `beta_fast` times over `original_context`
    /// positions keep their frequency, those turning fewer than `beta_slow`
    /// times turn `factor` times slower, and a linear ramp over the pair
    /// index blends the two between (its ends floored and ceiled when
    /// `truncate`); the rotated features are multiplied by
    /// `attention_factor` (HF's default `0.1 ln(factor) + 1`). Computed as
    /// transformers' `_compute_yarn_parameters` computes it.
    Yarn {
        factor: f32,
        original_context: usize,
        beta_fast: f32,
        beta_slow: f32,
        attention_factor: f32,
        truncate: bool,
    },
    /// Gemma 4's "proportional" RoPE (its global layers): pair `i` turns at
    /// `theta^(-2i/rotary_dim)` for `i < rotated_pairs`, and the other
    /// pairs not at all (frequency 0: cos 1, sin 0, the features kept as
    /// they are). Not a partial rotary: the turning pairs span the whole
    /// head (`i`, `i + rotary_dim/2`) and their exponents its whole width.
    Proportional {
        rotated_pairs: usize,
    },
}

impl RopeScaling {
    /// Each feature pair's inverse frequency: `theta^(-2i/rotary_dim)`,
    /// divided by its factor where the scaling has one (in f32, as HF).
    pub fn inv_freq(&self, rotary_dim: usize, theta: f32) -> Vec<f32> {
        if let RopeScaling::Yarn { factor, original_context, beta_fast, beta_slow, truncate, .. } = *self {
            return yarn_inv_freq(rotary_dim, theta, factor, original_context, (beta_fast, beta_slow), truncate);
        }
        (0..rotary_dim / 2)
            .map(|i| {
                let base = theta.powf((2 * i) as f32 / rotary_dim as f32);
                match self {
                    RopeScaling::FreqFactors { factors, .. } => 1.0 / (factors[i] * base),
                    RopeScaling::Proportional { rotated_pairs } if i >= *rotated_pairs => 0.0,
                    RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_context } => {
                        llama3_inv_freq(1.0 / base, *factor, *low_freq_factor, *high_freq_factor, *original_context)
                    }
                    _ => 1.0 / base,
                }
            })
            .collect()
    }

    /// The position a pair's angle is computed from.
    pub fn position(&self, p: i32) -> f32 {
        match self {
            RopeScaling::Linear { factor } => p as f32 / factor,
            _ => p as f32,
        }
    }

    /// What the rotated features are multiplied by (1 but for LongRoPE).
    pub fn magnitude(&self) -> f32 {
        match self {
            RopeScaling::FreqFactors { attention_factor, .. } | RopeScaling::Yarn { attention_factor, .. } => *attention_factor,
            _ => 1.0,
        }
    }
}

/// One pair's Llama 3 inverse frequency, as transformers'
/// `_compute_llama3_parameters` computes it on f32 tensors (a Python
/// scalar divided by a tensor is the tensor's reciprocal times the scalar).
fn llama3_inv_freq(inv_freq: f32, factor: f32, low: f32, high: f32, original: usize) -> f32 {
    let original = original as f64;
    let (low_wavelen, high_wavelen) = ((original / low as f64) as f32, (original / high as f64) as f32);
    let wavelen = (1.0 / inv_freq) * std::f32::consts::TAU;
    let scaled = if wavelen > low_wavelen { inv_freq / factor } else { inv_freq };
    if wavelen < high_wavelen || wavelen > low_wavelen {
        return scaled;
    }
    let smooth = ((1.0 / wavelen) * original as f32 - low) / (high - low);
    (1.0 - smooth) * scaled / factor + smooth * scaled
}

/// YaRN's inverse frequencies, in transformers' steps: the correction range
/// in f64 (Python floats), the frequencies, ramp and blend on f32 tensors.
fn yarn_inv_freq(dim: usize, theta: f32, factor: f32, original: usize, (beta_fast, beta_slow): (f32, f32), truncate: bool) -> Vec<f32> {
    let base = theta as f64;
    let correction_dim = |rotations: f64| (dim as f64 * (original as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln()) / (2.0 * base.ln());
    let (mut low, mut high) = (correction_dim(beta_fast as f64), correction_dim(beta_slow as f64));
    if truncate {
        (low, high) = (low.floor(), high.ceil());
    }
    let (low, mut high) = (low.max(0.0), high.min(dim as f64 - 1.0));
    if low == high {
        high += 0.001;
    }
    (0..dim / 2)
        .map(|i| {
            let pos_freq = theta.powf((2 * i) as f32 / dim as f32);
            let (extrapolation, interpolation) = (1.0 / pos_freq, 1.0 / (factor * pos_freq));
            let ramp = ((i as f32 - low as f32) / (high - low) as f32).clamp(0.0, 1.0);
            let keep = 1.0 - ramp;
            interpolation * (1.0 - keep) + extrapolation * keep
        })
        .collect()
}

/// The expression of a `chain` op: unary and binary elementwise ops over
/// the op's operands, each with its own arithmetic. Its text form is the
/// ops' own names, e.g. `mul(tanh(div(in0, in1)), in1)`, where `inN` is
/// operand `N` (`signature/elementwise.rs` reads it back).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ChainExpr {
    /// Operand `i`, read with numpy broadcasting.
    Input(usize),
    Unary(UnaryOp, Box<ChainExpr>),
    Binary(BinaryOp, Box<ChainExpr>, Box<ChainExpr>),
}

impl ChainExpr {
    /// How many ops the expression computes.
    pub fn ops(&self) -> usize {
        match self {
            ChainExpr::Input(_) => 0,
            ChainExpr::Unary(_, a) => 1 + a.ops(),
            ChainExpr::Binary(_, a, b) => 1 + a.ops() + b.ops(),
        }
    }

    /// The largest operand index it reads, if any.
    pub fn max_input(&self) -> Option<usize> {
        match self {
            ChainExpr::Input(i) => Some(*i),
            ChainExpr::Unary(_, a) => a.max_input(),
            ChainExpr::Binary(_, a, b) => a.max_input().max(b.max_input()),
        }
    }

    pub fn text(&self) -> String {
        match self {
            ChainExpr::Input(i) => format!("in{i}"),
            ChainExpr::Unary(u, a) => format!("{}({})", u.name(), a.text()),
            ChainExpr::Binary(b, x, y) => format!("{}({}, {})", b.name(), x.text(), y.text()),
        }
    }
}

/// One operation. A node is an op plus its ordered inputs; it produces one
/// value, its result 0. An op with further results (`qkv_rope`) gives each
/// to the `result{index}` nodes that read it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// A runtime input (`tokens`, `positions`, `last_rows`, ...) of the declared type.
    Input { name: String, ty: TensorType },
    /// A checkpoint tensor of the declared storage type, bound at load time.
    Weight { name: String, ty: TensorType },
    /// Loop-carried state read at the start of a step (KV cache, recurrent state).
    State { name: String, ty: TensorType },
    /// `(value)`: the value of state `name` for the next step. Its type is the input's.
    StateOut { name: String },
    /// `(value)`: a graph result returned to the caller.
    Output { name: String },
    /// A tensor of the given type with every element equal to `value`.
    Const { value: f32, ty: TensorType },
    /// `(producer)`: result `index` (1 or more) of a node with further
    /// results; the producer's own value is its result 0.
    Result { index: usize },
    /// `(x)`: same elements, row-major order, new shape (element counts must agree).
    Reshape { shape: Shape },
    /// `(x)`: `out[i_perm[0], ..] = x[i_0, ..]`: output axis `k` is input axis `perm[k]`.
    Permute { perm: Vec<usize> },
    /// `(x)`: elements `start .. start+len` along `axis`.
    Narrow { axis: usize, start: Dim, len: Dim },
    /// `(a, b, ...)`: joined along `axis`; other dims must agree.
    Concat { axis: usize },
    /// `(table [n, d], ids i32[...])`: `out[..., :] = table[ids[...], :]`, as f32.
    /// The table may be quantized (rows dequantized as read). An id outside
    /// `0..n` is an error naming the id.
    Gather,
    /// `(x)`: a materialized copy (a no-op on dense tensors; marks real copies).
    Contiguous,
    /// `(x)`: elementwise.
    Unary(UnaryOp),
    /// `(a, b)`: elementwise with numpy broadcasting (right-aligned, 1 stretches).
    Binary(BinaryOp),
    /// `(in0, in1, ...)`: the elementwise expression `expr` over its
    /// operands (broadcast as `binary` does), each op with its own
    /// arithmetic, in one pass: a chain of unary and binary ops whose
    /// intermediates never reach memory (the `elementwise_chain` pass).
    Chain { expr: ChainExpr },
    /// `(x)`: `min(max(x, min), max)`; a bound that is `None` is not applied.
    /// `clamp(min = t)` alone is `max(x, t)`.
    Clamp { min: Option<f32>, max: Option<f32> },
    /// `(x)`: reduce `axis`, keeping it with length 1.
    Reduce { op: ReduceOp, axis: usize },
    /// `(x)`: softmax along `axis`; with `softcap = c`, logits become
    /// `c * tanh(x / c)` first.
    Softmax { axis: usize, softcap: Option<f32> },
    /// `(gate, up)` of one shape: `act(gate) * up`, the gated-MLP product
    /// (SwiGLU with `silu`, GeGLU with a GELU), formed by the `glu-*` rules
    /// from `mul(act(gate), up)`; the same arithmetic, one pass.
    Glu { act: UnaryOp },
    /// `(x [..., k], w_gate [n, k], w_up [n, k])`: `glu{act}(matmul(x,
    /// w_gate), matmul(x, w_up))`, a gated MLP's two projections and their
    /// product as one op (the `matmul-glu` rule): neither projection is
    /// kept, and a backend may read `x` once for both. Each dot product
    /// and the product are those of the unfused ops.
    MatMulGlu { act: UnaryOp },
    /// `(x [..., d], weight [d], w_gate [n, d], w_up [n, d])`:
    /// `matmul_glu{act}(norm{rms, eps}(x, weight), w_gate, w_up)`, the
    /// MLP's input norm in the same op (the `norm-matmul-glu` rule): the
    /// normed row is formed as `norm` forms it, where the projections read it.
    NormMatMulGlu { act: UnaryOp, eps: f32 },
    /// `(x)`: 1.0 where an element is among the `k` largest of its line
    /// along `axis`, else 0.0 (ties go to the lower index). A MoE router's
    /// top-k choice, kept dense: `probs * mask` weights every expert.
    TopKMask { axis: usize, k: usize },
    /// `(scores)`: PhiMoE's sparsemixer router (inference form, top-2),
    /// along the last axis: a dense weight per expert, 0 but for two.
    /// With `t1 = max(s)` at expert `i1`, experts whose
    /// `(t1 - s) / max(|s|, t1) > 2·jitter_eps` are masked out and the
    /// softmax of the rest gives `i1` its weight. Then `i1` itself is masked
    /// out, and the same with `t2 = max` of what is left (at `i2`), over
    /// that remainder, gives `i2` its weight. (HF writes
    /// `scores.abs().clamp(min=t)`: `clamp(min = t)` is `max(x, t)`.)
    SparseMixer { jitter_eps: f32 },
    /// `(x)`: converted to `dtype` (float↔int rounds toward zero).
    Cast { dtype: DType },
    /// `(x [..., k], w [n, k])`: `out[..., j] = sum_i x[..., i] * w[j, i]`, i.e.
    /// `x · wᵀ` with `w` in checkpoint layout. `w` may be quantized:
    /// dequantizing it inside the kernel is the backend's job.
    MatMul,
    /// `(x [..., d], weight [d], w [n, d])`: `matmul(norm{rms, eps}(x,
    /// weight), w)`, a norm formed where the projection reads it (the
    /// `norm-matmul` rule). Each reader of one norm recomputes it (a pass
    /// over `d` values beside the product's `n·d`), so the normed values
    /// never reach memory and the norm is no launch of its own.
    NormMatMul { eps: f32 },
    /// `(x [..., k], w [n, k], r [..., n])`: `add(r, matmul(x, w))`, the
    /// residual add in the projection's epilogue (the `matmul-add` rules).
    MatMulAdd,
    /// `(x [..., d], weights [..., E], w_gate_0 [f, d], w_up_0 [f, d],
    /// w_down_0 [d, f], ..., w_down_{E-1})` → `[..., d]`: a routed MoE's
    /// experts, run only where routed. With `y_e = matmul(matmul_glu{act}(x,
    /// w_gate_e, w_up_e), w_down_e)`, each row is the sum, left to right over
    /// `e = 0, 1, ...`, of `mul(y_e, weights[..., e])` (the dense form the
    /// frontends build), except that an expert weighted exactly 0 in a row
    /// is not run for that row: its term is a zero, which leaves the sum's
    /// bits as they are (a nonzero sum plus ±0 is itself; the first routed
    /// expert's term starts the sum). Each routed expert's products are
    /// those `matmul` computes for the rows routed to it. Formed by the
    /// `moe_dispatch` pass (E / top-k times less work than the dense form).
    ///
    /// With `bias`, each expert's three weights are each followed by its
    /// bias (`w_gate_e, b_gate_e, w_up_e, b_up_e, w_down_e, b_down_e`),
    /// added to each product. With `limit` (and `alpha`), the clamped
    /// SwiGLU of gpt-oss replaces the glu: with `g` the gate's product
    /// clamped above at `limit`, `u` the up's clamped to `±limit`, the
    /// hidden value is `mul(add(u, 1), mul(g, act(mul(g, alpha))))`.
    MoeExperts { act: UnaryOp, bias: bool, alpha: Option<f32>, limit: Option<f32> },
    /// `(a [..., d], o [..., d], weight [d])`: `add(a, norm{rms, eps}(o,
    /// weight))`, a sandwich norm's residual add (Gemma 2/3's post-norms;
    /// the `norm-add` rules).
    NormAdd { eps: f32 },
    /// `(a [..., d], b [..., d], weight [d], bias [d]?)` →
    /// `norm{kind, eps}(add(a, b), weight, bias)`, with result 1 (read
    /// through `result{index=1}`) the sum `add(a, b)`, the residual stream's
    /// next value: a pre-norm and the residual add before it, the sum
    /// written once and normed as it is written (the `residual_norm` pass;
    /// layer norms, which no rule folds into their readers).
    AddNorm { kind: NormKind, eps: f32 },
    /// `(r [..., n], p [..., h, n], weight [n]?)` → `[..., n]`: with `s` the
    /// sum of `p`'s `h` rows, left to right from 0 (`reduce_sum` along
    /// that axis), `add(r, s)`; or with `eps`, `norm_add{eps}(r, s,
    /// weight)` (a sandwich post-norm, Gemma's): a residual plus the
    /// heads' shares of a projection (`attention_project`). A GPU forms it
    /// where its readers read it.
    AddPartials { eps: Option<f32> },
    /// `(w)`: the f32 values of a quantized or half-precision tensor.
    Dequantize,
    /// `(x [..., d], weight [d], bias [d]?)`: normalization over the last axis.
    Norm { kind: NormKind, eps: f32 },
    /// `(x [b, h, s, d], positions i32[b, s])`: rotary embedding of the first
    /// `rotary_dim` features of each head; feature pair `i` at position `p`
    /// turns by `p' * theta^(-2i/rotary_dim)` where `p'` is `p` after scaling.
    /// Features past `rotary_dim` pass through.
    Rope { style: RopeStyle, rotary_dim: usize, theta: f32, scaling: RopeScaling },
    /// `(x [b, s, h, d], weight [d], positions i32[b, s])` → `[b, h, s, d]`:
    /// `rope(permute{[0, 2, 1, 3]}(norm{rms, eps}(x, weight)), positions)`,
    /// the per-head q/k norm, the heads-major transpose and the rotation in
    /// one pass over each row. Formed by the `norm-rope` rule.
    NormRope { eps: f32, style: RopeStyle, rotary_dim: usize, theta: f32, scaling: RopeScaling },
    /// `(q [b, n_heads, s, d], k [b, n_kv_heads, t, d], v [b, n_kv_heads, t, dv],
    /// positions i32[b, s])` → `[b, n_heads, s, dv]`. Query head `h` reads kv head
    /// `h / (n_heads / n_kv_heads)`. Key row `j` holds position `j`. Scores are
    /// `scale * q·k`, then `softcap * tanh(score / softcap)` when set; query at
    /// position `p` sees key `j` iff `j <= p` (when causal) and `j > p - window`
    /// (when windowed); softmax over the visible keys, weighted sum of v.
    ///
    /// With `ring` (only with a `window`), K and V are ring caches of `t`
    /// rows written by a windowed `kv_append`: the key at position `x` is in
    /// row `x % t`, so a query at `p` reads rows `(p - window + 1 ..= p) % t`,
    /// in position order. Formed by the `window_cache` pass.
    ///
    /// With `sinks`, a fifth input `sinks [n_heads]` holds one logit per
    /// query head that joins the softmax's denominator and weighs no value
    /// (gpt-oss's attention sinks): the head's weights are `exp(s_j - m) /
    /// (Σ exp(s_i - m) + exp(sink - m))`, `m` the largest of the scores and
    /// the sink, so a query may attend to nothing.
    Attention { n_heads: usize, n_kv_heads: usize, scale: f32, causal: bool, window: Option<usize>, softcap: Option<f32>, ring: bool, sinks: bool },
    /// `(q, k, v, positions, w [n, n_heads·dv])` → `[b, s, n_heads, n]`: an
    /// attention and its output projection, split by head. With `a =
    /// reshape(permute{[0, 2, 1, 3]}(attention{..}(q, k, v, positions)))`
    /// (`[b, s, n_heads·dv]`), row `[b, s, h]` is `matmul(a_h, w)` where
    /// `a_h` is `a`'s row with every feature outside head `h`'s `dv` set
    /// to 0: head `h`'s share of the projection. `add_partials` sums the
    /// shares. Formed by the `attention_project` pass: a GPU computes each
    /// head's share in the workgroup that computed the head, so the
    /// attention output never reaches memory and the projection is no
    /// launch of its own.
    AttentionProject { n_heads: usize, n_kv_heads: usize, scale: f32, causal: bool, window: Option<usize>, softcap: Option<f32>, ring: bool },
    /// `(q [b, s, n_heads, d], k [b, s, n_kv_heads, d], v [b, n_kv_heads, s,
    /// dv], q_weight [d], k_weight [d], positions i32[b, s], k_cache [b,
    /// n_kv_heads, cap, d], v_cache [b, n_kv_heads, cap, dv], lengths i32[b],
    /// w [n, n_heads·dv])` → `[b, s, n_heads, n]`, an attention whose heads
    /// are normed before their rotation (Gemma 3's q/k norms): with
    /// `nr(x, g) = norm_rope{eps, style, rotary_dim, theta, scaling}(x, g,
    /// positions)`, results 1 and 2 (`result{index}`) are
    /// `kv_append{axis=2, cap, window=W}(k_cache, nr(k, k_weight), lengths)`
    /// and `kv_append{..}(v_cache, v, lengths)`, written in place (`W` is
    /// `window` when `ring`, else none); result 0 is `attention_project{n_heads,
    /// n_kv_heads, scale, causal, window, softcap, ring}(nr(q, q_weight),
    /// result 1, result 2, positions, w)`. Formed by the
    /// `norm_rope_attention` pass; each value is computed as those ops
    /// compute it, so a backend may run it as one kernel (a decode step's
    /// normed q and k, and its new k and v rows, never reach memory but for
    /// the cache) or as its parts.
    NormRopeAttention {
        eps: f32,
        style: RopeStyle,
        rotary_dim: usize,
        theta: f32,
        scaling: RopeScaling,
        n_heads: usize,
        n_kv_heads: usize,
        scale: f32,
        causal: bool,
        window: Option<usize>,
        softcap: Option<f32>,
        ring: bool,
        cap: Dim,
    },
    /// `(cache [.., cap, ..], new [.., s, ..], lengths i32[b])`: writes `new` into
    /// `cache` in place at row offset `lengths[b]` of each batch row along
    /// `axis`; a write past `cap` is an error naming offset, rows and capacity.
    /// Produced by the `kv_append` pass, never by a frontend.
    ///
    /// With `window = w` the cache is a ring of `cap` rows (the
    /// `window_cache` pass): new row `i` of batch row `b` goes to row
    /// `(lengths[b] + i) % cap`. One step may write at most `cap - w + 1`
    /// rows, which is what keeps every key a query of that step can see
    /// (its last `w` positions) from being overwritten by a later row of the
    /// same step; more is an error naming the rows and the limit.
    KvAppend { axis: usize, cap: Dim, window: Option<usize> },
    /// `(x [b, s, k], w_q [hq·d, k], w_k [hk·d, k], w_v [hk·dv, k], positions
    /// i32[b, s], k_cache [b, hk, cap, d], v_cache [b, hk, cap, dv], lengths
    /// i32[b], weight [k]?, b_q [hq·d]?, b_k [hk·d]?, b_v [hk·dv]?)` →
    /// `[b, hq, s, d]`, an attention layer's head:
    /// with `p(w) = matmul(x, w)`, or `norm_matmul{eps}(x, weight, w)` when
    /// `eps` is set, then `add(p(w), b)` with each projection's bias when
    /// `bias` is set (Qwen2's q/k/v), and `heads(y) = permute{[0, 2, 1, 3]}(reshape(y))`
    /// splitting the features into heads, result 0 is
    /// `rope(heads(p(w_q)), positions)`; results 1 and 2 (`result{index}`)
    /// are `kv_append{axis=2, cap, window}(k_cache, rope(heads(p(w_k)),
    /// positions), lengths)` and the same of `v_cache` and `heads(p(w_v))`,
    /// written in place. Formed by the `attention_head` pass; each value is
    /// computed as those ops compute it, so a backend may run it as one
    /// kernel (q, k and v never reach memory) or as its parts.
    QkvRope { eps: Option<f32>, bias: bool, style: RopeStyle, rotary_dim: usize, theta: f32, scaling: RopeScaling, cap: Dim, window: Option<usize> },
    /// `(x [b, s, c], w [c, kernel], state [b, kernel-1, c], lengths i32[b])`
    /// → `[b, s + kernel - 1, c]`: a depthwise causal convolution over each
    /// row's new tokens after the `kernel - 1` inputs before them (`state`).
    /// With `xc = concat(state, x)` along the sequence, row `t < s` is
    /// `Σ_j w[:, j] * xc[t + j]`; rows `s..` are the next step's state, the
    /// last `kernel - 1` rows of `concat(state, x[.. lengths[b]])` (a
    /// ragged row's padding never enters it). Qwen3-Next's short conv.
    CausalConv1d { kernel: usize },
    /// `(q [b, hk, s, dk], k [b, hk, s, dk], v [b, hv, s, dv], g [b, hv, s],
    /// beta [b, hv, s], state [b, hv, dk, dv], lengths i32[b])` →
    /// `[b, hv, s + dk, dv]`: the gated delta rule, a linear-attention
    /// recurrence (Qwen3-Next's Gated DeltaNet). Value head `h` reads key
    /// head `h / (hv / hk)`. Per row and head, from `S = state`, for each
    /// token `t < lengths[b]`:
    /// `S *= exp(g_t)`; `δ = (v_t - Sᵀk_t) * beta_t`; `S += k_t ⊗ δ`;
    /// `o_t = Sᵀq_t`. Rows `t < s` of the result are `o_t` (0 past the
    /// row's length); rows `s..s+dk` are the final `S`, the next state.
    GatedDeltaRule,
    /// `(x)`: an explicit host-visible read of `x` (a device→host sync),
    /// with the checks that guard its use: `nonempty` (an error if `x` has no
    /// elements) and `bound` (an error naming the index if an i32 value is
    /// outside `0..bound`). The checks are part of the read, so a pass that
    /// moves the read moves them with it.
    ToHost { nonempty: bool, bound: Option<u64> },
}

/// The groups ops are declared in (`signature/`, one file each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Inputs, weights, state, constants, results and host reads.
    Source,
    /// Reshape, permute, narrow, concat, copies, gathers and conversions.
    Layout,
    /// Per-element (or per-line) math.
    Elementwise,
    /// Products with a weight matrix, plain and fused.
    MatMul,
    /// Normalizations, plain and fused.
    Norm,
    /// Rotary embeddings, plain and fused.
    Rope,
    /// Attention and its cache writes.
    Attention,
    /// Ops that carry state along the sequence.
    Recurrent,
}

impl Op {
    /// Which group of ops this one belongs to: the file of `signature/`
    /// that declares its name, attributes and type rule (`mnemonic` is
    /// defined there too).
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Input { .. }
            | Op::Weight { .. }
            | Op::State { .. }
            | Op::StateOut { .. }
            | Op::Output { .. }
            | Op::Const { .. }
            | Op::ToHost { .. }
            | Op::Result { .. } => OpKind::Source,
            Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::Narrow { .. }
            | Op::Concat { .. }
            | Op::Contiguous
            | Op::Gather
            | Op::Cast { .. }
            | Op::Dequantize => OpKind::Layout,
            Op::Unary(_)
            | Op::Binary(_)
            | Op::Chain { .. }
            | Op::Clamp { .. }
            | Op::Glu { .. }
            | Op::Softmax { .. }
            | Op::Reduce { .. }
            | Op::TopKMask { .. }
            | Op::SparseMixer { .. } => OpKind::Elementwise,
            Op::MatMul | Op::MatMulGlu { .. } | Op::NormMatMul { .. } | Op::NormMatMulGlu { .. } | Op::MatMulAdd | Op::MoeExperts { .. } => {
                OpKind::MatMul
            }
            Op::Norm { .. } | Op::NormAdd { .. } | Op::AddNorm { .. } => OpKind::Norm,
            Op::Rope { .. } | Op::NormRope { .. } => OpKind::Rope,
            Op::Attention { .. }
            | Op::KvAppend { .. }
            | Op::QkvRope { .. }
            | Op::AttentionProject { .. }
            | Op::NormRopeAttention { .. }
            | Op::AddPartials { .. } => OpKind::Attention,
            Op::CausalConv1d { .. } | Op::GatedDeltaRule => OpKind::Recurrent,
        }
    }

    /// Ops that declare their own type (graph sources).
    pub fn declared_type(&self) -> Option<&TensorType> {
        match self {
            Op::Input { ty, .. } | Op::Weight { ty, .. } | Op::State { ty, .. } | Op::Const { ty, .. } => Some(ty),
            _ => None,
        }
    }

    /// Ops that multiply by a weight matrix (`matmul` and the fused forms
    /// around it): their first operand's rows are the rows they compute.
    pub fn is_matmul(&self) -> bool {
        matches!(self, Op::MatMul | Op::MatMulGlu { .. } | Op::NormMatMul { .. } | Op::NormMatMulGlu { .. } | Op::MatMulAdd | Op::MoeExperts { .. })
    }

    /// Ops only the optimizer makes (each defined as the ops it replaces).
    pub fn is_fused(&self) -> bool {
        matches!(
            self,
            Op::Glu { .. }
                | Op::MatMulGlu { .. }
                | Op::NormRope { .. }
                | Op::NormMatMul { .. }
                | Op::NormMatMulGlu { .. }
                | Op::MatMulAdd
                | Op::NormAdd { .. }
                | Op::QkvRope { .. }
                | Op::AttentionProject { .. }
                | Op::NormRopeAttention { .. }
                | Op::AddPartials { .. }
                | Op::AddNorm { .. }
                | Op::Chain { .. }
                | Op::MoeExperts { .. }
        )
    }

    /// How many results the op has: 1, or more for an op whose further
    /// results `result{index}` nodes read.
    pub fn results(&self) -> usize {
        match self {
            Op::QkvRope { .. } | Op::NormRopeAttention { .. } => 3,
            Op::AddNorm { .. } => 2,
            _ => 1,
        }
    }

    /// The operand that result `index` is written over in place, where it
    /// is (a cache appended to: `kv_append`'s result 0, `qkv_rope`'s and
    /// `norm_rope_attention`'s 1 and 2).
    pub fn written_over(&self, index: usize) -> Option<usize> {
        match (self, index) {
            (Op::KvAppend { .. }, 0) => Some(0),
            (Op::QkvRope { .. }, 1) => Some(5),
            (Op::QkvRope { .. }, 2) => Some(6),
            (Op::NormRopeAttention { .. }, 1) => Some(6),
            (Op::NormRopeAttention { .. }, 2) => Some(7),
            _ => None,
        }
    }

    /// A cache append's capacity and window (`kv_append`, and the appends
    /// inside `qkv_rope` and `norm_rope_attention`).
    pub fn cache_append(&self) -> Option<(&Dim, Option<usize>)> {
        match self {
            Op::KvAppend { cap, window, .. } | Op::QkvRope { cap, window, .. } => Some((cap, *window)),
            Op::NormRopeAttention { cap, window, ring, .. } => Some((cap, window.filter(|_| *ring))),
            _ => None,
        }
    }

    /// Ops whose value leaves the graph.
    pub fn is_sink(&self) -> bool {
        matches!(self, Op::StateOut { .. } | Op::Output { .. })
    }
}
