/* LD_PRELOAD shim for sanitizer runs: dlclose() does nothing.
 *
 * Why: LeakSanitizer symbolizes allocation stacks at exit.  Open MPI
 * dlcloses its components (mca_*.so) in MPI_Finalize and libzero dlcloses
 * its plugins in zero_engine_destroy, so frames in those modules print as
 * "<unknown module>": a leak in a plugin could then neither be attributed
 * nor told apart from Open MPI's own.  Keeping every module mapped makes
 * each frame name its library (and lets tests/sanitizers/lsan.supp match
 * Open MPI's by module name).  Built in ASan builds by
 * tests/sanitizers/CMakeLists.txt; used by tools/sanitize-check.sh and
 * asan_lsan_selftest_np2. */
int dlclose(void *handle);
int dlclose(void *handle) {
    (void)handle;
    return 0;
}
