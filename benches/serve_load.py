#!/usr/bin/env python3
"""Load on an OpenAI-compatible server: C concurrent streaming clients for a
bounded time each, C in 1, 4, 16 (benches/serve-load.sh runs it against
graphc serve and llama.cpp's server on the same file and threads).

    python benches/serve_load.py URL MODEL_NAME [--secs 20] [--clients 1,4,16] [--max-tokens 64] [--pid PID]

Each client loops: one streamed completion (temperature 0, a prompt from a
fixed list, its `max_tokens`), then the next. Reported per concurrency:
aggregate generated tok/s (chunks with text, over the wall time), p50 / p99
time to first token and between tokens, requests finished, errors, and the
server's peak resident memory (VmHWM of --pid) after the run. Standard
library only.
"""
import argparse
import http.client
import json
import os
import statistics
import threading
import time
import urllib.parse

PROMPTS = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "serve", "prompts.json")))["prompts"]


def one_request(url, model, prompt, max_tokens, stats, lock):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        r.read()
        with lock:
            stats["errors"] += 1
        return
    first, last, gaps, tokens = None, None, [], 0
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if not chunk.get("choices") or not chunk["choices"][0].get("text"):
            continue
        now = time.perf_counter()
        tokens += 1
        if first is None:
            first = now
        else:
            gaps.append(now - last)
        last = now
    conn.close()
    with lock:
        stats["tokens"] += tokens
        stats["requests"] += 1
        if first is not None:
            stats["ttft"].append(first - t0)
        stats["itl"].extend(gaps)


def level(url, model, clients, secs, max_tokens):
    stats = {"tokens": 0, "requests": 0, "errors": 0, "ttft": [], "itl": []}
    lock = threading.Lock()
    end = time.perf_counter() + secs

    def client(i):
        k = i
        while time.perf_counter() < end:
            one_request(url, model, PROMPTS[k % len(PROMPTS)], max_tokens, stats, lock)
            k += clients

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    q = lambda xs, p: statistics.quantiles(xs, n=100)[p - 1] * 1e3 if len(xs) >= 2 else (xs[0] * 1e3 if xs else float("nan"))
    return {
        "clients": clients,
        "tok_s": stats["tokens"] / wall,
        "requests": stats["requests"],
        "errors": stats["errors"],
        "ttft_p50_ms": q(stats["ttft"], 50),
        "ttft_p99_ms": q(stats["ttft"], 99),
        "itl_p50_ms": q(stats["itl"], 50),
        "itl_p99_ms": q(stats["itl"], 99),
        "wall_s": wall,
    }


def peak_rss_mib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--secs", type=float, default=20)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--pid", type=int)
    a = ap.parse_args()
    for c in [int(x) for x in a.clients.split(",")]:
        row = level(a.url, a.model, c, a.secs, a.max_tokens)
        row["peak_rss_mib"] = peak_rss_mib(a.pid) if a.pid else None
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
