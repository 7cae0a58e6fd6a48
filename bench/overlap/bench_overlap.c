/* How much gradient communication stays exposed after backward, with
 * overlap_comm off and on, through libzero's public ABI.
 *
 *   mpirun -np 2 bench_overlap [--layers 16] [--mparams 8] [--layer-us 2000] [--bucket 1000000] [--reps 7]
 *
 * A simulated backward walks `layers` layers (one fp32 param each, mparams
 * million elements in all) from the last to the first: per layer a busy
 * loop of layer-us microseconds stands for the compute, then the host ADDs
 * its gradient into zero_grad_buffer (a real write of the whole layer) and
 * calls zero_on_grad_ready.  Then zero_step.
 *
 * Exposed communication = the time libzero spent waiting for reductions
 * (zero_comm_stats.exposed_comm_seconds): with overlap off every reduction
 * is waited for (stage0 launches them all at zero_step; stage2 reduces each
 * bucket synchronously as it fills), so that is the whole communication
 * time; with overlap on only the tail left after backward is waited for.
 * The fraction printed is exposed(on) / exposed(off).
 *
 * stage2 runs with a huge gradient_accumulation_steps (every micro-step
 * reduces, no optimizer step); stage0 runs gas = 1 (one all-reduce pass and
 * an optimizer step per micro-step; the optimizer is not in the exposed
 * figure but is in the step time).  All four engines live at once and every
 * repetition runs each once (interleaved, so load changes on a shared machine
 * hit all alike).  Figures: medians over repetitions of the slowest rank. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_engine.h"
#include "bench_timing.h"
#include "zero.h"

typedef struct cfg {
    const char *plugin;
    int overlap;
    zero_engine *e;
    zero_param **h;
    double *t_step, *t_exposed, *t_bwd;
} cfg;

static void setup(cfg *c, int layers, size_t per, long long bucket) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.0001}},"
             " \"zero_optimization\": {\"overlap_comm\": %s, \"reduce_bucket_size\": %lld}}",
             strcmp(c->plugin, "stage2") == 0 ? 1000000 : 1, c->overlap ? "true" : "false", bucket);
    c->h = calloc((size_t)layers, sizeof *c->h);
    c->e = bench_engine_flat(json, c->plugin, layers, per, "layer", c->h);
}

/* One micro-step; returns this rank's (backward, step, exposed) seconds. */
static void run_once(cfg *c, int layers, size_t per, double layer_us, double out[3]) {
    zero_comm_stats before = ZERO_COMM_STATS_INIT, after = ZERO_COMM_STATS_INIT;
    zero_comm_stats_get(c->e, &before);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now_s();
    zero_status s;
    for (int l = layers - 1; l >= 0; l--) {
        bench_busy_us(layer_us);
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
    zero_comm_stats_get(c->e, &after);
    out[0] = t1 - t0;
    out[1] = t2 - t0;
    out[2] = after.exposed_comm_seconds - before.exposed_comm_seconds;
}

int main(int argc, char **argv) {
    int provided = 0, reps = 7, layers = 16;
    double mparams = 8, layer_us = 2000;
    long long bucket = 1000000; /* elements; DeepSpeed's 5e8 would make one bucket of this model */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    for (int i = 1; i + 1 < argc; ++i) {
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers")) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mparams")) mparams = atof(argv[++i]);
        else if (!strcmp(argv[i], "--layer-us")) layer_us = atof(argv[++i]);
        else if (!strcmp(argv[i], "--bucket")) bucket = atoll(argv[++i]);
    }
    if (reps < 1) reps = 1;
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const size_t per = (size_t)(mparams * 1e6) / (size_t)layers;
    cfg cs[4] = {{"stage0", 0, 0, 0, 0, 0, 0}, {"stage0", 1, 0, 0, 0, 0, 0},
                 {"stage2", 0, 0, 0, 0, 0, 0}, {"stage2", 1, 0, 0, 0, 0, 0}};
    for (int k = 0; k < 4; k++) {
        setup(&cs[k], layers, per, bucket);
        cs[k].t_bwd = calloc((size_t)reps, sizeof(double));
        cs[k].t_step = calloc((size_t)reps, sizeof(double));
        cs[k].t_exposed = calloc((size_t)reps, sizeof(double));
    }
    double ratio[2][64];
    for (int it = -1; it < reps; it++) { /* -1: warm-up */
        for (int k = 0; k < 4; k++) {
            double o[3];
            run_once(&cs[k], layers, per, layer_us, o);
            if (it < 0) continue;
            cs[k].t_bwd[it] = bench_slowest(o[0]);
            cs[k].t_step[it] = bench_slowest(o[1]);
            cs[k].t_exposed[it] = bench_slowest(o[2]);
        }
        if (it >= 0 && it < 64)
            for (int p = 0; p < 2; p++)
                ratio[p][it] = cs[2 * p + 1].t_exposed[it] / (cs[2 * p].t_exposed[it] > 0 ? cs[2 * p].t_exposed[it] : 1e-12);
    }
    if (rank == 0)
        printf("N=%d, %d layers x %zu floats (%.1f MB of gradients), %.0f us of compute per layer "
               "(%.1f ms of backward compute), reduce_bucket_size %lld, reps=%d\n",
               world, layers, per, (double)per * layers * 4 / 1048576.0, layer_us, layer_us * layers / 1e3, bucket,
               reps);
    for (int k = 0; k < 4; k++) {
        bench_sort(cs[k].t_bwd, (size_t)reps);
        bench_sort(cs[k].t_step, (size_t)reps);
        bench_sort(cs[k].t_exposed, (size_t)reps);
        if (rank == 0)
            printf("  %s overlap_comm=%-5s  backward %8.2f ms   backward+zero_step %8.2f ms   exposed comm %8.2f ms\n",
                   cs[k].plugin, cs[k].overlap ? "true" : "false", cs[k].t_bwd[reps / 2] * 1e3,
                   cs[k].t_step[reps / 2] * 1e3, cs[k].t_exposed[reps / 2] * 1e3);
    }
    if (rank == 0) printf("  (1-minute load average at the end: %.2f on %ld cores)\n", bench_loadavg1(), sysconf(_SC_NPROCESSORS_ONLN));
    int nr = reps < 64 ? reps : 64;
    for (int p = 0; p < 2; p++) {
        bench_sort(ratio[p], (size_t)nr);
        if (rank == 0)
            printf("  => %s: exposed fraction with overlap on = %.3f of the off case (median of per-rep ratios); "
                   "step time on/off = %.3f\n",
                   cs[2 * p].plugin, ratio[p][nr / 2], cs[2 * p + 1].t_step[reps / 2] / cs[2 * p].t_step[reps / 2]);
    }
    for (int k = 0; k < 4; k++) {
        zero_engine_destroy(cs[k].e);
        free(cs[k].h);
        free(cs[k].t_bwd);
        free(cs[k].t_step);
        free(cs[k].t_exposed);
    }
    MPI_Finalize();
    return 0;
}
