#!/usr/bin/env bash
# Peak RSS decoding SmolLM2 at context ~1020 against issue 6's bound:
# 1.25 x (checkpoint bytes + KV cache bytes at --max-seq 1024).
# Usage: bash benches/peak-rss.sh [MODEL.gguf]   (after tools/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-${GRAPHC_CACHE:-$HOME/.cache/graphc}/models/SmolLM2-135M-Instruct.Q4_1.gguf}
prompt=$(mktemp)
plan=$(mktemp)
trap 'rm -f "$prompt" "$plan"' EXIT
# 994 tokens in SmolLM2's vocabulary: the bench prompt, twice, cut at 4450 bytes.
cat benches/prompt.txt benches/prompt.txt | head -c 4450 > "$prompt"
cargo build --release -q -p graphc
# The cache's size as the plan states it: full caches at max_seq, plus rings and recurrent states.
kv=$(./target/release/graphc compile "$model" -o "$plan" --max-seq 1024 --json 2>/dev/null |
  python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["kv_bytes_per_token"]*v["max_seq"] + v["kv_window_bytes"] + v["recurrent_bytes"])')
for run in 1 2 3; do
  ./target/release/graphc run "$model" --prompt-file "$prompt" -n 24 --max-seq 1024 --threads 2 --json 2>/dev/null |
    python3 -c '
import json, os, sys
v = json.load(sys.stdin)
ckpt = os.path.getsize(sys.argv[1])
kv = int(sys.argv[3])
rss, n = v["peak_rss_bytes"], len(v["prompt_ids"])
print(f"run {sys.argv[2]}: {n}-token prompt, peak RSS {rss/1e6:.1f} MB = "
      f"{rss/(ckpt+kv):.3f} x (checkpoint {ckpt/1e6:.1f} MB + KV {kv/1e6:.1f} MB); bound 1.25")
' "$model" "$run" "$kv"
done
