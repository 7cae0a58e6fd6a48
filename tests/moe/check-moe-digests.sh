#!/usr/bin/env bash
# (1.10) Every plugin that runs expert groups (stage1, stage2, offload;
# stage3 since 1.12, stage0 and stage1-pp since 1.13)
# ends the MoE demo with bitwise the same parameters on every rank, bf16
# with 16-bit gradients (examples/configs/moe.json) and fp32: 4 ranks with
# 2 experts and 6 ranks with 3 experts (expert-DP groups of 2 in both).
# Each bucket set sizes its buckets from its own groups since 1.10
# (bucket_plan.h): a change of bucketing must not change a value.
# usage: check-moe-digests.sh MOE_DEMO SOURCE_DIR
set -u
demo=$1 src=$2
. "$(dirname "$0")/moe_test_lib.sh"
fail=0
for case in "4 2" "6 3"; do
  set -- $case
  np=$1 experts=$2
  for dt in bf16 fp32; do
    if [ "$dt" = bf16 ]; then cfg=(--config "$src/examples/configs/moe.json" --bf16); else cfg=(--config "$work/fp32.json"); fi
    first=""
    for plugin in stage1 stage0 stage1-pp stage2 offload stage3; do
      out=$("${mpirun[@]}" -np "$np" "$demo" "${data[@]}" "${cfg[@]}" --plugin "$plugin" --experts "$experts" \
            --steps 6 --quiet --digest 2>&1)
      d=$(printf '%s\n' "$out" | grep '^digest:')
      if [ -z "$d" ]; then
        echo "check-moe-digests: N=$np experts=$experts $dt $plugin failed:"; printf '%s\n' "$out" | tail -5; exit 1
      fi
      echo "N=$np experts=$experts $dt $plugin $d"
      if [ -z "$first" ]; then first=$d
      elif [ "$d" != "$first" ]; then echo "check-moe-digests: $plugin differs from stage1"; fail=1; fi
    done
  done
done
exit $fail
