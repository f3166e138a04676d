#!/usr/bin/env bash
# The 16-bit forward's quick check on a GPU host, from the repository root (for a change to the
# forward kernel or its scheduler, before the whole suite):
#
#   OUT=/some/dir bash scripts/gpu_fwd_check.sh
#
# Configures build/ as CI does (scripts/configure.sh), builds the forward's targets with every core,
# then, each step under its own timeout:
#   tests     fwd_test (every case, two shards at once), host_fwd_validation_test, host_sm90_blocks_test
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck (all at once) on fwd_test cases
#             matching SANITIZE_FILTER (default: the workspace cases -- the dynamic causal walk -- at
#             every head dim on small shapes, and one with many tiles per thread block), and on
#             `hattn fwd` causal runs with and without the workspace on a persistent grid
# Writes $OUT/summary.txt (printed last) and $OUT/logs.tgz.
# Environment: OUT (./gpu_fwd_check_out), JOBS (nproc), BUDGET_S (300), STEPS ("tests sanitize").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-gpu_fwd_check_out}
JOBS=${JOBS:-$(nproc)}
BUDGET_S=${BUDGET_S:-300}
STEPS=${STEPS:-tests sanitize}
SANITIZE_FILTER=${SANITIZE_FILTER:-'Workspace/*_q1031_k1100_*:Workspace/*_q1100_k1031_*:Workspace/*q2049_k2049*'}
RESERVE_S=5
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/hattn-fwd-check.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
STATUS="$LOGS/status.txt"
: >"$STATUS"
SECONDS=0
step() { [[ " $STEPS " == *" $1 "* ]]; }

# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh  # limit, record, run

run build 200 bash -c "bash scripts/configure.sh >/dev/null && cmake --build build -j $JOBS --target \
  fwd_test host_fwd_validation_test host_sm90_blocks_test hattn_cli hattn_shared"
T=build/test
if grep -q '^build .*PASS' "$STATUS"; then
  if step tests; then
    lim=$(limit 150)
    t0=$SECONDS
    spids=()
    for s in 0 1; do
      GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$s timeout -k 5 "$lim" "$T/fwd_test" >"$LOGS/fwd_test_$s.log" 2>&1 &
      spids+=($!)
    done
    rc=0
    for pid in "${spids[@]}"; do wait "$pid" || rc=$?; done
    total() { cat "$LOGS"/fwd_test_*.log | grep -oE "^\[  $1 *\] [0-9]+" | awk '{ n += $NF } END { print n + 0 }'; }
    passed=$(total PASSED)
    skipped=$(total SKIPPED)
    failed=$(cat "$LOGS"/fwd_test_*.log | grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$')
    record fwd_test "$([ "$rc" -eq 0 ] && echo PASS || echo "FAIL (rc $rc)"): ${passed:-0} passed, $failed failed, ${skipped:-0} skipped" $((SECONDS - t0))
    run host_fwd_validation_test 20 "$T/host_fwd_validation_test"
    run host_sm90_blocks_test 20 "$T/host_sm90_blocks_test"
  fi
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if step sanitize && [ -x "$SAN" ]; then
    lim=$(limit 150)
    t0=$SECONDS
    pids=()
    for tool in memcheck racecheck synccheck; do
      timeout -k 5 "$lim" "$SAN" --tool "$tool" --error-exitcode 99 "$T/fwd_test" --gtest_filter="$SANITIZE_FILTER" \
        >"$LOGS/san_fwd_test_$tool.log" 2>&1 & pids+=("$!:fwd_test_$tool")
      for ws in "" --no-workspace; do
        timeout -k 5 "$lim" "$SAN" --tool "$tool" --error-exitcode 99 build/bin/hattn fwd --batch 4 --heads 40 \
          --seqlen 1100 --dim 64 --causal --no-verify --iters 0 --warmup 0 $ws \
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
  echo "== hattn forward check on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u '+%Y-%m-%d %H:%M UTC'), ${SECONDS} s"
  cat "$STATUS"
  grep -hE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$LOGS"/fwd_test_*.log 2>/dev/null | head -20
  grep -q '^build .*PASS' "$STATUS" || tail -40 "$LOGS/build.log"
} >"$OUT/summary.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
cat "$OUT/summary.txt"
