#!/usr/bin/env python3
"""Side-by-side speed of graphc and llama.cpp on the same GGUF, prompt and
thread count, measured in one run, printed as one table with ratios per
checkpoint.

    bash benches/vs-llama-cpp.sh [MODEL.gguf ...] [--threads 2]

With no MODEL, every checkpoint tools/setup.sh fetches (SmolLM2-135M Q4_1,
Gemma 3 270M Q4_K_M, Qwen2.5-Coder-0.5B-Instruct Q4_K_M), one after another.

Measured for each engine:
- prefill tok/s: the first 512 tokens of benches/prompt.txt, from an empty
  cache (best of --repeats runs);
- decode tok/s at context 128 and 1024: the median time of one decode step
  (over --steps steps; best of --repeats runs) with that many tokens
  already in the cache (llama.cpp: after evaluating
  that many prompt tokens; graphc: `graphc bench`, which fills the cache
  without a prefill; a step's arithmetic is the same).

graphc runs its default, exact path (f32 activations and accumulation);
llama.cpp runs its default, which quantizes activations to 8 bits inside its
quantized matmuls (DESIGN.md, "Precision contract").

Decode against the memory-bandwidth limit: a decode step reads every weight
tensor once (the token embedding only one row, unless it is also the output
matrix; a MoE layer only its routed experts, top-k of E), so those bytes (from the GGUF's tensor table) times the step rate
are the step's effective weight bandwidth, printed beside the machine's,
measured in the same run (numpy, --threads threads each streaming its own
256 MiB buffer: a read of every byte, and a copy; best of 5).
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


CHECKPOINTS = [
    ("SmolLM2-135M-Instruct Q4_1", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("Gemma 3 270M Q4_K_M", "gemma-3-270m-q4_k_m.gguf"),
    ("Qwen2.5-Coder-0.5B-Instruct Q4_K_M", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
]


def gguf_tensor_bytes(path):
    """({name: bytes in the file} for every tensor of a GGUF (from the
    tensor table's offsets: each tensor runs to the next one's offset, the
    last to the end of the file; alignment padding included, < 32 bytes),
    {key: value} of its scalar metadata)."""
    with open(path, "rb") as f:
        def rd(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

        def string():
            return f.read(rd("Q")).decode("utf-8", "replace")

        # GGUF value types: 8 string, 9 array, the rest scalars.
        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

        def value(t):
            if t == 8:
                return string()
            if t == 9:
                et, n = rd("I"), rd("Q")
                if et in scalar:
                    f.seek(struct.calcsize(scalar[et]) * n, 1)
                    return None
                return [value(et) for _ in range(n)]
            return rd(scalar[t])

        if f.read(4) != b"GGUF":
            raise ValueError("%s is not a GGUF file" % path)
        rd("I")
        n_tensors, n_kv = rd("Q"), rd("Q")
        meta = {}
        for _ in range(n_kv):
            k = string()
            meta[k] = value(rd("I"))
        align = meta.get("general.alignment", 32)
        infos = []
        for _ in range(n_tensors):
            name = string()
            nd = rd("I")
            f.seek(8 * nd, 1)
            rd("I")
            infos.append((rd("Q"), name))
        data = (f.tell() + align - 1) // align * align
    end = os.path.getsize(path) - data
    infos.sort()
    return {name: (infos[i + 1][0] if i + 1 < len(infos) else end) - off for i, (off, name) in enumerate(infos)}, meta


def decode_weight_bytes(path):
    """Bytes of weights one decode step reads: every tensor, except the
    token embedding when a separate output matrix exists (then the step
    gathers one row of it), and of a MoE's experts (stacked `ffn_*_exps`,
    or one `ffn_*.E` tensor each) only the `expert_used_count` of
    `expert_count` a token is routed to."""
    t, meta = gguf_tensor_bytes(path)
    arch = meta.get("general.architecture")
    used, count = meta.get("%s.expert_used_count" % arch), meta.get("%s.expert_count" % arch)
    routed = (used / count) if used and count else 1.0
    expert = re.compile(r"\.ffn_[a-z_]*exps\.|\.ffn_(gate|up|down)\.\d+\.")
    total = sum(b * (routed if expert.search(n) else 1.0) for n, b in t.items())
    if "output.weight" in t and "token_embd.weight" in t:
        total -= t["token_embd.weight"]
    return total


def memory_bandwidth(threads, mib=256, repeats=5):
    """The machine's memory bandwidth in GB/s, numpy, `threads` threads each
    on its own `mib` MiB buffer (numpy releases the GIL in both loops):
    read (a max over every byte) and copy (bytes read + bytes written);
    best of `repeats`. None without numpy."""
    try:
        import numpy as np
    except ImportError:
        return None
    n = mib << 20
    src = [np.full(n, 1, dtype=np.uint8) for _ in range(threads)]
    dst = [np.zeros(n, dtype=np.uint8) for _ in range(threads)]

    def best(work, bytes_per_thread):
        out = 0.0
        for _ in range(repeats):
            ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
            t0 = time.perf_counter()
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            out = max(out, threads * bytes_per_thread / (time.perf_counter() - t0) / 1e9)
        return out

    return {"threads": threads, "buffer_mib": mib,
            "read_gb_s": best(lambda i: src[i].max(), n),
            "copy_gb_s": best(lambda i: np.copyto(dst[i], src[i]), 2 * n)}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def llama_cpp(model, threads, prefill, contexts, steps, repeats, prompt_text):
    from llama_cpp import Llama

    n_ctx = max(max(contexts) + steps + 8, prefill + 8)
    llm = Llama(model_path=model, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                n_batch=512, n_ubatch=512, verbose=False)
    ids = llm.tokenize(prompt_text.encode(), add_bos=False, special=False)
    while len(ids) < max(max(contexts), prefill):
        ids = ids + ids
    best = None
    for _ in range(repeats):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids[:prefill])
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    out = {"prefill_tok_s": prefill / best, "decode": {}}
    for ctx in contexts:
        for _ in range(repeats):
            llm.reset()
            llm.eval(ids[:ctx])
            times = []
            for i in range(steps):
                t0 = time.perf_counter()
                llm.eval([ids[(ctx + i) % len(ids)]])
                times.append(time.perf_counter() - t0)
            out["decode"][ctx] = max(out["decode"].get(ctx, 0.0), 1.0 / statistics.median(times))
    return out


def graphc(model, threads, prefill, contexts, steps, repeats, ids_file, binary, kernels):
    best = None
    out = {"decode": {}}
    for _ in range(repeats):
        cmd = [binary, "bench", model, "--threads", str(threads), "--no-ab", "--json",
               "--prefill", str(prefill), "--prompt-ids-file", ids_file,
               "--contexts", ",".join(map(str, contexts)), "--steps", str(steps)]
        if kernels:
            cmd += ["--kernels", kernels]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        p = r["prefill"]["tok_s"]
        best = p if best is None else max(best, p)
        for row in r["decode"]:
            out["decode"][row["context"]] = max(out["decode"].get(row["context"], 0.0), row["decode_tok_s"])
        out["kernels"] = r["kernels"]
    out["prefill_tok_s"] = best
    return out


def merge(best, new):
    """Best of two measurements, metric by metric."""
    if best is None:
        return new
    best["prefill_tok_s"] = max(best["prefill_tok_s"], new["prefill_tok_s"])
    for c, v in new["decode"].items():
        best["decode"][c] = max(best["decode"][c], v)
    return best


def compare(model, a, contexts, prompt_text):
    """One checkpoint: both engines alternated, best of --repeats each."""
    # Both engines prefill the same token ids: llama.cpp's tokenization of
    # the prompt (graphc's equals it where graphc has the tokenizer).
    from llama_cpp import Llama
    tok = Llama(model_path=model, vocab_only=True, verbose=False)
    ids = tok.tokenize(prompt_text.encode(), add_bos=False, special=False)
    del tok
    ids_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), "graphc-bench-prompt.ids")
    with open(ids_file, "w") as f:
        f.write(" ".join(map(str, ids[:a.prefill])))
    # Alternate the engines, so a slow spell of a shared machine hits both.
    g, l = None, None
    for _ in range(a.repeats):
        g = merge(g, graphc(model, a.threads, a.prefill, contexts, a.steps, 1, ids_file, a.graphc, a.graphc_kernels))
        l = merge(l, llama_cpp(model, a.threads, a.prefill, contexts, a.steps, 1, prompt_text))
    rows = [("prefill tok/s (%d tokens)" % a.prefill, g["prefill_tok_s"], l["prefill_tok_s"])]
    for c in contexts:
        rows.append(("decode tok/s at context %d" % c, g["decode"][c], l["decode"][c]))
    wbytes = decode_weight_bytes(model)
    bw = [{"context": c, "graphc_ms": 1e3 / g["decode"][c], "llama_cpp_ms": 1e3 / l["decode"][c],
           "graphc_gb_s": wbytes * g["decode"][c] / 1e9, "llama_cpp_gb_s": wbytes * l["decode"][c] / 1e9}
          for c in contexts]
    return {"model": model, "threads": a.threads, "graphc_kernels": g["kernels"],
            "decode_weight_bytes": wbytes, "decode_bandwidth": bw,
            "rows": [{"metric": m, "graphc": x, "llama_cpp": y, "ratio": x / y} for m, x, y in rows]}


def main():
    cache = os.path.expanduser(os.environ.get("GRAPHC_CACHE", "~/.cache/graphc"))
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", metavar="MODEL.gguf",
                    help="default: every checkpoint tools/setup.sh fetches into $GRAPHC_CACHE/models")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--contexts", default="128,1024")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--graphc", default=os.path.join(ROOT, "target/release/graphc"))
    ap.add_argument("--graphc-kernels", default=None,
                    help="graphc's --kernels (vs-llama-cpp.sh --isa avx2 sets avx2)")
    ap.add_argument("--no-bandwidth", action="store_true", help="skip the memory-bandwidth measurement")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    models = a.models or [os.path.join(cache, "models", f) for _, f in CHECKPOINTS]
    missing = [m for m in models if not os.path.exists(m)]
    if missing:
        sys.exit("missing %s (bash tools/setup.sh fetches the checkpoints)" % ", ".join(missing))
    contexts = [int(c) for c in a.contexts.split(",")]
    prompt_text = open(os.path.join(HERE, "prompt.txt")).read()
    import llama_cpp as lc
    head = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "threads": a.threads,
        "graphc": subprocess.run([a.graphc, "--version"], capture_output=True, text=True).stdout.strip().removeprefix("graphc "),
        "graphc_commit": subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                                        capture_output=True, text=True).stdout.strip(),
        "llama_cpp_python": lc.__version__,
        "llama_cpp_system_info": lc.llama_print_system_info().decode().strip(),
        "memory_bandwidth": None if a.no_bandwidth else memory_bandwidth(a.threads),
    }
    results = [compare(m, a, contexts, prompt_text) for m in models]
    if a.json:
        print(json.dumps(dict(head, results=results)))
        return
    print("%s | %s | %d threads | graphc %s (%s) | llama-cpp-python %s" % (
        head["date"], head["cpu"], a.threads, head["graphc"], head["graphc_commit"], lc.__version__))
    print("llama.cpp %s" % head["llama_cpp_system_info"])
    mb = head["memory_bandwidth"]
    if mb:
        print("memory bandwidth (numpy, %d threads, %d MiB each, best of 5): read %.1f GB/s, copy %.1f GB/s"
              % (mb["threads"], mb["buffer_mib"], mb["read_gb_s"], mb["copy_gb_s"]))
    names = dict((f, n) for n, f in CHECKPOINTS)
    for r in results:
        name = names.get(os.path.basename(r["model"]), os.path.basename(r["model"]))
        print("\n| %s | graphc | llama.cpp | graphc / llama.cpp |" % name)
        print("|---|---:|---:|---:|")
        for row in r["rows"]:
            print("| %s | %.1f | %.1f | %.2f |" % (row["metric"], row["graphc"], row["llama_cpp"], row["ratio"]))
        print("\ngraphc kernels %s; a decode step reads %.1f MB of weights:" % (
            r["graphc_kernels"], r["decode_weight_bytes"] / 1e6))
        for b in r["decode_bandwidth"]:
            share = "" if not mb else " (%.0f%% / %.0f%% of read bandwidth)" % (
                100 * b["graphc_gb_s"] / mb["read_gb_s"], 100 * b["llama_cpp_gb_s"] / mb["read_gb_s"])
            print("  context %d: graphc %.2f ms = %.1f GB/s, llama.cpp %.2f ms = %.1f GB/s%s" % (
                b["context"], b["graphc_ms"], b["graphc_gb_s"], b["llama_cpp_ms"], b["llama_cpp_gb_s"], share))


if __name__ == "__main__":
    sys.exit(main())
