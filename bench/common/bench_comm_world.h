/* The setup the communication benches share (bench_reduce_scatter,
 * bench_wire16): MPI with threads, `--reps N` and `--mb LIST` from the
 * command line, and libzero's MPI communicator over MPI_COMM_WORLD.
 * Header-only: the includer links MPI and zero_static.  Not thread-safe
 * (call once, from main). */
#ifndef ZERO_BENCH_COMM_WORLD_H
#define ZERO_BENCH_COMM_WORLD_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

/* Initialises MPI, reads --reps into *reps (at least 1) and --mb into
 * sizes (sizes_len bytes; left as given when absent), and returns the world
 * communicator; aborts the job when it cannot be made. */
static inline zero_comm *bench_comm_world(int *argc, char ***argv, int *reps, char *sizes, size_t sizes_len) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    for (int i = 1; i + 1 < *argc; ++i) {
        if (!strcmp((*argv)[i], "--reps")) *reps = atoi((*argv)[++i]);
        else if (!strcmp((*argv)[i], "--mb")) snprintf(sizes, sizes_len, "%s", (*argv)[++i]);
    }
    if (*reps < 1) *reps = 1;
    zero_comm *w = NULL;
    char err[256];
    MPI_Comm world = MPI_COMM_WORLD;
    if (zero__comm_world_create(ZERO_COMM_MPI, &world, NULL, &w, err, sizeof err) != ZERO_OK) {
        fprintf(stderr, "comm: %s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return w;
}
#endif
