/* Stage-2 gradient reduction of a whole model, through libzero's public ABI
 * and the bucket engine, vs one MPI_Allreduce of the same bytes.
 *
 *   mpirun -np 4 --oversubscribe bench_stage2_reduce [--mparams 16] [--nparams 64] [--reps 7] [--window-start]
 *
 * The model is `nparams` fp32 params totalling `mparams` million elements,
 * run by the stage2 plugin with DeepSpeed's default reduce_bucket_size
 * (clamped by the engine to an eighth of the model).  One timed "reduction"
 * is one micro-step that is not an accumulation boundary: every param's
 * zero_grad_buffer + zero_on_grad_ready in backward order, then zero_step,
 * which only finishes the reduction (gradient_accumulation_steps is large,
 * so no optimizer step runs).  That is everything stage 2 does to reduce a
 * micro-step's gradients: zeroing the staging slots, the bucketed ring
 * reduce-scatters and adding each owned block into the partition.
 * The baseline is MPI_Allreduce of mparams floats (what stage 0 would send).
 * --window-start times instead the first micro-step of a 2-micro-step
 * window (what every micro-step is with gradient_accumulation_steps 1):
 * there the engine reduce-scatters straight into the partition, with no
 * adding pass; the window's second micro-step (the boundary, with the
 * optimizer step) runs untimed after each timed one.
 *
 * Each repetition runs both once (interleaved, so load changes on a shared
 * machine hit both); each time is the slowest rank's (MPI_MAX after a
 * barrier); printed: medians and the median of per-repetition ratios. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_engine.h"
#include "bench_timing.h"
#include "zero.h"

/* One micro-step of stage-2 gradient reduction: every param's gradient in
 * backward order, then zero_step. */
static void micro_step(zero_engine *e, zero_param **h, int nparams) {
    zero_status s;
    for (int i = nparams - 1; i >= 0; i--) { /* backward order */
        void *buf;
        if ((s = zero_grad_buffer(e, h[i], &buf)) != ZERO_OK) bench_die("grad_buffer", e, s);
        ((float *)buf)[0] += 1.0f; /* the host writes something; the rest stays zero */
        if ((s = zero_on_grad_ready(e, h[i], NULL)) != ZERO_OK) bench_die("on_grad_ready", e, s);
    }
    zero_step_result res = ZERO_STEP_RESULT_INIT;
    if ((s = zero_step(e, NULL, &res)) != ZERO_OK) bench_die("step", e, s);
}

int main(int argc, char **argv) {
    int provided = 0, reps = 7, nparams = 64, window_start = 0;
    double mparams = 16;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--window-start")) window_start = 1;
        else if (i + 1 >= argc) break;
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mparams")) mparams = atof(argv[++i]);
        else if (!strcmp(argv[i], "--nparams")) nparams = atoi(argv[++i]);
    }
    if (reps < 1) reps = 1;
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const size_t total = (size_t)(mparams * 1e6), per = total / (size_t)nparams;

    zero_param **h = calloc((size_t)nparams, sizeof *h);
    char json[512];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}},"
             " \"zero_optimization\": {\"stage\": 2, \"overlap_comm\": true}}",
             window_start ? 2 : 1000000);
    zero_engine *e = bench_engine_flat(json, "stage2", nparams, per, "p", h);

    float *a = malloc(total * sizeof(float)), *b = malloc(total * sizeof(float));
    for (size_t i = 0; i < total; i++) a[i] = (float)((i + (size_t)rank) % 1000) * 0.001f;
    double *t_ar = malloc((size_t)reps * sizeof(double)), *t_z = malloc((size_t)reps * sizeof(double)),
           *ratio = malloc((size_t)reps * sizeof(double));
    for (int it = -1; it < reps; it++) { /* it == -1: warm-up */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(a, b, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double ar = bench_slowest(MPI_Wtime() - t0);

        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        micro_step(e, h, nparams);
        double z = bench_slowest(MPI_Wtime() - t0);
        if (window_start) micro_step(e, h, nparams); /* the boundary: untimed */
        if (it >= 0) {
            t_ar[it] = ar;
            t_z[it] = z;
            ratio[it] = z / ar;
        }
    }
    bench_sort(t_ar, (size_t)reps);
    bench_sort(t_z, (size_t)reps);
    bench_sort(ratio, (size_t)reps);
    zero_comm_stats cs = ZERO_COMM_STATS_INIT;
    zero_comm_stats_get(e, &cs);
    if (rank == 0) {
        printf("N=%d, %zu params x %zu floats = %.1f MB of fp32 gradients, reps=%d (median of slowest-rank times)%s\n",
               world, (size_t)nparams, per, (double)per * nparams * 4 / 1048576.0, reps,
               window_start ? ", timing window-start micro-steps" : "");
        printf("  MPI_Allreduce (whole model)             %9.2f ms\n", t_ar[reps / 2] * 1e3);
        printf("  stage2 reduction via the bucket engine  %9.2f ms   (%llu reduce-scatters in %llu passes)\n",
               t_z[reps / 2] * 1e3, (unsigned long long)cs.reduce_scatter_calls,
               (unsigned long long)cs.reduction_passes);
        printf("  of which waiting for reductions (rank 0, mean per pass) %.2f ms\n",
               cs.exposed_comm_seconds / (double)(cs.reduction_passes ? cs.reduction_passes : 1) * 1e3);
        printf("  (1-minute load average at the end: %.2f on %ld cores)\n", bench_loadavg1(), sysconf(_SC_NPROCESSORS_ONLN));
        printf("  => stage2 / MPI_Allreduce = %.3f (median of per-rep ratios; ratio of medians %.3f); target <= 0.6\n",
               ratio[reps / 2], t_z[reps / 2] / t_ar[reps / 2]);
    }
    free(t_ar);
    free(t_z);
    free(ratio);
    free(a);
    free(b);
    free(h);
    zero_engine_destroy(e);
    MPI_Finalize();
    return 0;
}
