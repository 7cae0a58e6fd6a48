#!/usr/bin/env bash
# Stage 3 against stage 2 on the C host of bench/peers (issue 33): the
# model the issue names (LAYERS x Linear(WIDTH), default 8 x 1024^2 + bias
# = 8.4 M fp32 parameters), per-layer zero_gather/zero_release in forward
# and backward, one BLAS thread per rank, DeepSpeed's default stage 3 keys.
# For each N in NPS, REPS interleaved rounds of (stage 2, stage 3); per run
# the slowest rank's median step; prints the medians, the ratio of medians
# and the median of the per-round ratios, and checks that both stages end
# with the same parameter digest (bitwise: they reduce-scatter and step the
# same shards).
#
#   tools/install-deps.sh && make build          # bench_peers_host needs OpenBLAS
#   bench/stage3/run-host.sh                     # NPS="2 4" REPS=5 STEPS=30 WARMUP=5
#
# Environment: ZERO_BUILD_DIR (<repo>/build), NPS, REPS, STEPS, WARMUP,
# WIDTH (1024), LAYERS (8), MB (16), BENCH_OUT (a temp dir: logs, all.jsonl).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${ZERO_BUILD_DIR:-$ROOT/build}"
[[ "$BUILD" = /* ]] || BUILD="$ROOT/$BUILD"
NPS="${NPS:-2 4}" REPS="${REPS:-5}" STEPS="${STEPS:-30}" WARMUP="${WARMUP:-5}"
WIDTH="${WIDTH:-1024}" LAYERS="${LAYERS:-8}" MB="${MB:-16}"
HOST="$BUILD/bench/peers/bench_peers_host"
[[ -x "$HOST" ]] || { echo "run-host: $HOST not built (needs OpenBLAS: tools/install-deps.sh, make build)" >&2; exit 1; }
OUT="${BENCH_OUT:-$(mktemp -d /tmp/zero-bench-stage3-host-XXXXXX)}"
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ZERO_PLUGIN_PATH="$BUILD/plugins" ZERO_LOG_LEVEL=info
"$HOST" --write-data "$OUT/data.bin" --width "$WIDTH" --layers "$LAYERS" --mb "$MB"
MPI=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS
     -x ZERO_PLUGIN_PATH -x ZERO_LOG_LEVEL)
echo "bench/stage3 (C host): ${LAYERS} x Linear(${WIDTH}) fp32, micro-batch $MB/rank, AdamW, $STEPS steps" \
     "(first $WARMUP dropped), $REPS rounds, N in {$NPS}, $(nproc --all) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$OUT/all.jsonl"
for r in $(seq 1 "$REPS"); do
  for np in $NPS; do
    for st in 2 3; do
      log="$OUT/s$st.np$np.$r.log"
      if timeout 600 "${MPI[@]}" -np "$np" "$HOST" --data "$OUT/data.bin" --stage "$st" --mb "$MB" --steps "$STEPS" \
           --warmup "$WARMUP" --label "stage$st" >"$log" 2>&1; then
        # the stage 3 gather engine's own summary (rank 0's INFO line at destroy)
        gl=$(grep -m1 -o '[0-9]* param gathers.*micro-steps' "$log" || true)
        grep '^{' "$log" | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); d["round"]=int(sys.argv[1]); d["gathers"]=sys.argv[2]; print(json.dumps(d))' "$r" "$gl" >>"$OUT/all.jsonl"
      else
        echo "  stage $st N=$np round $r failed (last lines of $log):"; tail -4 "$log" | sed 's/^/    /'
      fi
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT/all.jsonl" <<'PY'
import json, statistics as S, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault((r["world"], r["mode"]), []).append(r)
bad = 0
for n in sorted({r["world"] for r in rows}):
    s2, s3 = by.get((n, "stage2"), []), by.get((n, "stage3"), [])
    if not s2 or not s3:
        print(f"N={n}: missing runs"); bad = 1; continue
    m2, m3 = S.median(r["step_ms"] for r in s2), S.median(r["step_ms"] for r in s3)
    per = [b["step_ms"] / a["step_ms"] for a in s2 for b in s3 if a["round"] == b["round"]]
    digests = {r["params_fnv1a"] for r in s2 + s3}
    print(f"N={n}: stage2 {m2:.1f} ms, stage3 {m3:.1f} ms per step (medians of {len(s2)}/{len(s3)} runs): "
          f"stage3/stage2 = {m3 / m2:.2f}x (median of per-round ratios {S.median(per):.2f}x; rounds "
          + ", ".join(f"{x:.2f}" for x in per) + ")")
    for lab, rs in (("stage2", s2), ("stage3", s3)):
        bd = {k: S.median(r["breakdown_ms"][k] for r in rs) for k in rs[0]["breakdown_ms"]}
        print(f"  {lab}: CPU ms/step/rank {S.median(S.mean(r['cpu_ms_per_step']) for r in rs):.1f}, bytes/step/rank "
              f"{S.median(S.mean(r['comm_bytes_per_step']) for r in rs) / 2**20:.1f} MiB, zero_step phases (ms): "
              + ", ".join(f"{k} {v:.1f}" for k, v in bd.items()))
    if s3[0].get("gathers"):
        print(f"  stage3 gather engine (rank 0, last run): {s3[-1]['gathers']}")
    if len(digests) != 1:
        print(f"  DIGESTS DIFFER: {sorted(digests)}"); bad = 1
    else:
        print(f"  same parameters bit for bit in every run (fnv1a {digests.pop()})")
sys.exit(bad)
PY
