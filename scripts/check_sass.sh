#!/usr/bin/env bash
# Check that each microbenchmark's own kernels contain the SASS instructions it claims to time.
#   scripts/check_sass.sh [BUILD_DIR]      (default: build; binaries in BUILD_DIR/bench)
# Only functions compiled from the benchmark's own file are counted (their mangled names carry
# "<bench>_cu"), so library kernels linked into the same binary cannot hide a missing one.
# Exit 0: all found; 1: an instruction or a binary is missing; 2: no cuobjdump to run.
#
# cuobjdump comes with the CUDA toolkit (/usr/local/cuda/bin) or from PyPI
# (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm: cuobjdump -sass runs nvdisasm).
# Set CUOBJDUMP=/path/to/cuobjdump to pick one explicitly.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}

# bench binary -> the SASS opcodes it must contain
declare -A REQUIRED=(
  [mufu_bench]="MUFU.EX2"
  [wgmma_bench]="HGMMA QGMMA"
  [tma_bench]="UTMALDG"
  [exp_vs_mma_bench]="HGMMA QGMMA MUFU.EX2"
)

find_cuobjdump() {
  if [ -n "${CUOBJDUMP:-}" ] && [ -x "$CUOBJDUMP" ]; then echo "$CUOBJDUMP"; return 0; fi
  if command -v cuobjdump >/dev/null 2>&1; then command -v cuobjdump; return 0; fi
  local c
  for c in "${CUDA_HOME:-/usr/local/cuda}/bin/cuobjdump" /usr/local/cuda/bin/cuobjdump; do
    if [ -x "$c" ]; then echo "$c"; return 0; fi
  done
  # PyPI's nvidia-cuda-cuobjdump puts it under site-packages/nvidia/cu*/bin.
  if command -v python3 >/dev/null 2>&1; then
    local sp
    for sp in $(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
      for c in "$sp"/nvidia/cu*/bin/cuobjdump "$sp"/nvidia/cuda_cuobjdump/bin/cuobjdump; do
        if [ -x "$c" ]; then echo "$c"; return 0; fi
      done
    done
  fi
  return 1
}

if ! CUOBJ=$(find_cuobjdump); then
  echo "check_sass: cuobjdump not found (CUDA toolkit, or: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)" >&2
  exit 2
fi
# cuobjdump -sass calls nvdisasm; the toolkit and the PyPI packages keep it beside cuobjdump.
export PATH="$(dirname "$CUOBJ"):$PATH"
echo "check_sass: using $CUOBJ on $BUILD_DIR/bench"

status=0
for bench in mufu_bench wgmma_bench tma_bench exp_vs_mma_bench; do
  bin="$BUILD_DIR/bench/$bench"
  if [ ! -x "$bin" ]; then
    echo "MISSING  $bench: no binary at $bin"
    status=1
    continue
  fi
  if ! sass=$("$CUOBJ" -sass "$bin" 2>&1); then
    echo "MISSING  $bench: cuobjdump failed: $(echo "$sass" | tail -1)"
    status=1
    continue
  fi
  # Keep only the instructions of this file's own kernels.
  tag="${bench}_cu"
  nfunc=$(grep "Function :" <<<"$sass" | grep -cF "$tag" || true)
  own=$(awk -v tag="$tag" '/Function :/ { mine = index($0, tag) > 0; next } mine' <<<"$sass")
  line="$bench ($nfunc kernels):"
  missing=0
  for op in ${REQUIRED[$bench]}; do
    n=$(grep -cF " $op" <<<"$own" || true)
    line="$line $op=$n"
    if [ "$n" -eq 0 ]; then missing=1; line="$line(MISSING)"; fi
  done
  if [ "$missing" -eq 0 ]; then echo "ok       $line"; else echo "FAIL     $line"; status=1; fi
done

if [ "$status" -ne 0 ]; then
  echo "check_sass: FAILED: a benchmark lacks an instruction it claims to measure" >&2
else
  echo "check_sass: all instructions present"
fi
exit "$status"
