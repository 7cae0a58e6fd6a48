/* What issue 31's missing-gradient agreement costs a step, through
 * libzero's public ABI.
 *
 *   mpirun -np N bench_agreement [--kparams 64] [--nparams 8] [--steps 200] [--reps 7]
 *
 * When every rank reported every gradient (the normal case), the agreement
 * at a window's boundary is one 8-byte MAX all-reduce over every rank
 * (grad_window.c); nothing else runs.  There is no switch to turn it off
 * (a safety check that can be disabled is one that will be), so the bench
 * puts the step next to the thing it adds: in one run, interleaved, it
 * times
 *   - a training step (every gradient reported, zero_step at gas = 1, i.e.
 *     one agreement per step) of stage0 and stage2 over `nparams` fp32
 *     params of kparams*1000 elements in all -- small on purpose: the
 *     smaller the model, the larger the agreement's share;
 *   - the agreement's own call: zero__allreduce of one uint64 (MAX) on a
 *     libzero MPI communicator over the same ranks (MPI_Iallreduce
 *     completed by libzero's bounded poll, docs/reliability.md);
 *   - for reference, one blocking 8-byte MPI_Allreduce;
 * and prints the agreement call's time as a fraction of each step: what the
 * agreement adds to a step.  Medians over repetitions of the slowest rank.
 *
 * The creation-time agreement (plugin, build, config digest) is one more
 * 16-byte all-reduce per zero_engine_create, not per step: not measured. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_engine.h"
#include "bench_timing.h"
#include "comm.h"
#include "zero.h"

enum { NPLUG = 2 };
static const char *plugins[NPLUG] = {"stage0", "stage2"};

static void usage(void) {
    fprintf(stderr, "usage: bench_agreement [--kparams K] [--nparams P] [--steps S] [--reps R]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* One training step: every param's gradient written and reported. */
static void train_step(zero_engine *e, zero_param **h, int np, size_t per, float v) {
    for (int i = 0; i < np; i++) {
        void *g = NULL;
        zero_status s = zero_grad_buffer(e, h[i], &g);
        if (s != ZERO_OK) bench_die("grad_buffer", e, s);
        float *gf = g;
        for (size_t k = 0; k < per; k++) gf[k] = v;
        if ((s = zero_on_grad_ready(e, h[i], NULL)) != ZERO_OK) bench_die("on_grad_ready", e, s);
    }
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    zero_status s = zero_step(e, NULL, &r);
    if (s != ZERO_OK || !r.taken) bench_die("zero_step (a step every gradient reported must be taken)", e, s);
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int kparams = 64, nparams = 8, steps = 200, reps = 7;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (!strcmp(argv[i], "--kparams")) kparams = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--nparams")) nparams = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else usage();
    }
    if (kparams < 1 || nparams < 1 || nparams > 1024 || steps < 1 || reps < 1) usage();
    const size_t per = ((size_t)kparams * 1000 + (size_t)nparams - 1) / (size_t)nparams;
    const char *json = "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
                       " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}},"
                       " \"zero_optimization\": {\"reduce_bucket_size\": 1000000}}";
    zero_engine *eng[NPLUG];
    zero_param **h[NPLUG];
    for (int p = 0; p < NPLUG; p++) {
        h[p] = calloc((size_t)nparams, sizeof *h[p]);
        if (!h[p]) bench_die("out of memory", NULL, ZERO_ERR_OUT_OF_MEMORY);
        eng[p] = bench_engine_flat(json, plugins[p], nparams, per, "w", h[p]);
        for (int w = 0; w < 5; w++) train_step(eng[p], h[p], nparams, per, 1e-3f); /* warm-up */
    }
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    zero_comm *zc = NULL;
    char err[256];
    if (zero__comm_world_create(ZERO_COMM_MPI, &comm, NULL, &zc, err, sizeof err) != ZERO_OK) {
        fprintf(stderr, "comm: %s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double *t_step[NPLUG], *t_ar = calloc((size_t)reps, sizeof *t_ar), *t_mpi = calloc((size_t)reps, sizeof *t_mpi),
           *ratio[NPLUG];
    for (int p = 0; p < NPLUG; p++) {
        t_step[p] = calloc((size_t)reps, sizeof(double));
        ratio[p] = calloc((size_t)reps, sizeof(double));
    }
    for (int r = 0; r < reps; r++) {
        /* interleaved: load changes on a shared machine hit all alike */
        for (int p = 0; p < NPLUG; p++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = bench_now_s();
            for (int s = 0; s < steps; s++) train_step(eng[p], h[p], nparams, per, 1e-3f * (float)(s % 7 + 1));
            t_step[p][r] = bench_slowest((bench_now_s() - t0) / steps);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now_s();
        for (int s = 0; s < steps; s++) {
            uint64_t any = 0; /* what grad_window.c sends: the local missing count */
            zero_status st = zero__allreduce(zc, &any, 1, ZERO_DTYPE_U64, ZERO_OP_MAX);
            if (st != ZERO_OK) bench_die("zero__allreduce", NULL, st);
        }
        t_ar[r] = bench_slowest((bench_now_s() - t0) / steps);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = bench_now_s();
        for (int s = 0; s < steps; s++) {
            uint64_t mine = 0, all = 0;
            MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_MAX, comm);
        }
        t_mpi[r] = bench_slowest((bench_now_s() - t0) / steps);
        for (int p = 0; p < NPLUG; p++) ratio[p][r] = t_ar[r] / t_step[p][r];
    }
    if (rank == 0) {
        printf("bench_agreement: N=%d, %d params, %zu elements (fp32), %d steps x %d reps, load %.1f\n", world,
               nparams, per * (size_t)nparams, steps, reps, bench_loadavg1());
        bench_sort(t_ar, (size_t)reps);
        bench_sort(t_mpi, (size_t)reps);
        printf("  the agreement's all-reduce (zero__allreduce, 8 bytes): median %.1f us (blocking MPI_Allreduce: %.1f us)\n",
               t_ar[reps / 2] * 1e6, t_mpi[reps / 2] * 1e6);
        for (int p = 0; p < NPLUG; p++) {
            bench_sort(t_step[p], (size_t)reps);
            bench_sort(ratio[p], (size_t)reps);
            printf("  %-7s step median %.1f us; all-reduce / step: median %.3f (min %.3f, max %.3f)\n", plugins[p],
                   t_step[p][reps / 2] * 1e6, ratio[p][reps / 2], ratio[p][0], ratio[p][reps - 1]);
        }
    }
    for (int p = 0; p < NPLUG; p++) {
        zero_engine_destroy(eng[p]);
        free(h[p]);
        free(t_step[p]);
        free(ratio[p]);
    }
    free(t_ar);
    free(t_mpi);
    zero__comm_free(zc);
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return 0;
}
