/* Reduce-scatter benchmark: libzero's ring reduce-scatter of a whole model's
 * gradients vs one MPI_Allreduce of the same bytes (the ZeRO-2 target is
 * <= 0.6x; a reduce-scatter moves half the bytes, so 0.5 is the limit), plus
 * Open MPI's own MPI_Reduce_scatter_block and the allgathers, all in one run.
 *
 *   mpirun -np 4 --oversubscribe bench_reduce_scatter [--reps 9] [--mb 64,4]
 *
 * Each timing is the slowest rank's time (MPI_MAX), after a barrier; the
 * figure printed is the median over the repetitions, after one warm-up. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_comm_world.h"
#include "bench_timing.h"
#include "comm.h"

typedef enum { ALLREDUCE, RS_MPI, RS_OURS, RS_INPLACE, AG_MPI, AG_OURS, AG_RING, AG_NBC, IAR_OURS, IAR_NBC, NBENCH } bench_kind;
static const char *names[NBENCH] = {"MPI_Allreduce", "MPI_Reduce_scatter_block", "zero ring reduce-scatter",
                                    "zero ring RS in place",
                                    "MPI_Allgather", "zero allgather (direct)",
                                    "zero allgather (ring)", "zero allgather (libnbc)", "zero iallreduce (ring)",
                                    "zero iallreduce (libnbc)"};

/* Worlds created with other knobs, for comparison: w_nbc uses libnbc's
 * MPI_Iallgatherv / MPI_Iallreduce (driven by the same progress engine),
 * w_ring the ring allgather. */
static zero_comm *w_nbc, *w_ring;

static double run_once(bench_kind k, zero_comm *w, float *a, float *b, size_t count) {
    int n = zero__comm_size(w);
    size_t per = count / (size_t)n;
    size_t *counts = malloc((size_t)n * sizeof *counts);
    for (int i = 0; i < n; ++i) counts[i] = per;
    zero_comm_req *req = NULL;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    switch (k) {
    case ALLREDUCE: MPI_Allreduce(a, b, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case RS_MPI: MPI_Reduce_scatter_block(a, b, (int)per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case RS_OURS:
        if (zero__ireduce_scatterv(w, a, b, counts, ZERO_DTYPE_F32, &req) == ZERO_OK) zero__comm_wait(req);
        break;
    case RS_INPLACE: /* what the bucket engine does: our block of the input receives the sum */
        if (zero__ireduce_scatterv(w, b, b + per * (size_t)zero__comm_rank(w), counts, ZERO_DTYPE_F32, &req) ==
            ZERO_OK)
            zero__comm_wait(req);
        break;
    case AG_MPI: MPI_Allgather(a, (int)per, MPI_FLOAT, b, (int)per, MPI_FLOAT, MPI_COMM_WORLD); break;
    case AG_OURS:
        if (zero__iallgatherv(w, a, b, counts, ZERO_DTYPE_F32, &req) == ZERO_OK) zero__comm_wait(req);
        break;
    case AG_NBC:
    case AG_RING:
        if (zero__iallgatherv(k == AG_NBC ? w_nbc : w_ring, a, b, counts, ZERO_DTYPE_F32, &req) == ZERO_OK)
            zero__comm_wait(req);
        break;
    case IAR_OURS:
    case IAR_NBC:
        memcpy(b, a, count * sizeof *a); /* in place on a copy: the timing includes this copy */
        if (zero__iallreduce(k == IAR_NBC ? w_nbc : w, b, count, ZERO_DTYPE_F32, ZERO_OP_SUM, &req) == ZERO_OK)
            zero__comm_wait(req);
        break;
    default: break;
    }
    double dt = MPI_Wtime() - t0, worst = 0;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    free(counts);
    return worst;
}

int main(int argc, char **argv) {
    int reps = 9;
    char sizes[64] = "64,4";
    zero_comm *w = bench_comm_world(&argc, &argv, &reps, sizes, sizeof sizes);
    char err[256];
    MPI_Comm world = MPI_COMM_WORLD;
    setenv("ZERO_COMM_ALLGATHER", "mpi", 1);
    setenv("ZERO_COMM_ALLREDUCE", "mpi", 1);
    zero_status s1 = zero__comm_world_create(ZERO_COMM_MPI, &world, NULL, &w_nbc, err, sizeof err);
    unsetenv("ZERO_COMM_ALLREDUCE");
    setenv("ZERO_COMM_ALLGATHER", "ring", 1);
    zero_status s2 = zero__comm_world_create(ZERO_COMM_MPI, &world, NULL, &w_ring, err, sizeof err);
    unsetenv("ZERO_COMM_ALLGATHER");
    if (s1 != ZERO_OK || s2 != ZERO_OK) {
        fprintf(stderr, "comm: %s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int r = zero__comm_rank(w), n = zero__comm_size(w), provided = 0;
    MPI_Query_thread(&provided);
    if (r == 0)
        printf("N=%d ranks, thread level %d, reps=%d (median of slowest-rank times), chunk=%s KB window=%s poll=%s us\n",
               n, provided, reps, getenv("ZERO_COMM_CHUNK_KB") ? getenv("ZERO_COMM_CHUNK_KB") : "512(default)",
               getenv("ZERO_COMM_WINDOW") ? getenv("ZERO_COMM_WINDOW") : "8(default)",
               getenv("ZERO_COMM_POLL_US") ? getenv("ZERO_COMM_POLL_US") : "100(default)");
    for (char *tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
        size_t mb = (size_t)atol(tok);
        size_t count = mb * 1024 * 1024 / 4;
        count -= count % (size_t)n;
        float *a = malloc(count * 4), *b = malloc(count * 4);
        for (size_t i = 0; i < count; ++i) a[i] = (float)((i + (size_t)r) % 1000) * 0.001f;
        memset(b, 0, count * 4);
        /* Interleaved: every repetition runs each algorithm once, so a load
         * change on this shared machine hits all of them alike; the ratio is
         * also taken per repetition (median of ratios). */
        double *t = malloc((size_t)reps * NBENCH * sizeof *t), med[NBENCH], *ratio = malloc((size_t)reps * sizeof *ratio);
        for (int k = 0; k < NBENCH; ++k) run_once((bench_kind)k, w, a, b, count); /* warm-up */
        for (int i = 0; i < reps; ++i)
            for (int k = 0; k < NBENCH; ++k) t[k * reps + i] = run_once((bench_kind)k, w, a, b, count);
        for (int i = 0; i < reps; ++i) ratio[i] = t[RS_OURS * reps + i] / t[ALLREDUCE * reps + i];
        bench_sort(ratio, (size_t)reps);
        for (int k = 0; k < NBENCH; ++k) {
            bench_sort(t + k * reps, (size_t)reps);
            med[k] = t[k * reps + reps / 2];
        }
        double med_ratio = ratio[reps / 2];
        free(t);
        free(ratio);
        if (r == 0) {
            printf("\n%zu MB (%zu floats), N=%d:\n", mb, count, n);
            for (int k = 0; k < NBENCH; ++k)
                printf("  %-28s %9.2f ms   ratio to MPI_Allreduce %.3f\n", names[k], med[k] * 1e3,
                       med[k] / med[ALLREDUCE]);
            printf("  => zero reduce-scatter / MPI_Allreduce = %.3f (ratio of medians), %.3f (median of per-rep "
                   "ratios); target <= 0.6; vs MPI_Reduce_scatter_block %.3f\n",
                   med[RS_OURS] / med[ALLREDUCE], med_ratio, med[RS_OURS] / med[RS_MPI]);
            fflush(stdout);
        }
        free(a);
        free(b);
    }
    zero__comm_world_free(w_ring);
    zero__comm_world_free(w_nbc);
    zero__comm_world_free(w);
    MPI_Finalize();
    return 0;
}
