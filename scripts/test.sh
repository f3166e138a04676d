#!/usr/bin/env bash
# Configure (scripts/configure.sh), build with all cores, run every test. The one test command:
# README gives it to users, .ci/run calls it, and scripts/gpu_suite.sh runs it on the GPU host.
#   BUILD_DIR (default build), BUILD_TYPE (default Release), HATTN_PTXAS_WERROR (default ON)
# Arguments go to ctest (e.g. `bash scripts/test.sh -R Validation`).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BUILD_DIR="$BUILD_DIR" bash scripts/configure.sh
cmake --build "$BUILD_DIR" -j "$(nproc)"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)" "$@"
