#!/usr/bin/env bash
# The one configure step of scripts/run.sh and scripts/test.sh, so that both always build the
# configuration CI builds: Ninja when it is installed, Release, ptxas warnings as errors.
#   BUILD_DIR (default build), BUILD_TYPE (default Release), HATTN_PTXAS_WERROR (default ON)
# A build folder that already has these settings is left alone (the build tool re-runs CMake
# itself when a CMakeLists.txt changes); one with other settings is reconfigured with these, and
# says so. Extra arguments go to cmake (e.g. -DHATTN_BUILD_BENCH=OFF) and always reconfigure.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}

# CMake booleans -> ON / OFF, so "1", "on" and "ON" compare equal.
bool() {
  case "$(printf '%s' "$1" | tr '[:lower:]' '[:upper:]')" in
    ON|1|TRUE|YES|Y) echo ON ;;
    OFF|0|FALSE|NO|N|"") echo OFF ;;
    *) echo "configure.sh: HATTN_PTXAS_WERROR='$1' is not ON or OFF" >&2; exit 2 ;;
  esac
}
WERROR=$(bool "${HATTN_PTXAS_WERROR:-ON}")

cache="$BUILD_DIR/CMakeCache.txt"
args=(-S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DHATTN_PTXAS_WERROR="$WERROR")
if [ -f "$cache" ]; then
  have_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cache")
  have_werror=$(bool "$(sed -n 's/^HATTN_PTXAS_WERROR:[A-Z]*=//p' "$cache")")
  if [ $# -eq 0 ] && [ "$have_type" = "$BUILD_TYPE" ] && [ "$have_werror" = "$WERROR" ]; then
    exit 0
  fi
  echo "configure.sh: $BUILD_DIR has BUILD_TYPE=$have_type HATTN_PTXAS_WERROR=$have_werror;" \
       "reconfiguring with BUILD_TYPE=$BUILD_TYPE HATTN_PTXAS_WERROR=$WERROR" >&2
elif command -v ninja >/dev/null 2>&1; then
  args+=(-G Ninja)  # only for a new folder: CMake cannot switch an existing one's generator
fi
cmake "${args[@]}" "$@"
