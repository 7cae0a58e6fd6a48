# The sanitizer options of libzero's runs, in one place: sourced by
# tools/sanitize-check.sh (the suite) and tests/sanitizers/selftest.sh (the
# self-tests, which must judge the same settings).  Expects $supp: this
# directory.  Why each option: tools/sanitize-check.sh's header.
# shellcheck shell=bash
zero_asan_options=detect_leaks=1:halt_on_error=1:fast_unwind_on_malloc=1:verify_asan_link_order=0
zero_lsan_options=suppressions=$supp/lsan.supp:print_suppressions=0
zero_tsan_options=suppressions=$supp/tsan.supp:halt_on_error=0:second_deadlock_stack=1:history_size=7
