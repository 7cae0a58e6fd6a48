#!/usr/bin/env bash
# How the Python package finds libzero.so.1, in the documented order, and how
# it is installed:
#  1. $ZERO_LIBRARY wins (a wrong one fails with an OSError naming it);
#  2. without it, the loader's search (LD_LIBRARY_PATH here);
#  3. after `cmake --install` (what make install runs) into a fresh prefix:
#     the package installed there, libzero found through pkg-config, the
#     installed plugins next to it, and an engine trains a step;
#  4. a package with a bundled libzero (the layout `pip install
#     ./bindings/python` gives: zero/_native/lib/libzero.so.1 and
#     zero/_native/lib/zero/plugins) loads it with no environment, even when
#     the loader's search would find another; ZERO_LIBRARY still wins;
#     ZERO_USE_SYSTEM_LIBRARY=1 falls back to the loader's search; and
#     make install's package carries zero/_version.py (the project version).
#     (pip install itself, which compiles libzero: bindings.pip_wheel_np2.)
# Usage: run_find_test.sh <build dir> <source dir> <python> <work dir> <project version>
set -euo pipefail
build=$1 src=$2 py=$3 work=$4 want=${5:-}
rm -rf "$work"; mkdir -p "$work"
say() { echo "python-find: $*"; }
unset ZERO_PLUGIN_PATH LD_LIBRARY_PATH ZERO_LIBRARY || true
export PYTHONPATH="$src/bindings/python"

out=$(ZERO_LIBRARY=/nonexistent/libzero.so.1 "$py" -c 'import zero; zero.version()' 2>&1 || true)
grep -q "/nonexistent/libzero.so.1 (ZERO_LIBRARY)" <<<"$out" || { say "bad ZERO_LIBRARY not reported: $out"; exit 1; }
say "1. a wrong ZERO_LIBRARY is reported: ok"

got=$(LD_LIBRARY_PATH="$build/core" "$py" -c 'import zero._lib as L; print(L.loaded_path())')
[[ "$got" == "$build/core/libzero.so.1"* ]] || { say "loader search loaded '$got'"; exit 1; }
say "2. the loader's search (LD_LIBRARY_PATH): $got"

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
pkg=$(dirname "$(find "$prefix" -path '*site-packages/zero/__init__.py' -print -quit)")
[[ -f "$pkg/engine.py" && -f "$prefix/include/zero.hpp" ]] || { say "make install did not install the package"; exit 1; }

pc=$(dirname "$(find "$prefix" -name zero.pc -print -quit)")
cat >"$work/step.py" <<'PY'
import array, zero, zero._lib as L
e = zero.Engine({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.5}},
                 "zero_optimization": {"stage": 2}})
w = array.array("f", [1.0] * 5)
p = e.register("w", w, host_owned=True)
e.params_done()
g = e.grad_buffer(p)
for k in range(5):
    g[k] += 1.0
e.on_grad_ready(p)
r = e.step()
assert r.taken and list(w) == [0.5] * 5, (r, list(w))
print(L.loaded_path(), zero.__file__)
PY
got=$(env -u PYTHONPATH PYTHONPATH="$(dirname "$pkg")" PKG_CONFIG_PATH="$pc" "$py" "$work/step.py")
[[ "$got" == "$prefix"* ]] || { say "installed package used '$got'"; exit 1; }
say "3. installed package + pkg-config: $got"

[[ -z "$want" || "$(cat "$pkg/_version.py")" == *"version = \"$want\""* ]] ||
  { say "make install's zero/_version.py does not say $want"; exit 1; }

b=$work/bundled
mkdir -p "$b/zero/_native/lib/zero/plugins"
cp "$src"/bindings/python/zero/*.py "$b/zero/"
cp "$(readlink -f "$build/core/libzero.so.1")" "$b/zero/_native/lib/libzero.so.1"
cp "$build"/plugins/libzero-plugin-*.so "$b/zero/_native/lib/zero/plugins/"
got=$(env -u PYTHONPATH PYTHONPATH="$b" LD_LIBRARY_PATH="$build/core" "$py" "$work/step.py")
[[ "$got" == "$b/zero/_native/lib/libzero.so.1 $b/zero/__init__.py" ]] || { say "bundled library not used: $got"; exit 1; }
got=$(env -u PYTHONPATH PYTHONPATH="$b" ZERO_LIBRARY="$build/core/libzero.so.1" "$py" "$work/step.py")
[[ "$got" == "$build/core/libzero.so.1"* ]] || { say "ZERO_LIBRARY did not override the bundled one: $got"; exit 1; }
got=$(env -u PYTHONPATH PYTHONPATH="$b" ZERO_USE_SYSTEM_LIBRARY=1 LD_LIBRARY_PATH="$build/core" "$py" "$work/step.py")
[[ "$got" == "$build/core/libzero.so.1"* ]] || { say "ZERO_USE_SYSTEM_LIBRARY=1 did not use the loader's: $got"; exit 1; }
say "4. bundled library first; ZERO_LIBRARY and ZERO_USE_SYSTEM_LIBRARY=1 override it: ok"
say OK
