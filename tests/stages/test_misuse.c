/* Misuse of the hooks, for every stage plugin (run with 2 ranks):
 *  - zero_on_grad_ready twice for one param in a micro-step: ZERO_ERR_DUPLICATE;
 *  - an unknown handle (garbage, or another engine's): ZERO_ERR_INVALID_ARGUMENT;
 *  - a gradient that never arrives at a boundary: a warning naming the param
 *    and the param counts as zero (bitwise the same as reporting zeros);
 *    with zero_optimization.strict_grads: ZERO_ERR_STATE on every rank, also
 *    when only one rank misses it (no hang);
 *  - ranks registering different parameter lists: ZERO_ERR_MISMATCH on every
 *    rank naming the first difference (the ctest timeout turns a hang into a
 *    failure). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "../common/mpi_check.h"
#include "mlp_host.h"

static int rank_ = 0, world_ = 1;

static void quiet_log(void *user, zero_log_level lvl, int rank, const char *msg) {
    (void)user;
    (void)lvl;
    (void)rank;
    (void)msg;
}

static zero_engine *make_engine(const char *plugin, int self) {
    MPI_Comm comm = MPI_COMM_WORLD;
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
                    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}},"
                    " \"zero_optimization\": {\"reduce_bucket_size\": 64, \"overlap_comm\": true}}";
    o.plugin = plugin;
    o.comm_kind = self ? ZERO_COMM_SELF : ZERO_COMM_MPI;
    o.comm = self ? NULL : &comm;
    o.log_fn = quiet_log;
    zero_engine *e = NULL;
    char err[512] = "";
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "engine create (%s): %s", plugin, err);
    return e;
}

static zero_status reg(zero_engine *e, const char *name, const float *data, uint64_t n, zero_param **h) {
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = name;
    d.data = data;
    d.numel = n;
    return zero_register_param(e, &d, h);
}

static zero_status add_and_ready(zero_engine *e, zero_param *p, size_t n, float v) {
    void *buf = NULL;
    zero_status s = zero_grad_buffer(e, p, &buf);
    if (s != ZERO_OK) return s;
    for (size_t i = 0; i < n; i++) ((float *)buf)[i] += v;
    return zero_on_grad_ready(e, p, NULL);
}

static void hooks_misuse(const char *plugin) {
    static float a[1] = {1}, b[7] = {1, 2, 3, 4, 5, 6, 7}, c[1000];
    zero_engine *e = make_engine(plugin, 0);
    zero_engine *other = make_engine(plugin, 1);
    if (!e || !other) return;
    zero_param *pa, *pb, *pc, *foreign;
    CHECK_EQ_INT(reg(e, "alpha", a, 1, &pa), ZERO_OK);
    CHECK_EQ_INT(reg(e, "beta", b, 7, &pb), ZERO_OK);
    CHECK_EQ_INT(reg(e, "gamma", c, 1000, &pc), ZERO_OK);
    CHECK_EQ_INT(reg(other, "alpha", a, 1, &foreign), ZERO_OK);
    CHECK_EQ_INT(zero_params_done(e), ZERO_OK);
    CHECK_EQ_INT(zero_params_done(other), ZERO_OK);

    CHECK_EQ_INT(add_and_ready(e, pa, 1, 0.5f), ZERO_OK);
    zero_status s = zero_on_grad_ready(e, pa, NULL);
    CHECK(s == ZERO_ERR_DUPLICATE, "%s: second on_grad_ready gave %s", plugin, zero_status_string(s));
    CHECK_STR_CONTAINS(zero_last_error(e), "alpha");

    int junk[16] = {0};
    s = zero_on_grad_ready(e, (zero_param *)junk, NULL);
    CHECK(s == ZERO_ERR_INVALID_ARGUMENT, "%s: garbage handle gave %s", plugin, zero_status_string(s));
    void *buf = NULL;
    s = zero_grad_buffer(e, foreign, &buf);
    CHECK(s == ZERO_ERR_INVALID_ARGUMENT, "%s: another engine's handle gave %s", plugin, zero_status_string(s));
    s = zero_on_grad_ready(e, foreign, NULL);
    CHECK(s == ZERO_ERR_INVALID_ARGUMENT, "%s: another engine's handle gave %s", plugin, zero_status_string(s));

    /* the engine is still usable: finish the micro-step and step */
    CHECK_EQ_INT(add_and_ready(e, pb, 7, 0.25f), ZERO_OK);
    CHECK_EQ_INT(add_and_ready(e, pc, 1000, -0.125f), ZERO_OK);
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    s = zero_step(e, NULL, &r);
    CHECK(s == ZERO_OK && r.taken == 1, "%s: step after misuse: %s %s", plugin, zero_status_string(s),
          zero_last_error(e));
    /* the misused micro-step's gradient was still the one reported once */
    CHECK_NEAR(r.grad_norm, sqrt(0.25 + 7 * 0.0625 + 1000 * 0.015625), 1e-5);
    zero_engine_destroy(other);
    zero_engine_destroy(e);
}

static void missing_grad(const char *plugin) {
    host_run_cfg c = host_default_cfg();
    c.plugin = plugin;
    c.steps = 4;
    c.gas = 2;
    c.skip_param = 7; /* "layer3.bias", never reported on each window's last micro-step */
    host_run_out skipped, zeroed, strict;
    host_run(&c, &skipped);
    CHECK(skipped.status == ZERO_OK, "%s missing grad: %s", plugin, skipped.error);
    CHECK(skipped.warnings >= 4, "%s: %d warnings for 4 missing gradients", plugin, skipped.warnings);
    CHECK_STR_CONTAINS(skipped.first_warning, "layer3.bias");
    host_run_cfg z = c;
    z.skip_param = -1;
    z.zero_param = 7;
    host_run(&z, &zeroed);
    CHECK(zeroed.status == ZERO_OK, "%s zero grad: %s", plugin, zeroed.error);
    CHECK_EQ_INT(zeroed.warnings, 0);
    if (skipped.params && zeroed.params)
        CHECK(memcmp(skipped.params, zeroed.params, skipped.numel * sizeof(float)) == 0,
              "%s: a missing gradient is not the same as a zero gradient (rel %.3e)", plugin,
              host_rel_l2(skipped.params, zeroed.params, skipped.numel));
    host_run_cfg st = c;
    st.strict = 1;
    host_run(&st, &strict);
    CHECK(strict.status == ZERO_ERR_STATE, "%s strict_grads: got %s (%s)", plugin, zero_status_string(strict.status),
          strict.error);
    CHECK_STR_CONTAINS(strict.error, "strict_grads");
    /* Only rank 1 misses it: still an error on every rank, and no hang (the
     * other ranks' overlapped bucket collectives must find a partner). */
    host_run_out strict1;
    st.skip_param = rank_ == 1 ? 7 : -1;
    host_run(&st, &strict1);
    CHECK(strict1.status == ZERO_ERR_STATE, "%s strict_grads, rank 1 only: got %s (%s)", plugin,
          zero_status_string(strict1.status), strict1.error);
    host_run_free(&strict1);
    host_run_free(&skipped);
    host_run_free(&zeroed);
    host_run_free(&strict);
}

/* Rank 1 registers a different list; every rank must get MISMATCH. */
static void mismatch(const char *plugin, int variant) {
    static float d[1000];
    zero_engine *e = make_engine(plugin, 0);
    if (!e) return;
    zero_param *h;
    reg(e, "alpha", d, 1, &h);
    if (rank_ == 1 && variant == 0)
        reg(e, "beta", d, 8, &h); /* different size */
    else if (rank_ == 1 && variant == 1)
        reg(e, "beta_renamed", d, 7, &h);
    else
        reg(e, "beta", d, 7, &h);
    reg(e, "gamma", d, 1000, &h);
    if (rank_ == 1 && variant == 2) reg(e, "delta", d, 3, &h); /* one more */
    zero_status s = zero_params_done(e);
    CHECK(s == ZERO_ERR_MISMATCH, "%s variant %d: params_done gave %s", plugin, variant, zero_status_string(s));
    const char *want = variant == 2 ? "delta" : "beta";
    CHECK_STR_CONTAINS(zero_last_error(e), want);
    if (rank_ == 0) printf("%s mismatch %d: %s\n", plugin, variant, zero_last_error(e));
    zero_engine_destroy(e);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    const char *plugins[3] = {"stage0", "stage1", "stage2"};
    for (int p = 0; p < 3; p++) {
        hooks_misuse(plugins[p]);
        missing_grad(plugins[p]);
    }
    if (world_ >= 2)
        for (int v = 0; v < 3; v++) mismatch("stage2", v);
    return check_mpi_finish();
}
