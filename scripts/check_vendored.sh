#!/usr/bin/env bash
# Prove the vendorable single files stand alone. For each of
#   fwd  scripts/amalgamate.py --kernel fwd -> hattn_fwd_single.cuh, consumer scripts/vendor_example.cu
#   bwd  scripts/amalgamate.py --kernel bwd -> hattn_bwd_single.cuh, consumer scripts/vendor_bwd_example.cu
#   all  scripts/amalgamate.py --kernel all -> hattn_single.cuh (forward + backward), consumer
#        scripts/vendor_bwd_example.cu built with -DHATTN_VENDORED_HEADER='"hattn_single.cuh"' (it then
#        also instantiates and runs the vendored forward)
#   fp8  scripts/amalgamate.py --kernel fp8 -> hattn_fp8_single.cuh (the FP8 pre-pass and the FP8
#        forward), consumer scripts/vendor_fp8_example.cu
# amalgamate the kernel (and every local header it reaches) into one header in a temporary folder,
# check that it carries hattn's licence notice and version and no local #include, then compile and
# link the consumer that includes only that header -- with no hattn include path, for sm_90a,
# ptxas warnings as errors, and against cudart alone (no -lcuda). A consumer instantiates every
# head dim of every launcher in its file, so a wgmma shape missing from the vendored subset fails
# here; the failure then names the N to add (amalgamate.py --print-wgmma derives them from PTX).
# CI calls this; exits non-zero on any failure.
#   [fwd] [bwd] [all] [fp8]  which files to check (default: all four)
#   --run         also run the consumers (small passes checked on the host; need a Hopper GPU,
#                 otherwise they report that they did not run and succeed)
#   NVCC          compiler (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   KEEP_DIR=dir  copy the generated headers and binaries there for inspection
set -euo pipefail
cd "$(dirname "$0")/.."

run_example=0
kinds=()
for arg in "$@"; do
  case "$arg" in
    --run) run_example=1 ;;
    fwd|bwd|all|fp8) kinds+=("$arg") ;;
    *) echo "check_vendored.sh: unknown argument '$arg' (--run, fwd, bwd, all, fp8)" >&2; exit 2 ;;
  esac
done
[ ${#kinds[@]} -eq 0 ] && kinds=(fwd bwd all fp8)

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
export NVCC  # amalgamate.py --print-wgmma compiles with it too
work=$(mktemp -d "${TMPDIR:-/tmp}/hattn-vendor.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The licence notice (all of LICENSE) and hattn's version must head the file: they travel with
# every copy.
check_banner() {  # header
  python3 - "$1" <<'PY'
import re, sys
header = open(sys.argv[1]).read()
notice = "".join(f"// {line}".rstrip() + "\n" for line in open("LICENSE").read().splitlines())
parts = dict(re.findall(r"^#define HATTN_VERSION_(MAJOR|MINOR|PATCH) +([0-9]+)$", open("include/hattn.h").read(), re.M))
version = f"hattn {parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']} "
first = header.split("#pragma once", 1)[0]  # the banner
problems = [what for what, ok in (("the LICENSE text", notice in first), (f"'{version.strip()}'", version in first)) if not ok]
if problems:
    print(f"check_vendored.sh: FAIL: {sys.argv[1]}: the banner lacks " + " and ".join(problems), file=sys.stderr)
    sys.exit(1)
PY
}

summary=()
check_one() {  # kind
  local kind=$1 header example defines=() dir="$work/$1"
  case "$kind" in
    fwd) header=hattn_fwd_single.cuh; example=vendor_example ;;
    bwd) header=hattn_bwd_single.cuh; example=vendor_bwd_example ;;
    all) header=hattn_single.cuh; example=vendor_bwd_example; defines=("-DHATTN_VENDORED_HEADER=\"hattn_single.cuh\"") ;;
    fp8) header=hattn_fp8_single.cuh; example=vendor_fp8_example ;;
  esac
  mkdir -p "$dir/keep"
  python3 scripts/amalgamate.py --kernel "$kind" -o "$dir/$header"
  check_banner "$dir/$header" || exit 1

  # Nothing local may survive the inlining: a quoted include would need the repository at build time.
  if grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$dir/$header"; then
    echo "check_vendored.sh: FAIL: $header still has local #include lines (above)" >&2
    exit 1
  fi

  # Compile from inside the temporary folder so no repository header can be found by accident.
  cp "scripts/$example.cu" scripts/vendor_example_util.h "$dir/"
  if ! (cd "$dir" && "$NVCC" -std=c++17 -gencode=arch=compute_90a,code=sm_90a "${defines[@]}" \
          -Xptxas=--warn-on-spills,--warning-as-error -keep -keep-dir keep "$example.cu" -o "$example"); then
    echo "check_vendored.sh: FAIL: $header does not compile/link on its own (with scripts/$example.cu)" >&2
    echo "check_vendored.sh: the wgmma shapes its kernels instantiate, beside the vendored table:" >&2
    python3 scripts/amalgamate.py --kernel "$kind" --print-wgmma >&2 || true
    exit 1
  fi

  # cudart loads the driver at run time; the binary itself must not need libcuda.so.
  if command -v readelf >/dev/null 2>&1 && readelf -d "$dir/$example" | grep -q 'NEEDED.*libcuda\.so'; then
    echo "check_vendored.sh: FAIL: $example links libcuda.so directly" >&2
    exit 1
  fi

  # Which wgmma shapes the consumer's kernels really use (from the PTX nvcc kept).
  local shapes
  shapes=$(cat "$dir"/keep/*.ptx 2>/dev/null | grep -oE 'wgmma\.mma_async\.sync\.aligned\.m64n[0-9]+k[0-9]+\.f32\.[a-z0-9]+' |
           sed -E 's/.*m64n([0-9]+)k[0-9]+\.f32\.([a-z0-9]+)/\2 \1/' | sort -u -k1,1 -k2,2n |
           awk '{n[$1] = n[$1] (n[$1] ? "," : "") $2} END {for (t in n) printf "%s%s N=%s", (k++ ? "; " : ""), t, n[t]}' || true)
  echo "check_vendored.sh: $kind: $header $(wc -l <"$dir/$header") lines; wgmma used: ${shapes:-none}"

  if [ -n "${KEEP_DIR:-}" ]; then
    mkdir -p "$KEEP_DIR" && cp "$dir/$header" "$KEEP_DIR/" && cp "$dir/$example" "$KEEP_DIR/${example}_$kind"
  fi
  if [ "$run_example" = 1 ]; then
    "$dir/$example"
  fi
  summary+=("$kind $(wc -l <"$dir/$header") lines")
}

for kind in "${kinds[@]}"; do
  check_one "$kind"
done
joined=$(printf '%s, ' "${summary[@]}")
echo "check_vendored.sh: OK: ${joined%, }; each compiles and links standalone for sm_90a"
