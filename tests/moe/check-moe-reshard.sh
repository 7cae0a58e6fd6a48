#!/usr/bin/env bash
# (libzero 1.10) Checkpoints of a model with expert groups move between
# world sizes, expert-data-parallel sizes, expert assignments and plugins:
# the manifest records which ranks held which experts (by color) and their
# names, and a resharding load finds each rank's experts by name.
#   A  N=4 stage2, 8 steps: the reference (per-rank digests of every param)
#   B  N=4 stage2, 4 steps, saved
#   C  N=2 stage1 loads B (expert-DP groups of 2 -> 1): its ranks hold
#      expert 0 and 1, bitwise B's; saved again at once
#   D  N=4 stage2 loads C and trains to step 8: bitwise A (params and
#      optimizer states went 4 -> 2 -> 4 ranks intact)
#   E  N=6 offload loads B (groups of 3): bitwise B's experts by color
#   F  N=4 stage2 with the experts assigned the other way round
#      (--expert-shift 1) loads B: each rank gets its own experts by name
#      (before 1.10 this native-layout load took the saver's rank's blobs:
#      the other expert's values under this rank's names)
#   G  N=2 weights-only load of B: the same parameters
#   H  bf16 with 16-bit gradients: N=4 -> N=8 (groups of 2 -> 4) bitwise
#   K  (1.12) N=4 stage3 loads C and trains to step 8: bitwise A
#   L  (1.12) N=2 stage3 loads B (expert-DP groups of 1: each rank's experts
#      whole) and saves again; M  N=6 offload loads that stage-3 checkpoint:
#      bitwise B's experts by color
#   H3 (1.12) bf16: N=8 stage3 loads H4 (groups of 2 -> 4) bitwise; H0 (1.13) stage0 alike
#   P  (1.13) N=4 stage0 loads C and trains to step 8: bitwise A
#   Q  (1.13) N=2 stage0 loads B and saves again; R  N=4 stage2 loads that
#      stage-0 checkpoint and trains to step 8: bitwise A
#   I  zero-ckpt consolidate writes every expert under its own name, and
#      zero-ckpt info describes the expert group
#   J  zero-estimate --manifest of B plans the expert group (expert-parallel 2),
#      at every stage but 0 (stage 3 since 1.12)
# usage: check-moe-reshard.sh MOE_DEMO ZERO_CKPT SOURCE_DIR ZERO_ESTIMATE
set -u
demo=$1 ckpt=$2 src=$3 estimate=$4
. "$(dirname "$0")/moe_test_lib.sh"
fail=0
# run NAME NP PLUGIN CONFIG ARGS... -> $work/NAME.digest (the digest line's hashes)
run() {
  local name=$1 np=$2 plugin=$3 cfg=$4
  shift 4
  "${mpirun[@]}" -np "$np" "$demo" "${data[@]}" --config "$cfg" --plugin "$plugin" --quiet --digest "$@" \
    >"$work/$name.log" 2>&1 || { echo "check-moe-reshard: run $name failed:"; tail -8 "$work/$name.log"; exit 1; }
  grep '^digest:' "$work/$name.log" | cut -d' ' -f2- >"$work/$name.digest"
  echo "$name (N=$np $plugin $*): $(cat "$work/$name.digest")"
}
# expect NAME HASHES...: the run's per-rank digests
expect() {
  local name=$1
  shift
  if [ "$(cat "$work/$name.digest")" != "$*" ]; then
    echo "check-moe-reshard: $name: got $(cat "$work/$name.digest"), expected $*"
    fail=1
  fi
}
f32=$work/fp32.json
run A 4 stage2 "$f32" --steps 8
run B 4 stage2 "$f32" --steps 4 --save "$work/b"
read -r b0 b1 b2 b3 <"$work/B.digest"
[ "$b0" = "$b2" ] && [ "$b1" = "$b3" ] && [ "$b0" != "$b1" ] ||
  { echo "check-moe-reshard: B: ranks of one expert differ, or the experts are equal"; fail=1; }
run C 2 stage1 "$f32" --steps 4 --load "$work/b" --save "$work/c"
expect C "$b0 $b1"
run D 4 stage2 "$f32" --steps 8 --load "$work/c"
expect D "$(cat "$work/A.digest")"
run E 6 offload "$f32" --steps 4 --load "$work/b"
expect E "$b0 $b1 $b0 $b1 $b0 $b1"
run F 4 stage2 "$f32" --steps 4 --load "$work/b" --expert-shift 1
expect F "$b1 $b0 $b1 $b0"
run G 2 stage2 "$f32" --steps 0 --load "$work/b" --weights-only  # starts over at step 0: no step taken
expect G "$b0 $b1"
run K 4 stage3 "$f32" --steps 8 --load "$work/c"
expect K "$(cat "$work/A.digest")"
run L 2 stage3 "$f32" --steps 4 --load "$work/b" --save "$work/l"
expect L "$b0 $b1"
run M 6 offload "$f32" --steps 4 --load "$work/l"
expect M "$b0 $b1 $b0 $b1 $b0 $b1"
run P 4 stage0 "$f32" --steps 8 --load "$work/c"
expect P "$(cat "$work/A.digest")"
run Q 2 stage0 "$f32" --steps 4 --load "$work/b" --save "$work/q"
expect Q "$b0 $b1"
run R 4 stage2 "$f32" --steps 8 --load "$work/q"
expect R "$(cat "$work/A.digest")"
bf=$src/examples/configs/moe.json
run H4 4 stage2 "$bf" --bf16 --steps 4 --save "$work/h"
read -r h0 h1 _ _ <"$work/H4.digest"
run H8 8 stage1 "$bf" --bf16 --steps 4 --load "$work/h"
expect H8 "$h0 $h1 $h0 $h1 $h0 $h1 $h0 $h1"
run H3 8 stage3 "$bf" --bf16 --steps 4 --load "$work/h"
expect H3 "$h0 $h1 $h0 $h1 $h0 $h1 $h0 $h1"
run H0 8 stage0 "$bf" --bf16 --steps 4 --load "$work/h"
expect H0 "$h0 $h1 $h0 $h1 $h0 $h1 $h0 $h1"
"$ckpt" consolidate "$work/b" "$work/b.safetensors" >"$work/I.log" 2>&1 ||
  { echo "check-moe-reshard: consolidate failed:"; cat "$work/I.log"; exit 1; }
python3 - "$work/b.safetensors" <<'PY' || fail=1
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    names = sorted(k for k in json.loads(f.read(n)) if k != "__metadata__")
want = {"expert0.weight", "expert0.bias", "expert1.weight", "expert1.bias"}
print("I consolidate:", len(names), "tensors:", " ".join(names))
if not want <= set(names) or len(names) != 11:
    print("check-moe-reshard: consolidate lacks an expert (expected 7 dense tensors and", sorted(want), ")")
    sys.exit(1)
PY
"$ckpt" info "$work/b" | grep -q "experts      group 1: 2 parameters on each of 2 expert-data-parallel groups" ||
  { echo "check-moe-reshard: zero-ckpt info does not describe the expert group"; "$ckpt" info "$work/b"; fail=1; }
man=$(ls "$work"/b/step-*/manifest.json | head -1)
"$estimate" --manifest "$man" --dtype fp32 --ranks 1,4,8 --unit KiB >"$work/J.log" 2>&1
grep -q "(mixture of experts, expert-parallel 2), 9 tensors per rank" "$work/J.log" &&
  grep -Eq "^stage1 +n/a +[0-9.]+ +[0-9.]+" "$work/J.log" && grep -Eq "^stage3 +n/a +[0-9.]+ +[0-9.]+" "$work/J.log" ||
  { echo "check-moe-reshard: zero-estimate does not plan the manifest's expert group:"; cat "$work/J.log"; fail=1; }
echo "J $(head -1 "$work/J.log")"
exit $fail
