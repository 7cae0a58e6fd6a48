#!/usr/bin/env bash
# Stage-3 step time on the demo model: stage3 with prefetch vs stage3
# without prefetch vs stage2, N ranks (default 4), REPS interleaved runs of
# each (so machine noise hits all configs alike); reports the median of the
# demo's "mean step" (ms, first step excluded) per config and the ratios.
#
#   bench/stage3/run_bench.sh            # uses <repo>/build
#   ZERO_BUILD_DIR=build-x NP=4 REPS=7 STEPS=60 bench/stage3/run_bench.sh
#
# Needs zero-demo and the stage2/stage3 plugins built in $ZERO_BUILD_DIR.
# Also checks that every config trains to the same final digest (stage 2 and
# 3 reduce with the same reduce-scatter, so the digests match bitwise).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="${ZERO_BUILD_DIR:-$ROOT/build}"
[[ "$BUILD" = /* ]] || BUILD="$ROOT/$BUILD"
NP="${NP:-4}"
REPS="${REPS:-5}"
STEPS="${STEPS:-60}"
DEMO="$BUILD/examples/demo/zero-demo"
[ -x "$DEMO" ] || { echo "run_bench: $DEMO not built (cmake --build $BUILD --target zero-demo zero-plugin-stage2 zero-plugin-stage3)" >&2; exit 1; }
export ZERO_PLUGIN_PATH="$BUILD/plugins"
CONFIGS=(stage2 stage3_prefetch stage3_noprefetch)
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

for ((r = 1; r <= REPS; r++)); do
  for c in "${CONFIGS[@]}"; do
    plugin="${c%%_*}"
    out="$(mpirun --allow-run-as-root --oversubscribe -np "$NP" --mca btl self,vader \
             "$DEMO" --config "$HERE/$c.json" --plugin "$plugin" --steps "$STEPS" --quiet 2>&1)" || {
      echo "$out" >&2; echo "run_bench: $c failed" >&2; exit 1; }
    ms="$(grep -o 'mean step [0-9.]* ms' <<<"$out" | awk '{print $3}')"
    digest="$(grep -o 'digest sum=[-0-9.e]*' <<<"$out")"
    echo "$ms" >>"$TMP/$c.ms"
    echo "$digest" >>"$TMP/digests"
    printf 'rep %d %-18s %8s ms  %s\n' "$r" "$c" "$ms" "$digest"
  done
done

median() { sort -g "$1" | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
m2="$(median "$TMP/stage2.ms")"
echo
echo "demo model, N=$NP, $STEPS steps, median of $REPS runs (mean step time, ms):"
for c in "${CONFIGS[@]}"; do
  m="$(median "$TMP/$c.ms")"
  awk -v c="$c" -v m="$m" -v b="$m2" 'BEGIN {printf "  %-18s %7.2f ms   %.2fx stage2\n", c, m, m / b}'
done
# Median of the per-rep ratios: each rep runs the configs back to back, so
# a ratio within a rep shares the machine's load of the moment (more robust
# than the ratio of medians when the load drifts).
for c in "${CONFIGS[@]:1}"; do
  paste "$TMP/$c.ms" "$TMP/stage2.ms" | awk '{print $1 / $2}' >"$TMP/$c.ratio"
  awk -v c="$c" -v m="$(median "$TMP/$c.ratio")" 'BEGIN {printf "  %-18s median of per-rep ratios %.2fx stage2\n", c, m}'
done
if [ "$(sort -u "$TMP/digests" | wc -l)" -ne 1 ]; then
  echo "WARNING: final digests differ between configs:" >&2
  sort | uniq -c <"$TMP/digests" >&2
fi
