#!/usr/bin/env bash
# ctest demo_stages_agree: short zero-demo runs that must all end with the
# same parameters (tools/demo-compare, relative digest difference <= 1e-6):
#   stage0, stage1, stage2 on NP ranks with micro-batch b, and
#   stage0 on 1 rank with micro-batch NP*b (data sharding must make these equal);
# and peak memory per rank must be stage2 <= stage1 <= stage0 (ZeRO's promise).
# Usage: check-demo.sh ZERO_DEMO_BINARY REPO_ROOT OUT_DIR [NP] [STEPS]
set -euo pipefail
DEMO="$1" ROOT="$2" OUT="$3" NP="${4:-4}" STEPS="${5:-25}"
mkdir -p "$OUT"
run() { # run NAME NP CONFIG [extra args]
  local name="$1" np="$2" cfg="$3"; shift 3
  rm -f "$OUT/$name.json"
  mpirun --allow-run-as-root --oversubscribe -np "$np" --mca btl self,vader \
    "$DEMO" --config "$cfg" --steps "$STEPS" --quiet --summary "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1 \
    || { echo "check-demo: run $name failed:"; cat "$OUT/$name.log"; exit 1; }
}
for s in stage0 stage1 stage2; do run "$s" "$NP" "$ROOT/examples/configs/$s.json"; done
# One process on the concatenated batch: same config with NP times the micro-batch.
python3 - "$ROOT/examples/configs/stage0.json" "$OUT/one-rank.json" "$NP" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["train_micro_batch_size_per_gpu"] *= int(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
run one-rank-stage0 1 "$OUT/one-rank.json"
python3 "$ROOT/tools/demo-compare" --require-memory-order --reference "$OUT/stage0.json" \
  "$OUT/stage0.json" "$OUT/stage1.json" "$OUT/stage2.json" "$OUT/one-rank-stage0.json"
