#!/usr/bin/env bash
# Install what libzero needs to build and test, from Debian packages only.
# Idempotent and silent when everything is already there: it asks dpkg-query
# first and runs apt-get (update + install) only for what is missing.
# Works as root, or through sudo otherwise.
#
# Test hooks: INSTALL_DEPS_EXTRA="pkg ..." adds packages to the list;
# INSTALL_DEPS_DRY_RUN=1 prints the apt-get commands instead of running them.
set -euo pipefail

PKGS=(
  build-essential gcc make cmake pkg-config
  clang libclang-rt-dev   # libclang-rt-dev: libFuzzer and the sanitizer runtimes (tests/fuzz)
  libjansson-dev
  libopenmpi-dev openmpi-bin
  abigail-tools binutils
  python3
  python3-venv python3-wheel  # `python3 -m venv` + `pip install ./bindings/python` (bindings.pip_wheel_np2)
  iproute2                # ip netns / veth: tests/multihost
  python3-torch
  chromium fonts-dejavu-core  # tests/report: the demo report opened by a real headless browser
  # bench/peers' C host multiplies matrices with CBLAS (serial: no BLAS
  # threads of its own); installing it also switches Debian's libblas.so.3
  # (and so python3-torch) from the reference BLAS to OpenBLAS
  libopenblas-serial-dev
)
# shellcheck disable=SC2206
PKGS+=(${INSTALL_DEPS_EXTRA:-})

# GPU path: cuobjdump for the SASS inspection test (CUDA 13 toolkits ship without it) from PyPI, where nvcc exists; as an EXIT trap so it also runs after the early exit below.
trap 'if [ "${INSTALL_DEPS_DRY_RUN:-0}" != 1 ] && { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then python3 -m pip show nvidia-cuda-cuobjdump >/dev/null 2>&1 || python3 -m pip install -q nvidia-cuda-cuobjdump >/dev/null 2>&1 || echo "install-deps: pip install nvidia-cuda-cuobjdump failed; gpu_sass_inspect will fail" >&2; fi' EXIT

missing=()
for p in "${PKGS[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

if [[ "${INSTALL_DEPS_DRY_RUN:-0}" == 1 ]]; then
  echo "install-deps: would run: apt-get update -qq && apt-get install -y -qq --no-install-recommends ${missing[*]}"
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  echo "install-deps: missing Debian packages: ${missing[*]}" >&2
  echo "install-deps: not root and no sudo; install them and rerun" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
