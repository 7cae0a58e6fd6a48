#!/usr/bin/env bash
# libzero.so exports exactly the public host ABI:
#  - every ZERO_API function declared in abi/zero.h is exported, and
#  - nothing else is (no zero__ internals, no Jansson/MPI/helper symbols).
# Usage: check_exports.sh <libzero.so> <abi/zero.h>
set -euo pipefail
lib=$1 header=$2
fail=0

exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtDdBbRrVvWwi]$/ {print $3}' | sed 's/@.*//' | sort -u)
declared=$(grep -o 'ZERO_API[^(;]*(' "$header" | grep -v '__' | sed -E 's/.*[ *]([a-z_0-9]+)\($/\1/' | sort -u)

[[ -n "$declared" ]] || { echo "no ZERO_API functions found in $header"; exit 1; }
for f in $declared; do
  grep -qx "$f" <<<"$exported" || { echo "MISSING export: $f (declared ZERO_API in zero.h)"; fail=1; }
done
while read -r s; do
  [[ -z "$s" ]] && continue
  if [[ "$s" == zero__* || "$s" != zero_* ]]; then
    echo "UNEXPECTED export: $s (only public zero_* names may leave libzero.so)"; fail=1
  fi
done <<<"$exported"
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[[ "$soname" == libzero.so.1 ]] || { echo "SONAME is '$soname', expected libzero.so.1"; fail=1; }
nver=$(nm -D --defined-only "$lib" | grep -c '@@LIBZERO_1.0' || true)
[[ "$nver" -gt 0 ]] || { echo "exports are not versioned LIBZERO_1.0"; fail=1; }
echo "$(wc -w <<<"$declared") public functions declared, $(wc -w <<<"$exported") symbols exported, SONAME $soname"
exit $fail
