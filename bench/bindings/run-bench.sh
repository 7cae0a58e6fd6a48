#!/usr/bin/env bash
# bench/bindings: zero.torch (stage 1, stage 2, offload) vs DDP + AdamW and vs
# DDP + ZeroRedundancyOptimizer (gloo), step time and peak RSS per rank, the
# ratios from ONE run of this script (configurations alternated REPS times so
# machine load hits all alike).  See README.md.
# Environment (optional): ZERO_BUILD_DIR (<repo>/build), NP (2), WIDTH (1024),
# LAYERS (4), STEPS (30), WARMUP (5), REPS (3), PY (/usr/bin/python3), BENCH_OUT,
# MODES (all six; e.g. MODES="ddp-zero-redundancy zero-stage1" for a short run;
# "zero-stage2 zero-stage2-host": stage 2 over MPI vs over the torch gloo group, ABI 1.5).
# Also prints where each configuration's step goes (forward, backward, the
# gradient hand-off inside backward, the optimizer step / zero_step's phases).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${ZERO_BUILD_DIR:-$ROOT/build}"
NP="${NP:-2}" WIDTH="${WIDTH:-1024}" LAYERS="${LAYERS:-4}" STEPS="${STEPS:-30}" WARMUP="${WARMUP:-5}" REPS="${REPS:-3}"
PY="${PY:-/usr/bin/python3}"
OUT="${BENCH_OUT:-$(mktemp -d /tmp/zero-bench-bindings-XXXXXX)}"
export ZERO_LIBRARY="$BUILD/core/libzero.so.1" PYTHONPATH="$ROOT/bindings/python" ZERO_PLUGIN_PATH="$BUILD/plugins"
read -r -a MODES <<<"${MODES:-ddp-adamw ddp-zero-redundancy zero-stage1 zero-stage2 zero-offload zero-stage2-views}"
echo "bench/bindings: N=$NP, MLP ${LAYERS}x${WIDTH}^2 fp32, $STEPS steps (first $WARMUP dropped), $REPS rounds;" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$OUT/all.jsonl"
for r in $(seq 1 "$REPS"); do
  for m in "${MODES[@]}"; do
    port=$((29600 + RANDOM % 300))
    if [ "${m#zero-stage2-host}" != "$m" ]; then  # no mpirun: N processes as torchrun starts them, gloo group as libzero's comm
      launch=("$PY" "$ROOT/bindings/python/tests/run_torch_group.py" "$NP" 600)
    else
      launch=(env MASTER_PORT=$port timeout 600 mpirun --allow-run-as-root --oversubscribe -np "$NP" --mca btl self,vader
              -x MASTER_PORT "$PY")
    fi
    "${launch[@]}" "$ROOT/bench/bindings/bench_torch.py" "$m" --width "$WIDTH" --layers "$LAYERS" --steps "$STEPS" \
      --warmup "$WARMUP" >"$OUT/$m.$r.log" 2>&1 || { echo "$m #$r failed:"; tail -20 "$OUT/$m.$r.log"; exit 1; }
    grep '^{' "$OUT/$m.$r.log" >>"$OUT/all.jsonl"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$OUT/all.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["mode"], []).append(r)
order = [m for m in ["ddp-adamw", "ddp-zero-redundancy", "zero-stage1", "zero-stage2", "zero-offload",
                     "zero-stage2-views", "zero-stage2-host-blocking", "zero-stage2-host"] if m in by]
ref = lambda d, m: d[m] if m in d else float("nan")
med = {m: statistics.median(r["step_ms"] for r in by[m]) for m in order}
rss = {m: statistics.median(max(r["peak_rss_mib"]) for r in by[m]) for m in order}
base = {m: statistics.median(max(r["base_rss_mib"]) for r in by[m]) for m in order}
p = rows[0]["params"]
print("params %d (%.1f MiB fp32), world %d" % (p, p * 4 / 2**20, rows[0]["world"]))
print("%-20s %12s %9s %9s %15s %9s %9s" % ("config", "step ms", "/AdamW", "/ZeRO-R", "peak RSS MiB", "/AdamW",
                                           "/ZeRO-R"))
for m in order:
    print("%-20s %12.1f %9.2f %9.2f %15.0f %9.2f %9.2f" % (
        m, med[m], med[m] / ref(med, "ddp-adamw"), med[m] / ref(med, "ddp-zero-redundancy"), rss[m],
        rss[m] / ref(rss, "ddp-adamw"), rss[m] / ref(rss, "ddp-zero-redundancy")))
print("(step ms: median over rounds of the slowest rank's median step; peak RSS: median over rounds of the "
      "largest rank's ru_maxrss; post-import baseline ~%.0f MiB)" % statistics.median(base.values()))
if "zero-stage2-host" in med and "zero-stage2" in med:
    print("zero-stage2-host (torch gloo group, ZERO_COMM_HOST) / zero-stage2 (MPI): step %.2fx, peak RSS %.2fx"
          % (med["zero-stage2-host"] / med["zero-stage2"], rss["zero-stage2-host"] / rss["zero-stage2"]))
if "zero-stage2-host" in med and "zero-stage2-host-blocking" in med:
    print("zero-stage2-host (started all-to-all) / zero-stage2-host-blocking: step %.2fx"
          % (med["zero-stage2-host"] / med["zero-stage2-host-blocking"]))
if "ddp-zero-redundancy" in med:
    print("ZeroRedundancyOptimizer step time / this (>1: this is faster): " + ", ".join(
        "%s %.2fx" % (m, med["ddp-zero-redundancy"] / med[m]) for m in order if m.startswith("zero")))
# where the step goes: rank 0's per-phase medians, median over rounds
def ph(m, *path):
    vals = []
    for r in by[m]:
        v = r["phases_ms"]
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        if v is not None:
            vals.append(v)
    return statistics.median(vals) if vals else float("nan")
print("\nwhere the step goes (ms, rank 0, median of per-step medians over rounds):")
print("%-20s %8s %9s %9s %9s %8s | zero_step: %6s %6s %6s %6s %6s %6s" % (
    "config", "forward", "backward", "(handoff", "in lz)", "step", "comm", "reduce", "norm", "optim", "gather",
    "copy"))
for m in order:
    z = m.startswith("zero")
    print("%-20s %8.1f %9.1f %9s %9s %8.1f | %s" % (
        m, ph(m, "forward"), ph(m, "backward"), "%.1f" % ph(m, "hook_handoff") if z else "-",
        "%.1f" % ph(m, "hook_in_libzero") if z else "-", ph(m, "step"),
        " ".join("%6.1f" % ph(m, "zero_step", k) for k in ("exposed_comm", "reduce", "norm", "optimizer",
                                                            "gather", "copy")) if z else "(opt.step)"))
print("(backward includes the gradient hand-off: the Python hook per parameter, of which 'in lz' inside "
      "libzero's zero_grad_buffer / zero_on_grad_ready; step = opt.step or engine.step, zero_step's phases from "
      "zero_step_timing)")
PY
