//! The safetensors families read from GGUF: `tools/make_gguf_fixtures.py`
//! converts each parity fixture (`tests/fixtures/families/<family>/`) to
//! `model.gguf` the way llama.cpp's `convert_hf_to_gguf.py` does (its
//! architecture names, metadata keys, tensor names, stacked experts, the
//! `+ 1` folded into Gemma's norm weights, Phi-3's LongRoPE factors as
//! tensors), all tensors f32. graphc reads them through
//! `frontends/src/gguf_hf.rs`.
//!
//! Each GGUF must give the logits its safetensors checkpoint gives, bit for
//! bit, at every position of every prompt, on the reference executor and
//! the fast kernels — and so stay within 1e-4 of transformers' (qwen3_next:
//! within 1e-5, as the converter precomputes `-exp(A_log)` with numpy;
//! qwen3_5: within 1e-4, its value heads tiled too: `qwen3_5_gguf_*`). Gemma 2 is
//! the exception GGUF itself makes: it has no `query_pre_attn_scalar`, and
//! llama.cpp scales by `1/sqrt(head_dim)`; its logits must then be
//! transformers' with that scale (the fixture's `scale_by_head_dim`
//! control), and not the reference's.

use graphc::{CompileOptions, Kernels, Model, SessionOptions};
use serde_json::Value;

const TOL: f32 = 1e-4;

fn dir(family: &str) -> std::path::PathBuf {
    graphc_tests::repo_root().join("tests/fixtures/families").join(family)
}

fn reference(family: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir(family).join("reference.json")).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn every_position(model: &Model, k: Kernels, prompt: &[u32]) -> Vec<Vec<f32>> {
    let mut s = model.session(&SessionOptions { threads: Some(2), kernels: Some(k), ..Default::default() }).unwrap();
    let mut out = vec![s.prefill(&prompt[..1]).unwrap()];
    for &t in &prompt[1..] {
        out.push(s.decode(t).unwrap());
    }
    out
}

fn bits(v: &[Vec<f32>]) -> Vec<u32> {
    v.iter().flatten().map(|x| x.to_bits()).collect()
}

fn compile(path: &std::path::Path) -> Model {
    Model::compile(path, &CompileOptions::default(), None).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn each_gguf_family_gives_its_safetensors_logits() {
    for family in [
        "qwen2",
        "qwen2_tied",
        "qwen2_yarn",
        "qwen2_moe",
        "olmo2",
        "olmo3",
        "glm4",
        "ernie4_5",
        "lfm2",
        "qwen3",
        "qwen3_yarn",
        "qwen3_moe",
        "qwen3_moe_yarn",
        "qwen3_next",
        "qwen3_5",
        "qwen3_5_moe",
        "gemma",
        "gemma4",
        "gemma4_moe",
        "phi2",
        "phi3",
        "phi3_longrope",
        "phi3_window",
        "phi4_mini",
        "phimoe",
    ] {
        let st = compile(&dir(family));
        let gguf = compile(&dir(family).join("model.gguf"));
        assert_eq!(gguf.plan().family, st.plan().family, "{family}");
        assert_eq!(gguf.plan().kv_cache, st.plan().kv_cache, "{family}");
        let r = reference(family);
        for k in [Kernels::Reference, Kernels::parse("fast").unwrap()] {
            for (p, prompt) in r["prompts"].as_array().unwrap().iter().enumerate() {
                let prompt = ids(prompt);
                let (a, b) = (every_position(&gguf, k, &prompt), every_position(&st, k, &prompt));
                if family == "qwen3_next" || family.starts_with("qwen3_5") {
                    // The converter stores `-exp(A_log)` (numpy's exp), the
                    // safetensors graph computes it (Rust's): an ulp apart;
                    // Qwen3.5's value heads tiled, `out_proj` sums them in
                    // another order, which these models amplify (torch's own
                    // f32 is up to 7e-5 from exact on them): the bound of transformers.
                    let bound = if family == "qwen3_next" { 1e-5 } else { TOL };
                    let d = a.iter().zip(&b).map(|(x, y)| max_diff(x, y)).fold(0.0, f32::max);
                    assert!(d <= bound, "{family} {k:?} prompt {p}: GGUF and safetensors logits differ by {d}");
                } else {
                    assert_eq!(bits(&a), bits(&b), "{family} {k:?} prompt {p}: GGUF and safetensors logits differ");
                }
                for (pos, (g, w)) in a.iter().zip(r["logits"][p].as_array().unwrap()).enumerate() {
                    let d = max_diff(g, &floats(w));
                    assert!(d <= TOL, "{family} {k:?} prompt {p} position {pos}: max |Δlogit| {d} vs transformers");
                }
            }
        }
        println!("{family}: GGUF = safetensors");
    }
}

/// Qwen3.5's GGUFs as llama.cpp's converter writes them: the value heads
/// tiled over the key heads (the plan says so; read as grouped, the GGUF is
/// the fixture's `v_heads_tiled` control, far off), the MTP block after the
/// trunk left out and counted, M-RoPE sections recorded. Its MTP count and
/// the sections are refused when they do not fit.
#[test]
fn qwen3_5_gguf_tiles_value_heads_and_leaves_out_its_mtp_block() {
    for family in ["qwen3_5", "qwen3_5_moe"] {
        let path = dir(family).join("model.gguf");
        let model = compile(&path);
        let facts = &model.plan().model.facts;
        assert_eq!(facts["linear_v_heads"], "tiled over the key heads (llama.cpp's order)", "{family}");
        assert!(facts["mtp"].as_str().starts_with("6 tensors not read"), "{family}: {facts:?}");
        assert_eq!(facts["mrope"], "sections [2, 1, 1]: on text alone every position is the token's index, RoPE", "{family}");
        assert_eq!(facts["layers"], "4", "{family}");
        let tmp = graphc_tests::temp_dir(&format!("{family}-mtp"));
        for (tag, key, value) in [
            ("no-trunk", "nextn_predict_layers", graphc_tests::Meta::U32(5)),
            ("sections", "rope.dimension_sections", graphc_tests::Meta::I32Array(vec![2, 1, 2, 0])),
        ] {
            let arch = if family == "qwen3_5" { "qwen35" } else { "qwen35moe" };
            let key = format!("{arch}.{key}");
            let bad = graphc_tests::gguf_with_keys(&path, &tmp.join(format!("{tag}.gguf")), &[(&key, value)]);
            let e = Model::compile(&bad, &CompileOptions::default(), None).err().unwrap().to_string();
            assert!(e.contains(&key), "{family} {tag}: {e}");
        }
    }
}

/// Qwen3-VL-MoE's GGUF text model (arch `qwen3vlmoe`, as llama.cpp's
/// converter writes it: Qwen3-MoE's keys and stacked experts under its own
/// architecture, `rope.dimension_sections`, `n_deepstack_layers`;
/// `make_gguf_fixtures.py qwen3_vl_moe`, from the qwen3_moe fixture, whose
/// text logits transformers' Qwen3VLMoeForConditionalGeneration gives:
/// `make_family_fixtures.py qwen3_vl_moe_check`): the qwen3_moe GGUF's logit
/// bits at every position of every prompt, so its reference's; its M-RoPE
/// and DeepStack recorded. A fourth, non-zero section is refused.
#[test]
fn qwen3_vl_moe_gguf_is_qwen3_moes_text_model() {
    let path = graphc_tests::repo_root().join("tests/fixtures/gguf_only/qwen3_vl_moe/model.gguf");
    let vl = compile(&path);
    let text = compile(&dir("qwen3_moe").join("model.gguf"));
    assert_eq!(vl.plan().family, "qwen3_moe");
    assert_eq!(
        vl.plan().model.facts["mrope"],
        "sections [3, 3, 2]; 1 DeepStack layers (image features only): on text alone every position is the token's index, RoPE"
    );
    let r = reference("qwen3_moe");
    for k in [Kernels::Reference, Kernels::parse("fast").unwrap()] {
        for (p, prompt) in r["prompts"].as_array().unwrap().iter().enumerate() {
            let prompt = ids(prompt);
            let got = every_position(&vl, k, &prompt);
            assert_eq!(bits(&got), bits(&every_position(&text, k, &prompt)), "{k:?} prompt {p}");
            for (pos, (g, w)) in got.iter().zip(r["logits"][p].as_array().unwrap()).enumerate() {
                assert!(max_diff(g, &floats(w)) <= TOL, "{k:?} prompt {p} position {pos}");
            }
        }
    }
    let tmp = graphc_tests::temp_dir("qwen3vlmoe-sections");
    let bad = graphc_tests::gguf_with_keys(
        &path,
        &tmp.join("model.gguf"),
        &[("qwen3vlmoe.rope.dimension_sections", graphc_tests::Meta::I32Array(vec![3, 3, 1, 1]))],
    );
    let e = Model::compile(&bad, &CompileOptions::default(), None).err().unwrap().to_string();
    assert!(e.contains("qwen3vlmoe.rope.dimension_sections") && e.contains("fourth section"), "{e}");
}

#[test]
fn gemma2_gguf_scales_by_head_dim_as_llama_cpp_does() {
    let r = reference("gemma2");
    let gguf = compile(&dir("gemma2").join("model.gguf"));
    assert_eq!(gguf.plan().kv_cache.window_caches, 2, "the even layer slides and keeps a ring");
    let prompt = ids(&r["prompts"][0]);
    let control: Vec<Vec<f32>> = r["controls"]["scale_by_head_dim"].as_array().unwrap().iter().map(floats).collect();
    let want: Vec<Vec<f32>> = r["logits"][0].as_array().unwrap().iter().map(floats).collect();
    for k in [Kernels::Reference, Kernels::parse("fast").unwrap()] {
        let got = every_position(&gguf, k, &prompt);
        let to_control = got.iter().zip(&control).map(|(a, b)| max_diff(a, b)).fold(0.0, f32::max);
        let to_reference = got.iter().zip(&want).map(|(a, b)| max_diff(a, b)).fold(0.0, f32::max);
        assert!(to_control <= TOL, "{k:?}: {to_control} from transformers with query_pre_attn_scalar = head_dim");
        assert!(to_reference > 10.0 * TOL, "{k:?}: the GGUF cannot carry query_pre_attn_scalar 24, yet matches it");
    }
}

#[test]
fn gemma_gguf_norm_weights_hold_the_one() {
    let gguf = compile(&dir("gemma").join("model.gguf"));
    assert!(gguf.plan().model.facts["norm_weight_offset"].contains("in the weights"));
    // No `add w, 1` in the graph: the converter folded it in.
    let adds_of_one = graphc_ir::text::print(gguf.graph()).matches("const{value=1.0}").count();
    assert_eq!(adds_of_one, 0);
}

#[test]
fn a_gguf_missing_a_key_is_refused_naming_it() {
    use graphc_tests::{GgufWriter, Meta};
    let dir = graphc_tests::temp_dir("gguf-qwen3-missing-key");
    let path = GgufWriter::default()
        .meta("general.architecture", Meta::Str("qwen3".into()))
        .meta("qwen3.embedding_length", Meta::U32(8))
        .meta("qwen3.attention.head_count", Meta::U32(2))
        .f32_tensor("token_embd.weight", &[8, 4], &[0.0; 32])
        .write(&dir, "missing.gguf");
    let e = Model::compile(&path, &CompileOptions::default(), None).err().expect("compiled").to_string();
    assert!(e.contains("missing metadata key `qwen3.block_count`"), "{e}");
}

/// A dense Gemma 4 GGUF with an expert count but no router is refused,
/// naming the key (a MoE file's count is read: `gemma4_moe`).
#[test]
fn gemma4_expert_keys_without_a_router_are_refused() {
    let out = graphc_tests::temp_dir("gemma4-experts").join("dense.gguf");
    let p = graphc_tests::gguf_with_keys(&dir("gemma4").join("model.gguf"), &out, &[("gemma4.expert_count", graphc_tests::Meta::U32(8))]);
    let e = Model::compile(&p, &CompileOptions::default(), None).err().unwrap().to_string();
    assert!(e.contains("`gemma4.expert_count`") && e.contains("router"), "{e}");
}

/// `rope.scaling.yarn_attn_factor` is read as transformers' `attention_factor`,
/// which llama.cpp's converter writes there (OLMo 3's real files carry
/// 1.2079…, transformers' own value for factor 8): that value gives the
/// file's logits bit for bit, another value other logits.
#[test]
fn yarn_attn_factor_is_the_attention_factor() {
    let src = dir("olmo3").join("model.gguf");
    let tmp = graphc_tests::temp_dir("olmo3-yarn-attn");
    let k = Kernels::parse("fast").unwrap();
    let prompt = [17, 201, 3, 88, 140, 9];
    let logits = |p: &std::path::Path| bits(&every_position(&compile(p), k, &prompt));
    let plain = logits(&src);
    let key = "olmo2.rope.scaling.yarn_attn_factor";
    let hf_default = (0.1 * 8f64.ln() + 1.0) as f32;
    let same = graphc_tests::gguf_with_keys(&src, &tmp.join("default.gguf"), &[(key, graphc_tests::Meta::F32(hf_default))]);
    assert_eq!(logits(&same), plain);
    let other = graphc_tests::gguf_with_keys(&src, &tmp.join("other.gguf"), &[(key, graphc_tests::Meta::F32(1.5))]);
    assert_ne!(logits(&other), plain);
}
