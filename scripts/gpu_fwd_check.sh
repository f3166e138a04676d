#!/usr/bin/env bash
# A forward's quick check on a GPU host, from the repository root (for a change to a forward kernel
# or its scheduler, before the whole suite):
#
#   OUT=/some/dir bash scripts/gpu_fwd_check.sh                 # the 16-bit forward
#   OUT=/some/dir FORWARD=fp8 bash scripts/gpu_fwd_check.sh     # the FP8 (e4m3) forward
#
# Configures build/ (build-defs/ with CUDA_DEFS) as CI does (scripts/configure.sh), builds that forward's targets with every
# core, then, each step under its own timeout:
#   tests     fwd_test (two shards at once), host_fwd_validation_test, host_sm90_blocks_test; or with
#             FORWARD=fp8 fwd_fp8_test (four shards: its float64 reference is CPU-bound),
#             host_fwd_fp8_validation_test; then stress_test's PartialGpu test of that forward (its
#             split tail on the 1 or 5 SMs a blocker kernel leaves free)
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck (all at once) on the test cases
#             matching SANITIZE_FILTER and on causal `hattn fwd` runs on a persistent grid with and
#             without the scheduler workspace. Default filters: the cases with a workspace (the
#             dynamic causal walk) at every head dim on small shapes -- 16-bit: 1031 x 1100 keys
#             both ways and one with many tiles per thread block, d256 full and causal over
#             several tiles per thread block (its O in two halves through one buffer), and (not
#             under racecheck: too slow there) d128 full masks whose last pass is split; FP8:
#             1031 x 1300 with the in-kernel V transpose, three CTAs claiming 28-44 tiles, d64 at
#             600 x 700, and a split tail on three CTAs
# Writes $OUT/summary.txt (printed last) and $OUT/logs.tgz.
# Environment: FORWARD (bf16 | fp8), OUT (./gpu_fwd_check_out), JOBS (nproc), BUDGET_S (300),
#   STEPS ("tests sanitize"), SANITIZE_FILTER, RACECHECK_FILTER (racecheck's, when SANITIZE_FILTER is
#   not given: a part of the default set that fits its time), CUDA_DEFS (compile-time knobs, e.g.
#   -DHATTN_FWD_FP8_SKIP_HIDDEN_BLOCKS=0: then built in build-defs/).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

FORWARD=${FORWARD:-bf16}
OUT=${OUT:-gpu_fwd_check_out}
JOBS=${JOBS:-$(nproc)}
BUDGET_S=${BUDGET_S:-300}
STEPS=${STEPS:-tests sanitize}
CUDA_DEFS=${CUDA_DEFS:-}
case "$FORWARD" in
  bf16)
    TEST=fwd_test SHARDS=2 HOST_TESTS="host_fwd_validation_test host_sm90_blocks_test"
    PARTIAL_GPU_TEST=PartialGpu.SplitTailFinishes16Bit
    CLI_ARGS=(--dim 64 --seqlen 1100)
    DEFAULT_FILTER='Workspace/*_q1031_k1100_*:Workspace/*_q1100_k1031_*:Workspace/*q2049_k2049*:Workspace/*_q1152_k3000_*:Features/*d256_bf16_*_b3_h32x4_*'
    # racecheck runs 10-40x slower than the others: the bf16 causal cases of the first set (both
    # ways), d64's causal 192-row tiles walking ~2 tiles per thread block and d256's half-width O
    # buffer over several tiles per thread block (Features b3 h32x4, causal: 18 s) fit its 150 s
    # (~110 s); the full-mask cases stay with memcheck and synccheck (the whole set needs ~300 s).
    DEFAULT_RACECHECK_FILTER='Workspace/*_bf16_causal_*_q1031_k1100_*:Workspace/*_bf16_causal_*_q1100_k1031_*:Workspace/*_causal_*_q1100_k1300_*:Features/*d256_bf16_causal_b3_h32x4_*' ;;
  fp8)
    TEST=fwd_fp8_test SHARDS=4 HOST_TESTS="host_fwd_fp8_validation_test"
    PARTIAL_GPU_TEST=PartialGpu.SplitTailFinishesFp8
    CLI_ARGS=(--dtype e4m3 --dim 128 --seqlen 1300)  # d128's dynamic walk starts at 1280 keys
    DEFAULT_FILTER='Cases/Fp8Kernel.*/b2_hq3_hkv3_sq1031_sk1300_d*_causal_bf16_sched:Cases/Fp8Kernel.*/b1_hq4_hkv2_sq1300_sk1300_d*_causal_bf16_ctas3_sched:Cases/Fp8Kernel.*/b2_hq4_hkv2_sq600_sk700_d64_causal_bf16_sched:Cases/Fp8Kernel.*/b1_hq4_hkv2_sq1024_sk3000_d128_full_bf16_ctas3_sched'
    DEFAULT_RACECHECK_FILTER=$DEFAULT_FILTER ;;
  *) echo "gpu_fwd_check.sh: FORWARD='$FORWARD' is not bf16 or fp8" >&2; exit 2 ;;
esac
RACECHECK_FILTER=${RACECHECK_FILTER:-${SANITIZE_FILTER:-$DEFAULT_RACECHECK_FILTER}}  # a given SANITIZE_FILTER serves all three
SANITIZE_FILTER=${SANITIZE_FILTER:-$DEFAULT_FILTER}
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

# shellcheck disable=SC2086  # HOST_TESTS is a list of target names
# With CUDA_DEFS, its own build folder configured with them (configure.sh passes extra arguments
# to cmake).
B=build
[ -n "$CUDA_DEFS" ] && B=build-defs
run build 200 env BUILD_DIR="$B" CUDA_DEFS="$CUDA_DEFS" bash -c 'if [ -n "$CUDA_DEFS" ]; then
    bash scripts/configure.sh "-DCMAKE_CUDA_FLAGS=$CUDA_DEFS" "-DCMAKE_CXX_FLAGS=$CUDA_DEFS"
  else bash scripts/configure.sh; fi >/dev/null && cmake --build "$BUILD_DIR" -j '"$JOBS"' --target '"$TEST $HOST_TESTS"' stress_test hattn_cli hattn_shared'
T=$B/test
if grep -q '^build .*PASS' "$STATUS"; then
  if step tests; then
    lim=$(limit 150)
    t0=$SECONDS
    spids=()
    for s in $(seq 0 $((SHARDS - 1))); do
      GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$s timeout -k 5 "$lim" "$T/$TEST" >"$LOGS/${TEST}_$s.log" 2>&1 &
      spids+=($!)
    done
    rc=0
    for pid in "${spids[@]}"; do wait "$pid" || rc=$?; done
    total() { cat "$LOGS/${TEST}"_*.log | grep -oE "^\[  $1 *\] [0-9]+" | awk '{ n += $NF } END { print n + 0 }'; }
    failed=$(cat "$LOGS/${TEST}"_*.log | grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$')
    record "$TEST" "$([ "$rc" -eq 0 ] && echo PASS || echo "FAIL (rc $rc)"): $(total PASSED) passed, $failed failed, $(total SKIPPED) skipped" $((SECONDS - t0))
    for host_test in $HOST_TESTS; do run "$host_test" 20 "$T/$host_test"; done
    run partial_gpu 60 "$T/stress_test" --gtest_filter="$PARTIAL_GPU_TEST"
  fi
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if step sanitize && [ -x "$SAN" ]; then
    lim=$(limit 150)
    t0=$SECONDS
    pids=()
    for tool in memcheck racecheck synccheck; do
      filter=$SANITIZE_FILTER
      [ "$tool" = racecheck ] && filter=$RACECHECK_FILTER
      timeout -k 5 "$lim" "$SAN" --tool "$tool" --error-exitcode 99 "$T/$TEST" --gtest_filter="$filter" \
        >"$LOGS/san_${TEST}_$tool.log" 2>&1 & pids+=("$!:${TEST}_$tool")
      for ws in "" --no-workspace; do
        timeout -k 5 "$lim" "$SAN" --tool "$tool" --error-exitcode 99 "$B/bin/hattn" fwd "${CLI_ARGS[@]}" --batch 4 \
          --heads 40 --causal --no-verify --iters 0 --warmup 0 $ws \
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
  echo "== hattn $FORWARD forward check on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u '+%Y-%m-%d %H:%M UTC'), ${SECONDS} s"
  cat "$STATUS"
  grep -hE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$LOGS/${TEST}"_*.log 2>/dev/null | head -20
  grep -q '^build .*PASS' "$STATUS" || tail -40 "$LOGS/build.log"
} >"$OUT/summary.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
cat "$OUT/summary.txt"
