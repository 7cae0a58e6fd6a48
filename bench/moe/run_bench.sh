#!/usr/bin/env bash
# Stage 3 with expert groups (libzero 1.12) against stage 2 on the MoE demo
# (examples/moe: 4 ranks, 2 experts, expert-DP groups of 2, bf16 with
# 16-bit gradients; examples/configs/moe.json).  REPS interleaved rounds of
#   stage2          the config as it is
#   stage3          DeepSpeed's default stage-3 keys (a model this small
#                   stays gathered: persistence)
#   stage3-gather   nothing persistent, a budget of 80,000 elements (the
#                   largest param is 65,536), prefetch of 40,000:
#                   every param all-gathered every micro-step (the experts
#                   over their expert-DP group)
# Prints per config the median of the demo's mean step (slowest rank,
# first step excluded) and device peak (largest rank), the ratio of
# medians against stage2 and the median of the per-round ratios, and
# fails if a config's final parameters differ from stage2's by a bit.
#
#   bench/moe/run_bench.sh                 # NP=4 EXPERTS=2 REPS=5 STEPS=40
# Needs zero-moe-demo and the stage2/stage3 plugins in $ZERO_BUILD_DIR
# (default <repo>/build).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="${ZERO_BUILD_DIR:-$ROOT/build}"
[[ "$BUILD" = /* ]] || BUILD="$ROOT/$BUILD"
NP="${NP:-4}" EXPERTS="${EXPERTS:-2}" REPS="${REPS:-5}" STEPS="${STEPS:-40}"
DEMO="$BUILD/examples/moe/zero-moe-demo"
[ -x "$DEMO" ] || { echo "run_bench: $DEMO not built (cmake --build $BUILD --target zero-moe-demo zero-plugin-stage2 zero-plugin-stage3)" >&2; exit 1; }
export ZERO_PLUGIN_PATH="$BUILD/plugins"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
python3 - "$ROOT/examples/configs/moe.json" "$TMP" <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))
json.dump(base, open(sys.argv[2] + "/stage2.json", "w"))
s3 = json.loads(json.dumps(base))
s3["zero_optimization"]["stage"] = 3
json.dump(s3, open(sys.argv[2] + "/stage3.json", "w"))
s3["zero_optimization"].update(stage3_param_persistence_threshold=0, stage3_max_live_parameters=80000,
                               stage3_prefetch_bucket_size=40000, stage3_max_reuse_distance=0)
json.dump(s3, open(sys.argv[2] + "/stage3-gather.json", "w"))
PY
CONFIGS=(stage2 stage3 stage3-gather)
for ((r = 1; r <= REPS; r++)); do
  for c in "${CONFIGS[@]}"; do
    out="$(mpirun --allow-run-as-root --oversubscribe -np "$NP" --mca btl self,vader "$DEMO" --config "$TMP/$c.json" \
             --plugin "${c%%-*}" --bf16 --experts "$EXPERTS" --steps "$STEPS" --quiet --digest 2>&1)" || {
      echo "$out" >&2; echo "run_bench: $c failed" >&2; exit 1; }
    ms="$(sed -n 's/^timing: mean step \([0-9.]*\) ms.*/\1/p' <<<"$out")"
    peak="$(sed -n 's/^timing: .*device peak \([0-9]*\) bytes.*/\1/p' <<<"$out")"
    digest="$(grep '^digest:' <<<"$out")"
    echo "$ms" >>"$TMP/$c.ms"
    echo "$peak" >>"$TMP/$c.peak"
    echo "$c $digest" >>"$TMP/digests"
    printf 'round %d %-14s %8s ms  device peak %9s B\n' "$r" "$c" "$ms" "$peak"
  done
done
python3 - "$TMP" "${CONFIGS[@]}" <<'PY'
import statistics as st, sys
tmp, configs = sys.argv[1], sys.argv[2:]
ms = {c: [float(x) for x in open("%s/%s.ms" % (tmp, c))] for c in configs}
peak = {c: [int(x) for x in open("%s/%s.peak" % (tmp, c))] for c in configs}
base = configs[0]
print("\n%-14s %12s %14s %20s %24s" % ("config", "median step", "device peak", "ratio of medians", "median per-round ratio"))
for c in configs:
    ratio = st.median(ms[c]) / st.median(ms[base])
    per = st.median(a / b for a, b in zip(ms[c], ms[base]))
    print("%-14s %9.3f ms %12d B %19.2fx %23.2fx" % (c, st.median(ms[c]), st.median(peak[c]), ratio, per))
digests = {}
for line in open(tmp + "/digests"):
    c, d = line.split(" ", 1)
    digests.setdefault(c, set()).add(d.strip())
ref = digests[base]
bad = [c for c in configs if digests[c] != ref or len(digests[c]) != 1]
if bad:
    print("run_bench: final parameters differ from %s (or between rounds): %s" % (base, ", ".join(bad)))
    sys.exit(1)
print("final parameters: bitwise equal in every config and round")
PY
