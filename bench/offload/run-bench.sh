#!/usr/bin/env bash
# bench/offload: demo step time, offload vs stage2, on N ranks (see README.md).
# Alternates stage2 and offload runs of examples/demo (same config apart from
# zero_optimization.offload_optimizer) REPS times, so that machine load hits
# both alike.  Per run: the median step time over the steps after WARMUP;
# reported: the median over runs per plugin, the median of the per-pair
# ratios offload/stage2, and offload's own split of its boundary step (grads
# to host, CPU optimizer, params back + all-gather; INFO log of rank 0).
#
# Environment (all optional): ZERO_BUILD_DIR (default <repo>/build), NP (4),
# STEPS (60), WARMUP (10), REPS (7), BENCH_OUT (a temp dir).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${ZERO_BUILD_DIR:-$ROOT/build}"
NP="${NP:-4}" STEPS="${STEPS:-60}" WARMUP="${WARMUP:-10}" REPS="${REPS:-7}"
OUT="${BENCH_OUT:-$(mktemp -d /tmp/zero-bench-offload-XXXXXX)}"
DEMO="$BUILD/examples/demo/zero-demo"
[ -x "$DEMO" ] || { echo "run-bench: $DEMO not built (cmake --build $BUILD --target zero-demo zero-plugin-stage2 zero-plugin-offload)" >&2; exit 1; }
export ZERO_PLUGIN_PATH="$BUILD/plugins${ZERO_PLUGIN_PATH:+:$ZERO_PLUGIN_PATH}"
mkdir -p "$OUT"
echo "bench/offload: N=$NP, $STEPS steps (first $WARMUP dropped), $REPS alternating pairs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$REPS"); do
  for p in stage2 offload; do
    ZERO_LOG_LEVEL=info mpirun --allow-run-as-root --oversubscribe -np "$NP" --mca btl self,vader \
      "$DEMO" --config "$ROOT/examples/configs/$p.json" --steps "$STEPS" --quiet \
      --summary "$OUT/$p.$r.json" >"$OUT/$p.$r.log" 2>&1 \
      || { echo "run $p #$r failed:"; tail -20 "$OUT/$p.$r.log"; exit 1; }
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" "$REPS" "$WARMUP" <<'PY'
import json, re, statistics, sys
out, reps, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def run_median(path):
    s = json.load(open(path))
    return statistics.median(s["step_time_ms"][warm:])
t = {p: [run_median(f"{out}/{p}.{r}.json") for r in range(1, reps + 1)] for p in ("stage2", "offload")}
ratios = [o / s for o, s in zip(t["offload"], t["stage2"])]
for p in ("stage2", "offload"):
    print(f"{p:8s} step ms per run: " + " ".join(f"{x:.2f}" for x in t[p]) + f"   median {statistics.median(t[p]):.2f}")
print(f"offload/stage2 step time: median of per-pair ratios {statistics.median(ratios):.3f} "
      f"(min {min(ratios):.3f}, max {max(ratios):.3f}); ratio of medians "
      f"{statistics.median(t['offload']) / statistics.median(t['stage2']):.3f}")
# offload's own log (INFO at destroy, one line per rank)
pat = re.compile(r"rank (\d+)\].*offload: \d+ steps, \d+ with the gradient copied to host bucket by bucket "
                 r"\(([0-9.]+)% of it before zero_step.*bucket copies ([0-9.]+) ms, device clear and remaining "
                 r"copies at the step ([0-9.]+) ms, CPU optimizer ([0-9.]+) ms, params to device \+ all-gather "
                 r"([0-9.]+) ms")
per_rank = {}
for r in range(1, reps + 1):
    for m in pat.finditer(open(f"{out}/offload.{r}.log").read()):
        per_rank.setdefault(int(m.group(1)), []).append([float(x) for x in m.groups()[1:]])
if per_rank:
    print("offload per rank (median over runs): % of the gradient copied to host during backward | per step: "
          "bucket copies, clear + rest at the step, CPU optimizer, params to device + all-gather (ms)")
    for rank in sorted(per_rank):
        med = [statistics.median(c) for c in zip(*per_rank[rank])]
        print(f"  rank {rank}: {med[0]:5.1f}% | {med[1]:.3f} {med[2]:.3f} {med[3]:.3f} {med[4]:.3f}")
PY
