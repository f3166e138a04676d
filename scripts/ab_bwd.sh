#!/usr/bin/env bash
# A/B of the backward's build-time variants against each other and cuDNN's backward, in one
# process (scripts/ab_fwd.py --bwd), after the backward GPU tests of every variant, on a GPU machine.
#
#   OUT=/tmp/ab bash scripts/ab_bwd.sh            # base dqlate dqlate2 dqlate_w2, 24 shapes, 3 rounds
#   VARIANTS="base early" ROUNDS=2 bash scripts/ab_bwd.sh
#
# The variants (defines at the top of src/kernels/bwd.cuh) all change src/host/bwd_launch_d128.cu
# only, so one build folder holds them: build-ab/base is configured and built once (libhattn.so and
# bwd_test, -j16); each other variant compiles that one file again with its define (the same nvcc
# command line, read from ninja, run beside the base build) and relinks libhattn.so, libhattn.a and
# bwd_test from the base's objects with its own object in place of the base's
# (build-ab/<variant>/). Then:
#   1. tests: bwd_test of every variant, TEST_FILTER (default: every case that runs head dim 128,
#      the deterministic mode's bit-identity and the GPU reference's self-test), in TEST_SHARDS
#      gtest shards at once per variant; a variant's result is the sum over its shards;
#   2. the A/B: every build's dq/dk/dv against cuDNN's first, then d 64/128/256 x seqlen
#      2k/4k/8k/16k x full/causal, bf16, batch x seqlen = 16k, heads = 2048/d, ROUNDS interleaved
#      rounds, best of each.
# If the A/B process dies (a fault in one build poisons the CUDA context for all), each build is
# checked alone on two shapes so the report names the culprit. Writes $OUT/summary.txt and
# $OUT/logs.tgz (build, test and run logs); prints the test results, the geomeans and, last, the
# TFLOPS table with each build's ratio to cuDNN.
# VARIANT_FILE (src/host/bwd_launch_d128.cu): the launch file(s) a variant's defines are compiled
# into, space-separated (a define of another head dim's kernels names that head dim's file; one
# that changes the host-side launch of every head dim names all three); AB_SEQLENS
# (2048,4096,8192,16384): the A/B's lengths; AB_DIMS (64,128,256): its head dims; DETERMINISTIC=1:
# each build (or those DET_LIBS names, NAME,NAME) also timed in the deterministic mode (NAME:det).
# Budget: ~15 s configure, ~1.5-2 min build, ~30-40 s tests, ~1.5 min A/B; TOTAL_LIMIT (300 s) caps it all.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-/tmp/ab_bwd}
ROUNDS=${ROUNDS:-3}
TIME_LIMIT=${TIME_LIMIT:-200}    # the A/B process at most
TOTAL_LIMIT=${TOTAL_LIMIT:-300}  # the whole script (the fallback checks stop short of it)
TEST_SHARDS=${TEST_SHARDS:-4}
TEST_TIMEOUT=${TEST_TIMEOUT:-75}
TEST_FILTER=${TEST_FILTER:-'*d128*:BwdDeterminism.*:GpuReferenceBwd.*'}
VARIANT_FILE=${VARIANT_FILE:-src/host/bwd_launch_d128.cu}  # the file(s) the variants' defines change
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT
t0=$(date +%s)
elapsed() { echo $(($(date +%s) - t0)); }

# name -> defines (see the top of src/kernels/bwd.cuh)
declare -A DEFINES=(
  [base]=""
  [pipe0]="-DHATTN_BWD_PIPE=0"       # d64: one query block at a time (before run 64)
  [dqparity0]="-DHATTN_BWD_D64_DQ_PARITY=0"  # d64: each warpgroup adds its own keys' partial dQ^T every step (before run 65)
  [lpt4]="-DHATTN_BWD_LPT_GROUP=4"    # causal grid order: longest first over groups of 4 (KV head, batch) pairs at every head dim (d256 before run 66)
  [lpt16]="-DHATTN_BWD_LPT_GROUP=16"  # ... of 16 pairs (defaults: 4 at d64 / d128, by length at d256)
  [lpt64]="-DHATTN_BWD_LPT_GROUP=64"  # ... of 64 pairs (near a global longest-first order)
  [lptrows]="-DHATTN_BWD_LPT_GROUP=0"  # ... of max(4, 16k Q rows / a pair's rows) pairs: 32 at 512, 4 at 4k (every head dim)
  [early]="-DHATTN_BWD_DQ_LATE=0"    # d128: dQ at the start of the step, waited for alone (before run 26)
  [dqlate]="-DHATTN_BWD_DQ_LATE=1"   # d128: step i-1's dQ GEMM after step i's dK, one wait (the default)
  [dqlate2]="-DHATTN_BWD_DQ_LATE=2"  # the same, dQ before dK
  [dqlate_w2]="-DHATTN_BWD_DQ_LATE=1 -DHATTN_BWD_DQ_WARPS=2"  # dqlate + a dQ warp per consumer
  [w2]="-DHATTN_BWD_DQ_WARPS=2"      # a dQ warp per consumer alone
  [doslot0]="-DHATTN_BWD_D256_DO_SLOT=0 -DHATTN_BWD_D256_DS_BUFFERS=1"  # d256 dK + dQ: one dS^T tile and one Q / dO slot, freed at the step's end (before run 67)
  [doslot2]="-DHATTN_BWD_D256_DO_SLOT=2"  # ... one slot, freed once dK's GEMM has completed
  [doslot3]="-DHATTN_BWD_D256_DO_SLOT=3"  # ... dO in its own slot, S^T issued first (default 1: dP^T first; run 67b/d)
  [ds1]="-DHATTN_BWD_D256_DS_BUFFERS=1"  # d256 dK + dQ: one dS^T tile, a barrier before its store (before run 67d; default 2)
  # The aux kernels' walk (HATTN_BWD_AUX_REVERSE, every head dim: VARIANT_FILE names all three launch files)
  [rev_pre]="-DHATTN_BWD_AUX_REVERSE=1"   # the preprocess ends on the first (batch, head): the main kernel's first adds hit L2
  [rev_conv]="-DHATTN_BWD_AUX_REVERSE=2"  # the dQ conversion starts on the last (batch, head): its reads hit L2
  [rev_both]="-DHATTN_BWD_AUX_REVERSE=3"  # both
  [det_store]="-DHATTN_BWD_DET_FIRST_STORE=1"  # deterministic mode: KV block 0 stores dQ^T, the preprocess zeroes only unreached blocks (every launch file; time it with DETERMINISTIC=1)
)
VARIANTS=${VARIANTS:-base early dqlate2 dqlate_w2}
for v in $VARIANTS; do
  if [ -z "${DEFINES[$v]+set}" ]; then echo "ab_bwd.sh: unknown variant '$v'" >&2; exit 2; fi
done

# ---- build ---------------------------------------------------------------------------
BASE=$ROOT/build-ab/base
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [ "${SKIP_CONFIGURE:-0}" != 1 ]; then
  cmake -S "$ROOT" -B "$BASE" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DHATTN_PTXAS_WERROR=ON \
    -DHATTN_BUILD_TESTS=ON -DHATTN_BUILD_BENCH=OFF -DHATTN_BUILD_CLI=OFF -DHATTN_INSTALL=OFF \
    >"$LOGS/configure.log" 2>&1 || { echo "CONFIGURE FAILED:"; tail -20 "$LOGS/configure.log"; exit 1; }
fi
if [ ! -f "$BASE/build.ninja" ]; then echo "ab_bwd.sh: needs ninja (build-ab/base/build.ninja)"; exit 1; fi
read -r -a VARIANT_FILES <<<"$VARIANT_FILE"
OBJ_RELS=()
for f in "${VARIANT_FILES[@]}"; do OBJ_RELS+=("CMakeFiles/hattn_objects.dir/$f.o"); done
# One command (ninja's, for the base build) whose line contains all the given fixed strings.
ninja_command() {
  local target=$1; shift
  local line
  line=$(ninja -C "$BASE" -t commands "$target" | while IFS= read -r l; do
    ok=1; for s in "$@"; do [[ "$l" == *"$s"* ]] || ok=0; done; [ $ok = 1 ] && echo "$l"; done | tail -1)
  [ -n "$line" ] && echo "$line"
}
declare -A COMPILE_CMD  # object -> its nvcc command in the base build
for obj in "${OBJ_RELS[@]}"; do
  COMPILE_CMD[$obj]=$(ninja_command hattn_shared "nvcc" " -o $obj")
  if [ -z "${COMPILE_CMD[$obj]}" ]; then echo "ab_bwd.sh: could not read the compile command of $obj from ninja" | tee "$LOGS/ninja.err"; exit 1; fi
done
so_link_cmd=$(ninja_command hattn_shared " -shared " " ${OBJ_RELS[0]} ")
test_link_cmd=$(ninja_command bwd_test " -o test/bwd_test" " libhattn.a ")
so_out=$(sed -n 's/.* -o \(libhattn\.so[^ ]*\) .*/\1/p' <<<"$so_link_cmd")
for what in so_link_cmd test_link_cmd so_out; do
  if [ -z "${!what}" ]; then echo "ab_bwd.sh: could not read $what from ninja" | tee "$LOGS/ninja.err"; exit 1; fi
done

(cd "$BASE" && cmake --build . -j16 --target hattn_shared bwd_test) >"$LOGS/build_base.log" 2>&1 &
base_pid=$!
pids=()
for v in $VARIANTS; do
  [ "$v" != base ] || continue
  vdir=$ROOT/build-ab/$v
  mkdir -p "$vdir"
  rm -f "$vdir/libhattn.so" "$vdir/bwd_test"
  # Each of the variant's files compiled with its defines, in parallel; the job fails if one does.
  (
    cd "$BASE" || exit 1
    jobs_ok=0
    for obj in "${OBJ_RELS[@]}"; do
      rm -f "$vdir/$(basename "$obj")"
      cmd=${COMPILE_CMD[$obj]//" -o $obj"/" ${DEFINES[$v]} -o $vdir/$(basename "$obj")"}
      cmd=${cmd//"$obj.d"/"$vdir/$(basename "$obj").d"}
      echo "$cmd"
      bash -c "$cmd" &
    done
    for job in $(jobs -p); do wait "$job" || jobs_ok=1; done
    exit $jobs_ok
  ) >"$LOGS/build_$v.log" 2>&1 &
  pids+=("$!:$v")
done
base_ok=0
if wait "$base_pid" && [ -f "$BASE/libhattn.so" ] && [ -x "$BASE/test/bwd_test" ]; then base_ok=1; else
  echo "BUILD FAILED: base (tail of its log):"; tail -15 "$LOGS/build_base.log"; fi
declare -A LIB TESTBIN
[ $base_ok = 0 ] || { LIB[base]=$BASE/libhattn.so; TESTBIN[base]=$BASE/test/bwd_test; }
for entry in "${pids[@]}"; do
  pid=${entry%%:*} v=${entry#*:} vdir=$ROOT/build-ab/${entry#*:}
  objs=() so_cmd=$so_link_cmd
  for obj in "${OBJ_RELS[@]}"; do
    objs+=("$vdir/$(basename "$obj")")
    so_cmd=${so_cmd//" $obj "/" $vdir/$(basename "$obj") "}  # this variant's object in place of the base's
  done
  built=1
  wait "$pid" || built=0
  for obj in "${objs[@]}"; do [ -f "$obj" ] || built=0; done
  if [ $built = 0 ]; then
    echo "BUILD FAILED: $v (tail of its log):"; tail -8 "$LOGS/build_$v.log"; continue
  fi
  [ $base_ok = 1 ] || continue
  # Relink from the base's objects, this variant's objects in place of the base's.
  so_cmd=${so_cmd//" -o $so_out "/" -o $vdir/libhattn.so "}
  tl_cmd=${test_link_cmd//" libhattn.a "/" $vdir/libhattn.a "}
  tl_cmd=${tl_cmd//" -o test/bwd_test"/" -o $vdir/bwd_test"}
  if (cd "$BASE" && echo "$so_cmd" && bash -c "$so_cmd" &&
      cp libhattn.a "$vdir/libhattn.a" && ar r "$vdir/libhattn.a" "${objs[@]}" &&
      echo "$tl_cmd" && bash -c "$tl_cmd") >>"$LOGS/build_$v.log" 2>&1 &&
     [ -f "$vdir/libhattn.so" ] && [ -x "$vdir/bwd_test" ]; then
    LIB[$v]=$vdir/libhattn.so
    TESTBIN[$v]=$vdir/bwd_test
  else
    echo "LINK FAILED: $v (tail of its log):"; tail -8 "$LOGS/build_$v.log"
  fi
done
t1=$(date +%s)
echo "builds: $((t1 - t0)) s, ${#LIB[@]} of $(wc -w <<<"$VARIANTS") variants ok" | tee "$LOGS/tests.txt"
[ ${#LIB[@]} -gt 0 ] || { tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null; exit 1; }

# ---- tests: every variant's bwd_test, sharded, all at once ------------------------------
declare -A SHARD_PIDS
for v in $VARIANTS; do
  [ -n "${TESTBIN[$v]+set}" ] || continue
  for ((i = 0; i < TEST_SHARDS; ++i)); do
    GTEST_TOTAL_SHARDS=$TEST_SHARDS GTEST_SHARD_INDEX=$i timeout "$TEST_TIMEOUT" "${TESTBIN[$v]}" \
      --gtest_filter="$TEST_FILTER" >"$LOGS/test_${v}_$i.log" 2>&1 &
    SHARD_PIDS[$v:$i]=$!
  done
done
test_status=0
for v in $VARIANTS; do
  [ -n "${TESTBIN[$v]+set}" ] || continue
  pass=0 fail=0 skip=0 crashed=""
  for ((i = 0; i < TEST_SHARDS; ++i)); do
    wait "${SHARD_PIDS[$v:$i]}"; rc=$?
    log=$LOGS/test_${v}_$i.log
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    # A failed test's line as it finishes: "[  FAILED  ] Suite.Name (12 ms)" (once per test).
    f=$(grep -c '^\[  FAILED  \] .* ([0-9]* ms)$' "$log")
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    pass=$((pass + ${p:-0})) skip=$((skip + ${s:-0})) fail=$((fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then crashed+=" shard$i:rc$rc"; fi
  done
  failed_names=$(grep -h '^\[  FAILED  \] .* ([0-9]* ms)$' "$LOGS"/test_"${v}"_*.log | sed 's/^\[  FAILED  \] //; s/, where .*//; s/ ([0-9]* ms)$//' | head -8 | tr '\n' ' ')
  line="tests $v: $pass passed, $fail failed, $skip skipped${crashed:+, CRASHED/TIMED OUT:$crashed}"
  [ -z "$failed_names" ] || line+=" -- $failed_names"
  echo "$line" >>"$LOGS/tests.txt"
  { [ "$fail" -eq 0 ] && [ -z "$crashed" ]; } || test_status=1
done
t2=$(date +%s)
echo "tests: $((t2 - t1)) s (filter $TEST_FILTER, $TEST_SHARDS shards per variant)" >>"$LOGS/tests.txt"

# ---- A/B --------------------------------------------------------------------------------
libs=()
for v in $VARIANTS; do [ -z "${LIB[$v]+set}" ] || libs+=(--lib "$v=${LIB[$v]}"); done
status=0
ab_limit=$((TOTAL_LIMIT - $(elapsed) - 15))
# A round of 4 builds + cuDNN over 24 shapes is ~15 s, the checks and set-up ~40 s.
if [ "$ab_limit" -lt 100 ] && [ "$ROUNDS" -gt 2 ]; then ROUNDS=2; echo "(only ${ab_limit} s left: 2 rounds)" >>"$LOGS/tests.txt"; fi
[ "$ab_limit" -lt "$TIME_LIMIT" ] || ab_limit=$TIME_LIMIT
det_args=()
if [ "${DETERMINISTIC:-0}" = 1 ]; then det_args=(--deterministic); [ -z "${DET_LIBS:-}" ] || det_args+=(--det-libs "$DET_LIBS"); fi
timeout "$ab_limit" python3 scripts/ab_fwd.py --bwd "${det_args[@]}" "${libs[@]}" --rounds "$ROUNDS" \
  --head-dims "${AB_DIMS:-64,128,256}" --seqlens "${AB_SEQLENS:-2048,4096,8192,16384}" --json "$OUT/ab_bwd.json" \
  >"$LOGS/ab.txt" 2>"$LOGS/ab.err" || status=$?
t3=$(date +%s)
echo "A/B: $((t3 - t2)) s, exit $status" >>"$LOGS/ab.txt"
if [ "$status" -ne 0 ] && [ "$status" -ne 3 ]; then
  # 3 = correctness failures (listed in the table); anything else is a crash or a timeout.
  echo "A/B process failed ($status): each build alone, two shapes, correctness only" | tee -a "$LOGS/ab.txt"
  tail -20 "$LOGS/ab.err" >>"$LOGS/ab.txt"
  for ((i = 1; i < ${#libs[@]}; i += 2)); do
    if [ "$(elapsed)" -gt $((TOTAL_LIMIT - 60)) ]; then echo "(out of time)" >>"$LOGS/ab.txt"; break; fi
    timeout 55 python3 scripts/ab_fwd.py --bwd --lib "${libs[i]}" --rounds 0 \
      --seqlens 2048,8192 >>"$LOGS/ab.txt" 2>&1
    echo "${libs[i]%%=*}: exit $?" >>"$LOGS/ab.txt"
  done
fi
cat "$LOGS/tests.txt" "$LOGS/ab.txt" >"$OUT/summary.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
# Printed last: the test results, the A/B's non-table lines (geomeans, failures), then its table.
echo "---- $OUT/summary.txt ----"
cat "$LOGS/tests.txt"
grep -v '^|' "$LOGS/ab.txt" | tail -15
grep '^|' "$LOGS/ab.txt"
[ "$test_status" -eq 0 ] || { echo "TEST FAILURES (see above)"; [ "$status" -ne 0 ] || status=4; }
exit "$status"
