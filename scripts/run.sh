#!/usr/bin/env bash
# The main job: configure (scripts/configure.sh, the same configuration as scripts/test.sh and
# CI), build the `hattn` CLI with all cores, and run it. With no arguments the CLI runs its
# default shape (batch 2, 16 heads, seqlen 4096, head_dim 128, bf16), verifies against the GPU
# reference and times it; arguments are passed through (e.g. `bash scripts/run.sh fwd --dim 64
# --causal`, `bash scripts/run.sh --help`). Build progress and errors go to stderr, so stdout
# holds only the CLI's output.
#   BUILD_DIR (default build), BUILD_TYPE (default Release), HATTN_PTXAS_WERROR (default ON)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -x "$BUILD_DIR/bin/hattn" ]; then
  echo "building hattn (first build takes about a minute)..." >&2
fi
BUILD_DIR="$BUILD_DIR" bash scripts/configure.sh >&2
cmake --build "$BUILD_DIR" -j "$(nproc)" --target hattn_cli >&2
exec "$BUILD_DIR/bin/hattn" "$@"
