#!/usr/bin/env python3
"""Parity fixtures for the safetensors families (run by hand, not by CI).

For each family: a tiny random-initialized model built by transformers from
a config of that family (hidden 64, 2 layers, vocab 256), saved as
safetensors + config.json, and transformers' f32 outputs on fixed inputs:

- logits at every position of three prompts of different lengths,
- 16 greedy tokens after the first prompt,
- a ragged batch of the three prompts (right-padded, attention mask), each
  row's logits read at its own last token,
- "likely wrong" controls: the same prompts through the model with one
  plausible mistake patched in (e.g. no per-head q/k norm; GQA heads mapped
  `h % n_kv` instead of `h // group`), so a test can show the fixture tells
  the right answer from those.

Weights are drawn larger than transformers' init (std 0.02 would give logits
of ~1e-2, where a 1e-4 bound separates nothing).

    python3 -m venv venv && venv/bin/pip install torch transformers
    venv/bin/python tools/make_family_fixtures.py   # writes tests/fixtures/families/
"""
import json
import math
import pathlib

import torch
import transformers
from safetensors.torch import save_file

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "families"
PROMPTS = [
    [17, 201, 3, 88, 140, 9, 254, 31, 77, 5, 120, 66, 199],
    [42, 7, 230, 115, 64],
    [250, 1, 99, 180, 23, 47, 160, 211, 12],
]


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / fan_in) ** 0.5)


def all_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].to(torch.float64)


def ragged(model, prompts):
    n = max(len(p) for p in prompts)
    ids = torch.tensor([p + [0] * (n - len(p)) for p in prompts])
    mask = torch.tensor([[1] * len(p) + [0] * (n - len(p)) for p in prompts])
    with torch.no_grad():
        out = model(ids, attention_mask=mask).logits.to(torch.float64)
    return [out[i, len(p) - 1] for i, p in enumerate(prompts)]


def greedy(model, ids, steps=16):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=steps, do_sample=False, min_new_tokens=steps,
                             pad_token_id=None, eos_token_id=None)
    return out[0, len(ids):].tolist()


def rows(t):
    return [[float(v) for v in r] for r in t]


def hub_layout(state):
    """transformers 5 keeps a MoE's experts as 3D tensors (`experts.gate_up_proj`
    [E, 2I, d], `experts.down_proj` [E, d, I]); checkpoints on the Hub, and
    what graphc reads, have one `gate_proj`/`up_proj`/`down_proj` per expert."""
    out = {}
    for k, v in state.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            base = k[: -len("gate_up_proj")]
            inter = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = v[e, :inter].contiguous()
                out[f"{base}{e}.up_proj.weight"] = v[e, inter:].contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            base = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = v[e].contiguous()
        else:
            out[k] = v
    return out


def write(family, model, config, controls, layout=hub_layout, f64=False):
    """With `f64`, the f32 weights are saved and the outputs computed in
    float64 (`f64_everywhere`): where torch's f32 arithmetic is itself
    about as far from exact as the test's bound (Qwen3.5's chunked delta
    rule: 6.7e-5), the reference must be more exact than what it checks."""
    d = OUT / family
    d.mkdir(parents=True, exist_ok=True)
    config.to_json_file(d / "config.json")
    state = layout({k: v.float().contiguous() for k, v in model.state_dict().items()})
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, d / "model.safetensors")
    if f64:
        with f64_everywhere(model):
            return write_reference(family, d, model, controls, "f64 (the f32 weights)")
    return write_reference(family, d, model, controls, "f32")


class f64_everywhere:
    """`model` in float64 for the block, every op included: transformers'
    delta rule casts its inputs with `.float()`, made to mean `.double()`."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.saved = torch.Tensor.float
        self.model.double()
        torch.Tensor.float = lambda t, *a, **k: t.double()

    def __exit__(self, *exc):
        torch.Tensor.float = self.saved
        self.model.float()


def write_reference(family, d, model, controls, precision):
    ref = {
        "made_by": f"tools/make_family_fixtures.py, transformers {transformers.__version__}, torch {torch.__version__}, {precision}",
        "prompts": PROMPTS,
        "logits": [rows(all_logits(model, p)) for p in PROMPTS],
        "greedy": greedy(model, PROMPTS[0]),
        "ragged_last_logits": rows(ragged(model, PROMPTS)),
        "controls": controls,
    }
    single = [all_logits(model, p)[-1] for p in PROMPTS]
    for a, b in zip(single, ref["ragged_last_logits"]):
        assert max(abs(x - y) for x, y in zip(a.tolist(), b)) < 1e-4, "ragged batch disagrees with single runs"
    (d / "reference.json").write_text(json.dumps(ref))
    print(family, "written:", d)


def qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM
    import transformers.models.qwen3.modeling_qwen3 as m

    config = Qwen3Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, attention_bias=False,
        torch_dtype="float32", attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).eval()
    randomize(model, 1)
    controls = {}
    # Control 1: no per-head q/k RMS norm.
    saved = [(l.self_attn.q_norm, l.self_attn.k_norm) for l in model.model.layers]
    for l in model.model.layers:
        l.self_attn.q_norm = torch.nn.Identity()
        l.self_attn.k_norm = torch.nn.Identity()
    controls["no_qk_norm"] = rows(all_logits(model, PROMPTS[0]))
    for l, (q, k) in zip(model.model.layers, saved):
        l.self_attn.q_norm, l.self_attn.k_norm = q, k
    # Control 2: GQA heads mapped h % n_kv (tiled) instead of h // group.
    repeat_kv = m.repeat_kv
    m.repeat_kv = lambda x, n_rep: x.repeat(1, n_rep, 1, 1)
    controls["gqa_tiled"] = rows(all_logits(model, PROMPTS[0]))
    m.repeat_kv = repeat_kv
    write("qwen3", model, config, controls)


def qwen3_yarn():
    # Qwen3 with the YaRN scaling its model cards give past 32768 tokens
    # (factor 4), read from a Qwen3 GGUF the same way as from Qwen2's.
    from transformers import Qwen3Config, Qwen3ForCausalLM
    import transformers.models.qwen3.modeling_qwen3 as m

    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=131072,
        rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 32768},
        torch_dtype="float32", attn_implementation="eager",
    )
    config = Qwen3Config(**kwargs)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).eval()
    randomize(model, 31)
    rotary = model.model.rotary_emb
    assert rotary.rope_type == "yarn"
    reference = rows(all_logits(model, PROMPTS[0]))
    plain = m.Qwen3RotaryEmbedding(Qwen3Config(**dict(kwargs, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})))
    unscaled = rotary_logits(model, plain.inv_freq, 1.0)
    write("qwen3_yarn", model, config, far_enough({"no_yarn": unscaled}, reference, "qwen3_yarn"))


def gemma():
    from transformers import GemmaConfig, GemmaForCausalLM
    import transformers.models.gemma.modeling_gemma as m

    # Shaped like gemma-2b: MQA (one kv head), tied output, context 8192.
    config = GemmaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=8192,
        rms_norm_eps=1e-6, rope_theta=10000.0, hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=True, torch_dtype="float32", attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = GemmaForCausalLM(config).eval()
    randomize(model, 2)
    # Gemma's norm weights are offsets from 1: draw them around 0.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.sub_(1.0)
            # Gate pre-activations of a few units, where GELU's tanh and erf
            # forms differ most (they agree to 5e-4 at best).
            # and the MLP's output and the (tied) logits scaled up, so the
            # difference reaches the logits well outside the 1e-4 bound.
            if "gate_proj" in name:
                p.mul_(3.0)
            if "down_proj" in name:
                p.mul_(10.0)
            if "embed_tokens" in name:
                p.mul_(5.0)
    controls = {}
    # Control 1: RMSNorm scaling by w instead of 1 + w.
    forward = m.GemmaRMSNorm.forward
    m.GemmaRMSNorm.forward = lambda self, x: (self._norm(x.float()) * self.weight.float()).type_as(x)
    controls["norm_without_one_plus"] = rows(all_logits(model, PROMPTS[0]))
    m.GemmaRMSNorm.forward = forward
    # Control 2: GELU in its erf form instead of tanh.
    acts = [l.mlp.act_fn for l in model.model.layers]
    for l in model.model.layers:
        l.mlp.act_fn = torch.nn.GELU()
    controls["gelu_erf"] = rows(all_logits(model, PROMPTS[0]))
    for l, a in zip(model.model.layers, acts):
        l.mlp.act_fn = a
    write("gemma", model, config, controls)


def phi2():
    from transformers import PhiConfig, PhiForCausalLM

    config = PhiConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=2048, layer_norm_eps=1e-5,
        hidden_act="gelu_new", partial_rotary_factor=0.5, rope_theta=10000.0,
        tie_word_embeddings=False, torch_dtype="float32", attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = PhiForCausalLM(config).eval()
    randomize(model, 3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.mul_(0.5)
            # As for gemma: drive GELU where its two forms differ, and let the
            # MLP reach the logits.
            if "fc1.weight" in name:
                p.mul_(3.0)
            if "fc2.weight" in name:
                p.mul_(10.0)
            if "lm_head.weight" in name:
                p.mul_(5.0)
    controls = {}
    # Control 1: GELU in its erf form.
    acts = [l.mlp.activation_fn for l in model.model.layers]
    for l in model.model.layers:
        l.mlp.activation_fn = torch.nn.GELU()
    controls["gelu_erf"] = rows(all_logits(model, PROMPTS[0]))
    for l, a in zip(model.model.layers, acts):
        l.mlp.activation_fn = a
    # Control 2: RoPE over the whole head instead of its first half.
    head_dim = config.hidden_size // config.num_attention_heads
    rot = model.model.rotary_emb
    saved = rot.inv_freq.clone()
    rot.inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)) \
        if hasattr(config, "rope_theta") else 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    for l in model.model.layers:
        l.self_attn.rotary_ndims = head_dim
    controls["full_rotary"] = rows(all_logits(model, PROMPTS[0]))
    rot.inv_freq = saved
    for l in model.model.layers:
        l.self_attn.rotary_ndims = head_dim // 2
    write("phi2", model, config, controls)


def phi3():
    from transformers import Phi3Config, Phi3ForCausalLM

    config = Phi3Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
        rope_scaling=None, tie_word_embeddings=False, torch_dtype="float32",
        attn_implementation="eager", pad_token_id=0,
    )
    torch.manual_seed(0)
    model = Phi3ForCausalLM(config).eval()
    randomize(model, 4)
    controls = {}
    # Control 1: the fused gate/up weight split the other way round.
    with torch.no_grad():
        swapped = []
        for l in model.model.layers:
            w = l.mlp.gate_up_proj.weight
            swapped.append(w.clone())
            w.copy_(torch.cat([w[w.shape[0] // 2:], w[: w.shape[0] // 2]]))
        controls["gate_up_swapped"] = rows(all_logits(model, PROMPTS[0]))
        for l, w in zip(model.model.layers, swapped):
            l.mlp.gate_up_proj.weight.copy_(w)
    # Control 2: K and V taken from each other's rows of qkv_proj.
    with torch.no_grad():
        saved = []
        q = config.num_attention_heads * (config.hidden_size // config.num_attention_heads)
        kv = config.num_key_value_heads * (config.hidden_size // config.num_attention_heads)
        for l in model.model.layers:
            w = l.self_attn.qkv_proj.weight
            saved.append(w.clone())
            w.copy_(torch.cat([w[:q], w[q + kv:], w[q:q + kv]]))
        controls["k_v_swapped"] = rows(all_logits(model, PROMPTS[0]))
        for l, w in zip(model.model.layers, saved):
            l.self_attn.qkv_proj.weight.copy_(w)
    write("phi3", model, config, controls)


def phi3_window():
    # Phi-3-mini-4k's sliding window (2047 of 4096) shrunk to 5 tokens, so
    # the 13-token prompt's later positions see only the window.
    from transformers import Phi3Config, Phi3ForCausalLM

    config = Phi3Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
        rope_scaling=None, sliding_window=5, tie_word_embeddings=False, torch_dtype="float32",
        attn_implementation="eager", pad_token_id=0,
    )
    torch.manual_seed(0)
    model = Phi3ForCausalLM(config).eval()
    randomize(model, 41)
    reference = rows(all_logits(model, PROMPTS[0]))

    controls = far_enough({"no_window": window_logits(model, None), "window_6": window_logits(model, 6)}, reference, "phi3_window")
    write("phi3_window", model, config, controls)


def gemma2():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    # Window 4, shorter than every prompt but one; soft caps low enough to
    # bite (the real 50 and 30 barely touch a tiny model's scores); a
    # query_pre_attn_scalar that is not head_dim.
    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=8192,
        rms_norm_eps=1e-6, rope_theta=10000.0, hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=24, sliding_window=4, attn_logit_softcapping=5.0,
        final_logit_softcapping=4.0, tie_word_embeddings=True, torch_dtype="float32",
        attn_implementation="eager",
    )
    config = Gemma2Config(**kwargs)
    torch.manual_seed(0)
    model = Gemma2ForCausalLM(config).eval()
    randomize(model, 5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.sub_(1.0)
            if "embed_tokens" in name:
                p.mul_(4.0)

    def variant(**changes):
        m = Gemma2ForCausalLM(Gemma2Config(**{**kwargs, **changes})).eval()
        m.load_state_dict(model.state_dict())
        return rows(all_logits(m, PROMPTS[0]))

    controls = {
        "no_sliding_window": variant(layer_types=["full_attention"] * 2),
        "no_attention_softcap": variant(attn_logit_softcapping=None),
        "no_final_softcap": variant(final_logit_softcapping=None),
        "scale_by_head_dim": variant(query_pre_attn_scalar=16),
    }
    write("gemma2", model, config, controls)


def qwen3_moe():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    # 4 experts, 2 per token, renormalized; layer 0 MoE, layer 1 dense
    # (mlp_only_layers), so both MLP kinds are in the fixture.
    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=10000.0, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
        tie_word_embeddings=False, torch_dtype="float32", attn_implementation="eager",
    )
    config = Qwen3MoeConfig(**kwargs)
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(config).eval()
    randomize(model, 6)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Router logits spread out, so the top-2 choice is clear-cut.
            if name.endswith("mlp.gate.weight"):
                p.mul_(4.0)

    def variant(**changes):
        m = Qwen3MoeForCausalLM(Qwen3MoeConfig(**{**kwargs, **changes})).eval()
        m.load_state_dict(model.state_dict())
        return rows(all_logits(m, PROMPTS[0]))

    controls = {
        "top_1": variant(num_experts_per_tok=1),
        "no_renormalization": variant(norm_topk_prob=False),
        "all_experts": variant(num_experts_per_tok=4),
    }
    write("qwen3_moe", model, config, controls)


def qwen3_moe_yarn():
    # Qwen3-30B-A3B's 128K setting: YaRN factor 4 over 32768 positions.
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=131072, rms_norm_eps=1e-6, num_experts=4,
        rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 32768},
        num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
        tie_word_embeddings=False, torch_dtype="float32", attn_implementation="eager",
    )
    config = Qwen3MoeConfig(**kwargs)
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(config).eval()
    randomize(model, 43)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                p.mul_(4.0)
    rotary = model.model.rotary_emb
    assert rotary.rope_type == "yarn"
    reference = rows(all_logits(model, PROMPTS[0]))
    no_attention_factor = rotary_logits(model, scaling=1.0)
    write("qwen3_moe_yarn", model, config, far_enough({"no_attention_factor": no_attention_factor}, reference, "qwen3_moe_yarn"))


def phi3_longrope():
    from transformers import Phi3Config, Phi3ForCausalLM

    # Phi-3's 128k configs: LongRoPE with per-frequency factors, the long set
    # used past `original_max_position_embeddings`, and cos/sin scaled by
    # sqrt(1 + ln(factor) / ln(original)), factor = max / original. The
    # original length is 4 here, so every prompt (5-13 tokens) runs on the
    # long factors; `short_logits` are PROMPTS[0][:4], on the short ones.
    half = 8  # head_dim 16 / 2
    g = torch.Generator().manual_seed(11)
    long_factor = [round(float(x), 4) for x in 1.0 + 6.0 * torch.rand(half, generator=g)]
    short_factor = [round(float(x), 4) for x in 1.0 + 0.5 * torch.rand(half, generator=g)]
    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        original_max_position_embeddings=4, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "long_factor": long_factor,
                         "short_factor": short_factor, "original_max_position_embeddings": 4},
        tie_word_embeddings=False, torch_dtype="float32", attn_implementation="eager", pad_token_id=0,
    )
    config = Phi3Config(**kwargs)
    torch.manual_seed(0)
    model = Phi3ForCausalLM(config).eval()
    randomize(model, 12)

    def variant(**rope):
        m = Phi3ForCausalLM(Phi3Config(**{**kwargs, "rope_parameters": {**kwargs["rope_parameters"], **rope}})).eval()
        m.load_state_dict(model.state_dict())
        return rows(all_logits(m, PROMPTS[0]))

    controls = {
        # The short factors kept past the original length.
        "short_factors_when_long": variant(long_factor=short_factor),
        # cos/sin not scaled by the attention factor.
        "no_attention_factor": variant(attention_factor=1.0),
    }
    write("phi3_longrope", model, config, controls)
    d = OUT / "phi3_longrope"
    ref = json.loads((d / "reference.json").read_text())
    ref["short_prompt"] = PROMPTS[0][:4]
    ref["short_logits"] = rows(all_logits(model, PROMPTS[0][:4]))
    (d / "reference.json").write_text(json.dumps(ref))


def phi4_mini():
    from transformers import Phi3Config, Phi3ForCausalLM

    # Phi-4-mini's shape: model_type phi3 with a partial rotary factor of
    # 0.75 (12 of each head's 16 features rotate, the last 4 pass through),
    # LongRoPE over those 6 pairs (original length 4, so every prompt runs
    # on the long factors), GQA and a tied output.
    g = torch.Generator().manual_seed(43)
    long_factor = [round(float(x), 4) for x in 1.0 + 6.0 * torch.rand(6, generator=g)]
    short_factor = [round(float(x), 4) for x in 1.0 + 0.5 * torch.rand(6, generator=g)]
    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        original_max_position_embeddings=4, rms_norm_eps=1e-5, partial_rotary_factor=0.75,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "long_factor": long_factor,
                         "short_factor": short_factor, "original_max_position_embeddings": 4,
                         "partial_rotary_factor": 0.75},
        tie_word_embeddings=True, torch_dtype="float32", attn_implementation="eager", pad_token_id=0,
    )
    config = Phi3Config(**kwargs)
    torch.manual_seed(0)
    model = Phi3ForCausalLM(config).eval()
    randomize(model, 44)
    rotary = model.model.rotary_emb
    assert rotary.inv_freq.numel() == 6, rotary.inv_freq.shape
    reference = rows(all_logits(model, PROMPTS[0]))

    def variant(partial, **rope):
        params = {**kwargs["rope_parameters"], **rope, "partial_rotary_factor": partial}
        m = Phi3ForCausalLM(Phi3Config(**{**kwargs, "partial_rotary_factor": partial, "rope_parameters": params})).eval()
        m.load_state_dict(model.state_dict())
        return rows(all_logits(m, PROMPTS[0]))

    controls = far_enough({
        # The partial factor ignored: every feature rotates (the two new
        # pairs with factor 1).
        "full_rotary": variant(1.0, long_factor=long_factor + [1.0, 1.0], short_factor=short_factor + [1.0, 1.0]),
        "no_attention_factor": variant(0.75, attention_factor=1.0),
    }, reference, "phi4_mini")
    write("phi4_mini", model, config, controls)


def smollm3():
    # SmolLM3's shape: llama with no rotation on every fourth layer
    # (`no_rope_layers`, 0 = NoPE: layer 3 of 4 here, as llama.cpp's
    # hard-coded interval of 4 has it), GQA, theta 2e6, tied output.
    from transformers import SmolLM3Config, SmolLM3ForCausalLM

    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=65536,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 2000000.0},
        no_rope_layer_interval=4, use_sliding_window=False, sliding_window=None,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32", attn_implementation="eager",
    )
    config = SmolLM3Config(**kwargs)
    assert config.no_rope_layers == [1, 1, 1, 0], config.no_rope_layers
    torch.manual_seed(0)
    model = SmolLM3ForCausalLM(config).eval()
    randomize(model, 47)
    reference = rows(all_logits(model, PROMPTS[0]))

    def variant(no_rope_layers):
        m = SmolLM3ForCausalLM(SmolLM3Config(**kwargs, no_rope_layers=no_rope_layers)).eval()
        m.load_state_dict(model.state_dict())
        return rows(all_logits(m, PROMPTS[0]))

    controls = far_enough({
        # Every layer rotated (the NoPE layer missed).
        "rope_on_every_layer": variant([1, 1, 1, 1]),
        # The NoPE layer counted from 0 (`l % 4 == 0`).
        "nope_on_layer_0": variant([0, 1, 1, 1]),
    }, reference, "smollm3")
    write("smollm3", model, config, controls)


def granite():
    # Granite 3's shape: llama with four scalars (embeddings times
    # `embedding_multiplier`, each block's output times
    # `residual_multiplier` before its residual add, attention scores
    # scaled by `attention_multiplier` instead of 1/sqrt(head_dim), logits
    # divided by `logits_scaling`), GQA, tied output.
    from transformers import GraniteConfig, GraniteForCausalLM

    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000000.0},
        embedding_multiplier=4.0, residual_multiplier=0.3, attention_multiplier=0.05, logits_scaling=3.0,
        attention_bias=False, mlp_bias=False, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=None, pad_token_id=None, torch_dtype="float32", attn_implementation="eager",
    )
    config = GraniteConfig(**kwargs)
    torch.manual_seed(0)
    model = GraniteForCausalLM(config).eval()
    randomize(model, 53)
    reference = rows(all_logits(model, PROMPTS[0]))

    def variant(**changes):
        m = GraniteForCausalLM(GraniteConfig(**{**kwargs, **changes})).eval()
        m.load_state_dict(model.state_dict())
        return rows(all_logits(m, PROMPTS[0]))

    controls = far_enough({
        "no_embedding_multiplier": variant(embedding_multiplier=1.0),
        "no_residual_multiplier": variant(residual_multiplier=1.0),
        "attention_scaled_by_head_dim": variant(attention_multiplier=0.25),
        "no_logits_scaling": variant(logits_scaling=1.0),
    }, reference, "granite")
    write("granite", model, config, controls)


def gemma3_text():
    # Gemma 3's text model (Gemma 3 270M / 1B; the 4B+ language model):
    # five sliding-window layers then a global one (`layer_types`), the
    # local layers' RoPE base 10000 and the global layers' 1e6 with the
    # 4B+ models' linear scaling by 8 on the global layers only, q/k
    # RMS-normed per head, every norm `1 + w`, the embedding scaled by
    # sqrt(hidden), GeGLU, tied output. The window is shrunk to 4 tokens.
    from transformers import Gemma3TextConfig, Gemma3ForCausalLM

    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
        max_position_embeddings=32768, rms_norm_eps=1e-6, sliding_window=4,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}},
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32", attn_implementation="eager",
    )
    config = Gemma3TextConfig(**kwargs)
    assert config.layer_types == ["sliding_attention"] * 5 + ["full_attention"], config.layer_types
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config).eval()
    randomize(model, 59)
    reference = rows(all_logits(model, PROMPTS[0]))

    def variant(**changes):
        m = Gemma3ForCausalLM(Gemma3TextConfig(**{**kwargs, **changes})).eval()
        m.load_state_dict(model.state_dict())
        return rows(all_logits(m, PROMPTS[0]))

    rope = kwargs["rope_parameters"]
    controls = far_enough({
        # The global layers' base on the local ones too.
        "local_base_1e6": variant(rope_parameters={**rope, "sliding_attention": {"rope_type": "default", "rope_theta": 1000000.0}}),
        # The linear scaling on every layer.
        "scaling_everywhere": variant(rope_parameters={**rope, "sliding_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 10000.0}}),
        # No window: every layer global.
        "no_window": variant(layer_types=["full_attention"] * 6),
        # The global scaling left out.
        "no_scaling": variant(rope_parameters={**rope, "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}}),
    }, reference, "gemma3_text")
    write("gemma3_text", model, config, controls)


def gemma3_multimodal():
    """Gemma 3 4B+'s checkpoint shape (`model_type: gemma3`,
    Gemma3ForConditionalGeneration): the gemma3_text fixture's weights as
    its language model beside a tiny SigLIP vision tower and projector,
    its config the text model's under `text_config`, saved with the Hub's
    tensor names (google/gemma-3-4b-it's: `language_model.model.*`,
    `vision_tower.vision_model.*`, `multi_modal_projector.*`, the output
    tied) into tests/fixtures/gemma3_multimodal/. transformers reads that
    layout back, and its logits on text alone are the text model's to
    the bit (asserted), so the tests use gemma3_text's reference.json."""
    from transformers import Gemma3Config, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, SiglipVisionConfig

    src = OUT / "gemma3_text"
    text = Gemma3ForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14, vision_use_head=False)
    config = Gemma3Config(text_config=text.config.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4,
                          torch_dtype="float32", attn_implementation="eager")
    torch.manual_seed(0)
    model = Gemma3ForConditionalGeneration(config).eval()
    randomize(model, 61)
    model.model.language_model.load_state_dict(text.model.state_dict())
    d = OUT.parent / "gemma3_multimodal"
    d.mkdir(parents=True, exist_ok=True)
    config.to_json_file(d / "config.json")
    hub = {}
    for k, v in model.state_dict().items():
        if k == "lm_head.weight":
            continue  # tied to the embedding, as the Hub's files leave it out
        for new, old in (("model.language_model.", "language_model.model."), ("model.vision_tower.", "vision_tower.vision_model."),
                         ("model.multi_modal_projector.", "multi_modal_projector.")):
            if k.startswith(new):
                k = old + k[len(new):]
        hub[k] = v.contiguous()
    assert any(k.startswith("vision_tower.vision_model.") for k in hub) and any(k.startswith("multi_modal_projector.") for k in hub)
    save_file(hub, d / "model.safetensors", metadata={"format": "pt"})
    back = Gemma3ForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    for p in PROMPTS:
        assert torch.equal(all_logits(back, p), all_logits(text, p)), "the multimodal checkpoint's text logits differ from the text model's"
    print("gemma3_multimodal written:", d, len(hub), "tensors")


def mistral3_multimodal(text_family="mistral", name="mistral3_multimodal", hub_names=True):
    """Mistral Small 3.1 / 3.2's checkpoint shape (`model_type: mistral3`,
    Mistral3ForConditionalGeneration): the mistral fixture's weights (its
    sliding window too) as its language model beside a tiny Pixtral vision
    tower and projector, saved with the Hub's tensor names
    (`language_model.model.*`, `language_model.lm_head.weight`,
    `vision_tower.*`, `multi_modal_projector.*`) into
    tests/fixtures/mistral3_multimodal/. transformers reads that layout back
    and its logits on text alone are the text model's to the bit
    (asserted), so the tests use mistral's reference.json. With
    `text_family` ministral3 (`ministral3_multimodal`), Ministral 3's shape
    in transformers 5's own names (`model.language_model.*`, `lm_head.*`)."""
    from transformers import AutoModelForCausalLM, Mistral3Config, Mistral3ForConditionalGeneration, PixtralVisionConfig

    src = OUT / text_family
    text = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
    vision = PixtralVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                 image_size=28, patch_size=14, head_dim=16)
    config = Mistral3Config(text_config=text.config.to_dict(), vision_config=vision.to_dict(), torch_dtype="float32", tie_word_embeddings=False,
                            attn_implementation="eager")
    torch.manual_seed(0)
    model = Mistral3ForConditionalGeneration(config).eval()
    randomize(model, 62)
    model.model.language_model.load_state_dict(text.model.state_dict())
    model.lm_head.load_state_dict(text.lm_head.state_dict())
    d = OUT.parent / name
    d.mkdir(parents=True, exist_ok=True)
    config.to_json_file(d / "config.json")
    hub = {}
    for k, v in model.state_dict().items():
        for new, old in (("model.language_model.", "language_model.model."), ("lm_head.", "language_model.lm_head."),
                         ("model.vision_tower.", "vision_tower."), ("model.multi_modal_projector.", "multi_modal_projector.")):
            if hub_names and k.startswith(new):
                k = old + k[len(new):]
                break
        hub[k] = v.contiguous()
    save_file(hub, d / "model.safetensors", metadata={"format": "pt"})
    back = Mistral3ForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    for p in PROMPTS:
        assert torch.equal(all_logits(back, p), all_logits(text, p)), "the multimodal checkpoint's text logits differ from the text model's"
    print(name, "written:", d, len(hub), "tensors", sum("vision_tower." in k or "multi_modal_projector." in k for k in hub), "vision")


def ministral3_multimodal():
    """Ministral 3's checkpoint shape (`mistral3` with a `ministral3` text model, transformers 5's names)."""
    mistral3_multimodal("ministral3", "ministral3_multimodal", hub_names=False)


def qwen_vl_text_config(text, sections, interleaved=None):
    """`text`'s config as a Qwen-VL `text_config`: M-RoPE's sections (and
    Qwen3-VL's interleaving) in its rope parameters."""
    drop = ("model_type", "architectures", "transformers_version", "dtype", "torch_dtype", "_name_or_path", "id2label", "label2id",
            "chunk_size_feed_forward", "is_encoder_decoder", "output_attentions", "output_hidden_states", "problem_type", "return_dict")
    t = {k: v for k, v in text.config.to_dict().items() if k not in drop}
    t["rope_parameters"] = dict(t["rope_parameters"], mrope_section=sections)
    if interleaved is not None:
        t["rope_parameters"]["mrope_interleaved"] = interleaved
    return t


def qwen_vl(name, text_family, text_class, config_class, model_class, vision, sections, renames, seed, interleaved=None, flat=False,
            extra=None):
    """A Qwen-VL checkpoint shape: the `text_family` fixture's weights as its
    language model (M-RoPE sections summing to half its head size) beside a
    tiny vision tower and merger, saved under the `renames` tensor names
    into tests/fixtures/{name}/; with `flat`, its config as the Hub's
    Qwen2/2.5-VL configs are written (the text model's keys at the top
    level, `rope_scaling: {type: mrope, mrope_section}`, `rope_theta`).
    On text alone every M-RoPE position is the token's index (t = h = w),
    so transformers' logits through the VL class are the text model's to
    the bit (asserted on the saved files read back), and the tests use the
    text fixture's reference.json."""
    text = text_class.from_pretrained(OUT / text_family, dtype=torch.float32, attn_implementation="eager").eval()
    sections = sections or text.config.rope_parameters["mrope_section"]
    config = config_class(text_config=qwen_vl_text_config(text, sections, interleaved), vision_config=vision,
                          tie_word_embeddings=text.config.tie_word_embeddings, torch_dtype="float32", attn_implementation="eager")
    torch.manual_seed(0)
    model = model_class(config).eval()
    randomize(model, seed)
    model.model.language_model.load_state_dict(text.model.state_dict())
    model.lm_head.load_state_dict(text.lm_head.state_dict())
    d = OUT.parent / name
    d.mkdir(parents=True, exist_ok=True)
    c = json.loads(config.to_json_string())
    if flat:
        t = c.pop("text_config")
        rope = t.pop("rope_parameters")
        t = {k: v for k, v in t.items() if k != "model_type"}
        c = {**t, **c, "rope_theta": rope["rope_theta"], "rope_scaling": {"type": "mrope", "mrope_section": rope["mrope_section"]}}
    (d / "config.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
    hub = {}
    for k, v in model.state_dict().items():
        for new, old in renames:
            if k.startswith(new):
                k = old + k[len(new):]
                break
        hub[k] = v.contiguous()
    if extra:
        hub.update(extra(config.text_config))
    save_file(hub, d / "model.safetensors", metadata={"format": "pt"})
    back = model_class.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    for p in PROMPTS:
        assert torch.equal(all_logits(back, p), all_logits(text, p)), f"{name}: the VL checkpoint's text logits differ from the text model's"
    # The control: M-RoPE with a text token's height and width positions 0
    # (only time advancing), a plausible misreading of its text positions.
    n = len(PROMPTS[0])
    t = torch.arange(n)
    positions = torch.stack([t, torch.zeros_like(t), torch.zeros_like(t)])[:, None, :]
    with torch.no_grad():
        hw_at_zero = back(torch.tensor([PROMPTS[0]]), position_ids=positions).logits[0].float()
    far = (hw_at_zero - all_logits(text, PROMPTS[0])).abs().max().item()
    assert far > 1e-2, f"{name}: the control is {far} from the reference"
    controls = {"made_by": f"tools/make_family_fixtures.py {name}, transformers {transformers.__version__}, torch {torch.__version__}, f32",
                "prompt": PROMPTS[0], "hw_positions_at_zero": rows(hw_at_zero)}
    (d / "controls.json").write_text(json.dumps(controls))
    vision_tensors = sum(1 for k in hub if "visual." in k)
    print(name, "written:", d, len(hub), "tensors,", vision_tensors, "vision; control", far, "away")


def qwen2_vl_multimodal():
    """Qwen2-VL's checkpoint shape as transformers 5 saves it
    (`text_config` of model_type qwen2_vl_text; `model.language_model.*`,
    `model.visual.*`): the qwen2 fixture's language model, M-RoPE sections
    [2, 3, 3] (Qwen2-VL-7B's 16, 24, 24 of 64 pairs, scaled to 8)."""
    from transformers import Qwen2ForCausalLM, Qwen2VLConfig, Qwen2VLForConditionalGeneration

    vision = dict(depth=1, embed_dim=32, hidden_size=64, mlp_ratio=2, num_heads=2, patch_size=14, spatial_merge_size=2)
    qwen_vl("qwen2_vl_multimodal", "qwen2", Qwen2ForCausalLM, Qwen2VLConfig, Qwen2VLForConditionalGeneration, vision, [2, 3, 3], [], 63)


def qwen2_5_vl_multimodal():
    """Qwen2.5-VL's checkpoint as the Hub has it (Qwen/Qwen2.5-VL-7B-Instruct:
    the flat config, `model.*`, `visual.*`, `lm_head.weight`): the qwen2
    fixture's language model, M-RoPE sections [2, 3, 3]."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2ForCausalLM

    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, fullatt_block_indexes=[0])
    renames = [("model.language_model.", "model."), ("model.visual.", "visual.")]
    qwen_vl("qwen2_5_vl_multimodal", "qwen2", Qwen2ForCausalLM, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, vision, [2, 3, 3],
            renames, 64, flat=True)


def qwen3_vl_multimodal():
    """Qwen3-VL's checkpoint as the Hub has it (Qwen/Qwen3-VL-8B-Instruct:
    `text_config` of model_type qwen3_vl_text with interleaved M-RoPE,
    `model.language_model.*`, `model.visual.*` with a DeepStack merger,
    `lm_head.weight`): the qwen3 fixture's language model, sections
    [3, 3, 2] (24, 20, 20 of 64 pairs, scaled to 8)."""
    from transformers import Qwen3ForCausalLM, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, deepstack_visual_indexes=[0],
                  num_position_embeddings=16, patch_size=16, spatial_merge_size=2)
    qwen_vl("qwen3_vl_multimodal", "qwen3", Qwen3ForCausalLM, Qwen3VLConfig, Qwen3VLForConditionalGeneration, vision, [3, 3, 2], [], 65,
            interleaved=True)


def qwen3_5_mtp(text_config):
    """A multi-token-prediction head as the Hub's Qwen3.5 checkpoints carry
    one (`mtp.*`: its input projection and norms, one full-attention
    layer), made up: transformers ignores `mtp.*` on load, and so must graphc."""
    d, g = text_config.hidden_size, torch.Generator().manual_seed(66)
    shapes = {"mtp.fc.weight": (d, 2 * d), "mtp.pre_fc_norm_embedding.weight": (d,), "mtp.pre_fc_norm_hidden.weight": (d,),
              "mtp.norm.weight": (d,), "mtp.layers.0.input_layernorm.weight": (d,),
              "mtp.layers.0.self_attn.q_proj.weight": (2 * text_config.num_attention_heads * text_config.head_dim, d),
              "mtp.layers.0.mlp.down_proj.weight": (d, text_config.intermediate_size)}
    return {k: torch.randn(shape, generator=g) for k, shape in shapes.items()}


def qwen3_5_multimodal():
    """Qwen3.5's checkpoint as the Hub has it (Qwen/Qwen3.5-9B:
    Qwen3_5ForConditionalGeneration, `text_config` of qwen3_5_text,
    `model.language_model.*`, `model.visual.*`, `lm_head.weight`, and an
    MTP head `mtp.*`): the qwen3_5 fixture's language model."""
    from transformers import Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration

    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, num_position_embeddings=16,
                  patch_size=16, spatial_merge_size=2)
    qwen_vl("qwen3_5_multimodal", "qwen3_5", Qwen3_5ForCausalLM, Qwen3_5Config, Qwen3_5ForConditionalGeneration, vision, None, [], 67,
            interleaved=True, extra=qwen3_5_mtp)


def qwen3_vl_moe_check():
    """Qwen3-VL-MoE's language model is Qwen3-MoE's (renormalized top-k,
    `mlp_only_layers`), M-RoPE on text alone RoPE: transformers'
    Qwen3VLMoeForConditionalGeneration holding the qwen3_moe fixture's
    weights gives that fixture's text logits (asserted; nothing written:
    graphc reads Qwen3-VL-MoE from its GGUF, `make_gguf_fixtures.py
    qwen3_vl_moe`, whose reference is qwen3_moe's)."""
    from transformers import Qwen3MoeForCausalLM, Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

    text = Qwen3MoeForCausalLM.from_pretrained(OUT / "qwen3_moe", dtype=torch.float32, attn_implementation="eager",
                                               experts_implementation="eager").eval()
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, deepstack_visual_indexes=[0],
                  num_position_embeddings=16, patch_size=16, spatial_merge_size=2)
    config = Qwen3VLMoeConfig(text_config=qwen_vl_text_config(text, [3, 3, 2], True), vision_config=vision,
                              tie_word_embeddings=text.config.tie_word_embeddings, torch_dtype="float32", attn_implementation="eager")
    config._experts_implementation = "eager"
    torch.manual_seed(0)
    model = Qwen3VLMoeForConditionalGeneration(config).eval()
    missing = model.model.language_model.load_state_dict(text.model.state_dict(), strict=True)
    model.lm_head.load_state_dict(text.lm_head.state_dict())
    for p in PROMPTS:
        a, b = all_logits(model, p), all_logits(text, p)
        assert (a - b).abs().max().item() < 1e-6, f"Qwen3-VL-MoE's text logits differ from Qwen3-MoE's by {(a - b).abs().max().item()}"
    print("qwen3_vl_moe: the VL-MoE class on text is the qwen3_moe fixture", missing)


def qwen2_moe():
    # Qwen1.5-MoE's shape: Qwen2's biased attention, every layer routed
    # (4 experts, 2 a token, not renormalized: `norm_topk_prob` false, as
    # Qwen1.5-MoE-A2.7B and Qwen2-57B-A14B) plus a shared expert gated by a
    # sigmoid.
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[],
        use_sliding_window=False, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
        pad_token_id=None, torch_dtype="float32", attn_implementation="eager",
    )
    config = Qwen2MoeConfig(**kwargs)
    torch.manual_seed(0)
    model = Qwen2MoeForCausalLM(config).eval()
    randomize(model, 61)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Router logits spread out, so the top-2 choice is clear-cut;
            # biases as large as what they are added to (as qwen2's).
            if name.endswith("mlp.gate.weight"):
                p.mul_(4.0)
            if name.endswith(".bias"):
                p.mul_(8.0)
    reference = rows(all_logits(model, PROMPTS[0]))

    def variant(**changes):
        m = Qwen2MoeForCausalLM(Qwen2MoeConfig(**{**kwargs, **changes})).eval()
        m.load_state_dict(model.state_dict())
        return rows(all_logits(m, PROMPTS[0]))

    def no_shared_gate(self, hidden_states):
        return self.shared_expert(hidden_states)

    controls = far_enough({
        "renormalized": variant(norm_topk_prob=True),
        "top_1": variant(num_experts_per_tok=1),
        "no_qkv_bias": qwen2_no_qkv_bias(model),
    }, reference, "qwen2_moe")
    write("qwen2_moe", model, config, controls)


def olmo2():
    # OLMo 2's shape: no norm before attention or the MLP, an RMS norm after
    # each (before its residual add), and Q and K RMS-normed over the whole
    # projection (`q_norm` of num_heads * head_dim) before the heads split.
    from transformers import Olmo2Config, Olmo2ForCausalLM

    config = Olmo2Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, attention_bias=False,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32", attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = Olmo2ForCausalLM(config).eval()
    randomize(model, 67)
    reference = rows(all_logits(model, PROMPTS[0]))
    hd = config.hidden_size // config.num_attention_heads

    def with_qk_norms(make):
        saved = []
        for layer in model.model.layers:
            a = layer.self_attn
            saved.append((a.q_norm.forward, a.k_norm.forward))
            a.q_norm.forward, a.k_norm.forward = make(a.q_norm), make(a.k_norm)
        try:
            return rows(all_logits(model, PROMPTS[0]))
        finally:
            for layer, (q, k) in zip(model.model.layers, saved):
                layer.self_attn.q_norm.forward, layer.self_attn.k_norm.forward = q, k

    def per_head(norm):
        def forward(x):
            h = x.view(*x.shape[:-1], -1, hd)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
            return norm.weight * h.reshape(x.shape)
        return forward

    controls = far_enough({
        "no_qk_norm": with_qk_norms(lambda norm: (lambda x: x)),
        "qk_norm_per_head": with_qk_norms(per_head),
    }, reference, "olmo2")
    write("olmo2", model, config, controls)


def olmo3():
    """OLMo 3's shape (Olmo3ForCausalLM): OLMo 2's layers, three of four
    sliding (window shrunk to 5, so the 13-token prompt's later positions see
    only the window) and every fourth global, YaRN (OLMo 3 7B's factor 8
    over 8192, transformers' default attention factor) on the global layers
    only, plain RoPE at the same base on the sliding ones."""
    from transformers import Olmo3Config, Olmo3ForCausalLM

    base = 500000.0
    config = Olmo3Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=65536, rms_norm_eps=1e-6,
        sliding_window=5, layer_types=["sliding_attention"] * 3 + ["full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": base},
                         "full_attention": {"rope_type": "yarn", "rope_theta": base, "factor": 8.0,
                                            "original_max_position_embeddings": 8192}},
        attention_bias=False, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32", attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = Olmo3ForCausalLM(config).eval()
    randomize(model, 68)
    reference = rows(all_logits(model, PROMPTS[0]))
    rotary = model.model.rotary_emb

    def rope_swapped(kind, inv_freq, scaling):
        saved = (getattr(rotary, f"{kind}_inv_freq").clone(), getattr(rotary, f"{kind}_attention_scaling"))
        getattr(rotary, f"{kind}_inv_freq").copy_(inv_freq)
        setattr(rotary, f"{kind}_attention_scaling", scaling)
        try:
            return rows(all_logits(model, PROMPTS[0]))
        finally:
            getattr(rotary, f"{kind}_inv_freq").copy_(saved[0])
            setattr(rotary, f"{kind}_attention_scaling", saved[1])

    yarn = (rotary.full_attention_inv_freq.clone(), rotary.full_attention_attention_scaling)
    plain = rotary.sliding_attention_inv_freq.clone()
    controls = far_enough({
        # The window ignored (one longer than the prompt: full causal attention).
        "no_window": window_logits(model, 64),
        # YaRN read on no layer, and on every layer.
        "no_yarn": rope_swapped("full_attention", plain, 1.0),
        "yarn_on_sliding_layers": rope_swapped("sliding_attention", *yarn),
    }, reference, "olmo3")
    write("olmo3", model, config, controls)


def glm4():
    """GLM-4's shape (Glm4ForCausalLM, GLM-4-9B-0414 / GLM-Z1): sandwich RMS
    norms (after attention and after the MLP too), biased q/k/v and an
    unbiased output projection, GPT-J-style RoPE (adjacent pairs) on the
    first half of each head, Phi-3's fused `gate_up_proj`."""
    import transformers.models.glm4.modeling_glm4 as m
    from transformers import Glm4Config, Glm4ForCausalLM

    config = Glm4Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=32768, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}, attention_bias=True,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32", attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = Glm4ForCausalLM(config).eval()
    randomize(model, 69)
    reference = rows(all_logits(model, PROMPTS[0]))

    def neox(q, k, cos, sin, unsqueeze_dim=1):
        # The rotated half read as NeoX (pairs i, i + d/2) instead of adjacent pairs.
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        r = cos.shape[-1]
        def rot(x):
            xr, xp = x[..., :r], x[..., r:]
            half = torch.cat((-xr[..., r // 2:], xr[..., :r // 2]), dim=-1)
            return torch.cat((xr * cos + half * sin, xp), dim=-1)
        return rot(q), rot(k)

    def without(norm_name):
        saved = [getattr(l, norm_name).forward for l in model.model.layers]
        for l in model.model.layers:
            getattr(l, norm_name).forward = lambda x: x
        try:
            return rows(all_logits(model, PROMPTS[0]))
        finally:
            for l, f in zip(model.model.layers, saved):
                getattr(l, norm_name).forward = f

    controls = far_enough({
        "rope_as_neox": patched(model, m, "apply_rotary_pos_emb", neox),
        "no_post_self_attn_norm": without("post_self_attn_layernorm"),
        "no_post_mlp_norm": without("post_mlp_layernorm"),
    }, reference, "glm4")
    write("glm4", model, config, controls)


def ernie4_5():
    """ERNIE 4.5's dense shape (Ernie4_5ForCausalLM, ERNIE-4.5-0.3B): Llama's
    layers with RoPE on adjacent pairs (GLM's `rotate_half`, cos/sin
    `repeat_interleave`d), no biases, GQA, tied output."""
    import transformers.models.ernie4_5.modeling_ernie4_5 as m
    from transformers import Ernie4_5Config, Ernie4_5ForCausalLM

    config = Ernie4_5Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, use_bias=False,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32", attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = Ernie4_5ForCausalLM(config).eval()
    randomize(model, 70)
    reference = rows(all_logits(model, PROMPTS[0]))

    def neox(q, k, cos, sin, unsqueeze_dim=1):
        # Adjacent pairs read as NeoX halves (Llama's rotate_half).
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        half = lambda x: torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), dim=-1)
        return q * cos + half(q) * sin, k * cos + half(k) * sin

    controls = far_enough({
        "rope_as_neox": patched(model, m, "apply_rotary_pos_emb", neox),
        "gqa_tiled": patched(model, m, "repeat_kv", lambda x, n_rep: x.repeat(1, n_rep, 1, 1)),
    }, reference, "ernie4_5")
    write("ernie4_5", model, config, controls)


def granitemoe():
    # Granite 3's MoE (granite-3.x-1b-a400m, 3b-a800m): Granite's four
    # scales on a decoder whose MLP routes each token to 2 of 4 experts
    # (softmax over the top-2 router logits). graphc reads its GGUF only
    # (the Hub's safetensors keep a layer's experts in one 3D tensor), so
    # this fixture is the GGUF llama.cpp's converter writes (experts
    # stacked, `input_linear` split into gate and up) and the reference,
    # under tests/fixtures/gguf_only/.
    import gguf
    import numpy as np
    from transformers import GraniteMoeConfig, GraniteMoeForCausalLM

    config = GraniteMoeConfig(
        vocab_size=256, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, num_local_experts=4, num_experts_per_tok=2,
        embedding_multiplier=4.0, residual_multiplier=0.3, attention_multiplier=0.05, logits_scaling=3.0,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32", attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = GraniteMoeForCausalLM(config).eval()
    randomize(model, 71)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("router.weight"):
                p.mul_(4.0)
    d = OUT.parent / "gguf_only" / "granitemoe"
    d.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(d / "model.gguf", "granitemoe")
    w.add_name("graphc parity fixture granitemoe")
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_block_count(config.num_hidden_layers)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_expert_count(config.num_local_experts)
    w.add_expert_used_count(config.num_experts_per_tok)
    w.add_embedding_scale(config.embedding_multiplier)
    w.add_residual_scale(config.residual_multiplier)
    w.add_attention_scale(config.attention_multiplier)
    w.add_logit_scale(config.logits_scaling)
    w.add_vocab_size(config.vocab_size)
    w.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    def permute(t, n_head, n_kv):
        # LlamaModel.permute (GraniteMoeModel is a GraniteModel, a LlamaModel).
        if n_kv is not None and n_head != n_kv:
            n_head = n_kv
        return t.reshape(n_head, 2, t.shape[0] // n_head // 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)

    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    out = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"]}
    f = config.intermediate_size
    for l in range(config.num_hidden_layers):
        p = f"model.layers.{l}."
        out[f"blk.{l}.attn_norm.weight"] = sd[p + "input_layernorm.weight"]
        out[f"blk.{l}.ffn_norm.weight"] = sd[p + "post_attention_layernorm.weight"]
        out[f"blk.{l}.attn_q.weight"] = permute(sd[p + "self_attn.q_proj.weight"], config.num_attention_heads, config.num_attention_heads)
        out[f"blk.{l}.attn_k.weight"] = permute(sd[p + "self_attn.k_proj.weight"], config.num_attention_heads, config.num_key_value_heads)
        out[f"blk.{l}.attn_v.weight"] = sd[p + "self_attn.v_proj.weight"]
        out[f"blk.{l}.attn_output.weight"] = sd[p + "self_attn.o_proj.weight"]
        out[f"blk.{l}.ffn_gate_inp.weight"] = sd[p + "block_sparse_moe.router.weight"]
        gate_up = sd[p + "block_sparse_moe.experts.gate_up_proj"]
        out[f"blk.{l}.ffn_gate_exps.weight"] = np.ascontiguousarray(gate_up[:, :f])
        out[f"blk.{l}.ffn_up_exps.weight"] = np.ascontiguousarray(gate_up[:, f:])
        out[f"blk.{l}.ffn_down_exps.weight"] = sd[p + "block_sparse_moe.experts.down_proj"]
    for name in sorted(out):
        w.add_tensor(name, np.ascontiguousarray(out[name]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    reference = rows(all_logits(model, PROMPTS[0]))
    saved = config.num_experts_per_tok
    model.config.num_experts_per_tok = 1
    for layer in model.model.layers:
        layer.block_sparse_moe.router.top_k = 1
    top_1 = rows(all_logits(model, PROMPTS[0]))
    for layer in model.model.layers:
        layer.block_sparse_moe.router.top_k = saved
    model.config.num_experts_per_tok = saved
    ref = {
        "made_by": f"tools/make_family_fixtures.py granitemoe, transformers {transformers.__version__}, torch {torch.__version__}, f32",
        "prompts": PROMPTS,
        "logits": [rows(all_logits(model, p)) for p in PROMPTS],
        "greedy": greedy(model, PROMPTS[0]),
        "controls": far_enough({"top_1": top_1}, reference, "granitemoe"),
    }
    (d / "reference.json").write_text(json.dumps(ref))
    print("granitemoe written:", d)


def qwen3_next():
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    # 4 layers: 3 Gated DeltaNet layers then a gated full-attention layer
    # (full attention every 4th); 2 key heads serving 4 value heads; every
    # layer's MLP 4 routed experts (2 per token) plus a shared expert.
    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, decoder_sparse_step=1,
        moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts_per_tok=2,
        num_experts=4, norm_topk_prob=True, mlp_only_layers=[], full_attention_interval=4,
        tie_word_embeddings=False, torch_dtype="float32", attn_implementation="eager",
    )
    config = Qwen3NextConfig(**kwargs)
    torch.manual_seed(0)
    model = Qwen3NextForCausalLM(config).eval()
    linear_attention_randomize(model, 7, a_span=15.0, router_scale=4.0)

    def patched(patch):
        """Logits of PROMPTS[0] with `patch(model)` applied, then undone."""
        undo = patch(model)
        try:
            return rows(all_logits(model, PROMPTS[0]))
        finally:
            undo()

    import transformers.models.qwen3_next.modeling_qwen3_next as mod

    def no_qk_l2norm(m):
        saved = mod.l2norm
        mod.l2norm = lambda x, dim=-1, eps=1e-6: x
        return lambda: setattr(mod, "l2norm", saved)

    def no_decay(m):
        saved = [l.linear_attn.A_log.clone() for l in m.model.layers if hasattr(l, "linear_attn")]
        with torch.no_grad():
            for l in m.model.layers:
                if hasattr(l, "linear_attn"):
                    l.linear_attn.A_log.fill_(-30.0)  # exp(g) = 1: the state never decays

        def undo():
            with torch.no_grad():
                for l, a in zip([l for l in m.model.layers if hasattr(l, "linear_attn")], saved):
                    l.linear_attn.A_log.copy_(a)
        return undo

    def no_output_gate(m):
        attn = m.model.layers[3].self_attn
        saved = attn.forward

        def forward(*args, **kw):
            q = attn.q_proj
            w = q.weight.detach().clone()
            hd = attn.head_dim
            with torch.no_grad():
                # A gate of +30 everywhere: sigmoid(gate) = 1.
                v = w.view(-1, 2 * hd, w.shape[1])
                v[:, hd:] = 0.0
            q.weight.data = w
            bias = torch.zeros(w.shape[0])
            bias.view(-1, 2 * hd)[:, hd:] = 30.0
            q.bias = torch.nn.Parameter(bias)
            try:
                return saved(*args, **kw)
            finally:
                q.bias = None
                q.weight.data = orig
        orig = attn.q_proj.weight.data
        attn.forward = forward
        return lambda: setattr(attn, "forward", saved)

    controls = {
        "no_qk_l2norm": patched(no_qk_l2norm),
        "no_decay": patched(no_decay),
        "no_output_gate": patched(no_output_gate),
    }
    write("qwen3_next", model, config, controls)


def qwen3_5_kwargs(moe):
    """Qwen3.5's text model, shrunk: 4 layers, 3 Gated DeltaNet layers then
    a gated full-attention one; 2 key heads serving 4 value heads (the
    grouping llama.cpp's converter reorders); heads of 32 with a quarter
    rotated (8 features: M-RoPE sections [2, 1, 1], interleaved, as the real
    [11, 11, 10] of 32 pairs); dense MLPs, or with `moe` every layer's MLP 4
    routed experts (2 a token) plus a gated shared expert."""
    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                                            "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"], full_attention_interval=4,
        tie_word_embeddings=False, torch_dtype="float32", attn_implementation="eager",
    )
    if moe:
        kwargs.update(moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts_per_tok=2, num_experts=4)
        kwargs.pop("intermediate_size")
    return kwargs


def linear_attention_randomize(model, seed, a_span, router_scale=1.0):
    """`randomize`, then as Qwen3-Next's and Qwen3.5's weights are: the
    `1 + w` norms zero-centered, the linear attention's gated norm a plain
    `w`, `A = exp(A_log)` in [1, 1 + a_span], the router scaled."""
    randomize(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") and "linear_attn" not in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("A_log"):
                p.copy_(torch.log(1.0 + a_span * torch.rand(p.shape, generator=g)))
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith("mlp.gate.weight"):
                p.mul_(router_scale)


def qwen3_5_randomize(model, seed):
    """Qwen3.5's fixtures: decays narrower than qwen3_next's and the router
    as drawn (with [1, 16] and a sharpened router the model amplified
    torch's own f32 error past the bound)."""
    linear_attention_randomize(model, seed, a_span=3.0)


def qwen3_5_controls(model, mod):
    """The likely mistakes: value heads read key heads tiled (h % n_k, the
    order llama.cpp's GGUF stores them in) instead of grouped (h // r); the
    gates b and a swapped; plain `w` norms where Qwen3.5 scales by `1 + w`."""
    def tiled(fn):
        def run(query, key, value, *args, **kw):
            r = value.shape[2] // query.shape[2]
            return fn(query.repeat(1, 1, r, 1), key.repeat(1, 1, r, 1), value, *args, **kw)
        return run

    saved = (mod.torch_chunk_gated_delta_rule, mod.torch_recurrent_gated_delta_rule)
    mod.torch_chunk_gated_delta_rule, mod.torch_recurrent_gated_delta_rule = tiled(saved[0]), tiled(saved[1])
    for l in model.model.layers:
        if hasattr(l, "linear_attn"):
            l.linear_attn.chunk_gated_delta_rule = mod.torch_chunk_gated_delta_rule
            l.linear_attn.recurrent_gated_delta_rule = mod.torch_recurrent_gated_delta_rule
    try:
        v_tiled = rows(all_logits(model, PROMPTS[0]))
    finally:
        mod.torch_chunk_gated_delta_rule, mod.torch_recurrent_gated_delta_rule = saved
        for l in model.model.layers:
            if hasattr(l, "linear_attn"):
                l.linear_attn.chunk_gated_delta_rule, l.linear_attn.recurrent_gated_delta_rule = saved
    linear = [l.linear_attn for l in model.model.layers if hasattr(l, "linear_attn")]
    with torch.no_grad():
        for la in linear:
            la.in_proj_a.weight, la.in_proj_b.weight = la.in_proj_b.weight, la.in_proj_a.weight
        ba_swapped = rows(all_logits(model, PROMPTS[0]))
        for la in linear:
            la.in_proj_a.weight, la.in_proj_b.weight = la.in_proj_b.weight, la.in_proj_a.weight
        norms = [p for n, p in model.named_parameters() if n.endswith("norm.weight") and "linear_attn" not in n]
        for p in norms:
            p.add_(1.0)
        plain_w = rows(all_logits(model, PROMPTS[0]))
        for p in norms:
            p.sub_(1.0)
    return {"v_heads_tiled": v_tiled, "b_a_swapped": ba_swapped, "norms_plain_w": plain_w}


def qwen3_5_family(name, mod, model_class, config_class, moe, seed):
    """A Qwen3.5 text fixture: `qwen3_5_kwargs(moe)`, the reference and
    controls in float64 (`write(f64=True)`)."""
    config = config_class(**qwen3_5_kwargs(moe=moe))
    config._experts_implementation = "eager"  # the grouped kernel takes no float64
    torch.manual_seed(0)
    model = model_class(config).eval()
    qwen3_5_randomize(model, seed)
    with f64_everywhere(model):
        reference = rows(all_logits(model, PROMPTS[0]))
        controls = far_enough(qwen3_5_controls(model, mod), reference, name)
    write(name, model, config, controls, f64=True)


def qwen3_5():
    """Qwen3.5's text model (`model_type: qwen3_5_text`, Qwen3_5ForCausalLM)."""
    import transformers.models.qwen3_5.modeling_qwen3_5 as mod
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    qwen3_5_family("qwen3_5", mod, Qwen3_5ForCausalLM, Qwen3_5TextConfig, False, 71)


def qwen3_5_moe():
    """Qwen3.5's MoE text model (`qwen3_5_moe_text`), experts in the Hub's per-expert layout."""
    import transformers.models.qwen3_5_moe.modeling_qwen3_5_moe as mod
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    qwen3_5_family("qwen3_5_moe", mod, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, True, 75)


def phimoe_hub_layout(state):
    """PhiMoE checkpoints on the Hub (Phi-3.5-MoE) name the router
    `block_sparse_moe.gate` and each expert's gate, down and up projections
    `block_sparse_moe.experts.E.w1/w2/w3`; transformers 5 keeps them fused."""
    out = {}
    for k, v in state.items():
        if k.endswith("mlp.router.weight"):
            out[k.replace("mlp.router", "block_sparse_moe.gate")] = v
        elif k.endswith("mlp.experts.gate_up_proj"):
            base = k[: -len("mlp.experts.gate_up_proj")] + "block_sparse_moe.experts."
            inter = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{base}{e}.w1.weight"] = v[e, :inter].contiguous()
                out[f"{base}{e}.w3.weight"] = v[e, inter:].contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            base = k[: -len("mlp.experts.down_proj")] + "block_sparse_moe.experts."
            for e in range(v.shape[0]):
                out[f"{base}{e}.w2.weight"] = v[e].contiguous()
        else:
            out[k] = v
    return out


def phimoe():
    from transformers import PhimoeConfig, PhimoeForCausalLM
    import transformers.models.phimoe.modeling_phimoe as mod

    # 4 experts, the sparsemixer's top-2 with jitter band 0.01; biased
    # attention and head, LayerNorms with bias.
    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5,
        num_local_experts=4, num_experts_per_tok=2, router_jitter_noise=0.01, attention_bias=True,
        lm_head_bias=True, tie_word_embeddings=False, torch_dtype="float32", attn_implementation="eager",
    )
    config = PhimoeConfig(**kwargs)
    torch.manual_seed(0)
    model = PhimoeForCausalLM(config).eval()
    randomize(model, 9)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.router.weight"):
                p.mul_(4.0)

    def with_router(fn):
        saved = mod.sparsemixer
        mod.sparsemixer = fn
        try:
            return rows(all_logits(model, PROMPTS[0]))
        finally:
            mod.sparsemixer = saved

    def top1_only(scores, jitter_eps, training, top_k=2):
        w, sel = saved_mixer(scores, jitter_eps, training, top_k)
        return w * torch.tensor([1.0, 0.0]), sel

    def plain_softmax_top2(scores, jitter_eps, training, top_k=2):
        probs = torch.softmax(scores, dim=-1)
        w, sel = probs.topk(2, dim=-1)
        return w / w.sum(dim=-1, keepdim=True), sel

    saved_mixer = mod.sparsemixer
    controls = {
        "top1_only": with_router(top1_only),
        "plain_softmax_top2": with_router(plain_softmax_top2),
    }
    d = OUT / "phimoe"
    d.mkdir(parents=True, exist_ok=True)
    write("phimoe", model, config, controls, layout=phimoe_hub_layout)
    # HF's sparsemixer on router scores inside the band where clamp(min=t)
    # read as min(x, t) instead of max(x, t) would mask expert 1: with t1 =
    # 1, 0.9801 is within [t1(1 - 2eps), t1 / (1 + 2eps)).
    band = torch.tensor([[1.0, 0.9801, 0.3, -2.0]])
    w, sel = mod.sparsemixer(band, jitter_eps=0.01, training=False, top_k=2)
    dense = torch.zeros_like(band).scatter(-1, sel, w)
    ref = json.loads((d / "reference.json").read_text())
    ref["sparsemixer_band"] = {"scores": band[0].tolist(), "jitter_eps": 0.01, "weights": dense[0].tolist()}
    (d / "reference.json").write_text(json.dumps(ref))



def mixtral_hub_layout(state):
    """Mixtral checkpoints on the Hub name the router `block_sparse_moe.gate`
    and each expert's gate, down and up projections
    `block_sparse_moe.experts.E.w1/w2/w3`; transformers 5 keeps them fused."""
    out = {}
    for k, v in state.items():
        if k.endswith("mlp.gate.weight"):
            out[k.replace("mlp.gate", "block_sparse_moe.gate")] = v
        else:
            out[k] = v
    return phimoe_hub_layout(out)


def mixtral():
    # Shaped like Mixtral 8x7B (GQA, theta 1e6, untied, no biases, no
    # window) with 4 experts, 2 per token: softmax over the router logits,
    # the top 2 kept and renormalized to sum to 1.
    from transformers import MixtralConfig, MixtralForCausalLM
    import transformers.models.mixtral.modeling_mixtral as m

    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=32768,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        num_local_experts=4, num_experts_per_tok=2, sliding_window=None, router_jitter_noise=0.0,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32", attn_implementation="eager",
    )
    config = MixtralConfig(**kwargs)
    torch.manual_seed(0)
    model = MixtralForCausalLM(config).eval()
    randomize(model, 41)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Router logits spread out, so the top-2 choice is clear-cut.
            if name.endswith("mlp.gate.weight"):
                p.mul_(4.0)
    reference = rows(all_logits(model, PROMPTS[0]))

    def variant(**changes):
        v = MixtralForCausalLM(MixtralConfig(**{**kwargs, **changes})).eval()
        v.load_state_dict(model.state_dict())
        return rows(all_logits(v, PROMPTS[0]))

    def unnormalized(self, hidden_states):
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        logits = torch.nn.functional.linear(hidden_states, self.weight)
        probs = torch.softmax(logits.float(), dim=-1)
        top, idx = torch.topk(probs, self.top_k, dim=-1)
        return logits, top, idx

    controls = far_enough({
        "top_1": variant(num_experts_per_tok=1),
        "all_experts": variant(num_experts_per_tok=4),
        # The chosen two weighted by their softmax probabilities, not renormalized.
        "no_renormalization": patched(model, m.MixtralTopKRouter, "forward", unnormalized),
        "neox_as_gptj": patched(model, m, "apply_rotary_pos_emb", rope_gptj),
    }, reference, "mixtral")
    write("mixtral", model, config, controls, layout=mixtral_hub_layout)


GEMMA4_KWARGS = dict(
    vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=6,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
    attention_k_eq_v=True, num_kv_shared_layers=2, use_double_wide_mlp=True,
    hidden_size_per_layer_input=8, vocab_size_per_layer_input=256,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
    max_position_embeddings=32768, rms_norm_eps=1e-6, sliding_window=4, final_logit_softcapping=10.0,
    rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                     "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}},
    tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    torch_dtype="float32", attn_implementation="eager",
)


def gemma4_model(seed):
    """Gemma 4's text model, shrunk, with every feature of the E2B/E4B and
    31B checkpoints at once: sliding layers of `head_dim` 16 and global ones
    of `global_head_dim` 32 with one kv head whose values are its keys
    (`attention_k_eq_v`, 31B), values RMS-normed without a scale, the
    global layers' proportional RoPE (a quarter of the pairs turn, over the
    whole head's exponents), the last two layers reading the caches of the
    last earlier layer of their kind (`num_kv_shared_layers`, E2B) with
    double-wide MLPs, per-layer embeddings (PLE), a layer scalar, and a
    final soft-cap (10 here so that it bends these logits; 30 on the Hub)."""
    from transformers import Gemma4TextConfig, Gemma4ForCausalLM

    config = Gemma4TextConfig(**GEMMA4_KWARGS)
    assert config.kv_sharing_modes == [None, "store", "store", None, "reuse", "reuse"] or \
        config.kv_sharing_modes[4:] == ["reuse", "reuse"], config.kv_sharing_modes
    torch.manual_seed(0)
    model = Gemma4ForCausalLM(config).eval()
    randomize(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.layer_scalar.copy_(0.6 + 0.8 * torch.rand(1, generator=g))
    return config, model


def gemma4():
    """Gemma 4's text model (`model_type: gemma4_text`, Gemma4ForCausalLM)."""
    import transformers.models.gemma4.modeling_gemma4 as m

    config, model = gemma4_model(73)
    reference = rows(all_logits(model, PROMPTS[0]))
    layers = model.model.layers

    def with_attrs(changes):
        saved = [(obj, name, getattr(obj, name)) for obj, name, _ in changes]
        for obj, name, v in changes:
            setattr(obj, name, v)
        try:
            return rows(all_logits(model, PROMPTS[0]))
        finally:
            for obj, name, v in saved:
                setattr(obj, name, v)

    rotary = model.model.rotary_emb
    full_freq = rotary.full_attention_inv_freq
    hd = config.per_layer_config["full_attention"].head_dim
    pairs = torch.arange(0, hd, 2, dtype=torch.float) / hd
    all_turn = 1.0 / (1000000.0 ** pairs)
    # The rotated quarter's exponents over its own width (a partial rotary's).
    rotated = int((full_freq != 0).sum())
    own_width = torch.cat((1.0 / (1000000.0 ** (torch.arange(0, rotated, dtype=torch.float) / rotated)), torch.zeros(hd // 2 - rotated)))
    saved_cap = model.config.final_logit_softcapping
    model.config.final_logit_softcapping = None
    no_cap = rows(all_logits(model, PROMPTS[0]))
    model.config.final_logit_softcapping = saved_cap
    controls = far_enough({
        "v_not_normed": forwards_replaced(model, [l.self_attn.v_norm for l in layers if hasattr(l.self_attn, "v_norm")], lambda x: x),
        "global_rope_every_pair": values_replaced(model, [(full_freq, all_turn)]),
        "global_rope_own_width": values_replaced(model, [(full_freq, own_width)]),
        "no_layer_scalar": values_replaced(model, [(l.layer_scalar, torch.ones(1)) for l in layers]),
        "no_per_layer_inputs": patched(model, model.model, "project_per_layer_inputs", lambda e, p=None: torch.zeros_like(p)),
        "no_final_softcap": no_cap,
        "no_window": window_logits(model, 64),
        # Layer 4 (sliding, KV-shared) reading the first sliding layer's
        # caches instead of the last one before the shared layers.
        "shared_from_first_of_kind": with_attrs([(layers[1].self_attn, "store_full_length_kv", True),
                                                 (layers[3].self_attn, "store_full_length_kv", False)]),
    }, reference, "gemma4")
    write("gemma4", model, config, controls)


def gemma4_moe():
    """Gemma 4's MoE shape (26B-A4B): every layer's dense MLP beside routed
    GeGLU experts (`enable_moe_block`), each normed, summed; the router on
    the residual stream, RMS-normed without a weight, times `router.scale`
    and `hidden^-1/2`, softmax, the top 2 of 4 renormalized and times each
    expert's `per_expert_scale`; the experts as transformers stores them
    (`experts.gate_up_proj` [E, 2I, d], `experts.down_proj` [E, d, I]);
    global layers of their own head size with values as keys, no PLE, no
    KV sharing. The router's scales are drawn near 1. (Not renormalizing
    the top k is no control here: the norm after the experts takes a
    token's common factor out again, 6e-5.)"""
    from transformers import Gemma4TextConfig, Gemma4ForCausalLM

    kwargs = {**GEMMA4_KWARGS, "num_kv_shared_layers": 0, "use_double_wide_mlp": False, "hidden_size_per_layer_input": 0,
              "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 32,
              "num_global_key_value_heads": 2, "intermediate_size": 64}
    config = Gemma4TextConfig(**kwargs)
    torch.manual_seed(0)
    model = Gemma4ForCausalLM(config).eval()
    randomize(model, 77)
    g = torch.Generator().manual_seed(78)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.layer_scalar.copy_(0.6 + 0.8 * torch.rand(1, generator=g))
            layer.router.scale.copy_(1.0 + 0.2 * torch.randn(layer.router.scale.shape, generator=g))
            layer.router.per_expert_scale.copy_(0.5 + torch.rand(layer.router.per_expert_scale.shape, generator=g))
    reference = rows(all_logits(model, PROMPTS[0]))
    layers = model.model.layers

    controls = far_enough({
        "no_per_expert_scale": values_replaced(model, [(l.router.per_expert_scale, torch.ones_like(l.router.per_expert_scale)) for l in layers]),
        "no_router_scale": values_replaced(model, [(l.router.scale, torch.ones_like(l.router.scale)) for l in layers]),
        "no_dense_mlp": values_replaced(model, [(l.mlp.down_proj.weight, torch.zeros_like(l.mlp.down_proj.weight)) for l in layers]),
    }, reference, "gemma4_moe")
    write("gemma4_moe", model, config, controls)


def gemma4_multimodal():
    """Gemma 4's checkpoint shape (`model_type: gemma4`,
    Gemma4ForConditionalGeneration, as google/gemma-4-E2B-it): the gemma4
    fixture's weights as its language model (`model.language_model.*`)
    beside tiny vision and audio towers and their embedders
    (`model.vision_tower.*`, `model.embed_vision.*`, `model.audio_tower.*`,
    `model.embed_audio.*`), the text config under `text_config`, the output
    tied. Its logits on text alone are the text model's to the bit
    (asserted), so the tests use gemma4's reference.json."""
    from transformers import Gemma4Config, Gemma4ForCausalLM, Gemma4ForConditionalGeneration, Gemma4VisionConfig, Gemma4AudioConfig

    src = OUT / "gemma4"
    text = Gemma4ForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
    vision = Gemma4VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                num_key_value_heads=2, head_dim=16, patch_size=4, position_embedding_size=64)
    audio = Gemma4AudioConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, subsampling_conv_channels=[8, 4],
                              output_proj_dims=32)
    # The multimodal forward masks image tokens with the pad id (0 on the Hub).
    config = Gemma4Config(text_config={**text.config.to_dict(), "pad_token_id": 0}, vision_config=vision.to_dict(), audio_config=audio.to_dict(),
                          torch_dtype="float32", attn_implementation="eager")
    torch.manual_seed(0)
    model = Gemma4ForConditionalGeneration(config).eval()
    randomize(model, 75)
    model.model.language_model.load_state_dict(text.model.state_dict())
    d = OUT.parent / "gemma4_multimodal"
    d.mkdir(parents=True, exist_ok=True)
    config.to_json_file(d / "config.json")
    hub = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    for prefix in ("model.vision_tower.", "model.embed_vision.", "model.audio_tower.", "model.embed_audio."):
        assert any(k.startswith(prefix) for k in hub), prefix
    save_file(hub, d / "model.safetensors", metadata={"format": "pt"})
    back = Gemma4ForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    for p in PROMPTS:
        assert torch.equal(all_logits(back, p), all_logits(text, p)), "the multimodal checkpoint's text logits differ from the text model's"
    print("gemma4_multimodal written:", d, len(hub), "tensors")


def forwards_replaced(model, modules, fn):
    """PROMPTS[0]'s logits with each of `modules`' forward replaced by `fn`, then restored."""
    saved = [m.forward for m in modules]
    for m in modules:
        m.forward = fn
    try:
        return rows(all_logits(model, PROMPTS[0]))
    finally:
        for m, f in zip(modules, saved):
            m.forward = f


def values_replaced(model, pairs):
    """PROMPTS[0]'s logits with each tensor `t` of `pairs` holding `v`, then restored."""
    saved = [(t, t.detach().clone()) for t, _ in pairs]
    with torch.no_grad():
        for t, v in pairs:
            t.copy_(v)
    try:
        return rows(all_logits(model, PROMPTS[0]))
    finally:
        with torch.no_grad():
            for t, v in saved:
                t.copy_(v)


def patched(model, module, attr, fn, prompt=None):
    """Logits of `prompt` (PROMPTS[0]) with `module.attr` replaced by `fn`, then restored."""
    saved = getattr(module, attr)
    setattr(module, attr, fn)
    try:
        return rows(all_logits(model, PROMPTS[0] if prompt is None else prompt))
    finally:
        setattr(module, attr, saved)


def rope_gptj(q, k, cos, sin, unsqueeze_dim=1):
    """RoPE on adjacent pairs (x0, x1), (x2, x3), ... (GPT-J) with the
    frequencies of a NEOX model, whose pairs are (x_i, x_{i + d/2}): the
    mistake of reading an HF Q/K layout with the other rotation."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    half = cos.shape[-1] // 2
    cos = cos[..., :half].repeat_interleave(2, dim=-1)
    sin = sin[..., :half].repeat_interleave(2, dim=-1)

    def rotate(x):
        return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


def far_enough(controls, reference, family):
    """Keep only the controls at least 10x the 1e-4 bound (with a margin)
    from the reference, as the Rust checker asserts; print every gap."""
    kept = {}
    for name, c in controls.items():
        gap = max(abs(a - b) for ra, rb in zip(c, reference) for a, b in zip(ra, rb))
        print(f"{family}: control {name}: gap {gap:.4g}" + ("" if gap > 2e-3 else "  (too close: dropped)"))
        if gap > 2e-3:
            kept[name] = c
    return kept


def rotary_logits(model, inv_freq=None, scaling=None):
    """PROMPTS[0]'s logits with the rotary embedding's frequencies and/or
    its attention factor (cos/sin scale) swapped in, then put back."""
    rotary = model.model.rotary_emb
    saved = (rotary.inv_freq.clone(), rotary.attention_scaling)
    if inv_freq is not None:
        rotary.inv_freq.copy_(inv_freq)
    if scaling is not None:
        rotary.attention_scaling = scaling
    out = rows(all_logits(model, PROMPTS[0]))
    rotary.inv_freq.copy_(saved[0])
    rotary.attention_scaling = saved[1]
    return out


def window_logits(model, window):
    """PROMPTS[0]'s logits with the config's sliding window swapped, then put back."""
    saved = model.config.sliding_window
    model.config.sliding_window = window
    out = rows(all_logits(model, PROMPTS[0]))
    model.config.sliding_window = saved
    return out


def qwen2_kwargs(tied):
    # Shaped like Qwen2/Qwen2.5: GQA, biased q/k/v, unbiased o_proj, theta
    # 1e6, no sliding window; Qwen2.5-0.5B ties its output to the embedding.
    return dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        use_sliding_window=False, tie_word_embeddings=tied, bos_token_id=None, eos_token_id=None,
        pad_token_id=None, torch_dtype="float32", attn_implementation="eager",
    )


def qwen2_model(tied, seed):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**qwen2_kwargs(tied))
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    randomize(model, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # randomize() draws a bias like a weight row (std 1/sqrt(out),
            # ~0.15); the projections' outputs have std ~1: biases of std
            # ~1-1.4, as large as what they are added to.
            if name.endswith(".bias"):
                p.mul_(8.0)
    # Print the bias and projection-output scales (layer 0, PROMPTS[0]).
    attn = model.model.layers[0].self_attn
    with torch.no_grad():
        x = model.model.layers[0].input_layernorm(model.model.embed_tokens(torch.tensor([PROMPTS[0]])))
        for proj in ("q_proj", "k_proj", "v_proj"):
            lin = getattr(attn, proj)
            print(f"qwen2{'_tied' if tied else ''}: {proj} |bias| rms {lin.bias.pow(2).mean().sqrt():.3f}, "
                  f"|W x| rms {(x @ lin.weight.T).pow(2).mean().sqrt():.3f}")
    return model, config


def qwen2_no_qkv_bias(model):
    saved = {}
    with torch.no_grad():
        for i, l in enumerate(model.model.layers):
            for proj in ("q_proj", "k_proj", "v_proj"):
                b = getattr(l.self_attn, proj).bias
                saved[(i, proj)] = b.clone()
                b.zero_()
        out = rows(all_logits(model, PROMPTS[0]))
        for (i, proj), b in saved.items():
            getattr(model.model.layers[i].self_attn, proj).bias.copy_(b)
    return out


def qwen2():
    import transformers.models.qwen2.modeling_qwen2 as m

    model, config = qwen2_model(tied=False, seed=17)
    reference = rows(all_logits(model, PROMPTS[0]))
    controls = far_enough({
        # q/k/v biases dropped (read as a Llama without attention_bias).
        "no_qkv_bias": qwen2_no_qkv_bias(model),
        # GQA heads mapped h % n_kv (tiled) instead of h // group.
        "gqa_tiled": patched(model, m, "repeat_kv", lambda x, n_rep: x.repeat(1, n_rep, 1, 1)),
        # NEOX (half-split) rotation read as GPT-J (adjacent pairs).
        "neox_as_gptj": patched(model, m, "apply_rotary_pos_emb", rope_gptj),
    }, reference, "qwen2")
    write("qwen2", model, config, controls)


def qwen2_tied():
    model, config = qwen2_model(tied=True, seed=20)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "output not tied"
    reference = rows(all_logits(model, PROMPTS[0]))
    controls = far_enough({"no_qkv_bias": qwen2_no_qkv_bias(model)}, reference, "qwen2_tied")
    write("qwen2_tied", model, config, controls)


def qwen2_yarn():
    # Qwen2.5 with the YaRN scaling its model cards give for long contexts
    # (factor 4 over a 32768-token pretraining length). With head_dim 16 and
    # theta 1e6 the correction range is pairs 2..5: pairs 0-2 keep their
    # frequency, 5-7 turn 4 times slower, 3-4 are blended, and cos/sin are
    # scaled by 0.1 ln 4 + 1.
    import transformers.models.qwen2.modeling_qwen2 as m
    from transformers import Qwen2Config, Qwen2ForCausalLM

    kwargs = qwen2_kwargs(False)
    kwargs.update(max_position_embeddings=131072, rope_parameters={
        "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 32768})
    config = Qwen2Config(**kwargs)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    randomize(model, 23)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.mul_(8.0)
    rotary = model.model.rotary_emb
    assert rotary.rope_type == "yarn" and abs(rotary.attention_scaling - (0.1 * math.log(4.0) + 1.0)) < 1e-12
    reference = rows(all_logits(model, PROMPTS[0]))
    plain_kwargs = dict(kwargs, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    plain = m.Qwen2RotaryEmbedding(Qwen2Config(**plain_kwargs))
    controls = far_enough({
        # The scaling ignored (the unscaled frequencies, no attention factor).
        "no_yarn": rotary_logits(model, plain.inv_freq, 1.0),
        # YaRN's frequencies without its attention factor.
        "no_attention_factor": rotary_logits(model, scaling=1.0),
        # Every pair turned 4 times slower (linear scaling by the factor).
        "linear_factor": rotary_logits(model, plain.inv_freq / 4.0),
    }, reference, "qwen2_yarn")
    write("qwen2_yarn", model, config, controls)


def mistral():
    # Shaped like Mistral 7B v0.1 (GQA, theta 10000, untied, no biases) with
    # its sliding window shrunk to 5 tokens, so that the 13-token prompt's
    # later positions see only the window: each token attends to itself and
    # the 4 before it.
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=32768,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, sliding_window=5,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32", attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = MistralForCausalLM(config).eval()
    randomize(model, 29)
    reference = rows(all_logits(model, PROMPTS[0]))

    controls = far_enough({
        # The window ignored (full causal attention).
        "no_window": window_logits(model, None),
        # One token too many, and one too few.
        "window_6": window_logits(model, 6),
        "window_4": window_logits(model, 4),
    }, reference, "mistral")
    write("mistral", model, config, controls)


def lfm2():
    """LFM2's shape (Lfm2ForCausalLM; LFM2 350M-2.6B): 4 layers, conv,
    attention, conv, conv (`layer_types`), the short conv of 3 taps on
    `B * x` gated by `C`, attention with per-head q/k RMS norms, SwiGLU of
    HF's adjusted size (two thirds of `intermediate_size`, times the
    multiplier, up to a multiple of 32 here), `embedding_norm` last, tied."""
    from transformers import Lfm2Config, Lfm2ForCausalLM

    config = Lfm2Config(
        vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32768, norm_eps=1e-5, conv_L_cache=3,
        block_multiple_of=32, block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True,
        layer_types=["conv", "full_attention", "conv", "conv"], rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32", attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = Lfm2ForCausalLM(config).eval()
    randomize(model, 83)
    reference = rows(all_logits(model, PROMPTS[0]))
    layers = model.model.layers

    def ungated_conv(self, hidden_states, cache=None, attention_mask=None, **kwargs):
        # C's gate left out: out_proj(conv(B * x)).
        import transformers.models.lfm2.modeling_lfm2 as m
        BCx = self.in_proj(hidden_states).transpose(-1, -2)
        B, C, x = BCx.chunk(3, dim=-2)
        h = m.causal_conv1d_forward(self.conv, B * x, cache, self.layer_idx, **kwargs)
        return self.out_proj(h.transpose(-1, -2).contiguous())

    import types
    convs = [l.conv for l in layers if hasattr(l, "conv")]
    saved = [c.forward for c in convs]
    for c in convs:
        c.forward = types.MethodType(ungated_conv, c)
    try:
        ungated = rows(all_logits(model, PROMPTS[0]))
    finally:
        for c, f in zip(convs, saved):
            c.forward = f
    controls = far_enough({
        "conv_not_gated_by_c": ungated,
        "no_qk_norm": forwards_replaced(model, [l.self_attn.q_layernorm for l in layers if hasattr(l, "self_attn")] +
                                   [l.self_attn.k_layernorm for l in layers if hasattr(l, "self_attn")], lambda x: x),
        "no_embedding_norm": forwards_replaced(model, [model.model.embedding_norm], lambda x: x),
    }, reference, "lfm2")
    write("lfm2", model, config, controls)


def ministral3():
    """Ministral 3's shape (Ministral3ForCausalLM; 3B, 8B, 14B): Mistral's
    layers without a window, YaRN as its config gives it (factor 16 over
    a pretraining length shrunk to 8, so that the short prompts reach past
    it: `mscale` and `mscale_all_dim` both 1, making the attention factor
    1, not YaRN's default 1.28), and Llama 4's attention temperature
    `llama_4_scaling_beta` 0.1, which is exactly 1 before position 8 (graphc
    caps the context there: the reference is read up to it)."""
    from transformers import Ministral3Config, Ministral3ForCausalLM

    config = Ministral3Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=32768,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        rope_parameters={"type": "yarn", "rope_theta": 1000000.0, "factor": 16.0, "original_max_position_embeddings": 8,
                         "max_position_embeddings": 32768, "beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0,
                         "mscale": 1.0, "llama_4_scaling_beta": 0.1},
        torch_dtype="float32", attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = Ministral3ForCausalLM(config).eval()
    randomize(model, 81)
    rotary = model.model.rotary_emb
    assert rotary.attention_scaling == 1.0, rotary.attention_scaling
    reference = rows(all_logits(model, PROMPTS[0]))

    def no_temperature(model):
        saved = model.config.rope_parameters["llama_4_scaling_beta"]
        model.config.rope_parameters["llama_4_scaling_beta"] = 0.0
        out = rows(all_logits(model, PROMPTS[0]))
        model.config.rope_parameters["llama_4_scaling_beta"] = saved
        before = max(abs(a - b) for ra, rb in zip(out[:8], reference[:8]) for a, b in zip(ra, rb))
        assert before == 0.0, before
        return out

    hd = config.head_dim
    plain = 1.0 / (1000000.0 ** (torch.arange(0, hd, 2, dtype=torch.float) / hd))
    controls = far_enough({
        # YaRN's default attention factor (the mscale pair ignored).
        "default_attention_factor": rotary_logits(model, scaling=0.1 * math.log(16.0) + 1.0),
        # The frequencies unscaled.
        "no_yarn": rotary_logits(model, inv_freq=plain),
        # No attention temperature: equal before position 8, apart after.
        "no_temperature": no_temperature(model),
    }, reference, "ministral3")
    write("ministral3", model, config, controls)


def llama_yarn():
    # A Llama with YaRN (factor 4 over 32768 positions, theta 10000): with
    # head_dim 16 the correction range is pairs 4..8, so pairs 0-4 keep their
    # frequency and 5-7 are blended toward 4 times slower.
    from transformers import LlamaConfig, LlamaForCausalLM

    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=131072,
        rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32768},
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32", attn_implementation="eager",
    )
    config = LlamaConfig(**kwargs)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    randomize(model, 37)
    rotary = model.model.rotary_emb
    assert rotary.rope_type == "yarn"
    reference = rows(all_logits(model, PROMPTS[0]))
    no_attention_factor = rotary_logits(model, scaling=1.0)
    write("llama_yarn", model, config, far_enough({"no_attention_factor": no_attention_factor}, reference, "llama_yarn"))


LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
LONG_LEN = 1200
LONG_POSITIONS = [0, 255, 511, 1023, 1024, 1100, 1150, 1199]


def llama3():
    from transformers import LlamaConfig, LlamaForCausalLM
    import transformers.models.llama.modeling_llama as m

    # Shaped like Llama 3.1/3.2: GQA, theta 500000, "llama3" RoPE scaling
    # (factor 32 as 3.2's), 128k context, no biases, untied output. With
    # head_dim 16 the 8 frequencies' wavelengths are 6.3, 33, 167, 863 (kept),
    # 4443 (smoothed: between 8192/4 and 8192), 22972, 118747, 613880 (/ 32).
    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_parameters=dict(LLAMA3_ROPE), attention_bias=False, mlp_bias=False,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32", attn_implementation="eager",
    )
    config = LlamaConfig(**kwargs)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    randomize(model, 15)
    rot = model.model.rotary_emb
    print("llama3: HF inv_freq", rot.inv_freq.tolist())

    plain = LlamaForCausalLM(LlamaConfig(**{**kwargs, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})).eval()
    plain.load_state_dict(model.state_dict())
    assert not torch.equal(plain.model.rotary_emb.inv_freq, rot.inv_freq)

    reference = rows(all_logits(model, PROMPTS[0]))
    controls = far_enough({
        # The rope_scaling ignored: plain theta-500000 frequencies.
        "no_rope_scaling": rows(all_logits(plain, PROMPTS[0])),
        "gqa_tiled": patched(model, m, "repeat_kv", lambda x, n_rep: x.repeat(1, n_rep, 1, 1)),
        "neox_as_gptj": patched(model, m, "apply_rotary_pos_emb", rope_gptj),
    }, reference, "llama3")
    write("llama3", model, config, controls)

    # The long test: one forward over 1200 tokens, logits at positions
    # before and past 1024; 8 greedy tokens after it; the same positions
    # without the scaling (the control).
    g = torch.Generator().manual_seed(16)
    long_prompt = torch.randint(0, 256, (LONG_LEN,), generator=g).tolist()
    full = all_logits(model, long_prompt)
    long_logits = rows(full[LONG_POSITIONS])
    ctrl = all_logits(plain, long_prompt)[LONG_POSITIONS]
    for pos, a, b in zip(LONG_POSITIONS, full[LONG_POSITIONS], ctrl):
        print(f"llama3: long position {pos}: no_rope_scaling gap {float((a - b).abs().max()):.4g}")
    gap_past_1024 = min(float((a - b).abs().max()) for pos, a, b in zip(LONG_POSITIONS, full[LONG_POSITIONS], ctrl) if pos >= 1024)
    assert gap_past_1024 > 10 * 1e-4, f"no_rope_scaling only {gap_past_1024} off past 1024"
    long_greedy = greedy(model, long_prompt, steps=8)
    assert long_greedy[0] == int(full[-1].argmax()), "generate's first token is not the argmax"
    d = OUT / "llama3"
    ref = json.loads((d / "reference.json").read_text())
    ref["long_prompt"] = long_prompt
    ref["long_positions"] = LONG_POSITIONS
    ref["long_logits"] = long_logits
    ref["long_greedy"] = long_greedy
    ref["long_controls"] = {"no_rope_scaling": rows(ctrl)}
    (d / "reference.json").write_text(json.dumps(ref))

def llama3_sharded():
    """The llama3 fixture saved by transformers' own `save_pretrained` in
    shards (`model-0000k-of-0000n.safetensors` and
    `model.safetensors.index.json`), as the Hub's larger checkpoints ship,
    into tests/fixtures/sharded/llama3/. Loaded back by transformers, its
    logits are the single file's to the bit and within 1e-5 of the llama3
    fixture's reference (asserted; a model loaded from a file computes its
    RoPE frequencies anew, 1.6e-6 from the one the reference was made
    with), so the tests read that reference.json."""
    from transformers import LlamaForCausalLM

    src = OUT / "llama3"
    d = OUT.parent / "sharded" / "llama3"
    model = LlamaForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    model.save_pretrained(d, max_shard_size="200KB")
    shards = sorted(p.name for p in d.glob("model-*.safetensors"))
    assert len(shards) >= 3, shards
    back = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    single = LlamaForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
    ref = json.loads((src / "reference.json").read_text())
    for p, want in zip(PROMPTS, ref["logits"]):
        got = all_logits(back, p)
        assert torch.equal(got, all_logits(single, p)), "the sharded checkpoint's logits differ from the single file's"
        assert float((got - torch.tensor(want)).abs().max()) < 1e-5, "the sharded checkpoint is far from the fixture's reference"
    print("llama3_sharded written:", d, shards)


def mxfp4_round(w, axis):
    """`w` rounded to MXFP4 values (blocks of 32 along `axis`, gguf-py's
    quantizer), so a GGUF of these weights in MXFP4 holds them exactly."""
    import numpy as np
    from gguf.quants import MXFP4
    a = w.detach().numpy().astype(np.float32)
    moved = np.moveaxis(a, axis, -1)
    blocks = moved.reshape(-1, 32)
    q = MXFP4.quantize_blocks(blocks)
    back = MXFP4.dequantize_blocks(q).reshape(moved.shape)
    requant = MXFP4.dequantize_blocks(MXFP4.quantize_blocks(back.reshape(-1, 32))).reshape(moved.shape)
    assert (requant == back).all(), "MXFP4 values must survive a second quantization"
    return torch.from_numpy(np.ascontiguousarray(np.moveaxis(back, -1, axis)))


def gpt_oss():
    # gpt-oss (20b/120b) in miniature: attention sinks, alternating sliding
    # (window 5) and full layers, q/k/v/o biases, YaRN (factor 32 over 4096,
    # beta 32/1, truncate false: gpt-oss's own values), a router with a
    # bias whose softmax runs over the top-k logits, and experts with
    # biases and the clamped "swiglu" (limit 7, alpha 1.702: the values
    # llama.cpp hard-codes, GGUF having no key for them; the experts'
    # weights are drawn large enough that the clamp engages). Their weights are MXFP4
    # values (as the released checkpoint's), so the GGUF copy in MXFP4 is exact.
    import transformers.models.gpt_oss.modeling_gpt_oss as m
    from transformers import GptOssConfig, GptOssForCausalLM

    kwargs = dict(
        vocab_size=256, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
        num_experts_per_tok=2, sliding_window=5, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": False},
        tie_word_embeddings=False, torch_dtype="float32", attn_implementation="eager",
    )
    config = GptOssConfig(**kwargs)
    assert (config.swiglu_limit, config.swiglu_alpha) == (7.0, 1.702)
    assert config.layer_types == ["sliding_attention", "full_attention"]
    torch.manual_seed(0)
    model = GptOssForCausalLM(config).eval()
    randomize(model, 31)
    g = torch.Generator().manual_seed(32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                # Sinks of the scores' size (the real ones are ~0..5).
                p.copy_(torch.tensor([0.5, 2.0, -1.0, 3.0]) + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("router.weight"):
                p.mul_(4.0)  # a clear-cut top-2
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith("experts.gate_up_proj"):
                p.mul_(8.0)
                p.copy_(mxfp4_round(p, 1))  # [E, d, 2I]: blocks along d
            elif name.endswith("experts.down_proj"):
                p.copy_(mxfp4_round(p, 1))  # [E, I, d]: blocks along I
    reference = rows(all_logits(model, PROMPTS[0]))

    def variant(**changes):
        v = GptOssForCausalLM(GptOssConfig(**{**kwargs, **changes})).eval()
        v.load_state_dict(model.state_dict())
        return rows(all_logits(v, PROMPTS[0]))

    experts = [layer.mlp.experts for layer in model.model.layers]
    routers = [layer.mlp.router for layer in model.model.layers]

    def with_all(modules, attr, fn):
        saved = [getattr(x, attr) for x in modules]
        for x in modules:
            setattr(x, attr, fn.__get__(x))
        try:
            return rows(all_logits(model, PROMPTS[0]))
        finally:
            for x, v in zip(modules, saved):
                setattr(x, attr, v)

    def halves_gate(self, gate_up):
        # The fused projection read as [gate; up] halves, not interleaved.
        n = gate_up.shape[-1] // 2
        gate, up = gate_up[..., :n].clamp(max=self.limit), gate_up[..., n:].clamp(-self.limit, self.limit)
        return (up + 1) * (gate * torch.sigmoid(gate * self.alpha))

    def no_plus_one(self, gate_up):
        gate, up = gate_up[..., ::2].clamp(max=self.limit), gate_up[..., 1::2].clamp(-self.limit, self.limit)
        return up * (gate * torch.sigmoid(gate * self.alpha))

    def no_clamp(self, gate_up):
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        return (up + 1) * (gate * torch.sigmoid(gate * self.alpha))

    def softmax_then_topk(self, hidden_states):
        # Router probabilities over all experts, the top-k kept unrenormalized.
        logits = torch.nn.functional.linear(hidden_states, self.weight, self.bias)
        probs = torch.softmax(logits, dim=-1)
        top, idx = torch.topk(probs, self.top_k, dim=-1)
        return logits, top, idx

    saved_sinks = [layer.self_attn.sinks.detach().clone() for layer in model.model.layers]
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.fill_(-1e9)
    no_sinks = rows(all_logits(model, PROMPTS[0]))
    with torch.no_grad():
        for layer, s in zip(model.model.layers, saved_sinks):
            layer.self_attn.sinks.copy_(s)
    assert rows(all_logits(model, PROMPTS[0])) == reference
    rotary = model.model.rotary_emb
    truncated = m.GptOssRotaryEmbedding(GptOssConfig(**dict(kwargs, rope_parameters={**kwargs["rope_parameters"], "truncate": True})))
    plain = m.GptOssRotaryEmbedding(GptOssConfig(**dict(kwargs, rope_parameters={"rope_type": "default", "rope_theta": 150000.0})))
    controls = far_enough({
        "no_sinks": no_sinks,
        "no_sliding_window": variant(layer_types=["full_attention", "full_attention"]),
        "sliding_on_odd_layers": variant(layer_types=["full_attention", "sliding_attention"]),
        "gate_up_as_halves": with_all(experts, "_apply_gate", halves_gate),
        "glu_without_plus_one": with_all(experts, "_apply_gate", no_plus_one),
        "no_clamp": with_all(experts, "_apply_gate", no_clamp),
        "router_softmax_before_top_k": with_all(routers, "forward", softmax_then_topk),
        "yarn_truncated": rotary_logits(model, truncated.inv_freq),
        "no_yarn": rotary_logits(model, plain.inv_freq, 1.0),
    }, reference, "gpt_oss")
    write("gpt_oss", model, config, controls, layout=lambda state: state)


if __name__ == "__main__":
    import sys

    # `make_family_fixtures.py phi3_longrope ...` writes only those.
    only = sys.argv[1:]
    if only:
        for name in only:
            globals()[name]()
        sys.exit(0)
    phi3_longrope()
    qwen3_moe()
    gemma2()
    qwen3()
    gemma()
    phi2()
    phi3()
    qwen2()
    qwen2_tied()
    llama3()
