# Shared by scripts/gpu_fp8_fwd.sh and scripts/gpu_fp8_prepass.sh (sourced, not run): each step of
# such a script runs under its own timeout inside the script's time budget and leaves one status
# line, so a crash or a hang in one step does not hide the others.
# The sourcing script sets BUDGET_S, RESERVE_S, LOGS and STATUS, and uses bash's SECONDS.

# limit OWN_SECONDS: the step's timeout, clipped to the budget left.
limit() {
  local left=$((BUDGET_S - SECONDS - RESERVE_S))
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
record() { printf '%-34s %s (%d s)\n' "$1" "$2" "$3" >>"$STATUS"; }

# run NAME TIMEOUT CMD...: runs CMD into $LOGS/NAME.log, records PASS / FAIL rc / TIMEOUT / SKIPPED.
run() {
  local name=$1 own=$2; shift 2
  local t0=$SECONDS lim rc=0
  lim=$(limit "$own")
  if [ "$lim" -lt 5 ]; then record "$name" "SKIPPED (out of time)" 0; return 0; fi
  timeout -k 5 "$lim" "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then record "$name" "PASS" $((SECONDS - t0))
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then record "$name" "TIMEOUT after ${lim} s" $((SECONDS - t0))
  else record "$name" "FAIL (rc $rc)" $((SECONDS - t0)); fi
  return 0
}

# gen: Ninja when installed; a build folder made by another generator is started afresh.
select_generator() {  # BUILD_DIR
  gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  if [ -f "$1/CMakeCache.txt" ] && [ ${#gen[@]} -gt 0 ] &&
     ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$1/CMakeCache.txt"; then
    rm -rf "$1/CMakeCache.txt" "$1/CMakeFiles"
  fi
}
