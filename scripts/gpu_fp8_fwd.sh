#!/usr/bin/env bash
# The FP8 forward (hattn_fwd_fp8) on a GPU host, from the repository root:
#
#   OUT=/some/dir bash scripts/gpu_fp8_fwd.sh
#
# Builds only what it needs into its own folder (libhattn, the FP8 forward's tests and benchmark;
# Ninja when installed, Release, ptxas warnings as errors), then runs, each under its own timeout
# so a crash or hang in one does not hide the others:
#   tests     host_fp8_fragment_test, host_fwd_fp8_validation_test (CPU),
#             fwd_fp8_test (GPU: the kernel against the float64 attention of the dequantized
#             e4m3 inputs, and bf16 -> hattn_fp8_prepass -> hattn_fwd_fp8 against the float64
#             attention of the bf16 inputs; prints "fp8 rel_l2" lines)
#   memcheck  compute-sanitizer memcheck on seven small fwd_fp8_test cases (d 64, 128, 256; two
#             of them walks of several tiles per CTA)
#   racecheck compute-sanitizer racecheck on one small case and one small walk
#   bench     bench/fwd_fp8_bench (TFLOPS of hattn_fwd_fp8 beside hattn_fwd, d128, s 2k-16k)
# Writes $OUT/summary.txt (printed last), $OUT/bench.json and $OUT/logs.tgz (every log).
#
# Environment: OUT (default ./gpu_fp8_fwd_out), BUILD_DIR (build-fp8k), JOBS (16),
#   BUDGET_S (300: the whole run; each step's timeout is clipped to what is left).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-gpu_fp8_fwd_out}
BUILD_DIR=${BUILD_DIR:-build-fp8k}
JOBS=${JOBS:-16}
BUDGET_S=${BUDGET_S:-300}
RESERVE_S=8

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/hattn-fp8k-logs.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
STATUS="$LOGS/status.txt"
: >"$STATUS"
SECONDS=0

SANITIZE_FILTER='Cases/Fp8Kernel.*/b1_hq1_hkv1_sq17_sk17_d128_causal_bf16:Cases/Fp8Kernel.*/b2_hq2_hkv1_sq333_sk444_d128_full_strided_bf16:Cases/Fp8Kernel.*/b1_hq2_hkv2_sq700_sk200_d128_causal_bf16:Cases/Fp8Kernel.*/b1_hq2_hkv1_sq17_sk17_d64_full_bf16:Cases/Fp8Kernel.*/b1_hq2_hkv1_sq17_sk17_d256_full_bf16:Cases/Fp8Kernel.*/b3_hq4_hkv4_sq17_sk17_d64_full_bf16_ctas2:Cases/Fp8Kernel.*/b2_hq4_hkv1_sq1000_sk17_d256_causal_bf16_ctas3'
RACE_FILTER='Cases/Fp8Kernel.*/b1_hq1_hkv1_sq17_sk1000_d128_causal_bf16:Cases/Fp8Kernel.*/b3_hq4_hkv4_sq17_sk17_d128_full_bf16_ctas2'

# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh  # limit, record, run, select_generator

# ---- build ------------------------------------------------------------------------------------
select_generator "$BUILD_DIR"
TARGETS=(hattn_static host_fp8_fragment_test host_fwd_fp8_validation_test fwd_fp8_test fwd_fp8_bench)
run build 190 bash -c "cmake -S . -B '$BUILD_DIR' ${gen[*]:-} -DCMAKE_BUILD_TYPE=Release -DHATTN_PTXAS_WERROR=ON \
  -DHATTN_BUILD_CLI=OFF && cmake --build '$BUILD_DIR' -j $JOBS --target ${TARGETS[*]}"
BUILD_OK=0
grep -q '^build .*PASS' "$STATUS" && BUILD_OK=1

if [ "$BUILD_OK" -eq 1 ]; then
  T="$BUILD_DIR/test"
  run host_fp8_fragment_test 20 "$T/host_fp8_fragment_test"
  run host_fwd_fp8_validation_test 30 "$T/host_fwd_fp8_validation_test"
  # The kernel's error first: a broken kernel shows here before anything slower runs.
  run fwd_fp8_test 80 "$T/fwd_fp8_test"
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$SAN" ]; then
    run memcheck 35 "$SAN" --tool memcheck --error-exitcode 1 "$T/fwd_fp8_test" --gtest_filter="$SANITIZE_FILTER"
    run racecheck 25 "$SAN" --tool racecheck --error-exitcode 1 "$T/fwd_fp8_test" --gtest_filter="$RACE_FILTER"
  else
    record memcheck "SKIPPED (no compute-sanitizer)" 0
    record racecheck "SKIPPED (no compute-sanitizer)" 0
  fi
  run bench 60 "$BUILD_DIR/bench/fwd_fp8_bench" --benchmark_out="$OUT/bench.json" --benchmark_out_format=json
fi

# ---- summary ----------------------------------------------------------------------------------
{
  echo "== hattn FP8 forward on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u '+%Y-%m-%d %H:%M UTC'), ${SECONDS} s"
  if command -v cuobjdump >/dev/null 2>&1 && [ -f "$BUILD_DIR/libhattn.a" ]; then
    echo "fwd_fp8_kernel resource usage (count x REG/STACK/LOCAL):"
    cuobjdump -res-usage "$BUILD_DIR/libhattn.a" 2>/dev/null | grep -A1 'fwd_fp8_kernel' |
      grep -oE 'REG:[0-9]+ STACK:[0-9]+|LOCAL:[0-9]+' | paste -d' ' - - | sort | uniq -c | sed 's/^/   /'
  fi
  for t in host_fp8_fragment_test host_fwd_fp8_validation_test fwd_fp8_test memcheck racecheck; do
    [ -f "$LOGS/$t.log" ] || continue
    line=$(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$LOGS/$t.log" | tr '\n' ' ')
    san=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/$t.log" | tail -1)
    printf '%-30s %s %s\n' "$t" "$line" "$san"
    grep -E '^\[  FAILED  \] ' "$LOGS/$t.log" | grep -v 'listed below' | head -10 | sed 's/^/    /'
  done
  if [ -f "$LOGS/fwd_fp8_test.log" ]; then
    echo "-- errors (O rel L2 vs float64; kernel: dequantized inputs, e2e: bf16 inputs)"
    grep -E '^fp8 ' "$LOGS/fwd_fp8_test.log" | sed 's/^/  /' | head -40
  fi
  if [ -f "$OUT/bench.json" ]; then
    echo "-- bench (TFLOPS; d128, 16k tokens, 16 heads)"
    python3 - "$OUT/bench.json" <<'PY' 2>/dev/null || grep -E '^fwd' "$LOGS/bench.log"
import json, sys
rows = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type", "iteration") != "iteration" or "TFLOPS" not in b:
        continue
    name = b["name"].split("/min_time")[0].split("/manual_time")[0]
    kind = "fp8" if name.startswith("fwd_fp8/") else "transpose" if name.startswith("transpose/") else "bf16"
    key = name.replace("fwd_fp8/e4m3/", "").replace("transpose/e4m3/", "").replace("fwd/bf16/", "")
    rows.setdefault(key, {})[kind] = b["TFLOPS"]
    if kind == "transpose":
        rows[key]["transpose_us"] = b["real_time"]
print(f'  {"shape":<28} {"bf16":>8} {"fp8":>8} {"fp8/bf16":>9} {"V^T us":>8} {"fp8 w/o V^T":>12}')
for key, r in rows.items():
    bf, f8, tr = r.get("bf16"), r.get("fp8"), r.get("transpose")
    ratio = f"{f8 / bf:9.2f}" if bf and f8 else f"{'':9}"
    t_us = f'{r["transpose_us"]:8.1f}' if "transpose_us" in r else f"{'':8}"
    without = f"{1.0 / (1.0 / f8 - 1.0 / tr):12.1f}" if f8 and tr and tr > f8 else ""
    print(f'  {key:<28} {bf or 0:8.1f} {f8 or 0:8.1f} {ratio} {t_us} {without}')
PY
  fi
  echo "-- steps"
  cat "$STATUS"
} >"$OUT/summary.txt"
[ "$BUILD_OK" -eq 1 ] || tail -40 "$LOGS/build.log" >>"$OUT/summary.txt"
grep -E 'error|warning' "$LOGS/build.log" 2>/dev/null | head -20 >>"$OUT/summary.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
cat "$OUT/summary.txt"
