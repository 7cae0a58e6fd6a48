/* What the initial-values agreement (1.7.3, core/params_values.c) adds to
 * zero_params_done.
 *
 *   mpirun -np N bench_initial_values [--mib 256] [--nparams 16] [--plugin stage2] [--reps 5]
 *
 * When the ranks' initial values agree (the usual case) the agreement is a
 * hash of every initial byte plus one all-reduce of 16 bytes per param;
 * there is no switch to turn it off, so in one run, interleaved, this
 * times
 *   - a memcpy of the model's bytes (params_done copies them at least once);
 *   - the agreement's hash over the same bytes (zero__params_hash_bytes);
 *   - zero_params_done of an engine whose ranks registered the same values;
 *   - zero_params_done where every rank but 0 registered other values
 *     (rank 0's are broadcast: the path a per-rank seed takes);
 * and prints medians (slowest rank) and the ratios: hash / memcpy and
 * hash / params_done, the agreement's share of it.  fp32 params on the CPU. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_engine.h"
#include "bench_timing.h"
#include "params.h"
#include "zero.h"

static void usage(void) {
    fprintf(stderr, "usage: bench_initial_values [--mib M] [--nparams P] [--plugin NAME] [--reps R]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static void quiet(void *user, zero_log_level level, int rank, const char *msg) {
    (void)user, (void)rank;
    if (level == ZERO_LOG_ERROR) fprintf(stderr, "%s\n", msg);
}

/* zero_params_done's time (slowest rank) for an engine of np params of per
 * floats starting at init. */
static double time_params_done(const char *plugin, int np, size_t per, const float *init) {
    static const char *json = "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\","
                              " \"params\": {\"lr\": 1e-3}}, \"zero_optimization\": {\"stage\": 2}}";
    zero_engine *e = bench_engine_open(json, plugin, 0, quiet); /* quiet: the differing run's warning */
    zero_status s = ZERO_OK;
    for (int i = 0; i < np; i++) {
        char name[32];
        snprintf(name, sizeof name, "w%d", i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = init + (size_t)i * per;
        d.numel = per;
        zero_param *h = NULL;
        if ((s = zero_register_param(e, &d, &h)) != ZERO_OK) bench_die("register", e, s);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now_s();
    if ((s = zero_params_done(e)) != ZERO_OK) bench_die("params_done", e, s);
    double t = bench_slowest(bench_now_s() - t0);
    zero_engine_destroy(e);
    return t;
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int mib = 256, np = 16, reps = 5;
    const char *plugin = "stage2";
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (!strcmp(argv[i], "--mib")) mib = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--nparams")) np = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--plugin")) plugin = argv[++i];
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else usage();
    }
    if (mib < 1 || np < 1 || reps < 1) usage();
    const size_t per = ((size_t)mib << 20) / sizeof(float) / (size_t)np, n = per * (size_t)np;
    float *same = malloc(n * sizeof(float)), *mine = malloc(n * sizeof(float)), *dst = malloc(n * sizeof(float));
    if (!same || !mine || !dst) bench_die("out of memory", NULL, ZERO_ERR_OUT_OF_MEMORY);
    for (size_t k = 0; k < n; k++) {
        same[k] = (float)(k % 1009) * 1e-3f;
        mine[k] = rank ? same[k] + (float)rank : same[k];
    }
    memset(dst, 0, n * sizeof(float));
    double *t_copy = calloc((size_t)reps, sizeof(double)), *t_hash = calloc((size_t)reps, sizeof(double)),
           *t_same = calloc((size_t)reps, sizeof(double)), *t_diff = calloc((size_t)reps, sizeof(double));
    uint64_t sink = 0;
    for (int r = 0; r < reps; r++) { /* interleaved: the machine's load hits all alike */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now_s();
        memcpy(dst, same, n * sizeof(float));
        t_copy[r] = bench_slowest(bench_now_s() - t0);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = bench_now_s();
        for (int i = 0; i < np; i++)
            sink ^= zero__params_hash_bytes(7, (const unsigned char *)(same + (size_t)i * per), per * sizeof(float));
        t_hash[r] = bench_slowest(bench_now_s() - t0);
        t_same[r] = time_params_done(plugin, np, per, same);
        t_diff[r] = time_params_done(plugin, np, per, mine);
    }
    if (rank == 0) {
        printf("bench_initial_values: N=%d, %s, %d fp32 params, %.0f MiB in all, %d reps, load %.1f (hash %llx, copy %g)\n",
               world, plugin, np, (double)(n * sizeof(float)) / (1 << 20), reps, bench_loadavg1(),
               (unsigned long long)sink, (double)dst[n - 1]);
        double med[4];
        double *all[4] = {t_copy, t_hash, t_same, t_diff};
        for (int k = 0; k < 4; k++) {
            bench_sort(all[k], (size_t)reps);
            med[k] = all[k][reps / 2];
        }
        double gbs = (double)(n * sizeof(float)) / 1e9;
        printf("  memcpy of the model          median %8.1f ms  (%.2f GB/s)\n", med[0] * 1e3, gbs / med[0]);
        printf("  agreement's hash             median %8.1f ms  (%.2f GB/s)  hash / memcpy %.2f\n", med[1] * 1e3,
               gbs / med[1], med[1] / med[0]);
        printf("  params_done, values agree    median %8.1f ms  hash / params_done %.2f\n", med[2] * 1e3,
               med[1] / med[2]);
        printf("  params_done, ranks differ    median %8.1f ms  (rank 0's broadcast)  / agreeing %.2f\n",
               med[3] * 1e3, med[3] / med[2]);
    }
    free(same), free(mine), free(dst), free(t_copy), free(t_hash), free(t_same), free(t_diff);
    MPI_Finalize();
    return 0;
}
