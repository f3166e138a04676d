#!/usr/bin/env bash
# hattn's FP8 forward beside cuDNN's FP8 attention on a GPU host, from the repository root:
#
#   OUT=/some/dir bash scripts/gpu_fp8_compare.sh
#
# 1. cudnn-frontend: installs the nvidia-cudnn-frontend wheel found in $WHEEL_DIR, ./.whl or
#    ../../.whl (the checkout above a worktree) with pip --no-index --no-deps --target $CUDNN_FE_SITE
#    (no internet needed; it uses the cuDNN that PyTorch ships) and puts that folder on PYTHONPATH.
#    Without a wheel, an already importable `cudnn` module is used; without either, the comparison
#    says so in capitals and times hattn alone. For a GPU host without internet, fetch the wheel
#    on a machine with it (Python 3.12 shown):
#      python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d .whl nvidia-cudnn-frontend==1.32.0
# 2. Builds libhattn.so alone (target hattn_shared; its own build folder, Ninja when installed,
#    Release, ptxas warnings as errors).
# 3. Runs scripts/compare_torch.py --fp8 under COMPARE_BUDGET_S: per shape (head dim 64/128/256 x
#    seqlen 512..16k x full/causal, 16k tokens, 2048 / head_dim heads) hattn bf16, hattn's pre-pass
#    and e4m3 forward, and cuDNN FP8 on the same inputs, checked against bf16 SDPA, timed in
#    interleaved rounds. The sweep visits 2k, 16k and 8k first and starts no shape once its budget
#    is spent (those are listed as not run), so a slow machine or slow cuDNN graph builds still
#    give the columns that matter. Should the CUDA context break (a faulting kernel), the sweep is
#    rerun without cuDNN in a new process, so hattn's figures are not lost.
# Writes $OUT/summary.txt (printed last; the side-by-side table at its end), $OUT/compare_fp8.json,
# compare_fp8.csv, compare_fp8.png (with matplotlib) and $OUT/logs.tgz.
#
# Environment: OUT (gpu_fp8_compare_out), PYTHON (python3, with torch), BUILD_DIR (build-fp8cmp),
#   JOBS (16), BUILD_TIMEOUT_S (300), COMPARE_BUDGET_S (240: the comparison's wall time),
#   WHEEL_DIR, CUDNN_FE_SITE (/tmp/site), FP8_ARGS (extra compare_torch.py arguments, e.g. --quick).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-gpu_fp8_compare_out}
PY=${PYTHON:-python3}
BUILD_DIR=${BUILD_DIR:-build-fp8cmp}
JOBS=${JOBS:-16}
BUILD_TIMEOUT_S=${BUILD_TIMEOUT_S:-300}
COMPARE_BUDGET_S=${COMPARE_BUDGET_S:-240}
SITE=${CUDNN_FE_SITE:-/tmp/site}
# The comparison stops starting shapes this long before its timeout, to finish the one in flight
# and write its files.
SWEEP_MARGIN_S=30
# gpu_steps.sh's limit/run clip each step to what is left of BUDGET_S.
BUDGET_S=$((BUILD_TIMEOUT_S + COMPARE_BUDGET_S + 60))
RESERVE_S=5

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/hattn-fp8cmp-logs.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
STATUS="$LOGS/status.txt"
SUMMARY="$OUT/summary.txt"
: >"$STATUS"
: >"$SUMMARY"
SECONDS=0
note() { echo "$*" >>"$SUMMARY"; }  # the summary is printed once, at the end

# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh  # limit, record, run, select_generator

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
note "== hattn FP8 vs cuDNN FP8: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
note "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
note "python: $("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuDNN", torch.backends.cudnn.version())' 2>&1 | tail -1)"

# ---- 1. cudnn-frontend ---------------------------------------------------------------------------
wheel=""
for dir in ${WHEEL_DIR:+"$WHEEL_DIR"} .whl ../../.whl; do
  for w in "$dir"/nvidia_cudnn_frontend-*.whl; do
    [ -f "$w" ] && wheel=$w && break 2
  done
done
if [ -n "$wheel" ]; then
  t0=$SECONDS
  if timeout -k 5 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$wheel" >"$LOGS/pip.log" 2>&1; then
    note "cudnn-frontend wheel: installed $(basename "$wheel") into $SITE ($((SECONDS - t0)) s)"
  else
    note "cudnn-frontend wheel: INSTALL FAILED ($(basename "$wheel")): $(grep -iE 'error' "$LOGS/pip.log" | head -2 | tr '\n' ' ' | cut -c1-300)"
  fi
else
  note "cudnn-frontend wheel: none in ${WHEEL_DIR:+$WHEEL_DIR, }.whl or ../../.whl; using an installed cudnn module if any"
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
FE_ARGS=(--cudnn-frontend-path "$SITE")
if fe=$("$PY" -c 'import torch, cudnn; print("cudnn-frontend", cudnn.__version__, "cuDNN", cudnn.backend_version_string())' 2>&1); then
  note "cudnn-frontend: $(echo "$fe" | tail -1)"
else
  note "CUDNN-FRONTEND DOES NOT IMPORT: $(echo "$fe" | tail -1 | cut -c1-300); hattn is timed alone"
fi

# ---- 2. libhattn.so ------------------------------------------------------------------------------
select_generator "$BUILD_DIR"
run build "$BUILD_TIMEOUT_S" bash -c "cmake -S . -B '$BUILD_DIR' ${gen[*]:-} -DCMAKE_BUILD_TYPE=Release \
  -DHATTN_PTXAS_WERROR=ON -DHATTN_BUILD_TESTS=OFF -DHATTN_BUILD_BENCH=OFF -DHATTN_BUILD_CLI=OFF \
  -DHATTN_INSTALL=OFF && cmake --build '$BUILD_DIR' -j $JOBS --target hattn_shared"
LIB="$BUILD_DIR/libhattn.so"

# ---- 3. the comparison ---------------------------------------------------------------------------
compare_rc=""
if grep -q '^build .*PASS' "$STATUS" && [ -f "$LIB" ]; then
  lim=$(limit "$COMPARE_BUDGET_S")
  sweep=$((lim - SWEEP_MARGIN_S))
  [ "$sweep" -lt 30 ] && sweep=30
  t0=$SECONDS
  compare_rc=0
  # shellcheck disable=SC2086  # FP8_ARGS is a list of words on purpose
  timeout -k 10 "$lim" "$PY" scripts/compare_torch.py --fp8 --lib "$LIB" --out "$OUT" --budget-s "$sweep" \
    "${FE_ARGS[@]}" ${FP8_ARGS:-} >"$LOGS/compare.out" 2>"$LOGS/compare.err" || compare_rc=$?
  case $compare_rc in
    0) record compare "PASS" $((SECONDS - t0)) ;;
    124|137) record compare "TIMEOUT after ${lim} s" $((SECONDS - t0)) ;;
    3) record compare "CUDA CONTEXT BROKE (rc 3): the sweep stopped there" $((SECONDS - t0)) ;;
    *) record compare "FAIL (rc $compare_rc: a check failed, a leg is missing, or it crashed)" $((SECONDS - t0)) ;;
  esac
  if [ "$compare_rc" -eq 3 ]; then
    # hattn alone in a new process (a new CUDA context), so its figures survive a faulting peer.
    done_list=$("$PY" -c 'import json, sys; print(" ".join("d%d s%d %s" % (r["head_dim"], r["seqlen"], "causal" if r["causal"] else "full") for r in json.load(open(sys.argv[1]))["rows"]))' "$OUT/compare_fp8.json" 2>/dev/null)
    echo "shapes measured before the fault: $done_list" >"$LOGS/rerun.out"
    # shellcheck disable=SC2086  # FP8_ARGS is a list of words on purpose
    run rerun_without_cudnn "$COMPARE_BUDGET_S" "$PY" scripts/compare_torch.py --fp8 --lib "$LIB" \
      --out "$LOGS/rerun" --no-cudnn-fp8 --budget-s "$((sweep / 2))" ${FP8_ARGS:-}
  fi
else
  record compare "NOT RUN (no library)" 0
fi

# ---- summary -------------------------------------------------------------------------------------
{
  echo "-- steps (${SECONDS} s in all)"
  cat "$STATUS"
  if ! grep -q '^build .*PASS' "$STATUS"; then
    echo "-- build log (tail)"
    tail -30 "$LOGS/build.log" 2>/dev/null
  fi
  if [ -f "$LOGS/compare.err" ]; then
    echo "-- compare_torch.py: warnings, errors, failed shapes (stderr)"
    # Everything but the per-shape progress lines (the table below carries those rows and notes).
    grep -vE '^\[fp8 |^    (hattn bf16|skipped:)' "$LOGS/compare.err" | head -40 | cut -c1-400
  fi
  if [ -f "$LOGS/rerun_without_cudnn.log" ]; then
    echo "-- rerun without cuDNN after the fault (its table)"
    cat "$LOGS/rerun.out"
    grep -E '^\||geometric' "$LOGS/rerun_without_cudnn.log" | cut -c1-400
  fi
  if [ -s "$LOGS/compare.out" ]; then
    echo "-- hattn FP8 vs cuDNN FP8 (TFLOPS; e4m3 = hattn_fwd_fp8 on e4m3 inputs, V^T from the pre-pass, or with"
    echo "   FP8_ARGS=--fp8-v-rows V's rows and its own V^T kernel timed in; the pre-pass is its own column;"
    echo "   rel L2 against bf16 SDPA of the same bf16 inputs)"
    cat "$LOGS/compare.out"
  fi
} >>"$SUMMARY"
tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
cat "$SUMMARY"
[ "$compare_rc" = "0" ]
