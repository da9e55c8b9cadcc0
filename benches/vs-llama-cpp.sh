#!/usr/bin/env bash
# graphc vs llama.cpp, same GGUF / prompt / threads, one table per checkpoint
# (see benches/vs_llama_cpp.py; with no MODEL.gguf, every checkpoint
# tools/setup.sh fetches: SmolLM2-135M, Gemma 3 270M, Qwen2.5-Coder-0.5B).
#   bash benches/vs-llama-cpp.sh [MODEL.gguf ...] [--threads 2] [--isa avx2]
# --isa avx2: both engines limited to AVX2 + FMA + F16C on a CPU that has
# more (what a consumer Intel core or an older AMD one runs): llama.cpp
# built with every AVX-512 and AVX-VNNI option OFF (its own venv,
# bench-venv-avx2), graphc with --kernels avx2.
# Installs llama-cpp-python (built from source, ~10 minutes on 2 cores the
# first time) into a venv under $GRAPHC_CACHE, builds graphc in release mode,
# then measures.
#
# llama.cpp is built with GGML_NATIVE=OFF and each x86 instruction-set option
# set ON exactly when /proc/cpuinfo's flags report it (the script prints what
# it chose). GGML_NATIVE=ON (-march=native) built a library that died with an
# illegal instruction on load on a 2-core Xeon with AMX; the explicit build
# (AVX-512, VNNI, BF16 as the CPU reports them) runs there. AMX stays OFF:
# the known-good build had it off, and AMX needs the kernel's per-process
# permission besides the CPU flag. GGML_EXTRA_CMAKE_ARGS is appended (e.g.
# -DGGML_AMX_INT8=ON to try it). The venv records the CMake arguments it was
# built with and is rebuilt (without pip's wheel cache) when they change.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${GRAPHC_CACHE:-$HOME/.cache/graphc}"
venv="$cache/bench-venv"
# --isa avx2 is this script's; every other argument goes to vs_llama_cpp.py.
isa="" py_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --isa) isa="${2:?--isa needs a value (avx2)}"; shift 2 ;;
    --isa=*) isa="${1#--isa=}"; shift ;;
    *) py_args+=("$1"); shift ;;
  esac
done
case "$isa" in
  "") ;;
  avx2) venv="$cache/bench-venv-avx2"; py_args+=(--graphc-kernels avx2) ;;
  *) echo "--isa: only avx2 is known, not $isa" >&2; exit 2 ;;
esac

# -D options for ggml's CPU backend on this CPU; the summary goes to stderr.
ggml_cpu_args() {
  local args="-DGGML_NATIVE=OFF" on="" off=""
  case "$(uname -m)" in
    x86_64|amd64|i686)
      local flags=""
      # No /proc/cpuinfo (not Linux): every option OFF, a baseline x86-64
      # build that runs anywhere (slow; not a fair comparison).
      [ -r /proc/cpuinfo ] && flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
      has() { local f; for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
      set_opt() {  # set_opt OPTION cpuinfo-flag...
        local opt="$1"; shift
        if has "$@"; then args="$args -D$opt=ON"; on="$on ${opt#GGML_}"; else args="$args -D$opt=OFF"; off="$off ${opt#GGML_}"; fi
      }
      set_opt GGML_SSE42 sse4_2
      set_opt GGML_AVX avx
      set_opt GGML_AVX2 avx2
      set_opt GGML_BMI2 bmi2
      set_opt GGML_FMA fma
      set_opt GGML_F16C f16c
      # --isa avx2 asks for flags no CPU has: those options come out OFF.
      local capped=""; [ "$isa" = avx2 ] && capped=" isa-capped"
      set_opt GGML_AVX_VNNI avx_vnni$capped
      # ggml's AVX512 option compiles with -mavx512f -mavx512cd -mavx512vl
      # -mavx512dq -mavx512bw: all five must be there.
      local avx512="avx512f avx512cd avx512vl avx512dq avx512bw$capped"
      set_opt GGML_AVX512 $avx512
      set_opt GGML_AVX512_VBMI $avx512 avx512vbmi
      set_opt GGML_AVX512_VNNI $avx512 avx512_vnni
      set_opt GGML_AVX512_BF16 $avx512 avx512_bf16
      args="$args -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
      off="$off AMX_TILE AMX_INT8 AMX_BF16"
      ;;
    aarch64|arm64)
      if [ -r /proc/cpuinfo ]; then
        # Linux on Arm: the ISA the cores report (Features), not -mcpu=native.
        local feats march
        feats=" $(grep -m1 '^Features' /proc/cpuinfo | cut -d: -f2) "
        if [[ "$feats" == *" asimddp "* ]]; then
          march="armv8.2-a+dotprod"
          [[ "$feats" == *" asimdhp "* ]] && march="$march+fp16"
          [[ "$feats" == *" i8mm "* ]] && march="$march+i8mm"
        else
          march="armv8-a"
        fi
        args="$args -DGGML_CPU_ARM_ARCH=$march"; on=" ARM_ARCH=$march"
      else
        on=" (compiler default for Apple silicon)"
      fi
      ;;
    *) on=" (compiler default for $(uname -m))" ;;
  esac
  echo "llama.cpp build: GGML_NATIVE=OFF; ON:${on:- none}; OFF:${off:- none}" >&2
  echo "$args -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF ${GGML_EXTRA_CMAKE_ARGS:-}"
}

cmake_args="$(ggml_cpu_args)"
stamp="$venv/graphc-cmake-args"
if ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null || [ "$(cat "$stamp" 2>/dev/null)" != "$cmake_args" ]; then
  echo "building llama-cpp-python 0.3.36 with: $cmake_args" >&2
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" uninstall -q -y llama-cpp-python >/dev/null 2>&1 || true
  rm -f "$stamp"
  # --no-cache-dir: pip's wheel cache is keyed by the sdist, not by
  # CMAKE_ARGS, and would hand back a wheel built with other flags.
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc 2>/dev/null || sysctl -n hw.ncpu)" CMAKE_ARGS="$cmake_args" \
    "$venv/bin/pip" install -q --no-cache-dir llama-cpp-python==0.3.36
  echo "$cmake_args" > "$stamp"
fi
bash "$here/tools/setup.sh" >/dev/null
(cd "$here" && cargo build --release -q -p graphc)
exec "$venv/bin/python" "$here/benches/vs_llama_cpp.py" ${py_args[@]+"${py_args[@]}"}
