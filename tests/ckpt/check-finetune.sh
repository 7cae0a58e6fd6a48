#!/usr/bin/env bash
# (1.9) zero-demo --init-from: fine-tuning from another run's weights
# (zero_load_ex, weights_only).  A stage-2 AdamW run on 3 ranks trains 30
# steps and saves; a stage-3 SGD run on 2 ranks (another plugin, world size
# and optimizer) starts from those weights: its first loss must be at least
# 1 nat below the first loss of the same run from its own initial values
# (measured: 3.06 against 5.54), and it says it started over.  --resume with
# --init-from is refused by name.
# usage: check-finetune.sh BUILD_DIR SOURCE_DIR
set -u
build=$1 src=$2
demo=$build/examples/demo/zero-demo
data=(${DEMO_DATA:+--data "$DEMO_DATA"})  # ctest: one file of the corpus (tests/CMakeLists.txt)
mpirun=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader)
work=$(mktemp -d /tmp/zero-finetune-XXXXXX)
trap 'rm -rf "$work"' EXIT
cat >"$work/sgd3.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 3},
 "optimizer": {"type": "SGD", "params": {"lr": 0.01, "momentum": 0.9}}}
JSON
run() { # name np args...
  local name=$1 np=$2
  shift 2
  "${mpirun[@]}" -np "$np" "$demo" "${data[@]}" --quiet --no-validation --summary "$work/$name.json" "$@" \
    >"$work/$name.log" 2>&1 || { echo "check-finetune: run $name failed:"; tail -20 "$work/$name.log"; exit 1; }
}
run pre 3 --config "$src/examples/configs/stage2.json" --steps 30 --save-dir "$work/pre"
run fine 2 --config "$work/sgd3.json" --steps 3 --init-from "$work/pre"
run fresh 2 --config "$work/sgd3.json" --steps 3
grep -q "weights from $work/pre, optimizer and schedule from step 0" "$work/fine.log" ||
  { echo "check-finetune: the fine-tuning run did not say where its weights came from"; exit 1; }
python3 - "$work" <<'PY' || exit 1
import json, sys
w = sys.argv[1]
loss = lambda n: json.load(open(f"{w}/{n}.json"))["losses"]
pre, fine, fresh = loss("pre"), loss("fine"), loss("fresh")
print(f"pretrain (stage2 x3, AdamW) last loss {pre[-1]:.3f}; fine-tune (stage3 x2, SGD) first loss {fine[0]:.3f}; "
      f"the same run from its own initial values {fresh[0]:.3f}")
if not fine[0] < fresh[0] - 1.0:
    print("check-finetune: the fine-tuning run did not start from the pretrained weights")
    sys.exit(1)
PY
if "${mpirun[@]}" -np 1 "$demo" --steps 1 --resume "$work/pre" --init-from "$work/pre" >"$work/both.log" 2>&1 ||
   ! grep -q "exclude each other" "$work/both.log"; then
  echo "check-finetune: --resume with --init-from was not refused by name:"; cat "$work/both.log"; exit 1
fi
echo "check-finetune: ok"
