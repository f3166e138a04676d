#!/usr/bin/env bash
# Every figure the FP8 forward is judged by, on one GPU host in one call, from the repository root:
#
#   OUT=/some/dir bash scripts/gpu_fp8_bars.sh
#
# Runs three scripts one after the other over one build folder, so the library's kernels are
# compiled once (the later scripts only add their own targets; all three configure the same
# Release build with ptxas warnings as errors):
#   1. scripts/gpu_fp8_compare.sh   hattn e4m3 beside cuDNN FP8 on the 36-shape grid (TFLOPS per
#                                   shape; the pre-pass timed in its own column)
#   2. scripts/gpu_fp8_prepass.sh   STEPS=bench: the pre-pass's GB/s against a d2d copy of the same
#                                   bytes timed beside it
#   3. scripts/gpu_fp8_accuracy.sh  FlashAttention-3's Table 3 on its outlier inputs (per-tensor,
#                                   block, block + Hadamard) and the error against the sequence length
# Writes $OUT/summary.txt (the three summaries, printed last), $OUT/compare_fp8.json,
# $OUT/prepass_bench.json and $OUT/logs.tgz (each script's own folder, logs included): four files,
# easy to copy back from a remote GPU host.
#
# Environment: OUT (gpu_fp8_bars_out), BUILD_DIR (build-fp8bars), JOBS (16),
#   COMPARE_BUDGET_S (260: the comparison's sweep; its build has BUILD_TIMEOUT_S, 300, on top),
#   PREPASS_BUDGET_S (90), ACCURACY_BUDGET_S (130), and what the three scripts read (WHEEL_DIR for
#   the cudnn-frontend wheel, FP8_ARGS, ...).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-gpu_fp8_bars_out}
export BUILD_DIR=${BUILD_DIR:-build-fp8bars}
export JOBS=${JOBS:-16}
COMPARE_BUDGET_S=${COMPARE_BUDGET_S:-260}
PREPASS_BUDGET_S=${PREPASS_BUDGET_S:-90}
ACCURACY_BUDGET_S=${ACCURACY_BUDGET_S:-130}

mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Rewritten after every step, so that a run cut short by its host's time limit still has one.
write_summary() {
  {
    echo "== gpu_fp8_bars.sh: $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader 2>/dev/null | head -1)"
    cat "$WORK/status"
    for name in compare prepass accuracy; do
      echo
      echo "== $name"
      if [ -f "$WORK/$name/summary.txt" ]; then cat "$WORK/$name/summary.txt"; else tail -30 "$WORK/$name.out"; fi
    done
  } >"$OUT/summary.txt"
}

step() {  # NAME SCRIPT ENV...: the script's summary goes to $WORK/NAME, its rc to the status
  local name=$1 script=$2 t0=$SECONDS rc=0; shift 2
  env OUT="$WORK/$name" "$@" bash "$script" >"$WORK/$name.out" 2>&1 || rc=$?
  printf '%-10s rc %d (%d s)\n' "$name" "$rc" $((SECONDS - t0)) >>"$WORK/status"
  write_summary
}
step compare scripts/gpu_fp8_compare.sh COMPARE_BUDGET_S="$COMPARE_BUDGET_S"
cp "$WORK/compare/compare_fp8.json" "$OUT/compare_fp8.json" 2>/dev/null
# The comparison configures without benchmarks and tests, which the pre-pass script takes as set
# (it names neither): turn them back on; only targets are added, the library's objects stay built.
cmake -S . -B "$BUILD_DIR" -DHATTN_BUILD_BENCH=ON -DHATTN_BUILD_TESTS=ON >"$WORK/reconfigure.log" 2>&1
step prepass scripts/gpu_fp8_prepass.sh STEPS=bench BUDGET_S="$PREPASS_BUDGET_S"
step accuracy scripts/gpu_fp8_accuracy.sh BUDGET_S="$ACCURACY_BUDGET_S"

cp "$WORK/prepass/bench.json" "$OUT/prepass_bench.json" 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$WORK" . 2>/dev/null
cat "$OUT/summary.txt"
! grep -qv ' rc 0 ' "$WORK/status"
