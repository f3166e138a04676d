#!/usr/bin/env bash
# Builds the forward-pass variants side by side (one build folder each, library target only) and
# A/Bs them against each other and cuDNN in one process (scripts/ab_fwd.py) over the shapes the
# variants act on (persistent grids: seqlen 512..4k; SEQLENS=... widens it); BURST=N times N calls
# back to back per event pair instead of each call alone (what a launch overlapping the previous
# kernel's tail, "pdl", can win). Logs go to $OUT; a short table is printed last.
#   OUT=/some/dir bash scripts/ab_fwd.sh
#   (overrides: ROUNDS=4, JOBS=16, BUDGET_S=290, SEQLENS=512,1024,2048,4096, VARIANTS="base narrow0",
#    HEAD_DIMS=64,128,256, MASKS=full,causal, REF_TREE=<dir> for the variant "ref")
# Variants are compile-time definitions (-D..., e.g. the limits in kernels/fwd_rules.h), one
# case each in defs() below; "base" is the default build. The tile-boundary schedule A/B'd with
# this script (early Q release, turns carried across tiles, deferred O-store wait, two Q slots:
# +3-11% at 512-2k together) is the default path now; "narrow0" turns the d64 causal 128-row
# tile off (the A/B passes a workspace: there it holds up to 256 keys), "narrow640" etc. take it
# further with a workspace; "chain" reduces the softmax's row max and row sum in one dependent
# chain per row (the default is a balanced tree, kernels/sm90/fragment.cuh's row_reduce).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ab_fwd_out}
ROUNDS=${ROUNDS:-4}
SEQLENS=${SEQLENS:-512,1024,2048,4096}
JOBS=${JOBS:-16}
VARIANTS=${VARIANTS:-"base narrow0"}
mkdir -p "$OUT"
LOGDIR=$(mktemp -d)
T0=$(date +%s)

D=-DHATTN_FWD_
defs() {
  case "$1" in
    base) echo "" ;;
    narrow0) echo "${D}D64_CAUSAL_NARROW_MAX_SEQLEN=0 ${D}D64_CAUSAL_NARROW_MAX_SEQLEN_WS=0" ;;  # d64 causal on 192-row tiles at every length, with a workspace or not
    narrow512|narrow640) echo "${D}D64_CAUSAL_NARROW_MAX_SEQLEN_WS=${1#narrow}" ;;  # d64 causal on 128-row tiles up to 512 / 640 keys with a workspace (640: before run 51)
    narrow1k|narrow2k|narrow4k|narrow8k) echo "${D}D64_CAUSAL_NARROW_MAX_SEQLEN_WS=$((${1//[a-z]/} * 1024))" ;;  # ... up to 1k/2k/4k/8k keys (1k: before run 50)
    chain) echo "-DHATTN_ROW_REDUCE_TREE=0" ;;  # the softmax's row max / row sum as one dependent chain
    ref) echo "" ;;  # the default build of the source tree in REF_TREE (e.g. an earlier commit)
    eager) echo "${D}LAZY_RESCALE=0" ;;  # O rescaled after every block
    d64s2|d64s4) echo "${D}D64_STAGES=${1#d64s}" ;;  # d64's K/V ring depth
    d64noovl) echo "${D}D64_INTRA_WG_OVERLAP=0" ;;  # d64 without the intra-warpgroup overlap
    c2) echo "${D}D64_CONSUMERS=2" ;;  # d64 with two consumer warpgroups (128-row tiles)
    d64n96) echo "${D}D64_BLOCK_N=96" ;;  # d64 with 96-key blocks
    d64n64) echo "${D}D64_BLOCK_N=64" ;;  # d64 with 64-key blocks
    d64n176noovl) echo "${D}D64_BLOCK_N=176 ${D}D64_INTRA_WG_OVERLAP=0" ;;  # d64 on FA3's long-sequence tile: 176-key blocks, no intra-warpgroup overlap (run 52c: -20%)
    d256n64) echo "${D}D256_BLOCK_N=64" ;;  # d256 with 64-key blocks (the default since run 47e)
    d256n80) echo "${D}D256_BLOCK_N=80" ;;  # d256 with 80-key blocks (before run 47e)
    spec0) echo "${D}SPECULATIVE_MAX=0" ;;  # the row max before the exps in every step (before run 48)
    sections) echo "${D}CAUSAL_SECTIONS=1" ;;  # causal tiles in sections of heads, longest first across each
    persist) echo "${D}PERSISTENT_MAX_SEQLEN_K=1000000000" ;;  # d128 full masks on the persistent walk at every length (d64/d256 do by default)
    persist0) echo "${D}PERSISTENT_MAX_SEQLEN_K_D64_D256=4096" ;;  # d64/d256 full masks persistent only up to 4096 keys (before run 43e)
    dyn0) echo "${D}DYNAMIC_CAUSAL=0" ;;  # causal problems ignore the workspace: fixed tile order (before run 46)
    early) echo "-DHATTN_SCHED_CLAIM_AFTER_LOADS=0" ;;  # the dynamic walk claims the next tile right after the current tile's Q load (run 46a)
    announce) echo "${D}TILE_ANNOUNCE=1" ;;  # the tile index on its own mbarrier, ahead of Q (the default since run 47)
    announce0) echo "${D}TILE_ANNOUNCE=0" ;;  # the tile index with Q (before run 47)
    dynfull0) echo "${D}DYNAMIC_FULL=0" ;;  # full masks ignore the workspace: d64's partial last tiles on the fixed walk (before run 55)
    dyn512) echo "${D}DYNAMIC_CAUSAL_MIN_SEQLEN_K=512" ;;  # the dynamic causal walk from 512 keys (default 1k; d64's 192-row tile at every length)
    ctile) echo "${D}PERSISTENT_CAUSAL_MAX_SEQLEN_K=0" ;;  # causal problems the dynamic walk does not take (< 1k keys) on one CTA per tile
    skip0) echo "${D}SKIP_HIDDEN_BLOCKS=0" ;;  # consumers compute (masked) the blocks none of their rows sees (before run 50)
    split0) echo "${D}SPLIT_TAIL=0" ;;  # full masks do not split their last pass over KV blocks (before run 56; d128 persistent only up to 4k keys then)
    split0p) echo "${D}SPLIT_TAIL=0 ${D}PERSISTENT_MAX_SEQLEN_K=1000000000" ;;  # ... with d128 full masks on the persistent walk at every length (the split tail's grid, unsplit)
    splitrun2|splitrun4|splitrun8|splitrun16) echo "${D}SPLIT_MIN_RUN=${1#splitrun}" ;;  # the split tail with runs of at least 2 / 4 / 8 / 16 KV blocks (default 16)
    pdl) echo "${D}PDL=1" ;;  # programmatic dependent launch: a call's prologue overlaps the previous kernel's tail
    ohalves0) echo "${D}O_HALVES=0" ;;  # d256 stages O in Q's buffer (before run 61): the next Q waits for the O store's reads
    *) echo "unknown variant $1" >&2; return 1 ;;
  esac
}

build() {  # name -> build-ab/<name>/libhattn.so
  local name=$1 flags src=.
  flags=$(defs "$name") || return 1
  if [ "$name" = ref ]; then src=${REF_TREE:?variant ref needs REF_TREE=<source tree>}; fi
  cmake -S "$src" -B "build-ab/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHATTN_PTXAS_WERROR=ON \
    -DHATTN_BUILD_TESTS=OFF -DHATTN_BUILD_BENCH=OFF -DHATTN_BUILD_CLI=OFF -DHATTN_INSTALL=OFF \
    "-DCMAKE_CUDA_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" >"$LOGDIR/build_$name.log" 2>&1 &&
    cmake --build "build-ab/$name" -j"$JOBS" --target hattn_shared >>"$LOGDIR/build_$name.log" 2>&1
}

# All builds at once: each is a handful of translation units, so together they fill the cores.
pids=()
for v in $VARIANTS; do build "$v" & pids+=($!); done
built=()
i=0
for v in $VARIANTS; do
  if wait "${pids[$i]}"; then
    lib=$(ls build-ab/"$v"/libhattn.so 2>/dev/null | head -1)
    if [ -n "$lib" ]; then built+=("$v=$lib"); else echo "variant $v: no libhattn.so" | tee -a "$OUT/summary.txt"; fi
  else
    echo "variant $v: BUILD FAILED (tail of its log follows)" | tee -a "$OUT/summary.txt"
    tail -20 "$LOGDIR/build_$v.log" | tee -a "$OUT/summary.txt"
  fi
  i=$((i + 1))
done
echo "builds: $(( $(date +%s) - T0 )) s" | tee -a "$OUT/summary.txt"

# Smoke run of each build in its own process (all at once; correctness checked, persistent
# multi-tile walks included): a variant that hangs or fails is left out of the one-process A/B
# instead of taking every other variant's results down with it.
libs=()
spids=()
for vl in "${built[@]}"; do
  timeout 75 python3 scripts/ab_fwd.py --lib "$vl" --seqlens 512,2048 --rounds 1 --reps 1 \
    >"$LOGDIR/smoke_${vl%%=*}.txt" 2>&1 & spids+=($!)
done
i=0
for vl in "${built[@]}"; do
  v=${vl%%=*}
  wait "${spids[$i]}"; rc=$?
  if [ $rc -eq 0 ] && ! grep -q "CORRECTNESS FAILURES" "$LOGDIR/smoke_$v.txt"; then libs+=(--lib "$vl")
  else echo "variant $v: SMOKE RUN FAILED (exit $rc; tail follows), left out" | tee -a "$OUT/summary.txt"
       tail -8 "$LOGDIR/smoke_$v.txt" | tee -a "$OUT/summary.txt"; fi
  i=$((i + 1))
done
echo "smoke runs: $(( $(date +%s) - T0 )) s" | tee -a "$OUT/summary.txt"

if [ ${#libs[@]} -gt 0 ]; then
  left=$(( ${BUDGET_S:-290} - ($(date +%s) - T0) ))  # the whole script stays inside its budget
  timeout "$left" python3 scripts/ab_fwd.py "${libs[@]}" --rounds "$ROUNDS" --seqlens "$SEQLENS" --head-dims "${HEAD_DIMS:-64,128,256}" --masks "${MASKS:-full,causal}" --burst "${BURST:-1}" --json "$OUT/ab.json" \
    >"$OUT/ab.txt" 2>"$LOGDIR/ab.err"
  echo "ab_fwd.py exit $?" | tee -a "$OUT/summary.txt"
  tail -5 "$LOGDIR/ab.err" >>"$OUT/summary.txt"
fi
tar -czf "$OUT/logs.tgz" -C "$LOGDIR" . 2>/dev/null
echo "total: $(( $(date +%s) - T0 )) s" | tee -a "$OUT/summary.txt"

# The short table: each variant over base, geometric mean per (d, seqlen group) of kernel time; then each variant's overall geomean over cuDNN.
python3 - "$OUT/ab.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, math, sys
try:
    data = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"no A/B results ({e})"); sys.exit(0)
rows = data["rows"]
names = [n for n in rows[0]["tflops"] if n != "cudnn"]
ref = "base" if "base" in names else names[0]
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
groups = [("<=1k", lambda s: s <= 1024), ("2k", lambda s: s == 2048), (">=4k", lambda s: s >= 4096)]
print(f"variant/{ref}, geomean of TFLOPS ratios (kernel time, events around each call)")
print("| variant | " + " | ".join(f"d{d} {g}" for d in (64, 128, 256) for g, _ in groups) + " | all/cuDNN |")
for n in names:
    cells = []
    for d in (64, 128, 256):
        for _, f in groups:
            rs = [r["tflops"][n] / r["tflops"][ref] for r in rows if r["d"] == d and f(r["seqlen"])]
            cells.append(f"{gm(rs):.3f}")
    allc = gm([r["tflops"][n] / r["tflops"]["cudnn"] for r in rows])
    print(f"| {n} | " + " | ".join(cells) + f" | {allc:.3f} |")
if data.get("failures"):
    print("CORRECTNESS FAILURES: " + "; ".join(data["failures"]))
PY
