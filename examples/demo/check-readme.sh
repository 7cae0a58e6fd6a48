#!/usr/bin/env bash
# ctest demo_readme_figures: the memory figures the READMEs print for
# `make demo` are what the demo measures now.  Runs stage0, stage1, stage2,
# stage3 and offload on 4 ranks (their configs, a few steps: peak memory
# does not depend on the step count, the corpus or the timing), then
# compares, digit for digit as tools/demo-compare prints them (KiB, one
# decimal):
#   - examples/demo/README.md: the "peak memory per rank by category" table
#     of the recorded comparison (every row, the offload host-tier line and
#     the "memory: max peak per rank" line);
#   - README.md: "Memory per rank, demo model ...": each plugin's peak and
#     offload's host tier.
# On a difference it prints both and the command that regenerates them:
#   make demo     (or: ZERO_BUILD_DIR=build examples/demo/run-demo.sh)
# then paste demo-out/compare.txt into examples/demo/README.md ("A recorded
# run") and the peaks into README.md.
# Usage: check-readme.sh ZERO_DEMO_BINARY REPO_ROOT OUT_DIR [STEPS]
set -euo pipefail
DEMO="$1" ROOT="$2" OUT="$3" STEPS="${4:-4}"
NP=4
mkdir -p "$OUT"
summaries=()
for s in stage0 stage1 stage2 stage3 offload; do
  rm -f "$OUT/$s.json"
  mpirun --allow-run-as-root --oversubscribe -np "$NP" --mca btl self,vader "$DEMO" ${DEMO_DATA:+--data "$DEMO_DATA"} \
    --config "$ROOT/examples/configs/$s.json" --steps "$STEPS" --quiet --summary "$OUT/$s.json" >"$OUT/$s.log" 2>&1 \
    || { echo "check-readme: $s failed:"; cat "$OUT/$s.log"; exit 1; }
  summaries+=("$OUT/$s.json")
done
python3 "$ROOT/tools/demo-compare" "${summaries[@]}" >"$OUT/compare.txt" || { cat "$OUT/compare.txt"; exit 1; }
python3 - "$ROOT" "$OUT/compare.txt" "${summaries[@]}" <<'PY'
import json, re, sys

root, compare = sys.argv[1], sys.argv[2]
runs = [json.load(open(p)) for p in sys.argv[3:]]
kib = lambda b: "%.1f" % (b / 1024)


def memory_block(lines):
    """The rows of the 'peak memory per rank by category' table, the host-tier
    lines and the ordering line, whitespace-normalised."""
    out, on = [], False
    for ln in lines:
        if ln.startswith("peak memory per rank by category"):
            on = True
            continue
        if on and ln.startswith("memory: max peak per rank"):
            out.append(" ".join(ln.split()))
            break
        if on and re.match(r"^(stage\d|offload|[\w-]+)\s+(\d+|host tier)", ln) and not ln.startswith("run "):
            out.append(" ".join(ln.split()))
    return out


measured = memory_block(open(compare).read().splitlines())
readme = open(root + "/examples/demo/README.md").read()
i = readme.find("## A recorded run")
printed = memory_block(readme[i:].splitlines()) if i >= 0 else []
bad = 0
if printed != measured:
    bad = 1
    print("examples/demo/README.md, 'A recorded run': the memory table differs from a run now")
    for a, b in zip(printed + [""] * len(measured), measured + [""] * len(printed)):
        if a != b:
            print("  README: %s\n  run:    %s" % (a or "(missing)", b or "(missing)"))

# README.md: "... from `make demo`: stage0 X KiB, stage1 X KiB, ..., offload X KiB device tier + Y KiB host tier"
top = open(root + "/README.md").read()
m = re.search(r"Memory per rank, demo model.*?\n\n", top, re.S)
want = {r["plugin"]: kib(max(x["device"]["peak_total"] for x in r["memory"])) for r in runs}
want["offload host"] = kib(max(x["host"]["peak_total"] for x in runs[-1]["memory"]))
got = {}
if m:
    text = " ".join(m.group(0).split())  # the sentence wraps anywhere
    for name, v in re.findall(r"\b(stage\d|offload) ([\d.]+) KiB", text):
        got[name] = v
    h = re.search(r"\+ ([\d.]+) KiB host tier", text)
    if h:
        got["offload host"] = h.group(1)
for k, v in want.items():
    if got.get(k) != v:
        bad = 1
        print("README.md, 'Memory per rank, demo model': %s %s KiB printed, %s KiB measured" % (k, got.get(k), v))
if bad:
    print("regenerate: make demo (examples/demo/run-demo.sh), then paste demo-out/compare.txt into "
          "examples/demo/README.md and the peaks into README.md")
    sys.exit(1)
print("README figures match a run now: %d rows; README.md: %s" % (len(measured),
      ", ".join("%s %s KiB" % kv for kv in want.items())))
PY
