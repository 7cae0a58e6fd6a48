#!/usr/bin/env bash
# `pip install ./bindings/python` on a fresh machine, as the README says:
#  1. a copy of the source tree (no build, no install of libzero anywhere);
#  2. a fresh venv (--system-site-packages: Debian's torch, setuptools, wheel);
#  3. `pip wheel --no-build-isolation --no-deps --no-index` of bindings/python
#     with an empty environment (env -i, PATH only): it compiles libzero with
#     CMake and bundles the library, the plugins and the tools;
#  4. the wheel installed; the build tree deleted (the package must not need it);
#  5. with an empty environment again (no ZERO_LIBRARY, ZERO_PLUGIN_PATH,
#     LD_LIBRARY_PATH, PYTHONPATH): zero.__version__ and zero.version() are
#     the CMake project version, the loaded libzero is the bundled one, the
#     bundled zero-info runs and lists the bundled plugins;
#     the README's first Python lines run as written;
#  6. mpirun -np 2 of bindings/python/examples/train_mlp.py (zero.torch,
#     stage 2): it trains (the script's own check: the loss falls to a fifth),
#     and each rank loaded the bundled libzero.
# Skipped (exit 77, with the reason) without venv, pip, setuptools, wheel or torch.
# Usage: run_pip_wheel_test.sh <source dir> <python> <mpiexec> <work dir> <project version> [steps]
set -euo pipefail
src=$1 py=$2 mpiexec=$3 work=$4 want=$5 steps=${6:-60}
say() { echo "pip-wheel: $*"; }
skip() { say "SKIPPED: $*"; exit 77; }
rm -rf "$work"; mkdir -p "$work"
t0=$SECONDS
clean=(env -i "PATH=$PATH" "HOME=$work")  # the only variables any step below sees

"$py" -c 'import venv, ensurepip' 2>/dev/null || skip "$py has no venv/ensurepip (Debian: python3-venv)"
"$py" -m venv --system-site-packages "$work/venv" >"$work/venv.log" 2>&1 ||
  skip "python3 -m venv failed (Debian: python3-venv): $(tail -3 "$work/venv.log")"
vpy=$work/venv/bin/python
"$vpy" -m pip --version >/dev/null 2>&1 || skip "no pip in the venv"
"$vpy" -c 'import setuptools, wheel' 2>/dev/null || skip "setuptools or wheel not importable in the venv (Debian: python3-wheel)"
"$vpy" -c 'import torch' 2>/dev/null || skip "torch not importable in a --system-site-packages venv of $py (Debian: python3-torch)"

# 1. a fresh checkout: the working tree without builds, .git or pip leftovers
mkdir -p "$work/src"
tar -C "$src" --exclude=./.git --exclude='./build*' --exclude='./_install*' --exclude=./demo-out \
    --exclude='./gpu-check-*' --exclude=./bindings/python/build --exclude='*.egg-info' --exclude=__pycache__ \
    -cf - . | tar -C "$work/src" -xf -

# 2-3. the wheel, nothing in the environment
"${clean[@]}" "$vpy" -m pip wheel -v --no-build-isolation --no-deps --no-index -w "$work/dist" \
    "$work/src/bindings/python" >"$work/wheel.log" 2>&1 || { tail -60 "$work/wheel.log"; say "pip wheel failed"; exit 1; }
whl=$(ls "$work"/dist/*.whl)
say "built $(basename "$whl") in $((SECONDS - t0)) s"
[[ "$(basename "$whl")" == zero_bindings-"$want"-py3-none-linux_*.whl ]] ||
  { say "wheel name: want version $want, tag py3-none-linux_*"; exit 1; }
for f in zero/_native/lib/libzero.so.1 zero/_native/lib/zero/plugins/libzero-plugin-stage2.so \
         zero/_native/bin/zero-info zero/_version.py; do
  "$vpy" -c 'import sys, zipfile; sys.exit(sys.argv[2] not in zipfile.ZipFile(sys.argv[1]).namelist())' "$whl" "$f" ||
    { say "the wheel lacks $f"; exit 1; }
done

# 4. installed; the build tree goes (a wheel built elsewhere has none)
"${clean[@]}" "$vpy" -m pip install -q --no-index --no-deps "$whl" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; say "pip install of the wheel failed"; exit 1; }
rm -rf "$work/src/bindings/python/build"
site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
bundled=$site/zero/_native/lib/libzero.so.1

# 5. version and library, from a directory where no `zero` source lies
cd "$work"
got=$("${clean[@]}" "$vpy" -c 'import zero, zero._lib as L
print(zero.__version__, zero.version(), L.loaded_path(), zero.__file__)')
read -r v_pkg v_lib loaded file <<<"$got"
[[ "$v_pkg" == "$want" && "$v_lib" == "$want" ]] || { say "versions: package $v_pkg, library $v_lib, want $want"; exit 1; }
[[ "$loaded" == "$bundled" && "$file" == "$site/zero/__init__.py" ]] ||
  { say "loaded $loaded ($file), want the bundled $bundled"; exit 1; }
say "zero $v_pkg, libzero $v_lib loaded from the package: $loaded"
info=$("${clean[@]}" "$work/venv/bin/zero-info" 2>&1) || { echo "$info"; say "zero-info failed"; exit 1; }
grep -q "$site/zero/_native/lib/zero/plugins" <<<"$info" && grep -q "stage2" <<<"$info" ||
  { echo "$info"; say "zero-info does not list the bundled plugins"; exit 1; }
"${clean[@]}" "$vpy" -m zero.tools zero-info >/dev/null || { say "python -m zero.tools zero-info failed"; exit 1; }
say "zero-info (script and python -m zero.tools) lists the bundled plugins"

# the README's first Python lines, as written
"$vpy" - "$src/README.md" "$work/readme.py" <<'PY'
import sys
text = open(sys.argv[1]).read()
text = text[text.index("## Python, PyTorch and C++"):]
start = text.index("```python\n") + len("```python\n")
open(sys.argv[2], "w").write(text[start:text.index("```", start)])
PY
out=$("${clean[@]}" "$vpy" "$work/readme.py" 2>&1) || { echo "$out"; say "the README's example failed"; exit 1; }
grep -Eq "^loss [0-9.e+-]+$" <<<"$out" || { echo "$out"; say "the README's example printed no loss"; exit 1; }
say "the README's example: $out"

# 6. zero.torch trains at N = 2 through the installed package
cat >"$work/driver.py" <<'PY'
import os, runpy, sys
script = sys.argv[1]
sys.argv = sys.argv[1:]
try:
    runpy.run_path(script, run_name="__main__")
    rc = 0
except SystemExit as ex:
    rc = ex.code
import zero, zero._lib as L
print("rank %s: libzero %s from %s" % (os.environ.get("OMPI_COMM_WORLD_RANK"), zero.version(), L.loaded_path()))
sys.exit(rc)
PY
"${clean[@]}" "$mpiexec" --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader \
    "$vpy" "$work/driver.py" "$src/bindings/python/examples/train_mlp.py" --stage 2 --steps "$steps" \
    >"$work/train.log" 2>&1 || { cat "$work/train.log"; say "training failed"; exit 1; }
cat "$work/train.log"
[[ $(grep -c "libzero $want from $bundled\$" "$work/train.log") == 2 ]] ||
  { say "not every rank used the bundled libzero"; exit 1; }
grep -q "stage2 on 2 ranks" "$work/train.log" || { say "no stage2 training on 2 ranks"; exit 1; }
say "OK in $((SECONDS - t0)) s"
