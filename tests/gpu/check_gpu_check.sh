#!/bin/sh
# tools/gpu-check.sh on a machine without a GPU: exits 0 and reports every
# part (build, ctest, demo, bench) as skipped with the reason, in both
# summary files.  With a GPU this test is skipped (77): there, gpu-check
# itself is the check, and a full run takes minutes.
set -u
src=$1
work=$2
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${n:-0}" -gt 0 ]; then
    echo "SKIPPED: $n GPU(s) present: run tools/gpu-check.sh itself"
    exit 77
fi
rm -rf "$work"
if ! "$src/tools/gpu-check.sh" "$work" >"$work.log" 2>&1; then
    echo "FAIL: gpu-check.sh exited non-zero without a GPU"; cat "$work.log"; exit 1
fi
python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
parts = {r["part"]: r for r in s["results"]}
bad = [p for p in ("build", "ctest", "demo", "bench") if p not in parts or parts[p]["status"] != "skipped" or not parts[p]["detail"]]
assert not bad, f"parts not reported skipped with a reason: {bad}: {s}"
assert set(s["counts"]) == {"skipped"}, s["counts"]
txt = open(d + "/summary.txt").read()
assert txt.count("skipped") >= 4, txt
print("gpu-check without a GPU:", parts["build"]["detail"])
PY
