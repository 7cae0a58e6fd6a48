#!/usr/bin/env bash
# Install what libzero needs to build and test, from Debian packages only.
# Idempotent and silent when everything is already there: it asks dpkg-query
# first and runs apt-get (update + install) only for what is missing.
# Works as root, or through sudo otherwise.
set -euo pipefail

PKGS=(
  build-essential gcc make cmake pkg-config
  libjansson-dev
  libopenmpi-dev openmpi-bin
  abigail-tools binutils
  python3
)

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
