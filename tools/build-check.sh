#!/usr/bin/env bash
# Configure and build libzero (library, plugins, tools, examples, tests) with
# warnings as errors, for each compiler x build type given, in fresh trees
# under ${BUILD_CHECK_DIR:-build-check}.  CUDA is left out: nvcc compiles its
# own files with its own host compiler, and the CUDA path has tools/gpu-check.sh.
#
#   tools/build-check.sh "clang gcc" "Release Debug RelWithDebInfo MinSizeRel"
#   JOBS=2 tools/build-check.sh clang Release          (what .ci/run does)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
compilers="${1:-gcc clang}"
types="${2:-Release Debug RelWithDebInfo MinSizeRel}"
jobs="${JOBS:-2}"
out="${BUILD_CHECK_DIR:-$ROOT/build-check}"
status=0
for cc in $compilers; do
  command -v "$cc" >/dev/null || { echo "build-check: $cc not installed (tools/install-deps.sh)" >&2; exit 1; }
  for t in $types; do
    dir="$out/$cc-$t"
    rm -rf "$dir"; mkdir -p "$dir"
    if cmake -S "$ROOT" -B "$dir" --log-level=WARNING -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE="$t" \
         -DZERO_WERROR=ON -DZERO_WITH_CUDA=OFF >"$dir/configure.log" 2>&1 &&
       cmake --build "$dir" -j"$jobs" >"$dir/build.log" 2>&1; then
      echo "build-check: $cc $t: clean"
    else
      echo "build-check: $cc $t: FAILED ($dir/build.log):" >&2
      grep -E "error|warning" "$dir/build.log" "$dir/configure.log" | head -20 >&2 || true
      status=1
    fi
  done
done
exit $status
