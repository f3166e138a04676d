#!/usr/bin/env bash
# The one script to run on the GPU host (an H200), from the repository root:
#
#   OUT=/some/dir scripts/gpu_suite.sh [tests] [bench] [compare] [micro] [sanitize] [robust] [maxlen] [python]
#
# Always configures (Ninja, Release, -DHATTN_PTXAS_WERROR=ON) and builds with every core; then runs
# the phases named on the command line (all of them when none is named):
#   tests     ctest (every GoogleTest suite but those labelled robust) and scripts/check_vendored.sh --run
#             (the forward, backward and combined single files, each with its checked example)
#   bench     build/bench/fwd_bench, JSON into $OUT/bench.json, TFLOPS grid in the summary; then
#             build/bench/bwd_bench (when bench/bwd_bench.cu exists), JSON into logs.tgz, grid in the summary
#   compare   scripts/compare_torch.py into $OUT (forward: hattn vs cuDNN vs FA2 vs FA4 when it imports,
#             interleaved rounds; compare.{json,csv,png}),
#             then compare_torch.py --bwd (backward: hattn vs cuDNN vs FA2 vs FA4 when it imports;
#             compare_bwd.png in $OUT, its JSON and CSV in logs.tgz), both over d 64/128/256 x
#             seqlen 512..16k x full/causal, batch x seqlen = 16k tokens, heads = 2048 / d
#   micro     scripts/run_micro.sh $OUT/micro, if that script exists
#   sanitize  scripts/sanitize_ptx_tests.sh if it exists, then compute-sanitizer memcheck, racecheck
#             and synccheck on `build/bin/hattn fwd` and `hattn bwd` for every variant at a small odd
#             size, plus GQA, persistent-grid (more tiles than SMs), causal seqlen_q != seqlen_k and
#             the backward's deterministic mode
#             (SANITIZE_JOBS runs at a time)
#   robust    build/test/stress_test (threads, 100k calls, >2^31 elements, NaN/Inf inputs, waiting
#             CTAs on a partial GPU),
#             build/test/hang_guard_test (the debug hang guard traps) and
#             test/python/bad_input_torch.py (every validation failure of the forward, the
#             backward, the FP8 pre-pass and the FP8 forward, from PyTorch processes)
#   maxlen    scripts/max_seqlen.py: the longest causal d128 bf16 forward that fits in memory (and in
#             the phase's time), checked against cuDNN and float64 (JSON in logs.tgz, table in the summary)
#   python    scripts/gpu_python.sh: pip-installs the Python package from this tree (its own build,
#             no internet) and runs the pytest suites test/python/ (SDPA float64 sweep, torch.compile,
#             training, bad inputs, hattn.attention within 3% of the C API); its logs in logs.tgz
# A failing phase is reported and the next one still runs. Everything lands in $OUT, kept to at
# most MAX_RETURNED_FILES files so the results are easy to copy off the GPU host: summary.txt,
# logs.tgz (every full log and the secondary JSON/CSV files), bench.json, compare.json,
# compare.csv, compare.png, compare_bwd.png, and micro/ when it fits. The summary is rewritten
# after every phase (so a run cut short still has one) and printed last.
#
# Environment: OUT (default ./gpu_suite_out), BUILD_DIR (build), JOBS (nproc),
#   SUITE_BUDGET_S (570: the suite's time budget in seconds; no phase starts that cannot finish
#   inside it, and each phase's timeout is clipped to what is left),
#   TESTS_TIMEOUT_S (300), BENCH_TIMEOUT_S (180), BWD_BENCH_TIMEOUT_S (180), COMPARE_TIMEOUT_S (300),
#   COMPARE_BWD_TIMEOUT_S (300; 0: the forward comparison only), MICRO_TIMEOUT_S (180), SANITIZE_TIMEOUT_S (300), ROBUST_TIMEOUT_S (420),
#   MAXLEN_TIMEOUT_S (300), PYTHON_TIMEOUT_S (290), SANITIZE_JOBS (6),
#   PYTHON (python3, must import torch), COMPARE_ARGS (extra compare_torch.py arguments for both
#   directions, e.g. "--quick"), COMPARE_BWD_ARGS (backward only, e.g. "--deterministic --fa4-path DIR"),
#   MAXLEN_ARGS (extra max_seqlen.py arguments, e.g. "--heads 16,1"),
#   SANITIZE_SEQLEN (300), SANITIZE_CLI_ARGS (see cli_args below), SANITIZE_ONLY (an extended
#   regex: only the sanitizer variants whose line, e.g. "bwd 64 bf16 1 --deterministic", matches).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-gpu_suite_out}
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
SUITE_BUDGET_S=${SUITE_BUDGET_S:-570}
SANITIZE_SEQLEN=${SANITIZE_SEQLEN:-300}
MAX_RETURNED_FILES=8       # keep $OUT to this many files, so it is easy to copy off the GPU host
PHASE_MIN_S=30             # do not start a phase with less time than this left
SUMMARY_RESERVE_S=10       # time kept for packing logs and writing the summary

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/hattn-suite-logs.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
DETAILS="$LOGS/details.txt"   # per-phase summaries, in order
STATUS="$LOGS/status.txt"     # one line per phase
: >"$DETAILS"
: >"$STATUS"
SECONDS=0

ALL_PHASES=(tests bench compare micro sanitize robust maxlen python)
if [ $# -eq 0 ]; then
  PHASES=("${ALL_PHASES[@]}")
else
  PHASES=("$@")
  for p in "${PHASES[@]}"; do
    case " ${ALL_PHASES[*]} " in
      *" $p "*) ;;
      *) echo "gpu_suite.sh: unknown phase '$p' (phases: ${ALL_PHASES[*]})" >&2; exit 2 ;;
    esac
  done
fi

# ---- bookkeeping --------------------------------------------------------------------------------
header() {
  echo "== hattn GPU suite: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$( [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' + uncommitted changes')"
  echo "phases: build ${PHASES[*]}"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu \
               --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
  else
    echo "gpu: nvidia-smi not found"
  fi
  echo "nvcc: $( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) | grep -o 'release [0-9.]*' | head -1)"
}
HEADER=$(header)

# Pack the logs and rewrite the summary; called after every phase.
publish() {
  tar -czf "$OUT/logs.tgz" -C "$LOGS" --exclude=details.txt --exclude=status.txt . 2>/dev/null
  fit_returned_files
  { echo "$HEADER"; echo; cat "$DETAILS"; echo "== phase status (total ${SECONDS} s)"; cat "$STATUS"; } >"$OUT/summary.txt"
}

# Keep $OUT to MAX_RETURNED_FILES files: fold micro/ into logs.tgz if it would overflow that.
fit_returned_files() {
  local count
  count=$(find "$OUT" -type f | wc -l)
  if [ "$count" -gt "$MAX_RETURNED_FILES" ] && [ -d "$OUT/micro" ]; then
    rm -rf "$LOGS/micro" && cp -r "$OUT/micro" "$LOGS/micro" && rm -rf "$OUT/micro"
    tar -czf "$OUT/logs.tgz" -C "$LOGS" --exclude=details.txt --exclude=status.txt . 2>/dev/null
    echo "(micro/ would take $OUT past $MAX_RETURNED_FILES files: it is inside logs.tgz)" >>"$DETAILS"
  fi
}

# section NAME: start a phase's block in the details.
section() { printf '\n== %s\n' "$1" >>"$DETAILS"; }
detail() { echo "$*" >>"$DETAILS"; }
# status NAME RESULT START_SECONDS
status() { printf '%-9s %s (%d s)\n' "$1" "$2" "$((SECONDS - $3))" | tee -a "$STATUS"; }

# Seconds a phase may use: its own limit, clipped to what the suite budget has left.
phase_limit() {
  local own=$1 left=$((SUITE_BUDGET_S - SECONDS - SUMMARY_RESERVE_S))
  [ "$left" -lt "$own" ] && own=$left
  echo "$own"
}
# Skip a phase that cannot do anything useful in the time left.
out_of_time() {
  if [ "$(phase_limit "$PHASE_MIN_S")" -lt "$PHASE_MIN_S" ]; then
    section "$1"
    detail "skipped: only $((SUITE_BUDGET_S - SECONDS)) s of the ${SUITE_BUDGET_S} s budget left"
    status "$1" "SKIPPED (out of time)" "$SECONDS"
    publish
    return 0
  fi
  return 1
}

# ---- build ----------------------------------------------------------------------------------------
phase_build() {
  local t0=$SECONDS log="$LOGS/build.log" gen=() keep_going=() rc=0
  section build
  # Keep going past a broken target so one bad benchmark does not keep the tests from running.
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja) && keep_going=(-- -k 0)
  # A build folder made by another generator cannot be reconfigured with Ninja: start it afresh.
  if [ -f "$BUILD_DIR/CMakeCache.txt" ] && [ ${#gen[@]} -gt 0 ] &&
     ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$BUILD_DIR/CMakeCache.txt"; then
    rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
  fi
  { cmake -S . -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DHATTN_PTXAS_WERROR=ON &&
    cmake --build "$BUILD_DIR" -j "$JOBS" "${keep_going[@]}"; } >"$log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    detail "built with $JOBS jobs; ptxas info lines (e.g. C7519 injected warpgroup.arrive): $(grep -c 'ptxas info' "$log")"
    grep 'ptxas info' "$log" | sed -E 's/ in function .*//' | sort | uniq -c | head -5 >>"$DETAILS"
    status build OK "$t0"
  else
    detail "FAILED (exit $rc); failed targets and first diagnostics (compiler command lines left out):"
    grep -E '^FAILED:|(error|warning)[ :]|CMake Error' "$log" | grep -vE '^(/|.*nvcc )' | awk '!seen[$0]++' | cut -c1-300 | head -25 >>"$DETAILS"
    detail "-- last lines:"
    tail -n 5 "$log" | cut -c1-300 >>"$DETAILS"
    status build "FAIL (exit $rc)" "$t0"
  fi
  publish
  return "$rc"
}

# ---- tests ----------------------------------------------------------------------------------------
phase_tests() {
  local t0=$SECONDS log="$LOGS/ctest.log" rc=0 vrc=0 limit
  out_of_time tests && return 0
  limit=$(phase_limit "${TESTS_TIMEOUT_S:-300}")
  section tests
  # -V keeps every test's output in the log, so skipped GPU tests (which pass) can be counted.
  # The robust-labelled suites (stress, hang guard) run in the robust phase, alone.
  (cd "$BUILD_DIR" && timeout -k 10 "$limit" ctest --output-on-failure -V -j "$JOBS" -LE robust) >"$log" 2>&1 || rc=$?
  detail "$(grep -E 'tests passed|tests failed' "$log" | tail -1)"
  if grep -q 'The following tests FAILED' "$log"; then
    sed -n '/The following tests FAILED/,$p' "$log" | head -25 >>"$DETAILS"
  fi
  local skipped
  # The *ValidInputReachesTheDeviceCheck controls run only where no Hopper GPU is present (they
  # prove a valid call gets as far as the device check); on Hopper they skip by design.
  # (A name starts with a letter: gtest's "[  SKIPPED ] 1 test, listed below:" is no case.)
  skipped=$(grep -oE '\[  SKIPPED \] [A-Za-z][A-Za-z0-9_./]*' "$log" | sort -u \
            | grep -vc 'ValidInputReachesTheDeviceCheck$')
  detail "gtest cases SKIPPED: $skipped (on the H200 this should be 0; the CPU-only device-check controls not counted)"
  [ "$skipped" -gt 0 ] && grep -hoE '(GPU test skipped|Skipped): .*' "$log" | sort | uniq -c | head -5 >>"$DETAILS"
  [ "$rc" -eq 124 ] && detail "ctest TIMED OUT after $limit s"

  # The vendored single files (forward, backward, both): amalgamate, compile standalone, run checked passes.
  bash scripts/check_vendored.sh --run >"$LOGS/vendored.log" 2>&1 || vrc=$?
  detail "vendored single files:"
  grep -E '^vendor_(bwd_)?example:|^check_vendored.sh:' "$LOGS/vendored.log" | cut -c1-240 | sed 's/^/  /' >>"$DETAILS"
  [ "$vrc" -ne 0 ] && tail -n 10 "$LOGS/vendored.log" >>"$DETAILS"

  if [ "$rc" -eq 0 ] && [ "$vrc" -eq 0 ]; then
    status tests "OK$([ "$skipped" -gt 0 ] && echo " ($skipped gtest cases SKIPPED)")" "$t0"
  else
    status tests "FAIL (ctest exit $rc, vendored exit $vrc)" "$t0"
  fi
  publish
}

# ---- bench ----------------------------------------------------------------------------------------
bench_table() {  # {fwd,bwd}_bench JSON -> a TFLOPS grid (rows: head_dim x mask; columns: seqlen) + the rest
  python3 - "$1" <<'PY'
import json, re, sys
try:
    data = json.load(open(sys.argv[1]))
except Exception as e:  # a run cut short leaves a truncated file
    print(f"bench.json unreadable: {e}")
    sys.exit(1)
print("device:", data.get("context", {}).get("device", "?"))
grid, ablation, errors = {}, [], []
for b in data.get("benchmarks", []):
    name = b["name"].split("/min_time")[0].split("/manual_time")[0]
    if b.get("error_occurred") or b.get("skipped"):
        errors.append(f"{name}: {b.get('error_message') or b.get('skip_message') or 'error'}")
        continue
    tflops, pct = b.get("TFLOPS", float("nan")), b.get("pct_of_989", float("nan"))
    m = re.match(r"(?:fwd|bwd)/\w+/d(\d+)/s(\d+)/b\d+/h\d+/(full|causal)$", name)
    if m:
        grid.setdefault((int(m[1]), m[3]), {})[int(m[2])] = tflops
    else:
        ablation.append(f"  {name}: {tflops:.1f} TFLOPS" + (f" ({pct:.1f}% of 989)" if pct == pct else ""))
seqlens = sorted({s for row in grid.values() for s in row})
if grid:
    print("TFLOPS      " + "".join(f"{s:>8}" for s in seqlens))
    for (d, mask), row in sorted(grid.items(), key=lambda item: (item[0][0], item[0][1] != "full")):
        print(f"d{d:<4}{mask:<7}" + "".join(f"{row[s]:8.1f}" if s in row else f"{'-':>8}" for s in seqlens))
print("\n".join(ablation))
print(f"{len(errors)} benchmark(s) in error" + (":" if errors else ""))
for e in errors[:8]:
    print("  " + e)
sys.exit(1 if errors or not (grid or ablation) else 0)
PY
}

phase_bench() {
  local t0=$SECONDS log="$LOGS/bench.log" rc=0 trc=0 limit bin="$BUILD_DIR/bench/fwd_bench" brc=0 btrc=0 blimit
  out_of_time bench && return 0
  limit=$(phase_limit "${BENCH_TIMEOUT_S:-180}")
  section bench
  if [ ! -x "$bin" ]; then
    detail "no $bin (build failed?)"
    rc=1
  else
    timeout -k 10 "$limit" "$bin" --benchmark_out="$OUT/bench.json" --benchmark_out_format=json >"$log" 2>&1 || rc=$?
    [ "$rc" -eq 124 ] && detail "fwd_bench TIMED OUT after $limit s (partial results)"
    detail "forward (fwd_bench):"
    bench_table "$OUT/bench.json" >>"$DETAILS" 2>&1 || trc=$?
  fi

  # The backward benchmark, once bench/bwd_bench.cu exists (its JSON goes into logs.tgz).
  local bbin="$BUILD_DIR/bench/bwd_bench" bwd="skipped (no bench/bwd_bench.cu)"
  if [ -f bench/bwd_bench.cu ]; then
    blimit=$(phase_limit "${BWD_BENCH_TIMEOUT_S:-180}")
    detail "backward (bwd_bench):"
    if [ ! -x "$bbin" ]; then
      detail "no $bbin (build failed?)"
      brc=1
    elif [ "$blimit" -lt 10 ]; then
      detail "bwd_bench NOT RUN: the suite budget is spent"
      brc=1
    else
      timeout -k 10 "$blimit" "$bbin" --benchmark_out="$LOGS/bwd_bench.json" --benchmark_out_format=json \
          >"$LOGS/bwd_bench.log" 2>&1 || brc=$?
      [ "$brc" -eq 124 ] && detail "bwd_bench TIMED OUT after $blimit s (partial results)"
      bench_table "$LOGS/bwd_bench.json" >>"$DETAILS" 2>&1 || btrc=$?
    fi
    bwd="exit $brc, table $btrc"
  else
    detail "backward: bench/bwd_bench.cu does not exist yet; skipped"
  fi
  if [ "$rc" -eq 0 ] && [ "$trc" -eq 0 ] && [ "$brc" -eq 0 ] && [ "$btrc" -eq 0 ]; then
    status bench "OK$([ -f bench/bwd_bench.cu ] || echo ' (bwd_bench skipped: not in this tree)')" "$t0"
  else
    status bench "FAIL (fwd exit $rc, table $trc; bwd $bwd)" "$t0"
  fi
  publish
}

# ---- compare ----------------------------------------------------------------------------------------
phase_compare() {
  local t0=$SECONDS rc=0 brc=0 limit
  out_of_time compare && return 0
  limit=$(phase_limit "${COMPARE_TIMEOUT_S:-300}")
  section "compare (hattn vs PyTorch SDPA cuDNN / FA2 / FA4): forward"
  # shellcheck disable=SC2086  # COMPARE_ARGS is a list of words
  timeout -k 15 "$limit" "${PYTHON:-python3}" scripts/compare_torch.py --lib "$BUILD_DIR/libhattn.so" --out "$OUT" ${COMPARE_ARGS:-} \
      >"$LOGS/compare_table.md" 2>"$LOGS/compare_progress.log" || rc=$?
  [ "$rc" -eq 124 ] && detail "compare_torch.py TIMED OUT after $limit s (partial results)"
  if [ -s "$LOGS/compare_table.md" ]; then
    cat "$LOGS/compare_table.md" >>"$DETAILS"
  else
    detail "no table; last lines of its log:"
    tail -n 15 "$LOGS/compare_progress.log" >>"$DETAILS"
  fi
  publish

  # The backward: same grid, same process for every backend; the plot to $OUT, the rest in logs.tgz.
  section "compare (hattn vs PyTorch SDPA cuDNN / FA2 / FA4): backward"
  limit=$(phase_limit "${COMPARE_BWD_TIMEOUT_S:-300}")
  if [ "${COMPARE_BWD_TIMEOUT_S:-300}" -eq 0 ]; then
    detail "backward not asked for (COMPARE_BWD_TIMEOUT_S=0)"
  elif [ "$limit" -lt "$PHASE_MIN_S" ]; then
    detail "backward NOT RUN: only $((SUITE_BUDGET_S - SECONDS)) s of the ${SUITE_BUDGET_S} s budget left"
    brc=1
  else
    # shellcheck disable=SC2086  # COMPARE_ARGS and COMPARE_BWD_ARGS are lists of words
    timeout -k 15 "$limit" "${PYTHON:-python3}" scripts/compare_torch.py --bwd --lib "$BUILD_DIR/libhattn.so" \
        --out "$LOGS/compare_bwd" ${COMPARE_ARGS:-} ${COMPARE_BWD_ARGS:-} \
        >"$LOGS/compare_bwd_table.md" 2>"$LOGS/compare_bwd_progress.log" || brc=$?
    [ "$brc" -eq 124 ] && detail "compare_torch.py --bwd TIMED OUT after $limit s (partial results)"
    [ -f "$LOGS/compare_bwd/compare_bwd.png" ] && cp "$LOGS/compare_bwd/compare_bwd.png" "$OUT/"
    if [ -s "$LOGS/compare_bwd_table.md" ]; then
      cat "$LOGS/compare_bwd_table.md" >>"$DETAILS"
    else
      detail "no table; last lines of its log:"
      tail -n 15 "$LOGS/compare_bwd_progress.log" >>"$DETAILS"
    fi
  fi
  if [ "$rc" -eq 0 ] && [ "$brc" -eq 0 ]; then status compare OK "$t0"; else status compare "FAIL (fwd exit $rc, bwd exit $brc)" "$t0"; fi
  publish
}

# ---- micro ------------------------------------------------------------------------------------------
phase_micro() {
  local t0=$SECONDS rc=0 limit
  out_of_time micro && return 0
  limit=$(phase_limit "${MICRO_TIMEOUT_S:-180}")
  section micro
  if [ ! -f scripts/run_micro.sh ]; then
    detail "skipped: scripts/run_micro.sh does not exist"
    status micro "SKIPPED (no script)" "$t0"
    publish
    return 0
  fi
  mkdir -p "$OUT/micro"
  timeout -k 10 "$limit" bash scripts/run_micro.sh "$OUT/micro" >"$LOGS/micro.log" 2>&1 || rc=$?
  [ "$rc" -eq 124 ] && detail "run_micro.sh TIMED OUT after $limit s"
  tail -n 30 "$LOGS/micro.log" >>"$DETAILS"
  if [ "$rc" -eq 0 ]; then status micro OK "$t0"; else status micro "FAIL (exit $rc)" "$t0"; fi
  publish
}

# ---- sanitize ---------------------------------------------------------------------------------------
# Arguments of `build/bin/hattn fwd` (src/cli/main.cu) for one small variant at an odd seqlen (tail
# tiles masked). SANITIZE_CLI_ARGS overrides the template; placeholders {d} {dtype} {causal}
# {seqlen} {extra} are filled in per variant. {extra} comes last, so a variant's own --batch,
# --heads or --seqlen-q/-k override the template's. --iters 0: no timing runs under the tools.
cli_args() {  # head_dim dtype causal(0/1) [extra flags]
  local causal_flag=""
  [ "$3" = 1 ] && causal_flag="--causal"
  local t=${SANITIZE_CLI_ARGS:-"--batch 1 --heads 2 --seqlen {seqlen} --dim {d} --dtype {dtype} {causal} {extra} --iters 0 --warmup 0"}
  t=${t//\{d\}/$1}
  t=${t//\{dtype\}/$2}
  t=${t//\{causal\}/$causal_flag}
  t=${t//\{extra\}/${4:-}}
  echo "${t//\{seqlen\}/$SANITIZE_SEQLEN}"
}

# Every kernel variant the library builds: head_dim x dtype x mask, plus the d128 bf16 ablations;
# then shapes that take other paths through the kernel: GQA, persistent grids with more tiles than
# SMs for every head dim and both masks (one CTA per SM walks several tiles, 320-480 of them; the
# ping-pong turn, two Q slots and the O store's deferred read wait carry over from tile to tile;
# d64/d128 stage O in its own buffer, d256 in Q's; once more without the intra-warpgroup overlap),
# and causal with seqlen_q > seqlen_k (rows that see no key). The CLI passes the forward's
# workspace, so causal runs of 1k keys or more take the dynamic tile walk (the persistent causal
# ones run 1100 keys for it); one persistent causal run without it; the same for the FP8 forward
# (`--dtype e4m3`, 1300 keys: its d128 walk starts at 1280; d256 keeps the fixed walk), and two
# e4m3 runs whose pre-pass has RoPE and the Hadamard (V's quantizer overlapped with the Q / K
# launch; at d256 the Q / K kernel on cluster pairs). The large persistent shapes skip the
# reference check (the tools slow its kernel most).
# The backward (`hattn bwd`): every head dim and mask in bf16, fp16 once, the deterministic mode
# (ordered dQ adds) per head dim, GQA, and causal with seqlen_q > seqlen_k.
sanitize_variants() {  # prints "command head_dim dtype causal extra-flags"
  local d dtype causal
  for d in 64 128 256; do
    for dtype in bf16 fp16; do
      for causal in 0 1; do echo "fwd $d $dtype $causal"; done
    done
  done
  echo "fwd 128 bf16 0 --no-pingpong"
  echo "fwd 128 bf16 0 --no-intra-wg-overlap"
  echo "fwd 128 bf16 0 --no-pingpong --no-intra-wg-overlap"
  echo "fwd 128 bf16 1 --heads 8 --heads-kv 2"
  for d in 64 128 256; do
    echo "fwd $d bf16 0 --batch 4 --heads 40 --no-verify"
    echo "fwd $d bf16 1 --batch 4 --heads 40 --seqlen 1100 --no-verify"
  done
  echo "fwd 128 bf16 1 --batch 4 --heads 40 --no-intra-wg-overlap --no-verify"
  echo "fwd 64 bf16 1 --batch 4 --heads 40 --seqlen 1100 --no-workspace --no-verify"
  for d in 64 128; do echo "fwd $d e4m3 1 --batch 4 --heads 40 --seqlen 1300 --no-verify"; done
  echo "fwd 128 e4m3 1 --batch 4 --heads 40 --seqlen 1300 --no-workspace --no-verify"
  echo "fwd 256 e4m3 0 --hadamard --rope half"
  echo "fwd 128 e4m3 1 --hadamard --rope interleaved"
  echo "fwd 64 fp16 1 --seqlen-q 333 --seqlen-k 200"
  for d in 64 128 256; do
    for causal in 0 1; do echo "bwd $d bf16 $causal"; done
    echo "bwd $d bf16 1 --deterministic"
  done
  echo "bwd 128 fp16 0"
  echo "bwd 128 bf16 1 --heads 8 --heads-kv 2 --seqlen-q 333 --seqlen-k 200"
  echo "bwd 64 bf16 1 --heads 8 --heads-kv 2 --seqlen-q 333 --seqlen-k 200"
  echo "bwd 64 fp16 1 --heads 4 --heads-kv 1 --seqlen-q 200 --seqlen-k 333 --deterministic"
}

SANITIZE_TOOLS=(memcheck racecheck synccheck)

# One sanitizer run in the background: writes $dir/$idx.log and $dir/$idx.rc.
sanitize_one() {  # dir idx sanitizer tool seconds cli command args...
  local dir=$1 idx=$2 sanitizer=$3 tool=$4 seconds=$5 cli=$6 cmd=$7 rc=0
  shift 7
  timeout -k 5 "$seconds" "$sanitizer" --tool "$tool" --error-exitcode 99 "$cli" "$cmd" "$@" \
      </dev/null >"$dir/$idx.log" 2>&1 || rc=$?
  echo "$rc" >"$dir/$idx.rc"
}

phase_sanitize() {
  local t0=$SECONDS limit log="$LOGS/sanitize.log" cli="$BUILD_DIR/bin/hattn" failures=0 runs=0
  out_of_time sanitize && return 0
  limit=$(phase_limit "${SANITIZE_TIMEOUT_S:-300}")
  section "sanitize (compute-sanitizer)"
  : >"$log"
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ ! -x "$sanitizer" ]; then
    detail "compute-sanitizer not found"
    status sanitize "FAIL (no compute-sanitizer)" "$t0"
    publish
    return 0
  fi
  if [ -f scripts/sanitize_ptx_tests.sh ]; then
    local prc=0
    BUILD_DIR="$BUILD_DIR" SANITIZER="$sanitizer" timeout -k 10 "$((limit / 2))" bash scripts/sanitize_ptx_tests.sh \
        >"$LOGS/sanitize_ptx.log" 2>&1 || prc=$?
    detail "scripts/sanitize_ptx_tests.sh (PTX wrapper tests): exit $prc"
    grep -E 'errors=|clean|problems|not found|no .*binaries' "$LOGS/sanitize_ptx.log" | head -20 | sed 's/^/  /' >>"$DETAILS"
    [ "$prc" -eq 124 ] && detail "  TIMED OUT after $((limit / 2)) s"
    [ "$prc" -ne 0 ] && failures=$((failures + 1))
  else
    detail "scripts/sanitize_ptx_tests.sh does not exist; PTX tests not sanitized"
  fi
  if [ ! -x "$cli" ]; then
    detail "no $cli (build failed?)"
    status sanitize "FAIL (no CLI)" "$t0"
    publish
    return 0
  fi
  # Every (tool, variant) pair, SANITIZE_JOBS at a time (the tools are mostly host-bound), each
  # under its own timeout and all inside the phase's limit.
  local jobs=${SANITIZE_JOBS:-6} dir="$LOGS/sanitize_runs" deadline=$((t0 + limit)) per_run_cap=120
  mkdir -p "$dir"
  local -a variants names tools cmds argss
  # SANITIZE_ONLY: an extended regex; only the variants whose line ("bwd 64 bf16 1 ...") matches.
  mapfile -t variants < <(sanitize_variants | grep -E "${SANITIZE_ONLY:-.}")
  local tool v cmd d dtype causal extra idx=0 per_run
  for tool in "${SANITIZE_TOOLS[@]}"; do
    for v in "${variants[@]}"; do
      read -r cmd d dtype causal extra <<<"$v"
      tools[idx]=$tool
      cmds[idx]=$cmd
      names[idx]="$tool $cmd d$d $dtype $([ "$causal" = 1 ] && echo causal || echo full)${extra:+ $extra}"
      argss[idx]=$(cli_args "$d" "$dtype" "$causal" "$extra")
      idx=$((idx + 1))
    done
  done
  local total=$idx i
  for ((i = 0; i < total; i++)); do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n 2>/dev/null || true; done
    per_run=$((deadline - SECONDS))
    if [ "$per_run" -lt 5 ]; then
      echo "notrun" >"$dir/$i.rc"
      continue
    fi
    [ "$per_run" -gt "$per_run_cap" ] && per_run=$per_run_cap
    # shellcheck disable=SC2086  # the CLI arguments are a list of words
    sanitize_one "$dir" "$i" "$sanitizer" "${tools[i]}" "$per_run" "$cli" "${cmds[i]}" ${argss[i]} &
  done
  wait
  local rc why
  declare -A ok_per_tool=() total_per_tool=()
  for ((i = 0; i < total; i++)); do
    tool=${tools[i]}
    total_per_tool[$tool]=$(( ${total_per_tool[$tool]:-0} + 1 ))
    rc=$(cat "$dir/$i.rc" 2>/dev/null || echo missing)
    if [ "$rc" = notrun ]; then
      detail "  ${names[i]}: NOT RUN (sanitize time limit reached)"
      failures=$((failures + 1))
      continue
    fi
    { echo "### $tool: $cli ${cmds[i]} ${argss[i]} -> exit $rc"; cat "$dir/$i.log" 2>/dev/null; } >>"$log"
    runs=$((runs + 1))
    if [ "$rc" = 0 ]; then
      ok_per_tool[$tool]=$(( ${ok_per_tool[$tool]:-0} + 1 ))
      continue
    fi
    failures=$((failures + 1))
    case "$rc" in
      99) why="sanitizer errors" ;;
      124|137) why="timed out (limit ${per_run_cap} s per run, or the phase's end)" ;;
      1) why="hattn verification failed" ;;
      2) why="bad CLI arguments" ;;
      3) why="CUDA/device error" ;;
      *) why="exit $rc" ;;
    esac
    detail "  ${names[i]}: FAIL ($why): $(grep -m1 -iE 'invalid|race|hazard|error|barrier|usage|unknown|mismatch' "$dir/$i.log" 2>/dev/null | cut -c1-160)"
  done
  rm -rf "$dir"
  for tool in "${SANITIZE_TOOLS[@]}"; do
    detail "$tool: ${ok_per_tool[$tool]:-0}/${total_per_tool[$tool]:-0} variants clean"
  done
  detail "(hattn fwd|bwd $(cli_args D DTYPE 0 | tr -s ' '); $jobs runs at a time)"
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | sort | uniq -c | head -6 >>"$DETAILS"
  if [ "$failures" -eq 0 ]; then status sanitize "OK ($runs runs)" "$t0"; else status sanitize "FAIL ($failures problems)" "$t0"; fi
  publish
}

# ---- robust -----------------------------------------------------------------------------------------
# One step of the robust phase: runs a command under a timeout, logs it, summarises it.
robust_step() {  # name cap log command...: runs under min(cap, the phase's time left)
  # A step whose time the suite budget clipped below its own cap and that then runs out was cut
  # short, not failed: it returns 200 and says so, and the phase reports itself incomplete.
  local name=$1 cap=$2 log=$3 rc=0 seconds
  shift 3
  seconds=$((deadline - SECONDS))
  [ "$seconds" -gt "$cap" ] && seconds=$cap
  if [ "$seconds" -lt 10 ]; then
    detail "$name: NOT RUN (robust time limit reached)"
    return 1
  fi
  timeout -k 10 "$seconds" "$@" </dev/null >"$log" 2>&1 || rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    if [ "$seconds" -lt "$cap" ]; then
      detail "$name: CUT after $seconds s by the suite's time budget (its own limit: $cap s); rerun the phase alone"
      return 200
    fi
    detail "$name: TIMED OUT after $seconds s"
  fi
  return "$rc"
}

phase_robust() {
  local t0=$SECONDS limit deadline failures=0 cut=0 skipped=0 rc
  out_of_time robust && return 0
  limit=$(phase_limit "${ROBUST_TIMEOUT_S:-420}")
  deadline=$((t0 + limit))
  section "robust (stress, hang guard, invalid input from PyTorch)"

  # GoogleTest binaries: the pass/fail line, the failed tests, and each test's own summary lines.
  local name bin log
  for name in stress_test hang_guard_test; do
    bin="$BUILD_DIR/test/$name"
    log="$LOGS/robust_$name.log"
    if [ ! -x "$bin" ]; then
      detail "$name: no $bin (build failed?)"
      failures=$((failures + 1))
      continue
    fi
    rc=0
    if [ "$name" = stress_test ]; then
      robust_step "$name" 180 "$log" "$bin" --gtest_color=no || rc=$?
    else
      robust_step "$name" 90 "$log" "$bin" --gtest_color=no || rc=$?
    fi
    detail "$name: exit $rc; $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]+ test' "$log" | tr '\n' ' ')"
    grep -E '^(ConcurrentThreads|ManyCallsNoLeak|Over2Pow31Elements):|^  .*(TFLOPS|batch entry|free SMs: the call)|: WRONG$|^hang guard child:|^\[  FAILED  \] [A-Za-z]' "$log" \
        | awk '!seen[$0]++' | head -40 | sed 's/^/  /' >>"$DETAILS"
    local s
    s=$(grep -cE '^\[  SKIPPED \] [A-Za-z].*\([0-9]+ ms\)' "$log")
    if [ "$s" -gt 0 ]; then
      skipped=$((skipped + s))
      grep -hoE '(GPU test skipped|Skipped): .*|needs [0-9.]+ GB.*' "$log" | sort | uniq -c | head -3 | sed 's/^/  /' >>"$DETAILS"
    fi
    if [ "$rc" -eq 200 ]; then
      cut=$((cut + 1))
      grep -q '^\[  FAILED  \] [A-Za-z]' "$log" && failures=$((failures + 1))  # a failure before the cut still counts
    elif [ "$rc" -ne 0 ]; then
      failures=$((failures + 1))
    fi
  done

  # Invalid input from PyTorch processes (one child per case).
  log="$LOGS/robust_bad_input_torch.log"
  rc=0
  # 505 cases (forward, backward, FP8 pre-pass, FP8 forward), each child 5-9 s (torch and a CUDA
  # context): about 3 minutes at 16 children at a time on a 16-core GPU host.
  robust_step bad_input_torch.py 330 "$log" \
      env PYTHONUNBUFFERED=1 HATTN_LIB="$BUILD_DIR/libhattn.so" "${PYTHON:-python3}" test/python/bad_input_torch.py \
      --lib "$BUILD_DIR/libhattn.so" --timeout 120 || rc=$?
  detail "bad_input_torch.py: exit $rc; $(tail -n 1 "$log")"
  grep -E '^(FAIL|SKIP)|^cpu checks|^children:' "$log" | head -20 | cut -c1-300 | sed 's/^/  /' >>"$DETAILS"
  grep -q '^SKIP' "$log" && skipped=$((skipped + 1))
  if [ "$rc" -eq 200 ]; then
    cut=$((cut + 1))
    grep -q '^FAIL' "$log" && failures=$((failures + 1))  # a failure before the cut still counts
  elif [ "$rc" -ne 0 ]; then
    failures=$((failures + 1))
  fi

  if [ "$failures" -gt 0 ]; then
    status robust "FAIL ($failures of 3 steps$([ "$cut" -gt 0 ] && echo ", $cut cut by the budget"))" "$t0"
  elif [ "$cut" -gt 0 ]; then
    status robust "INCOMPLETE ($cut of 3 steps cut by the suite budget, no failure seen)" "$t0"
  else
    status robust "OK$([ "$skipped" -gt 0 ] && echo " ($skipped SKIPPED)")" "$t0"
  fi
  publish
}

# ---- maxlen -----------------------------------------------------------------------------------------
phase_maxlen() {
  local t0=$SECONDS rc=0 limit
  out_of_time maxlen && return 0
  limit=$(phase_limit "${MAXLEN_TIMEOUT_S:-300}")
  section "maxlen (the longest forward that fits in memory, checked against cuDNN and float64)"
  # Its own budget stops short of the phase's limit, so it reports instead of being killed.
  # shellcheck disable=SC2086  # MAXLEN_ARGS is a list of words
  timeout -k 15 "$limit" "${PYTHON:-python3}" scripts/max_seqlen.py --lib "$BUILD_DIR/libhattn.so" \
      --json "$LOGS/maxlen.json" --budget-s "$((limit > 60 ? limit - 30 : limit / 2))" ${MAXLEN_ARGS:-} \
      >"$LOGS/maxlen_table.md" 2>"$LOGS/maxlen_progress.log" || rc=$?
  [ "$rc" -eq 124 ] && detail "max_seqlen.py TIMED OUT after $limit s"
  if [ -s "$LOGS/maxlen_table.md" ]; then
    cat "$LOGS/maxlen_table.md" >>"$DETAILS"
  else
    detail "no table; last lines of its log:"
    tail -n 15 "$LOGS/maxlen_progress.log" >>"$DETAILS"
  fi
  if [ "$rc" -eq 0 ]; then status maxlen OK "$t0"; else status maxlen "FAIL (exit $rc)" "$t0"; fi
  publish
}

# ---- python -----------------------------------------------------------------------------------------
phase_python() {
  local t0=$SECONDS rc=0 limit
  out_of_time python && return 0
  limit=$(phase_limit "${PYTHON_TIMEOUT_S:-290}")
  section "python (pip install . and the pytest suites test/python/)"
  # The script keeps to its budget and summarises itself; the outer timeout is a backstop.
  OUT="$LOGS/python" PYTHON_BUDGET_S="$limit" PYTHON="${PYTHON:-python3}" \
      timeout -k 10 "$((limit + 15))" bash scripts/gpu_python.sh >"$LOGS/python.log" 2>&1 || rc=$?
  if [ -s "$LOGS/python/summary.txt" ]; then
    sed 's/^/  /' "$LOGS/python/summary.txt" >>"$DETAILS"
  else
    detail "no summary; last lines of its log:"
    tail -n 15 "$LOGS/python.log" >>"$DETAILS"
  fi
  if [ "$rc" -eq 0 ]; then status python OK "$t0"; else status python "FAIL (exit $rc)" "$t0"; fi
  publish
}

# ---- run ----------------------------------------------------------------------------------------------
echo "$HEADER"
phase_build
for p in "${PHASES[@]}"; do
  echo "--- phase $p ($SECONDS s elapsed)"
  "phase_$p"
done
publish
echo
echo "===================================== SUMMARY ($OUT/summary.txt) ====================================="
cat "$OUT/summary.txt"
# Exit non-zero if any phase failed, so a caller can tell at a glance.
! grep -qE ' FAIL' "$STATUS"
