#!/usr/bin/env bash
# The FP8 pre-pass on a GPU host, from the repository root:
#
#   OUT=/some/dir bash scripts/gpu_fp8_prepass.sh
#
# Builds only what the pre-pass needs into its own folder (libhattn, its tests, its benchmark;
# Ninja when installed, Release, ptxas warnings as errors), then runs, each under its own timeout
# so a crash or hang in one does not hide the others:
#   tests     reference_fp8_test and host_fp8_prepass_validation_test (CPU),
#             ptx_fp8_prepass_wrappers_test (GPU: the e4m3 cvt and the global vector loads/stores),
#             fp8_prepass_test (GPU: every rope x Hadamard x head dim x dtype x layout against the
#             float64 reference)
#   bench     bench/fp8_prepass_bench (GB/s of the pre-pass against a same-bytes d2d copy)
#   memcheck  compute-sanitizer memcheck on four small fp8_prepass_test cases (d 64/128/256, all
#             rope modes, strided, GQA, a multi-block sequence)
#   racecheck compute-sanitizer racecheck on the same cases
#   A/B       the same build folder reconfigured with -DHATTN_FP8_BLOCKS_PER_CTA=4 (four blocks per
#             thread block, the next one staged in shared memory by cp.async during the current
#             one's math; RoPE kernels too where they fit): rebuilds only the pre-pass's three translation
#             units, runs the no-RoPE fp8_prepass_test cases, memcheck and racecheck on small ones,
#             and the bench's copy / quant / hadamard rows (bench_staged.json in logs.tgz); the
#             summary shows them beside the default build's.
# Writes $OUT/summary.txt (printed last), $OUT/bench.json and $OUT/logs.tgz (every log).
#
# Environment: OUT (default ./gpu_fp8_prepass_out), BUILD_DIR (build-fp8), JOBS (16),
#   BUDGET_S (300: the whole run; each step's timeout is clipped to what is left),
#   STEPS ("tests bench sanitize staged": which of the steps above run; "bench" alone builds only
#   the library and the benchmark, for the copy-bandwidth figure in a short call).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-gpu_fp8_prepass_out}
BUILD_DIR=${BUILD_DIR:-build-fp8}
JOBS=${JOBS:-16}
BUDGET_S=${BUDGET_S:-300}
STEPS=${STEPS:-"tests bench sanitize staged"}
want() { [[ " $STEPS " == *" $1 "* ]]; }
RESERVE_S=8   # kept for packing the logs and the summary

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/hattn-fp8-logs.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
STATUS="$LOGS/status.txt"
: >"$STATUS"
SECONDS=0

# A few small cases for the sanitizers (gtest filter).
SANITIZE_FILTER='*sq17_sk17_d256_bf16_norope_hadamard:*sq17_sk17_d128_fp16_interleaved_hadamard_strided:*sq17_sk17_d64_fp16_half_hadamard:*b1_hq4_hkv2_sq1000_sk17_d128_bf16_half_hadamard_strided'

# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh  # limit, record, run, select_generator

# ---- build ------------------------------------------------------------------------------------
select_generator "$BUILD_DIR"
TARGETS=(hattn_shared hattn_static fp8_prepass_bench)
if want tests || want sanitize || want staged; then
  TARGETS+=(reference_fp8_test host_fp8_prepass_validation_test ptx_fp8_prepass_wrappers_test fp8_prepass_test)
fi
# (timeout runs programs, not shell functions: the two steps go through bash -c.)
run build 200 bash -c "cmake -S . -B '$BUILD_DIR' ${gen[*]:-} -DCMAKE_BUILD_TYPE=Release -DHATTN_PTXAS_WERROR=ON \
  -DHATTN_BUILD_CLI=OFF -DHATTN_FP8_BLOCKS_PER_CTA=0 && cmake --build '$BUILD_DIR' -j $JOBS --target ${TARGETS[*]}"
BUILD_OK=0
grep -q '^build .*PASS' "$STATUS" && BUILD_OK=1
SPILLS=$(grep -ciE 'spill (stores|loads) [1-9]|bytes spill' "$LOGS/build.log" 2>/dev/null | head -1)

if [ "$BUILD_OK" -eq 1 ]; then
  T="$BUILD_DIR/test"
  # ---- tests --------------------------------------------------------------------------------
  if want tests; then
    run reference_fp8_test 60 "$T/reference_fp8_test"
    run host_fp8_prepass_validation_test 60 "$T/host_fp8_prepass_validation_test"
    run ptx_fp8_prepass_wrappers_test 30 "$T/ptx_fp8_prepass_wrappers_test"
    run fp8_prepass_test 150 "$T/fp8_prepass_test"
  fi
  # ---- bench --------------------------------------------------------------------------------
  want bench && run bench 90 "$BUILD_DIR/bench/fp8_prepass_bench" --benchmark_out="$OUT/bench.json" --benchmark_out_format=json
  # ---- sanitizers ---------------------------------------------------------------------------
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if want sanitize && [ -x "$SAN" ]; then
    run memcheck 60 "$SAN" --tool memcheck --error-exitcode 1 --leak-check full "$T/fp8_prepass_test" \
      --gtest_filter="$SANITIZE_FILTER"
    run racecheck 60 "$SAN" --tool racecheck --error-exitcode 1 "$T/fp8_prepass_test" --gtest_filter="$SANITIZE_FILTER"
  elif want sanitize; then
    record memcheck "SKIPPED (no compute-sanitizer)" 0
    record racecheck "SKIPPED (no compute-sanitizer)" 0
  fi
  # ---- A/B: four blocks per thread block, staged through shared memory ----------------------
  want staged && run build_staged 120 bash -c "cmake -S . -B '$BUILD_DIR' -DHATTN_FP8_BLOCKS_PER_CTA=4 && \
    cmake --build '$BUILD_DIR' -j $JOBS --target fp8_prepass_test fp8_prepass_bench"
  if grep -q '^build_staged .*PASS' "$STATUS"; then
    run fp8_prepass_test_staged 60 "$T/fp8_prepass_test" --gtest_filter='*norope*'
    if [ -x "$SAN" ]; then
      run memcheck_staged 60 "$SAN" --tool memcheck --error-exitcode 1 "$T/fp8_prepass_test" \
        --gtest_filter='*sq17_sk17*norope*'
      run racecheck_staged 60 "$SAN" --tool racecheck --error-exitcode 1 "$T/fp8_prepass_test" \
        --gtest_filter='*sq17_sk17*norope*'
    fi
    run bench_staged 60 "$BUILD_DIR/bench/fp8_prepass_bench" --benchmark_filter='^(copy|prepass/quant|prepass/hadamard)/' \
      --benchmark_out="$LOGS/bench_staged.json" --benchmark_out_format=json
  fi
fi

# ---- summary ----------------------------------------------------------------------------------
{
  echo "== hattn FP8 pre-pass on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u '+%Y-%m-%d %H:%M UTC'), ${SECONDS} s"
  echo "ptxas: spills are build errors here (--warn-on-spills + HATTN_PTXAS_WERROR); spill lines in the build log: ${SPILLS:-0}"
  if command -v cuobjdump >/dev/null 2>&1 && [ -f "$BUILD_DIR/libhattn.a" ]; then
    echo "fp8_prepass_kernel resource usage (count x REG/STACK/LOCAL over the instantiations):"
    cuobjdump -res-usage "$BUILD_DIR/libhattn.a" 2>/dev/null | grep -A1 'fp8_prepass_kernel' |
      grep -oE 'REG:[0-9]+ STACK:[0-9]+|LOCAL:[0-9]+' | paste -d' ' - - | sort | uniq -c | sed 's/^/   /'
  fi
  for t in reference_fp8_test host_fp8_prepass_validation_test ptx_fp8_prepass_wrappers_test fp8_prepass_test memcheck \
           racecheck fp8_prepass_test_staged memcheck_staged racecheck_staged; do
    [ -f "$LOGS/$t.log" ] || continue
    line=$(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$LOGS/$t.log" | tr '\n' ' ')
    san=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/$t.log" | tail -1)
    printf '%-34s %s %s\n' "$t" "$line" "$san"
    grep -E '^\[  FAILED  \] ' "$LOGS/$t.log" | grep -v 'listed below' | head -8 | sed 's/^/    /'
  done
  if [ -f "$LOGS/bench.log" ]; then
    echo "-- bench (GBps of read + written bytes; pct_of_copy = against the same-bytes d2d copy;"
    echo "   before = the previous kernel version on an H200: three launches, signs hashed per column;"
    echo "   staged = the A/B build, 4 blocks per thread block through shared memory, its own copy baseline)"
    python3 - "$OUT/bench.json" "$LOGS/bench_staged.json" <<'PY' 2>/dev/null || grep -E '^(copy|prepass)/' "$LOGS/bench.log"
import json, os, sys
def load(path):
    if not os.path.exists(path):
        return {}
    return {b["name"].split("/manual_time")[0]: b for b in json.load(open(path))["benchmarks"]
            if b.get("run_type", "iteration") == "iteration" and "GBps" in b}
# pct_of_copy of the first kernel (same bench, same shapes): quant / hadamard / rope_half+hadamard /
# rope_interleaved+hadamard at d 64, 128, 256, for 16k and 64k tokens.
before = {}
for tokens, rows in (("b1_s16384", ((74.3, 58.2, 47.8, 47.4), (81.4, 57.5, 46.1, 45.9), (78.7, 50.4, 40.3, 40.5))),
                     ("b4_s16384", ((78.7, 61.4, 50.3, 49.8), (86.9, 59.1, 52.0, 51.1), (86.5, 51.3, 45.3, 45.1)))):
    for d, row in zip((64, 128, 256), rows):
        for mode, pct in zip(("quant", "hadamard", "rope_half+hadamard", "rope_interleaved+hadamard"), row):
            before[f"prepass/{mode}/{tokens}_d{d}"] = pct
staged = load(sys.argv[2])
for name, b in load(sys.argv[1]).items():
    pct = f'{b["pct_of_copy"]:6.1f} % of copy' if "pct_of_copy" in b else " " * 15
    old = f'   before {before[name]:5.1f} %' if name in before else ""
    st = staged.get(name, {})
    new = f'   staged {st["pct_of_copy"]:5.1f} %' if "pct_of_copy" in st else ""
    print(f'  {name:<46} {b["GBps"]:8.0f} GB/s {b["us_per_call"]:9.1f} us  {pct}{old}{new}')
PY
  fi
  echo "-- steps"
  cat "$STATUS"
} >"$OUT/summary.txt"
[ "$BUILD_OK" -eq 1 ] || tail -40 "$LOGS/build.log" >>"$OUT/summary.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
cat "$OUT/summary.txt"
