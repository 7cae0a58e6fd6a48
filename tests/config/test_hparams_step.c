/* A non-finite or out-of-range hyper-parameter at run time is a named
 * error, never a step (issue 31, item 3).  The values a step runs with
 * come from the config and its schedule (proved at parse:
 * test_config_ranges.c), zero_set_hparams, zero_set_group and a loaded
 * checkpoint's lr; the last three reach zero_step unproved, so zero_step
 * checks every group's lr, weight decay, lr * decay, betas and eps before
 * the plugin's step:
 *  - zero_set_hparams refuses NaN, values above FLT_MAX, a beta that is 1
 *    in fp32 and a denormal eps, and leaves the weights alone;
 *  - zero_set_group's lr_scale NaN (or one that takes the lr past FLT_MAX),
 *    weight_decay 1e39, or one whose product with the lr overflows fp32:
 *    zero_step returns ZERO_ERR_STATE naming the
 *    group, the field, the value and where it came from, the weights are
 *    bitwise unchanged and no step is counted;
 *  - an lr of NaN restored as a checkpoint would (white box: e->lr): the
 *    same, naming zero_load; once the lr is sane, zero_step called again
 *    (no new backward: the refused window's gradients were kept) trains.
 * And zero_engine_create with config_path /dev/zero or a FIFO returns
 * ZERO_ERR_CONFIG naming it, without blocking.
 * stage0, one process (ZERO_COMM_SELF), host-owned weights read directly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "engine.h"

enum { N = 16 };

typedef struct run {
    zero_engine *e;
    zero_param *p;
    float w[N];
} run;

static const char *CFG = "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", "
                         "\"params\": {\"lr\": 0.01, \"weight_decay\": 0.1}}}";

/* An engine with one host-owned param in group 0, whose zero_set_group
 * values are lr_scale / weight_decay (-1: not set). */
static int make(run *r, double lr_scale, double weight_decay) {
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = CFG;
    o.comm_kind = ZERO_COMM_SELF;
    o.plugin = "stage0";
    char err[512] = "";
    memset(r, 0, sizeof *r);
    zero_status s = zero_engine_create(&o, &r->e, err, sizeof err);
    CHECK(s == ZERO_OK, "zero_engine_create: %s", err);
    if (s != ZERO_OK) return 0;
    if (lr_scale >= 0 || isnan(lr_scale) || weight_decay >= 0) {
        zero_group_desc g = ZERO_GROUP_DESC_INIT;
        g.group = 0;
        if (lr_scale >= 0 || isnan(lr_scale)) g.lr_scale = lr_scale;
        g.weight_decay = weight_decay;
        CHECK_EQ_INT(zero_set_group(r->e, &g), ZERO_OK);
    }
    for (int i = 0; i < N; i++) r->w[i] = 0.5f + 0.01f * (float)i;
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "w";
    d.data = r->w;
    d.numel = N;
    d.flags = ZERO_PARAM_HOST_OWNED;
    CHECK_EQ_INT(zero_register_param(r->e, &d, &r->p), ZERO_OK);
    CHECK_EQ_INT(zero_params_done(r->e), ZERO_OK);
    return r->p != NULL;
}

/* One micro-step with gradient 1 everywhere, then zero_step's status. */
static zero_status step(run *r, zero_step_result *res) {
    void *g = NULL;
    CHECK_EQ_INT(zero_grad_buffer(r->e, r->p, &g), ZERO_OK);
    if (g)
        for (int i = 0; i < N; i++) ((float *)g)[i] += 1.0f;
    CHECK_EQ_INT(zero_on_grad_ready(r->e, r->p, NULL), ZERO_OK);
    return zero_step(r->e, NULL, res);
}

/* zero_step (after a micro-step's gradients when `grads`) must refuse
 * with ZERO_ERR_STATE, a message holding each of `words`, and leave the
 * weights and the step count alone.  The window's gradients are kept: the
 * host fixes the value and calls zero_step again without a new backward. */
static void expect_refused(run *r, int grads, const char *const *words, int nwords) {
    float before[N];
    memcpy(before, r->w, sizeof before);
    const uint64_t steps = zero__engine_of((zero_core *)r->e)->global_step;
    zero_step_result res = ZERO_STEP_RESULT_INIT;
    zero_status s = grads ? step(r, &res) : zero_step(r->e, NULL, &res);
    CHECK(s == ZERO_ERR_STATE, "zero_step: status %d, expected ZERO_ERR_STATE (%s)", s, zero_last_error(r->e));
    for (int k = 0; k < nwords; k++) CHECK_STR_CONTAINS(zero_last_error(r->e), words[k]);
    CHECK(memcmp(before, r->w, sizeof before) == 0, "a refused step changed the weights");
    CHECK(zero__engine_of((zero_core *)r->e)->global_step == steps, "a refused step was counted");
}

static void test_set_hparams(void) {
    run r;
    if (!make(&r, -1, -1)) return;
    float before[N];
    memcpy(before, r.w, sizeof before);
    static const struct {
        int field; /* 0 lr, 1 weight_decay, 2 beta1, 3 beta2, 4 eps */
        double v;
        const char *name;
    } bad[] = {{0, NAN, "lr = nan"},        {0, 1e39, "lr = 1e+39"},        {1, INFINITY, "weight_decay = inf"},
               {1, 1e39, "weight_decay"},   {2, 0.99999999999, "beta1"},    {3, -0.5, "beta2"},
               {4, 1e-45, "eps"},           {4, NAN, "eps = nan"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        zero_hparams h = ZERO_HPARAMS_INIT;
        double *f[5] = {&h.lr, &h.weight_decay, &h.beta1, &h.beta2, &h.eps};
        *f[bad[k].field] = bad[k].v;
        CHECK_EQ_INT(zero_set_hparams(r.e, &h), ZERO_ERR_INVALID_ARGUMENT);
        CHECK_STR_CONTAINS(zero_last_error(r.e), bad[k].name);
    }
    CHECK(memcmp(before, r.w, sizeof before) == 0, "refused zero_set_hparams changed the weights");
    /* nothing was stored: the next step runs at the config's lr and moves the weights */
    zero_step_result res = ZERO_STEP_RESULT_INIT;
    CHECK_EQ_INT(step(&r, &res), ZERO_OK);
    CHECK(res.taken == 1 && res.lr == 0.01, "step after refusals: taken %d at lr %g", res.taken, res.lr);
    CHECK(memcmp(before, r.w, sizeof before) != 0, "a good step left the weights alone");
    zero_engine_destroy(r.e);
}

static void test_group_values(void) {
    run r;
    if (make(&r, NAN, -1)) {
        const char *w[] = {"optimizer step 1 of param group 0 (AdamW)", "lr = nan", "lr_scale nan",
                           "no weight changed"};
        expect_refused(&r, 1, w, 4);
        expect_refused(&r, 0, w, 4); /* and again: nothing was half done */
    }
    if (r.e) zero_engine_destroy(r.e);
    if (make(&r, 1e41, -1)) { /* 0.01 * 1e41: a finite double, Inf as the kernels' float */
        const char *w[] = {"lr = 1e+39", "times zero_set_group's lr_scale 1e+41"};
        expect_refused(&r, 1, w, 2);
    }
    if (r.e) zero_engine_destroy(r.e);
    if (make(&r, -1, 1e39)) {
        const char *w[] = {"weight_decay = 1e+39", "set by zero_set_group"};
        expect_refused(&r, 1, w, 2);
    }
    if (r.e) zero_engine_destroy(r.e);
    if (make(&r, 1e37, 1e10)) { /* each fits fp32, lr 1e35 * decay 1e10 does not */
        const char *w[] = {"weight_decay = 1e+10", "lr 1e+35", "product with the lr"};
        expect_refused(&r, 1, w, 3);
    }
    if (r.e) zero_engine_destroy(r.e);
}

static void test_restored_lr(void) {
    run r;
    if (!make(&r, -1, -1)) return;
    struct zero_engine *e = zero__engine_of((zero_core *)r.e);
    e->lr = NAN; /* what zero_load would restore from a manifest that says NaN */
    const char *w[] = {"lr = nan", "restored by zero_load"};
    expect_refused(&r, 1, w, 2);
    e->lr = 0.01;
    float before[N];
    memcpy(before, r.w, sizeof before);
    zero_step_result res = ZERO_STEP_RESULT_INIT;
    CHECK_EQ_INT(zero_step(r.e, NULL, &res), ZERO_OK); /* the kept window */
    CHECK(res.taken == 1 && memcmp(before, r.w, sizeof before) != 0, "the step after a sane lr did not train");
    zero_engine_destroy(r.e);
}

/* The engine reads config_path through the same bounded reader: a FIFO
 * with no writer and /dev/zero fail zero_engine_create at once (the ctest's
 * TIMEOUT catches a hang), naming the path. */
static void test_engine_config_path(void) {
    char fifo[] = "/tmp/zero-hp-fifo-XXXXXX";
    int fd = mkstemp(fifo);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    const char *paths[] = {"/dev/zero", fifo};
    for (int k = 0; k < 2; k++) {
        zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
        o.config_path = paths[k];
        o.comm_kind = ZERO_COMM_SELF;
        o.plugin = "stage0";
        char err[512] = "";
        zero_engine *e = NULL;
        zero_status s = zero_engine_create(&o, &e, err, sizeof err);
        CHECK(s == ZERO_ERR_CONFIG && e == NULL, "config_path %s: status %d (%s)", paths[k], s, err);
        CHECK(strstr(err, paths[k]) && strstr(err, "expected a regular file"), "config_path %s: \"%s\"", paths[k],
              err);
        zero_engine_destroy(e);
    }
    unlink(fifo);
}

int main(void) {
    test_engine_config_path();
    test_set_hparams();
    test_group_values();
    test_restored_lr();
    return check_finish();
}
