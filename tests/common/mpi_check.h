/* Start and finish of the multi-rank ctest programs (check.h's CHECKs
 * under mpirun): MPI with MPI_THREAD_MULTIPLE (libzero's hooks may fire
 * from other threads), and an exit status that fails on every rank when a
 * CHECK failed on any.  Header-only, like check.h, so that the counters are
 * the test's own.  Call from the main thread only. */
#ifndef ZERO_TESTS_MPI_CHECK_H
#define ZERO_TESTS_MPI_CHECK_H
#include <mpi.h>

#include "check.h"

/* MPI_Init_thread(MULTIPLE); rank and size of MPI_COMM_WORLD. */
static inline void check_mpi_init(int *argc, char ***argv, int *rank, int *world) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, world);
}

/* A communicator of MPI_COMM_WORLD's first n ranks (in rank order), or
 * MPI_COMM_NULL on the others.  Collective over MPI_COMM_WORLD; the caller
 * frees it. */
static inline MPI_Comm check_mpi_first(int n) {
    int rank = 0;
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &c);
    return c;
}

/* check_finish() on every rank, the worst result over MPI_COMM_WORLD,
 * MPI_Finalize; returns main's exit status. */
static inline int check_mpi_finish(void) {
    int rc = check_finish(), any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
#endif
