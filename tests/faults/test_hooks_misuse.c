/* Fault catalogue rows "hooks misused" that tests/stages/test_misuse.c does
 * not already check (it has: twice -> ZERO_ERR_DUPLICATE, never -> a
 * warning or ZERO_ERR_STATE with strict_grads, another engine's or a
 * garbage handle -> ZERO_ERR_INVALID_ARGUMENT, registration mismatch ->
 * ZERO_ERR_MISMATCH).  Here, for stage0, stage2 and stage3 on every rank:
 *  - before zero_params_done: zero_grad_buffer, zero_on_grad_ready,
 *    zero_gather, zero_step and zero_save -> ZERO_ERR_STATE;
 *  - NULL engine, NULL param, NULL out-pointer -> ZERO_ERR_INVALID_ARGUMENT
 *    (and zero_engine_destroy(NULL) is a no-op);
 *  - register after zero_params_done -> ZERO_ERR_STATE;
 *  - after zero_step: a late hook for a param of the micro-batch that
 *    zero_step already finished counts for the NEXT micro-batch (libzero
 *    cannot tell a late hook from an early one), so that micro-batch's own
 *    hook for the param is ZERO_ERR_DUPLICATE on the rank that sent the late
 *    one, and the engine keeps working (a later, clean micro-batch steps).
 * Every check runs on every rank; the ctest timeout turns a hang into a
 * failure. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "host_util.h"
#include "mpi_check.h"

static int rank_ = 0, world_ = 1;

static const char *CFG = "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
                         " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}},"
                         " \"zero_optimization\": {\"reduce_bucket_size\": 64, \"overlap_comm\": true}}";

enum { NP = 3, N = 40 };

static void quiet(void *user, zero_log_level lvl, int rank, const char *msg) {
    (void)user, (void)lvl, (void)rank, (void)msg; /* the statuses are what is checked */
}

static zero_engine *make(const char *plugin, zero_param **h, float *data) {
    zero_engine *e = NULL;
    char err[512];
    zero_status s = th_engine_create(CFG, plugin, 0, quiet, NULL, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "%s: %s", plugin, err);
    for (int i = 0; e && i < NP; ++i) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = data + i * N;
        d.numel = N;
        s = zero_register_param(e, &d, &h[i]);
        CHECK(s == ZERO_OK, "%s: register %s: %s", plugin, name, zero_last_error(e));
    }
    return e;
}

/* One clean micro-batch: every hook once, then zero_step. */
static zero_status micro_batch(zero_engine *e, zero_param **h, int skip_hook_of) {
    void *ptrs[NP];
    zero_status s = zero_gather(e, h, NP, ptrs);
    if (s == ZERO_OK) s = zero_release(e, h, NP);
    for (int i = NP - 1; i >= 0 && s == ZERO_OK; --i) {
        if (i == skip_hook_of) continue;
        void *g = NULL;
        if ((s = zero_grad_buffer(e, h[i], &g)) != ZERO_OK) break;
        ((float *)g)[0] += 1e-3f * (float)(i + 1);
        s = zero_on_grad_ready(e, h[i], NULL);
    }
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    if (s == ZERO_OK) s = zero_step(e, NULL, &r);
    return s;
}

static void run(const char *plugin) {
    float data[NP * N];
    for (int i = 0; i < NP * N; ++i) data[i] = 0.01f * (float)(i % 17);
    zero_param *h[NP];
    zero_engine *e = make(plugin, h, data);
    if (!e) return;
    void *g = NULL, *ptrs[NP];
    zero_status s;
    /* before zero_params_done */
    s = zero_grad_buffer(e, h[0], &g);
    CHECK(s == ZERO_ERR_STATE, "%s: grad_buffer before params_done: %s", plugin, zero_status_string(s));
    s = zero_on_grad_ready(e, h[0], NULL);
    CHECK(s == ZERO_ERR_STATE, "%s: on_grad_ready before params_done: %s", plugin, zero_status_string(s));
    s = zero_gather(e, h, NP, ptrs);
    CHECK(s == ZERO_ERR_STATE, "%s: gather before params_done: %s", plugin, zero_status_string(s));
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    s = zero_step(e, NULL, &r);
    CHECK(s == ZERO_ERR_STATE, "%s: step before params_done: %s", plugin, zero_status_string(s));
    s = zero_save(e, "/nonexistent-zero-fault-dir");
    CHECK(s == ZERO_ERR_STATE, "%s: save before params_done: %s", plugin, zero_status_string(s));
    /* NULL */
    s = zero_grad_buffer(NULL, h[0], &g);
    CHECK(s == ZERO_ERR_INVALID_ARGUMENT, "%s: NULL engine: %s", plugin, zero_status_string(s));
    s = zero_on_grad_ready(NULL, h[0], NULL);
    CHECK(s == ZERO_ERR_INVALID_ARGUMENT, "%s: NULL engine hook: %s", plugin, zero_status_string(s));
    s = zero_step(NULL, NULL, &r);
    CHECK(s == ZERO_ERR_INVALID_ARGUMENT, "%s: NULL engine step: %s", plugin, zero_status_string(s));
    zero_engine_destroy(NULL);

    s = zero_params_done(e);
    CHECK(s == ZERO_OK, "%s: params_done: %s", plugin, zero_last_error(e));
    if (s != ZERO_OK) {
        zero_engine_destroy(e);
        return;
    }
    s = zero_grad_buffer(e, NULL, &g);
    CHECK(s == ZERO_ERR_INVALID_ARGUMENT, "%s: NULL param: %s", plugin, zero_status_string(s));
    s = zero_on_grad_ready(e, NULL, NULL);
    CHECK(s == ZERO_ERR_INVALID_ARGUMENT, "%s: NULL param hook: %s", plugin, zero_status_string(s));
    s = zero_grad_buffer(e, h[0], NULL);
    CHECK(s == ZERO_ERR_INVALID_ARGUMENT, "%s: NULL out pointer: %s", plugin, zero_status_string(s));
    /* register after params_done */
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    zero_param *late = NULL;
    d.name = "late";
    d.data = data;
    d.numel = 4;
    s = zero_register_param(e, &d, &late);
    CHECK(s == ZERO_ERR_STATE, "%s: register after params_done: %s", plugin, zero_status_string(s));

    /* a clean micro-batch first */
    s = micro_batch(e, h, -1);
    CHECK(s == ZERO_OK, "%s: clean step: %s", plugin, zero_last_error(e));
    /* after zero_step: rank 0 fires p2's hook late (after the step); it
     * counts for the next micro-batch, whose own p2 hook is then a
     * duplicate on rank 0.  Rank 0 leaves p2 out of that micro-batch
     * instead, so the collectives stay matched and the engine goes on. */
    if (rank_ == 0) {
        s = zero_grad_buffer(e, h[2], &g);
        if (s == ZERO_OK) s = zero_on_grad_ready(e, h[2], NULL);
        CHECK(s == ZERO_OK, "%s: late hook after zero_step: %s", plugin, zero_last_error(e));
        s = zero_on_grad_ready(e, h[2], NULL);
        CHECK(s == ZERO_ERR_DUPLICATE, "%s: the next micro-batch's own hook after a late one: %s", plugin,
              zero_status_string(s));
    }
    s = micro_batch(e, h, rank_ == 0 ? 2 : -1);
    CHECK(s == ZERO_OK, "%s: micro-batch after a late hook: %s", plugin, zero_last_error(e));
    s = micro_batch(e, h, -1);
    CHECK(s == ZERO_OK, "%s: clean micro-batch afterwards: %s", plugin, zero_last_error(e));
    zero_engine_destroy(e);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    const char *plugins[] = {"stage0", "stage2", "stage3"};
    for (size_t i = 0; i < sizeof plugins / sizeof plugins[0]; ++i) run(plugins[i]);
    if (rank_ == 0) printf("hooks misuse: %s\n", check_failures_ ? "FAILED" : "every status as named, every rank");
    return check_mpi_finish();
}
