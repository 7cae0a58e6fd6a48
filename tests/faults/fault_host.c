/* The fault catalogue's host (tests/faults/README.md): a small trainer over
 * abi/zero.h that a driver (fault_run.py) starts under mpirun and then
 * disturbs from outside (SIGSTOP, kill -9) or from inside (a slow rank, a
 * NaN gradient).  Each rank reports what it saw in files under --out, so
 * that the driver can judge every surviving rank even when the job never
 * finishes normally:
 *   pid.R     this rank's pid (written once the engine exists);
 *   step.R    the last step that completed (rewritten each step);
 *   result.R  one line per event, "key=value" fields:
 *     fail  status=<ZERO_...> call=<fn> step=<k> t=<CLOCK_REALTIME s> wall=<s in the call>
 *           cpu=<process CPU s in the call> msg=<last error>
 *     slow  step=<k> wall=<s> cpu=<s>       (the step a slow peer held up)
 *     step  k=<k> taken=<0|1> overflow=<0|1> norm=<g>   (with --print-steps)
 *     done  steps=<n> step_wall=<median s of a step>
 *     destroyed wall=<s zero_engine_destroy took>
 * After a failure the host destroys the engine and, because MPI_Finalize
 * would wait for a peer that stopped answering, stays alive until the
 * driver ends the job (--linger, seconds), so that no rank's exit makes
 * mpirun kill the others before they have reported.
 *
 * Options: --plugin P --steps N --out DIR [--dtype f32|f16|bf16]
 *   [--timeout-config S] (the config's comm_timeout; the environment's
 *   ZERO_COMM_TIMEOUT applies otherwise)
 *   [--slow-rank R --slow-step K --slow-s S] (rank R sleeps S s before step K;
 *   K = -1: before zero_engine_create)
 *   [--nan-rank R --nan-step K --nan-kind nan|inf]
 *   [--save-dir D --save-every K] [--step-sleep-ms M] [--print-steps]
 *   [--linger S] [--numel N] */
#include <math.h>
#include <stdarg.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_timing.h"
#include "host_util.h"

typedef struct opts {
    const char *plugin, *out, *dtype, *save_dir, *nan_kind;
    int steps, slow_rank, slow_step, nan_rank, nan_step, save_every, print_steps, step_sleep_ms;
    double slow_s, timeout_config, linger;
    long numel;
} opts;

static int rank_ = 0, world_ = 1;
static opts o_;

static double real_now(void) { return bench_clock_s(CLOCK_REALTIME); }
static double mono_now(void) { return bench_now_s(); }
static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}
static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Append one line to DIR/<name>.R (or rewrite it when append is 0). */
static void report(const char *name, int append, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(const char *name, int append, const char *fmt, ...) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%d", o_.out, name, rank_);
    FILE *f = fopen(path, append ? "a" : "w");
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fflush(f);
    fsync(fileno(f));
    fclose(f);
}

static void quiet(void *user, zero_log_level lvl, int rank, const char *msg) {
    (void)user;
    (void)rank;
    if (lvl == ZERO_LOG_ERROR) fprintf(stderr, "[fault_host rank %d] %s\n", rank_, msg);
}

static int parse(int argc, char **argv) {
    opts d = {.plugin = "stage2", .out = ".", .dtype = "f32", .nan_kind = "nan", .steps = 20, .slow_rank = -1,
              .nan_rank = -1, .nan_step = -1, .slow_step = -1, .timeout_config = -1, .linger = 60, .numel = 20000};
    o_ = d;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--print-steps")) { o_.print_steps = 1; continue; }
        if (!v) return fprintf(stderr, "fault_host: %s needs a value\n", a), -1;
        ++i;
        if (!strcmp(a, "--plugin")) o_.plugin = v;
        else if (!strcmp(a, "--out")) o_.out = v;
        else if (!strcmp(a, "--dtype")) o_.dtype = v;
        else if (!strcmp(a, "--steps")) o_.steps = atoi(v);
        else if (!strcmp(a, "--slow-rank")) o_.slow_rank = atoi(v);
        else if (!strcmp(a, "--slow-step")) o_.slow_step = atoi(v);
        else if (!strcmp(a, "--slow-s")) o_.slow_s = atof(v);
        else if (!strcmp(a, "--nan-rank")) o_.nan_rank = atoi(v);
        else if (!strcmp(a, "--nan-step")) o_.nan_step = atoi(v);
        else if (!strcmp(a, "--nan-kind")) o_.nan_kind = v;
        else if (!strcmp(a, "--save-dir")) o_.save_dir = v;
        else if (!strcmp(a, "--save-every")) o_.save_every = atoi(v);
        else if (!strcmp(a, "--step-sleep-ms")) o_.step_sleep_ms = atoi(v);
        else if (!strcmp(a, "--timeout-config")) o_.timeout_config = atof(v);
        else if (!strcmp(a, "--linger")) o_.linger = atof(v);
        else if (!strcmp(a, "--numel")) o_.numel = atol(v);
        else return fprintf(stderr, "fault_host: unknown option %s\n", a), -1;
    }
    return 0;
}

/* A failed call: report it on this rank, destroy the engine, linger. */
static int fail(zero_engine *e, zero_status s, const char *call, int step, double t0_mono, double c0) {
    double wall = mono_now() - t0_mono, cpu = cpu_now() - c0;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", zero_last_error(e));
    for (char *p = msg; *p; ++p)
        if (*p == '\n') *p = ' ';
    report("result", 1, "fail status=%s call=%s step=%d t=%.3f wall=%.3f cpu=%.3f msg=%s",
           zero_status_string(s), call, step, real_now(), wall, cpu, msg);
    double d0 = mono_now();
    zero_engine_destroy(e);
    report("result", 1, "destroyed wall=%.3f", mono_now() - d0);
    /* MPI_Finalize would wait for the peer that stopped answering; the
     * driver ends the job once every survivor has reported. */
    sleep_s(o_.linger);
    return 3;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    if (parse(argc, argv) != 0) MPI_Abort(MPI_COMM_WORLD, 2);

    const int is16 = strcmp(o_.dtype, "f32") != 0;
    const zero_dtype dt = !strcmp(o_.dtype, "f16") ? ZERO_DTYPE_F16 : !strcmp(o_.dtype, "bf16") ? ZERO_DTYPE_BF16
                                                                                                  : ZERO_DTYPE_F32;
    char json[1024], extra[128] = "";
    if (o_.timeout_config >= 0) snprintf(extra, sizeof extra, ", \"comm_timeout\": %g", o_.timeout_config);
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}},"
             " \"zero_optimization\": {\"reduce_bucket_size\": %ld, \"overlap_comm\": true}%s%s%s}",
             o_.numel / 4, !strcmp(o_.dtype, "f16") ? ", \"fp16\": {\"enabled\": true, \"initial_scale_power\": 8}"
                           : !strcmp(o_.dtype, "bf16") ? ", \"bf16\": {\"enabled\": true}"
                                                       : "",
             extra, "");
    zero_engine *e = NULL;
    char err[1024];
    if (o_.slow_step == -1 && rank_ == o_.slow_rank) sleep_s(o_.slow_s); /* late to zero_engine_create */
    const double tc = mono_now(), cc = cpu_now();
    zero_status s = th_engine_create(json, o_.plugin, 0, quiet, NULL, &e, err, sizeof err);
    if (s != ZERO_OK) {
        for (char *p = err; *p; ++p)
            if (*p == '\n') *p = ' ';
        report("result", 1, "fail status=%s call=zero_engine_create step=-1 t=%.3f wall=%.3f cpu=%.3f msg=%s",
               zero_status_string(s), real_now(), mono_now() - tc, cpu_now() - cc, err);
        report("result", 1, "destroyed wall=0");
        /* a timed-out creation leaves a collective pending: MPI_Finalize
         * would wait for it; linger like fail() and let the driver end it */
        if (s == ZERO_ERR_TIMEOUT) {
            sleep_s(o_.linger);
            return 3;
        }
        MPI_Finalize();
        return 3;
    }
    report("pid", 0, "%d", (int)getpid());

    /* Four parameters of awkward sizes; values 0.01 * sin(i). */
    enum { NP = 4 };
    const size_t numel[NP] = {(size_t)o_.numel / 2, (size_t)o_.numel / 3, (size_t)o_.numel / 6 - 7, 7};
    zero_param *h[NP];
    void *init[NP];
    const size_t es = is16 ? 2 : 4;
    for (int i = 0; i < NP; ++i) {
        init[i] = calloc(numel[i], es);
        if (!is16)
            for (size_t j = 0; j < numel[i]; ++j) ((float *)init[i])[j] = 0.01f * sinf((float)(j + 131 * i));
        char name[32];
        snprintf(name, sizeof name, "layer%d", i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = init[i];
        d.numel = numel[i];
        d.dtype = dt;
        if ((s = zero_register_param(e, &d, &h[i])) != ZERO_OK)
            return fail(e, s, "zero_register_param", -1, mono_now(), cpu_now());
    }
    double t0 = mono_now(), c0 = cpu_now();
    if ((s = zero_params_done(e)) != ZERO_OK) return fail(e, s, "zero_params_done", -1, t0, c0);
    for (int i = 0; i < NP; ++i) free(init[i]);

    double *walls = calloc((size_t)o_.steps + 1, sizeof *walls);
    for (int k = 0; k < o_.steps; ++k) {
        if (k == o_.slow_step && rank_ == o_.slow_rank) sleep_s(o_.slow_s);
        if (o_.step_sleep_ms > 0) sleep_s(o_.step_sleep_ms * 1e-3);
        t0 = mono_now();
        c0 = cpu_now();
        void *ptrs[NP];
        if ((s = zero_gather(e, h, NP, ptrs)) != ZERO_OK) return fail(e, s, "zero_gather", k, t0, c0);
        if ((s = zero_release(e, h, NP)) != ZERO_OK) return fail(e, s, "zero_release", k, t0, c0);
        for (int i = NP - 1; i >= 0; --i) { /* backward: last layer first */
            void *g = NULL;
            if ((s = zero_grad_buffer(e, h[i], &g)) != ZERO_OK) return fail(e, s, "zero_grad_buffer", k, t0, c0);
            if (!is16) {
                float *gf = g;
                for (size_t j = 0; j < numel[i]; ++j) gf[j] += 1e-3f * cosf((float)(j + 17 * k + rank_));
            }
            if (k == o_.nan_step && rank_ == o_.nan_rank && i == 1) {
                const int inf = !strcmp(o_.nan_kind, "inf");
                if (dt == ZERO_DTYPE_F32) ((float *)g)[3] = inf ? INFINITY : NAN;
                else if (dt == ZERO_DTYPE_F16) ((uint16_t *)g)[3] = inf ? 0x7c00 : 0x7e00;
                else ((uint16_t *)g)[3] = inf ? 0x7f80 : 0x7fc0;
            }
            if ((s = zero_on_grad_ready(e, h[i], NULL)) != ZERO_OK) return fail(e, s, "zero_on_grad_ready", k, t0, c0);
        }
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        if ((s = zero_step(e, NULL, &r)) != ZERO_OK) return fail(e, s, "zero_step", k, t0, c0);
        if (o_.save_dir && o_.save_every > 0 && (k + 1) % o_.save_every == 0 &&
            (s = zero_save(e, o_.save_dir)) != ZERO_OK)
            return fail(e, s, "zero_save", k, t0, c0);
        walls[k] = mono_now() - t0;
        if (k == o_.slow_step && rank_ != o_.slow_rank)
            report("result", 1, "slow step=%d wall=%.4f cpu=%.4f", k, walls[k], cpu_now() - c0);
        if (o_.print_steps)
            report("result", 1, "step k=%d taken=%d overflow=%d norm=%g scale=%g", k, r.taken, r.overflow,
                   r.grad_norm, r.loss_scale);
        report("step", 0, "%d", k);
    }
    qsort(walls, (size_t)o_.steps, sizeof *walls, cmp_d);
    report("result", 1, "done steps=%d step_wall=%.6f", o_.steps, o_.steps ? walls[o_.steps / 2] : 0.0);
    free(walls);
    double d0 = mono_now();
    zero_engine_destroy(e);
    report("result", 1, "destroyed wall=%.3f", mono_now() - d0);
    MPI_Finalize();
    return 0;
}
