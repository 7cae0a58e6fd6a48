/* Fault catalogue rows "ranks load different plugins / are given different
 * configs" (issue 31): run under an MPMD mpirun, each program given its own
 * plugin and lr, e.g.
 *   mpirun -np 2 test_agree --plugin stage2 ... : -np 2 test_agree --plugin stage3 ...
 * Every rank creates an engine over MPI_COMM_WORLD and asserts:
 *  - zero_engine_create returns --want (a status name) on this rank;
 *  - its message contains every --needle (both sides: ranks, plugins or the
 *    differing key and both values);
 *  - it returned well within ZERO_COMM_TIMEOUT (the agreement is a
 *    matched collective, not a timeout).
 * If the engine is created anyway (no agreement), the rank goes on to
 * zero_params_done and a step, where mismatched plugins wait in
 * collectives that never match: the ctest TIMEOUT turns that into a failure.
 * --want OK is the control: equal plugins and configs train.  --lr is
 * pasted into the JSON as is, so "--lr oops" makes that rank's config fail
 * to parse (the other ranks must not wait for it).  --stages sets
 * pipeline.stages (default 1): ranks given different values must fail
 * before the pipeline split, which the others would wait in for ever. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host_util.h"
#include "mpi_check.h"

enum { N = 64, MAX_NEEDLES = 8 };

static void quiet(void *user, zero_log_level lvl, int rank, const char *msg) {
    (void)user, (void)lvl, (void)rank, (void)msg; /* the status and message are what is checked */
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static zero_status status_named(const char *name) {
    static const struct {
        const char *name;
        zero_status s;
    } T[] = {{"OK", ZERO_OK},
             {"MISMATCH", ZERO_ERR_MISMATCH},
             {"PLUGIN_NOT_FOUND", ZERO_ERR_PLUGIN_NOT_FOUND},
             {"CONFIG", ZERO_ERR_CONFIG},
             {"TIMEOUT", ZERO_ERR_TIMEOUT}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!strcmp(name, T[i].name)) return T[i].s;
    fprintf(stderr, "test_agree: unknown status name %s\n", name);
    return -1;
}

/* Register one param, params_done, one micro-batch: what a host does next. */
static zero_status train_one_step(zero_engine *e, float *w) {
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    zero_param *p = NULL;
    d.name = "w";
    d.data = w;
    d.numel = N;
    zero_status s = zero_register_param(e, &d, &p);
    if (s == ZERO_OK) s = zero_params_done(e);
    void *ptr = NULL, *g = NULL;
    if (s == ZERO_OK) s = zero_gather(e, &p, 1, &ptr);
    if (s == ZERO_OK) s = zero_release(e, &p, 1);
    if (s == ZERO_OK) s = zero_grad_buffer(e, p, &g);
    if (s == ZERO_OK) {
        for (int i = 0; i < N; i++) ((float *)g)[i] = 0.01f * (float)(i + 1);
        s = zero_on_grad_ready(e, p, NULL);
    }
    zero_step_args a = ZERO_STEP_ARGS_INIT;
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    if (s == ZERO_OK) s = zero_step(e, &a, &r);
    return s;
}

int main(int argc, char **argv) {
    int rank = 0, world = 1;
    check_mpi_init(&argc, &argv, &rank, &world);
    const char *plugin = "stage2", *lr = "0.001", *want_name = "MISMATCH", *stages = "1";
    const char *needles[MAX_NEEDLES];
    int nn = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--plugin")) plugin = argv[i + 1];
        else if (!strcmp(argv[i], "--lr")) lr = argv[i + 1];
        else if (!strcmp(argv[i], "--stages")) stages = argv[i + 1];
        else if (!strcmp(argv[i], "--want")) want_name = argv[i + 1];
        else if (!strcmp(argv[i], "--needle") && nn < MAX_NEEDLES) needles[nn++] = argv[i + 1];
        else CHECK(0, "unknown argument %s", argv[i]);
    }
    const zero_status want = status_named(want_name);
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": %s}},"
             " \"zero_optimization\": {\"reduce_bucket_size\": 64}, \"pipeline\": {\"stages\": %s}}",
             lr, stages);
    const char *tmo = getenv("ZERO_COMM_TIMEOUT");
    const double limit = tmo ? atof(tmo) : 0;

    zero_engine *e = NULL;
    char err[4096] = "";
    const double t0 = now_s();
    zero_status s = th_engine_create(cfg, plugin, 0, quiet, NULL, &e, err, sizeof err);
    const double dt = now_s() - t0;
    CHECK(s == want, "rank %d (plugin %s, lr %s): zero_engine_create gave %s, want %s: %s", rank, plugin, lr,
          zero_status_string(s), zero_status_string(want), err);
    for (int i = 0; i < nn && s != ZERO_OK; i++)
        CHECK(strstr(err, needles[i]) != NULL, "rank %d: message lacks \"%s\": %s", rank, needles[i], err);
    if (limit > 0) CHECK(dt < 0.8 * limit, "rank %d: zero_engine_create took %.2f s (ZERO_COMM_TIMEOUT %g)", rank, dt, limit);
    if (s != ZERO_OK && rank == 0) printf("every rank: %s (%.2f s)\n", err, dt);
    if (e) {
        float w[N];
        for (int i = 0; i < N; i++) w[i] = 0.1f * (float)i;
        zero_status t = train_one_step(e, w);
        CHECK(want != ZERO_OK || t == ZERO_OK, "rank %d: training step: %s", rank, zero_last_error(e));
        zero_engine_destroy(e);
    }
    return check_mpi_finish();
}
