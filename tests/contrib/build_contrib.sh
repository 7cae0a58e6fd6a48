#!/usr/bin/env bash
# Build plugins-contrib/ the way an outside author would (issue 21):
#  1. install libzero into a temporary prefix;
#  2. configure plugins-contrib against that prefix only (find_package(zero)),
#     warnings as errors;
#  3. check that no compile command names the source tree's abi/, core/ or
#     plugins/ (only <prefix>/include), and that each plugin exports exactly
#     its table.
# The contrib tests then load the plugins from <work>/build by name.
# Usage: build_contrib.sh <libzero build dir> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
say() { echo "contrib-build: $*"; }
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
# ZERO_OUTSIDE_CFLAGS / _LDFLAGS: the libzero build's own C and module link
# flags (tests/contrib/CMakeLists.txt), so that a sanitizer build's
# instrumented libzero_kit.a links into plugins built the same way.
cmake -S "$src/plugins-contrib" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_FLAGS="${ZERO_OUTSIDE_CFLAGS:-}" -DCMAKE_MODULE_LINKER_FLAGS="${ZERO_OUTSIDE_LDFLAGS:-}" \
      -DZERO_CONTRIB_WERROR=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$work/configure.log"
cmake --build "$work/build" -j2 >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
cc=$(cat "$work/build/compile_commands.json")
for d in abi core kit plugins backends; do
  if grep -q -- "-I$src/$d\b\|-isystem $src/$d\b" <<<"$cc"; then say "compiled against the source tree's $d/"; exit 1; fi
done
grep -q -- "$prefix/include" <<<"$cc" || { say "not compiled against $prefix/include"; exit 1; }
n=0
for so in "$work"/build/libzero-plugin-*.so; do
  # (__odr_asan.*: the indicator symbols AddressSanitizer adds beside each exported global)
  exports=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^__odr_asan\.' | sort -u | tr '\n' ' ')
  [[ "$exports" == "zero_plugin_v4 " ]] || { say "$(basename "$so") exports more than its table: $exports"; exit 1; }
  # links no libzero: services come through the table
  if ldd "$so" | grep -q "libzero\.so"; then say "$(basename "$so") links libzero"; exit 1; fi
  n=$((n + 1))
done
[[ $n -ge 1 ]] || { say "no plugin built"; exit 1; }
say "built $n contrib plugin(s) against the installed libzero in $prefix: OK"
