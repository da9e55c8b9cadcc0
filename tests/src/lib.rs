//! Shared helpers for graphc's end-to-end tests: where the real checkpoints
//! and reference outputs are, and a small GGUF writer for synthetic (and
//! deliberately broken) files.

// No `unsafe` here: it is confined to named modules (SIMD, the pool, mmap).
#![forbid(unsafe_code)]

pub mod device_parity;
pub mod fuzz;
pub mod http;
pub mod vocab;

use graphc_backends::{WeightRef, WeightSource};
use std::path::{Path, PathBuf};

/// The repository: where this crate was built, unless `GRAPHC_REPO_ROOT`
/// says (a test binary carried to another machine, `tools/device-check`).
pub fn repo_root() -> PathBuf {
    match std::env::var_os("GRAPHC_REPO_ROOT") {
        Some(root) => PathBuf::from(root),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf(),
    }
}

/// The models folder `tools/setup.sh` fills (`$GRAPHC_CACHE/models`,
/// default `~/.cache/graphc/models`).
pub fn models_dir() -> PathBuf {
    match std::env::var_os("GRAPHC_CACHE") {
        Some(c) => PathBuf::from(c).join("models"),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is not set")).join(".cache/graphc/models"),
    }
}

/// `disabled`, plus the passes named in `GRAPHC_DISABLE_PASSES=a,b` in the
/// test's environment: how a guard test is shown to fail with its pass off
/// (test code reads it; the library reads no environment).
pub fn disabled_passes(disabled: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = disabled.iter().map(|s| s.to_string()).collect();
    if let Ok(env) = std::env::var("GRAPHC_DISABLE_PASSES") {
        out.extend(env.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from));
    }
    out
}

/// A real checkpoint; a missing one fails the test (it does not skip).
pub fn model(file: &str) -> PathBuf {
    let p = models_dir().join(file);
    assert!(p.exists(), "{} is missing: run `bash tools/setup.sh` first", p.display());
    p
}

pub fn smollm2() -> PathBuf {
    model("SmolLM2-135M-Instruct.Q4_1.gguf")
}

pub fn reference_json(label: &str) -> serde_json::Value {
    let p = repo_root().join("tests/reference").join(format!("{label}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

pub fn reference_logits(file: &str) -> Vec<f32> {
    let p = repo_root().join("tests/reference").join(file);
    let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
}

/// (max |a - b|, cosine similarity)
pub fn compare(a: &[f32], b: &[f32]) -> (f32, f64) {
    assert_eq!(a.len(), b.len());
    let max = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    (max, dot / (na * nb))
}

/// A GGUF metadata value for the writer.
#[derive(Clone)]
pub enum Meta {
    U32(u32),
    F32(f32),
    Bool(bool),
    Str(String),
    StrArray(Vec<String>),
    I32Array(Vec<i32>),
    F32Array(Vec<f32>),
    BoolArray(Vec<bool>),
}

/// Builds GGUF v3 bytes: metadata, tensor infos, aligned data.
#[derive(Clone, Default)]
pub struct GgufWriter {
    pub meta: Vec<(String, Meta)>,
    /// (name, row-major shape, ggml type id, bytes)
    pub tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// One metadata entry: its key, its type and its value, as GGUF v3 writes them.
pub fn put_kv(out: &mut Vec<u8>, k: &str, v: &Meta) {
    put_str(out, k);
    match v {
        Meta::U32(x) => {
            out.extend_from_slice(&4u32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        Meta::F32(x) => {
            out.extend_from_slice(&6u32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        Meta::Bool(x) => {
            out.extend_from_slice(&7u32.to_le_bytes());
            out.push(*x as u8);
        }
        Meta::Str(s) => {
            out.extend_from_slice(&8u32.to_le_bytes());
            put_str(out, s);
        }
        Meta::StrArray(a) => {
            out.extend_from_slice(&9u32.to_le_bytes());
            out.extend_from_slice(&8u32.to_le_bytes());
            out.extend_from_slice(&(a.len() as u64).to_le_bytes());
            for s in a {
                put_str(out, s);
            }
        }
        Meta::I32Array(a) => {
            out.extend_from_slice(&9u32.to_le_bytes());
            out.extend_from_slice(&5u32.to_le_bytes());
            out.extend_from_slice(&(a.len() as u64).to_le_bytes());
            for x in a {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        Meta::F32Array(a) => {
            out.extend_from_slice(&9u32.to_le_bytes());
            out.extend_from_slice(&6u32.to_le_bytes());
            out.extend_from_slice(&(a.len() as u64).to_le_bytes());
            for x in a {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        Meta::BoolArray(a) => {
            out.extend_from_slice(&9u32.to_le_bytes());
            out.extend_from_slice(&7u32.to_le_bytes());
            out.extend_from_slice(&(a.len() as u64).to_le_bytes());
            out.extend(a.iter().map(|&b| b as u8));
        }
    }
}

impl GgufWriter {
    pub fn meta(mut self, k: &str, v: Meta) -> Self {
        self.meta.push((k.into(), v));
        self
    }
    pub fn f32_tensor(mut self, name: &str, shape: &[u64], values: &[f32]) -> Self {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensors.push((name.into(), shape.to_vec(), 0, bytes));
        self
    }
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.meta.len() as u64).to_le_bytes());
        for (k, v) in &self.meta {
            put_kv(&mut out, k, v);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for (name, shape, ty, bytes) in &self.tensors {
            put_str(&mut out, name);
            out.extend_from_slice(&(shape.len() as u32).to_le_bytes());
            for d in shape.iter().rev() {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + bytes.len() as u64).div_ceil(32) * 32;
        }
        while !out.len().is_multiple_of(32) {
            out.push(0);
        }
        let base = out.len();
        for ((_, _, _, bytes), off) in self.tensors.iter().zip(offsets) {
            out.resize(base + off as usize, 0);
            out.extend_from_slice(bytes);
        }
        out
    }

    /// A complete, tiny llama checkpoint (2 layers, hidden 8, vocab 8) whose
    /// weights are deterministic pseudo-random values.
    pub fn tiny_llama() -> GgufWriter {
        let (d, ffn, layers, vocab, nh, nkv) = (8u64, 16u64, 2, 8u64, 2u32, 1u32);
        let hd = d / nh as u64;
        let mut seed = 1u32;
        let mut vals = |n: u64| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
                    ((seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.5
                })
                .collect()
        };
        let tokens: Vec<String> = ["<unk>", "<s>", "</s>", "a", "b", "c", "ab", "bc"].iter().map(|s| s.to_string()).collect();
        let mut w = GgufWriter::default()
            .meta("general.architecture", Meta::Str("llama".into()))
            .meta("llama.block_count", Meta::U32(layers))
            .meta("llama.context_length", Meta::U32(64))
            .meta("llama.embedding_length", Meta::U32(d as u32))
            .meta("llama.feed_forward_length", Meta::U32(ffn as u32))
            .meta("llama.attention.head_count", Meta::U32(nh))
            .meta("llama.attention.head_count_kv", Meta::U32(nkv))
            .meta("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5))
            .meta("llama.rope.freq_base", Meta::F32(10000.0))
            .meta("tokenizer.ggml.model", Meta::Str("gpt2".into()))
            .meta("tokenizer.ggml.tokens", Meta::StrArray(tokens))
            .meta("tokenizer.ggml.merges", Meta::StrArray(vec!["a b".into(), "b c".into()]))
            .meta("tokenizer.ggml.token_type", Meta::I32Array(vec![3, 3, 3, 1, 1, 1, 1, 1]))
            .meta("tokenizer.ggml.bos_token_id", Meta::U32(1))
            .meta("tokenizer.ggml.eos_token_id", Meta::U32(2));
        let v = vals(vocab * d);
        w = w.f32_tensor("token_embd.weight", &[vocab, d], &v);
        for l in 0..layers {
            let t = |s: &str| format!("blk.{l}.{s}.weight");
            let ones = vec![1.0; d as usize];
            w = w.f32_tensor(&t("attn_norm"), &[d], &ones).f32_tensor(&t("ffn_norm"), &[d], &ones);
            let q = vals(d * d);
            w = w.f32_tensor(&t("attn_q"), &[d, d], &q);
            let k = vals(hd * nkv as u64 * d);
            w = w.f32_tensor(&t("attn_k"), &[hd * nkv as u64, d], &k);
            let v = vals(hd * nkv as u64 * d);
            w = w.f32_tensor(&t("attn_v"), &[hd * nkv as u64, d], &v);
            let o = vals(d * d);
            w = w.f32_tensor(&t("attn_output"), &[d, d], &o);
            let g = vals(ffn * d);
            w = w.f32_tensor(&t("ffn_gate"), &[ffn, d], &g);
            let u = vals(ffn * d);
            w = w.f32_tensor(&t("ffn_up"), &[ffn, d], &u);
            let dn = vals(d * ffn);
            w = w.f32_tensor(&t("ffn_down"), &[d, ffn], &dn);
        }
        w.f32_tensor("output_norm.weight", &[d], &vec![1.0; d as usize])
    }

    /// `tiny_llama` with two tensors of GGUF block types graphc cannot
    /// compute put among its own: `blk.0.attn_extra.weight`, tq2_0 (GGML
    /// type 35: 66-byte blocks of 256) `[2, 256]`, second in the file, and
    /// `blk.1.ffn_extra.weight`, tq1_0 (type 34: 54-byte blocks of 256)
    /// `[1, 256]`, last. Their bytes are a counting pattern.
    pub fn tiny_llama_with_uncomputable_types() -> GgufWriter {
        let mut w = GgufWriter::tiny_llama();
        let pattern = |n: usize| (0..n).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>();
        w.tensors.insert(1, ("blk.0.attn_extra.weight".into(), vec![2, 256], 35, pattern(2 * 66)));
        w.tensors.push(("blk.1.ffn_extra.weight".into(), vec![1, 256], 34, pattern(54)));
        w
    }

    pub fn without_meta(mut self, key: &str) -> Self {
        self.meta.retain(|(k, _)| k != key);
        self
    }

    pub fn set_meta(mut self, key: &str, v: Meta) -> Self {
        self.meta.retain(|(k, _)| k != key);
        self.meta.push((key.into(), v));
        self
    }

    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, self.to_bytes()).unwrap();
        p
    }
}

/// A copy of the GGUF `src` at `dst` with the metadata `keys` set: an
/// existing key's entry replaced where it stood, a new one added at the
/// end of the metadata; every other byte copied (any tensor type), the
/// data section moved to the next multiple of the alignment (tensor
/// offsets count from it, so they stay valid).
pub fn gguf_with_keys(src: &Path, dst: &Path, keys: &[(&str, Meta)]) -> PathBuf {
    let g = graphc_frontends::gguf::GgufFile::open(src).unwrap();
    let bytes = std::fs::read(src).unwrap();
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    // The byte length of a value of GGUF type `ty` at `at`.
    fn value_len(ty: u32, at: usize, u32_at: &dyn Fn(usize) -> u32, u64_at: &dyn Fn(usize) -> u64) -> usize {
        match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            8 => 8 + u64_at(at) as usize,
            9 => {
                let (elem, n) = (u32_at(at), u64_at(at + 4) as usize);
                let mut len = 12;
                for _ in 0..n {
                    len += value_len(elem, at + len, u32_at, u64_at);
                }
                len
            }
            other => panic!("GGUF value type {other}"),
        }
    }
    let n_kv = u64_at(16) as usize;
    let mut at = 24;
    let mut out = Vec::new();
    let mut added = 0;
    let mut replaced = std::collections::BTreeSet::new();
    for _ in 0..n_kv {
        let key_len = u64_at(at) as usize;
        let key = std::str::from_utf8(&bytes[at + 8..at + 8 + key_len]).unwrap().to_string();
        let value_at = at + 8 + key_len + 4;
        let end = value_at + value_len(u32_at(value_at - 4), value_at, &u32_at, &u64_at);
        match keys.iter().find(|(k, _)| *k == key) {
            Some((k, v)) => {
                put_kv(&mut out, k, v);
                replaced.insert(key);
            }
            None => out.extend_from_slice(&bytes[at..end]),
        }
        at = end;
    }
    for (k, v) in keys.iter().filter(|(k, _)| !replaced.contains(*k)) {
        put_kv(&mut out, k, v);
        added += 1;
    }
    let mut file = bytes[..16].to_vec();
    file.extend(((n_kv + added) as u64).to_le_bytes());
    file.extend(out);
    file.extend(&bytes[at..g.infos_end as usize]);
    file.resize(file.len().next_multiple_of(g.alignment as usize), 0);
    file.extend(&bytes[g.data_start as usize..]);
    std::fs::write(dst, file).unwrap();
    dst.to_path_buf()
}

/// The real Qwen2.5-Coder 0.5B GGUF wearing another model's chat template
/// (by its name in `tests/fixtures/tokenizer/chat_templates.json`), some of
/// its unused control tokens renamed (`(id, text)`): what that model's GGUF
/// shows the tokenizer, the template and the server, on weights that
/// travel here. The model's words mean nothing; the formats do.
pub fn qwen_wearing(template: &str, renames: &[(u32, &str)]) -> PathBuf {
    use graphc_frontends::gguf::{GgufFile, MetaValue};
    let src = model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let g = GgufFile::open(&src).unwrap();
    let MetaValue::Array(tokens) = &g.metadata["tokenizer.ggml.tokens"] else { panic!("no tokens") };
    let mut tokens: Vec<String> = tokens.iter().map(|t| t.as_str().unwrap().to_string()).collect();
    for &(id, text) in renames {
        assert!(tokens[id as usize].starts_with("<|"), "{} is not one of Qwen's unused control tokens", tokens[id as usize]);
        tokens[id as usize] = text.into();
    }
    let p = repo_root().join("tests/fixtures/tokenizer/chat_templates.json");
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let text = fixture["templates"][template]["template"].as_str().unwrap_or_else(|| panic!("no template {template}")).to_string();
    let dir = temp_dir("qwen-wearing");
    gguf_with_keys(
        &src,
        &dir.join(format!("qwen-as-{template}.gguf")),
        &[("tokenizer.ggml.tokens", Meta::StrArray(tokens)), ("tokenizer.chat_template", Meta::Str(text))],
    )
}

/// A fresh temporary folder under the target dir (removed by the OS, not us:
/// a failing test leaves its files to look at).
/// q8_0 bytes for a `[rows, k]` weight: small seeded scales
/// (0.002–0.012) and pseudo-random quants.
pub fn q8_0_weights(rows: usize, k: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut out = vec![];
    for _ in 0..rows * k / 32 {
        out.extend(half::f16::from_f32(0.002 + (next() % 1000) as f32 * 1e-5).to_le_bytes());
        out.extend((0..32).map(|_| next() as u8));
    }
    out
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let d = repo_root().join("target/test-tmp").join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A weight source with no weights, for graphs whose every tensor is an input.
pub struct NoWeights;

impl WeightSource for NoWeights {
    fn weight(&self, _: &str) -> Option<WeightRef<'_>> {
        None
    }
}

/// A `graphc_fused_kv` checkpoint (safetensors + config.json) in `dir`:
/// 2 layers, hidden 32, 4 heads of 8 reading one K=V latent, vocab 64,
/// seeded pseudo-random f32 weights (scaled so activations stay O(1)).
pub fn fused_kv_checkpoint(dir: &Path) -> PathBuf {
    let (d, layers, heads, hd, ffn, vocab) = (32usize, 2usize, 4usize, 8usize, 48usize, 64usize);
    let mut state = 0x853c49e6748fea9bu64;
    let mut values = |n: usize, scale: f32| -> Vec<u8> {
        (0..n)
            .flat_map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let u = ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale;
                u.to_le_bytes()
            })
            .collect()
    };
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut add = |name: String, shape: Vec<usize>, scale: f32, values: &mut dyn FnMut(usize, f32) -> Vec<u8>| {
        let n = shape.iter().product();
        tensors.push((name, shape, values(n, scale)));
    };
    add("model.embed_tokens.weight".into(), vec![vocab, d], 1.0, &mut values);
    for l in 0..layers {
        let p = |s: &str| format!("model.layers.{l}.{s}.weight");
        add(p("input_layernorm"), vec![d], 0.2, &mut values);
        add(p("self_attn.q_proj"), vec![heads * hd, d], 0.3, &mut values);
        add(p("self_attn.kv_proj"), vec![hd, d], 0.3, &mut values);
        add(p("self_attn.o_proj"), vec![d, heads * hd], 0.2, &mut values);
        add(p("post_attention_layernorm"), vec![d], 0.2, &mut values);
        add(p("mlp.gate_proj"), vec![ffn, d], 0.3, &mut values);
        add(p("mlp.up_proj"), vec![ffn, d], 0.3, &mut values);
        add(p("mlp.down_proj"), vec![d, ffn], 0.2, &mut values);
    }
    add("model.norm.weight".into(), vec![d], 0.2, &mut values);
    add("lm_head.weight".into(), vec![vocab, d], 0.5, &mut values);
    // Norm weights near 1, as trained models have them.
    for (name, _, bytes) in tensors.iter_mut() {
        if name.ends_with("layernorm.weight") || name == "model.norm.weight" {
            for c in bytes.chunks_exact_mut(4) {
                let v = f32::from_le_bytes(c.try_into().unwrap()) + 1.0;
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> =
        tensors.iter().map(|(n, s, b)| (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).unwrap())).collect();
    std::fs::create_dir_all(dir).unwrap();
    let file = dir.join("model.safetensors");
    safetensors::serialize_to_file(views, None, &file).unwrap();
    let config = serde_json::json!({
        "model_type": "graphc_fused_kv",
        "hidden_size": d,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "head_dim": hd,
        "intermediate_size": ffn,
        "vocab_size": vocab,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 128,
        "tie_word_embeddings": false
    });
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
    dir.to_path_buf()
}

/// The eight prompts the serving tests send together
/// (`tests/fixtures/serve/prompts.json`, shared with the Python client check
/// and the load bench).
pub fn serve_prompts() -> Vec<String> {
    let path = repo_root().join("tests/fixtures/serve/prompts.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v["prompts"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect()
}

/// The GPU settings a test runs under: from the documented variables
/// (`GRAPHC_CUDA=1`, `GRAPHC_PTX_CACHE`, ... as `tools/device-check` sets
/// them), since the library reads none itself.
pub fn gpu() -> graphc::GpuSettings {
    graphc::GpuSettings::from_env().unwrap_or_else(|e| panic!("{e}"))
}

/// Session options for a device test: defaults, with `gpu()`.
pub fn device_session() -> graphc::SessionOptions {
    graphc::SessionOptions { gpu: gpu(), ..Default::default() }
}
