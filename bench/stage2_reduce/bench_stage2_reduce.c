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
 * Ownership (issue 18): every run times the same reduction with the
 * contiguous partitions (each bucket lies inside one rank's share: a
 * reduce to one owner) and with zero_optimization.round_robin_gradients
 * (interleaved ownership: every bucket is a stripe shared by all ranks, so
 * its reduce-scatter gives every rank 1/N), and the stage-1 window
 * reduction (stage1, gradient_accumulation_steps 1, overlap off: at the
 * boundary every bucket is reduce-scattered in place; timed as the
 * engine's wait for it, zero_comm_stats.exposed_comm_seconds, since the
 * boundary also runs the optimizer and the all-gather) under both.
 *
 * Since 1.5.1 the reductions run in shared memory when all ranks share a
 * node (docs/comm.md); two more engines, made with ZERO_COMM_SHM=0, time
 * the contiguous stage-2 and stage-1 reductions over MPI's transport (the
 * ring), so one run gives both paths.
 *
 * Each repetition runs all of them once (interleaved, so load changes on a
 * shared machine hit all alike); each time is the slowest rank's (MPI_MAX
 * after a barrier); printed: medians and the median of per-repetition
 * ratios to the all-reduce of the same repetition. */
#include <mpi.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_engine.h"
#include "bench_timing.h"
#include "zero.h"

/* One micro-step: every param's gradient in backward order, then
 * zero_step (stage 2: the reduction only; stage 1: a boundary). */
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

/* CPU seconds of the whole process (all threads: the host's and libzero's
 * progress thread).  On a shared, oversubscribed machine wall times mostly
 * measure the other jobs; the busiest rank's CPU time is the critical path
 * the reduction would have with a core per rank, and it shows how the
 * work is spread (a reduce to one owner puts it all on that owner). */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { NV = 6 };
typedef struct variant {
    const char *label, *plugin;
    int round_robin, stage1;
    int transport; /* made with ZERO_COMM_SHM=0: the ring over MPI's transport, not shared memory */
    zero_engine *e;
    zero_param **h;
    double *t, *ratio, *wall; /* wall: stage 1's whole boundary step (reduction, AdamW, all-gather) */
    double *cpu;              /* busiest rank's CPU seconds (stage 2 only: stage 1's step holds AdamW) */
} variant;

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

    variant v[NV] = {{"stage2 reduction, contiguous partitions ", "stage2", 0, 0, 0, 0, 0, 0, 0, 0, 0},
                     {"stage2 reduction, round_robin_gradients ", "stage2", 1, 0, 0, 0, 0, 0, 0, 0, 0},
                     {"stage1 window reduction, contiguous     ", "stage1", 0, 1, 0, 0, 0, 0, 0, 0, 0},
                     {"stage1 window reduction, round_robin    ", "stage1", 1, 1, 0, 0, 0, 0, 0, 0, 0},
                     /* 1.5.1: the same with the shared-memory collectives off (docs/comm.md) */
                     {"stage2 reduction, contiguous, transport ", "stage2", 0, 0, 1, 0, 0, 0, 0, 0, 0},
                     {"stage1 window reduction, contig., transp.", "stage1", 0, 1, 1, 0, 0, 0, 0, 0, 0}};
    for (int k = 0; k < NV; k++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
                 " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}},"
                 " \"zero_optimization\": {\"stage\": %d, \"overlap_comm\": %s, \"round_robin_gradients\": %s}}",
                 v[k].stage1 ? 1 : window_start ? 2 : 1000000, v[k].stage1 ? 1 : 2, v[k].stage1 ? "false" : "true",
                 v[k].round_robin ? "true" : "false");
        v[k].h = calloc((size_t)nparams, sizeof *v[k].h);
        if (v[k].transport) setenv("ZERO_COMM_SHM", "0", 1); /* read when the engine's communicator is made */
        v[k].e = bench_engine_flat(json, v[k].plugin, nparams, per, "p", v[k].h);
        if (v[k].transport) unsetenv("ZERO_COMM_SHM");
        v[k].t = calloc((size_t)reps, sizeof(double));
        v[k].ratio = calloc((size_t)reps, sizeof(double));
        v[k].wall = calloc((size_t)reps, sizeof(double));
        v[k].cpu = calloc((size_t)reps, sizeof(double));
    }

    float *a = malloc(total * sizeof(float)), *b = malloc(total * sizeof(float));
    for (size_t i = 0; i < total; i++) a[i] = (float)((i + (size_t)rank) % 1000) * 0.001f;
    double *t_ar = malloc((size_t)reps * sizeof(double)), *c_ar = malloc((size_t)reps * sizeof(double));
    for (int it = -1; it < reps; it++) { /* it == -1: warm-up */
        MPI_Barrier(MPI_COMM_WORLD);
        double c0s = cpu_s();
        double t0 = MPI_Wtime();
        MPI_Allreduce(a, b, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double ar = bench_slowest(MPI_Wtime() - t0), arc = bench_slowest(cpu_s() - c0s);
        for (int k = 0; k < NV; k++) {
            zero_comm_stats c0 = ZERO_COMM_STATS_INIT, c1 = ZERO_COMM_STATS_INIT;
            zero_comm_stats_get(v[k].e, &c0);
            MPI_Barrier(MPI_COMM_WORLD);
            const double cz0 = cpu_s();
            t0 = MPI_Wtime();
            micro_step(v[k].e, v[k].h, nparams);
            double z = MPI_Wtime() - t0, wall = bench_slowest(z), cz = bench_slowest(cpu_s() - cz0);
            zero_comm_stats_get(v[k].e, &c1);
            if (v[k].stage1) z = c1.exposed_comm_seconds - c0.exposed_comm_seconds;
            z = bench_slowest(z);
            if (window_start && !v[k].stage1) micro_step(v[k].e, v[k].h, nparams); /* the boundary: untimed */
            if (it >= 0) {
                v[k].t[it] = z;
                v[k].ratio[it] = z / ar;
                v[k].wall[it] = wall;
                v[k].cpu[it] = cz;
            }
        }
        if (it >= 0) {
            t_ar[it] = ar;
            c_ar[it] = arc;
        }
    }
    bench_sort(t_ar, (size_t)reps);
    bench_sort(c_ar, (size_t)reps);
    if (rank == 0) {
        printf("N=%d, %zu params x %zu floats = %.1f MB of fp32 gradients, reps=%d (median of slowest-rank times)%s\n",
               world, (size_t)nparams, per, (double)per * nparams * 4 / 1048576.0, reps,
               window_start ? ", stage2 timing window-start micro-steps" : "");
        printf("  MPI_Allreduce (whole model)                %9.2f ms   (busiest rank's CPU %.2f ms)\n", t_ar[reps / 2] * 1e3,
               c_ar[reps / 2] * 1e3);
    }
    for (int k = 0; k < NV; k++) {
        bench_sort(v[k].t, (size_t)reps);
        bench_sort(v[k].ratio, (size_t)reps);
        bench_sort(v[k].wall, (size_t)reps);
        bench_sort(v[k].cpu, (size_t)reps);
        zero_comm_stats cs = ZERO_COMM_STATS_INIT;
        zero_comm_stats_get(v[k].e, &cs);
        if (rank == 0)
            printf("  %s %9.2f ms  = %.3f x MPI_Allreduce (median of per-rep ratios; %llu reduce-scatters in %llu "
                   "passes)\n",
                   v[k].label, v[k].t[reps / 2] * 1e3, v[k].ratio[reps / 2],
                   (unsigned long long)cs.reduce_scatter_calls, (unsigned long long)cs.reduction_passes);
        if (rank == 0 && v[k].stage1)
            printf("      (its whole boundary step with AdamW and the all-gather: %.2f ms)\n", v[k].wall[reps / 2] * 1e3);
        if (rank == 0 && !v[k].stage1)
            printf("      busiest rank's CPU %.2f ms = %.3f x the all-reduce's\n", v[k].cpu[reps / 2] * 1e3,
                   v[k].cpu[reps / 2] / (c_ar[reps / 2] > 0 ? c_ar[reps / 2] : 1e-12));
    }
    if (rank == 0)
        printf("  (1-minute load average at the end: %.2f on %ld cores; target <= 0.6, floor 0.5)\n", bench_loadavg1(),
               sysconf(_SC_NPROCESSORS_ONLN));
    for (int k = 0; k < NV; k++) {
        zero_engine_destroy(v[k].e);
        free(v[k].h);
        free(v[k].t);
        free(v[k].ratio);
        free(v[k].wall);
        free(v[k].cpu);
    }
    free(t_ar);
    free(c_ar);
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
