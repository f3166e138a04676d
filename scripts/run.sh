#!/usr/bin/env bash
# The main job: configure (once), build the `hattn` CLI with all cores, and run it. With no
# arguments the CLI runs its default shape (batch 2, 16 heads, seqlen 4096, head_dim 128, bf16),
# verifies against the GPU reference and times it; arguments are passed through
# (e.g. `bash scripts/run.sh fwd --dim 64 --causal`, `bash scripts/run.sh --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" >/dev/null
fi
cmake --build "$BUILD_DIR" -j "$(nproc)" --target hattn_cli >/dev/null
exec "$BUILD_DIR/bin/hattn" "$@"
