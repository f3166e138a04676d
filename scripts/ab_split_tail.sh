#!/usr/bin/env bash
# The split tail's A/B on a GPU host, from the repository root: full-mask problems whose query
# tiles are all whole (16k tokens, heads = 2048 / d) timed by `hattn fwd` with the scheduler
# workspace (the split tail: the last pass's tiles cut over their KV blocks) and without it (whole
# tiles only), interleaved round by round in one machine session, both forwards.
#
#   OUT=/some/dir bash scripts/ab_split_tail.sh
#   (overrides: ROUNDS=3, DTYPES="bf16 e4m3", DIMS="128 256", SEQLENS="512 1024 2048 4096 8192 16384",
#    ITERS=30, JOBS=nproc)
# Writes $OUT/ab_split_tail.log (every run) and prints a table: the best of the rounds per shape,
# with and without, and their ratio.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-ab_split_tail_out}
ROUNDS=${ROUNDS:-3}
DTYPES=${DTYPES:-"bf16 e4m3"}
DIMS=${DIMS:-"128 256"}
SEQLENS=${SEQLENS:-"512 1024 2048 4096 8192 16384"}
ITERS=${ITERS:-30}
JOBS=${JOBS:-$(nproc)}
TOKENS=16384
HEAD_BUDGET=2048
mkdir -p "$OUT"
LOG="$OUT/ab_split_tail.log"
: >"$LOG"

bash scripts/configure.sh >/dev/null && cmake --build build -j "$JOBS" --target hattn_cli >/dev/null || {
  echo "ab_split_tail: build failed" >&2; exit 1; }

for round in $(seq 1 "$ROUNDS"); do
  for dtype in $DTYPES; do
    for d in $DIMS; do
      for s in $SEQLENS; do
        for ws in "" --no-workspace; do
          tflops=$(build/bin/hattn fwd --dtype "$dtype" --dim "$d" --seqlen "$s" --batch $((TOKENS / s)) \
                     --heads $((HEAD_BUDGET / d)) --no-verify --iters "$ITERS" $ws 2>&1 |
                   sed -n 's/.*), \([0-9.]*\) TFLOPS,.*/\1/p' | tail -1)
          echo "$round $dtype $d $s ${ws:-ws} ${tflops:-FAIL}" >>"$LOG"
        done
      done
    done
  done
done

# Best of the rounds per (dtype, d, seqlen, with / without).
awk '{ k = $2 " d" $3 " s" $4; v = ($6 == "FAIL") ? 0 : $6
       if ($5 == "ws") { if (v > w[k]) w[k] = v } else { if (v > n[k]) n[k] = v }
       if (!(k in seen)) { seen[k] = 1; order[++cnt] = k } }
     END { printf "%-18s %10s %10s %7s\n", "shape", "split", "whole", "ratio"
           for (i = 1; i <= cnt; ++i) { k = order[i]
             printf "%-18s %10.1f %10.1f %7.3f\n", k, w[k], n[k], (n[k] > 0 ? w[k] / n[k] : 0) } }' "$LOG" |
  tee "$OUT/ab_split_tail.txt"
