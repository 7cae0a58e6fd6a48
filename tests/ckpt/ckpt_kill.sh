#!/usr/bin/env bash
# kill -9 one rank at each point inside a save (ZERO_CKPT_FAULT=pause:POINT@R
# makes rank R stop there and write its pid; we kill it): the previous
# checkpoint still verifies (zero-ckpt verify), `latest` still names it
# (before_latest: the new directory is complete but unnamed), and a fresh
# run at another rank count and plugin resumes from it.
# usage: ckpt_kill.sh BUILD_DIR   (3 ranks save, 2 ranks resume)
set -u
build=$1
demo=$build/examples/demo/zero-demo
data=(${DEMO_DATA:+--data "$DEMO_DATA"})  # ctest: one file of the corpus (tests/CMakeLists.txt)
tool=$build/tools/zero-ckpt
mpirun=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader)
work=$(mktemp -d /tmp/zero-ckpt-kill-XXXXXX)
trap 'rm -rf "$work"' EXIT
cfg=$work/ds.json
echo '{"train_batch_size": 12, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}' > "$cfg"
root=$work/ckpt
fail=0
"${mpirun[@]}" -np 3 "$demo" "${data[@]}" --config "$cfg" --plugin stage2 --steps 4 --save-dir "$root" --quiet >/dev/null 2>&1 \
  || { echo "FAIL: the first save"; exit 1; }
for spec in before_shards@1 between_shards@2 before_manifest@1 before_manifest@0 before_latest@0; do
  marker=$work/marker
  rm -f "$marker"
  ZERO_CKPT_FAULT=pause:$spec ZERO_CKPT_FAULT_MARKER=$marker \
    "${mpirun[@]}" -x ZERO_CKPT_FAULT -x ZERO_CKPT_FAULT_MARKER -np 3 "$demo" "${data[@]}" --config "$cfg" --plugin stage2 \
    --steps 6 --resume "$root" --save-dir "$root" --quiet >"$work/log" 2>&1 &
  job=$!
  for _ in $(seq 600); do [ -s "$marker" ] && break; sleep 0.1; done
  if [ ! -s "$marker" ]; then echo "FAIL $spec: the save never reached the point"; fail=1; kill -9 $job; wait $job; continue; fi
  kill -9 "$(cat "$marker")"
  wait $job 2>/dev/null
  latest=$(cat "$root/latest")
  if [ "$latest" != step-4 ]; then echo "FAIL $spec: latest is '$latest'"; fail=1; fi
  if ! "$tool" verify "$root" >"$work/verify" 2>&1; then echo "FAIL $spec: verify"; cat "$work/verify"; fail=1; fi
  if "${mpirun[@]}" -np 2 "$demo" "${data[@]}" --config "$cfg" --plugin stage3 --steps 5 --resume "$root" --quiet \
       >"$work/resume" 2>&1; then
    echo "ok   kill -9 at $spec: latest $latest verifies and resumes (2 ranks, stage3); left: $(ls "$root" | tr '\n' ' ')"
  else
    echo "FAIL $spec: resume"; tail -5 "$work/resume"; fail=1
  fi
done
exit $fail
