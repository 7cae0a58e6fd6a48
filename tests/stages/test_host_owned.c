/* ABI 1.1 additions for hosts that keep their own tensors and schedule
 * (bindings/: PyTorch needs exactly these), under mpirun with N ranks:
 *  - ZERO_PARAM_HOST_OWNED: with stage0, stage1, stage2 and offload a host
 *    that reads only its own arrays (never zero_gather) trains to bitwise
 *    the same parameters as one that gathers, and after every step its
 *    arrays equal what zero_gather gives (checked inside mlp_host.c);
 *  - the same with a plugin built against the frozen 1.0 headers
 *    (plugin_dp_v1_0.c): close to stage0, and host arrays == gather;
 *  - stage 3 refuses the flag in zero_register_param (ZERO_ERR_UNSUPPORTED,
 *    the message says to use zero_gather), unknown flags are refused;
 *  - (1.7.5) a second host-owned param on the same tensor, or on part of
 *    it (tied weights registered twice), is refused naming both; disjoint
 *    tensors side by side in one array, and a plain param whose initial
 *    values come from a host-owned tensor, are not;
 *  - zero_set_hparams: a run configured with lr 0.05 but told lr = 0.001
 *    equals the run configured with 0.001 bitwise; zero_step_result.lr
 *    reports it; per-group and DEFAULT semantics; invalid values refused;
 *  - zero_register_stacked / zero_slice_grad_buffer / zero_on_slice_ready:
 *    a stack reported slice by slice == separate params, bitwise, with
 *    stage0/2/3/offload; duplicate, out-of-range and unstacked slices refused.
 * Usage: test_host_owned <path of libzero-plugin-dp-v1_0.so> */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "../common/host_util.h"
#include "../common/mpi_check.h"
#include "mlp_host.h"
#include "run_compare.h"

static int rank_ = 0, world_ = 1;

static void ok(const host_run_out *o, const char *what) { CHECK(o->status == ZERO_OK, "%s: %s", what, o->error); }

static const char *CFG = "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\":"
                         " {\"lr\": 0.001}}, \"zero_optimization\": {\"stage\": 3}}";

/* One param registered HOST_OWNED with the given plugin: the status. */
static zero_status register_owned(const char *plugin, uint32_t flags, char *msg, size_t len) {
    zero_engine *e = NULL;
    zero_status s = th_engine_create(CFG, plugin, 0, NULL, NULL, &e, msg, len);
    if (s != ZERO_OK) return s;
    float w[8] = {0};
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "w";
    d.data = w;
    d.numel = 8;
    d.flags = flags;
    zero_param *p = NULL;
    s = zero_register_param(e, &d, &p);
    snprintf(msg, len, "%s", zero_last_error(e));
    if (s == ZERO_OK) s = zero_params_done(e);
    zero_engine_destroy(e);
    return s;
}

/* (1.7.5) Host-owned tensors that overlap: one array w[16]; `second` is
 * registered after "first" = w[0..8) with its offset and numel and flags. */
static zero_status register_pair(size_t off, size_t numel, uint32_t flags, char *msg, size_t len) {
    zero_engine *e = NULL;
    zero_status s = th_engine_create(CFG, "stage2", 0, NULL, NULL, &e, msg, len);
    if (s != ZERO_OK) return s;
    float w[16] = {0};
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "first";
    d.data = w;
    d.numel = 8;
    d.flags = ZERO_PARAM_HOST_OWNED;
    zero_param *p = NULL;
    CHECK_EQ_INT(zero_register_param(e, &d, &p), ZERO_OK);
    d.name = "second";
    d.data = w + off;
    d.numel = numel;
    d.flags = flags;
    s = zero_register_param(e, &d, &p);
    snprintf(msg, len, "%s", zero_last_error(e));
    zero_engine_destroy(e);
    return s;
}

static void overlapping_tensors(void) {
    char msg[1024];
    const struct { size_t off, numel; uint32_t flags; zero_status want; const char *what; } cases[] = {
        {0, 8, ZERO_PARAM_HOST_OWNED, ZERO_ERR_INVALID_ARGUMENT, "the same tensor twice (tied weights)"},
        {4, 8, ZERO_PARAM_HOST_OWNED, ZERO_ERR_INVALID_ARGUMENT, "half of it"},
        {7, 1, ZERO_PARAM_HOST_OWNED, ZERO_ERR_INVALID_ARGUMENT, "its last element"},
        {8, 8, ZERO_PARAM_HOST_OWNED, ZERO_OK, "the next 8 floats of the same array"},
        {0, 8, 0, ZERO_OK, "a plain param initialised from it"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        zero_status s = register_pair(cases[i].off, cases[i].numel, cases[i].flags, msg, sizeof msg);
        CHECK(s == cases[i].want, "host-owned overlap, %s: %s (%s)", cases[i].what, zero_status_string(s), msg);
        if (cases[i].want != ZERO_OK)
            CHECK(strstr(msg, "zero_register_param(second)") && strstr(msg, "overlaps the one of param 'first'") &&
                      strstr(msg, "tied weights"),
                  "host-owned overlap, %s: message %s", cases[i].what, msg);
    }
}

/* zero_set_hparams semantics on a one-param engine (world of this run). */
static void hparams_unit(void) {
    zero_engine *e = NULL;
    char msg[1024];
    const char *cfg = "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"SGD\", \"params\":"
                      " {\"lr\": 0.5}}}";
    zero_status s = th_engine_create(cfg, "stage0", 0, NULL, NULL, &e, msg, sizeof msg);
    CHECK(s == ZERO_OK, "create: %s", msg);
    if (s != ZERO_OK) return;
    float w[2] = {1.0f, 1.0f};
    zero_param *p[2];
    for (int i = 0; i < 2; i++) {
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = i ? "b" : "w";
        d.data = &w[i];
        d.numel = 1;
        d.group = i;
        d.flags = ZERO_PARAM_HOST_OWNED;
        CHECK_EQ_INT(zero_register_param(e, &d, &p[i]), ZERO_OK);
    }
    CHECK_EQ_INT(zero_params_done(e), ZERO_OK);
    void *st0 = NULL, *st1 = NULL; /* (1.1) zero_param_storage: libzero's own copy, stable */
    CHECK_EQ_INT(zero_param_storage(e, p[0], &st0), ZERO_OK);
    CHECK_EQ_INT(zero_param_storage(e, p[0], NULL), ZERO_ERR_INVALID_ARGUMENT);
    /* invalid values */
    zero_hparams h = ZERO_HPARAMS_INIT;
    h.beta1 = 1.0;
    CHECK_EQ_INT(zero_set_hparams(e, &h), ZERO_ERR_INVALID_ARGUMENT);
    CHECK_STR_CONTAINS(zero_last_error(e), "beta1");
    h = (zero_hparams)ZERO_HPARAMS_INIT;
    h.group = -7;
    CHECK_EQ_INT(zero_set_hparams(e, &h), ZERO_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(zero_set_hparams(e, NULL), ZERO_ERR_INVALID_ARGUMENT);
    /* lr 0.1 for all groups, 0.25 for group 1; grad 1 on every rank: w -= lr * mean(1) */
    h = (zero_hparams)ZERO_HPARAMS_INIT;
    h.lr = 0.1;
    CHECK_EQ_INT(zero_set_hparams(e, &h), ZERO_OK);
    h.group = 1;
    h.lr = 0.25;
    CHECK_EQ_INT(zero_set_hparams(e, &h), ZERO_OK);
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < 2; i++) {
            void *g = NULL;
            CHECK_EQ_INT(zero_grad_buffer(e, p[i], &g), ZERO_OK);
            if (g) *(float *)g += 1.0f;
            CHECK_EQ_INT(zero_on_grad_ready(e, p[i], NULL), ZERO_OK);
        }
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        CHECK_EQ_INT(zero_step(e, NULL, &r), ZERO_OK);
        if (step == 0) {
            CHECK_NEAR(r.lr, 0.1, 1e-12);
            CHECK_NEAR(w[0], 0.9, 1e-6); /* host-owned: updated in place */
            CHECK_NEAR(w[1], 0.75, 1e-6);
            /* group 1 back to the ALL_GROUPS value (0.1) */
            zero_hparams d = ZERO_HPARAMS_INIT;
            d.group = 1;
            d.lr = ZERO_HPARAM_DEFAULT;
            CHECK_EQ_INT(zero_set_hparams(e, &d), ZERO_OK);
        } else {
            CHECK_NEAR(r.lr, 0.1, 1e-12);
            CHECK_NEAR(w[0], 0.8, 1e-6);
            CHECK_NEAR(w[1], 0.65, 1e-6);
        }
    }
    CHECK_EQ_INT(zero_param_storage(e, p[0], &st1), ZERO_OK);
    CHECK(st0 && st0 == st1 && *(float *)st1 == w[0], "zero_param_storage: stable pointer holding the values");
    zero_engine_destroy(e);
}

/* (1.1) Stacked tensors: a 3 x 48 stack registered once and reported slice
 * by slice (reverse order) trains bitwise like three separate 48-element
 * params (same flat layout: 48 is a multiple of the 16-element alignment). */
enum { ST_L = 3, ST_N = 48, ST_STEPS = 8 };

static float st_grad(int step, int layer, int k) { return (float)sin(0.3 * (step + 1) + 0.07 * (layer * ST_N + k)); }

static int train_stack(const char *plugin, int stacked, float *out /* ST_L * ST_N + 16 */) {
    char cfg[512];
    int stage = strcmp(plugin, "offload") == 0 ? 2 : plugin[5] - '0';
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.01}},"
             " \"zero_optimization\": {\"stage\": %d%s}}",
             stage, strcmp(plugin, "offload") == 0 ? ", \"offload_optimizer\": {\"device\": \"cpu\"}" : "");
    zero_engine *e = NULL;
    char msg[1024];
    zero_status s = th_engine_create(cfg, plugin, 0, NULL, NULL, &e, msg, sizeof msg);
    CHECK(s == ZERO_OK, "%s: %s", plugin, msg);
    if (s != ZERO_OK) return 0;
    static float init[ST_L * ST_N + 16];
    for (int k = 0; k < ST_L * ST_N + 16; k++) init[k] = 0.01f * (float)(k % 37);
    zero_param *h[ST_L + 1];
    uint32_t np = 0;
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    if (stacked) {
        d.name = "stack";
        d.data = init;
        d.numel = ST_L * ST_N;
        CHECK_EQ_INT(zero_register_stacked(e, &d, ST_L, &h[np++]), ZERO_OK);
    } else {
        for (int l = 0; l < ST_L; l++) {
            char name[16];
            snprintf(name, sizeof name, "layer%d", l);
            d.name = name;
            d.data = init + l * ST_N;
            d.numel = ST_N;
            CHECK_EQ_INT(zero_register_param(e, &d, &h[np++]), ZERO_OK);
        }
    }
    d.name = "head";
    d.data = init + ST_L * ST_N;
    d.numel = 16;
    CHECK_EQ_INT(zero_register_param(e, &d, &h[np++]), ZERO_OK);
    CHECK_EQ_INT(zero_params_done(e), ZERO_OK);
    for (int step = 0; step < ST_STEPS; step++) {
        void *buf = NULL;
        CHECK_EQ_INT(zero_grad_buffer(e, h[np - 1], &buf), ZERO_OK);
        for (int k = 0; k < 16 && buf; k++) ((float *)buf)[k] += st_grad(step, ST_L, k);
        CHECK_EQ_INT(zero_on_grad_ready(e, h[np - 1], NULL), ZERO_OK);
        for (int l = ST_L - 1; l >= 0; l--) { /* backward: last layer first */
            buf = NULL;
            if (stacked) CHECK_EQ_INT(zero_slice_grad_buffer(e, h[0], (uint32_t)l, &buf), ZERO_OK);
            else CHECK_EQ_INT(zero_grad_buffer(e, h[l], &buf), ZERO_OK);
            for (int k = 0; k < ST_N && buf; k++) ((float *)buf)[k] += st_grad(step, l, k);
            if (stacked) CHECK_EQ_INT(zero_on_slice_ready(e, h[0], (uint32_t)l, NULL), ZERO_OK);
            else CHECK_EQ_INT(zero_on_grad_ready(e, h[l], NULL), ZERO_OK);
        }
        if (stacked && step == 0) { /* misuse, each refused */
            CHECK_EQ_INT(zero_on_slice_ready(e, h[0], 1, NULL), ZERO_ERR_DUPLICATE);
            CHECK_EQ_INT(zero_on_slice_ready(e, h[0], ST_L, NULL), ZERO_ERR_INVALID_ARGUMENT);
            CHECK_EQ_INT(zero_on_slice_ready(e, h[1], 0, NULL), ZERO_ERR_INVALID_ARGUMENT);
            const char *m = zero_last_error(e);
            CHECK_STR_CONTAINS(m, "zero_register_stacked");
        }
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        CHECK_EQ_INT(zero_step(e, NULL, &r), ZERO_OK);
    }
    void *ptrs[ST_L + 1];
    CHECK_EQ_INT(zero_gather(e, h, np, ptrs), ZERO_OK);
    if (stacked) {
        memcpy(out, ptrs[0], ST_L * ST_N * sizeof(float));
        memcpy(out + ST_L * ST_N, ptrs[1], 16 * sizeof(float));
    } else {
        for (int l = 0; l <= ST_L; l++) memcpy(out + l * ST_N, ptrs[l], (l == ST_L ? 16 : ST_N) * sizeof(float));
    }
    zero_release(e, h, np);
    zero_param_desc bad = ZERO_PARAM_DESC_INIT;
    zero_param *bp = NULL;
    bad.name = "bad";
    bad.data = init;
    bad.numel = 10;
    CHECK_EQ_INT(zero_register_stacked(e, &bad, 3, &bp), ZERO_ERR_INVALID_ARGUMENT); /* 10 % 3 != 0 */
    zero_engine_destroy(e);
    return 1;
}

static void stacked_checks(void) {
    const char *plugins[4] = {"stage0", "stage2", "stage3", "offload"};
    for (int k = 0; k < 4; k++) {
        float a[ST_L * ST_N + 16], b[ST_L * ST_N + 16];
        if (!train_stack(plugins[k], 1, a) || !train_stack(plugins[k], 0, b)) continue;
        int same = memcmp(a, b, sizeof a) == 0;
        if (rank_ == 0) printf("N=%d  %-40s %s\n", world_, plugins[k], same ? "stacked == separate, bitwise" : "DIFFERENT");
        CHECK(same, "%s: stacked != separate params", plugins[k]);
    }
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    const char *v10 = argc > 1 ? argv[1] : "dp-v1_0";

    const char *plugins[4] = {"stage0", "stage1", "stage2", "offload"};
    for (int k = 0; k < 4; k++) {
        host_run_cfg c = host_default_cfg();
        c.steps = 12;
        c.gas = 2;
        c.plugin = plugins[k];
        if (k == 3) {
            c.stage = 2;
            c.offload = 1;
        }
        host_run_out a, b;
        host_run(&c, &a);
        c.host_owned = 1;
        host_run(&c, &b);
        char what[96];
        snprintf(what, sizeof what, "%s: host-owned == gather", plugins[k]);
        ok(&a, plugins[k]);
        ok(&b, what);
        host_expect_bitwise(&b, &a, what, 40);
        host_run_free(&a);
        host_run_free(&b);
    }

    /* a 1.0 plugin with host-owned params (and a 1.0-size zero_part_step) */
    {
        host_run_cfg c = host_default_cfg();
        c.steps = 12;
        host_run_out ref, v;
        host_run(&c, &ref);
        c.plugin = v10;
        c.host_owned = 1;
        host_run(&c, &v);
        ok(&ref, "stage0");
        ok(&v, "1.0 plugin, host-owned");
        host_expect_close(&v, &ref, "1.0 plugin host-owned vs stage0", 1e-6, 40);
        host_run_free(&ref);
        host_run_free(&v);
    }

    /* zero_set_hparams: config lr 0.05, told 0.001 == config 0.001 */
    {
        host_run_cfg c = host_default_cfg();
        c.steps = 10;
        c.plugin = "stage2";
        host_run_out a, b;
        host_run(&c, &a);
        c.config_lr = 0.05;
        c.hp_lr = 0.001;
        host_run(&c, &b);
        ok(&a, "stage2 lr 0.001");
        ok(&b, "stage2 lr 0.05 + zero_set_hparams(0.001)");
        host_expect_bitwise(&b, &a, "zero_set_hparams(lr) == config lr", 40);
        c.hp_lr = -1.0;
        host_run_out d;
        host_run(&c, &d);
        ok(&d, "stage2 lr 0.05");
        if (a.params && d.params)
            CHECK(host_rel_l2(d.params, a.params, a.numel) > 1e-4, "lr 0.05 should differ from 0.001");
        host_run_free(&a);
        host_run_free(&b);
        host_run_free(&d);
    }
    hparams_unit();
    stacked_checks();

    /* stage 3 refuses host-owned params; unknown flags are refused */
    char msg[1024] = "";
    CHECK_EQ_INT(register_owned("stage3", ZERO_PARAM_HOST_OWNED, msg, sizeof msg), ZERO_ERR_UNSUPPORTED);
    const char *m = msg;
    CHECK_STR_CONTAINS(m, "zero_gather");
    CHECK_EQ_INT(register_owned("stage2", 0x80u, msg, sizeof msg), ZERO_ERR_INVALID_ARGUMENT);
    CHECK_STR_CONTAINS(m, "unknown flags");
    CHECK_EQ_INT(register_owned("stage2", ZERO_PARAM_HOST_OWNED, msg, sizeof msg), ZERO_OK);
    overlapping_tensors();
    {   /* stage 3 keeps no full copy: zero_param_storage refuses, naming zero_gather */
        zero_engine *e = NULL;
        CHECK_EQ_INT(th_engine_create(CFG, "stage3", 0, NULL, NULL, &e, msg, sizeof msg), ZERO_OK);
        float w[8] = {0};
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = "w";
        d.data = w;
        d.numel = 8;
        zero_param *p = NULL;
        void *st = NULL;
        if (e) {
            CHECK_EQ_INT(zero_register_param(e, &d, &p), ZERO_OK);
            CHECK_EQ_INT(zero_param_storage(e, p, &st), ZERO_ERR_STATE); /* before params_done */
            CHECK_EQ_INT(zero_params_done(e), ZERO_OK);
            CHECK_EQ_INT(zero_param_storage(e, p, &st), ZERO_ERR_UNSUPPORTED);
            const char *m3 = zero_last_error(e);
            CHECK_STR_CONTAINS(m3, "zero_gather");
            zero_engine_destroy(e);
        }
    }
    if (rank_ == 0) printf("N=%d host-owned / hparams checks done\n", world_);
    return check_mpi_finish();
}
