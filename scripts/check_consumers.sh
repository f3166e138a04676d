#!/usr/bin/env bash
# Use hattn the three ways its users do, and run the results (they need no GPU: they check the
# version and have the C API reject bad parameters). CI calls this after scripts/test.sh.
#   1. installed: `cmake --install` of BUILD_DIR into a temporary prefix, then the C project
#      test/consumers/installed finds it with find_package(hattn CONFIG) and links hattn::hattn
#      and hattn::hattn_static;
#   2. pkg-config (when pkg-config is installed): the same main.c built with
#      `pkg-config --cflags --libs hattn` against libhattn.so, and with --static against libhattn.a;
#   3. add_subdirectory: test/consumers/subdirectory builds hattn inside its own build (libraries
#      only) and compiles its own .cu for sm_80; it fails to compile if hattn's flags leak into it.
# Exits non-zero on the first failure.
#   BUILD_DIR (default build): the hattn build to install (configured and built here if needed)
#   KEEP_DIR=dir: keep the temporary prefix and consumer builds there instead of deleting them
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
BUILD_DIR=${BUILD_DIR:-build}
JOBS=$(nproc)

if [ -n "${KEEP_DIR:-}" ]; then
  work=$KEEP_DIR
  rm -rf "$work" && mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/hattn-consumers.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
prefix="$work/prefix"
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
step() { echo "== check_consumers.sh: $*"; }

# ---- 1. installed package, find_package ---------------------------------------------------------
step "install $BUILD_DIR into a temporary prefix"
BUILD_DIR="$BUILD_DIR" bash scripts/configure.sh
cmake --build "$BUILD_DIR" -j "$JOBS" --target hattn_shared hattn_static hattn_cli >/dev/null
cmake --install "$BUILD_DIR" --prefix "$prefix" >"$work/install.log"
for f in include/hattn.h lib/cmake/hattn/hattnConfig.cmake lib/cmake/hattn/hattnConfigVersion.cmake; do
  [ -f "$prefix/$f" ] || { echo "check_consumers.sh: FAIL: the install has no $f" >&2; exit 1; }
done

step "find_package(hattn CONFIG): test/consumers/installed"
cmake -S test/consumers/installed -B "$work/installed" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >"$work/installed.log" || { cat "$work/installed.log"; exit 1; }
cmake --build "$work/installed" -j "$JOBS"
"$work/installed/consumer_shared"
"$work/installed/consumer_static"
if command -v readelf >/dev/null 2>&1; then
  readelf -d "$work/installed/consumer_shared" | grep -q 'NEEDED.*\[libhattn\.so\.0\]' ||
    { echo "check_consumers.sh: FAIL: consumer_shared does not load libhattn.so.0 (soname)" >&2; exit 1; }
  if readelf -d "$work/installed/consumer_static" | grep -q 'NEEDED.*libhattn'; then
    echo "check_consumers.sh: FAIL: consumer_static loads libhattn.so" >&2; exit 1
  fi
fi

# ---- 2. pkg-config ---------------------------------------------------------------------------------
if command -v pkg-config >/dev/null 2>&1; then
  pc=$(find "$prefix" -name hattn.pc | head -1)
  [ -n "$pc" ] || { echo "check_consumers.sh: FAIL: the install has no hattn.pc" >&2; exit 1; }
  export PKG_CONFIG_PATH
  PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  step "pkg-config: hattn $(pkg-config --modversion hattn), cflags: $(pkg-config --cflags hattn)"
  libdir=$(pkg-config --variable=libdir hattn)
  # shellcheck disable=SC2046  # pkg-config prints lists of words
  cc -std=c99 -Wall -Werror -DCONSUMER_NAME='"pkg-config consumer, libhattn.so"' test/consumers/installed/main.c \
     $(pkg-config --cflags hattn) -o "$work/pc_shared" $(pkg-config --libs hattn) -Wl,-rpath,"$libdir"
  "$work/pc_shared"
  # libhattn.a: -lhattn taken from the static archive, plus what --static adds (Libs.private).
  # shellcheck disable=SC2046
  cc -std=c99 -Wall -Werror -DCONSUMER_NAME='"pkg-config consumer, libhattn.a"' test/consumers/installed/main.c \
     $(pkg-config --cflags hattn) -o "$work/pc_static" \
     $(pkg-config --static --libs hattn | sed 's/-lhattn\b/-Wl,-Bstatic -lhattn -Wl,-Bdynamic/')
  "$work/pc_static"
  if command -v readelf >/dev/null 2>&1 && readelf -d "$work/pc_static" | grep -q 'NEEDED.*libhattn'; then
    echo "check_consumers.sh: FAIL: the --static pkg-config consumer loads libhattn.so" >&2; exit 1
  fi
else
  step "pkg-config not installed: pkg-config consumer skipped"
fi

# ---- 3. add_subdirectory -----------------------------------------------------------------------------
step "add_subdirectory(hattn): test/consumers/subdirectory (own CUDA code for sm_80)"
cmake -S test/consumers/subdirectory -B "$work/subdirectory" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DHATTN_SOURCE_DIR="$REPO" >"$work/subdirectory.log" || { cat "$work/subdirectory.log"; exit 1; }
cmake --build "$work/subdirectory" -j "$JOBS"
"$work/subdirectory/consumer"

echo "check_consumers.sh: OK: find_package, pkg-config and add_subdirectory consumers build and run"
