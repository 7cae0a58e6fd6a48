#!/usr/bin/env bash
# ctest pipeline_demo_matches_stage0: the pipelined demo must end with the
# parameters of the unpipelined model trained with stage0 on the same global
# batch (relative L2 of the full parameter vector <= 1e-6 after STEPS steps):
#   reference: zero-pipeline-demo with pipeline.stages 1, plugin stage0, D ranks
#   2 stages x 2 DP (1F1B, and GPipe), M = 4      vs reference D = 2
#   2 stages x 1 DP with twice the micro-batch    vs reference D = 2
#   2 stages x 3 DP (6 ranks, small micro-batch)  vs reference D = 3
# and the reference itself must agree with zero-demo (examples/demo) run with
# the same config (tools/demo-compare digest), so "unpipelined" is the real demo.
# Usage: check-pipeline.sh PIPELINE_DEMO ZERO_DEMO REPO_ROOT OUT_DIR [STEPS]
set -euo pipefail
PPDEMO="$1" DEMO="$2" ROOT="$3" OUT="$4" STEPS="${5:-20}"
mkdir -p "$OUT"
BASE="$ROOT/examples/pipeline/pp2.json"

config() { # config NAME STAGES ZERO_STAGE MICRO
  python3 - "$BASE" "$OUT/$1.cfg.json" "$2" "$3" "$4" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["pipeline"] = {"stages": int(sys.argv[3])}
c["zero_optimization"]["stage"] = int(sys.argv[4])
c["train_micro_batch_size_per_gpu"] = int(sys.argv[5])
c["gradient_accumulation_steps"] = 4
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
}
run() { # run BINARY NAME NP CONFIG [extra args]
  local bin="$1" name="$2" np="$3" cfg="$4"; shift 4
  rm -f "$OUT/$name.json" "$OUT/$name.bin"
  mpirun --allow-run-as-root --oversubscribe -np "$np" --mca btl self,vader \
    "$bin" --config "$OUT/$cfg.cfg.json" --steps "$STEPS" --quiet --summary "$OUT/$name.json" "$@" \
    >"$OUT/$name.log" 2>&1 || { echo "check-pipeline: run $name failed:"; cat "$OUT/$name.log"; exit 1; }
}
l2() { # l2 REFERENCE RUN: relative L2 of the parameter vectors, and the plugin used
  python3 - "$OUT/$1.bin" "$OUT/$2.bin" "$OUT/$2.json" "$1" "$2" <<'PY'
import array, json, math, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read()); b.frombytes(open(sys.argv[2], "rb").read())
if len(a) != len(b) or not a:
    sys.exit(f"{sys.argv[5]}: {len(b)} params vs {len(a)} in {sys.argv[4]}")
num = math.fsum((x - y) ** 2 for x, y in zip(a, b)); den = math.fsum(x * x for x in a)
rel = math.sqrt(num / den)
s = json.load(open(sys.argv[3]))
ok = rel <= 1e-6
print(f"{sys.argv[5]:>14} vs {sys.argv[4]}: plugin {s['plugin']}, stages {s['pipeline']['stages']} x DP "
      f"{s['pipeline']['data_parallel_size']}, {s['pipeline']['schedule']}, global batch {s['global_batch']}, "
      f"final loss {s['final_loss']:.6f}, relative L2 {rel:.3e} {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
}

config ref-d2 1 0 8; config pp-d2 2 1 8; config pp-d1 2 1 16
config ref-d3 1 0 2; config pp-d3 2 1 2
run "$PPDEMO" ref-d2 2 ref-d2 --plugin stage0 --dump-params "$OUT/ref-d2.bin"
run "$PPDEMO" pp2x2 4 pp-d2 --dump-params "$OUT/pp2x2.bin"
run "$PPDEMO" pp2x2-gpipe 4 pp-d2 --schedule gpipe --dump-params "$OUT/pp2x2-gpipe.bin"
run "$PPDEMO" pp2x1 2 pp-d1 --dump-params "$OUT/pp2x1.bin"
run "$PPDEMO" ref-d3 3 ref-d3 --plugin stage0 --dump-params "$OUT/ref-d3.bin"
run "$PPDEMO" pp2x3 6 pp-d3 --dump-params "$OUT/pp2x3.bin"
run "$DEMO" zero-demo-d2 2 ref-d2 --plugin stage0

fail=0
for r in pp2x2 pp2x2-gpipe pp2x1; do l2 ref-d2 "$r" || fail=1; done
l2 ref-d3 pp2x3 || fail=1
# The unpipelined reference is the main demo's model and training.
python3 "$ROOT/tools/demo-compare" --reference "$OUT/zero-demo-d2.json" \
  "$OUT/zero-demo-d2.json" "$OUT/ref-d2.json" "$OUT/pp2x2.json" || fail=1
exit $fail
