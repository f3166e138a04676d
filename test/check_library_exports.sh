#!/usr/bin/env bash
# CTest `library_exports`: libhattn.so exports the C API of include/hattn.h and nothing else,
# carries a versioned soname, and does not reach for libstdc++'s iostream / locale machinery.
#   check_library_exports.sh LIBRARY SONAME
# Exit 0: all good; 1: a check failed (the offending symbols are listed); 77: nm is missing (CTest
# reports the test as skipped).
set -euo pipefail
lib=$1
want_soname=$2
if ! command -v nm >/dev/null 2>&1; then
  echo "SKIPPED: nm (binutils) not found, cannot list the symbols of $lib"
  exit 77
fi
status=0

# 1. Every defined dynamic symbol is part of the C API.
exported=$(nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//')
foreign=$(printf '%s\n' "$exported" | grep -v '^hattn_' || true)
if [ -n "$foreign" ]; then
  echo "FAIL: $lib exports symbols outside the hattn_* C API:"
  printf '%s\n' "$foreign" | head -40 | sed 's/^/  /'
  status=1
fi

# 2. The whole C API is there.
for fn in hattn_fwd hattn_fwd_validate hattn_fwd_params_contiguous hattn_fwd_workspace_size hattn_fwd_fp8 hattn_fwd_fp8_validate \
          hattn_fwd_fp8_params_contiguous hattn_fwd_fp8_workspace_size hattn_bwd hattn_bwd_validate \
          hattn_bwd_params_contiguous hattn_bwd_workspace_size hattn_status_string hattn_version; do
  if ! printf '%s\n' "$exported" | grep -qx "$fn"; then
    echo "FAIL: $lib does not export $fn"
    status=1
  fi
done

# 3. No iostreams: their locale facets can bind to another libstdc++ copy in the same process
#    (see src/common/format.h).
iostream=$(nm -D --undefined-only "$lib" | awk '{ print $NF }' |
           grep -E 'St6locale|St8ios_base|basic_ostream|basic_ios|basic_stringbuf|St7num_put|St7num_get|St5ctype' || true)
if [ -n "$iostream" ]; then
  echo "FAIL: $lib uses iostream / locale symbols (format messages with hattn::common::format):"
  printf '%s\n' "$iostream" | head -20 | sed 's/^/  /'
  status=1
fi

# 4. A versioned soname.
if command -v readelf >/dev/null 2>&1; then
  soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
  if [ "$soname" != "$want_soname" ]; then
    echo "FAIL: $lib has soname '${soname:-<none>}', expected '$want_soname'"
    status=1
  fi
else
  echo "note: readelf not found, soname not checked"
fi

[ "$status" -eq 0 ] && echo "OK: $lib exports exactly: $(printf '%s ' $exported)(soname $want_soname)"
exit $status
