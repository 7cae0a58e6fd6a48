#!/usr/bin/env bash
# bench/peers scaling figure: libzero's C host (bench_peers_host) at
# N = 1, 2, 4, 8 for every stage: step time, libzero-accounted bytes per
# rank beside ZeRO's table, bytes communicated per step per rank.  Rounds
# interleaved, medians.  On a 2-core machine N = 4 and 8 are oversubscribed
# (2 and 4 ranks per core): their step times measure time-sharing, not
# scaling; the bytes are exact whatever the load.  See README.md.
# Environment (optional): ZERO_BUILD_DIR, NPS ("1 2 4 8"), STAGES ("0 1 2 3"), STEPS (10),
# WARMUP (3), REPS (2), MB (16), WIDTH (1024), LAYERS (4), BENCH_OUT.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${ZERO_BUILD_DIR:-$ROOT/build}"
NPS="${NPS:-1 2 4 8}" STAGES="${STAGES:-0 1 2 3}" STEPS="${STEPS:-10}" WARMUP="${WARMUP:-3}" REPS="${REPS:-2}"
MB="${MB:-16}" WIDTH="${WIDTH:-1024}" LAYERS="${LAYERS:-4}"
OUT="${BENCH_OUT:-$(mktemp -d /tmp/zero-bench-scaling-XXXXXX)}"
mkdir -p "$OUT"
HOST="$BUILD/bench/peers/bench_peers_host"
[[ -x "$HOST" ]] || { echo "run-scaling: $HOST not built (needs OpenBLAS: tools/install-deps.sh, make build)"; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ZERO_PLUGIN_PATH="$BUILD/plugins"
DATA="$OUT/data.bin"
"$HOST" --write-data "$DATA" --width "$WIDTH" --layers "$LAYERS" --mb "$MB"
echo "bench/peers scaling: MLP ${LAYERS}x(Linear(${WIDTH},${WIDTH})+tanh) fp32 AdamW, micro-batch $MB/rank," \
     "$STEPS steps (first $WARMUP dropped), $REPS rounds, $(getconf _NPROCESSORS_ONLN) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$OUT/all.jsonl"
for r in $(seq 1 "$REPS"); do
  for np in $NPS; do
    for st in $STAGES; do
      log="$OUT/s$st.np$np.$r.log"
      if timeout 600 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -x OMP_NUM_THREADS \
           -x OPENBLAS_NUM_THREADS -x ZERO_PLUGIN_PATH -np "$np" "$HOST" --data "$DATA" --stage "$st" --mb "$MB" \
           --steps "$STEPS" --warmup "$WARMUP" --label "stage$st" >"$log" 2>&1; then
        grep '^{' "$log" >>"$OUT/all.jsonl" || true
      else
        echo "  stage$st N=$np round $r failed:"; tail -3 "$log" | sed 's/^/    /'
      fi
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT/all.jsonl" "$(getconf _NPROCESSORS_ONLN)" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cores = int(sys.argv[2])
by = {}
for r in rows:
    by.setdefault((r["mode"], r["world"]), []).append(r)
psi = rows[0]["params"]
# ZeRO's table for fp32 Adam (bytes per rank): params 4, grads 4, m and v 8 per element
ideal = {"stage0": lambda n: 16 * psi, "stage1": lambda n: 8 * psi + 8 * psi / n,
         "stage2": lambda n: 4 * psi + 12 * psi / n, "stage3": lambda n: 16 * psi / n}
print("params %d (%.1f MiB fp32); MiB = 2^20 bytes; 'table' = ZeRO's model-state bytes per rank" % (psi, psi * 4 / 2**20))
print("%-7s %3s %6s %10s %8s %12s %12s %7s %14s" % ("stage", "N", "ranks/", "step ms", "/N=1", "bytes/rank",
                                                   "table", "meas/", "comm MiB/step"))
print("%-7s %3s %6s %10s %8s %12s %12s %7s %14s" % ("", "", "core", "", "", "MiB", "MiB", "table", "per rank"))
for st in sorted({m for m, _ in by}):
    base = None
    for n in sorted(w for m, w in by if m == st):
        rs = by[(st, n)]
        ms = statistics.median(r["step_ms"] for r in rs)
        zb = statistics.median(max(r["zero_bytes"]) for r in rs)
        cb = statistics.median(max(r["comm_bytes_per_step"]) for r in rs)
        base = ms if n == 1 else base
        t = ideal[st](n) if st in ideal else float("nan")
        print("%-7s %3d %6.1f %10.1f %8s %12.1f %12.1f %7.2f %14.1f" % (
            st, n, n / cores, ms, "%.2f" % (ms / base) if base else "-", zb / 2**20, t / 2**20, zb / t, cb / 2**20))
print("(N > %d is oversubscribed: more ranks than cores, so step times there include time-sharing;"
      " step ms: median over rounds of the slowest rank's median step; bytes/rank: libzero's accounted peak,"
      " largest rank; comm: bytes entering reductions and all-gathers per step)" % cores)
PY
