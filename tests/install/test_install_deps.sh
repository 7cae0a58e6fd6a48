#!/usr/bin/env bash
# tools/install-deps.sh is silent and succeeds when everything is installed
# (it runs before every `make test`), and asks apt-get only for what is
# missing (checked with a package that cannot exist, in dry-run mode).
set -euo pipefail
script=$1
out=$("$script" 2>&1) || { echo "install-deps failed: $out"; exit 1; }
[[ -z "$out" ]] || { echo "install-deps is not quiet when nothing is missing: $out"; exit 1; }
out=$(INSTALL_DEPS_EXTRA="libzero-no-such-package-xyz" INSTALL_DEPS_DRY_RUN=1 "$script" 2>&1)
grep -q "apt-get install .*libzero-no-such-package-xyz" <<<"$out" || { echo "missing package not requested: $out"; exit 1; }
grep -q "libjansson-dev" <<<"$out" && { echo "asked for an installed package: $out"; exit 1; }
echo "install-deps: quiet when complete, requests only what is missing"
