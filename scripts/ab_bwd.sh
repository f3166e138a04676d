#!/usr/bin/env bash
# A/B of the backward's build-time variants against each other and cuDNN's backward, in one
# process (scripts/ab_fwd.py --bwd --deterministic --det-libs base), on a GPU machine.
#
#   OUT=/tmp/ab bash scripts/ab_bwd.sh            # all variants, the 24-shape grid, 3 rounds
#   VARIANTS="base main" ROUNDS=2 bash scripts/ab_bwd.sh
#
# Each variant is libhattn.so alone (the library target), built with its -D defines in its own
# folder (build-ab/<name>), all builds at once with -j16. The A/B then checks every build's
# dq/dk/dv (and the deterministic mode's, twice: bit-identical) against cuDNN's, and times them:
# d 64/128/256 x seqlen 2k/4k/8k/16k x full/causal, bf16, batch x seqlen = 16k, heads = 2048/d.
# If the A/B process dies (a fault in one build poisons the CUDA context for all), each build is
# checked alone on two shapes so the report names the culprit. Writes $OUT/summary.txt (the
# table) and $OUT/logs.tgz (build and run logs); prints the short table last.
# The deterministic mode is timed for the default build (base) only.
# Budget: about 1.5-2 minutes of builds, 1.5-2 minutes of A/B; TOTAL_LIMIT (300 s) caps it all.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-/tmp/ab_bwd}
ROUNDS=${ROUNDS:-3}
TIME_LIMIT=${TIME_LIMIT:-240}    # the A/B process
TOTAL_LIMIT=${TOTAL_LIMIT:-300}  # the whole script (the fallback checks stop short of it)
mkdir -p "$OUT"
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT

# name -> defines (see the top of src/kernels/bwd.cuh)
declare -A DEFINES=(
  [base]=""
)
# "main": the checkout this worktree sits in (MAIN_SRC, default ../.. from the repository root,
# where a worktree under .wt/ finds it), built as it is: base against main shows whether the
# restructured default path lost anything. Left out when there is no such checkout.
MAIN_SRC=${MAIN_SRC:-$ROOT/../..}
default_variants="base"
if [ -f "$MAIN_SRC/CMakeLists.txt" ] && [ -f "$MAIN_SRC/src/kernels/bwd.cuh" ]; then
  MAIN_SRC=$(cd "$MAIN_SRC" && pwd)
  DEFINES[main]=""
  default_variants="base main"
fi
VARIANTS=${VARIANTS:-$default_variants}

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
t0=$(date +%s)
pids=()
for v in $VARIANTS; do
  if [ -z "${DEFINES[$v]+set}" ]; then echo "ab_bwd.sh: unknown variant '$v'" >&2; exit 2; fi
  (
    dir="$ROOT/build-ab/$v"
    src=$ROOT
    [ "$v" != main ] || src=$MAIN_SRC
    cmake -S "$src" -B "$dir" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DHATTN_PTXAS_WERROR=ON \
      -DHATTN_BUILD_TESTS=OFF -DHATTN_BUILD_BENCH=OFF -DHATTN_BUILD_CLI=OFF -DHATTN_INSTALL=OFF \
      "-DCMAKE_CUDA_FLAGS=${DEFINES[$v]}" &&
      cmake --build "$dir" -j16 --target hattn_shared
  ) >"$LOGS/build_$v.log" 2>&1 &
  pids+=("$!:$v")
done
libs=()
for entry in "${pids[@]}"; do
  pid=${entry%%:*} v=${entry#*:}
  if wait "$pid" && [ -f "$ROOT/build-ab/$v/libhattn.so" ]; then
    libs+=(--lib "$v=$ROOT/build-ab/$v/libhattn.so")
  else
    echo "BUILD FAILED: $v (tail of its log):"; tail -5 "$LOGS/build_$v.log"
  fi
done
t1=$(date +%s)
echo "builds: $((t1 - t0)) s, $((${#libs[@]} / 2)) libraries ok"
[ ${#libs[@]} -gt 0 ] || exit 1

status=0
ab_limit=$((TOTAL_LIMIT - (t1 - t0) - 15))
# A round of 7 timed variants is ~20 s, the checks and set-up ~40 s: fewer rounds when the builds ran long.
if [ "$ab_limit" -lt 110 ] && [ "$ROUNDS" -gt 2 ]; then ROUNDS=2; echo "(only ${ab_limit} s left: 2 rounds)"; fi
[ "$ab_limit" -lt "$TIME_LIMIT" ] || ab_limit=$TIME_LIMIT
timeout "$ab_limit" python3 scripts/ab_fwd.py --bwd --deterministic --det-libs base "${libs[@]}" --rounds "$ROUNDS" \
  --head-dims 64,128,256 --seqlens 2048,4096,8192,16384 --kernel-split --json "$OUT/ab_bwd.json" \
  >"$LOGS/ab.txt" 2>"$LOGS/ab.err" || status=$?
t2=$(date +%s)
echo "A/B: $((t2 - t1)) s, exit $status" >>"$LOGS/ab.txt"
if [ "$status" -ne 0 ] && [ "$status" -ne 3 ]; then
  # 3 = correctness failures (listed in the table); anything else is a crash or a timeout.
  echo "A/B process failed ($status): each build alone, two shapes, correctness only" | tee -a "$LOGS/ab.txt"
  tail -20 "$LOGS/ab.err" >>"$LOGS/ab.txt"
  for ((i = 1; i < ${#libs[@]}; i += 2)); do
    if [ $(($(date +%s) - t0)) -gt $((TOTAL_LIMIT - 60)) ]; then echo "(out of time)" >>"$LOGS/ab.txt"; break; fi
    timeout 55 python3 scripts/ab_fwd.py --bwd --deterministic --lib "${libs[i]}" --rounds 0 \
      --seqlens 2048,8192 >>"$LOGS/ab.txt" 2>&1
    echo "${libs[i]%%=*}: exit $?" >>"$LOGS/ab.txt"
  done
fi
cp "$LOGS/ab.txt" "$OUT/summary.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
# The short table last: the per-build summary lines (and any failures).
echo "---- $OUT/summary.txt (tail) ----"
grep -v '^|' "$LOGS/ab.txt" | tail -25
exit "$status"
