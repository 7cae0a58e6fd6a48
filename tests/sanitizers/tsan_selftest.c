/* The sanitizer harness still sees a race of ours (ThreadSanitizer builds
 * only; test tsan_selftest_np2, run by selftest.sh).
 *
 * tools/sanitize-check.sh suppresses races inside Open MPI's libraries
 * (tests/sanitizers/tsan.supp).  A suppression too broad (a libc or
 * libpthread pattern, say) would make TSan blind to libzero's races while
 * every test stays green.  This program has exactly one race of its own --
 * two threads add to a counter without a lock, after MPI_Init and while
 * MPI is in use, like libzero's progress thread beside the host's hooks --
 * in a function whose name the test expects in the report; Open MPI's
 * races in the same process must all be suppressed (one warning).  The two
 * threads also all-reduce at once, each on its communicator, where Open
 * MPI's internals race: with tsan.supp's race lines removed, one run in two
 * here reported 3 warnings (so a suppression too narrow fails it too, not
 * always: those races depend on the interleaving). */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

static long counter;
static MPI_Comm side; /* the worker's communicator, as libzero's progress thread has its own */

__attribute__((noinline)) static void race_like_libzero(void) { counter++; }

/* MPI from two threads at once, each on its communicator: Open MPI's
 * internals race here (tsan.supp suppresses those) */
static void exchange(MPI_Comm comm) {
    for (int i = 0; i < 50; i++) {
        long x = i, y = 0;
        MPI_Allreduce(&x, &y, 1, MPI_LONG, MPI_SUM, comm);
    }
}

static void *worker(void *arg) {
    (void)arg;
    exchange(side);
    race_like_libzero();
    return NULL;
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_dup(MPI_COMM_WORLD, &side);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
    exchange(MPI_COMM_WORLD);
    race_like_libzero(); /* no lock, no order with the worker's */
    pthread_join(t, NULL);
    long sum = 0;
    MPI_Allreduce(&counter, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    printf("tsan_selftest: rank %d counted %ld, %ld in all\n", rank, counter, sum);
    MPI_Comm_free(&side);
    MPI_Finalize();
    return 0;
}
