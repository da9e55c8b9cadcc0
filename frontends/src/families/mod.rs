//! Model families: each lowers a checkpoint's metadata and tensors to the
//! same IR. `Builder` keeps the lowering code short and records the weight
//! manifest as tensors are used.

pub mod fused_kv;
pub mod gemma;
pub mod gemma2;
pub mod gemma3;
pub mod gemma3_hf;
pub mod gemma4;
pub mod glm4;
pub mod gpt_oss;
pub mod granite;
pub mod hf;
pub mod lfm2;
pub mod llama;
pub mod llama_hf;
pub mod moe;
pub mod olmo2;
pub mod phi2;
pub mod phi3;
pub mod phimoe;
pub mod qwen2;
pub mod qwen2_moe;
pub mod qwen3;
pub mod qwen3_moe;
pub mod qwen3_next;
pub mod registry;

use crate::error::Diagnostic;
use crate::TensorSource;
use graphc_ir::plan::WeightEntry;
use graphc_ir::shape::const_shape;
use graphc_ir::{BinaryOp, DType, Dim, Graph, NodeId, Op, TensorType, UnaryOp};

/// The graph input a family with recurrent layers reads: each batch row's
/// count of real new tokens this step (`i32[batch]`), so that padding in a
/// ragged batch never advances a recurrent state.
pub const NEW_LENGTHS_INPUT: &str = graphc_ir::io::NEW_LENGTHS;

pub struct Builder<'a> {
    pub g: Graph,
    pub source: &'a dyn TensorSource,
    pub manifest: Vec<WeightEntry>,
    pub layer: Option<u32>,
    /// The checkpoint's `1 + w` norm weights already hold the 1 (a GGUF:
    /// llama.cpp's converter folds it in), so `gemma::one_plus_norm` adds none.
    pub norms_include_one: bool,
    /// The K and V caches (with this step's rows) of the last attention built.
    pub last_kv: Option<(NodeId, NodeId)>,
}

impl<'a> Builder<'a> {
    pub fn new(name: &str, source: &'a dyn TensorSource) -> Self {
        Builder { g: Graph::new(name), source, manifest: Vec::new(), layer: None, norms_include_one: false, last_kv: None }
    }

    pub fn op(&mut self, op: Op, inputs: &[NodeId]) -> NodeId {
        self.g.add(op, inputs, self.layer)
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.source.tensor(name).is_some()
    }

    /// A checkpoint tensor, which must exist and have `expect` as its shape
    /// (when given): errors name the tensor and both shapes.
    pub fn weight(&mut self, name: &str, expect: Option<&[usize]>) -> Result<NodeId, Diagnostic> {
        let t = self.source.tensor(name).ok_or_else(|| {
            Diagnostic::new(self.source.path(), format!("missing tensor `{name}`")).note(format!("the {} family needs it", self.g.name))
        })?;
        if let Some(e) = expect {
            if t.shape != e {
                return Err(Diagnostic::new(self.source.path(), format!("tensor `{name}` has shape {:?}, expected {:?}", t.shape, e))
                    .note("the shape follows from the checkpoint's metadata (heads, dims, layers)"));
            }
        }
        if !self.manifest.iter().any(|w| w.name == name) {
            self.manifest.push(WeightEntry { name: name.into(), dtype: t.dtype, shape: t.shape.clone(), offset: t.offset, bytes: t.bytes });
        }
        let ty = TensorType::new(t.dtype, const_shape(&t.shape));
        Ok(self.op(Op::Weight { name: name.into(), ty }, &[]))
    }

    /// The inputs every family's graph takes: `tokens` and `positions`
    /// (`i32[batch, seq]`) and `last_rows` (`i32[batch]`: each row's last
    /// token in the flattened batch).
    pub fn inputs(&mut self) -> (NodeId, NodeId, NodeId) {
        let tokens = self.input(graphc_ir::io::TOKENS, DType::I32, vec![batch(), seq()]);
        let positions = self.input(graphc_ir::io::POSITIONS, DType::I32, vec![batch(), seq()]);
        let last_rows = self.input(graphc_ir::io::LAST_ROWS, DType::I32, vec![batch()]);
        (tokens, positions, last_rows)
    }

    /// The lowered model: graph, manifest, and the facts the family derived
    /// (printed by `inspect`, kept in the plan).
    pub fn finish(self, vocab_size: usize, context_length: usize, facts: &[(&str, String)]) -> crate::families::llama::Lowered {
        let facts = facts.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let meta = graphc_ir::plan::ModelMeta { vocab_size, context_length, bos_id: None, add_bos: false, stop_ids: vec![], facts };
        crate::families::llama::Lowered { graph: self.g, manifest: self.manifest, meta, read_at_lowering: vec![] }
    }

    pub fn input(&mut self, name: &str, dtype: DType, shape: Vec<Dim>) -> NodeId {
        self.op(Op::Input { name: name.into(), ty: TensorType::new(dtype, shape) }, &[])
    }

    /// A `[1]` f32 constant.
    pub fn scalar(&mut self, value: f32) -> NodeId {
        self.op(Op::Const { value, ty: TensorType::new(DType::F32, vec![1usize.into()]) }, &[])
    }

    pub fn binary(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
        self.op(Op::Binary(op), &[a, b])
    }

    pub fn unary(&mut self, op: UnaryOp, a: NodeId) -> NodeId {
        self.op(Op::Unary(op), &[a])
    }

    pub fn matmul(&mut self, x: NodeId, w: NodeId) -> NodeId {
        self.op(Op::MatMul, &[x, w])
    }

    pub fn reshape(&mut self, x: NodeId, shape: Vec<Dim>) -> NodeId {
        self.op(Op::Reshape { shape }, &[x])
    }

    pub fn permute(&mut self, x: NodeId, perm: &[usize]) -> NodeId {
        self.op(Op::Permute { perm: perm.to_vec() }, &[x])
    }

    /// The gated MLP, `down(act(h·gate) * h·up)`: SwiGLU (llama, `Silu`) or
    /// GeGLU (Gemma, `GeluTanh`). Weights `[ffn, d]`, `[ffn, d]`, `[d, ffn]`.
    pub fn gated_mlp(
        &mut self,
        h: NodeId,
        (gate, up, down): (&str, &str, &str),
        (ffn, d): (usize, usize),
        act: UnaryOp,
    ) -> Result<NodeId, Diagnostic> {
        let wg = self.weight(gate, Some(&[ffn, d]))?;
        let wu = self.weight(up, Some(&[ffn, d]))?;
        let wd = self.weight(down, Some(&[d, ffn]))?;
        let g = self.matmul(h, wg);
        let u = self.matmul(h, wu);
        let g = self.unary(act, g);
        let a = self.binary(BinaryOp::Mul, g, u);
        Ok(self.matmul(a, wd))
    }

    /// `x` normed (`norm`, an `Op::Norm`) with the `[d]` weight `weight`.
    pub fn normed(&mut self, x: NodeId, weight: &str, d: usize, norm: &Op) -> Result<NodeId, Diagnostic> {
        let w = self.weight(weight, Some(&[d]))?;
        Ok(self.op(norm.clone(), &[x, w]))
    }

    /// `x` normed over its last `d` features without a weight (Gemma 4's V
    /// and router norms): a weight of ones, exact.
    pub fn normed_unscaled(&mut self, x: NodeId, d: usize, norm: &Op) -> NodeId {
        let ones = self.op(Op::Const { value: 1.0, ty: TensorType::new(DType::F32, vec![d.into()]) }, &[]);
        self.op(norm.clone(), &[x, ones])
    }

    /// SwiGLU from one fused `[2·ffn, d]` gate/up weight, the gate's rows
    /// first (Phi-3's and GLM-4's `gate_up_proj`): multiplied once, split.
    pub fn fused_swiglu(&mut self, h: NodeId, (gate_up, down): (&str, &str), (ffn, d): (usize, usize)) -> Result<NodeId, Diagnostic> {
        let wgu = self.weight(gate_up, Some(&[2 * ffn, d]))?;
        let wd = self.weight(down, Some(&[d, ffn]))?;
        let gu = self.matmul(h, wgu);
        let gate = self.op(Op::Narrow { axis: 2, start: 0usize.into(), len: ffn.into() }, &[gu]);
        let up = self.op(Op::Narrow { axis: 2, start: ffn.into(), len: ffn.into() }, &[gu]);
        let gate = self.unary(UnaryOp::Silu, gate);
        let a = self.binary(BinaryOp::Mul, gate, up);
        Ok(self.matmul(a, wd))
    }

    /// Causal self-attention as Gemma 3 and the HF families write it: Q, K,
    /// V projections (`names.0..=2`, no biases), heads split, Q and K
    /// RMS-normed per head when `qk_norm` names their weights, Q and K
    /// rotated by `rope`, K and V concatenated onto this layer's caches
    /// (`k.L`, `v.L`: the loop-carried state `kv_append` rewrites), GQA
    /// attention, heads merged, output projection (`names.3`).
    pub fn attention(
        &mut self,
        h: NodeId,
        positions: NodeId,
        names: [&str; 4],
        qk_norm: Option<(&str, &str)>,
        cfg: &AttentionCfg,
    ) -> Result<NodeId, Diagnostic> {
        self.attention_from(h, positions, Projections::Separate([names[0], names[1], names[2]]), names[3], qk_norm, cfg)
    }

    /// `attention` with the Q, K, V projections given as `proj`: three
    /// weights, or one fused `[q; k; v]` weight whose product is split.
    pub fn attention_from(
        &mut self,
        h: NodeId,
        positions: NodeId,
        proj: Projections,
        out_name: &str,
        qk_norm: Option<(&str, &str)>,
        cfg: &AttentionCfg,
    ) -> Result<NodeId, Diagnostic> {
        let AttentionCfg { d, n_heads: nh, n_kv_heads: nkv, head_dim: hd, .. } = *cfg;
        let l = self.layer.expect("attention is built inside a layer");
        // With an output gate, each query head's projection is followed by its gate's.
        let q_width = if cfg.output_gate { 2 * nh * hd } else { nh * hd };
        let widths = [q_width, nkv * hd, nkv * hd];
        // Where each of Q, K, V comes from: its own weight (and bias), or a
        // slice of one fused product.
        // Which of Q, K, V this layer projects: a layer reading another's
        // caches projects only Q, one whose values are its keys no V.
        let projected = [true, cfg.shared_kv.is_none(), cfg.shared_kv.is_none() && !cfg.values_are_keys];
        let sources: [Option<Source>; 3] = match proj {
            Projections::Separate(names) => {
                // The weights, then the biases (the graph's node order).
                let mut w = [None; 3];
                for i in (0..3).filter(|&i| projected[i]) {
                    w[i] = Some(self.weight(names[i], Some(&[widths[i], d]))?);
                }
                let mut bias = [None; 3];
                for i in (0..3).filter(|&i| projected[i] && cfg.qkv_bias) {
                    bias[i] = Some(self.weight(&bias_name(names[i]), Some(&[widths[i]]))?);
                }
                [0, 1, 2].map(|i| w[i].map(|w| Source::Weight(w, bias[i])))
            }
            Projections::Fused(name) => {
                let w = self.weight(name, Some(&[widths.iter().sum(), d]))?;
                let mut all = self.matmul(h, w);
                if cfg.qkv_bias {
                    let bias = self.weight(&bias_name(name), Some(&[widths.iter().sum()]))?;
                    all = self.binary(BinaryOp::Add, all, bias);
                }
                [(0, widths[0]), (widths[0], widths[1]), (widths[0] + widths[1], widths[2])].map(|(start, len)| Some(Source::Slice(all, start, len)))
            }
        };
        let norms = match qk_norm {
            Some((q, k)) => {
                // Per head (`[head_dim]`), or over the whole projection (OLMo 2).
                let (q_len, k_len) = if cfg.qk_norm_full_width { (nh * hd, nkv * hd) } else { (hd, hd) };
                let mut q = self.weight(q, Some(&[q_len]))?;
                // A layer reading another's cache has no k norm.
                let mut k = if cfg.shared_kv.is_none() { Some(self.weight(k, Some(&[k_len]))?) } else { None };
                if cfg.qk_norm_one_plus {
                    let one = gemma::scalar(self, 1.0);
                    q = self.binary(BinaryOp::Add, q, one);
                    k = k.map(|k| self.binary(BinaryOp::Add, k, one));
                }
                Some((q, k))
            }
            None => None,
        };
        // The output gate: the second half of each query head's projection
        // (HF Qwen3-Next: `q_proj(h).view(.., heads, 2 * head_dim).chunk(2)`).
        let mut gate = None;
        let project = |b: &mut Builder, src: Option<Source>| match src.expect("a projected source") {
            Source::Weight(w, bias) => {
                let p = b.matmul(h, w);
                match bias {
                    Some(bias) => b.binary(BinaryOp::Add, p, bias),
                    None => p,
                }
            }
            Source::Slice(all, start, len) => b.op(Op::Narrow { axis: 2, start: start.into(), len: len.into() }, &[all]),
        };
        // Split heads, RMS-norm each head (when the family does), rotate.
        let mut heads = |b: &mut Builder, p: NodeId, n: usize, head_norm: Option<NodeId>, rotate: bool| {
            // OLMo 2 norms the whole projection, before the heads split.
            let (p, head_norm) = match head_norm {
                Some(nw) if cfg.qk_norm_full_width => (b.op(cfg.norm.clone(), &[p, nw]), None),
                other => (p, other),
            };
            let p = if rotate && n == nh && cfg.output_gate {
                let both = b.reshape(p, vec![batch(), seq(), n.into(), (2 * hd).into()]);
                let g = b.op(Op::Narrow { axis: 3, start: hd.into(), len: hd.into() }, &[both]);
                gate = Some(b.reshape(g, vec![batch(), seq(), (nh * hd).into()]));
                b.op(Op::Narrow { axis: 3, start: 0usize.into(), len: hd.into() }, &[both])
            } else {
                b.reshape(p, vec![batch(), seq(), n.into(), hd.into()])
            };
            let p = match head_norm {
                Some(nw) => b.op(cfg.norm.clone(), &[p, nw]),
                None => p,
            };
            let p = b.permute(p, &[0, 2, 1, 3]);
            if rotate && !cfg.no_rope {
                b.op(cfg.rope.clone(), &[p, positions])
            } else {
                p
            }
        };
        let qp = project(self, sources[0]);
        let q = heads(self, qp, nh, norms.map(|n| n.0), true);
        let kv = match cfg.shared_kv {
            // Gemma 4's KV-shared layers attend over an earlier layer's caches.
            Some((k_all, v_all)) => vec![k_all, v_all],
            None => {
                let kp = project(self, sources[1]);
                let k = heads(self, kp, nkv, norms.and_then(|n| n.1), true);
                // Gemma 4's global layers: the values are the keys' projection.
                let vp = if cfg.values_are_keys { kp } else { project(self, sources[2]) };
                let mut v = heads(self, vp, nkv, None, false);
                if cfg.v_norm {
                    v = self.normed_unscaled(v, hd, &cfg.norm);
                }
                let cache_ty = TensorType::new(DType::F32, vec![batch(), nkv.into(), past(), hd.into()]);
                let mut kv = Vec::new();
                for (name, new) in [("k", k), ("v", v)] {
                    let name = format!("{name}.{l}");
                    let cache = self.op(Op::State { name: name.clone(), ty: cache_ty.clone() }, &[]);
                    let all = self.op(Op::Concat { axis: 2 }, &[cache, new]);
                    self.op(Op::StateOut { name }, &[all]);
                    kv.push(all);
                }
                kv
            }
        };
        self.last_kv = Some((kv[0], kv[1]));
        let sinks = cfg.sinks.as_deref().map(|name| self.weight(name, Some(&[nh]))).transpose()?;
        let attn = Op::Attention {
            n_heads: nh,
            n_kv_heads: nkv,
            scale: cfg.scale,
            causal: true,
            window: cfg.window,
            softcap: cfg.softcap,
            ring: false,
            sinks: sinks.is_some(),
        };
        let a = self.op(attn, &[&[q, kv[0], kv[1], positions], sinks.as_slice()].concat());
        let a = self.permute(a, &[0, 2, 1, 3]);
        let mut a = self.reshape(a, vec![batch(), seq(), (nh * hd).into()]);
        if let Some(g) = gate {
            let g = self.unary(UnaryOp::Sigmoid, g);
            a = self.binary(BinaryOp::Mul, a, g);
        }
        let wo = self.weight(out_name, Some(&[d, nh * hd]))?;
        let o = self.matmul(a, wo);
        if cfg.out_bias {
            let bo = self.weight(&bias_name(out_name), Some(&[d]))?;
            return Ok(self.binary(BinaryOp::Add, o, bo));
        }
        Ok(o)
    }

    /// The head: each row's own last position (`last_rows`) of the hidden
    /// states `x [batch, seq, d]`, `norm`ed with the weight `norm_weight`,
    /// times the output matrix (`Ok(node)`, or `Err((name, vocab))` for a
    /// weight of `[vocab, d]`), as the `logits` output.
    pub fn logits_head(
        &mut self,
        (x, d): (NodeId, usize),
        last_rows: NodeId,
        (norm, norm_weight): (Op, &str),
        out: Result<NodeId, (&str, usize)>,
    ) -> Result<NodeId, Diagnostic> {
        self.logits_head_divided((x, d), last_rows, (norm, norm_weight), out, None)
    }

    /// `logits_head` with the logits divided by `divisor` where one is
    /// given (Granite's `logits_scaling`).
    pub fn logits_head_divided(
        &mut self,
        (x, d): (NodeId, usize),
        last_rows: NodeId,
        (norm, norm_weight): (Op, &str),
        out: Result<NodeId, (&str, usize)>,
        divisor: Option<f32>,
    ) -> Result<NodeId, Diagnostic> {
        let flat = self.reshape(x, vec![batch().mul(&seq()), Dim::from(d)]);
        let last = self.op(Op::Gather, &[flat, last_rows]);
        let nw = self.weight(norm_weight, Some(&[d]))?;
        let h = self.op(norm, &[last, nw]);
        let out_w = match out {
            Ok(w) => w,
            Err((name, vocab)) => self.weight(name, Some(&[vocab, d]))?,
        };
        let mut logits = self.matmul(h, out_w);
        if let Some(divisor) = divisor {
            let c = self.scalar(divisor);
            logits = self.binary(BinaryOp::Div, logits, c);
        }
        Ok(self.op(Op::Output { name: graphc_ir::io::LOGITS.into() }, &[logits]))
    }
}

/// One layer's attention shape (see `Builder::attention`).
#[derive(Clone)]
pub struct AttentionCfg {
    pub d: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// The per-head Q/K norm, when the family has one.
    pub norm: Op,
    pub rope: Op,
    /// Q and K are not rotated (SmolLM3's NoPE layers): `rope` is unused.
    pub no_rope: bool,
    pub scale: f32,
    pub window: Option<usize>,
    pub softcap: Option<f32>,
    /// The Q, K and V projections carry biases (`NAME.bias` beside each
    /// `NAME.weight`).
    pub qkv_bias: bool,
    /// The output projection carries one (Qwen2 has Q/K/V biases only).
    pub out_bias: bool,
    /// The query projection also yields a per-head gate, and the merged
    /// heads are multiplied by its sigmoid before the output projection
    /// (Qwen3-Next's full-attention layers).
    pub output_gate: bool,
    /// The per-head q/k norms scale by `1 + w` (weights stored zero-centered).
    pub qk_norm_one_plus: bool,
    /// The q/k norms span the whole projection (`[n_heads * head_dim]`),
    /// before the heads split (OLMo 2), not each head.
    pub qk_norm_full_width: bool,
    /// The weight of each query head's attention sink (gpt-oss), by name.
    pub sinks: Option<String>,
    /// V is K's projection (no V weight), taken before K's norm and
    /// rotation (Gemma 4's global layers, `attention_k_eq_v`).
    pub values_are_keys: bool,
    /// V is RMS-normed per head, without a scale (Gemma 4).
    pub v_norm: bool,
    /// The layer projects only Q and attends over these K and V caches of an
    /// earlier layer (`Builder::last_kv`; Gemma 4's KV-shared layers).
    pub shared_kv: Option<(NodeId, NodeId)>,
}

/// Where an attention's Q, K and V projections come from.
pub enum Projections<'n> {
    /// Three weights, `[q, k, v]`.
    Separate([&'n str; 3]),
    /// One weight of the rows of Q, then K, then V (phi3's `qkv_proj`).
    Fused(&'n str),
}

/// One of Q, K, V: its weight (and bias), or `(product, start, len)`, a
/// slice of a fused product's last axis.
#[derive(Clone, Copy)]
enum Source {
    Weight(NodeId, Option<NodeId>),
    Slice(NodeId, usize, usize),
}

/// `x.y.bias` for the weight `x.y.weight`.
pub fn bias_name(weight: &str) -> String {
    format!("{}.bias", weight.strip_suffix(".weight").unwrap_or(weight))
}

/// `batch`, `seq`, `past`: the symbolic dims every family's graph uses.
pub fn batch() -> Dim {
    Dim::sym("batch")
}
pub fn seq() -> Dim {
    Dim::sym("seq")
}
pub fn past() -> Dim {
    Dim::sym("past")
}
