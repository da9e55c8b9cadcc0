#!/usr/bin/env python3
"""A checkpoint of a real model's exact shape with made-up weights, for
machines the real one cannot reach (the device machine takes 64 MiB; the
SmolLM2 and Gemma 3 files are 98 and 253 MB).

  synth-gguf.py header MODEL.gguf OUT.header   # the bytes before the tensor data
  synth-gguf.py fill OUT.header OUT.gguf        # header + made-up tensor data

The header keeps every metadata key (the tokenizer too) and tensor record,
so graphc lowers, plans and runs the synthetic file exactly as the real one:
same graph, same kernels, same bytes moved. Only the values differ: 1-D f32
tensors (the norms) are 1, quantized blocks have random quants and a fixed
scale per type chosen so dequantized weights are ~0.01-0.1 (activations stay
finite through every layer), seeded so two runs write the same file. Speed
measured on it is the real model's; parity on it is GPU against CPU on the
same file, not against the reference (which needs the real weights).
Standard library only (the device machine has no network for packages).
"""
import os
import random
import struct
import sys

# ggml type -> (elements per block, bytes per block, [(offset, f16 value), ...])
TYPES = {
    0: (1, 4, []),  # f32
    1: (1, 2, []),  # f16
    2: (32, 18, [(0, 0.004)]),  # q4_0: d
    3: (32, 20, [(0, 0.004), (2, -0.03)]),  # q4_1: d, m
    6: (32, 22, [(0, 0.002)]),  # q5_0: d
    7: (32, 24, [(0, 0.002), (2, -0.03)]),  # q5_1: d, m
    8: (32, 34, [(0, 0.0003)]),  # q8_0: d
    12: (256, 144, [(0, 0.00014), (2, 0.00014)]),  # q4_k: d, dmin
    13: (256, 176, [(0, 0.00007), (2, 0.00014)]),  # q5_k: d, dmin
    14: (256, 210, [(208, 0.0001)]),  # q6_k: d (last)
}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class Reader:
    def __init__(self, data, what):
        self.data, self.pos, self.what = data, 0, what

    def take(self, n):
        if self.pos + n > len(self.data):
            sys.exit(f"synth-gguf: {self.what}: the header ends early at byte {self.pos}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return self.take(self.u64())

    def value(self, t):
        if t in SCALAR:
            return self.take(SCALAR[t])
        if t == 8:
            return self.string()
        if t == 9:
            elem, n = self.u32(), self.u64()
            for _ in range(n):
                self.value(elem)
            return None
        sys.exit(f"synth-gguf: {self.what}: unknown metadata type {t} at byte {self.pos}")


def parse(data, what):
    """(tensors [(name, dims, type, offset)], data start)"""
    r = Reader(data, what)
    if r.take(4) != b"GGUF":
        sys.exit(f"synth-gguf: {what}: not a GGUF file")
    version = r.u32()
    if version not in (2, 3):
        sys.exit(f"synth-gguf: {what}: GGUF version {version} (2 or 3 supported)")
    n_tensors, n_kv = r.u64(), r.u64()
    alignment = 32
    for _ in range(n_kv):
        key = r.string()
        t = r.u32()
        v = r.value(t)
        if key == b"general.alignment":
            alignment = struct.unpack("<I", v)[0]
    tensors = []
    for _ in range(n_tensors):
        name = r.string().decode()
        dims = [r.u64() for _ in range(r.u32())]
        ty, offset = r.u32(), r.u64()
        tensors.append((name, dims, ty, offset))
    start = (r.pos + alignment - 1) // alignment * alignment
    return tensors, start


def tensor_bytes(name, dims, ty):
    if ty not in TYPES:
        sys.exit(f"synth-gguf: tensor {name}: ggml type {ty} is not one this script fills")
    per_block, block_bytes, _ = TYPES[ty]
    n = 1
    for d in dims:
        n *= d
    if n % per_block:
        sys.exit(f"synth-gguf: tensor {name}: {n} elements is not a whole number of {per_block}-element blocks")
    return n // per_block * block_bytes


def fill(name, dims, ty, rng):
    size = tensor_bytes(name, dims, ty)
    per_block, block_bytes, scales = TYPES[ty]
    if ty in (0, 1):
        if len(dims) == 1:
            one = struct.pack("<f", 1.0) if ty == 0 else struct.pack("<e", 1.0)
            return one * (size // len(one))
        fmt = "<f" if ty == 0 else "<e"
        return b"".join(struct.pack(fmt, rng.uniform(-0.03, 0.03)) for _ in range(size // struct.calcsize(fmt)))
    data = bytearray(rng.randbytes(size))
    blocks = size // block_bytes
    for offset, value in scales:
        bits = struct.pack("<e", value)
        data[offset::block_bytes] = bits[0:1] * blocks
        data[offset + 1::block_bytes] = bits[1:2] * blocks
    return bytes(data)


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("header", "fill"):
        sys.exit(__doc__)
    mode, src, dst = sys.argv[1:]
    if mode == "header":
        with open(src, "rb") as f:
            head = f.read(64 << 20)
        _, start = parse(head, src)
        with open(dst, "wb") as f:
            f.write(head[:start])
        print(f"{dst}: {start} header bytes of {src}")
        return
    head = open(src, "rb").read()
    tensors, start = parse(head, src)
    if start != len(head):
        sys.exit(f"synth-gguf: {src}: {len(head)} bytes, but its tensor data would start at {start}")
    rng = random.Random(20261204)
    with open(dst + ".part", "wb") as f:
        f.write(head)
        at = 0
        for name, dims, ty, offset in sorted(tensors, key=lambda t: t[3]):
            if offset < at:
                sys.exit(f"synth-gguf: tensor {name}: offset {offset} overlaps the tensor before it")
            f.write(b"\0" * (offset - at))
            data = fill(name, dims, ty, rng)
            f.write(data)
            at = offset + len(data)
    os.replace(dst + ".part", dst)
    print(f"{dst}: {len(tensors)} tensors, {start + at} bytes")


if __name__ == "__main__":
    main()
