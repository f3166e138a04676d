#!/usr/bin/env bash
# The FP8 forward's accuracy on a GPU host, from the repository root:
#
#   OUT=/some/dir bash scripts/gpu_fp8_accuracy.sh
#
# Builds only what it needs into its own folder (the CLI and fwd_fp8_accuracy_test; Ninja when
# installed, Release, ptxas warnings as errors), then runs, each under its own timeout so a crash
# or hang in one does not hide the others:
#   test       fwd_fp8_accuracy_test (the float64 GPU reference and the per-tensor quantizer
#              against the CPU references, then issue 10's bound at seqlen 4096, d128)
#   accuracy   `hattn accuracy-fp8` (FlashAttention-3's Table 3 and the error against seqlen)
#   options    test/check_cli_options.sh (bad command lines: exit 2 and a message)
#   cli_*      `hattn fwd --dtype e4m3` on the default shape (batch 2, heads 16, seqlen 4096, d128)
#              with each combination of --hadamard and --rope, and one causal GQA shape
#              (verify O and LSE against the reference of the unquantized inputs; kernel TFLOPS,
#              pre-pass GB/s)
# Writes $OUT/summary.txt (printed last, the accuracy table at its end) and $OUT/logs.tgz.
#
# Environment: OUT (default ./gpu_fp8_accuracy_out), BUILD_DIR (build-fp8acc), JOBS (16),
#   BUDGET_S (150: the whole run; each step's timeout is clipped to what is left).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-gpu_fp8_accuracy_out}
BUILD_DIR=${BUILD_DIR:-build-fp8acc}
JOBS=${JOBS:-16}
BUDGET_S=${BUDGET_S:-150}
RESERVE_S=4

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/hattn-fp8acc-logs.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
STATUS="$LOGS/status.txt"
: >"$STATUS"
SECONDS=0

# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh  # limit, record, run, select_generator

# ---- build ------------------------------------------------------------------------------------
select_generator "$BUILD_DIR"
run build 100 bash -c "cmake -S . -B '$BUILD_DIR' ${gen[*]:-} -DCMAKE_BUILD_TYPE=Release -DHATTN_PTXAS_WERROR=ON \
  -DHATTN_BUILD_CLI=ON -DHATTN_BUILD_TESTS=ON -DHATTN_BUILD_BENCH=OFF -DHATTN_INSTALL=OFF && \
  cmake --build '$BUILD_DIR' -j $JOBS --target hattn_cli fwd_fp8_accuracy_test"
BUILD_OK=0
grep -q '^build .*PASS' "$STATUS" && BUILD_OK=1

CLI="$BUILD_DIR/bin/hattn"
CLI_CASES=(
  "plain|"
  "hadamard|--hadamard"
  "rope_interleaved|--rope interleaved"
  "rope_half|--rope half"
  "hadamard_rope_interleaved|--hadamard --rope interleaved"
  "hadamard_rope_half|--hadamard --rope half"
  "causal_gqa_odd|--hadamard --rope half --causal --batch 1 --heads 8 --heads-kv 2 --seqlen-q 1000 --seqlen-k 1500"
  "hadamard_v_per_head|--hadamard --v-per-head"
  "v_per_head_rows_short|--hadamard --v-per-head --v-layout rows --causal --batch 4 --seqlen 1000"
)
if [ "$BUILD_OK" -eq 1 ]; then
  run test 30 "$BUILD_DIR/test/fwd_fp8_accuracy_test"
  # The table before the CLI cases (it is what a short budget must not lose); printed last.
  run accuracy 60 "$CLI" accuracy-fp8
  run options 15 bash test/check_cli_options.sh "$CLI"
  for c in "${CLI_CASES[@]}"; do
    # shellcheck disable=SC2086  # the flags are meant to split
    run "cli_${c%%|*}" 15 "$CLI" fwd --dtype e4m3 ${c#*|}
  done
fi

# ---- summary ----------------------------------------------------------------------------------
{
  echo "== hattn FP8 accuracy on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u '+%Y-%m-%d %H:%M UTC'), ${SECONDS} s"
  echo "-- steps"
  cat "$STATUS"
  if [ -f "$LOGS/test.log" ]; then
    echo "-- fwd_fp8_accuracy_test"
    grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?|^\[  FAILED  \] |^fp8 accuracy|^fp64 rows' "$LOGS/test.log" |
      grep -v 'listed below' | head -20 | sed 's/^/  /'
    grep -B1 -A3 'Failure' "$LOGS/test.log" | head -30 | sed 's/^/    /'
  fi
  if [ -f "$LOGS/options.log" ]; then
    grep -E '^FAIL|case\(s\) failed|all cases passed' "$LOGS/options.log" | head -10 | sed 's/^/  options: /'
  fi
  echo "-- hattn fwd --dtype e4m3 (default shape b2 h16 s4096 d128 unless given; O/LSE vs the unquantized inputs)"
  for c in "${CLI_CASES[@]}"; do
    log="$LOGS/cli_${c%%|*}.log"
    [ -f "$log" ] || continue
    echo "  [${c%%|*}] ${c#*|}"
    grep -E '^verify|time:|hattn:|CUDA error' "$log" | head -8 | sed 's/^/    /'
  done
  [ "$BUILD_OK" -eq 1 ] || tail -40 "$LOGS/build.log"
  grep -E 'error|warning' "$LOGS/build.log" 2>/dev/null | head -20
  # Last: the table.
  if [ -f "$LOGS/accuracy.log" ]; then
    echo "-- hattn accuracy-fp8 (RMSE of O vs float64 of the unquantized inputs)"
    cat "$LOGS/accuracy.log"
  fi
} >"$OUT/summary.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
cat "$OUT/summary.txt"
