#!/usr/bin/env bash
# The FP8 forward's kernel variants (src/host/fwd_fp8_variants.h: lazy O rescale, two-level
# accumulation) and grids (automatic / one CTA per tile / one per SM) on a GPU host, from the
# repository root:
#
#   OUT=/some/dir bash scripts/ab_fp8.sh
#
# One build folder with -DHATTN_FP8_VARIANTS=ON (Ninja when installed, Release, ptxas warnings as
# errors): the library, every (variant, head dim) kernel in its own translation unit, fwd_fp8_test
# and bench/fwd_fp8_ab. Then, each step under its own timeout so a crash or hang in one does not
# hide the others:
#   tests      fwd_fp8_test once (the default path's cases + a set per variant against float64),
#              in 4 shards at once (the float64 reference is CPU-bound)
#   memcheck   compute-sanitizer memcheck on a few variant cases
#   racecheck, synccheck  the same on the in-kernel V transpose's cases (TV_SANITIZE_FILTER)
#   ab         bench/fwd_fp8_ab: every variant (on every grid of GRIDS) interleaved, best of 3
#              rounds, d 64/128/256 x seqlen 2k/8k/16k (SEQLENS) x full/causal, 16k tokens,
#              heads = 2048 / d; the TFLOPS table, then each column's ratio to base (the plain
#              path; the library's default is lazy_rowsum_early_noturn_q128 at d128 and d256,
#              lazy_p2_c3_sturn at d64) and, with two grids or
#              more, each grid's ratio to the first per variant LAST
# Writes $OUT/summary.txt (printed last), $OUT/ab.txt and $OUT/logs.tgz (every log).
#
# Environment: OUT (default ./ab_fp8_out), BUILD_DIR (build-ab-fp8), JOBS (16), BUDGET_S (300),
#   VARIANTS (all of src/host/fwd_fp8_variants.h; e.g. lazy,lazy_rowsum), GRIDS (auto; e.g. tiles,auto: one CTA per tile
#   against the launcher's persistent rule), SEQLENS (2048,8192,16384), VLAYOUTS (rows; rows,vt:
#   V^T from the pre-pass against the call's own transpose pass), HEAD_DIMS (64,128,256),
#   AB_TIMEOUT_S (120), PTXAS_WERROR (ON; OFF builds a probe variant that spills outside its loop),
#   NCU_STALLS (0; 1: after the A/B, its first NCU_LAUNCHES (6) forward kernels -- the variants in
#   order on the first shape -- under ncu: warp stall reasons (cycles per issued instruction each), issue slots, instruction mix, in
#   $OUT/ncu_stalls.txt; "No Instruction" stalls there are instruction-cache misses),
#   TESTS (1; 0: no fwd_fp8_test, for a measurement-only call), CUDA_DEFS (compile-time knobs for
#   every kernel, e.g. -DHATTN_FWD_FP8_SKIP_HIDDEN_BLOCKS=0; give such a build its own BUILD_DIR),
#   PREPASS_TESTS (0; 1: also fp8_prepass_test, 4 shards, after fwd_fp8_test),
#   V_PER_HEAD (0; 1: the A/B's inputs with one V descale per head, HATTN_FP8_PREPASS_V_PER_HEAD),
#   ACCURACY_VARIANTS (empty: skip; e.g. base,twolevel: bench/fwd_fp8_accuracy_ab after the A/B,
#   those variants beside the library kernel on FlashAttention-3's outlier inputs),
#   ACCURACY_HEAD_DIMS (128), ACCURACY_SEQLENS (4096,16384,65536,131072), ACCURACY_TIMEOUT_S (150),
#   SUBSET (unset: the build folder's HATTN_FP8_VARIANT_SUBSET as cached, all variants in a new one;
#   e.g. the VARIANTS list: only those kernels are compiled, a few minutes less; the others then
#   show as not built; empty: all).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-ab_fp8_out}
BUILD_DIR=${BUILD_DIR:-build-ab-fp8}
JOBS=${JOBS:-16}
BUDGET_S=${BUDGET_S:-300}
PTXAS_WERROR=${PTXAS_WERROR:-ON}
NCU_STALLS=${NCU_STALLS:-0}
NCU_LAUNCHES=${NCU_LAUNCHES:-6}
VARIANTS=${VARIANTS:-}
GRIDS=${GRIDS:-}
SEQLENS=${SEQLENS:-}
VLAYOUTS=${VLAYOUTS:-}
HEAD_DIMS=${HEAD_DIMS:-}
AB_TIMEOUT_S=${AB_TIMEOUT_S:-120}
PREPASS_TESTS=${PREPASS_TESTS:-0}
TESTS=${TESTS:-1}
CUDA_DEFS=${CUDA_DEFS:-}
V_PER_HEAD=${V_PER_HEAD:-0}
ACCURACY_VARIANTS=${ACCURACY_VARIANTS:-}
ACCURACY_HEAD_DIMS=${ACCURACY_HEAD_DIMS:-128}
ACCURACY_SEQLENS=${ACCURACY_SEQLENS:-4096,16384,65536,131072}
ACCURACY_TIMEOUT_S=${ACCURACY_TIMEOUT_S:-150}
RESERVE_S=8
SHARDS=4

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/hattn-ab-fp8-logs.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
STATUS="$LOGS/status.txt"
: >"$STATUS"
SECONDS=0

# Small cases of the variants that change the most (lazy rescale, two-level, row sums) at each head dim,
# of the default d64 path (192-row tiles whose last slice lies past seqlen_q), and of the early exps'
# recompute from shared memory (scores far past their reach).
SANITIZE_FILTER='Cases/Fp8Kernel.*/b1_hq2_hkv2_sq700_sk200_d128_causal_bf16_lazy:Cases/Fp8Kernel.*/b1_hq2_hkv1_sq1000_sk1000_d64_causal_bf16_lazy_twolevel:Cases/Fp8Kernel.*/b1_hq2_hkv2_sq1000_sk300_d256_causal_bf16_lazy:Cases/Fp8Kernel.*/b1_hq2_hkv1_sq1000_sk1000_d64_causal_bf16_lazy_twolevel_rowsum:Cases/Fp8Kernel.*/b1_hq2_hkv2_sq700_sk200_d128_causal_bf16_lazy_rowsum:Cases/Fp8Kernel.*/b1_hq2_hkv1_sq17_sk17_d64_full_bf16:Cases/Fp8Kernel.*/b2_hq4_hkv1_sq1000_sk17_d64_causal_bf16_ctas3:Cases/Fp8Kernel.*/b1_hq2_hkv1_sq300_sk1000_d128_full_bf16_kjump10_lazy_early:Cases/Fp8Kernel.*/b1_hq2_hkv1_sq300_sk1000_d256_causal_bf16_kjump10_lazy_rowsum_early:Cases/Fp8Kernel.*/b1_hq2_hkv1_sq300_sk1000_d128_causal_bf16_kjump10:Cases/Fp8Kernel.*/b1_hq2_hkv1_sq300_sk1000_d128_full_bf16_kjump10_lazy_rowsum_early_sturn'

# The in-kernel V transpose (the _tv variants: staging ring, transposer warps, the end-of-walk slot)
# under racecheck and synccheck as well: one case per head dim and a persistent walk of several
# tiles per CTA (causal, then GQA strided); and the library's d256 kernel (Q in registers) on a
# walk.
TV_SANITIZE_FILTER='Cases/Fp8Kernel.*/b1_hq2_hkv2_sq700_sk200_d128_causal_bf16_lazy_rowsum_early_noturn_tv:Cases/Fp8Kernel.*/b1_hq2_hkv2_sq1000_sk300_d256_causal_bf16_lazy_rowsum_noturn_tv:Cases/Fp8Kernel.*/b1_hq2_hkv1_sq1000_sk1000_d64_causal_bf16_lazy_p2_c3_sturn_tv:Cases/Fp8Kernel.*/b1_hq4_hkv2_sq1000_sk1000_d128_causal_bf16_ctas2_lazy_rowsum_early_noturn_tv:Cases/Fp8Kernel.*/b2_hq4_hkv1_sq1000_sk1000_d64_full_strided_bf16_ctas3_lazy_p2_c3_sturn_tv:Cases/Fp8Kernel.*/b1_hq4_hkv2_sq1000_sk1000_d256_causal_bf16_ctas2'
SANITIZE_FILTER="$SANITIZE_FILTER:$TV_SANITIZE_FILTER"

# shellcheck source=scripts/gpu_steps.sh
source scripts/gpu_steps.sh  # limit, record, run, select_generator

# ---- build ------------------------------------------------------------------------------------
select_generator "$BUILD_DIR"
subset_arg=()
[ -n "${SUBSET+set}" ] && subset_arg=("-DHATTN_FP8_VARIANT_SUBSET=$SUBSET")
run build 170 bash -c "cmake -S . -B '$BUILD_DIR' ${gen[*]:-} ${subset_arg[*]:-} -DCMAKE_BUILD_TYPE=Release -DHATTN_PTXAS_WERROR=$PTXAS_WERROR \
  -DHATTN_FP8_VARIANTS=ON -DHATTN_BUILD_CLI=OFF '-DCMAKE_CUDA_FLAGS=$CUDA_DEFS' '-DCMAKE_CXX_FLAGS=$CUDA_DEFS' && cmake --build '$BUILD_DIR' -j $JOBS --target fwd_fp8_test fwd_fp8_ab \
  $([ "$PREPASS_TESTS" = 1 ] && echo fp8_prepass_test) $([ -n "$ACCURACY_VARIANTS" ] && echo fwd_fp8_accuracy_ab)"
BUILD_OK=0
grep -q '^build .*PASS' "$STATUS" && BUILD_OK=1

if [ "$BUILD_OK" -eq 1 ]; then
  # ---- tests: 4 shards in parallel, one status line per test binary ---------------------------
  run_shards() {  # NAME: $BUILD_DIR/test/NAME in $SHARDS gtest shards at once, logs joined into NAME.log
    local name=$1 t0=$SECONDS lim rc_all=0 pids=() i p
    lim=$(limit 90)
    for i in $(seq 0 $((SHARDS - 1))); do
      GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$i timeout -k 5 "$lim" "$BUILD_DIR/test/$name" \
        >"$LOGS/$name.$i.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc_all=$?; done
    if [ "$rc_all" -eq 0 ]; then record "$name" PASS $((SECONDS - t0))
    elif [ "$rc_all" -eq 124 ] || [ "$rc_all" -eq 137 ]; then record "$name" "TIMEOUT after ${lim} s" $((SECONDS - t0))
    else record "$name" "FAIL (rc $rc_all)" $((SECONDS - t0)); fi
    cat "$LOGS/$name".*.log >"$LOGS/$name.log"
  }
  [ "$TESTS" = 1 ] && run_shards fwd_fp8_test
  [ "$PREPASS_TESTS" = 1 ] && run_shards fp8_prepass_test

  # ---- the A/B ------------------------------------------------------------------------------------
  ab_args=()  # what to run; the rounds and calls per round are given per run below
  [ -n "$VARIANTS" ] && ab_args+=(--variants "$VARIANTS")
  [ -n "$GRIDS" ] && ab_args+=(--grids "$GRIDS")
  [ -n "$SEQLENS" ] && ab_args+=(--seqlens "$SEQLENS")
  [ -n "$VLAYOUTS" ] && ab_args+=(--v-layouts "$VLAYOUTS")
  [ -n "$HEAD_DIMS" ] && ab_args+=(--head-dims "$HEAD_DIMS")
  [ "$V_PER_HEAD" = 1 ] && ab_args+=(--v-per-head)
  run ab "$AB_TIMEOUT_S" "$BUILD_DIR/bench/fwd_fp8_ab" --rounds 3 --reps 10 "${ab_args[@]}"
  cp "$LOGS/ab.log" "$OUT/ab.txt" 2>/dev/null
  if [ "$NCU_STALLS" = 1 ]; then  # the A/B's first kernels once more, under Nsight Compute
    NCU_BIN=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    run ncu_stalls 150 "$NCU_BIN" --section WarpStateStats --section SchedulerStats --section InstructionStats \
      --metrics 'regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$' \
      --kernel-name regex:fwd_fp8_kernel --launch-count "$NCU_LAUNCHES" \
      "$BUILD_DIR/bench/fwd_fp8_ab" --rounds 1 --reps 1 "${ab_args[@]}"
    cp "$LOGS/ncu_stalls.log" "$OUT/ncu_stalls.txt" 2>/dev/null
  fi
  if [ -n "$ACCURACY_VARIANTS" ]; then
    run accuracy "$ACCURACY_TIMEOUT_S" "$BUILD_DIR/bench/fwd_fp8_accuracy_ab" --variants "$ACCURACY_VARIANTS" \
      --head-dims "$ACCURACY_HEAD_DIMS" --seqlens "$ACCURACY_SEQLENS"
    cp "$LOGS/accuracy.log" "$OUT/accuracy.txt" 2>/dev/null
  fi

  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$SAN" ]; then
    run memcheck 40 "$SAN" --tool memcheck --error-exitcode 1 "$BUILD_DIR/test/fwd_fp8_test" --gtest_filter="$SANITIZE_FILTER"
    for tool in racecheck synccheck; do
      run "$tool" 40 "$SAN" --tool "$tool" --error-exitcode 1 "$BUILD_DIR/test/fwd_fp8_test" --gtest_filter="$TV_SANITIZE_FILTER"
    done
  else
    record memcheck "SKIPPED (no compute-sanitizer)" 0
  fi
fi

# ---- summary ----------------------------------------------------------------------------------
{
  echo "== hattn FP8 forward variants on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u '+%Y-%m-%d %H:%M UTC'), ${SECONDS} s"
  for t in fwd_fp8_test fp8_prepass_test; do  # the shards' counts, added up
    [ -f "$LOGS/$t.log" ] || continue
    printf '%-16s %d passed, %d failed, %d skipped (%d shards)\n' "$t" \
      "$(grep -c '^\[       OK \]' "$LOGS/$t.log")" \
      "$(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$LOGS/$t.log")" \
      "$(grep -cE '^\[  SKIPPED \] .*\([0-9]+ ms\)$' "$LOGS/$t.log")" "$SHARDS"
    grep -E '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$LOGS/$t.log" | head -12 | sed 's/^/    /'
  done
  for t in memcheck racecheck synccheck; do
    [ -f "$LOGS/$t.log" ] || continue
    line=$(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$LOGS/$t.log" | tr '\n' ' ')
    san=$(grep -E 'ERROR SUMMARY' "$LOGS/$t.log" | tail -1)
    printf '%-14s %s %s\n' "$t" "$line" "$san"
    grep -E '^\[  FAILED  \] ' "$LOGS/$t.log" | grep -v 'listed below' | head -12 | sed 's/^/    /'
  done
  if [ -f "$LOGS/fwd_fp8_test.log" ]; then
    echo "-- variant cases (O rel L2 vs float64 of the dequantized inputs; LSE max abs err)"
    grep -E '^fp8 rel_l2 .*_bf16_' "$LOGS/fwd_fp8_test.log" | sed 's/^fp8 rel_l2 /  /' | sort | head -60
    echo "-- default path, the longest cases"
    grep -E '^fp8 rel_l2 .*sk4097_d128_(full|causal)_bf16 ' "$LOGS/fwd_fp8_test.log" | sed 's/^fp8 rel_l2 /  /' | head -8
    echo "-- default path, ONE key per row (LSE = the score itself: its error is QK^T's, no sum, no P rounding)"
    grep -E '^fp8 rel_l2 .*_sk1_d128_full_bf16 ' "$LOGS/fwd_fp8_test.log" | sed 's/^fp8 rel_l2 /  /' | head -4
  fi
  echo "-- steps"
  cat "$STATUS"
  [ "$BUILD_OK" -eq 1 ] || tail -40 "$LOGS/build.log"
  grep -E 'error|warning' "$LOGS/build.log" 2>/dev/null | head -20
  if [ -f "$OUT/accuracy.txt" ]; then
    echo "-- accuracy (bench/fwd_fp8_accuracy_ab)"
    cat "$OUT/accuracy.txt"
  fi
  if [ -f "$OUT/ab.txt" ]; then
    echo "-- A/B (bench/fwd_fp8_ab; ratios LAST)"
    cat "$OUT/ab.txt"
  fi
} >"$OUT/summary.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
cat "$OUT/summary.txt"
