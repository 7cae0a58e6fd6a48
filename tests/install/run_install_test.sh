#!/usr/bin/env bash
# Install libzero into a temporary prefix, then use it exactly as an outside
# user would:
#  1. the installed tree has headers, libzero.so.1, the CMake package, zero.pc
#     and the plugins;
#  2. examples/plugin-template builds with find_package(zero) against the
#     INSTALLED headers only;
#  3. a host builds with pkg-config (and again with find_package(zero)) against
#     the installed library, loads the template by name through
#     ZERO_PLUGIN_PATH and trains;
#  4. the same host with the installed stage0 (found next to the installed
#     libzero.so, no ZERO_PLUGIN_PATH) ends with bitwise the same parameters.
# Usage: run_install_test.sh <build dir> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
say() { echo "install-test: $*"; }

cmake --install "$build" --prefix "$prefix" >"$work/install.log"
libdir=$(dirname "$(find "$prefix" -name 'libzero.so.1' -print -quit)")
[[ -n "$libdir" && -f "$libdir/libzero.so.1" ]] || { say "libzero.so.1 not installed"; exit 1; }
for f in "$prefix/include/zero.h" "$prefix/include/zero_plugin.h" "$libdir/libzero.so" \
         "$libdir/cmake/zero/zeroConfig.cmake" "$libdir/cmake/zero/zeroConfigVersion.cmake" \
         "$libdir/pkgconfig/zero.pc"; do
  [[ -e "$f" ]] || { say "missing after install: $f"; exit 1; }
done
have_stage0=0
[[ -f "$libdir/zero/plugins/libzero-plugin-stage0.so" ]] && have_stage0=1
say "installed into $prefix (stage0 plugin installed: $have_stage0)"

# 2. The template, out of tree, against the installed package only.
cmake -S "$src/examples/plugin-template" -B "$work/template" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$work/template-configure.log"
cmake --build "$work/template" >"$work/template-build.log" 2>&1 || { cat "$work/template-build.log"; exit 1; }
cc_cmd=$(cat "$work/template/compile_commands.json")
if grep -q -- "$src/abi" <<<"$cc_cmd"; then say "template compiled against the source tree's abi/"; exit 1; fi
grep -q -- "$prefix/include" <<<"$cc_cmd" || { say "template not compiled against $prefix/include"; exit 1; }
[[ -f "$work/template/libzero-plugin-template-dp.so" ]] || { say "template plugin not built"; exit 1; }
exports=$(nm -D --defined-only "$work/template/libzero-plugin-template-dp.so" | awk '{print $3}' | sort -u | tr '\n' ' ')
[[ "$exports" == "zero_plugin_v1 " ]] || { say "template exports more than its table: $exports"; exit 1; }
say "template-dp built against the installed headers"

# 3. A host through pkg-config.
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[[ "$(pkg-config --modversion zero)" == 1.* ]] || { say "pkg-config zero: bad version"; exit 1; }
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags zero) "$src/tests/install/install_host.c" \
   $(pkg-config --libs zero) -Wl,-rpath,"$libdir" -o "$work/host"
ZERO_PLUGIN_PATH="$work/template" "$work/host" template-dp "$work/template.bin" "$work/ckpt-template"

# 3b. The same host through find_package(zero) and the zero::zero target.
mkdir -p "$work/cmake-host"
cat >"$work/cmake-host/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(zero_cmake_host C)
find_package(zero 1 REQUIRED)
add_executable(host "$src/tests/install/install_host.c")
set_target_properties(host PROPERTIES C_STANDARD 11)
target_link_libraries(host PRIVATE zero::zero)
CMAKE
cmake -S "$work/cmake-host" -B "$work/cmake-host/build" -DCMAKE_PREFIX_PATH="$prefix" >"$work/cmake-host.log"
cmake --build "$work/cmake-host/build" >>"$work/cmake-host.log" 2>&1 || { cat "$work/cmake-host.log"; exit 1; }
ZERO_PLUGIN_PATH="$work/template" "$work/cmake-host/build/host" template-dp "$work/template-cmake.bin" \
    "$work/ckpt-template-cmake"
cmp "$work/template.bin" "$work/template-cmake.bin" || { say "the find_package host trained differently"; exit 1; }
say "hosts built with pkg-config and with find_package(zero) agree"

# 4. Built-in stage0 from the installed plugin dir, compared bitwise.
if [[ $have_stage0 == 1 ]]; then
  env -u ZERO_PLUGIN_PATH ZERO_LOG_LEVEL=info "$work/host" stage0 "$work/stage0.bin" "$work/ckpt-stage0" \
      2>"$work/stage0.log"
  grep -q "$libdir/zero/plugins/libzero-plugin-stage0.so" "$work/stage0.log" ||
    { say "stage0 was not loaded from the installed plugin dir:"; cat "$work/stage0.log"; exit 1; }
  cmp "$work/template.bin" "$work/stage0.bin" ||
    { say "template-dp and stage0 trained to different parameters"; exit 1; }
  say "template-dp matches the installed stage0 bitwise"
fi
say "OK"
