#!/usr/bin/env bash
# ctest precision_stage_trajectories: "swap the plugin, keep the run".
# The demo trained with a 16-bit model (examples/configs/fp16.json and
# bf16.json, with gradient_accumulation_steps 1 and 4) under every plugin
# must match stage0 step for step: the same steps skipped on fp16 overflow
# (a skipped step is grad_norm -1 in the summary), every step's loss within
# 1e-3 nats, and no WARN line in any run's output.  The fp16-hot variant
# starts the loss scale at 2^30 so that the first steps overflow: the check
# that the skip decisions agree then has something to agree on (it fails if
# stage0 skipped nothing there).
# Usage: check-stage-trajectories.sh ZERO_DEMO_BINARY REPO_ROOT OUT_DIR [NP] [STEPS]
set -euo pipefail
DEMO="$1" ROOT="$2" OUT="$3" NP="${4:-2}" STEPS="${5:-40}"
PLUGINS="${TRAJ_PLUGINS:-stage0 stage1 stage2 stage3 offload}"
mkdir -p "$OUT"
# name base-config gas initial_scale_power ("-" keeps the config's)
VARIANTS="fp16-gas1:fp16:1:- fp16-gas4:fp16:4:- fp16-hot-gas4:fp16:4:30 bf16-gas1:bf16:1:- bf16-gas4:bf16:4:-"
for v in $VARIANTS; do
  IFS=: read -r name base gas power <<<"$v"
  python3 - "$ROOT/examples/configs/$base.json" "$OUT/$name.cfg.json" "$gas" "$power" <<'PY'
import json, sys
src, dst, gas, power = sys.argv[1:]
c = json.load(open(src))
c["gradient_accumulation_steps"] = int(gas)
if power != "-":
    c["fp16"]["initial_scale_power"] = int(power)
json.dump(c, open(dst, "w"), indent=1)
PY
  for p in $PLUGINS; do
    rm -f "$OUT/$name.$p.json"
    mpirun --allow-run-as-root --oversubscribe -np "$NP" --mca btl self,vader \
      "$DEMO" ${DEMO_DATA:+--data "$DEMO_DATA"} --config "$OUT/$name.cfg.json" --plugin "$p" --steps "$STEPS" --quiet --no-validation \
      --summary "$OUT/$name.$p.json" >"$OUT/$name.$p.log" 2>&1 ||
      { echo "check-stage-trajectories: $name $p failed:"; cat "$OUT/$name.$p.log"; exit 1; }
  done
done
python3 - "$OUT" "$PLUGINS" "$VARIANTS" <<'PY'
import json, sys
out, plugins, variants = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
ok = True
for v in variants:
    name = v.split(":")[0]
    runs = {p: json.load(open(f"{out}/{name}.{p}.json")) for p in plugins}
    ref = runs[plugins[0]]
    skipped_ref = [i for i, g in enumerate(ref["grad_norms"]) if g == -1]
    if "hot" in name and not skipped_ref:
        print(f"{name}: {plugins[0]} skipped no step: the variant no longer exercises overflow: FAIL")
        ok = False
    for p in plugins[1:]:
        r = runs[p]
        skipped = [i for i, g in enumerate(r["grad_norms"]) if g == -1]
        d = max(abs(a - b) for a, b in zip(ref["losses"], r["losses"]))
        warns = [l for l in open(f"{out}/{name}.{p}.log") if "WARN" in l]
        good = len(r["losses"]) == len(ref["losses"]) and skipped == skipped_ref and d <= 1e-3 and not warns
        print(f"{name} {p}: skipped {skipped} vs {skipped_ref}, max |loss - {plugins[0]}| = {d:.2e} (<= 1e-3), "
              f"{len(warns)} WARN lines: {'ok' if good else 'FAIL'}")
        for l in warns[:3]:
            print("   ", l.rstrip())
        ok &= good
    warns0 = [l for l in open(f"{out}/{name}.{plugins[0]}.log") if "WARN" in l]
    if warns0:
        print(f"{name} {plugins[0]}: {len(warns0)} WARN lines: FAIL")
        ok = False
sys.exit(0 if ok else 1)
PY
