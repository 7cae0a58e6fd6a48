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
#     libzero.so, no ZERO_PLUGIN_PATH) ends with bitwise the same parameters;
#  5. every installed executable carries an $ORIGIN-relative RUNPATH and runs
#     from PREFIX/bin with an empty LD_LIBRARY_PATH.
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

# ZERO_OUTSIDE_CFLAGS / _LDFLAGS: the libzero build's own C and module link
# flags (tests/install/CMakeLists.txt), so that a sanitizer build's
# instrumented libzero_kit.a links into a template built the same way and
# the hosts carry the same runtime; empty in a plain build.
outside_cflags=${ZERO_OUTSIDE_CFLAGS:-}

# 2. The template, out of tree, against the installed package only.
cmake -S "$src/examples/plugin-template" -B "$work/template" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
      -DCMAKE_C_FLAGS="$outside_cflags" -DCMAKE_MODULE_LINKER_FLAGS="${ZERO_OUTSIDE_LDFLAGS:-}" \
      >"$work/template-configure.log"
cmake --build "$work/template" >"$work/template-build.log" 2>&1 || { cat "$work/template-build.log"; exit 1; }
cc_cmd=$(cat "$work/template/compile_commands.json")
if grep -q -- "$src/abi" <<<"$cc_cmd"; then say "template compiled against the source tree's abi/"; exit 1; fi
grep -q -- "$prefix/include" <<<"$cc_cmd" || { say "template not compiled against $prefix/include"; exit 1; }
[[ -f "$work/template/libzero-plugin-template-dp.so" ]] || { say "template plugin not built"; exit 1; }
# (__odr_asan.*: the indicator symbols AddressSanitizer adds beside each exported global)
exports=$(nm -D --defined-only "$work/template/libzero-plugin-template-dp.so" | awk '{print $3}' |
  grep -v '^__odr_asan\.' | sort -u | tr '\n' ' ')
[[ "$exports" == "zero_plugin_v4 " ]] || { say "template exports more than its table: $exports"; exit 1; }
say "template-dp built against the installed headers"

# 3. A host through pkg-config.
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[[ "$(pkg-config --modversion zero)" == 1.* ]] || { say "pkg-config zero: bad version"; exit 1; }
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Wextra -Werror $outside_cflags $(pkg-config --cflags zero) "$src/tests/install/install_host.c" \
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
cmake -S "$work/cmake-host" -B "$work/cmake-host/build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_C_FLAGS="$outside_cflags" >"$work/cmake-host.log"
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
# 5. Installed tools find libzero.so.1 through their RUNPATH alone.
bin=$prefix/bin
tools=()
while IFS= read -r t; do
  [[ $(head -c4 "$t" | od -An -c | tr -d ' ') == '177ELF' ]] && tools+=("$t")
done < <(find "$bin" -maxdepth 1 -type f -perm -u+x | sort)
[[ ${#tools[@]} -gt 0 ]] || { say "no executables installed in $bin"; exit 1; }
for t in "${tools[@]}"; do
  rp=$(readelf -d "$t" | grep -E 'R(UN)?PATH' || true)
  # shellcheck disable=SC2016 # a literal $ORIGIN
  grep -q 'RUNPATH.*\$ORIGIN/' <<<"$rp" || { say "$t has no \$ORIGIN RUNPATH: ${rp:-none}"; exit 1; }
  # What the dynamic loader resolves, without running the tool (like ldd).
  deps=$(env LD_LIBRARY_PATH= LD_TRACE_LOADED_OBJECTS=1 "$t" 2>&1 || true)
  if grep -q 'not found' <<<"$deps"; then say "$t: unresolved libraries:"; echo "$deps"; exit 1; fi
  got=$(awk '$1 == "libzero.so.1" && $2 == "=>" {print $3}' <<<"$deps")
  if [[ -n "$got" && $(realpath "$got") != $(realpath "$libdir/libzero.so.1") ]]; then
    say "$t loads $got, not the installed libzero:"; echo "$deps"; exit 1
  fi
done
clean=(env -u ZERO_PLUGIN_PATH LD_LIBRARY_PATH=)
run_tool() { # run_tool LOG EXPECTED_RC CMD...: the tool must start (never rc 127) and exit as expected
  local log=$work/$1 want=$2; shift 2
  local rc=0
  "${clean[@]}" "$@" >"$log" 2>&1 || rc=$?
  [[ $rc == "$want" ]] || { say "$* exited $rc (expected $want):"; cat "$log"; exit 1; }
}
run_tool zero-info.log 0 "$bin/zero-info"
if [[ $have_stage0 == 1 ]]; then
  grep -q "$libdir/zero/plugins/libzero-plugin-stage0.so" "$work/zero-info.log" ||
    { say "installed zero-info does not list the installed stage0:"; cat "$work/zero-info.log"; exit 1; }
fi
run_tool zero-ckpt.log 2 "$bin/zero-ckpt"
grep -q '^usage: zero-ckpt' "$work/zero-ckpt.log" || { say "zero-ckpt printed no usage"; exit 1; }
if [[ -x $bin/zero-estimate && $have_stage0 == 1 ]]; then
  run_tool zero-estimate.log 0 "$bin/zero-estimate" --params 1e6 --ranks 1,2 --plugins stage0,stage2
fi
for demo in zero-demo zero-pipeline-demo; do
  [[ -x $bin/$demo ]] && run_tool "$demo-help.log" 0 "$bin/$demo" --help
done
if [[ -x $bin/zero-demo && $have_stage0 == 1 ]] && command -v mpirun >/dev/null; then
  run_tool zero-demo.log 0 mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader \
    -x LD_LIBRARY_PATH "$bin/zero-demo" --config "$src/examples/configs/stage0.json" --steps 3 --quiet
fi
say "installed tools run from $bin with an empty LD_LIBRARY_PATH: $(basename -a "${tools[@]}" | tr '\n' ' ')"
say "OK"
