#!/usr/bin/env bash
# ctest peers_bitwise_np<N>: the bench/peers C host trained with stage 0, 1,
# 2 and 3 on N ranks ends at bitwise the same parameters (the host's
# params_fnv1a, a hash over every parameter byte), with reduce_bucket_size
# equal to one weight (W x W: in stage 2/3 each bias is a small bucket that
# takes the weight below it, core/bucket_plan.h, issue 18) and with one
# large bucket.
# Usage: check-bitwise.sh HOST MPIEXEC N
set -euo pipefail
HOST=$1 MPIEXEC=$2 NP=$3
W=64 LAYERS=8 MB=4
DIR=$(mktemp -d /tmp/zero-peers-bitwise-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
export OPENBLAS_NUM_THREADS=1
"$HOST" --write-data "$DIR/data.bin" --width $W --layers $LAYERS --mb $MB
want="" fail=0
for bucket in $((W * W)) 1000000; do
  for stage in 0 1 2 3; do
    out=$("$MPIEXEC" --allow-run-as-root --oversubscribe --mca btl self,vader -x OPENBLAS_NUM_THREADS -x ZERO_PLUGIN_PATH \
          -np "$NP" "$HOST" --data "$DIR/data.bin" --stage $stage --mb $MB --steps 6 --warmup 1 --bucket $bucket)
    h=$(grep -o '"params_fnv1a": "[0-9a-f]*"' <<<"$out" | cut -d'"' -f4)
    echo "stage $stage bucket $bucket N=$NP: params_fnv1a $h"
    [[ -n "$h" ]] || { echo "FAIL: no hash in the output"; fail=1; continue; }
    [[ -z "$want" ]] && want=$h
    [[ "$h" == "$want" ]] || { echo "FAIL: differs from stage 0 bucket $((W * W)) ($want)"; fail=1; }
  done
done
exit $fail
