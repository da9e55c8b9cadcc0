#!/usr/bin/env python3
"""Generate tests/fixtures/quant_blocks.json: random blocks of every GGUF
block type graphc reads, decoded by the `gguf` Python package (llama.cpp's
own reference dequantizer in numpy), so graphc's dequantization is checked
against an implementation that is not ours; and the package's table of
every GGML type's block size (`ggml_types`), which graphc's GGUF reader is
checked against. Run by hand:

    python3 -m venv /tmp/qv && /tmp/qv/bin/pip install gguf==0.19.0 (or the version recorded in the fixture) numpy
    /tmp/qv/bin/python tools/make_quant_fixtures.py > tests/fixtures/quant_blocks.json
"""
import json, sys
import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

rng = np.random.default_rng(20261202)
# New types go at the end: the rng is drawn type by type in this order, so
# appending keeps every earlier type's blocks the same bytes.
TYPES = {"q4_0": T.Q4_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0, "q8_0": T.Q8_0,
         "q4_k": T.Q4_K, "q5_k": T.Q5_K, "q6_k": T.Q6_K,
         "q5_1": T.Q5_1, "q2_k": T.Q2_K, "q3_k": T.Q3_K, "iq4_nl": T.IQ4_NL, "iq4_xs": T.IQ4_XS,
         "iq2_xxs": T.IQ2_XXS, "iq2_xs": T.IQ2_XS, "iq2_s": T.IQ2_S, "iq3_xxs": T.IQ3_XXS, "iq3_s": T.IQ3_S,
         "iq1_s": T.IQ1_S, "iq1_m": T.IQ1_M, "mxfp4": T.MXFP4}
BLOCK = {"q4_0": (32, 18), "q4_1": (32, 20), "q5_0": (32, 22), "q8_0": (32, 34),
         "q4_k": (256, 144), "q5_k": (256, 176), "q6_k": (256, 210),
         "q5_1": (32, 24), "q2_k": (256, 84), "q3_k": (256, 110), "iq4_nl": (32, 18), "iq4_xs": (256, 136),
         "iq2_xxs": (256, 66), "iq2_xs": (256, 74), "iq2_s": (256, 82), "iq3_xxs": (256, 98), "iq3_s": (256, 110),
         "iq1_s": (256, 50), "iq1_m": (256, 56), "mxfp4": (32, 17)}
# Byte offsets of the f16 scales in each block, set to finite values so no
# block decodes to inf/nan (random bits would).
F16_AT = {"q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q8_0": [0],
          "q4_k": [0, 2], "q5_k": [0, 2], "q6_k": [208],
          "q5_1": [0, 2], "q2_k": [80, 82], "q3_k": [108], "iq4_nl": [0], "iq4_xs": [0],
          "iq2_xxs": [0], "iq2_xs": [0], "iq2_s": [0], "iq3_xxs": [0], "iq3_s": [0],
          "iq1_s": [0], "iq1_m": [], "mxfp4": []}

out = {"generator": "tools/make_quant_fixtures.py", "gguf_version": __import__("importlib.metadata").metadata.version("gguf"),
       "numpy_version": np.__version__, "types": {}}
for name, qt in TYPES.items():
    n_blocks = 4
    elems, bb = BLOCK[name]
    raw = rng.integers(0, 256, size=(n_blocks, bb), dtype=np.uint8)
    for b in range(n_blocks):
        for off in F16_AT[name]:
            v = np.float16(rng.uniform(-0.05, 0.05) if b else 0.0123)
            raw[b, off:off + 2] = np.frombuffer(v.tobytes(), dtype=np.uint8)
    if name == "iq1_m":
        # Its f16 scale is spread over the top nibbles of its four scale words.
        for b in range(n_blocks):
            bits = int(np.float16(rng.uniform(-0.05, 0.05) if b else 0.0123).view(np.uint16))
            for k in range(4):
                raw[b, 49 + 2 * k] = (raw[b, 49 + 2 * k] & 0x0F) | (((bits >> (4 * k)) & 0xF) << 4)
    if name == "mxfp4":
        # Its scale is an E8M0 byte (2^(e-127)): near 127, as real weights'
        # are, and the subnormal edge (e < 2) in the last block.
        raw[:, 0] = rng.integers(118, 132, size=n_blocks)
        raw[n_blocks - 1, 0] = 1
    vals = dequantize(raw.reshape(-1), qt).astype(np.float32).reshape(-1)
    assert vals.size == n_blocks * elems and np.isfinite(vals).all()
    assert BLOCK[name] == gguf.GGML_QUANT_SIZES[qt]
    out["types"][name] = {"bytes_hex": raw.tobytes().hex(), "f32_bits": [int(x) for x in vals.view(np.uint32)]}
# The package's table of every GGML type: (name, elements, bytes) per block,
# checked against graphc's GGUF reader.
out["ggml_types"] = {str(int(t)): [t.name.lower(), *gguf.GGML_QUANT_SIZES[t]] for t in gguf.GGMLQuantizationType}
json.dump(out, sys.stdout)
