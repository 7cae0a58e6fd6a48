/* How much gradient communication stays exposed after backward, with
 * overlap_comm off and on, through libzero's public ABI.
 *
 *   mpirun -np 2 bench_overlap [--layers 16] [--mparams 8] [--layer-us 2000] [--bucket 1000000] [--reps 7]
 *                              [--compute-threads 1] [--device cpu|cuda]
 *
 * A simulated backward walks `layers` layers (one fp32 param each, mparams
 * million elements in all) from the last to the first: per layer
 * `compute-threads` threads (the main thread and T-1 helpers) each spin for
 * layer-us microseconds, standing for the compute of a backward that keeps
 * T cores busy; then the host ADDs the layer's gradient into
 * zero_grad_buffer (a real write of the whole layer) and calls
 * zero_on_grad_ready.  Then zero_step.
 *
 * Exposed communication = the time libzero spent waiting for reductions
 * (zero_comm_stats.exposed_comm_seconds): with overlap off every reduction
 * is waited for (stage0 launches them all at zero_step; stage2 reduces each
 * bucket synchronously as it fills), so that is the whole communication
 * time; with overlap on only the tail left after backward is waited for.
 * The fraction printed is exposed(on) / exposed(off), per ownership
 * (contiguous partitions, and zero_optimization.round_robin_gradients).
 *
 * CPU cost of libzero's own threads (the MPI progress thread): per step,
 * the process's CPU time minus the CPU time of the host's threads (main and
 * compute helpers, CLOCK_THREAD_CPUTIME_ID), i.e. what every other thread
 * of the process burnt; printed in ms per step and as cores (CPU / wall).
 *
 * stage2 runs with a huge gradient_accumulation_steps (every micro-step
 * reduces, no optimizer step); stage0 runs gas = 1 (one all-reduce pass and
 * an optimizer step per micro-step; the optimizer is not in the exposed
 * figure but is in the step time).  All engines live at once and every
 * repetition runs each once (interleaved, so load changes on a shared
 * machine hit all alike).  Figures: medians over repetitions of the
 * slowest rank.
 *
 * --device cuda: the same on CUDA engines (libzero's buffers, reductions
 * and optimizer on the GPU, local rank % GPUs) over MPI behind libzero's
 * staging layer, so the ranks may share one GPU; the host writes each
 * layer's gradient into a host buffer registered as the param's `grad`,
 * which libzero copies to the device at zero_on_grad_ready.
 *
 * Cores: the figures mean "a core per thread" only when each rank may run
 * on T + 1 cores (its compute threads and the MPI progress thread).
 * mpirun binds each of 2 ranks to one core by default (Open MPI: --bind-to
 * core for np <= 2), which puts all of a rank's threads on that core; the
 * header line prints the cores each rank may use (sched_getaffinity, the
 * fewest over ranks) and a WARNING when they are fewer than T + 1: run
 * with `mpirun --bind-to none` then. */
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_engine.h"
#include "bench_timing.h"
#include "zero.h"

enum { NCFG = 8, MAXT = 16 };

typedef struct cfg {
    const char *plugin;
    int overlap, round_robin;
    zero_engine *e;
    zero_param **h;
    float **host_grads; /* --device cuda: one host gradient buffer per layer */
    double *t_step, *t_exposed, *t_bwd, *t_cpu;
} cfg;

/* ---- the compute threads: helpers spin in step with the main thread ---- */
static pthread_barrier_t bar_start, bar_end;
static double spin_us;
static int helpers_stop;
static double helper_cpu[MAXT];

static double thread_cpu_s(void) { return bench_clock_s(CLOCK_THREAD_CPUTIME_ID); }
static double process_cpu_s(void) { return bench_clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static void *helper_main(void *arg) {
    const int i = (int)(size_t)arg;
    for (;;) {
        pthread_barrier_wait(&bar_start);
        if (helpers_stop) break;
        bench_busy_us(spin_us);
        helper_cpu[i] = thread_cpu_s();
        pthread_barrier_wait(&bar_end);
    }
    return NULL;
}

/* One layer's compute on T threads (T - 1 helpers plus the caller). */
static void compute(int T, double us) {
    if (T <= 1) {
        bench_busy_us(us);
        return;
    }
    spin_us = us;
    pthread_barrier_wait(&bar_start);
    bench_busy_us(us);
    pthread_barrier_wait(&bar_end);
}

static double host_threads_cpu(int T) {
    double s = thread_cpu_s();
    for (int i = 1; i < T; i++) s += helper_cpu[i];
    return s;
}

static void setup(cfg *c, int layers, size_t per, long long bucket, int cuda) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.0001}},"
             " \"zero_optimization\": {\"overlap_comm\": %s, \"reduce_bucket_size\": %lld,"
             " \"round_robin_gradients\": %s}}",
             strcmp(c->plugin, "stage2") == 0 ? 1000000 : 1, c->overlap ? "true" : "false", bucket,
             c->round_robin ? "true" : "false");
    c->h = calloc((size_t)layers, sizeof *c->h);
    if (!cuda) {
        c->e = bench_engine_flat(json, c->plugin, layers, per, "layer", c->h);
        return;
    }
    c->host_grads = calloc((size_t)layers, sizeof *c->host_grads);
    for (int l = 0; l < layers; l++) c->host_grads[l] = calloc(per ? per : 1, sizeof(float));
    c->e = bench_engine_flat_cuda(json, c->plugin, layers, per, "layer", c->h, c->host_grads);
}

/* One micro-step; returns this rank's (backward, step, exposed, libzero CPU) seconds. */
static void run_once(cfg *c, int layers, size_t per, double layer_us, int T, double out[4]) {
    zero_comm_stats before = ZERO_COMM_STATS_INIT, after = ZERO_COMM_STATS_INIT;
    zero_comm_stats_get(c->e, &before);
    MPI_Barrier(MPI_COMM_WORLD);
    compute(T, 0); /* helpers' CPU clocks up to date */
    const double cpu0 = process_cpu_s() - host_threads_cpu(T);
    double t0 = bench_now_s();
    zero_status s;
    for (int l = layers - 1; l >= 0; l--) {
        compute(T, layer_us);
        void *buf;
        if ((s = zero_grad_buffer(c->e, c->h[l], &buf)) != ZERO_OK) bench_die("grad_buffer", c->e, s);
        float *g = buf;
        for (size_t i = 0; i < per; i++) g[i] += 1e-6f; /* the layer's gradient */
        if ((s = zero_on_grad_ready(c->e, c->h[l], NULL)) != ZERO_OK) bench_die("on_grad_ready", c->e, s);
    }
    double t1 = bench_now_s();
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    if ((s = zero_step(c->e, NULL, &r)) != ZERO_OK) bench_die("step", c->e, s);
    double t2 = bench_now_s();
    compute(T, 0);
    const double cpu1 = process_cpu_s() - host_threads_cpu(T);
    zero_comm_stats_get(c->e, &after);
    out[0] = t1 - t0;
    out[1] = t2 - t0;
    out[2] = after.exposed_comm_seconds - before.exposed_comm_seconds;
    out[3] = cpu1 - cpu0;
}

int main(int argc, char **argv) {
    int provided = 0, reps = 7, layers = 16, T = 1, cuda = 0;
    double mparams = 8, layer_us = 2000;
    long long bucket = 1000000; /* elements; DeepSpeed's 5e8 would make one bucket of this model */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    for (int i = 1; i + 1 < argc; ++i) {
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers")) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mparams")) mparams = atof(argv[++i]);
        else if (!strcmp(argv[i], "--layer-us")) layer_us = atof(argv[++i]);
        else if (!strcmp(argv[i], "--bucket")) bucket = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--compute-threads")) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device")) cuda = !strcmp(argv[++i], "cuda");
    }
    if (reps < 1) reps = 1;
    if (reps > 64) reps = 64;
    if (T < 1) T = 1;
    if (T > MAXT) T = MAXT;
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    /* the cores this rank may run on (the fewest over ranks): see the top */
    int cores = 0;
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (sched_getaffinity(0, sizeof mask, &mask) == 0) cores = CPU_COUNT(&mask);
    if (cores < 1) cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    MPI_Allreduce(MPI_IN_PLACE, &cores, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    pthread_t helpers[MAXT];
    if (T > 1) {
        pthread_barrier_init(&bar_start, NULL, (unsigned)T);
        pthread_barrier_init(&bar_end, NULL, (unsigned)T);
        for (int i = 1; i < T; i++) pthread_create(&helpers[i], NULL, helper_main, (void *)(size_t)i);
    }
    const size_t per = (size_t)(mparams * 1e6) / (size_t)layers;
    cfg cs[NCFG];
    memset(cs, 0, sizeof cs);
    for (int k = 0; k < NCFG; k++) { /* (plugin, ownership) pairs, off then on */
        cs[k].plugin = k < 4 ? "stage0" : "stage2";
        cs[k].round_robin = (k / 2) % 2;
        cs[k].overlap = k % 2;
        setup(&cs[k], layers, per, bucket, cuda);
        cs[k].t_bwd = calloc((size_t)reps, sizeof(double));
        cs[k].t_step = calloc((size_t)reps, sizeof(double));
        cs[k].t_exposed = calloc((size_t)reps, sizeof(double));
        cs[k].t_cpu = calloc((size_t)reps, sizeof(double));
    }
    double ratio[NCFG / 2][64];
    for (int it = -1; it < reps; it++) { /* -1: warm-up */
        for (int k = 0; k < NCFG; k++) {
            double o[4];
            run_once(&cs[k], layers, per, layer_us, T, o);
            if (it < 0) continue;
            cs[k].t_bwd[it] = bench_slowest(o[0]);
            cs[k].t_step[it] = bench_slowest(o[1]);
            cs[k].t_exposed[it] = bench_slowest(o[2]);
            cs[k].t_cpu[it] = bench_slowest(o[3]);
        }
        if (it >= 0)
            for (int p = 0; p < NCFG / 2; p++)
                ratio[p][it] = cs[2 * p + 1].t_exposed[it] / (cs[2 * p].t_exposed[it] > 0 ? cs[2 * p].t_exposed[it] : 1e-12);
    }
    if (rank == 0)
        printf("%s engine, N=%d, %d layers x %zu floats (%.1f MB of gradients), %.0f us of compute per layer on %d thread%s "
               "(%.1f ms of backward compute), reduce_bucket_size %lld, reps=%d, cores per rank %d (affinity, fewest "
               "over ranks)\n",
               cuda ? "CUDA (MPI staged)" : "CPU", world, layers, per, (double)per * layers * 4 / 1048576.0, layer_us, T, T > 1 ? "s" : "",
               layer_us * layers / 1e3, bucket, reps, cores);
    if (rank == 0 && cores < T + 1)
        printf("  WARNING: a rank may run on %d core%s for %d compute thread%s and the progress thread: they share "
               "cores, so the figures measure that contention, not overlap (mpirun binds 2 ranks to one core each "
               "by default: pass --bind-to none)\n",
               cores, cores == 1 ? "" : "s", T, T > 1 ? "s" : "");
    double step_med[NCFG];
    for (int k = 0; k < NCFG; k++) {
        bench_sort(cs[k].t_bwd, (size_t)reps);
        bench_sort(cs[k].t_step, (size_t)reps);
        bench_sort(cs[k].t_exposed, (size_t)reps);
        bench_sort(cs[k].t_cpu, (size_t)reps);
        step_med[k] = cs[k].t_step[reps / 2];
        if (rank == 0)
            printf("  %s %-11s overlap_comm=%-5s  backward %8.2f ms  +zero_step %8.2f ms  exposed comm %8.2f ms  "
                   "libzero threads' CPU %7.2f ms (%.2f cores)\n",
                   cs[k].plugin, cs[k].round_robin ? "round-robin" : "contiguous", cs[k].overlap ? "true" : "false",
                   cs[k].t_bwd[reps / 2] * 1e3, cs[k].t_step[reps / 2] * 1e3, cs[k].t_exposed[reps / 2] * 1e3,
                   cs[k].t_cpu[reps / 2] * 1e3, cs[k].t_cpu[reps / 2] / (step_med[k] > 0 ? step_med[k] : 1));
    }
    if (rank == 0) printf("  (1-minute load average at the end: %.2f on %ld cores)\n", bench_loadavg1(), sysconf(_SC_NPROCESSORS_ONLN));
    for (int p = 0; p < NCFG / 2; p++) {
        bench_sort(ratio[p], (size_t)reps);
        if (rank == 0)
            printf("  => %s %-11s: exposed fraction with overlap on = %.3f of the off case (median of per-rep ratios); "
                   "step time on/off = %.3f\n",
                   cs[2 * p].plugin, cs[2 * p].round_robin ? "round-robin" : "contiguous", ratio[p][reps / 2],
                   step_med[2 * p + 1] / step_med[2 * p]);
    }
    if (T > 1) {
        helpers_stop = 1;
        pthread_barrier_wait(&bar_start);
        for (int i = 1; i < T; i++) pthread_join(helpers[i], NULL);
        pthread_barrier_destroy(&bar_start);
        pthread_barrier_destroy(&bar_end);
    }
    for (int k = 0; k < NCFG; k++) {
        zero_engine_destroy(cs[k].e);
        free(cs[k].h);
        for (int l = 0; cs[k].host_grads && l < layers; l++) free(cs[k].host_grads[l]);
        free(cs[k].host_grads);
        free(cs[k].t_bwd);
        free(cs[k].t_step);
        free(cs[k].t_exposed);
        free(cs[k].t_cpu);
    }
    MPI_Finalize();
    return 0;
}
