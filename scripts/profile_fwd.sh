#!/usr/bin/env bash
# Where the forward kernels' time goes, per shape, from Nsight Compute on a GPU host (an H200), from
# the repository root:
#
#   OUT=/some/dir bash scripts/profile_fwd.sh
#
# For each shape of SHAPES (dim:seqlen:mask[:dtype], dtype bf16 by default, e4m3 for the FP8
# forward) it runs `hattn fwd` once under ncu, profiling only hattn's forward kernel (not the GPU
# reference that checks it); mask "prepass" profiles the FP8 pre-pass's tensor-core Hadamard kernel
# instead (Q and K of `hattn fwd --dtype e4m3 --hadamard`, the dtype field then names its RoPE:
# none, half or interleaved; e.g. 256:16384:prepass:half), with the memory sections too (it is
# memory-bound). The sections answer "which unit is the limit": the tensor
# and MUFU (XU) pipes' utilisation (ComputeWorkloadAnalysis, InstructionStats), issue-slot use and
# eligible warps (SchedulerStats), why warps stall (WarpStateStats) and the SASS lines they stall
# on (SourceCounters). batch x seqlen = TOKENS, heads = WIDTH / dim, as in compare_torch.py.
# PEERS profiles the peers' kernels on the same shapes beside hattn's (scripts/profile_peer.py runs
# each): "cudnn" (PyTorch SDPA's cuDNN backend) and "fa4" (FlashAttention-4, from FA4_PATH, a folder
# where flash-attn-4 is pip-installed --target) on the bf16 shapes, "cudnn_fp8" (cuDNN's FP8
# attention through cudnn-frontend, from CUDNN_FRONTEND_PATH or the environment) on the e4m3 ones.
# LaunchStats and Occupancy are among the sections: a peer's grid, block, registers and shared
# memory say its tile shape and warp layout.
# PASS=bwd profiles the backward instead (bf16 shapes only): every kernel of hattn's backward
# (`hattn bwd`: preprocess, main kernel -- two at d256 -- and dQ conversion), and the peers' ("cudnn",
# "fa4") through `profile_peer.py --bwd`, which starts the CUDA profiler for their second backward
# alone (ncu --profile-from-start off takes every kernel launched then, from whichever host
# thread), so the summary has one block per kernel.
# Writes $OUT/summary.txt (the key figures per shape, printed last) and $OUT/ncu.tgz (the CSV of
# every section per shape).
#
# Environment: OUT (profile_fwd_out), BUILD_DIR (build), JOBS (nproc), TOKENS (16384), WIDTH (2048),
#   SHAPES ("64:8192:full 64:8192:causal 128:8192:full 128:16384:full"), NCU (ncu), PYTHON (python3),
#   PASS (fwd; bwd: the backward),
#   PEERS (unset: "fa4" when FA4_PATH is set, else none), FA4_PATH, CUDNN_FRONTEND_PATH,
#   TIMEOUT_S (120 per profiled run), NCU_DETAILS (0; 1: ncu
#   --print-details all, the sections' bodies as well), SASS_PAGE (0; 1: also each shape's
#   per-instruction SASS page -- warp-state samples per stall reason for every instruction -- as
#   sass_<shape>.csv, and each peer's as sass_<peer>_<shape>.csv, from a second ncu pass; both the
#   CSVs and that pass's reports go into ncu.tgz, so $OUT keeps two files however many shapes),
#   MEMORY (0; 1: the memory sections -- SpeedOfLight, MemoryWorkloadAnalysis and its tables -- for
#   every shape and peer, and the summary keeps their shared-memory and pipe figures: whether the
#   wgmma operands' shared-memory traffic, not the tensor pipe, is what a kernel waits for),
#   METRICS (raw ncu metrics to collect beside the sections, comma-separated).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-profile_fwd_out}
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
TOKENS=${TOKENS:-16384}
WIDTH=${WIDTH:-2048}
SHAPES=${SHAPES:-"64:8192:full 64:8192:causal 128:8192:full 128:16384:full"}
NCU=${NCU:-ncu}
PYTHON=${PYTHON:-python3}
TIMEOUT_S=${TIMEOUT_S:-120}
PASS=${PASS:-fwd}
case "$PASS" in fwd | bwd) ;; *) echo "profile_fwd.sh: PASS must be fwd or bwd, not '$PASS'" >&2; exit 2 ;; esac
SECTIONS=(LaunchStats Occupancy ComputeWorkloadAnalysis InstructionStats SchedulerStats WarpStateStats SourceCounters)
PEERS=${PEERS-${FA4_PATH:+fa4}}
# The peers' forward kernels by demangled name (each run's second launch is the profiled one).
KERNEL_PEER_FA4='regex:(?i)flash.*fwd|FlashAttentionForward'
KERNEL_PEER_CUDNN='regex:(?i)sdpa|fmha|fprop|flash'  # cuDNN's generated attention kernels
# hattn's kernels by mangled name: the forward (not reference_fwd_kernel) and the FP8 forward.
KERNEL_BF16='regex:^_ZN5hattn3fwd10fwd_kernel'
KERNEL_E4M3='regex:^_ZN5hattn7fwd_fp814fwd_fp8_kernel'
KERNEL_PREPASS='regex:^_ZN5hattn3fp86detail23fp8_hadamard_mma_kernel'
KERNEL_BWD='regex:^_ZN5hattn3bwd'  # bwd_preprocess, bwd_kernel (one or two), bwd_dq_convert
PEER_BWD_LAUNCHES=8  # at most this many kernels of a peer's backward while profile_peer.py has the profiler on
MEMORY_SECTIONS=(SpeedOfLight MemoryWorkloadAnalysis)  # the pre-pass's: DRAM, L1 and L2 throughput

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/hattn-profile.XXXXXX")
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

if ! command -v "$NCU" >/dev/null 2>&1; then
  say "NOT RUN: ncu (Nsight Compute) is not on PATH; set NCU=/path/to/ncu"
  exit 2
fi
if [ ! -x "$BUILD_DIR/bin/hattn" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHATTN_PTXAS_WERROR=ON >"$LOGS/configure.log" 2>&1 &&
    cmake --build "$BUILD_DIR" -j"$JOBS" --target hattn_cli >"$LOGS/build.log" 2>&1 ||
    { say "BUILD FAILED (tail follows)"; tail -20 "$LOGS/build.log" | tee -a "$SUMMARY"; exit 1; }
fi

section_args=()
for s in "${SECTIONS[@]}"; do section_args+=(--section "$s"); done
if [ "${MEMORY:-0}" = 1 ]; then
  for s in "${MEMORY_SECTIONS[@]}" MemoryWorkloadAnalysis_Tables; do section_args+=(--section "$s"); done
fi
# METRICS: raw metrics beside the sections (comma-separated full names, e.g.
# l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed); the summary keeps every one of them.
# A name this GPU's ncu does not list (ncu --query-metrics: base names, the part before the first
# '.') would fail every profiled run: such names are dropped, and the summary says which.
if [ -n "${METRICS:-}" ]; then
  "$NCU" --query-metrics >"$LOGS/query_metrics.txt" 2>&1 || true
  kept=()
  IFS=',' read -r -a wanted <<<"$METRICS"
  for m in "${wanted[@]}"; do
    # (A list ncu could not give -- no metric names in it -- filters nothing.)
    if ! grep -q '__' "$LOGS/query_metrics.txt" || grep -q "^${m%%.*}[[:space:]]" "$LOGS/query_metrics.txt"; then
      kept+=("$m")
    else
      say "METRICS: dropped $m (not listed by ncu --query-metrics on this GPU)"
    fi
  done
  METRICS=$(IFS=','; echo "${kept[*]:-}")
  [ -n "$METRICS" ] && section_args+=(--metrics "$METRICS")
fi
# NCU_DETAILS=1: the sections' bodies too (pipe utilisation, stall reasons), not only their headers.
details_args=()
[ "${NCU_DETAILS:-0}" = 1 ] && details_args=(--print-details all)

# The figures the summary keeps from ncu's CSV (metric names as its sections print them).
summarize() {  # csv label
  "$PYTHON" - "$1" "$2" <<'PY' | tee -a "$SUMMARY"
import csv, sys
path, label = sys.argv[1], sys.argv[2]
keep = ("Duration", "Issue Slots Busy", "Issued Warp Per Scheduler", "No Eligible", "Eligible Warps Per Scheduler",
        "Warp Cycles Per Issued Instruction", "Executed Ipc Active", "SM Busy", "DRAM Throughput", "Memory Throughput",
        "L1/TEX Hit Rate", "L2 Hit Rate", "L1/TEX Cache Throughput", "L2 Cache Throughput", "Mem Busy", "Mem Pipes Busy", "Max Bandwidth",
        "Grid Size", "Block Size", "Registers Per Thread", "Dynamic Shared Memory Per Block", "Static Shared Memory Per Block",
        "Theoretical Occupancy", "Achieved Occupancy", "Waves Per SM", "Elapsed Cycles", "Executed Instructions",
        "Tensor (FP)", "Uniform", "XU", "FMA", "ALU", "LSU")
kernels = {}  # profiled launch ID -> (kernel name, rows); one launch for a forward, several for PASS=bwd
try:
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            kernel, rows = kernels.setdefault(r.get("ID", ""), (r.get("Kernel Name") or "", []))
            name = r.get("Metric Name", "")
            # --print-details all adds the sections' bodies: pipe utilisation and stall reasons.
            if (any(name.startswith(k) for k in keep) or "Pipe" in r.get("Section Name", "") or "pipe" in name.lower()
                    or "stall" in name.lower() or "Stall" in r.get("Section Name", "") or "shared" in name.lower()
                    or r.get("Section Name", "").startswith("Command line")):
                rows.append((r.get("Section Name", ""), name, r.get("Metric Value", ""), r.get("Metric Unit", "")))
except (OSError, csv.Error) as e:
    print(f"{label}: no CSV ({e})")
    sys.exit(0)
if not kernels:
    print(f"== {label}: no kernel profiled")
for launch, (kernel, rows) in kernels.items():
    print(f"== {label}" + (f" #{launch}" if len(kernels) > 1 else "") + (f"  [{kernel[:140]}]" if kernel else ""))
    for sec, name, value, unit in rows:
        print(f"  {sec:28.28} {name:60.60} {value} {unit}")
PY
}

# SASS_PAGE: which instructions the warps stall on, and why -- the source page of a report with the
# sampling sections (the details CSV only names the top few lines), for one kernel.
#   sass_page NAME CSV NCU-KERNEL-FILTER... -- COMMAND...
sass_page() {
  local name=$1 csv=$2 filter=()
  shift 2
  while [ "$1" != -- ]; do filter+=("$1"); shift; done
  shift
  timeout -k 10 "$TIMEOUT_S" "$NCU" "${filter[@]}" --section WarpStateStats --section SourceCounters -f \
    -o "$LOGS/$name" "$@" >"$LOGS/$name.rep.out" 2>&1 &&
    "$NCU" -i "$LOGS/$name.ncu-rep" --page source --csv --print-source sass >"$csv" 2>"$LOGS/$name.sass.err" ||
    say "$name: no SASS page (see $name.rep.out / .sass.err in ncu.tgz)"
}

for shape in $SHAPES; do
  IFS=: read -r dim seqlen mask dtype <<<"$shape"
  dtype=${dtype:-bf16}
  batch=$((TOKENS / seqlen)); [ "$batch" -ge 1 ] || batch=1
  heads=$((WIDTH / dim))
  label="d${dim}_s${seqlen}_${mask}_${dtype}"
  kernel=$KERNEL_BF16; [ "$dtype" = e4m3 ] && kernel=$KERNEL_E4M3
  cli=(--batch "$batch" --heads "$heads" --seqlen "$seqlen" --dim "$dim" --dtype "$dtype" --iters 1 --warmup 0)
  [ "$mask" = causal ] && cli+=(--causal)
  command=fwd launches=1
  if [ "$PASS" = bwd ]; then
    if [ "$dtype" != bf16 ] || [ "$mask" = prepass ]; then say "$label: skipped (PASS=bwd profiles bf16 shapes)"; continue; fi
    # One backward: its preprocess, main kernel(s) and dQ conversion (d256 runs two main kernels).
    command=bwd kernel=$KERNEL_BWD launches=3 label="bwd_$label"
    [ "$dim" = 256 ] && launches=4
  fi
  shape_sections=("${section_args[@]}")
  if [ "$mask" = prepass ]; then
    kernel=$KERNEL_PREPASS
    cli=(--batch "$batch" --heads "$heads" --seqlen "$seqlen" --dim "$dim" --dtype e4m3 --hadamard --iters 1 --warmup 0)
    [ "$dtype" = half ] || [ "$dtype" = interleaved ] && cli+=(--rope "$dtype")
    [ "${MEMORY:-0}" = 1 ] || for s in "${MEMORY_SECTIONS[@]}"; do shape_sections+=(--section "$s"); done
  fi
  timeout -k 10 "$TIMEOUT_S" "$NCU" --kernel-name-base mangled --kernel-name "$kernel" --launch-count "$launches" \
    "${shape_sections[@]}" --csv --page details "${details_args[@]}" "$BUILD_DIR/bin/hattn" "$command" "${cli[@]}" \
    >"$LOGS/hattn_$label.raw" 2>"$LOGS/hattn_$label.err"
  rc=$?
  # ncu's CSV starts at its first quoted header line; the CLI's own output comes before it.
  sed -n '/^"ID"/,$p' "$LOGS/hattn_$label.raw" >"$LOGS/hattn_$label.csv"
  [ $rc -eq 0 ] || say "hattn $label: ncu exit $rc (see its .err in ncu.tgz)"
  summarize "$LOGS/hattn_$label.csv" "hattn $label"
  [ "${SASS_PAGE:-0}" = 1 ] && sass_page "hattn_$label" "$LOGS/sass_$label.csv" \
    --kernel-name-base mangled --kernel-name "$kernel" --launch-count "$launches" -- "$BUILD_DIR/bin/hattn" "$command" "${cli[@]}"

  [ "$mask" = prepass ] && continue
  for peer in $PEERS; do
    case "$peer:$dtype" in
      fa4:bf16) peer_kernel=$KERNEL_PEER_FA4 ;;
      cudnn:bf16 | cudnn_fp8:e4m3) peer_kernel=$KERNEL_PEER_CUDNN ;;
      *) continue ;;  # a peer of the other dtype
    esac
    # The peer's second forward launch only (the first includes its compilation or graph build);
    # PASS=bwd: every kernel of its second backward (profile_peer.py starts and stops the profiler
    # around it).
    peer_filter=(--kernel-name-base demangled --kernel-name "$peer_kernel" --launch-skip 1 --launch-count 1)
    peer_args=(--peer "$peer" --batch "$batch" --heads "$heads" --seqlen "$seqlen" --dim "$dim")
    if [ "$PASS" = bwd ]; then
      [ "$peer" = cudnn_fp8 ] && continue
      peer_filter=(--profile-from-start off --launch-count "$PEER_BWD_LAUNCHES")
      peer_args+=(--bwd)
    fi
    [ "$mask" = causal ] && peer_args+=(--causal)
    [ -n "${FA4_PATH:-}" ] && peer_args+=(--fa4-path "$FA4_PATH")
    [ -n "${CUDNN_FRONTEND_PATH:-}" ] && peer_args+=(--cudnn-frontend-path "$CUDNN_FRONTEND_PATH")
    timeout -k 10 "$TIMEOUT_S" "$NCU" "${peer_filter[@]}" "${section_args[@]}" --csv --page details "${details_args[@]}" \
      "$PYTHON" scripts/profile_peer.py "${peer_args[@]}" >"$LOGS/${peer}_$label.raw" 2>"$LOGS/${peer}_$label.err"
    rc=$?
    sed -n '/^"ID"/,$p' "$LOGS/${peer}_$label.raw" >"$LOGS/${peer}_$label.csv"
    if [ $rc -ne 0 ]; then
      say "$peer $label: exit $rc ($(grep -m1 'profile_peer.py' "$LOGS/${peer}_$label.err" || echo "see its .err in ncu.tgz"))"
    fi
    summarize "$LOGS/${peer}_$label.csv" "$peer $label"
    [ "${SASS_PAGE:-0}" = 1 ] && sass_page "${peer}_$label" "$LOGS/sass_${peer}_$label.csv" \
      "${peer_filter[@]}" -- "$PYTHON" scripts/profile_peer.py "${peer_args[@]}"
  done
done

tar -czf "$OUT/ncu.tgz" -C "$LOGS" . 2>/dev/null
say "wrote $SUMMARY and $OUT/ncu.tgz"
