#!/usr/bin/env bash
# The FP8 forward's quick check on a GPU host, from the repository root (for a change to the FP8
# kernel or its scheduler, before the whole suite):
#
#   OUT=/some/dir bash scripts/gpu_fp8_check.sh
#
# Configures build/ as CI does (scripts/configure.sh), builds the FP8 forward's targets with every
# core, then, each step under its own timeout:
#   tests     fwd_fp8_test (every case, four shards at once: the float64 reference is CPU-bound),
#             host_fwd_fp8_validation_test
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck (all at once) on fwd_fp8_test
#             cases matching SANITIZE_FILTER (default: the schedule-workspace cases -- the dynamic
#             causal walk -- with the in-kernel V transpose, and three CTAs claiming many tiles),
#             and on `hattn fwd --dtype e4m3` causal runs with and without the workspace
# Writes $OUT/summary.txt (printed last) and $OUT/logs.tgz.
# Environment: OUT (./gpu_fp8_check_out), JOBS (nproc), BUDGET_S (300), STEPS ("tests sanitize").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-gpu_fp8_check_out}
JOBS=${JOBS:-$(nproc)}
BUDGET_S=${BUDGET_S:-300}
STEPS=${STEPS:-tests sanitize}
SANITIZE_FILTER=${SANITIZE_FILTER:-'Cases/Fp8Kernel.*/b2_hq3_hkv3_sq1031_sk1100_d*_causal_bf16_sched:Cases/Fp8Kernel.*/b1_hq4_hkv2_sq1100_sk1100_d*_causal_bf16_ctas3_sched'}
SHARDS=4
RESERVE_S=5
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/hattn-fp8-check.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
STATUS="$LOGS/status.txt"
: >"$STATUS"
SECONDS=0
step() { [[ " $STEPS " == *" $1 "* ]]; }

# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh  # limit, record, run

run build 200 bash -c "bash scripts/configure.sh >/dev/null && cmake --build build -j $JOBS --target \
  fwd_fp8_test host_fwd_fp8_validation_test hattn_cli hattn_shared"
T=build/test
if grep -q '^build .*PASS' "$STATUS"; then
  if step tests; then
    lim=$(limit 150)
    t0=$SECONDS
    spids=()
    for s in $(seq 0 $((SHARDS - 1))); do
      GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$s timeout -k 5 "$lim" "$T/fwd_fp8_test" >"$LOGS/fwd_fp8_test_$s.log" 2>&1 &
      spids+=($!)
    done
    rc=0
    for pid in "${spids[@]}"; do wait "$pid" || rc=$?; done
    total() { cat "$LOGS"/fwd_fp8_test_*.log | grep -oE "^\[  $1 *\] [0-9]+" | awk '{ n += $NF } END { print n + 0 }'; }
    failed=$(cat "$LOGS"/fwd_fp8_test_*.log | grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$')
    record fwd_fp8_test "$([ "$rc" -eq 0 ] && echo PASS || echo "FAIL (rc $rc)"): $(total PASSED) passed, $failed failed, $(total SKIPPED) skipped" $((SECONDS - t0))
    run host_fwd_fp8_validation_test 20 "$T/host_fwd_fp8_validation_test"
  fi
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if step sanitize && [ -x "$SAN" ]; then
    lim=$(limit 150)
    t0=$SECONDS
    pids=()
    for tool in memcheck racecheck synccheck; do
      timeout -k 5 "$lim" "$SAN" --tool "$tool" --error-exitcode 99 "$T/fwd_fp8_test" --gtest_filter="$SANITIZE_FILTER" \
        >"$LOGS/san_fwd_fp8_test_$tool.log" 2>&1 & pids+=("$!:fwd_fp8_test_$tool")
      for ws in "" --no-workspace; do
        timeout -k 5 "$lim" "$SAN" --tool "$tool" --error-exitcode 99 build/bin/hattn fwd --dtype e4m3 --batch 4 \
          --heads 40 --seqlen 1100 --dim 128 --causal --no-verify --iters 0 --warmup 0 $ws \
          >"$LOGS/san_cli_${tool}${ws:+_nows}.log" 2>&1 & pids+=("$!:cli_${tool}${ws:+_nows}")
      done
    done
    for entry in "${pids[@]}"; do
      rc=0; wait "${entry%%:*}" || rc=$?
      name=${entry#*:}
      summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/san_$name.log" | tail -1)
      record "sanitize[$name]" "$([ "$rc" -eq 0 ] && echo PASS || echo "FAIL (rc $rc)"): ${summary:-no summary}" $((SECONDS - t0))
    done
  fi
fi

{
  echo "== hattn FP8 forward check on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u '+%Y-%m-%d %H:%M UTC'), ${SECONDS} s"
  cat "$STATUS"
  grep -hE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$LOGS"/fwd_fp8_test_*.log 2>/dev/null | head -20
  grep -q '^build .*PASS' "$STATUS" || tail -40 "$LOGS/build.log"
} >"$OUT/summary.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
cat "$OUT/summary.txt"
