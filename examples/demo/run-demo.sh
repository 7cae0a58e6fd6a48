#!/usr/bin/env bash
# `make demo`: train the demo model with stage0, stage1, stage2, stage3 and
# offload on 4 MPI ranks, then compare them (tools/demo-compare): same final parameters
# (digest), losses, peak memory per rank by category, step time.  Each run is
# traced (ZERO_TRACE, docs/trace.md) and tools/demo-report writes a page with
# the charts and one step's timeline per plugin; its path is printed last.
#
# Environment (all optional):
#   ZERO_BUILD_DIR  build tree (default <repo>/build; configured if missing)
#   DEMO_OUT        where summaries and logs go (default <repo>/demo-out)
#   DEMO_NP         ranks (default 4)
#   DEMO_STEPS      optimizer steps per run (default 150)
#   DEMO_STAGES     configs to run (default "stage0 stage1 stage2 stage3 offload")
#   DEMO_NO_BUILD=1 do not (re)build the demo and plugins first
#   DEMO_REPORT     where the report page goes (default <build>/demo-report)
#   DEMO_TRACE=0    do not trace the runs (the page then has no timelines)
#   ZERO_TRACE_EVENTS  trace ring per thread (default here 8192: the last steps)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${ZERO_BUILD_DIR:-$ROOT/build}"
OUT="${DEMO_OUT:-$ROOT/demo-out}"
NP="${DEMO_NP:-4}"
STEPS="${DEMO_STEPS:-150}"
STAGES="${DEMO_STAGES:-stage0 stage1 stage2 stage3 offload}"
DEMO="$BUILD/examples/demo/zero-demo"
REPORT="${DEMO_REPORT:-$BUILD/demo-report}"
TRACE="${DEMO_TRACE:-1}"

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
if [ "$TRACE" = 1 ]; then
  mkdir -p "$OUT/trace"
  export ZERO_TRACE_EVENTS="${ZERO_TRACE_EVENTS:-8192}"
fi
export ZERO_PLUGIN_PATH="$BUILD/plugins${ZERO_PLUGIN_PATH:+:$ZERO_PLUGIN_PATH}"
summaries=()
for s in $STAGES; do
  cfg="$ROOT/examples/configs/$s.json"
  echo "=== $s: mpirun -np $NP zero-demo --config examples/configs/$s.json --steps $STEPS"
  rm -f "$OUT/$s.json"
  # self,vader: shared memory only (one machine), no TCP interface probing.
  rm -f "$OUT/trace/$s".rank*.json
  tr=()
  [ "$TRACE" = 1 ] && tr=(-x ZERO_TRACE="$OUT/trace/$s" -x ZERO_TRACE_EVENTS)
  mpirun --allow-run-as-root --oversubscribe -np "$NP" --mca btl self,vader "${tr[@]}" \
    "$DEMO" --config "$cfg" --steps "$STEPS" --summary "$OUT/$s.json" 2>&1 | tee "$OUT/$s.log"
  summaries+=("$OUT/$s.json")
done
echo
set +e
python3 "$ROOT/tools/demo-compare" "${summaries[@]}" | tee "$OUT/compare.txt"
rc=${PIPESTATUS[0]}
set -e
traces=()
[ "$TRACE" = 1 ] && traces=(--traces "$OUT/trace")
python3 "$ROOT/tools/demo-report" --out "$REPORT" "${traces[@]}" --text "$OUT/compare.txt" "${summaries[@]}" >/dev/null
echo
echo "report: $REPORT/index.html"
exit "$rc"
