#!/usr/bin/env bash
# CTest `cli_options`: the `hattn` CLI rejects bad command lines with exit status 2 and a message
# naming the problem, before it touches a GPU (so this runs on any machine), and its help texts
# exit 0 and list the FP8 options.
#   check_cli_options.sh HATTN_BINARY
# Exit 0: every case behaved; 1: a case did not (each is listed).
set -uo pipefail
cli=$1
failures=0

# expect STATUS SUBSTRING ARGS...: `hattn ARGS` exits STATUS and prints SUBSTRING (stdout or stderr).
expect() {
  local want=$1 text=$2
  shift 2
  local out rc
  out=$("$cli" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ] || [[ "$out" != *"$text"* ]]; then
    echo "FAIL: hattn $* -> exit $rc (want $want), output: ${out:0:300} (want it to contain '$text')"
    failures=$((failures + 1))
  else
    echo "ok:   hattn $* -> exit $rc"
  fi
}

# Help texts.
expect 0 "--dtype bf16|fp16|e4m3" --help
expect 0 "--rope interleaved|half" --help
expect 0 "--v-layout transposed|rows" --help
expect 0 "accuracy-fp8" --help
expect 0 "Bernoulli(0.001)" accuracy-fp8 --help

# --dtype e4m3 and its pre-pass options.
expect 2 "--dtype expects bf16, fp16 or e4m3, got 'int8'" --dtype int8
expect 2 "--hadamard needs --dtype e4m3" --hadamard
expect 2 "--hadamard needs --dtype e4m3" --dtype e4m3 --hadamard --dtype bf16
expect 2 "--rope needs --dtype e4m3" --rope half
expect 2 "--rope expects interleaved or half, got 'neox'" --dtype e4m3 --rope neox
expect 2 "--rope needs a value" --dtype e4m3 --rope
expect 2 "--hadamard takes no value" --dtype e4m3 --hadamard=1
expect 2 "--v-layout needs --dtype e4m3" --v-layout rows
expect 2 "--v-layout expects transposed or rows, got 'cols'" --dtype e4m3 --v-layout cols
expect 2 "--v-per-head needs --dtype e4m3" --v-per-head
expect 2 "there is no FP8 backward" bwd --dtype e4m3
expect 2 "ablations of the bf16 forward" --dtype e4m3 --no-pingpong
expect 2 "ablations of the bf16 forward" --dtype e4m3 --no-intra-wg-overlap
# Shapes hattn_fp8_prepass_validate / hattn_fwd_fp8_validate reject (checked before the GPU).
expect 2 "head_dim" --dtype e4m3 --dim 96
expect 2 "heads" --dtype e4m3 --heads 3 --heads-kv 2
expect 2 "invalid parameters" --dtype e4m3 --hadamard --rope half --seqlen 0

# accuracy-fp8's options.
expect 2 "unknown argument '--bogus'" accuracy-fp8 --bogus
expect 2 "--dims takes 64, 128 or 256, got 96" accuracy-fp8 --dims 64,96
expect 2 "must be >= 1" accuracy-fp8 --rows 0
expect 2 "--seqlens must be >= 1" accuracy-fp8 --seqlens 4096,-1
expect 2 "expects an integer" accuracy-fp8 --heads four
expect 2 "needs a value" accuracy-fp8 --seed

if [ "$failures" -gt 0 ]; then
  echo "$failures case(s) failed"
  exit 1
fi
echo "all cases passed"
