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
 *  - zero_set_hparams: a run configured with lr 0.05 but told lr = 0.001
 *    equals the run configured with 0.001 bitwise; zero_step_result.lr
 *    reports it; per-group and DEFAULT semantics; invalid values refused.
 * Usage: test_host_owned <path of libzero-plugin-dp-v1_0.so> */
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
    zero_engine_destroy(e);
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

    /* stage 3 refuses host-owned params; unknown flags are refused */
    char msg[1024] = "";
    CHECK_EQ_INT(register_owned("stage3", ZERO_PARAM_HOST_OWNED, msg, sizeof msg), ZERO_ERR_UNSUPPORTED);
    const char *m = msg;
    CHECK_STR_CONTAINS(m, "zero_gather");
    CHECK_EQ_INT(register_owned("stage2", 0x80u, msg, sizeof msg), ZERO_ERR_INVALID_ARGUMENT);
    CHECK_STR_CONTAINS(m, "unknown flags");
    CHECK_EQ_INT(register_owned("stage2", ZERO_PARAM_HOST_OWNED, msg, sizeof msg), ZERO_OK);
    if (rank_ == 0) printf("N=%d host-owned / hparams checks done\n", world_);
    return check_mpi_finish();
}
