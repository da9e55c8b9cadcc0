#!/usr/bin/env bash
# graphc vs llama.cpp, same GGUF / prompt / threads, one table (see
# benches/vs_llama_cpp.py). Installs llama-cpp-python (built from source for
# this CPU, ~10 minutes on 2 cores the first time) into a venv under
# $GRAPHC_CACHE, builds graphc in release mode, then measures.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${GRAPHC_CACHE:-$HOME/.cache/graphc}"
venv="$cache/bench-venv"
if ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv "$venv"
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    "$venv/bin/pip" install -q llama-cpp-python==0.3.36
fi
bash "$here/tools/setup.sh" >/dev/null
(cd "$here" && cargo build --release -q -p graphc)
exec "$venv/bin/python" "$here/benches/vs_llama_cpp.py" "$@"
