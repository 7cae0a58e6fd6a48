/* 16-bit wire vs fp32 wire (issue 14, communication_data_type): the bucket
 * engine's in-place ring reduce-scatter of `count` gradient elements, over
 * fp32 and over bf16 / fp16, in one run.  The 16-bit figure includes what
 * the bucket engine adds around the collective: rounding the fp32 bucket
 * into the wire array and widening this rank's reduced block back.
 *
 *   mpirun -np 4 --oversubscribe bench_wire16 [--reps 9] [--mb 64,8]
 *
 * --mb is the fp32 gradient size (MB of fp32 elements).  Each timing is
 * the slowest rank's (MPI_MAX) after a barrier; every repetition runs the
 * three variants once (interleaved, so load changes hit all alike) and the
 * printed ratio is the median of the per-repetition ratios, after one
 * warm-up.  Absolute times on a shared machine mean little: quote ratios. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_comm_world.h"
#include "bench_timing.h"
#include "comm.h"
#include "optim.h"

enum { F32, BF16_RAW, BF16, F16, NV };
static const char *names[NV] = {"fp32 wire", "bf16 wire, no casts", "bf16 wire (+ casts)", "fp16 wire (+ casts)"};

static double run_once(int v, zero_comm *w, const float *g, float *f32, uint16_t *h, size_t count) {
    const int n = zero__comm_size(w), r = zero__comm_rank(w);
    const size_t per = count / (size_t)n;
    size_t *counts = malloc((size_t)n * sizeof *counts);
    for (int i = 0; i < n; ++i) counts[i] = per;
    zero_comm_req *req = NULL;
    memcpy(f32, g, count * sizeof *g); /* the bucket as the host left it (not timed) */
    if (v == BF16_RAW) zero__convert(h, ZERO_DTYPE_BF16, g, ZERO_DTYPE_F32, count);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (v == F32) {
        if (zero__ireduce_scatterv(w, f32, f32 + per * (size_t)r, counts, ZERO_DTYPE_F32, &req) == ZERO_OK)
            zero__comm_wait(req);
    } else if (v == BF16_RAW) { /* the collective alone: what a 16-bit wire saves before the casts cost */
        if (zero__ireduce_scatterv(w, h, h + per * (size_t)r, counts, ZERO_DTYPE_BF16, &req) == ZERO_OK)
            zero__comm_wait(req);
    } else {
        const zero_dtype dt = v == BF16 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_F16;
        zero__convert(h, dt, f32, ZERO_DTYPE_F32, count);
        if (zero__ireduce_scatterv(w, h, h + per * (size_t)r, counts, dt, &req) == ZERO_OK) zero__comm_wait(req);
        zero__convert(f32 + per * (size_t)r, ZERO_DTYPE_F32, h + per * (size_t)r, dt, per);
    }
    double dt = MPI_Wtime() - t0, worst = 0;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    free(counts);
    return worst;
}

int main(int argc, char **argv) {
    int reps = 9;
    char sizes[64] = "64,8";
    zero_comm *w = bench_comm_world(&argc, &argv, &reps, sizes, sizeof sizes);
    const int r = zero__comm_rank(w), n = zero__comm_size(w);
    if (r == 0) printf("N=%d ranks, reps=%d (median of per-rep ratios of slowest-rank times)\n", n, reps);
    for (char *tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
        size_t count = (size_t)atol(tok) * 1024 * 1024 / 4;
        count -= count % (size_t)n;
        float *g = malloc(count * 4), *f32 = malloc(count * 4);
        uint16_t *h = malloc(count * 2);
        for (size_t i = 0; i < count; ++i) g[i] = (float)((i * 7919 + (size_t)r * 13) % 2001) * 1e-3f - 1.0f;
        double *t = malloc((size_t)reps * NV * sizeof *t), rat[NV][64];
        for (int v = 0; v < NV; ++v) run_once(v, w, g, f32, h, count); /* warm-up */
        for (int i = 0; i < reps; ++i)
            for (int v = 0; v < NV; ++v) t[v * reps + i] = run_once(v, w, g, f32, h, count);
        for (int v = 0; v < NV; ++v) {
            for (int i = 0; i < reps && i < 64; ++i) rat[v][i] = t[v * reps + i] / t[F32 * reps + i];
            bench_sort(rat[v], (size_t)(reps < 64 ? reps : 64));
            bench_sort(t + v * reps, (size_t)reps);
        }
        if (r == 0) {
            printf("\n%zu fp32 MB (%zu elements), N=%d:\n", count * 4 >> 20, count, n);
            for (int v = 0; v < NV; ++v)
                printf("  %-22s median %8.2f ms   time / fp32 wire: %.3f (median of per-rep ratios)\n", names[v],
                       t[v * reps + reps / 2] * 1e3, rat[v][(reps < 64 ? reps : 64) / 2]);
            fflush(stdout);
        }
        free(t);
        free(g);
        free(f32);
        free(h);
    }
    zero__comm_world_free(w);
    MPI_Finalize();
    return 0;
}
