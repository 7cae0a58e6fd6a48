#!/usr/bin/env bash
# ctest demo_batch_deepspeed: DeepSpeed's batch keys without
# gradient_accumulation_steps, {"train_batch_size": 64,
# "train_micro_batch_size_per_gpu": 8} on 4 ranks, run as micro-batch 8 x
# 2 accumulation steps (what libzero derives), bitwise the same run as
# examples/configs/stage2.json, which spells the 2 out.
# Usage: check-batch.sh ZERO_DEMO_BINARY REPO_ROOT OUT_DIR [STEPS]
set -euo pipefail
DEMO="$1" ROOT="$2" OUT="$3" STEPS="${4:-6}"
mkdir -p "$OUT"
python3 - "$ROOT/examples/configs/stage2.json" "$OUT/ds-batch.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
del c["gradient_accumulation_steps"]
c["train_batch_size"] = 64
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
run() { # run NAME CONFIG
  rm -f "$OUT/$1.json"
  mpirun --allow-run-as-root --oversubscribe -np 4 --mca btl self,vader \
    "$DEMO" --config "$2" --steps "$STEPS" --quiet --summary "$OUT/$1.json" >"$OUT/$1.log" 2>&1 \
    || { echo "check-batch: run $1 failed:"; cat "$OUT/$1.log"; exit 1; }
}
run explicit "$ROOT/examples/configs/stage2.json"
run deepspeed "$OUT/ds-batch.json"
python3 - "$OUT/explicit.json" "$OUT/deepspeed.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
got = (b["micro_batch_per_rank"], b["gradient_accumulation_steps"], b["global_batch"])
assert got == (8, 2, 64), "deepspeed batch keys ran as micro %d x gas %d = %d, expected 8 x 2 = 64" % got
for k in ("losses", "grad_norms", "digest", "final_loss", "val_loss"):
    assert a[k] == b[k], "%s differs from the explicit-gas run: %r vs %r" % (k, a[k], b[k])
print("check-batch: train_batch_size 64 / micro 8 at N=4 -> 8 x 2 x 4, bitwise the explicit run")
PY
