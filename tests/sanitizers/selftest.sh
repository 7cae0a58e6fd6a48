#!/usr/bin/env bash
# Runs a sanitizer self-test program (lsan_selftest, tsan_selftest) on 2
# ranks with tools/sanitize-check.sh's options: inherited when the script
# runs the suite, else the same values from options.sh (so a plain `ctest` in a
# sanitizer build gives the same verdict).  The program's deliberate report
# makes each rank exit nonzero: the verdict is the report (ctest's
# PASS/FAIL_REGULAR_EXPRESSION), so the status is printed, not passed on.
# Usage: selftest.sh asan|tsan MPIEXEC PROGRAM SUPPRESSIONS_DIR [KEEP_MODULES_SHIM]
set -u
mode=$1 mpiexec=$2 prog=$3 supp=$4 shim=${5:-}
# shellcheck source=options.sh
. "$supp/options.sh"
if [ "$mode" = asan ]; then
    export ASAN_OPTIONS=${ASAN_OPTIONS:-$zero_asan_options}
    export LSAN_OPTIONS=${LSAN_OPTIONS:-$zero_lsan_options}
    case " ${LD_PRELOAD:-} " in *keep-modules*) ;; *) export LD_PRELOAD=$shim${LD_PRELOAD:+ $LD_PRELOAD} ;; esac
else
    export TSAN_OPTIONS=${TSAN_OPTIONS:-$zero_tsan_options}
fi
"$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$prog" 2>&1
echo "selftest: mpirun exited $?"
exit 0
