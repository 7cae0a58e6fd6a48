#!/usr/bin/env bash
# bench/peers: the same model on the same data, trained by libzero (C host,
# and zero.torch) and by PyTorch (DDP + AdamW, DDP + ZeroRedundancyOptimizer,
# FSDP) and DeepSpeed; interleaved rounds, medians, ratios from ONE run of
# this script.  See README.md.
# Environment (optional): ZERO_BUILD_DIR (<repo>/build), NPS ("2 4"), STEPS (20),
# WARMUP (5), REPS (3), MB (16), WIDTH (1024), LAYERS (8), THREADS (1),
# BUCKET (1048576), MODES (all below), VENV ($ZERO_BUILD_DIR/peers-venv), BENCH_OUT.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${ZERO_BUILD_DIR:-$ROOT/build}"
NPS="${NPS:-2 4}" STEPS="${STEPS:-20}" WARMUP="${WARMUP:-5}" REPS="${REPS:-3}" MB="${MB:-16}"
WIDTH="${WIDTH:-1024}" LAYERS="${LAYERS:-8}" THREADS="${THREADS:-1}" BUCKET="${BUCKET:-1048576}"
VENV="${VENV:-$BUILD/peers-venv}"
OUT="${BENCH_OUT:-$(mktemp -d /tmp/zero-bench-peers-XXXXXX)}"
mkdir -p "$OUT"
HOST="$BUILD/bench/peers/bench_peers_host"
[[ -x "$HOST" ]] || { echo "run-peers: $HOST not built (needs OpenBLAS: tools/install-deps.sh, make build)"; exit 1; }
"$ROOT/bench/peers/setup-venv.sh" "$VENV"
PY="$VENV/bin/python"
ALL_MODES="zero-c-stage0 zero-c-stage1 zero-c-stage2 zero-torch-stage1 zero-torch-stage2 ddp-adamw
           ddp-zero-redundancy fsdp-shard-grad-op deepspeed-stage1 deepspeed-stage2"
read -r -a MODE_LIST <<<"$(echo ${MODES:-$ALL_MODES})"
# Same threads for everyone: torch.set_num_threads(THREADS) and every BLAS/OpenMP pool.
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"
export DS_ACCELERATOR=cpu DS_BUILD_OPS=0 ZERO_LIBRARY="$BUILD/core/libzero.so.1" ZERO_PLUGIN_PATH="$BUILD/plugins"
export PYTHONPATH="$ROOT/bindings/python"
DATA="$OUT/data.bin"
"$HOST" --write-data "$DATA" --width "$WIDTH" --layers "$LAYERS" --mb "$MB"
MPI=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -x OMP_NUM_THREADS -x MKL_NUM_THREADS
     -x OPENBLAS_NUM_THREADS -x DS_ACCELERATOR -x DS_BUILD_OPS -x ZERO_LIBRARY -x ZERO_PLUGIN_PATH -x PYTHONPATH
     -x MASTER_PORT)
echo "bench/peers: MLP ${LAYERS}x(Linear(${WIDTH},${WIDTH})+tanh) fp32, micro-batch $MB/rank, AdamW, $STEPS steps" \
     "(first $WARMUP dropped), $REPS rounds, $THREADS thread(s)/rank, N in {$NPS}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$OUT/all.jsonl"
for r in $(seq 1 "$REPS"); do
  for np in $NPS; do
    for m in "${MODE_LIST[@]}"; do
      export MASTER_PORT=$((29500 + RANDOM % 400))
      log="$OUT/$m.np$np.$r.log"
      case "$m" in
        zero-c-stage*) cmd=("$HOST" --data "$DATA" --stage "${m: -1}" --mb "$MB" --steps "$STEPS" --warmup "$WARMUP"
                            --bucket "$BUCKET" --label "$m") ;;
        *) cmd=("$PY" "$ROOT/bench/peers/peers_torch.py" "$m" --data "$DATA" --mb "$MB" --steps "$STEPS"
                --warmup "$WARMUP" --threads "$THREADS" --bucket "$BUCKET") ;;
      esac
      if timeout 900 "${MPI[@]}" -np "$np" "${cmd[@]}" >"$log" 2>&1; then
        grep '^{' "$log" >>"$OUT/all.jsonl" || true
      else
        echo "  $m N=$np round $r failed (last lines of $log):"; grep -v '^W1' "$log" | tail -4 | sed 's/^/    /'
      fi
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$OUT/all.jsonl" <<'PY'
import json, statistics, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault((r["world"], r["mode"]), []).append(r)
import ctypes, os, torch, deepspeed
mpi = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
zl = ctypes.CDLL(os.environ["ZERO_LIBRARY"])
zl.zero_version_string.restype = ctypes.c_char_p
blas = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libopenblas0-serial"], capture_output=True, text=True).stdout
print("versions: libzero %s, torch %s, deepspeed %s, %s, OpenBLAS %s (C host)" % (
    zl.zero_version_string().decode(), torch.__version__, deepspeed.__version__, mpi, blas or "?"))
order = ["zero-c-stage0", "zero-c-stage1", "zero-c-stage2", "zero-torch-stage1", "zero-torch-stage2", "ddp-adamw",
         "ddp-zero-redundancy", "fsdp-shard-grad-op", "fsdp-full-shard", "deepspeed-stage1", "deepspeed-stage2"]
peer_ds = {"zero-c-stage1": "deepspeed-stage1", "zero-c-stage2": "deepspeed-stage2",
           "zero-torch-stage1": "deepspeed-stage1", "zero-torch-stage2": "deepspeed-stage2"}
for world in sorted({w for w, _ in by}):
    med = {m: statistics.median(r["step_ms"] for r in by[(world, m)]) for m in order if (world, m) in by}
    rss = {m: statistics.median(max(r["peak_rss_mib"]) for r in by[(world, m)]) for m in med}
    loss = {m: statistics.median(r["final_loss"] for r in by[(world, m)]) for m in med}
    zr = med.get("ddp-zero-redundancy")
    print("\nN = %d (%d rounds)" % (world, min(len(by[(world, m)]) for m in med)))
    print("%-20s %10s %14s %14s %12s %12s" % ("config", "step ms", "ZeRO-R/this", "DS same/this", "peak RSS MiB",
                                               "final loss"))
    for m in med:
        ds = med.get(peer_ds.get(m, ""))
        print("%-20s %10.1f %14s %14s %12.0f %12.6f" % (
            m, med[m], "%.2fx" % (zr / med[m]) if zr else "-", "%.2fx" % (ds / med[m]) if ds else "-", rss[m],
            loss[m]))
print("\n(step ms: median over rounds of the slowest rank's median step; ZeRO-R/this > 1: faster than DDP + "
      "ZeroRedundancyOptimizer; DS same/this > 1: faster than DeepSpeed at the same ZeRO stage)")
PY
