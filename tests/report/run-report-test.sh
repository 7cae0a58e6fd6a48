#!/usr/bin/env bash
# Issue 23: `make demo`'s report, end to end and small: run-demo.sh with two
# plugins on 3 ranks for 4 steps (traced), then the page it wrote is opened
# by headless chromium (check_report.py): every chart rendered with its
# series, no console error, a screenshot saved beside the page.
# Usage: run-report-test.sh BUILD_DIR SRC_DIR OUT_DIR   (exit 77: no chromium)
set -euo pipefail
BUILD=$1 SRC=$2 OUT=$3
rm -rf "$OUT" && mkdir -p "$OUT"
log="$OUT/run-demo.log"
ZERO_BUILD_DIR="$BUILD" DEMO_NO_BUILD=1 DEMO_NP=3 DEMO_STEPS=4 DEMO_STAGES="stage0 stage3" \
  DEMO_OUT="$OUT/demo" DEMO_REPORT="$OUT/report" "$SRC/examples/demo/run-demo.sh" >"$log" 2>&1 ||
  { tail -40 "$log"; echo "run-demo.sh failed"; exit 1; }
grep -q "^report: $OUT/report/index.html$" "$log" || { tail -5 "$log"; echo "run-demo.sh did not print the page path last"; exit 1; }
grep -q "digests agree" "$log" || { echo "the text summary is missing"; exit 1; }
# tools/demo-compare --svg draws the same charts as standalone SVG files
python3 "$SRC/tools/demo-compare" --svg "$OUT/svg" "$OUT/demo/stage0.json" "$OUT/demo/stage3.json" >/dev/null
python3 - "$OUT/svg" <<'PY'
import sys, xml.etree.ElementTree as ET
for name in ("loss", "memory", "step_time"):
    root = ET.parse(f"{sys.argv[1]}/{name}.svg").getroot()
    series = {g.get("data-series") for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("data-series")}
    assert root.get("data-chart") == name and {"stage0", "stage3"} <= series, (name, series)
print("demo-compare --svg: loss, memory, step_time with both runs")
PY
exec python3 "$SRC/tests/report/check_report.py" "$OUT/report/index.html" \
  --expect loss=stage0,stage3 --expect memory=stage0,stage3 --expect step_time=stage0,stage3 \
  --expect "trace-stage0=rank 0 host,rank 1 host,rank 2 host,rank 0 comm lane 0,rank 0 bucket lane 0" \
  --expect "trace-stage3=rank 0 host,rank 2 host,rank 0 comm lane 0" \
  --screenshot "$OUT/report/screenshot.png"
