#!/usr/bin/env bash
# Runs a sanitizer self-test program (lsan_selftest, tsan_selftest) on 2
# ranks with tools/sanitize-check.sh's options: inherited when the script
# runs the suite, else the same values here (so a plain `ctest` in a
# sanitizer build gives the same verdict).  The program's deliberate report
# makes each rank exit nonzero: the verdict is the report (ctest's
# PASS/FAIL_REGULAR_EXPRESSION), so the status is printed, not passed on.
# Usage: selftest.sh asan|tsan MPIEXEC PROGRAM SUPPRESSIONS_DIR [KEEP_MODULES_SHIM]
set -u
mode=$1 mpiexec=$2 prog=$3 supp=$4 shim=${5:-}
if [ "$mode" = asan ]; then
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:fast_unwind_on_malloc=1:verify_asan_link_order=0}
    export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp/lsan.supp:print_suppressions=0}
    case " ${LD_PRELOAD:-} " in *keep-modules*) ;; *) export LD_PRELOAD=$shim${LD_PRELOAD:+ $LD_PRELOAD} ;; esac
else
    export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$supp/tsan.supp:halt_on_error=0:second_deadlock_stack=1:history_size=7}
fi
"$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$prog" 2>&1
echo "selftest: mpirun exited $?"
exit 0
