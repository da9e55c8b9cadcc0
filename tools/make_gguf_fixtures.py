#!/usr/bin/env python3
"""GGUF copies of the safetensors parity fixtures (run by hand, not by CI).

For each fixture under tests/fixtures/families/<family>/ (config.json +
model.safetensors), write model.gguf the way llama.cpp's converter
(`convert_hf_to_gguf.py`) writes that architecture, with every tensor kept
f32: its architecture name, its metadata keys, gguf-py's tensor names
(`gguf.get_tensor_name_map`, the table llama.cpp itself uses), and its value
transforms:

- gemma, gemma2: `+ 1` folded into every norm weight (GGUF stores `1 + w`);
- qwen3moe: each layer's experts stacked into `ffn_{gate,up,down}_exps`
  ([experts, rows, cols]); a dense layer (mlp_only_layers), which
  llama.cpp's qwen3moe cannot hold, keeps the dense `ffn_gate/up/down`;
- phi3 with LongRoPE: `rope_factors_long/short.weight` tensors and
  `phi3.rope.scaling.attn_factor` = sqrt(1 + ln(s) / ln(original)),
  s = max_position_embeddings / original_max_position_embeddings;
- qwen3next: as `Qwen3NextModel.modify_tensors`: `in_proj_qkvz` regrouped
  into `attn_qkv` ([q; k; v] over all heads) and `attn_gate` (z), `A_log`
  stored as `-exp(A_log)`, `dt_bias` as `ssm_dt.bias`, the conv squeezed,
  `+ 1` folded into the zero-centered norms (not the gated one);
- phimoe: as phi3 plus the stacked experts (w1, w3, w2 → gate, up, down);
  GGUF has no key for the sparsemixer's `router_jitter_noise`;
- gemma2: GGUF has no key for `query_pre_attn_scalar` (llama.cpp scales by
  1/sqrt(head_dim)), so that value is lost, as in llama.cpp's own files;
- qwen2 (`Qwen2Model`): the tensors as they are (no Q/K permutation:
  llama.cpp runs qwen2 with NEOX rope), biases as `blk.N.attn_{q,k,v}.bias`,
  no `output.weight` when the output is tied; YaRN as
  `rope.scaling.type = yarn`, `.factor`, `.original_context_length`;
- llama (`LlamaModel`): Q and K rows permuted by its `permute(w, n_head,
  n_head_kv)` (llama.cpp runs llama with GPT-J adjacent-pair rope),
  `llama.vocab_size` and `llama.rope.dimension_count` (head_dim) written,
  and for `rope_type` "llama3" the `rope_freqs.weight` tensor of
  `generate_extra_tensors` (one factor per frequency: 1, `factor`, or
  `1 / ((1 - smooth) / factor + smooth)` in the band; float32), with no
  `rope.scaling.*` key (the converter writes none for llama3);
- mistral: as llama (the converter's class for it), with its sliding
  window as `llama.attention.sliding_window`;
- smollm3 (`SmolLM3Model`, a `LlamaModel`): as llama, arch smollm3 (its
  NoPE layers are not in the file: llama.cpp hard-codes every fourth);
- granite (`GraniteModel`, a `LlamaModel`): as llama, arch granite, with
  its four scalars as `granite.embedding_scale`, `.residual_scale`,
  `.attention.scale` and `.logit_scale`;
- qwen2moe (`Qwen2MoeModel`): as qwen2 (biases, no permutation), experts
  stacked, the shared expert as `ffn_{gate,up,down}_shexp` and its gate
  as `ffn_gate_inp_shexp`; GGUF has no key for `norm_topk_prob`;
- olmo2 (`Olmo2Model`): the tensors as they are (NeoX rope), the
  whole-projection q/k norms as `attn_q_norm` / `attn_k_norm`, the
  post-norms as `post_attention_norm` / `post_ffw_norm`;
- mixtral: as llama (the converter's class for it too), with
  `llama.expert_count` / `expert_used_count`, the router as
  `blk.N.ffn_gate_inp` and the experts stacked (w1, w3, w2 → gate, up,
  down); and a second file, `model_split_experts.gguf`, in the layout
  llama.cpp wrote before April 2024 (and still reads): one
  `blk.N.ffn_{gate,up,down}.E.weight` per expert.

No tokenizer keys are written: the fixtures have no tokenizer (graphc drives
them by token ids). The output is the same bytes on every run.

    ~/.cache/graphc/fixture-venv/bin/pip install gguf
    ~/.cache/graphc/fixture-venv/bin/python tools/make_gguf_fixtures.py [family ...]
"""
import json
import math
import pathlib

import gguf
import numpy as np
from safetensors.numpy import load_file

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "families"

ARCH = {
    "qwen3": gguf.MODEL_ARCH.QWEN3,
    "qwen3_moe": gguf.MODEL_ARCH.QWEN3MOE,
    "qwen2_moe": gguf.MODEL_ARCH.QWEN2MOE,
    "olmo2": gguf.MODEL_ARCH.OLMO2,
    "glm4": gguf.MODEL_ARCH.GLM4,
    # Ernie4_5Model: no Q/K permutation (llama.cpp runs it with adjacent-pair rope).
    "ernie4_5": gguf.MODEL_ARCH.ERNIE4_5,
    # OLMo 3's converter class is Olmo2Model: arch olmo2, with its windows.
    "olmo3": gguf.MODEL_ARCH.OLMO2,
    "gemma": gguf.MODEL_ARCH.GEMMA,
    "gemma2": gguf.MODEL_ARCH.GEMMA2,
    "phi": gguf.MODEL_ARCH.PHI2,
    "phi3": gguf.MODEL_ARCH.PHI3,
    "phimoe": gguf.MODEL_ARCH.PHIMOE,
    "qwen3_next": gguf.MODEL_ARCH.QWEN3NEXT,
    "qwen2": gguf.MODEL_ARCH.QWEN2,
    "llama": gguf.MODEL_ARCH.LLAMA,
    # Mistral's converter class is LlamaModel: arch llama.
    "mistral": gguf.MODEL_ARCH.LLAMA,
    "mixtral": gguf.MODEL_ARCH.LLAMA,
    "smollm3": gguf.MODEL_ARCH.SMOLLM3,
    "granite": gguf.MODEL_ARCH.GRANITE,
    # Ministral 3 (Mistral3Model.Ministral3Model, a LlamaModel): arch mistral3.
    "ministral3": gguf.MODEL_ARCH.MISTRAL3,
}


def llama_permute(weights, n_head, n_head_kv):
    """`LlamaModel.permute` of convert_hf_to_gguf.py: each head's rows
    [first half; second half] (HF's NEOX pairs i, i + d/2) interleaved into
    adjacent pairs (GPT-J), for llama.cpp's rope."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


def llama3_rope_factors(config, rope):
    """`LlamaModel.generate_extra_tensors` for rope_type "llama3": the
    per-frequency divisors llama.cpp applies (`rope_freqs.weight`), computed
    with torch as the converter does."""
    import torch

    base = rope.get("rope_theta", 10000.0)
    dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = rope.get("factor", 8.0)
    low_freq_factor = rope.get("low_freq_factor", 1.0)
    high_freq_factor = rope.get("high_freq_factor", 4.0)
    # The converter reads the top-level hparam (absent from Llama 3 configs,
    # which keep it inside rope_scaling), else 8192.
    old_context_len = config.get("original_max_position_embeddings", 8192)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            factors.append(1)
        elif wavelen > low_freq_wavelen:
            factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(factors, dtype=torch.float32).numpy()


def dimensions(w, family, config):
    """The keys every converted fixture starts with: its name and sizes."""
    w.add_name(f"graphc parity fixture {family}")
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_head_count_kv(config.get("num_key_value_heads") or config["num_attention_heads"])


def convert(family, split_experts=False):
    d = ROOT / family
    config = json.loads((d / "config.json").read_text())
    tensors = load_file(d / "model.safetensors")
    arch = ARCH[config["model_type"]]
    name = gguf.MODEL_ARCH_NAMES[arch]
    n_layers = config["num_hidden_layers"]
    file = d / ("model_split_experts.gguf" if split_experts else "model.gguf")
    w = gguf.GGUFWriter(file, name)
    dimensions(w, family, config)
    rope = config.get("rope_parameters") or {}
    # As the converter: a per-layer-kind RoPE's global one (OLMo 3's YaRN).
    rope = rope.get("full_attention", rope)
    w.add_rope_freq_base(config.get("rope_theta", rope.get("rope_theta", 10000.0)))
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if "head_dim" in config:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if arch == gguf.MODEL_ARCH.PHI2:
        w.add_layer_norm_eps(config["layer_norm_eps"])
        w.add_rope_dimension_count(int(rope.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0)) * head_dim))
    else:
        w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    if arch == gguf.MODEL_ARCH.GEMMA2:
        w.add_attn_logit_softcapping(config["attn_logit_softcapping"])
        w.add_final_logit_softcapping(config["final_logit_softcapping"])
        w.add_sliding_window(config["sliding_window"])
    if arch in (gguf.MODEL_ARCH.PHI3, gguf.MODEL_ARCH.PHIMOE):
        w.add_sliding_window(config.get("sliding_window") or 0)
        rotary = int(rope.get("partial_rotary_factor", 1.0) * head_dim)
        w.add_rope_dimension_count(rotary)
        # Without one (the tiny phimoe config), the original length is the context.
        original = rope.get("original_max_position_embeddings", config.get("original_max_position_embeddings")) or config["max_position_embeddings"]
        w.add_rope_scaling_orig_ctx_len(original)
        if rope.get("rope_type") == "longrope":
            scale = config["max_position_embeddings"] / original
            attn_factor = 1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(original))
            w.add_rope_scaling_attn_factors(attn_factor)
            w.add_tensor(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FACTORS_LONG] + ".weight", np.array(rope["long_factor"], dtype=np.float32))
            w.add_tensor(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FACTORS_SHORT] + ".weight", np.array(rope["short_factor"], dtype=np.float32))
    if arch in (gguf.MODEL_ARCH.QWEN3MOE, gguf.MODEL_ARCH.QWEN3NEXT, gguf.MODEL_ARCH.PHIMOE, gguf.MODEL_ARCH.QWEN2MOE) or "num_local_experts" in config:
        w.add_expert_count(config.get("num_experts", config.get("num_local_experts")))
        w.add_expert_used_count(config["num_experts_per_tok"])
        if "moe_intermediate_size" in config:
            w.add_expert_feed_forward_length(config["moe_intermediate_size"])
    if arch == gguf.MODEL_ARCH.QWEN2MOE:
        w.add_expert_shared_feed_forward_length(config["shared_expert_intermediate_size"])
    if arch == gguf.MODEL_ARCH.QWEN3NEXT:
        w.add_expert_shared_feed_forward_length(config["shared_expert_intermediate_size"])
        w.add_ssm_conv_kernel(config["linear_conv_kernel_dim"])
        w.add_ssm_state_size(config["linear_key_head_dim"])
        w.add_ssm_group_count(config["linear_num_key_heads"])
        w.add_ssm_time_step_rank(config["linear_num_value_heads"])
        w.add_ssm_inner_size(config["linear_value_head_dim"] * config["linear_num_value_heads"])
        w.add_full_attention_interval(config.get("full_attention_interval", 4))
        w.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", 0.25)))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if arch == gguf.MODEL_ARCH.GRANITE:
        w.add_embedding_scale(config["embedding_multiplier"])
        w.add_residual_scale(config["residual_multiplier"])
        w.add_attention_scale(config["attention_multiplier"])
        w.add_logit_scale(config["logits_scaling"])
    if arch in (gguf.MODEL_ARCH.LLAMA, gguf.MODEL_ARCH.SMOLLM3, gguf.MODEL_ARCH.GRANITE, gguf.MODEL_ARCH.MISTRAL3):
        w.add_vocab_size(config["vocab_size"])
        w.add_rope_dimension_count(head_dim)

    names = gguf.get_tensor_name_map(arch, n_layers)
    out = {}
    experts = {}
    if arch == gguf.MODEL_ARCH.LLAMA and config.get("sliding_window"):
        w.add_sliding_window(config["sliding_window"])
    if arch == gguf.MODEL_ARCH.GLM4:
        # Glm4Model.set_gguf_parameters: the rotated half (GPT-J pairs, unpermuted: llama.cpp's NORM rope).
        w.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", 0.5)))
    if arch == gguf.MODEL_ARCH.OLMO2 and "sliding_window" in config:
        # Olmo2Model.set_gguf_parameters: the window and which layers slide.
        w.add_sliding_window(config["sliding_window"])
        w.add_sliding_window_pattern([t == "sliding_attention" for t in config["layer_types"]])
    if arch in (gguf.MODEL_ARCH.QWEN2, gguf.MODEL_ARCH.QWEN3, gguf.MODEL_ARCH.QWEN3MOE, gguf.MODEL_ARCH.LLAMA,
                gguf.MODEL_ARCH.OLMO2) and rope.get("rope_type") == "yarn":
        # As the converter writes YaRN: type, factor, pretraining length.
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    if arch == gguf.MODEL_ARCH.MISTRAL3:
        # TextModel's YaRN keys (its betas written), then Ministral3Model's own two.
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
        w.add_rope_scaling_yarn_log_mul(rope["mscale_all_dim"])
        w.add_attn_temperature_scale(rope["llama_4_scaling_beta"])
    if arch == gguf.MODEL_ARCH.LLAMA and rope.get("rope_type", "").lower() == "llama3":
        out[gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight"] = llama3_rope_factors(config, rope)
    for hf, data in tensors.items():
        data = data.astype(np.float32)
        if arch in (gguf.MODEL_ARCH.LLAMA, gguf.MODEL_ARCH.SMOLLM3, gguf.MODEL_ARCH.GRANITE, gguf.MODEL_ARCH.MISTRAL3):
            n_head, n_kv = config["num_attention_heads"], config.get("num_key_value_heads")
            if hf.endswith(("q_proj.weight", "q_proj.bias")):
                data = llama_permute(data, n_head, n_head)
            if hf.endswith(("k_proj.weight", "k_proj.bias")):
                data = llama_permute(data, n_head, n_kv)
            data = np.ascontiguousarray(data)
        if arch in (gguf.MODEL_ARCH.GEMMA, gguf.MODEL_ARCH.GEMMA2) and hf.endswith("norm.weight"):
            data = data + np.float32(1.0)
        if ".mlp.experts." in hf or ".block_sparse_moe.experts." in hf:
            # model.layers.L.{mlp,block_sparse_moe}.experts.E.PROJ.weight
            parts = hf.split(".")
            layer, e, proj = int(parts[2]), int(parts[5]), parts[6]
            experts.setdefault((layer, parts[3], proj), {})[e] = data
            continue
        if arch == gguf.MODEL_ARCH.QWEN3NEXT:
            # Qwen3NextModel.modify_tensors: A stored as -exp(A_log), dt_bias
            # as dt_proj.bias, the conv squeezed to [channels, kernel], 1 + w
            # folded into the zero-centered norms, and in_proj_qkvz split
            # into [q all heads; k; v] (attn_qkv) and z (attn_gate).
            if hf.endswith(".A_log"):
                hf, data = hf[: -len("A_log")] + "A_log", -np.exp(data)
            elif hf.endswith(".dt_bias"):
                hf = hf[: -len("dt_bias")] + "dt_proj.bias"
            elif "conv1d" in hf:
                data = data.squeeze()
            elif hf.endswith("norm.weight") and not hf.endswith("linear_attn.norm.weight"):
                data = data + np.float32(1.0)
            if "in_proj_qkvz" in hf:
                dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]
                nk, nv = config["linear_num_key_heads"], config["linear_num_value_heads"]
                r = nv // nk
                per = data.reshape(nk, 2 * dk + 2 * r * dv, -1)
                q, k = per[:, :dk], per[:, dk:2 * dk]
                v, z = per[:, 2 * dk:2 * dk + r * dv], per[:, 2 * dk + r * dv:]
                flat = lambda t: t.reshape(-1, t.shape[-1])
                layer = hf.split(".")[2]
                out[f"blk.{layer}.attn_qkv.weight"] = np.ascontiguousarray(np.concatenate([flat(q), flat(k), flat(v)]))
                out[f"blk.{layer}.attn_gate.weight"] = np.ascontiguousarray(flat(z))
                continue
        g = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if g is None and arch == gguf.MODEL_ARCH.QWEN3MOE and ".mlp." in hf:
            # llama.cpp's qwen3moe has no dense layers; the fixture's
            # mlp_only_layers one keeps the dense FFN names other archs use.
            parts = hf.split(".")
            g = f"blk.{parts[2]}.ffn_{parts[4].removesuffix('_proj')}.weight"
        if g is None:
            raise SystemExit(f"{family}: no GGUF name for {hf}")
        out[g] = data
    for (layer, block, proj), by_expert in sorted(experts.items()):
        if split_experts:
            # The old layout: `blk.N.ffn_gate.E.weight`, one per expert.
            which = {"w1": "gate", "w3": "up", "w2": "down"}[proj]
            for e in sorted(by_expert):
                out[f"blk.{layer}.ffn_{which}.{e}.weight"] = by_expert[e]
            continue
        stacked = np.stack([by_expert[e] for e in sorted(by_expert)])
        g = names.get_name(f"model.layers.{layer}.{block}.experts.{proj}.weight", try_suffixes=(".weight",))
        out[g] = stacked
    for g in sorted(out):
        w.add_tensor(g, out[g])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(family, "->", file, len(out), "tensors")
    if family == "mixtral" and not split_experts:
        convert(family, split_experts=True)


def gemma4(family="gemma4"):
    """As `Gemma4Model` of llama.cpp's converter (conversion/gemma.py): arch
    gemma4, norms as they are (no `+ 1`), the global layers' head size as
    `attention.key_length` and the sliding ones' as `key_length_swa`
    (rope dimension counts alike), per-layer kv heads and MLP sizes as
    arrays (the shared layers' double-wide), `attention.shared_kv_layers`,
    `embedding_length_per_layer_input`, the sliding pattern, both RoPE
    bases, the soft-cap, the layer scalar as `layer_output_scale.weight`,
    and the proportional RoPE as `rope_freqs.weight` (1 for the turning
    pairs, 1e30 for the rest)."""
    d = ROOT / family
    config = json.loads((d / "config.json").read_text())
    tensors = load_file(d / "model.safetensors")
    n_layers = config["num_hidden_layers"]
    arch = gguf.MODEL_ARCH.GEMMA4
    w = gguf.GGUFWriter(d / "model.gguf", gguf.MODEL_ARCH_NAMES[arch])
    sliding = [t == "sliding_attention" for t in config["layer_types"]]
    per_layer = {int(k): v for k, v in config["per_layer_config"].items()}
    full = next(l for l in range(n_layers) if not sliding[l])
    head_full = per_layer[full]["head_dim"]
    kv_full = per_layer[full].get("num_key_value_heads", config["num_key_value_heads"])
    first_shared = n_layers - config["num_kv_shared_layers"]
    double = config.get("use_double_wide_mlp", False)
    w.add_name(f"graphc parity fixture {family}")
    w.add_block_count(n_layers)
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    rope = config["rope_parameters"]
    w.add_rope_freq_base(rope["full_attention"]["rope_theta"])
    w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    w.add_final_logit_softcapping(config["final_logit_softcapping"])
    w.add_sliding_window(config["sliding_window"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_shared_kv_layers(config["num_kv_shared_layers"])
    w.add_embedding_length_per_layer_input(config["hidden_size_per_layer_input"])
    w.add_sliding_window_pattern(sliding)
    w.add_key_length(head_full)
    w.add_value_length(head_full)
    w.add_key_length_swa(config["head_dim"])
    w.add_value_length_swa(config["head_dim"])
    n_ff = config["intermediate_size"]
    w.add_feed_forward_length([n_ff if l < first_shared or not double else 2 * n_ff for l in range(n_layers)])
    w.add_head_count_kv([config["num_key_value_heads"] if s else kv_full for s in sliding])
    w.add_rope_dimension_count(head_full)
    w.add_rope_dimension_count_swa(config["head_dim"])
    if config.get("enable_moe_block"):
        w.add_expert_count(config["num_experts"])
        w.add_expert_used_count(config["top_k_experts"])
        w.add_expert_feed_forward_length(config["moe_intermediate_size"])
    turning = int(head_full * rope["full_attention"]["partial_rotary_factor"] / 2)
    out = {"rope_freqs.weight": np.array([1.0] * turning + [1e30] * (head_full // 2 - turning), dtype=np.float32)}
    names = gguf.get_tensor_name_map(arch, n_layers)
    for hf, data in tensors.items():
        if hf.endswith("layer_scalar") or ".experts." in hf:
            hf += ".weight"  # Gemma4Model.filter_tensors
        if hf.endswith("router.scale"):
            out[f"blk.{hf.split('.')[2]}.ffn_gate_inp.scale"] = data.astype(np.float32)  # Gemma4Model.modify_tensors
            continue
        if hf.endswith("router.per_expert_scale"):
            out[f"blk.{hf.split('.')[2]}.ffn_down_exps.scale"] = data.astype(np.float32)
            continue
        g = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if g is None:
            raise SystemExit(f"{family}: no GGUF name for {hf}")
        out[g] = data.astype(np.float32)
    for g in sorted(out):
        w.add_tensor(g, out[g])
    finish(w)
    print(family, "->", d / "model.gguf", len(out), "tensors")


def lfm2(family="lfm2"):
    """As `LFM2Model` of llama.cpp's converter (conversion/lfm2.py): arch
    lfm2, `attention.head_count_kv` per layer with 0 for a conv layer, the
    MLP's adjusted size as `feed_forward_length`, `shortconv.l_cache`,
    `vocab_size`, the conv weights squeezed to `[channels, taps]`, the final
    norm `token_embd_norm` (gguf-py's map)."""
    d = ROOT / family
    config = json.loads((d / "config.json").read_text())
    tensors = load_file(d / "model.safetensors")
    n_layers = config["num_hidden_layers"]
    arch = gguf.MODEL_ARCH.LFM2
    w = gguf.GGUFWriter(d / "model.gguf", gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(f"graphc parity fixture {family}")
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(n_layers)
    ff = config["intermediate_size"]
    if config["block_auto_adjust_ff_dim"]:
        ff = int(2 * ff / 3)
        if config["block_ffn_dim_multiplier"] is not None:
            ff = int(config["block_ffn_dim_multiplier"] * ff)
        m = config["block_multiple_of"]
        ff = m * ((ff + m - 1) // m)
    w.add_feed_forward_length(ff)
    w.add_head_count(config["num_attention_heads"])
    w.add_head_count_kv([config["num_key_value_heads"] if t != "conv" else 0 for t in config["layer_types"]])
    w.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(config["norm_eps"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(config["vocab_size"])
    w.add_shortconv_l_cache(config["conv_L_cache"])
    names = gguf.get_tensor_name_map(arch, n_layers)
    out = {}
    for hf, data in tensors.items():
        if "conv.conv" in hf:
            data = data.squeeze(1)
        g = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if g is None:
            raise SystemExit(f"{family}: no GGUF name for {hf}")
        out[g] = np.ascontiguousarray(data.astype(np.float32))
    for g in sorted(out):
        w.add_tensor(g, out[g])
    finish(w)
    print(family, "->", d / "model.gguf", len(out), "tensors")


def gpt_oss(family="gpt_oss"):
    """As `GptOssModel` of convert_hf_to_gguf.py: arch gpt-oss, its keys
    (the base ones, `attention.sliding_window`, `expert_feed_forward_length`,
    YaRN as type, factor, original length and betas), the sinks as
    `attn_sinks.weight`, the post-attention norm as `post_attention_norm`,
    the router as `ffn_gate_inp` (with its bias), and the experts' fused,
    interleaved `gate_up_proj` [E, d, 2I] transposed and split into
    `ffn_gate_exps` (rows 0::2) and `ffn_up_exps` (1::2), `down_proj`
    transposed into `ffn_down_exps`, each in MXFP4 as the released
    checkpoint's experts are (their biases split the same way, f32); every
    other tensor f32. (The fixture's expert weights are MXFP4 values, so
    the quantization is exact: checked.)"""
    from gguf.quants import quantize, dequantize
    d = ROOT / family
    config = json.loads((d / "config.json").read_text())
    tensors = load_file(d / "model.safetensors")
    arch = gguf.MODEL_ARCH.GPT_OSS
    n_layers = config["num_hidden_layers"]
    rope = config["rope_parameters"]
    w = gguf.GGUFWriter(d / "model.gguf", gguf.MODEL_ARCH_NAMES[arch])
    dimensions(w, family, config)
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_key_length(config["head_dim"])
    w.add_value_length(config["head_dim"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_expert_count(config["num_local_experts"])
    w.add_expert_used_count(config["num_experts_per_tok"])
    w.add_sliding_window(config["sliding_window"])
    w.add_expert_feed_forward_length(config["intermediate_size"])
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rope["factor"])
    w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
    w.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
    names = gguf.get_tensor_name_map(arch, n_layers)
    out = {}

    def mxfp4(a):
        a = np.ascontiguousarray(a.astype(np.float32))
        q = quantize(a, gguf.GGMLQuantizationType.MXFP4)
        assert (dequantize(q, gguf.GGMLQuantizationType.MXFP4).reshape(a.shape) == a).all(), "not MXFP4 values"
        return q

    for hf, data in tensors.items():
        data = data.astype(np.float32)
        layer = hf.split(".")[2] if hf.startswith("model.layers.") else None
        if hf.endswith("experts.gate_up_proj"):
            t = np.swapaxes(data, -1, -2)  # [E, 2I, d]
            out[f"blk.{layer}.ffn_gate_exps.weight"] = (mxfp4(t[:, ::2, :]), gguf.GGMLQuantizationType.MXFP4)
            out[f"blk.{layer}.ffn_up_exps.weight"] = (mxfp4(t[:, 1::2, :]), gguf.GGMLQuantizationType.MXFP4)
            continue
        if hf.endswith("experts.gate_up_proj_bias"):
            out[f"blk.{layer}.ffn_gate_exps.bias"] = np.ascontiguousarray(data[..., ::2])
            out[f"blk.{layer}.ffn_up_exps.bias"] = np.ascontiguousarray(data[..., 1::2])
            continue
        if hf.endswith("experts.down_proj"):
            out[f"blk.{layer}.ffn_down_exps.weight"] = (mxfp4(np.swapaxes(data, -1, -2)), gguf.GGMLQuantizationType.MXFP4)
            continue
        if hf.endswith("experts.down_proj_bias"):
            out[f"blk.{layer}.ffn_down_exps.bias"] = data
            continue
        if hf.endswith("sinks"):
            hf += ".weight"
        g = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if g is None:
            raise SystemExit(f"{family}: no GGUF name for {hf}")
        out[g] = data
    for g in sorted(out):
        if isinstance(out[g], tuple):
            w.add_tensor(g, out[g][0], raw_dtype=out[g][1])
        else:
            w.add_tensor(g, out[g])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(family, "->", d / "model.gguf", len(out), "tensors:", sorted(out))


def copy_gguf(src, w, rename=None):
    """Every metadata key of the reader `src` but the architecture, and every
    tensor, into the writer `w`, a key's prefix `rename[0]` written as
    `rename[1]`."""
    for key, field in src.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if rename and key.startswith(rename[0]):
            key = rename[1] + key[len(rename[0]):]
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, field.contents(), vtype, sub_type=field.types[-1])
        else:
            w.add_key_value(key, field.contents(), vtype)
    for t in src.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama3_split():
    """The llama3 fixture's model.gguf split by gguf-py's writer as
    `convert_hf_to_gguf.py --split-max-tensors 8` splits it (llama.cpp's
    `gguf-split` writes the same layout): `model-0000k-of-0000n.gguf`, the
    first with every metadata key, each with `split.no`, `split.count`
    and `split.tensors.count`, each its own tensors; into
    tests/fixtures/sharded/llama3_gguf/. Read back with gguf-py, the
    shards hold every tensor of the single file with the same bytes
    (asserted), so the tests use the llama3 fixture's reference.json."""
    src = gguf.GGUFReader(ROOT / "llama3" / "model.gguf")
    d = ROOT.parent / "sharded" / "llama3_gguf"
    d.mkdir(parents=True, exist_ok=True)
    arch = bytes(src.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(d / "model.gguf", arch, split_max_tensors=8)
    copy_gguf(src, w)
    finish(w)
    shards = sorted(d.glob("model-*.gguf"))
    assert len(shards) >= 3, shards
    back = {}
    for i, path in enumerate(shards):
        r = gguf.GGUFReader(path)
        assert r.fields["split.no"].contents() == i and r.fields["split.count"].contents() == len(shards)
        back.update({t.name: bytes(t.data.tobytes()) for t in r.tensors})
    assert back == {t.name: bytes(t.data.tobytes()) for t in src.tensors}, "the shards' tensors differ from the file's"
    print("llama3_split ->", [p.name for p in shards])


def qwen_vl(name, text_family, arch, sections, deepstack=None):
    """A Qwen-VL GGUF's text model as llama.cpp's converter writes it
    (`Qwen2VLModel`, `Qwen3VLTextModel`: the text family's keys and tensors
    under arch `qwen2vl` / `qwen3vl`, `rope.dimension_sections` padded to
    four with 0, Qwen3-VL's `n_deepstack_layers`; the vision parts go to a
    separate mmproj file): the `text_family` fixture's model.gguf so
    renamed, into tests/fixtures/{name}/model.gguf. Its tensors are the text
    fixture's bytes (asserted), so the tests use its reference.json."""
    src = gguf.GGUFReader(ROOT / text_family / "model.gguf")
    old = bytes(src.fields["general.architecture"].parts[-1]).decode()
    path = ROOT.parent / name / "model.gguf"
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(path, arch)
    copy_gguf(src, w, (old + ".", arch + "."))
    w.add_rope_dimension_sections(sections + [0] * (4 - len(sections)))
    if deepstack is not None:
        w.add_num_deepstack_layers(deepstack)
    finish(w)
    back = gguf.GGUFReader(path)
    assert {t.name: bytes(t.data.tobytes()) for t in back.tensors} == {t.name: bytes(t.data.tobytes()) for t in src.tensors}
    print(name, "->", path, "arch", arch)


def reorder_v_heads(a, axis, n_k, r, head_dim):
    """`_LinearAttentionVReorderBase._reorder_v_heads` of llama.cpp's
    converter: value heads grouped by key head ([g0 v0..v(r-1), g1 ...])
    to tiled ([g0 v0, g1 v0, ..., g0 v1, ...]) along `axis`."""
    a = np.moveaxis(a, axis, 0)
    rest = a.shape[1:]
    a = a.reshape(n_k, r, head_dim, *rest).swapaxes(0, 1).reshape(n_k * r * head_dim, *rest)
    return np.ascontiguousarray(np.moveaxis(a, 0, axis))


def qwen3_5(family):
    """As `Qwen3_5TextModel` / `Qwen3_5MoeTextModel` of llama.cpp's converter
    (arch qwen35 / qwen35moe): Qwen3NextModel's keys and tensors
    (`A = -exp(A_log)` as `ssm_a`, `dt_bias` as `ssm_dt.bias`, the conv
    squeezed to [channels, kernel], `1 + w` folded into every norm but the
    linear attention's), `in_proj_b` / `in_proj_a` as `ssm_beta` /
    `ssm_alpha`, the value heads reordered from grouped to tiled in every
    tensor that has them, `rope.dimension_sections` padded to four,
    `attention.recurrent_layers`; and an MTP block after the trunk as the
    converter writes a checkpoint's `mtp.*` (`nextn_predict_layers` 1, the
    block `blk.{n}` with `nextn.*` tensors; made up here, graphc reads none).
    Experts stacked. Into tests/fixtures/families/{family}/model.gguf."""
    d = ROOT / family
    config = json.loads((d / "config.json").read_text())
    tensors = load_file(d / "model.safetensors")
    moe = "num_experts" in config
    arch = gguf.MODEL_ARCH.QWEN35MOE if moe else gguf.MODEL_ARCH.QWEN35
    name = gguf.MODEL_ARCH_NAMES[arch]
    n_layers, hd, dm = config["num_hidden_layers"], config["head_dim"], config["hidden_size"]
    rope = config["rope_parameters"]
    n_k, n_v = config["linear_num_key_heads"], config["linear_num_value_heads"]
    dk, dv, r = config["linear_key_head_dim"], config["linear_value_head_dim"], n_v // n_k
    w = gguf.GGUFWriter(d / "model.gguf", name)
    w.add_name(f"graphc parity fixture {family}")
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(dm)
    w.add_block_count(n_layers + 1)
    if "intermediate_size" in config:  # Qwen3.5-MoE has none: the converter writes no key
        w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_head_count_kv(config["num_key_value_heads"])
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    if moe:
        w.add_expert_count(config["num_experts"])
        w.add_expert_used_count(config["num_experts_per_tok"])
        w.add_expert_feed_forward_length(config["moe_intermediate_size"])
        w.add_expert_shared_feed_forward_length(config["shared_expert_intermediate_size"])
    w.add_ssm_conv_kernel(config["linear_conv_kernel_dim"])
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(n_k)
    w.add_ssm_time_step_rank(n_v)
    w.add_ssm_inner_size(dv * n_v)
    recurrent = [t == "linear_attention" for t in config["layer_types"]] + [False]
    w.add_array(f"{name}.attention.recurrent_layers", recurrent)
    w.add_full_attention_interval(config["full_attention_interval"])
    w.add_rope_dimension_count(int(hd * rope["partial_rotary_factor"]))
    w.add_rope_dimension_sections(rope["mrope_section"] + [0] * (4 - len(rope["mrope_section"])))
    w.add_nextn_predict_layers(1)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    names = gguf.get_tensor_name_map(arch, n_layers + 1)
    out, experts = {}, {}
    for hf, data in tensors.items():
        data = data.astype(np.float32)
        if "linear_attn." in hf and r > 1:
            if ".in_proj_qkv." in hf:
                qk = 2 * n_k * dk
                data = np.concatenate([data[:qk], reorder_v_heads(data[qk:], 0, n_k, r, dv)])
            elif ".in_proj_z." in hf:
                data = reorder_v_heads(data, 0, n_k, r, dv)
            elif ".in_proj_b." in hf or ".in_proj_a." in hf or hf.endswith((".A_log", ".dt_bias")):
                data = reorder_v_heads(data, 0, n_k, r, 1)
            elif ".conv1d." in hf:
                qk = 2 * n_k * dk
                data = np.concatenate([data[:qk], reorder_v_heads(data[qk:], 0, n_k, r, dv)])
            elif ".out_proj." in hf:
                data = reorder_v_heads(data, 1, n_k, r, dv)
        if hf.endswith(".A_log"):
            hf, data = hf[: -len("A_log")] + "A_log", -np.exp(data)
        elif hf.endswith(".dt_bias"):
            hf = hf[: -len("dt_bias")] + "dt_proj.bias"
        elif "conv1d" in hf:
            data = np.ascontiguousarray(data.squeeze())
        elif hf.endswith("norm.weight") and not hf.endswith("linear_attn.norm.weight"):
            data = data + np.float32(1.0)
        if ".mlp.experts." in hf:
            parts = hf.split(".")
            experts.setdefault((int(parts[2]), parts[6]), {})[int(parts[5])] = data
            continue
        g = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if g is None:
            raise SystemExit(f"{family}: no GGUF name for {hf}")
        out[g] = data
    for (layer, proj), by_expert in sorted(experts.items()):
        g = names.get_name(f"model.layers.{layer}.mlp.experts.{proj}.weight", try_suffixes=(".weight",))
        out[g] = np.stack([by_expert[e] for e in sorted(by_expert)])
    rng = np.random.default_rng(5)
    mtp = {"nextn.eh_proj.weight": (dm, 2 * dm), "nextn.enorm.weight": (dm,), "nextn.hnorm.weight": (dm,),
           "nextn.shared_head_norm.weight": (dm,), "attn_norm.weight": (dm,), "ffn_up.weight": (config.get("intermediate_size", 32), dm)}
    for t, shape in mtp.items():
        out[f"blk.{n_layers}.{t}"] = rng.standard_normal(shape).astype(np.float32)
    for g in sorted(out):
        w.add_tensor(g, out[g])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(family, "->", d / "model.gguf", len(out), "tensors")


if __name__ == "__main__":
    import sys

    # `make_gguf_fixtures.py qwen2 llama3 ...` converts only those.
    for family in sys.argv[1:] or ["qwen3", "qwen3_moe", "gemma", "gemma2", "phi2", "phi3", "phi3_longrope", "phimoe",
                                   "qwen3_next", "qwen2", "qwen2_tied", "llama3"]:
        if family == "gpt_oss":
            gpt_oss(family)
        elif family in ("gemma4", "gemma4_moe"):
            gemma4(family)
        elif family == "lfm2":
            lfm2(family)
        elif family == "llama3_split":
            llama3_split()
        elif family in ("qwen3_5", "qwen3_5_moe"):
            qwen3_5(family)
        elif family == "qwen2_vl":
            qwen_vl("qwen2_5_vl_multimodal", "qwen2", "qwen2vl", [2, 3, 3])
        elif family == "qwen3_vl":
            qwen_vl("qwen3_vl_multimodal", "qwen3", "qwen3vl", [3, 3, 2], deepstack=1)
        elif family == "qwen3_vl_moe":
            # Qwen3-VL-MoE's text model (`make_family_fixtures.py qwen3_vl_moe_check`: transformers' VL-MoE class
            # on text is the qwen3_moe fixture); its safetensors (3D input-major experts) graphc does not read.
            qwen_vl("gguf_only/qwen3_vl_moe", "qwen3_moe", "qwen3vlmoe", [3, 3, 2], deepstack=1)
        else:
            convert(family)
