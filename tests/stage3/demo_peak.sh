#!/usr/bin/env bash
# The demo trainer (examples/demo) with stage 3 at N ranks: same final
# digest as stage2, peak memory per rank (device tier, all tags) <= stage2's,
# and gather buffers <= stage3_max_live_parameters.  Configs are the ones
# bench/stage3 measures.
# Usage: demo_peak.sh <zero-demo> <mpiexec> <np> <bench/stage3 dir>
set -euo pipefail
demo=$1 mpiexec=$2 np=$3 cfgdir=$4
run() { # plugin config -> stdout of rank 0
  "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" --mca btl self,vader \
    "$demo" --config "$cfgdir/$2.json" --plugin "$1" --steps 4 --quiet
}
out2=$(run stage2 stage2) || { echo "$out2"; echo "stage2 demo run failed"; exit 1; }
out3=$(run stage3 stage3_prefetch) || { echo "$out3"; echo "stage3 demo run failed"; exit 1; }
# memory table row of rank 0: "0  params  grads  master  optim  buckets  gather  other  total" (KiB current/peak)
row() { awk '$1 == "0" && NF == 9 {print}' <<<"$1" | tail -1; }
peak() { cut -d/ -f2 <<<"$1"; }
r2=$(row "$out2") r3=$(row "$out3")
[[ -n "$r2" && -n "$r3" ]] || { echo "no memory table in the demo output"; echo "$out2"; echo "$out3"; exit 1; }
p2=$(peak "$(awk '{print $9}' <<<"$r2")") p3=$(peak "$(awk '{print $9}' <<<"$r3")")
g3=$(peak "$(awk '{print $7}' <<<"$r3")")
d2=$(grep -o 'digest sum=[^ ]*' <<<"$out2") d3=$(grep -o 'digest sum=[^ ]*' <<<"$out3")
max_live=$(grep -o '"stage3_max_live_parameters": *[0-9]*' "$cfgdir/stage3_prefetch.json" | grep -o '[0-9]*$')
echo "N=$np: peak stage2 $p2 KiB, stage3 $p3 KiB (gather $g3 KiB, max_live $max_live params); $d2 vs $d3"
fail=0
awk -v a="$p3" -v b="$p2" 'BEGIN {exit !(a <= b)}' || { echo "FAIL: stage3 peak $p3 KiB > stage2 peak $p2 KiB"; fail=1; }
awk -v g="$g3" -v m="$max_live" 'BEGIN {exit !(g * 1024 <= m * 4)}' || { echo "FAIL: gather peak $g3 KiB > max_live"; fail=1; }
[[ "$d2" == "$d3" ]] || { echo "FAIL: digests differ"; fail=1; }
exit $fail
