#!/usr/bin/env bash
# Serving under load, graphc vs llama.cpp's OpenAI-compatible server
# (llama-cpp-python's [server] extra), same GGUF and threads, one after the
# other in one run: 1, 4 and 16 concurrent streaming clients for SECS each
# (benches/serve_load.py). Not a test: numbers go to docs/serve.md.
#   bash benches/serve-load.sh [MODEL.gguf] [--threads 2] [--secs 20] [--slots 4]
# Needs the bench venv of benches/vs-llama-cpp.sh (it builds llama-cpp-python);
# adds the [server] extra to it. Its server answers one request at a time;
# --interrupt_requests False keeps a new request from cutting off the one
# being answered (its default), so both servers finish every request.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${GRAPHC_CACHE:-$HOME/.cache/graphc}"
venv="$cache/bench-venv"
model="$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
threads=2 secs=20 slots=4
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --secs) secs="$2"; shift 2 ;;
    --slots) slots="$2"; shift 2 ;;
    *) model="$1"; shift ;;
  esac
done
[ -x "$venv/bin/python" ] || { echo "no $venv: run benches/vs-llama-cpp.sh once (it builds llama-cpp-python)"; exit 1; }
"$venv/bin/python" -c "import llama_cpp.server" 2>/dev/null || "$venv/bin/pip" install -q "llama-cpp-python[server]==$("$venv/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)')"
(cd "$here" && cargo build -q --release -p graphc)
name="$(basename "$model" .gguf)"
ctx=2048
wait_up() { for _ in $(seq 600); do curl -sf "http://127.0.0.1:$1/v1/models" >/dev/null && return; sleep 0.2; done; echo "server on $1 did not start"; exit 1; }
echo "== $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) | $name | threads $threads | ${secs}s a level | $(date -u +%F)"

echo "== graphc serve (slots $slots, max-seq $ctx)"
"$here/target/release/graphc" serve "$model" --port 18181 --slots "$slots" --max-seq $ctx --threads "$threads" --model-name "$name" 2>/tmp/graphc-serve.log &
pid=$!; wait_up 18181
python3 "$here/benches/serve_load.py" http://127.0.0.1:18181 "$name" --secs "$secs" --pid $pid | sed 's/^/graphc /'
kill -TERM $pid; wait $pid || true

echo "== llama.cpp server (llama-cpp-python $("$venv/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)'), n_ctx $ctx)"
"$venv/bin/python" -m llama_cpp.server --model "$model" --model_alias "$name" --n_threads "$threads" --n_threads_batch "$threads" \
  --n_ctx $ctx --interrupt_requests False --port 18182 >/tmp/llama-serve.log 2>&1 &
pid=$!; wait_up 18182
python3 "$here/benches/serve_load.py" http://127.0.0.1:18182 "$name" --secs "$secs" --pid $pid | sed 's/^/llama.cpp /'
kill -TERM $pid; wait $pid || true
