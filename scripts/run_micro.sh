#!/usr/bin/env bash
# Run the four microbenchmarks (GPU host, after building into BUILD_DIR), then summarise them.
#   scripts/run_micro.sh OUT_DIR [BUILD_DIR]          (BUILD_DIR default: build)
# Writes OUT_DIR/{mufu,wgmma,tma,exp_vs_mma}.json (Google Benchmark JSON) and .txt (console,
# incl. the exp-vs-mma table and the exp2 accuracy line), micro.md (markdown tables from
# plot_micro.py), micro.png, check_sass.txt. Takes well under a minute on an H200.
# Exit status: non-zero if any benchmark, the summary or the SASS check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/run_micro.sh OUT_DIR [BUILD_DIR]}
BUILD_DIR=${2:-build}
MIN_TIME_S=0.05           # per benchmark case, in measured GPU time: the cases are ms-scale
BENCH_TIMEOUT_S=150       # a hung kernel must not eat the GPU session
mkdir -p "$OUT"

# Google Benchmark >= 1.8 wants a unit suffix ("0.05s"); 1.7 only takes a bare number.
probe="$BUILD_DIR/bench/mufu_bench"
MIN_TIME="${MIN_TIME_S}s"
if ! "$probe" --benchmark_min_time="$MIN_TIME" --benchmark_list_tests=true >/dev/null 2>&1; then
  MIN_TIME="$MIN_TIME_S"
fi

status=0
for name in mufu wgmma tma exp_vs_mma; do
  bin="$BUILD_DIR/bench/${name}_bench"
  echo "== $bin"
  if ! timeout "$BENCH_TIMEOUT_S" "$bin" --benchmark_min_time="$MIN_TIME" \
       --benchmark_out="$OUT/$name.json" --benchmark_out_format=json 2>&1 | tee "$OUT/$name.txt"; then
    echo "run_micro: $name failed" >&2
    status=1
  fi
done

jsons=()
for name in mufu wgmma tma exp_vs_mma; do [ -s "$OUT/$name.json" ] && jsons+=("$OUT/$name.json"); done
if [ ${#jsons[@]} -gt 0 ]; then
  python3 scripts/plot_micro.py "${jsons[@]}" --png "$OUT/micro.png" | tee "$OUT/micro.md" || status=1
else
  echo "run_micro: no JSON results to summarise" >&2
  status=1
fi

scripts/check_sass.sh "$BUILD_DIR" 2>&1 | tee "$OUT/check_sass.txt" || status=1
exit $status
