#!/usr/bin/env bash
# Fuzz one target: bash fuzz/run.sh TARGET [SECONDS]   (default 600)
# Targets: gguf safetensors plan ir_text tokenizer json_mode tool_calls reasoning (bodies: tests/src/fuzz.rs).
# libFuzzer + AddressSanitizer via cargo-fuzz, installed if missing. The
# toolchain here is stable: RUSTC_BOOTSTRAP=1 lets it take the sanitizer
# flag. Seeds (the synthetic checkpoints whole, the real GGUF headers, a plan,
# the filetests' IR) are written fresh into fuzz/corpus/TARGET, which also
# keeps what the fuzzer finds between runs (gitignored). A crash lands in
# fuzz/artifacts/TARGET; once fixed, copy it to tests/fuzz-regressions/TARGET/
# so `cargo test` replays it for good.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
target="${1:?usage: fuzz/run.sh TARGET [SECONDS]}"
secs="${2:-600}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cd "$here"
cargo run -q -p graphc-tests --example fuzz_seeds -- fuzz/corpus
export RUSTC_BOOTSTRAP=1
cd fuzz
cargo fuzz run --target-dir "$here/target/fuzz" "$target" "corpus/$target" -- \
  -max_total_time="$secs" -rss_limit_mb=4096 -malloc_limit_mb=2048 -timeout=20 -print_final_stats=1
