/* What the host-write check (1.7.4, core/host_owned.c) adds to a step.
 *
 * At every optimizer step libzero compares each ZERO_PARAM_HOST_OWNED
 * tensor with its own copy before the optimizer moves it (a host that wrote
 * the tensor itself is refused), and fingerprints libzero's copy of the
 * other params (a host that wrote it through zero_gather's pointer is
 * refused).  This bench trains host-owned fp32 params (or, with --plain,
 * params without the flag) through the public ABI and times zero_step at a
 * boundary with
 * ZERO_CHECK_HOST_WRITES=off, the default sampled check and =full,
 * interleaved step by step (the library reads the variable at each step),
 * beside a memcpy of the params' bytes (STREAM-style: what one pass over
 * them costs on this machine).  It prints the medians of the slowest rank
 * and the ratios sampled/off and full/off.
 *
 *   mpirun -np N bench_host_writes [--mb 64] [--params 8] [--steps 15] [--plugin stage0] [--plain]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_engine.h"
#include "bench_timing.h"

enum { MODES = 3 };
static const char *const kMode[MODES] = {"off", "sampled", "full"};

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    double mb = 64;
    int nparams = 8, steps = 15, plain = 0;
    const char *plugin = "stage0";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plain")) plain = 1;
        else if (i + 1 >= argc) break;
        else if (!strcmp(argv[i], "--mb")) mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--params")) nparams = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--plugin")) plugin = argv[++i];
    }
    if (nparams < 1) nparams = 1;
    if (steps < 1) steps = 1;
    const size_t per = (size_t)(mb * 1024 * 1024 / 4) / (size_t)nparams;
    const char *cfg = "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\":"
                      " {\"lr\": 0.001}}}";
    zero_engine *e = bench_engine_open(cfg, plugin, 0, NULL);
    float **t = calloc((size_t)nparams, sizeof *t);
    zero_param **h = calloc((size_t)nparams, sizeof *h);
    for (int i = 0; i < nparams; i++) {
        t[i] = malloc(per * sizeof(float));
        for (size_t k = 0; k < per; k++) t[i][k] = 0.001f * (float)(k % 1000);
        char name[32];
        snprintf(name, sizeof name, "w%d", i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = t[i];
        d.numel = per;
        d.flags = plain ? 0 : ZERO_PARAM_HOST_OWNED;
        zero_status s = zero_register_param(e, &d, &h[i]);
        if (s != ZERO_OK) bench_die("zero_register_param", e, s);
    }
    zero_status s = zero_params_done(e);
    if (s != ZERO_OK) bench_die("zero_params_done", e, s);

    double *times[MODES];
    for (int m = 0; m < MODES; m++) times[m] = calloc((size_t)steps, sizeof(double));
    double *copy = calloc((size_t)steps, sizeof(double));
    float *dst = malloc(per * sizeof(float));
    for (int k = -1; k < steps; k++) { /* k = -1: warm-up, not recorded */
        for (int m = 0; m < MODES; m++) {
            for (int i = nparams - 1; i >= 0; i--) {
                void *g = NULL;
                if ((s = zero_grad_buffer(e, h[i], &g)) != ZERO_OK) bench_die("zero_grad_buffer", e, s);
                memset(g, 0, per * sizeof(float));
                if ((s = zero_on_grad_ready(e, h[i], NULL)) != ZERO_OK) bench_die("zero_on_grad_ready", e, s);
            }
            setenv("ZERO_CHECK_HOST_WRITES", kMode[m], 1);
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = bench_now_s();
            zero_step_result r = ZERO_STEP_RESULT_INIT;
            if ((s = zero_step(e, NULL, &r)) != ZERO_OK) bench_die("zero_step", e, s);
            const double dt = bench_slowest(bench_now_s() - t0);
            if (k >= 0) times[m][k] = dt;
        }
        const double c0 = bench_now_s();
        for (int i = 0; i < nparams; i++) memcpy(dst, t[i], per * sizeof(float));
        const double dc = bench_slowest(bench_now_s() - c0);
        if (k >= 0) copy[k] = dc;
        if (dst[per / 2] < -1) printf("%g\n", dst[0]); /* keeps the copy */
    }
    unsetenv("ZERO_CHECK_HOST_WRITES");
    double med[MODES];
    for (int m = 0; m < MODES; m++) {
        bench_sort(times[m], (size_t)steps);
        med[m] = times[m][steps / 2];
    }
    bench_sort(copy, (size_t)steps);
    const double mc = copy[steps / 2];
    if (rank == 0) {
        printf("bench_host_writes: %s, N=%d, %d %s fp32 params, %.1f MiB each rank, %d steps each, load %.1f\n",
               plugin, world, nparams, plain ? "plain" : "host-owned", (double)per * nparams * 4 / 1048576.0, steps,
               bench_loadavg1());
        printf("  median zero_step: off %.3f ms, sampled %.3f ms, full %.3f ms; memcpy of the params %.3f ms\n",
               1e3 * med[0], 1e3 * med[1], 1e3 * med[2], 1e3 * mc);
        printf("RATIO sampled/off %.3f full/off %.3f (full - off) / memcpy %.2f\n", med[1] / med[0], med[2] / med[0],
               (med[2] - med[0]) / mc);
    }
    for (int m = 0; m < MODES; m++) free(times[m]);
    free(copy);
    free(dst);
    zero_engine_destroy(e);
    for (int i = 0; i < nparams; i++) free(t[i]);
    free(t);
    free(h);
    MPI_Finalize();
    return 0;
}
