#!/usr/bin/env bash
# `make demo`: train the demo model with stage0, stage1, stage2, stage3 and
# offload on 4 MPI ranks, then compare them (tools/demo-compare): same final parameters
# (digest), losses, peak memory per rank by category, step time.
#
# Environment (all optional):
#   ZERO_BUILD_DIR  build tree (default <repo>/build; configured if missing)
#   DEMO_OUT        where summaries and logs go (default <repo>/demo-out)
#   DEMO_NP         ranks (default 4)
#   DEMO_STEPS      optimizer steps per run (default 150)
#   DEMO_STAGES     configs to run (default "stage0 stage1 stage2 stage3 offload")
#   DEMO_NO_BUILD=1 do not (re)build the demo and plugins first
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${ZERO_BUILD_DIR:-$ROOT/build}"
OUT="${DEMO_OUT:-$ROOT/demo-out}"
NP="${DEMO_NP:-4}"
STEPS="${DEMO_STEPS:-150}"
STAGES="${DEMO_STAGES:-stage0 stage1 stage2 stage3 offload}"
DEMO="$BUILD/examples/demo/zero-demo"

if [ "${DEMO_NO_BUILD:-0}" != 1 ]; then
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  targets=(zero-demo)
  for s in $STAGES; do targets+=("zero-plugin-$s"); done
  cmake --build "$BUILD" -j2 --target "${targets[@]}"
fi
[ -x "$DEMO" ] || { echo "run-demo: $DEMO not built" >&2; exit 1; }

mkdir -p "$OUT"
export ZERO_PLUGIN_PATH="$BUILD/plugins${ZERO_PLUGIN_PATH:+:$ZERO_PLUGIN_PATH}"
summaries=()
for s in $STAGES; do
  cfg="$ROOT/examples/configs/$s.json"
  echo "=== $s: mpirun -np $NP zero-demo --config examples/configs/$s.json --steps $STEPS"
  rm -f "$OUT/$s.json"
  # self,vader: shared memory only (one machine), no TCP interface probing.
  mpirun --allow-run-as-root --oversubscribe -np "$NP" --mca btl self,vader \
    "$DEMO" --config "$cfg" --steps "$STEPS" --summary "$OUT/$s.json" 2>&1 | tee "$OUT/$s.log"
  summaries+=("$OUT/$s.json")
done
echo
exec python3 "$ROOT/tools/demo-compare" "${summaries[@]}"
