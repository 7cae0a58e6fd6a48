#!/usr/bin/env bash
# The Python environment of bench/peers: PyTorch and DeepSpeed from PyPI in a
# virtual environment under the build directory (never committed), so the
# peers run a current PyTorch whatever Debian ships.  Idempotent: does
# nothing when the pinned versions are there.
#   bench/peers/setup-venv.sh [venv dir, default $ZERO_BUILD_DIR/peers-venv]
# PyPI's Linux x86-64 torch wheel is the CUDA build (it pulls the nvidia-*
# wheels, ~5 GiB in all); it runs on the CPU (DS_ACCELERATOR=cpu for
# DeepSpeed, which then JIT-builds its small shared-memory comm op on first use).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${1:-${ZERO_BUILD_DIR:-$ROOT/build}/peers-venv}"
TORCH_VERSION="${TORCH_VERSION:-2.15.0}" DEEPSPEED_VERSION="${DEEPSPEED_VERSION:-0.19.8}"
if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" - "$TORCH_VERSION" "$DEEPSPEED_VERSION" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
sys.exit(0 if version("torch").split("+")[0] == sys.argv[1] and version("deepspeed") == sys.argv[2] else 1)
PY
  exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q "torch==$TORCH_VERSION" "deepspeed==$DEEPSPEED_VERSION" numpy
echo "setup-venv: $VENV has torch $TORCH_VERSION and deepspeed $DEEPSPEED_VERSION"
