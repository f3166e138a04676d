#!/usr/bin/env bash
# Debug builds bound every mbarrier wait with a timeout + trap (HATTN_DEBUG_HANG). Prove that
# the kernels still compile in that mode with ptxas warnings as errors: no spills, no wgmma
# serialization (C7510-C7514), no ignored setmaxnreg (C7508): forward, backward, and the FP8
# pre-pass at d256 (its paired tensor-core kernel waits on an mbarrier). CI calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
work=$(mktemp -d "${TMPDIR:-/tmp}/hattn-debug.XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0
for src in src/host/fwd_launch_d*.cu src/host/fwd_fp8_launch_d*.cu src/host/bwd_launch_d*.cu src/host/fp8_prepass_launch_d256.cu; do
  log="$work/$(basename "$src").log"
  if "$NVCC" -std=c++17 -g -DHATTN_DEBUG_HANG -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
       -Xptxas=--warn-on-spills,--warning-as-error -I. -Iinclude -Isrc -c "$src" -o "$work/out.o" >"$log" 2>&1 &&
     ! grep -q "C7510\|C7511\|C7512\|C7514\|C7508" "$log"; then
    echo "ok       $src (debug: timeout + trap in every wait)"
  else
    echo "FAIL     $src"; cat "$log"; status=1
  fi
done
exit $status
