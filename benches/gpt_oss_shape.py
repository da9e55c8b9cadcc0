#!/usr/bin/env python3
"""A GGUF shaped exactly like gpt-oss-20b (llama.cpp's layout: arch
`gpt-oss`, 24 layers, hidden 2880, 64 query heads and 8 kv heads of 64,
sinks, 32 experts of 2880 in MXFP4 with 4 a token, vocabulary o200k_harmony
of 201,088 tokens), its weights made up: random MXFP4 nibbles under E8M0
scales near 2^-6, q8_0 attention, embedding and output matrices (as the
released file's), f32 norms, biases, sinks and router. For speed
measurements only: the same tensors, block types and routing work as the
real file (each token still picks 4 experts a layer), none of its answers.

    python benches/gpt_oss_shape.py OUT.gguf [--layers 24]

Needs `gguf` and `numpy`, and the o200k rank file `tools/setup.sh` fetches
(its vocabulary, so llama.cpp can tokenize the bench prompt). About 12 GB
at 24 layers.
"""
import argparse
import base64
import os

import gguf
import numpy as np

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, EXPERTS, USED, FFN, WINDOW = 2880, 64, 8, 64, 32, 4, 2880, 128


def byte_char_table():
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def vocabulary(path):
    """o200k_harmony as llama.cpp's converter writes gpt-oss's: ranks, then harmony's specials."""
    ranks = [base64.b64decode(line.split()[0]) for line in open(path, "rb").read().decode().splitlines()]
    rank_of = {b: i for i, b in enumerate(ranks)}
    chars = byte_char_table()
    text = lambda b: "".join(chars[x] for x in b)
    merges = []
    for b in ranks:
        local = sorted((rank_of[b[:i]], rank_of[b[i:]]) for i in range(1, len(b)) if b[:i] in rank_of and b[i:] in rank_of)
        merges.extend(f"{text(ranks[l])} {text(ranks[r])}" for l, r in local)
    names = {199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>", 200003: "<|constrain|>",
             200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>", 200012: "<|call|>"}
    tokens = [text(b) for b in ranks] + [names.get(i, f"<|reserved_{i}|>") for i in range(len(ranks), 201088)]
    types = [1] * len(ranks) + [3] * (201088 - len(ranks))
    return tokens, types, merges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--o200k", default=os.path.join(os.environ.get("GRAPHC_CACHE", os.path.expanduser("~/.cache/graphc")),
                                                     "tokenizers/bpe-openai-0.1.4/bpe_openai/data/o200k_base.tiktoken"))
    a = ap.parse_args()
    rng = np.random.default_rng(20261207)
    tokens, types, merges = vocabulary(a.o200k)
    w = gguf.GGUFWriter(a.out, "gpt-oss")
    w.add_name("gpt-oss-20b shape, made-up weights (benches/gpt_oss_shape.py)")
    w.add_context_length(131072)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(150000.0)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(USED)
    w.add_sliding_window(WINDOW)
    w.add_expert_feed_forward_length(FFN)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(199998)
    w.add_eos_token_id(200002)
    w.add_add_bos_token(False)

    Q8, MX = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.MXFP4
    f16_scale = np.frombuffer(np.float16(0.002).tobytes(), dtype=np.uint8)

    def q8_0(rows, cols):
        b = rng.integers(0, 256, size=(rows, cols // 32, 34), dtype=np.uint8)
        b[:, :, 0:2] = f16_scale
        return b.reshape(rows, cols // 32 * 34)

    def mxfp4(experts, rows, cols):
        b = rng.integers(0, 256, size=(experts, rows, cols // 32, 17), dtype=np.uint8)
        b[..., 0] = rng.integers(120, 123, size=b.shape[:-1], dtype=np.uint8)
        return b.reshape(experts, rows, cols // 32 * 17)

    f32 = lambda *shape: (rng.standard_normal(shape) * 0.05).astype(np.float32)
    ones = lambda n: np.ones(n, dtype=np.float32)
    # (name, maker, quantization) in file order; makers run as each is written.
    plan = [("token_embd.weight", lambda: q8_0(201088, HIDDEN), Q8)]
    for l in range(a.layers):
        p = f"blk.{l}."
        plan += [
            (p + "attn_norm.weight", lambda: ones(HIDDEN), None),
            (p + "attn_q.weight", lambda: q8_0(HEADS * HEAD_DIM, HIDDEN), Q8),
            (p + "attn_q.bias", lambda: f32(HEADS * HEAD_DIM), None),
            (p + "attn_k.weight", lambda: q8_0(KV_HEADS * HEAD_DIM, HIDDEN), Q8),
            (p + "attn_k.bias", lambda: f32(KV_HEADS * HEAD_DIM), None),
            (p + "attn_v.weight", lambda: q8_0(KV_HEADS * HEAD_DIM, HIDDEN), Q8),
            (p + "attn_v.bias", lambda: f32(KV_HEADS * HEAD_DIM), None),
            (p + "attn_output.weight", lambda: q8_0(HIDDEN, HEADS * HEAD_DIM), Q8),
            (p + "attn_output.bias", lambda: f32(HIDDEN), None),
            (p + "attn_sinks.weight", lambda: f32(HEADS) + 1.0, None),
            (p + "post_attention_norm.weight", lambda: ones(HIDDEN), None),
            (p + "ffn_gate_inp.weight", lambda: f32(EXPERTS, HIDDEN) * 20, None),
            (p + "ffn_gate_inp.bias", lambda: f32(EXPERTS), None),
            (p + "ffn_gate_exps.weight", lambda: mxfp4(EXPERTS, FFN, HIDDEN), MX),
            (p + "ffn_gate_exps.bias", lambda: f32(EXPERTS, FFN), None),
            (p + "ffn_up_exps.weight", lambda: mxfp4(EXPERTS, FFN, HIDDEN), MX),
            (p + "ffn_up_exps.bias", lambda: f32(EXPERTS, FFN), None),
            (p + "ffn_down_exps.weight", lambda: mxfp4(EXPERTS, HIDDEN, FFN), MX),
            (p + "ffn_down_exps.bias", lambda: f32(EXPERTS, HIDDEN), None),
        ]
    plan += [("output_norm.weight", lambda: ones(HIDDEN), None), ("output.weight", lambda: q8_0(201088, HIDDEN), Q8)]

    # Shapes first (the header), then each tensor's bytes as it is made.
    shapes = {
        "token_embd.weight": (201088, HIDDEN), "output.weight": (201088, HIDDEN),
    }
    infos = []
    for name, make, qt in plan:
        part = name.split(".")[-2] if name.startswith("blk.") else name
        if name in shapes:
            shape = shapes[name]
        elif part in ("attn_q",) and name.endswith("weight"):
            shape = (HEADS * HEAD_DIM, HIDDEN)
        elif part in ("attn_k", "attn_v") and name.endswith("weight"):
            shape = (KV_HEADS * HEAD_DIM, HIDDEN)
        elif part == "attn_output" and name.endswith("weight"):
            shape = (HIDDEN, HEADS * HEAD_DIM)
        elif part in ("ffn_gate_exps", "ffn_up_exps") and name.endswith("weight"):
            shape = (EXPERTS, FFN, HIDDEN)
        elif part == "ffn_down_exps" and name.endswith("weight"):
            shape = (EXPERTS, HIDDEN, FFN)
        else:
            shape = None
        infos.append((name, make, qt, shape))
    for name, make, qt, shape in infos:
        if qt is None:
            t = make()
            w.add_tensor_info(name, t.shape, t.dtype, t.nbytes)
        else:
            be, bb = gguf.GGML_QUANT_SIZES[qt]
            byte_shape = (*shape[:-1], shape[-1] // be * bb)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, make, qt, shape in infos:
        w.write_tensor_data(make())
    w.close()
    print(f"wrote {a.out}: {a.layers} layers, {os.path.getsize(a.out) / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
