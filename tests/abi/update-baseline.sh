#!/usr/bin/env bash
# Regenerate tests/abi/libzero.abi from a built libzero.so.  Do this only for
# a release, or for a reviewed, compatible (append-only) extension.
# Usage: tests/abi/update-baseline.sh [build dir, default build]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
lib=$(ls "$build"/core/libzero.so.1.* | sort -V | tail -1) # the newest: a build dir keeps older versions' files
abidw --headers-dir "$root/abi" --drop-private-types --no-corpus-path --out-file "$root/tests/abi/libzero.abi" "$lib"
echo "wrote $root/tests/abi/libzero.abi from $lib"
