/* What zero_params_write (1.10, core/params_write.c) costs, beside the
 * collective it cannot do without.
 *
 *   mpirun -np N bench_params_write [--mb 64] [--params 8] [--reps 7] [--plugins stage0,stage2,stage3,offload]
 *
 * A write of every parameter from rank 0 is, at its heart, one broadcast
 * of the written bytes; around it libzero checks the call, agrees the
 * verdict (two small all-reduces over the job, one over each data-parallel
 * group) and hands the values to the plugin, which copies them into its
 * storage (stage 3: each rank's piece; a 16-bit model also widens the
 * master).  In one run, interleaved repetition by repetition, the bench
 * times for `mb` MiB of fp32 params in `params` tensors:
 *   - zero_params_write of all of them, for each plugin;
 *   - one MPI_Bcast of the same bytes from rank 0 over the same ranks (the
 *     floor: no write can move the values with less communication);
 *   - a memcpy of the same bytes (one pass over them on this machine);
 * and prints medians of the slowest rank and the ratio write / broadcast,
 * and the first write of each engine on its own (its scratch is new: the
 * later writes of a burst reuse it until the next zero_step).
 * The shared machines of CI are noisy: read the ratios, not the times. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_engine.h"
#include "bench_timing.h"

enum { MAXPLUG = 8 };

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    double mb = 64;
    int nparams = 8, reps = 7;
    char list[256] = "stage0,stage2,stage3,offload";
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--mb")) mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--params")) nparams = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--plugins")) snprintf(list, sizeof list, "%s", argv[++i]);
    }
    if (nparams < 1) nparams = 1;
    if (reps < 1) reps = 1;
    const char *plug[MAXPLUG];
    int nplug = 0;
    for (char *t = strtok(list, ","); t && nplug < MAXPLUG; t = strtok(NULL, ",")) plug[nplug++] = t;
    const size_t per = (size_t)(mb * 1024 * 1024 / 4) / (size_t)nparams, bytes = per * (size_t)nparams * 4;

    zero_engine *e[MAXPLUG];
    zero_param **h = calloc((size_t)MAXPLUG * (size_t)nparams, sizeof *h);
    for (int p = 0; p < nplug; p++) {
        char cfg[400];
        snprintf(cfg, sizeof cfg,
                 "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": "
                 "0.001}}, \"zero_optimization\": {\"stage\": %d%s}}",
                 !strcmp(plug[p], "stage3") ? 3 : !strcmp(plug[p], "stage1") ? 1 : !strcmp(plug[p], "stage0") ? 0 : 2,
                 strcmp(plug[p], "offload") ? "" : ", \"offload_optimizer\": {\"device\": \"cpu\"}");
        e[p] = bench_engine_flat(cfg, plug[p], nparams, per, "p", h + (size_t)p * (size_t)nparams);
    }
    /* the values: rank 0's (the others pass none, as a host would) */
    float *src = malloc(bytes), *dst = malloc(bytes);
    const void **vals = malloc((size_t)nparams * sizeof *vals);
    for (size_t k = 0; k < per * (size_t)nparams; k++) src[k] = (float)(k % 1000) * 1e-3f;
    for (int i = 0; i < nparams; i++) vals[i] = src + (size_t)i * per;
    double *t_write = calloc((size_t)nplug * (size_t)reps, sizeof *t_write);
    double *t_bcast = calloc((size_t)reps, sizeof *t_bcast), *t_copy = calloc((size_t)reps, sizeof *t_copy);
    for (int r = 0; r < reps; r++) {
        for (int p = 0; p < nplug; p++) {
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = bench_now_s();
            zero_status s = zero_params_write(e[p], h + (size_t)p * (size_t)nparams, rank == 0 ? vals : NULL,
                                              (size_t)nparams, 0);
            const double t = bench_now_s() - t0;
            if (s != ZERO_OK) bench_die("zero_params_write", e[p], s);
            t_write[(size_t)p * (size_t)reps + (size_t)r] = bench_slowest(t);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now_s();
        MPI_Bcast(rank == 0 ? src : dst, (int)(bytes / 4), MPI_FLOAT, 0, MPI_COMM_WORLD);
        t_bcast[r] = bench_slowest(bench_now_s() - t0);
        t0 = bench_now_s();
        memcpy(dst, src, bytes);
        t_copy[r] = bench_slowest(bench_now_s() - t0);
    }
    bench_sort(t_bcast, (size_t)reps);
    bench_sort(t_copy, (size_t)reps);
    const double bc = t_bcast[reps / 2], cp = t_copy[reps / 2];
    if (rank == 0) {
        printf("zero_params_write of %d fp32 params, %.1f MiB, from rank 0 to %d rank(s); medians of %d reps, slowest "
               "rank (load %.2f)\n",
               nparams, (double)bytes / (1 << 20), world, reps, bench_loadavg1());
        printf("  MPI_Bcast of the same bytes   %9.3f ms\n", 1e3 * bc);
        printf("  memcpy of the same bytes      %9.3f ms\n", 1e3 * cp);
    }
    for (int p = 0; p < nplug; p++) {
        double *tw = t_write + (size_t)p * (size_t)reps;
        const double first = tw[0]; /* the engine's first write: its scratch is new (page faults) */
        bench_sort(tw, (size_t)reps);
        if (rank == 0)
            printf("  %-8s zero_params_write  %9.3f ms   write/bcast %.2f   write/memcpy %.2f   first call/bcast %.2f\n",
                   plug[p], 1e3 * tw[reps / 2], bc > 0 ? tw[reps / 2] / bc : 0, cp > 0 ? tw[reps / 2] / cp : 0,
                   bc > 0 ? first / bc : 0);
        zero_engine_destroy(e[p]);
    }
    free(h);
    free(src);
    free(dst);
    free(vals);
    free(t_write);
    free(t_bcast);
    free(t_copy);
    MPI_Finalize();
    return 0;
}
