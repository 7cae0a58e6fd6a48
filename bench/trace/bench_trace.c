/* What libzero's trace points cost (issue 23): step time of one engine per
 * variant of the library, all in one process, interleaved:
 *   out  libzero built with ZERO_TRACE_COMPILED_OUT (no trace point at all)
 *   off  the real libzero, tracing off (each trace point: one branch)
 *   on   the real libzero with "trace": {"path": ...} (recording)
 * The two libraries are dlopen'ed RTLD_LOCAL side by side (plugins do not
 * link libzero, so each engine's plugin talks to its own core).
 *
 *   mpirun -np 2 bench_trace [--params 256] [--per 4096] [--steps 20] [--reps 9]
 *
 * A step: backward over `params` fp32 params (a real add into each
 * gradient buffer, then zero_on_grad_ready, last param first), then
 * zero_step (stage2, gas 1: reduce-scatter per bucket, AdamW, all-gather).
 * Many small params is the trace points' worst case (one hook span each).
 * Figures: per repetition the mean step time of the slowest rank, per
 * variant; printed are the medians and the median of the per-repetition
 * ratios (paired, so a load change hits both sides of a ratio alike). */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_timing.h"
#include "trace.h" /* the bench's own copy of the tracer (trace.c), for the per-point cost */
#include "zero.h"

typedef struct api {
    void *dl;
    zero_status (*create)(const zero_engine_options *, zero_engine **, char *, size_t);
    zero_status (*reg)(zero_engine *, const zero_param_desc *, zero_param **);
    zero_status (*done)(zero_engine *);
    zero_status (*grad_buffer)(zero_engine *, zero_param *, void **);
    zero_status (*ready)(zero_engine *, zero_param *, void *);
    zero_status (*step)(zero_engine *, const zero_step_args *, zero_step_result *);
    void (*destroy)(zero_engine *);
    const char *(*last_error)(const zero_engine *);
} api;

static void die(const char *what, const char *why) {
    fprintf(stderr, "bench_trace: %s: %s\n", what, why ? why : "");
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void load(api *a, const char *path) {
    a->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!a->dl) die(path, dlerror());
#define SYM(f, n) *(void **)&a->f = dlsym(a->dl, n); if (!a->f) die(n, dlerror());
    SYM(create, "zero_engine_create") SYM(reg, "zero_register_param") SYM(done, "zero_params_done")
    SYM(grad_buffer, "zero_grad_buffer") SYM(ready, "zero_on_grad_ready") SYM(step, "zero_step")
    SYM(destroy, "zero_engine_destroy") SYM(last_error, "zero_last_error")
#undef SYM
}

typedef struct eng {
    const api *a;
    zero_engine *e;
    zero_param **h;
} eng;

static void setup(eng *g, const api *a, int nparams, size_t per, const char *trace_prefix) {
    char json[768], tr[400] = "";
    if (trace_prefix) snprintf(tr, sizeof tr, ", \"trace\": {\"path\": \"%s\"}", trace_prefix);
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.0001}},"
             " \"zero_optimization\": {\"stage\": 2, \"overlap_comm\": true, \"reduce_bucket_size\": 65536}%s}", tr);
    MPI_Comm comm = MPI_COMM_WORLD;
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &comm;
    char err[512];
    g->a = a;
    if (a->create(&o, &g->e, err, sizeof err) != ZERO_OK) die("engine", err);
    g->h = calloc((size_t)nparams, sizeof *g->h);
    float *init = calloc(per, sizeof(float));
    for (int i = 0; i < nparams; i++) {
        char name[32];
        snprintf(name, sizeof name, "p%d", i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = init;
        d.numel = per;
        if (a->reg(g->e, &d, &g->h[i]) != ZERO_OK) die("register", a->last_error(g->e));
    }
    if (a->done(g->e) != ZERO_OK) die("params_done", a->last_error(g->e));
    free(init);
}

static void teardown(eng *g) {
    g->a->destroy(g->e);
    free(g->h);
    g->e = NULL;
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Mean seconds per step over `steps`, slowest rank; *cpu: the host
 * thread's CPU seconds per step (slowest rank), which a loaded machine
 * disturbs far less than wall time. */
static double run(eng *g, int nparams, size_t per, int steps, double *cpu) {
    MPI_Barrier(MPI_COMM_WORLD);
    double c0 = thread_cpu_s();
    double t0 = bench_now_s();
    for (int s = 0; s < steps; s++) {
        for (int i = nparams - 1; i >= 0; i--) {
            float *buf = NULL;
            if (g->a->grad_buffer(g->e, g->h[i], (void **)&buf) != ZERO_OK) die("grad_buffer", g->a->last_error(g->e));
            for (size_t k = 0; k < per; k++) buf[k] += 1e-3f * (float)((k + (size_t)i) & 7);
            if (g->a->ready(g->e, g->h[i], NULL) != ZERO_OK) die("ready", g->a->last_error(g->e));
        }
        if (g->a->step(g->e, NULL, NULL) != ZERO_OK) die("step", g->a->last_error(g->e));
    }
    double t[2] = {(bench_now_s() - t0) / steps, (thread_cpu_s() - c0) / steps}, w[2];
    MPI_Allreduce(t, w, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (cpu) *cpu = w[1];
    return w[0];
}

/* ---- the cost of one trace point while tracing is off ------------------- */
static volatile long sink;
static __attribute__((noinline)) void with_point(long i) {
    ZERO_TRACE_SCOPE("bench", "bench", "i", i, NULL, 0);
    sink += i;
}
static __attribute__((noinline)) void without_point(long i) { sink += i; }

/* Nanoseconds one disabled scope adds to a call: median of 9 rounds of
 * 2e7 calls each way (a difference of two loops; may come out ~0). */
static double point_ns(void) {
    const long n = 20000000;
    double d[9];
    for (int r = 0; r < 9; r++) {
        double t0 = bench_now_s();
        for (long i = 0; i < n; i++) with_point(i);
        double t1 = bench_now_s();
        for (long i = 0; i < n; i++) without_point(i);
        double t2 = bench_now_s();
        d[r] = ((t1 - t0) - (t2 - t1)) / (double)n * 1e9;
    }
    bench_sort(d, 9);
    return d[4] > 0 ? d[4] : 0;
}

/* Events in a trace file: one per trace point executed while on. */
static long count_events(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long n = 0;
    int c, state = 0; /* match "ph":"X" and "ph":"i" */
    const char *pat = "\"ph\":\"";
    while ((c = fgetc(f)) != EOF) {
        if (pat[state] == '\0') {
            n += c == 'X' || c == 'i';
            state = 0;
        }
        state = c == pat[state] ? state + 1 : (c == pat[0] ? 1 : 0);
    }
    fclose(f);
    return n;
}

static double median(double *x, int n) {
    bench_sort(x, (size_t)n);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int nparams = 256, steps = 20, reps = 9;
    size_t per = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--params")) nparams = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--per")) per = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    }
    unsetenv("ZERO_TRACE"); /* "off" must be off whatever the caller's environment says */
    api traced, notrace;
    const char *lib = getenv("BENCH_TRACE_LIB"); /* for null experiments */
    load(&traced, lib && lib[0] ? lib : BENCH_LIB_TRACED);
    /* BENCH_TRACE_BASELINE=lib: another baseline (a copy of the traced
     * library gives the null experiment: its ratio should be 1) */
    const char *base = getenv("BENCH_TRACE_BASELINE");
    load(&notrace, base && base[0] ? base : BENCH_LIB_NOTRACE);
    char prefix[256];
    snprintf(prefix, sizeof prefix, "/tmp/bench_trace.%d", (int)getpid());
    eng out, off, on;
    double events_per_step = 0;
    double *t_out = calloc((size_t)reps, sizeof(double)), *t_off = calloc((size_t)reps, sizeof(double)),
           *t_on = calloc((size_t)reps, sizeof(double)), *r_off = calloc((size_t)reps, sizeof(double)),
           *r_on = calloc((size_t)reps, sizeof(double)), *c_out = calloc((size_t)reps, sizeof(double)),
           *c_off = calloc((size_t)reps, sizeof(double)), *c_on = calloc((size_t)reps, sizeof(double)),
           *q_off = calloc((size_t)reps, sizeof(double)), *q_on = calloc((size_t)reps, sizeof(double));
    for (int r = 0; r < reps; r++) {
        /* fresh engines each repetition, made and run in alternating order,
         * so that neither creation order nor drift favours one variant */
        if (r % 2) {
            setup(&off, &traced, nparams, per, NULL);
            setup(&out, &notrace, nparams, per, NULL);
        } else {
            setup(&out, &notrace, nparams, per, NULL);
            setup(&off, &traced, nparams, per, NULL);
        }
        run(&out, nparams, per, 2, NULL); /* warm-up: first touch of every buffer */
        run(&off, nparams, per, 2, NULL);
        if (r % 2) {
            t_off[r] = run(&off, nparams, per, steps, &c_off[r]);
            t_out[r] = run(&out, nparams, per, steps, &c_out[r]);
        } else {
            t_out[r] = run(&out, nparams, per, steps, &c_out[r]);
            t_off[r] = run(&off, nparams, per, steps, &c_off[r]);
        }
        /* "on" runs after the others: the tracer is per process (per library
         * copy), so "off" must not run while it is on */
        char pr[300];
        snprintf(pr, sizeof pr, "%s.rep%d", prefix, r);
        setup(&on, &traced, nparams, per, pr);
        run(&on, nparams, per, 2, NULL); /* warm-up */
        t_on[r] = run(&on, nparams, per, steps, &c_on[r]);
        teardown(&on);
        teardown(&off);
        teardown(&out);
        if (rank == 0) {
            char f[340];
            snprintf(f, sizeof f, "%s.rank0.json", pr);
            if (r == 0) events_per_step = (double)count_events(f) / (steps + 2);
            unlink(f);
        } else {
            char f[340];
            snprintf(f, sizeof f, "%s.rank%d.json", pr, rank);
            unlink(f);
        }
        r_off[r] = t_off[r] / t_out[r];
        r_on[r] = t_on[r] / t_out[r];
        q_off[r] = c_off[r] / c_out[r];
        q_on[r] = c_on[r] / c_out[r];
    }
    if (rank == 0) {
        int world;
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        printf("bench_trace: %d ranks, stage2, %d params x %zu fp32, %d steps x %d reps, load %.2f\n", world, nparams,
               per, steps, reps, bench_loadavg1());
        double mo = median(t_out, reps), mf = median(t_off, reps), mn = median(t_on, reps);
        printf("step ms (median): compiled out %.3f, tracing off %.3f, tracing on %.3f\n", mo * 1e3, mf * 1e3,
               mn * 1e3);
        printf("ratio off/out: %.4f (median of paired ratios %.4f)   ratio on/out: %.4f (paired %.4f)\n", mf / mo,
               median(r_off, reps), mn / mo, median(r_on, reps));
        double cf = median(q_off, reps), cn = median(q_on, reps);
        printf("host-thread CPU ms per step (median): compiled out %.3f, off %.3f, on %.3f\n", median(c_out, reps) * 1e3,
               median(c_off, reps) * 1e3, median(c_on, reps) * 1e3);
        printf("host CPU ratio (median of paired ratios): off/out %.4f, on/out %.4f\n", cf, cn);
        printf("tracing off costs %+.2f %% of step time (wall), %+.2f %% of host CPU (target < 1 %%)\n",
               (median(r_off, reps) - 1.0) * 100.0, (cf - 1.0) * 100.0);
        /* The same question answered without the load's noise: trace points
         * executed per step (= events one traced step records, rank 0) x the
         * cost of one disabled point, against the compiled-out step time. */
        double ns = point_ns();
        double co = median(c_out, reps);
        printf("bound: %.0f trace points per step x %.2f ns per disabled point = %.1f us = %.4f %% of the "
               "compiled-out step's host CPU (%.3f ms), %.4f %% of its wall time (%.3f ms)\n", events_per_step, ns,
               events_per_step * ns * 1e-3, events_per_step * ns * 1e-9 / co * 100.0, co * 1e3,
               events_per_step * ns * 1e-9 / mo * 100.0, mo * 1e3);
    }
    MPI_Finalize();
    return 0;
}
