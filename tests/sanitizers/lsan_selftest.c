/* The sanitizer harness still sees a leak of ours (ASan builds only;
 * test asan_lsan_selftest_np2, run by selftest.sh).
 *
 * tools/sanitize-check.sh unwinds allocation stacks with frame pointers and
 * suppresses Open MPI's leaks by library name (tests/sanitizers/lsan.supp).
 * A suppression too broad (a libc pattern, say) or an unwinder that lost our
 * frames would make LeakSanitizer blind to libzero's leaks while every test
 * stays green.  This program leaks exactly one block of its own, after
 * MPI_Init and before MPI_Finalize like libzero's engines, from a function
 * whose name the test expects in the report; Open MPI's leaks in the same
 * process must all be suppressed (the report counts one allocation). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static char *leak_like_libzero(int rank) {
    char *p = malloc(100);
    if (p) snprintf(p, 100, "rank %d", rank);
    return p;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *volatile lost = leak_like_libzero(rank);
    printf("lsan_selftest: rank %d made '%s' and lost it\n", rank, lost ? lost : "(out of memory)");
    lost = NULL;
    MPI_Finalize();
    return 0;
}
