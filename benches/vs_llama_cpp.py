#!/usr/bin/env python3
"""Side-by-side speed of graphc and llama.cpp on the same GGUF, prompt and
thread count, measured in one run, printed as one table with ratios.

    bash benches/vs-llama-cpp.sh [MODEL.gguf] [--threads 2]

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
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


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


def graphc(model, threads, prefill, contexts, steps, repeats, ids_file, binary):
    best = None
    out = {"decode": {}}
    for _ in range(repeats):
        cmd = [binary, "bench", model, "--threads", str(threads), "--no-ab", "--json",
               "--prefill", str(prefill), "--prompt-ids-file", ids_file,
               "--contexts", ",".join(map(str, contexts)), "--steps", str(steps)]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=os.path.expanduser(
        os.path.join(os.environ.get("GRAPHC_CACHE", "~/.cache/graphc"), "models/SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--contexts", default="128,1024")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--graphc", default=os.path.join(ROOT, "target/release/graphc"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    contexts = [int(c) for c in a.contexts.split(",")]
    prompt_text = open(os.path.join(HERE, "prompt.txt")).read()
    # Both engines prefill the same token ids: llama.cpp's tokenization of
    # the prompt (graphc's equals it where graphc has the tokenizer).
    from llama_cpp import Llama
    tok = Llama(model_path=a.model, vocab_only=True, verbose=False)
    ids = tok.tokenize(prompt_text.encode(), add_bos=False, special=False)
    ids_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), "graphc-bench-prompt.ids")
    with open(ids_file, "w") as f:
        f.write(" ".join(map(str, ids[:a.prefill])))
    # Alternate the engines, so a slow spell of a shared machine hits both.
    g, l = None, None
    for _ in range(a.repeats):
        g = merge(g, graphc(a.model, a.threads, a.prefill, contexts, a.steps, 1, ids_file, a.graphc))
        l = merge(l, llama_cpp(a.model, a.threads, a.prefill, contexts, a.steps, 1, prompt_text))
    rows = [("prefill tok/s (%d tokens)" % a.prefill, g["prefill_tok_s"], l["prefill_tok_s"])]
    for c in contexts:
        rows.append(("decode tok/s at context %d" % c, g["decode"][c], l["decode"][c]))
    if a.json:
        print(json.dumps({"model": a.model, "threads": a.threads, "graphc_kernels": g["kernels"],
                          "rows": [{"metric": m, "graphc": x, "llama_cpp": y, "ratio": x / y} for m, x, y in rows]}))
        return
    import llama_cpp as lc
    print("model %s | threads %d | graphc %s (exact f32 path) | llama.cpp %s (llama-cpp-python)" % (
        os.path.basename(a.model), a.threads, g["kernels"], lc.__version__))
    print("| metric | graphc | llama.cpp | graphc / llama.cpp |")
    print("|---|---:|---:|---:|")
    for m, x, y in rows:
        print("| %s | %.1f | %.1f | %.2f |" % (m, x, y, x / y))


if __name__ == "__main__":
    sys.exit(main())
