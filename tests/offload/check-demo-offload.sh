#!/usr/bin/env bash
# ctest offload_demo: the demo trainer (examples/demo) with the offload
# plugin reaches the same parameters as stage2 (tools/demo-compare, relative
# digest difference <= 1e-6), chosen two ways:
#   examples/configs/offload.json (stage 2 + offload_optimizer.device "cpu"),
#   examples/configs/stage1.json with --plugin offload (stage-1 partitioning);
# and its summary shows the optimizer state on the host tier, not the device.
# Usage: check-demo-offload.sh ZERO_DEMO_BINARY REPO_ROOT OUT_DIR [NP] [STEPS]
set -euo pipefail
DEMO="$1" ROOT="$2" OUT="$3" NP="${4:-4}" STEPS="${5:-20}"
mkdir -p "$OUT"
run() { # run NAME CONFIG [extra args]
  local name="$1" cfg="$2"; shift 2
  rm -f "$OUT/$name.json"
  mpirun --allow-run-as-root --oversubscribe -np "$NP" --mca btl self,vader \
    "$DEMO" ${DEMO_DATA:+--data "$DEMO_DATA"} --config "$cfg" --steps "$STEPS" --quiet --summary "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1 \
    || { echo "check-demo-offload: run $name failed:"; cat "$OUT/$name.log"; exit 1; }
}
run stage2 "$ROOT/examples/configs/stage2.json"
run offload "$ROOT/examples/configs/offload.json"
run offload-stage1 "$ROOT/examples/configs/stage1.json" --plugin offload
grep -q "plugin offload" "$OUT/offload.log" || { echo "offload.json did not select the offload plugin"; exit 1; }
python3 "$ROOT/tools/demo-compare" --reference "$OUT/stage2.json" \
  "$OUT/stage2.json" "$OUT/offload.json" "$OUT/offload-stage1.json"
python3 - "$OUT/stage2.json" "$OUT/offload.json" <<'PY'
import json, sys
s2, of = (json.load(open(p)) for p in sys.argv[1:3])
assert of["plugin"] == "offload", of["plugin"]
for a, b in zip(s2["memory"], of["memory"]):
    r = b["rank"]
    assert b["device"]["current"]["optim"] == 0 and b["device"]["current"]["master"] == 0, (r, b["device"])
    assert b["host"]["current"]["optim"] == a["device"]["current"]["optim"] > 0, (r, a, b)
    assert b["host"]["current"]["master"] * 2 == b["host"]["current"]["optim"], (r, b["host"])
    assert b["device"]["peak_total"] == a["device"]["peak_total"] - a["device"]["current"]["optim"], (r, a, b)
print("offload: optimizer state moved from the device tier to the host tier on every rank: PASS")
PY
