#!/usr/bin/env bash
# The FP8 pre-pass's kernel layouts, A/B on a GPU host, from the repository root:
#
#   OUT=/some/dir bash scripts/ab_prepass.sh
#
# Builds what it needs into its own folder (Ninja when installed, Release, ptxas warnings as
# errors), then, each step under its own timeout so a crash or hang in one does not hide the
# others:
#   bench     bench/fp8_prepass_ab_bench: GB/s and % of a same-bytes d2d copy (measured in the
#             same process, interleaved rounds, best of each) per mode x head dim x variant at 16k
#             and 64k tokens (288 MB and 1.2 GB per call)
#   tests     reference_fp8_test, host_fp8_prepass_validation_test (CPU), the ptx wrappers (GPU),
#             fp8_prepass_test (GPU, 88 cases) for the C API's default and for every variant
#             (HATTN_FP8_PREPASS_VARIANT=<chunks>x<blocks per CTA>), all at once: two gtest shards
#             per variant, the float64 reference is CPU-bound
#   sanitize  memcheck and racecheck on small cases (multi-block sequences) for the default, the
#             staged 4x4 variant and the tensor-core layouts (one thread block or a pair per block,
#             V's launch plain or overlapped), those of them that VARIANTS names
# Writes $OUT/summary.txt (printed last: the steps, the test counts, then the table of % of copy)
# and $OUT/logs.tgz (every log).
#
# Environment: OUT (default ./ab_prepass_out), BUILD_DIR (build-prepass), JOBS (16),
#   BUDGET_S (180: the whole run; each step's timeout is clipped to what is left),
#   STEPS ("bench tests sanitize": the steps to run), VARIANTS (default: every layout below, e.g.
#   "default 16x1x2" for the tests and sanitizers of one candidate beside the default; a fourth
#   field 1, as in 16x1x1x1, launches V overlapped with Q and K: Fp8PrepassVariant::v_overlap), CUDA_DEFS
#   (compile-time knobs for every kernel, e.g. -DHATTN_FP8_PREPASS_TABLE_EVICT_LAST=0; give such a
#   build its own BUILD_DIR).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-ab_prepass_out}
BUILD_DIR=${BUILD_DIR:-build-prepass}
JOBS=${JOBS:-16}
BUDGET_S=${BUDGET_S:-180}
RESERVE_S=6   # kept for packing the logs and the summary

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/hattn-ab-prepass.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
STATUS="$LOGS/status.txt"
: >"$STATUS"
SECONDS=0

read -r -a VARIANTS <<<"${VARIANTS:-default 2x1 4x1 8x1 2x4 4x4 8x4 16x1x1 16x1x2 16x1x1x1 16x1x2x1}"
STEPS=${STEPS:-bench tests sanitize}
step() { [[ " $STEPS " == *" $1 "* ]]; }
SHARDS=2
SANITIZE_FILTER='*sq17_sk17_d256_bf16_norope_hadamard:*b2_hq2_hkv2_sq1000_sk1000_d64_fp16_norope:*sq1000_sk1_d256_bf16_norope:*sq17_sk1000_d128_*norope*:*b1_hq4_hkv2_sq1000_sk17_d128_bf16_half_hadamard_strided:*b2_hq6_hkv1_sq1000_sk17_d256_bf16_half_hadamard_strided'

# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh  # limit, record, run, select_generator

# ---- build ------------------------------------------------------------------------------------
select_generator "$BUILD_DIR"
TARGETS=(reference_fp8_test host_fp8_prepass_validation_test ptx_fp8_prepass_wrappers_test fp8_prepass_test
         fp8_prepass_ab_bench)
run build 120 bash -c "cmake -S . -B '$BUILD_DIR' ${gen[*]:-} -DCMAKE_BUILD_TYPE=Release -DHATTN_PTXAS_WERROR=ON \
  -DHATTN_BUILD_CLI=OFF -DHATTN_FP8_BLOCKS_PER_CTA=0 '-DCMAKE_CUDA_FLAGS=${CUDA_DEFS:-}' \
  && cmake --build '$BUILD_DIR' -j $JOBS --target ${TARGETS[*]}"
BUILD_OK=0
grep -q '^build .*PASS' "$STATUS" && BUILD_OK=1

if [ "$BUILD_OK" -eq 1 ]; then
  T="$BUILD_DIR/test"
  # ---- bench first: it is what this run is for ----------------------------------------------
  step bench && run bench 50 "$BUILD_DIR/bench/fp8_prepass_ab_bench" 8
  # ---- tests --------------------------------------------------------------------------------
  if step tests; then
    run reference_fp8_test 20 "$T/reference_fp8_test"
    run host_fp8_prepass_validation_test 20 "$T/host_fp8_prepass_validation_test"
    run ptx_fp8_prepass_wrappers_test 20 "$T/ptx_fp8_prepass_wrappers_test"
    lim=$(limit 70)
    t0=$SECONDS
    if [ "$lim" -ge 5 ]; then
      pids=()
      for v in "${VARIANTS[@]}"; do
        for ((s = 0; s < SHARDS; ++s)); do
          env_v=$v; [ "$v" = default ] && env_v=
          HATTN_FP8_PREPASS_VARIANT=$env_v GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$s \
            timeout -k 5 "$lim" "$T/fp8_prepass_test" >"$LOGS/fp8_prepass_test_${v}_$s.log" 2>&1 &
          pids+=("$!:$v:$s")
        done
      done
      for entry in "${pids[@]}"; do
        pid=${entry%%:*}; rest=${entry#*:}; rc=0
        wait "$pid" || rc=$?
        echo "$rc" >"$LOGS/fp8_prepass_test_${rest/:/_}.rc"
      done
      for v in "${VARIANTS[@]}"; do
        passed=0; failed=0; skipped=0; verdict=PASS
        for ((s = 0; s < SHARDS; ++s)); do
          log="$LOGS/fp8_prepass_test_${v}_$s.log"; rc=$(cat "$LOGS/fp8_prepass_test_${v}_$s.rc")
          p=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+$'); passed=$((passed + ${p:-0}))
          k=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$log" | grep -oE '[0-9]+$'); skipped=$((skipped + ${k:-0}))
          f=$(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log"); failed=$((failed + f))
          if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then verdict="TIMEOUT after $lim s"
          elif [ "$rc" -ne 0 ] && [ "$verdict" = PASS ]; then verdict="FAIL (rc $rc)"; fi
        done
        record "fp8_prepass_test[$v]" "$verdict: $passed passed, $failed failed, $skipped skipped" $((SECONDS - t0))
      done
    else
      record "fp8_prepass_test[*]" "SKIPPED (out of time)" 0
    fi
  fi
  # ---- sanitizers ---------------------------------------------------------------------------
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if step sanitize && [ -x "$SAN" ]; then
    for v in default 4x4 16x1x1 16x1x2 16x1x1x1 16x1x2x1; do
      [[ " ${VARIANTS[*]} " == *" $v "* ]] || continue
      env_v=$v; [ "$v" = default ] && env_v=
      run "memcheck[$v]" 30 env HATTN_FP8_PREPASS_VARIANT=$env_v "$SAN" --tool memcheck --error-exitcode 1 \
        --leak-check full "$T/fp8_prepass_test" --gtest_filter="$SANITIZE_FILTER"
      run "racecheck[$v]" 30 env HATTN_FP8_PREPASS_VARIANT=$env_v "$SAN" --tool racecheck --error-exitcode 1 \
        "$T/fp8_prepass_test" --gtest_filter="$SANITIZE_FILTER"
    done
  elif step sanitize; then
    record sanitizers "SKIPPED (no compute-sanitizer)" 0
  fi
fi

# ---- summary ----------------------------------------------------------------------------------
{
  echo "== hattn FP8 pre-pass layouts A/B on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u '+%Y-%m-%d %H:%M UTC'), ${SECONDS} s"
  if command -v cuobjdump >/dev/null 2>&1 && [ -f "$BUILD_DIR/libhattn.a" ]; then
    echo "fp8_prepass_kernel registers (count x REG/STACK over the instantiations):"
    cuobjdump -res-usage "$BUILD_DIR/libhattn.a" 2>/dev/null | grep -A1 'fp8_prepass_kernel' |
      grep -oE 'REG:[0-9]+ STACK:[0-9]+' | sort | uniq -c | tr '\n' ';' | sed 's/  */ /g; s/^/  /'
    echo
  fi
  for f in "$LOGS"/memcheck*.log "$LOGS"/racecheck*.log; do
    [ -f "$f" ] || continue
    printf '%-34s %s\n' "$(basename "$f" .log)" "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1)"
  done
  for f in "$LOGS"/fp8_prepass_test_*.log; do
    grep -E '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$f" | head -4 | sed "s|^|  $(basename "$f" .log): |"
  done
  echo "-- steps"
  cat "$STATUS"
  if [ -f "$LOGS/bench.log" ]; then
    echo "-- bench (fp8_prepass_ab_bench; full tables with GB/s in logs.tgz: bench.log)"
    sed -n '/^tokens /,$p' "$LOGS/bench.log"
  fi
} >"$OUT/summary.txt"
[ "$BUILD_OK" -eq 1 ] || tail -40 "$LOGS/build.log" >>"$OUT/summary.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
cat "$OUT/summary.txt"
