/* (1.3) zero_step_timing_get and the wall_clock_breakdown log line.
 *
 * A host with a ~2.1M-parameter fp32 model (a step takes milliseconds, so
 * the core's bookkeeping is small next to it) drives each flat plugin for a
 * few steps and checks, through the public ABI only:
 *  - the six in-step phases add up to the step time libzero measured within
 *    5 % (in the median step, less 50 us of bookkeeping per step), and that
 *    step time agrees with the host's own clock around zero_step within 5 %
 *    (+ 0.2 ms of call overhead; in the median step, and never more than the
 *    host's in all);
 *  - each phase shows up where it must (optimizer and norm at a boundary,
 *    gather for the partitioned stages at N > 1, copy with host-owned
 *    params, a reduction at N > 1) and is 0 where it cannot happen (no
 *    optimizer inside an accumulation window);
 *  - hook time is positive and no more than the host's clock around its
 *    hook calls; LAST summed over the steps equals TOTAL;
 *  - a struct_size smaller than the struct leaves the tail alone, bad
 *    arguments are refused;
 *  - with "wall_clock_breakdown": true global rank 0 (only) logs one line
 *    every steps_per_print optimizer steps, at INFO level although
 *    ZERO_LOG_LEVEL stays at its default (warn).
 * Run under mpirun with any N (ctest: 1, 2 and 3). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "zero.h"

enum { NPARAM = 6 };
static const uint64_t kNumel[NPARAM] = {700000, 1000, 700000, 1000, 700000, 37};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The median of v[0..n) (sorted in place; a few dozen steps); 0 when empty. */
static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double x = v[j];
            v[j] = v[j - 1], v[j - 1] = x;
        }
    return n ? v[n / 2] : 0.0;
}

typedef struct log_capture {
    int breakdown_lines;
    int info_other_rank;
    char last[1024];
} log_capture;

static void capture(void *user, zero_log_level lvl, int rank, const char *msg) {
    log_capture *c = user;
    if (!strstr(msg, "wall_clock_breakdown")) return;
    if (lvl != ZERO_LOG_INFO || rank != 0) c->info_other_rank++;
    c->breakdown_lines++;
    snprintf(c->last, sizeof c->last, "%s", msg);
}

static double in_step(const zero_step_timing *t) {
    return t->exposed_comm_seconds + t->reduce_seconds + t->norm_seconds + t->optimizer_seconds + t->gather_seconds +
           t->copy_seconds;
}

typedef struct run_cfg {
    const char *plugin;
    int gas, overlap, host_owned, breakdown, steps;
} run_cfg;

static void run(const run_cfg *rc, int rank, int world) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d, \"steps_per_print\": 2,"
             " \"wall_clock_breakdown\": %s, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}},"
             " \"zero_optimization\": {\"overlap_comm\": %s, \"reduce_bucket_size\": 400000}}",
             rc->gas, rc->breakdown ? "true" : "false", rc->overlap ? "true" : "false");
    MPI_Comm comm = MPI_COMM_WORLD;
    log_capture cap = {0, 0, ""};
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.plugin = rc->plugin;
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &comm;
    o.log_fn = capture;
    o.log_user = &cap;
    zero_engine *e = NULL;
    char err[512] = "";
    CHECK(zero_engine_create(&o, &e, err, sizeof err) == ZERO_OK, "%s: %s", rc->plugin, err);
    if (!e) return;

    zero_step_timing t0 = ZERO_STEP_TIMING_INIT;
    CHECK_EQ_INT(zero_step_timing_get(e, ZERO_TIMING_TOTAL, &t0), ZERO_OK);
    CHECK(t0.micro_steps == 0 && t0.step_seconds == 0.0, "%s: figures before the first step", rc->plugin);

    float *data[NPARAM];
    zero_param *p[NPARAM];
    for (int i = 0; i < NPARAM; i++) {
        data[i] = malloc(kNumel[i] * sizeof(float));
        for (uint64_t k = 0; k < kNumel[i]; k++) data[i][k] = 0.01f * (float)((k * 7 + (uint64_t)i) % 13) - 0.06f;
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = data[i];
        d.numel = kNumel[i];
        d.flags = rc->host_owned ? ZERO_PARAM_HOST_OWNED : 0;
        CHECK_EQ_INT(zero_register_param(e, &d, &p[i]), ZERO_OK);
    }
    CHECK_EQ_INT(zero_params_done(e), ZERO_OK);

    double host_step = 0.0, host_hooks = 0.0;
    zero_step_timing sum_last = ZERO_STEP_TIMING_INIT;
    int boundaries = 0;
    double frac[256]; /* each zero_step's named share (phases / step time) */
    double hfrac[256]; /* each zero_step's time by libzero's clock / by the host's */
    int nfrac = 0, nhfrac = 0;
    for (int s = 0; s < rc->steps * rc->gas; s++) {
        double h0 = now_s();
        for (int i = NPARAM - 1; i >= 0; i--) { /* backward: last layer first */
            float *g = NULL;
            CHECK_EQ_INT(zero_grad_buffer(e, p[i], (void **)&g), ZERO_OK);
            for (uint64_t k = 0; g && k < kNumel[i]; k++) g[k] += 0.001f * (float)((k + (uint64_t)(s + rank)) % 5);
            CHECK_EQ_INT(zero_on_grad_ready(e, p[i], NULL), ZERO_OK);
        }
        host_hooks += now_s() - h0; /* includes the host's own gradient writes */
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        double s0 = now_s();
        CHECK_EQ_INT(zero_step(e, NULL, &r), ZERO_OK);
        const double host_this = now_s() - s0;
        host_step += host_this;
        zero_step_timing l = ZERO_STEP_TIMING_INIT;
        CHECK_EQ_INT(zero_step_timing_get(e, ZERO_TIMING_LAST, &l), ZERO_OK);
        CHECK_EQ_INT(l.micro_steps, 1);
        if (r.boundary) {
            boundaries++;
            CHECK(l.optimizer_seconds > 0 && l.norm_seconds > 0, "%s: boundary without optimizer (%g) or norm (%g)",
                  rc->plugin, l.optimizer_seconds, l.norm_seconds);
        } else {
            CHECK(l.optimizer_seconds == 0 && l.norm_seconds == 0 && l.gather_seconds == 0,
                  "%s: micro-step %d inside the window: optimizer %g norm %g gather %g", rc->plugin, s,
                  l.optimizer_seconds, l.norm_seconds, l.gather_seconds);
        }
        /* 50 us per step are the core's own bookkeeping: a micro-step inside
         * the window with overlap_comm off does no work and takes ~10 us
         * (ASan), of which a phase names a third; without the allowance those
         * steps are half of a gas = 2 run and the median sat on the boundary
         * steps' edge (CI failed once: stage2 N=3, 87.6 % in the median step
         * under load, 97.6 % in all) */
        if (nfrac < 256 && l.step_seconds > 0) {
            const double f = (in_step(&l) + 5e-5) / l.step_seconds;
            frac[nfrac++] = f < 1.0 ? f : 1.0;
        }
        /* 0.2 ms of call overhead per step is the host's, not a phase's */
        if (nhfrac < 256 && host_this > 0) hfrac[nhfrac++] = (l.step_seconds + 2e-4) / host_this;
        sum_last.step_seconds += l.step_seconds;
        sum_last.optimizer_seconds += l.optimizer_seconds;
        sum_last.hook_seconds += l.hook_seconds;
    }

    zero_step_timing t = ZERO_STEP_TIMING_INIT;
    CHECK_EQ_INT(zero_step_timing_get(e, ZERO_TIMING_TOTAL, &t), ZERO_OK);
    const double phases = in_step(&t);
    const int n = rc->steps * rc->gas;
    CHECK_EQ_INT(t.micro_steps, n);
    CHECK(boundaries == rc->steps, "%s: %d boundaries", rc->plugin, boundaries);
    /* the measured contract: the phases account for the step within 5 %.
     * Never more than the step; at least 95 % in the median step -- a step
     * in which the process lost its core between two phases (a sanitizer
     * build beside other tests on 2 cores) has unnamed time that no phase
     * can own, so the total alone would fail on the machine's load rather
     * than on a missing phase, which would be missing from every step. */
    const double median_frac = median(frac, nfrac);
    CHECK(phases <= t.step_seconds * 1.0001 && median_frac >= 0.95,
          "%s N=%d: phases %.3f ms vs zero_step %.3f ms (%.1f %% in all, %.1f %% in the median step)", rc->plugin,
          world, 1e3 * phases, 1e3 * t.step_seconds, 100.0 * phases / t.step_seconds, 100.0 * median_frac);
    /* libzero's clock covers the call: never more than the host's around
     * it, and at least 95 % of it (less 0.2 ms of call overhead) in the
     * median step, for the same reason as above: the process may lose its
     * core between the host's clock and libzero's in some step (this check
     * on the totals is the only one that load alone can fail; the test failed
     * once in a loaded full ctest run on 2 cores) */
    const double median_host = median(hfrac, nhfrac);
    CHECK(t.step_seconds <= host_step && median_host >= 0.95,
          "%s: libzero's step %.3f ms vs the host's clock %.3f ms (%.1f %% in the median step)", rc->plugin,
          1e3 * t.step_seconds, 1e3 * host_step, 100.0 * median_host);
    CHECK(t.hook_seconds > 0 && t.hook_seconds <= host_hooks, "%s: hooks %.3f ms vs host %.3f ms", rc->plugin,
          1e3 * t.hook_seconds, 1e3 * host_hooks);
    CHECK(t.fetch_seconds == 0.0, "%s: fetch %g without a zero_gather", rc->plugin, t.fetch_seconds);
    CHECK_NEAR(sum_last.step_seconds, t.step_seconds, 1e-9);
    CHECK_NEAR(sum_last.optimizer_seconds, t.optimizer_seconds, 1e-9);
    CHECK_NEAR(sum_last.hook_seconds, t.hook_seconds, 1e-9);
    if (world > 1)
        CHECK(t.exposed_comm_seconds + t.reduce_seconds > 0, "%s: no reduction time at N=%d", rc->plugin, world);
    if (world > 1 && strcmp(rc->plugin, "stage0") != 0)
        CHECK(t.gather_seconds > 0, "%s: no all-gather time at N=%d", rc->plugin, world);
    if (!rc->overlap) CHECK(t.exposed_comm_seconds == 0, "%s: exposed %g without overlap_comm", rc->plugin,
                            t.exposed_comm_seconds);
    if (rc->host_owned) CHECK(t.copy_seconds > 0, "%s: host-owned params but no copy-out time", rc->plugin);

    /* a 1.3 struct read by a host that knows only up to step_seconds */
    zero_step_timing small;
    memset(&small, 0x5a, sizeof small);
    small.struct_size = (uint32_t)(offsetof(zero_step_timing, step_seconds) + sizeof(double));
    CHECK_EQ_INT(zero_step_timing_get(e, ZERO_TIMING_TOTAL, &small), ZERO_OK);
    CHECK(small.step_seconds == t.step_seconds && small.micro_steps == (uint64_t)n, "small struct: head wrong");
    unsigned char tail[sizeof small];
    memset(tail, 0x5a, sizeof tail);
    CHECK(memcmp((char *)&small + small.struct_size, tail, sizeof small - small.struct_size) == 0,
          "small struct: tail written");
    CHECK_EQ_INT(zero_step_timing_get(e, 7, &t), ZERO_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(zero_step_timing_get(e, ZERO_TIMING_LAST, NULL), ZERO_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(zero_step_timing_get(NULL, ZERO_TIMING_LAST, &t), ZERO_ERR_INVALID_ARGUMENT);

    /* the log line: steps_per_print 2 -> steps / 2 lines on rank 0, none elsewhere */
    CHECK_EQ_INT(cap.info_other_rank, 0);
    int want = rc->breakdown && rank == 0 ? rc->steps / 2 : 0;
    CHECK(cap.breakdown_lines == want, "%s rank %d: %d breakdown lines, want %d", rc->plugin, rank,
          cap.breakdown_lines, want);
    if (want) {
        CHECK_STR_CONTAINS(cap.last, "zero_step");
        CHECK_STR_CONTAINS(cap.last, "optimizer");
        CHECK_STR_CONTAINS(cap.last, "hooks");
    }
    if (rank == 0)
        printf("%-7s N=%d gas=%d overlap=%d host_owned=%d: step %.2f ms = exposed %.2f + reduce %.2f + norm %.2f + "
               "optimizer %.2f + gather %.2f + copy %.2f (%.1f %% named); hooks %.2f ms\n",
               rc->plugin, world, rc->gas, rc->overlap, rc->host_owned, 1e3 * t.step_seconds / n,
               1e3 * t.exposed_comm_seconds / n, 1e3 * t.reduce_seconds / n, 1e3 * t.norm_seconds / n,
               1e3 * t.optimizer_seconds / n, 1e3 * t.gather_seconds / n, 1e3 * t.copy_seconds / n,
               100.0 * phases / t.step_seconds, 1e3 * t.hook_seconds / n);
    zero_engine_destroy(e);
    for (int i = 0; i < NPARAM; i++) free(data[i]);
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const run_cfg runs[] = {
        {"stage0", 1, 1, 0, 1, 6}, {"stage1", 1, 1, 0, 0, 6}, {"stage2", 1, 1, 1, 1, 6},
        {"stage2", 2, 0, 0, 0, 4}, {"stage1", 2, 1, 1, 0, 4}, {"offload", 1, 1, 0, 0, 4},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) run(&runs[i], rank, world);
    int fails = check_finish(), any = 0;
    MPI_Allreduce(&fails, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
