#!/usr/bin/env bash
# Compare the built libzero.so with the committed ABI baseline (libzero.abi,
# made by update-baseline.sh with abidw).  Exit status of abidiff is a bit
# field: 1 error, 2 usage error, 4 ABI change, 8 incompatible change.
#  - added functions/variables: reported, OK;
#  - data members appended at the end of a struct, new enumerators: OK
#    (judged by abidiff_allowed.py from the report);
#  - anything else (removed or changed function, moved, retyped or removed
#    field, changed enum value): FAIL.
# Usage: abidiff.sh <libzero.so> <abi dir> <baseline.abi>
set -uo pipefail
lib=$1 abidir=$2 base=$3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [[ ! -s "$base" ]]; then
  echo "no baseline $base: run tests/abi/update-baseline.sh"; exit 1
fi
# Without DWARF abidw sees symbols but no types: the comparison would be
# meaningless, so skip visibly (ctest SKIP_RETURN_CODE 77).
if ! readelf -S "$lib" | grep -q '\.debug_info'; then
  echo "SKIP: $lib has no debug info (build with RelWithDebInfo or Debug for the ABI check)"; exit 77
fi
abidw --headers-dir "$abidir" --drop-private-types --no-corpus-path --out-file "$tmp/current.abi" "$lib" || {
  echo "abidw failed on $lib"; exit 1; }

abidiff "$base" "$tmp/current.abi" >"$tmp/report.txt"
rc=$?
cat "$tmp/report.txt"
if (( rc & 3 )); then echo "abidiff itself failed (status $rc)"; exit 1; fi
if (( rc & 8 )); then echo "INCOMPATIBLE ABI change against $base (status $rc)"; exit 1; fi
if (( rc & 4 )); then
  # Additions alone are fine: rerun ignoring added symbols and see what is left.
  abidiff --no-added-syms "$base" "$tmp/current.abi" >"$tmp/rest.txt"
  rc2=$?
  if (( rc2 & 11 )) || ! python3 "$here/abidiff_allowed.py" <"$tmp/rest.txt"; then
    echo "ABI change beyond additions (status $rc2)"
    echo "If this is a deliberate, compatible extension, bump ZERO_ABI_VERSION_MINOR and run tests/abi/update-baseline.sh"
    exit 1
  fi
  echo "ABI additions only (new symbols, appended struct members, new enumerators): compatible"
fi
echo "ABI compatible with $base"
exit 0
