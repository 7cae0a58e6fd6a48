#!/usr/bin/env bash
# bench/trace: build the baseline library and the bench (not in `all`), run
# it under mpirun, and optionally draw the step times as SVG.
#   bench/trace/run-bench.sh [BUILD_DIR] [-- bench args]   (NP=2, SVG=out.svg)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-$ROOT/build}"; shift || true
[ "${1:-}" = "--" ] && shift
cmake --build "$BUILD" -j2 --target bench_trace >/dev/null
out=$(ZERO_PLUGIN_PATH="$BUILD/plugins" mpirun --allow-run-as-root --oversubscribe -np "${NP:-2}" \
  --mca btl self,vader "$BUILD/bench/trace/bench_trace" "$@")
echo "$out"
if [ -n "${SVG:-}" ]; then
  python3 - "$SVG" "$ROOT/tools" <<PY
import re, sys
sys.path.insert(0, sys.argv[2])
import svgchart
m = re.search(r"step ms \(median\): compiled out ([\d.]+), tracing off ([\d.]+), tracing on ([\d.]+)", """$out""")
c = re.search(r"host-thread CPU ms per step \(median\): compiled out ([\d.]+), off ([\d.]+), on ([\d.]+)", """$out""")
svg = svgchart.bar_chart("bench_trace", "bench/trace: host CPU per step (ms, median)",
                         [("compiled out", float(c.group(1))), ("tracing off", float(c.group(2))),
                          ("tracing on", float(c.group(3)))], "ms", unit=" ms")
open(sys.argv[1], "w").write(svg)
print("chart:", sys.argv[1])
PY
fi
