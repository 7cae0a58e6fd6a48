#!/usr/bin/env bash
# How the Python package finds libzero.so.1, in the documented order, and how
# it is installed:
#  1. $ZERO_LIBRARY wins (a wrong one fails with an OSError naming it);
#  2. without it, the loader's search (LD_LIBRARY_PATH here);
#  3. after `cmake --install` (what make install runs) into a fresh prefix:
#     the package installed there, libzero found through pkg-config, the
#     installed plugins next to it, and an engine trains a step;
#  4. `pip install ./bindings/python` (into a --target dir: no network, no
#     build isolation) gives an importable package.
# Usage: run_find_test.sh <build dir> <source dir> <python> <work dir>
set -euo pipefail
build=$1 src=$2 py=$3 work=$4
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

"$py" -m pip install -q --no-build-isolation --no-deps --target "$work/pip" "$src/bindings/python" \
    >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }
got=$(env -u PYTHONPATH PYTHONPATH="$work/pip" ZERO_LIBRARY="$build/core/libzero.so.1" \
      ZERO_PLUGIN_PATH="$build/plugins" "$py" "$work/step.py")
[[ "$got" == *"$work/pip/zero/__init__.py" ]] || { say "pip-installed package not used: $got"; exit 1; }
say "4. pip install ./bindings/python: ok"
rm -rf "$work/pip/build" "$src/bindings/python/build" "$src/bindings/python/"*.egg-info 2>/dev/null || true
say OK
