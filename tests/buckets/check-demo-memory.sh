#!/usr/bin/env bash
# ctest buckets_demo_memory_order: on the demo model (187,136 fp32 params, the
# largest two 65,536 elements) peak memory per rank must be
# stage2 <= stage1 <= stage0 at every N given (issue 3), with the same final
# parameters.  Guards the bucket engine's staging budget (core/buckets.h):
# at N = 2 two 65,536-element staging slots (512 KiB) would cost more than
# partitioning the gradients saves (374 KiB).  A few steps suffice: the slot
# pool reaches its size in the first micro-step.
# Usage: check-demo-memory.sh ZERO_DEMO_BINARY REPO_ROOT OUT_DIR STEPS N...
set -euo pipefail
DEMO="$1" ROOT="$2" OUT="$3" STEPS="$4"
shift 4
mkdir -p "$OUT"
for np in "$@"; do
  for s in stage0 stage1 stage2; do
    rm -f "$OUT/$s-np$np.json"
    mpirun --allow-run-as-root --oversubscribe -np "$np" --mca btl self,vader \
      "$DEMO" ${DEMO_DATA:+--data "$DEMO_DATA"} --config "$ROOT/examples/configs/$s.json" --steps "$STEPS" --quiet \
      --summary "$OUT/$s-np$np.json" >"$OUT/$s-np$np.log" 2>&1 \
      || { echo "check-demo-memory: $s on $np ranks failed:"; cat "$OUT/$s-np$np.log"; exit 1; }
  done
  echo "== N = $np"
  python3 "$ROOT/tools/demo-compare" --require-memory-order \
    "$OUT/stage0-np$np.json" "$OUT/stage1-np$np.json" "$OUT/stage2-np$np.json"
done
