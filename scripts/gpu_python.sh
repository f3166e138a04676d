#!/usr/bin/env bash
# The Python package on a GPU host, from the repository root (no internet needed): installs it from
# this tree into a virtual environment that sees the system's packages (torch, scikit-build-core,
# cmake, ninja), `pip install --no-build-isolation --no-deps .`, then runs the pytest suites
# test/python/ (the CPU part and the GPU part: SDPA float64 sweep, torch.compile, training, bad
# inputs, and the check that hattn.attention fwd+bwd costs at most 3% more than the C API).
#
#   OUT=/some/dir bash scripts/gpu_python.sh
#
# Environment: OUT (gpu_python_out), PYTHON (python3, must import torch), PYTHON_BUDGET_S (360: the
# whole script's time), PIP_TIMEOUT_S (200), PYTEST_ARGS (more pytest arguments, e.g. "-k overhead"
# for one test; not used without pytest). Writes to $OUT: summary.txt (printed last),
# pip_install.log, pytest.log, junit.xml (with pytest). Without pytest installed, the suites run
# under test/python/run_without_pytest.py. Exit 0 when the install and every test passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-gpu_python_out}
PY=${PYTHON:-python3}
BUDGET_S=${PYTHON_BUDGET_S:-360}
PIP_TIMEOUT_S=${PIP_TIMEOUT_S:-200}
RESERVE_S=10  # kept for the summary
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hattn-python.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
SUMMARY="$OUT/summary.txt"
unset HATTN_LIB  # test the library installed with the package, not one named by the environment
SECONDS=0
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

note "== hattn Python package: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
command -v nvidia-smi >/dev/null 2>&1 &&
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' | tee -a "$SUMMARY"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
note "nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | head -1)"
note "python: $("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1 | tail -1)"
note "scikit-build-core: $("$PY" -c 'import scikit_build_core as s; print(s.__version__)' 2>&1 | tail -1)"

# ---- install -------------------------------------------------------------------------------------
# Into a virtual environment that sees the system's site-packages (pip installs only hattn there,
# and a system Python that refuses pip, PEP 668, is no obstacle). Where that environment cannot
# import torch (PYTHON is itself a virtual environment, or has no venv module), into a folder put
# on PYTHONPATH instead (pip install --target).
install_rc=0
VPY=$PY
: >"$OUT/pip_install.log"
pip_args=(-m pip install --no-build-isolation --no-deps -v)
if "$PY" -m venv --system-site-packages "$WORK/venv" >>"$OUT/pip_install.log" 2>&1 &&
   "$WORK/venv/bin/python" -c 'import torch, scikit_build_core' >>"$OUT/pip_install.log" 2>&1; then
  VPY="$WORK/venv/bin/python"
  where="a virtual environment over the system's packages"
else
  pip_args+=(--target "$WORK/site")
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
  where="$WORK/site (pip --target; a venv over $PY would not see its torch)"
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
t0=$SECONDS
timeout -k 10 "$PIP_TIMEOUT_S" "$VPY" "${pip_args[@]}" . >>"$OUT/pip_install.log" 2>&1 || install_rc=$?
if [ "$install_rc" -eq 0 ]; then
  note "install: OK ($((SECONDS - t0)) s, into $where): $("$VPY" -c 'import hattn; print(hattn.library().path, hattn.library().version())' 2>&1 | tail -1)"
else
  note "install: FAIL (pip exit $install_rc after $((SECONDS - t0)) s, into $where); from pip_install.log:"
  grep -E 'error|Error|FAILED' "$OUT/pip_install.log" | grep -v '^ *-' | head -15 | cut -c1-300 | tee -a "$SUMMARY"
  tail -n 5 "$OUT/pip_install.log" | cut -c1-300 | tee -a "$SUMMARY"
fi

# ---- tests ---------------------------------------------------------------------------------------
test_rc=0
# This script is for a Hopper host: GPU tests that skip here are a failure, not a pass.
no_gpu=$(cd test/python && "$VPY" -c 'from hopper import missing_hopper; print(missing_hopper())' 2>&1 | tail -1)
[ -n "$no_gpu" ] && note "GPU: NOT USABLE, the GPU tests will skip: $no_gpu"
left=$((BUDGET_S - SECONDS - RESERVE_S))
export HATTN_TIMING_FILE="$WORK/timing.txt"
if [ "$install_rc" -ne 0 ]; then
  note "tests: NOT RUN (no package)"
  test_rc=1
elif [ "$left" -lt 30 ]; then
  note "tests: NOT RUN (only $left s left of the ${BUDGET_S} s budget)"
  test_rc=1
else
  t0=$SECONDS
  if "$VPY" -c 'import pytest' 2>/dev/null; then
    # shellcheck disable=SC2206  # PYTEST_ARGS is a list of arguments
    runner=(-m pytest test/python -v -rfEs -s -p no:cacheprovider --junitxml="$OUT/junit.xml" ${PYTEST_ARGS:-})
  else
    note "pytest is not installed: running the suites with test/python/run_without_pytest.py"
    runner=(test/python/run_without_pytest.py)
  fi
  # src/python is not on the path: the tests import the installed package.
  timeout -k 10 "$left" env PYTHONUNBUFFERED=1 "$VPY" "${runner[@]}" >"$OUT/pytest.log" 2>&1 || test_rc=$?
  [ "$test_rc" -eq 124 ] && note "tests: TIMED OUT after $left s"
  note "tests ($((SECONDS - t0)) s, exit $test_rc): $(grep -E '[0-9]+ (passed|failed)' "$OUT/pytest.log" | tail -1)"
  # pytest's short summary lines, or the stand-in's per-case lines.
  grep -E '^(FAILED|ERROR) |::[^ ]+ FAILED$' "$OUT/pytest.log" | head -20 | cut -c1-300 | sed 's/^/  /' | tee -a "$SUMMARY"
  grep -E '^SKIPPED \[|SKIPPED \(' "$OUT/pytest.log" | grep -v '::' | head -8 | cut -c1-240 | sed 's/^/  /' | tee -a "$SUMMARY"
  grep -E '^training losses' "$OUT/pytest.log" | head -1 | cut -c1-300 | sed 's/^/  /' | tee -a "$SUMMARY"
  if [ -s "$HATTN_TIMING_FILE" ]; then
    sed 's/^/  /' "$HATTN_TIMING_FILE" | tee -a "$SUMMARY"
  else
    note "  TIMING: no result (the timing test did not run to its measurement)"
  fi
fi

[ -n "$no_gpu" ] && [ "$test_rc" -eq 0 ] && test_rc=3
note "== total ${SECONDS} s; install exit $install_rc, tests exit $test_rc$([ "$test_rc" -eq 3 ] && echo ' (no Hopper GPU: GPU tests skipped)')"
echo
echo "=============================== SUMMARY ($SUMMARY) ==============================="
cat "$SUMMARY"
[ "$install_rc" -eq 0 ] && [ "$test_rc" -eq 0 ]
