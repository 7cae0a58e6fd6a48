#!/usr/bin/env bash
# Runs lsan_selftest on 2 ranks with tools/sanitize-check.sh's ASan and LSan
# options: inherited when the script runs the suite, else the same values
# here (so a plain `ctest` in an ASan build gives the same verdict).
# Usage: lsan_selftest.sh MPIEXEC PROGRAM SUPPRESSIONS KEEP_MODULES_SHIM
set -u
mpiexec=$1 prog=$2 supp=$3 shim=$4
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:fast_unwind_on_malloc=1:verify_asan_link_order=0}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp:print_suppressions=0}
case " ${LD_PRELOAD:-} " in *keep-modules*) ;; *) export LD_PRELOAD=$shim${LD_PRELOAD:+ $LD_PRELOAD} ;; esac
# the leak makes each rank exit nonzero: the verdict is the report (ctest's
# PASS/FAIL_REGULAR_EXPRESSION), so the status is not passed on
"$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$prog" 2>&1
echo "lsan_selftest: mpirun exited $?"
exit 0
