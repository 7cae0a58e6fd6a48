/* What the bucket engine's own memory passes cost next to its collectives:
 * the stage-2 reduction of bench/stage2_reduce (16M fp32 elements in 8
 * buckets of 2M, one 8 MB staging slot reused) rebuilt from the comm layer
 * alone, so that each variant differs from the next by one pass and nothing
 * else (no hooks, no plugin, no double buffering):
 *
 *   ring      8 in-place ring reduce-scatters of the slot (the comm's share),
 *             each split evenly over the ranks
 *   owner     the same, but each bucket's elements all belong to one rank,
 *             as in the engine: ZeRO's partitions are contiguous rank ranges
 *             and a bucket (an eighth of the model here) lies inside one
 *             rank's range, so its "reduce-scatter" is a reduce to that rank
 *   old       + clear the whole slot before each bucket, + add this rank's
 *             reduced block into the partition after it (the engine before
 *             bucket-perf, at every micro-step)
 *   fused     + clear only the slot's other blocks; add this rank's block
 *             into the partition and clear it in the same pass (the engine
 *             now, inside an accumulation window)
 *   direct    + clear the whole slot; reduce-scatter straight into the
 *             partition, no adding pass (the engine now, at the first
 *             micro-step of a window: every micro-step with gas 1)
 *
 *   mpirun -np 2 --oversubscribe bench_bucket_passes [--reps 15] [--mparams 16] [--buckets 8]
 *
 * Each repetition runs every variant once (interleaved: a load change on a
 * shared machine hits all alike); times are the slowest rank's; printed:
 * medians and each variant's median per-repetition ratio to `old`. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"
#include "comm.h"
#include "optim.h"

enum { RING, OWNER, OLD, FUSED, DIRECT, NV };
static const char *const names[NV] = {"ring", "owner", "old", "fused", "direct"};

static void die(const char *what) {
    fprintf(stderr, "bench_bucket_passes: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* One reduction pass of variant v over nb buckets of `per` elements. */
static void pass(int v, zero_comm *w, float *slot, float *part, size_t nb, size_t per, const size_t *counts) {
    const int r = zero__comm_rank(w);
    const size_t own = counts[r], own_at = own * (size_t)r; /* equal blocks: per is a multiple of N */
    const int n = zero__comm_size(w);
    size_t *one = calloc((size_t)n, sizeof *one);
    if (!one) die("out of memory");
    for (size_t k = 0; k < nb; k++) {
        float *dst = part + k * own, *blk = slot + own_at;
        if (v == OWNER) { /* bucket k lies in rank k*n/nb's range, as the engine's do */
            const int o = (int)(k * (size_t)n / nb);
            memset(one, 0, (size_t)n * sizeof *one);
            one[o] = per;
            zero_comm_req *q = NULL;
            if (zero__ireduce_scatterv(w, slot, slot, one, ZERO_DTYPE_F32, &q) != ZERO_OK || zero__comm_wait(q) != ZERO_OK)
                die("reduce-scatter failed");
            continue;
        }
        if (v == OLD || v == DIRECT) memset(slot, 0, per * sizeof(float));
        if (v == FUSED) { /* the own block was cleared by the previous bucket's fused pass */
            memset(slot, 0, own_at * sizeof(float));
            memset(blk + own, 0, (per - own_at - own) * sizeof(float));
        }
        zero_comm_req *q = NULL;
        if (zero__ireduce_scatterv(w, slot, v == DIRECT ? dst : blk, counts, ZERO_DTYPE_F32, &q) != ZERO_OK ||
            zero__comm_wait(q) != ZERO_OK)
            die("reduce-scatter failed");
        if (v == OLD) zero__add_into(dst, blk, ZERO_DTYPE_F32, own);
        if (v == FUSED)
            for (size_t i = 0; i < own; i += 2048) { /* as core/buckets.c add_and_clear_f32 */
                size_t m = own - i < 2048 ? own - i : 2048;
                zero__add_into(dst + i, blk + i, ZERO_DTYPE_F32, m);
                memset(blk + i, 0, m * sizeof(float));
            }
    }
    free(one);
}

int main(int argc, char **argv) {
    int provided = 0, reps = 15;
    double mparams = 16;
    size_t nb = 8;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    for (int i = 1; i + 1 < argc; ++i) {
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mparams")) mparams = atof(argv[++i]);
        else if (!strcmp(argv[i], "--buckets")) nb = (size_t)atol(argv[++i]);
    }
    if (reps < 1) reps = 1;
    if (nb < 1) nb = 1;
    zero_comm *w = NULL;
    char err[256];
    MPI_Comm world = MPI_COMM_WORLD;
    if (zero__comm_world_create(ZERO_COMM_MPI, &world, NULL, &w, err, sizeof err) != ZERO_OK) die(err);
    const int n = zero__comm_size(w), r = zero__comm_rank(w);
    size_t per = (size_t)(mparams * 1e6) / nb;
    per -= per % (size_t)n;
    size_t *counts = malloc((size_t)n * sizeof *counts);
    float *slot = calloc(per, sizeof(float)), *part = calloc(per / (size_t)n * nb, sizeof(float));
    double *t = malloc((size_t)reps * NV * sizeof *t), *ratio = malloc((size_t)reps * NV * sizeof *ratio);
    if (!counts || !slot || !part || !t || !ratio) die("out of memory");
    for (int i = 0; i < n; i++) counts[i] = per / (size_t)n;
    for (int it = -1; it < reps; it++) /* it == -1: warm-up */
        for (int v = 0; v < NV; v++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            pass(v, w, slot, part, nb, per, counts);
            double dt = MPI_Wtime() - t0, worst = 0;
            MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (it >= 0) t[v * reps + it] = worst;
        }
    for (int v = 0; v < NV; v++)
        for (int i = 0; i < reps; i++) ratio[v * reps + i] = t[v * reps + i] / t[OLD * reps + i];
    for (int v = 0; v < NV; v++) {
        bench_sort(t + v * reps, (size_t)reps);
        bench_sort(ratio + v * reps, (size_t)reps);
    }
    if (r == 0) {
        printf("N=%d, %zu buckets x %zu floats (%.1f MB), reps=%d (median of slowest-rank times), load %.2f\n", n, nb,
               per, (double)per * (double)nb * 4 / 1048576.0, reps, bench_loadavg1());
        for (int v = 0; v < NV; v++)
            printf("  %-7s %8.2f ms   / old %.3f (median of per-rep ratios)\n", names[v], t[v * reps + reps / 2] * 1e3,
                   ratio[v * reps + reps / 2]);
    }
    free(t);
    free(ratio);
    free(slot);
    free(part);
    free(counts);
    zero__comm_world_free(w);
    MPI_Finalize();
    return 0;
}
