#!/usr/bin/env bash
# Prove the vendorable single-file kernel stands alone: amalgamate src/kernels/fwd.cuh (and every
# local header it reaches) into one header in a temporary folder, check that it carries hattn's
# licence notice and version, then compile and link a consumer that includes only that header --
# with no hattn include path, for sm_90a, ptxas warnings as errors, and against cudart alone (no
# -lcuda). CI calls this; exits non-zero on any failure.
#   --run         also run the consumer (a small forward pass checked on the host; needs a Hopper
#                 GPU, otherwise it reports that it did not run and succeeds)
#   NVCC          compiler (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   KEEP_DIR=dir  copy the generated header and binary there for inspection
set -euo pipefail
cd "$(dirname "$0")/.."

run_example=0
for arg in "$@"; do
  case "$arg" in
    --run) run_example=1 ;;
    *) echo "check_vendored.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
work=$(mktemp -d "${TMPDIR:-/tmp}/hattn-vendor.XXXXXX")
trap 'rm -rf "$work"' EXIT
header="$work/hattn_fwd_single.cuh"

python3 scripts/amalgamate.py -o "$header"

# The licence notice (all of LICENSE) and hattn's version must head the file: they travel with
# every copy.
if ! python3 - "$header" <<'PY'
import re, sys
header = open(sys.argv[1]).read()
notice = "".join(f"// {line}".rstrip() + "\n" for line in open("LICENSE").read().splitlines())
parts = dict(re.findall(r"^#define HATTN_VERSION_(MAJOR|MINOR|PATCH) +([0-9]+)$", open("include/hattn.h").read(), re.M))
version = f"hattn {parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']} "
first = header.split("#pragma once", 1)[0]  # the banner
problems = [what for what, ok in (("the LICENSE text", notice in first), (f"'{version.strip()}'", version in first)) if not ok]
if problems:
    print("check_vendored.sh: FAIL: the vendored file's banner lacks " + " and ".join(problems), file=sys.stderr)
    sys.exit(1)
PY
then
  exit 1
fi

# Nothing local may survive the inlining: a quoted include would need the repository at build time.
if grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$header"; then
  echo "check_vendored.sh: FAIL: the single file still has local #include lines (above)" >&2
  exit 1
fi

# Compile from inside the temporary folder so no repository header can be found by accident.
cp scripts/vendor_example.cu "$work/"
if ! (cd "$work" && "$NVCC" -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
        -Xptxas=--warn-on-spills,--warning-as-error vendor_example.cu -o vendor_example); then
  echo "check_vendored.sh: FAIL: the vendored header does not compile/link on its own" >&2
  exit 1
fi

# cudart loads the driver at run time; the binary itself must not need libcuda.so.
if command -v readelf >/dev/null 2>&1 && readelf -d "$work/vendor_example" | grep -q 'NEEDED.*libcuda\.so'; then
  echo "check_vendored.sh: FAIL: the consumer links libcuda.so directly" >&2
  exit 1
fi

if [ -n "${KEEP_DIR:-}" ]; then
  mkdir -p "$KEEP_DIR" && cp "$header" "$work/vendor_example" "$KEEP_DIR/"
fi
if [ "$run_example" = 1 ]; then
  "$work/vendor_example"
fi
echo "check_vendored.sh: OK: $(wc -l <"$header") lines, compiles and links standalone for sm_90a"
