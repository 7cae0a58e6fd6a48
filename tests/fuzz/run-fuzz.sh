#!/usr/bin/env bash
# Run one libFuzzer target over its seed corpus for a fixed time.
#
#   run-fuzz.sh FUZZER config|ckpt WORKDIR SECONDS [fresh|keep]
#
# Seeds: tests/fuzz/corpus/<kind> (written here, with regress-* inputs of
# fixed bugs), plus for the config fuzzer tests/config/ds-files and
# ../shared/ds-configs when that folder exists.  New inputs go to
# WORKDIR/corpus (emptied first with `fresh`: make test's short run;
# kept with `keep`: make fuzz grows it run after run); crashes to
# WORKDIR/artifacts/; the summary (executions, coverage, corpus size, time)
# to WORKDIR/stats.txt and stdout.  Exit: 0 clean, 77 skipped ($FUZZ_SKIP
# set or no fuzzer binary: why is printed), else the fuzzer's failure.
set -uo pipefail
fuzzer=$1 kind=$2 work=$3 secs=$4 mode=${5:-fresh}
src=$(cd "$(dirname "$0")/../.." && pwd)

if [ -n "${FUZZ_SKIP:-}" ]; then
    echo "run-fuzz: SKIPPED: $FUZZ_SKIP"
    exit 77
fi
[ -x "$fuzzer" ] || { echo "run-fuzz: SKIPPED: $fuzzer not built"; exit 77; }

[ "$mode" = fresh ] && rm -rf "$work/corpus"
mkdir -p "$work/corpus" "$work/artifacts"
seeds=("$src/tests/fuzz/corpus/$kind")
if [ "$kind" = config ]; then
    seeds+=("$src/tests/config/ds-files")
    if [ -d "$src/../shared/ds-configs" ]; then
        seeds+=("$(cd "$src/../shared/ds-configs" && pwd)")
    else
        echo "run-fuzz: ../shared/ds-configs absent: seeding without the shared DeepSpeed configs"
    fi
fi

log=$work/fuzz.log
start=$(date +%s.%N)
# -rss_limit_mb / -malloc_limit_mb: an input that makes the reader ask for
# more than 2 GiB is a finding (a size taken from the file unchecked).
"$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 -dict="$src/tests/fuzz/$kind.dict" -artifact_prefix="$work/artifacts/" \
    "$work/corpus" "${seeds[@]}" >"$log" 2>&1
rc=$?
end=$(date +%s.%N)
runs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" | tail -1)
cov=$(grep -oE "cov: [0-9]+ ft: [0-9]+ corp: [0-9]+" "$log" | tail -1)
{
    echo "fuzz_$kind: ${runs:-?} executions in $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s; ${cov:-no coverage line}; exit $rc"
    echo "seeds: ${seeds[*]}"
} | tee "$work/stats.txt"
if [ $rc != 0 ]; then
    grep -E "contract broken|ERROR:|SUMMARY:|runtime error|Test unit written" "$log" | head -20
    echo "run-fuzz: FAILED (log: $log, inputs: $work/artifacts/)"
fi
exit $rc
