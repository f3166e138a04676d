#!/usr/bin/env bash
# Configure, build with all cores, run every test. The one test command: README gives it to
# users, .ci/run calls it, and scripts/gpu_suite.sh runs it on the GPU host.
#   BUILD_DIR (default build), BUILD_TYPE (default Release), HATTN_PTXAS_WERROR (default ON)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
        -DHATTN_PTXAS_WERROR="${HATTN_PTXAS_WERROR:-ON}"
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)" "$@"
