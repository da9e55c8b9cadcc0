#!/usr/bin/env python3
"""Generate tests/fixtures/quant_blocks.json: random blocks of every GGUF
block type graphc reads, decoded by the `gguf` Python package (llama.cpp's
own reference dequantizer in numpy), so graphc's dequantization is checked
against an implementation that is not ours. Run by hand:

    python3 -m venv /tmp/qv && /tmp/qv/bin/pip install gguf==0.19.0 (or the version recorded in the fixture) numpy
    /tmp/qv/bin/python tools/make_quant_fixtures.py > tests/fixtures/quant_blocks.json
"""
import json, sys
import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

rng = np.random.default_rng(20261202)
TYPES = {"q4_0": T.Q4_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0, "q8_0": T.Q8_0,
         "q4_k": T.Q4_K, "q5_k": T.Q5_K, "q6_k": T.Q6_K}
BLOCK = {"q4_0": (32, 18), "q4_1": (32, 20), "q5_0": (32, 22), "q8_0": (32, 34),
         "q4_k": (256, 144), "q5_k": (256, 176), "q6_k": (256, 210)}
# Byte offsets of the f16 scales in each block, set to finite values so no
# block decodes to inf/nan (random bits would).
F16_AT = {"q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q8_0": [0],
          "q4_k": [0, 2], "q5_k": [0, 2], "q6_k": [208]}

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
    vals = dequantize(raw.reshape(-1), qt).astype(np.float32).reshape(-1)
    assert vals.size == n_blocks * elems and np.isfinite(vals).all()
    out["types"][name] = {"bytes_hex": raw.tobytes().hex(), "f32_bits": [int(x) for x in vals.view(np.uint32)]}
json.dump(out, sys.stdout)
