#!/usr/bin/env bash
# hattn's kernels build only for the arch-specific target sm_90a. Prove that a device pass for any
# other target stops at ptx/common.cuh's guard with a message that says how to compile, rather
# than at a page of ptxas errors: compile a tiny .cu that includes it for plain sm_90 and for
# sm_80 (both must fail with the message) and for sm_90a (must compile). CI calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
work=$(mktemp -d "${TMPDIR:-/tmp}/hattn-guard.XXXXXX")
trap 'rm -rf "$work"' EXIT
printf '#include "ptx/common.cuh"\n__global__ void probe() {}\n' >"$work/probe.cu"
expected='compile with -gencode=arch=compute_90a,code=sm_90a'
status=0

for arch in "-arch=sm_90" "-arch=sm_80"; do
  if "$NVCC" -std=c++17 "$arch" -I. -c "$work/probe.cu" -o "$work/probe.o" >"$work/log" 2>&1; then
    echo "FAIL     $arch: compiled, but the sm_90a guard should have stopped it"; status=1
  elif grep -qF -- "$expected" "$work/log"; then
    echo "ok       $arch: stopped by the guard ('$expected')"
  else
    echo "FAIL     $arch: failed without the guard's message:"; cat "$work/log"; status=1
  fi
done
if "$NVCC" -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -c "$work/probe.cu" -o "$work/probe.o" >"$work/log" 2>&1; then
  echo "ok       sm_90a: compiles"
else
  echo "FAIL     sm_90a: does not compile:"; cat "$work/log"; status=1
fi
exit $status
