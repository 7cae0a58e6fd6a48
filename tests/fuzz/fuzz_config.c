/* libFuzzer target: the DeepSpeed JSON config parser (core/config*.c).
 *
 * Input: config text, optionally followed by a NUL byte and a dotted lookup
 * path ("optimizer.params.betas[1]").  Each input is parsed for a world
 * size derived from its length (1..9, so the batch-size arithmetic sees
 * several), and on success every getter and the four typed lookups run on
 * the path (and on a few fixed ones).  Beyond "no crash, no leak, no UB"
 * (ASan + UBSan + LSan), the harness checks the parser's contracts:
 *   - success <=> a config handle; failure <=> ZERO_ERR_CONFIG/ZERO_ERR_IO,
 *     no handle and a non-empty, NUL-terminated error message;
 *   - the typed run view is sane (batch = micro * gas * world, stage 0..3,
 *     a plugin name);
 *   - zero__config_peek_pipeline_stages agrees with a successful parse;
 *   - (issue 31) every value an accepted config makes the optimizer use is
 *     finite and within fp32: lr, weight decay, eps, betas, momentum, the
 *     gradient scale factors (predivide, loss scale and their reciprocals),
 *     clipping; and the schedule's lr (also times the weight decay) and
 *     betas at every step of a sweep: 1..64, the points around each step
 *     count the scheduler section names (warm-up, total, cycle sizes,
 *     decay step, resume point) and far steps up to 2^64 - 1.
 * A broken contract aborts (libFuzzer saves the input as a crash). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#define REQUIRE(c, ...)                                                                  \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            fprintf(stderr, "fuzz_config: contract broken: %s: ", #c);                   \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            abort();                                                                     \
        }                                                                                \
    } while (0)

static void count_warning(void *user, const char *msg) {
    REQUIRE(msg && msg[0], "empty warning");
    ++*(int *)user;
}

static void lookups(const zero__config *c, const char *path) {
    int64_t i;
    double d;
    int b;
    const char *s;
    int r = zero__config_int(c, path, &i);
    REQUIRE(r >= -1 && r <= 1, "zero__config_int returned %d", r);
    r = zero__config_double(c, path, &d);
    REQUIRE(r >= -1 && r <= 1, "zero__config_double returned %d", r);
    r = zero__config_bool(c, path, &b);
    REQUIRE(r >= -1 && r <= 1, "zero__config_bool returned %d", r);
    r = zero__config_string(c, path, &s);
    REQUIRE(r >= -1 && r <= 1, "zero__config_string returned %d", r);
    if (r == 1) REQUIRE(s != NULL, "string lookup of %s found NULL", path);
    (void)zero__config_double_or(c, path, 1.0);
    (void)zero__config_int_or(c, path, 1);
}

/* fp32 range: the optimizer kernels take their scalars as floats. */
static int in_f32(double v, double lo) { return isfinite(v) && v >= lo && v <= FLT_MAX; }
static int is_beta(double b) { return b >= 0 && (float)b < 1.0f; }

static void check_step(const zero__config *c, const zero_run_config *rc, uint64_t t) {
    const double lr = zero__config_sched_lr(c, t);
    REQUIRE(in_f32(lr, 0.0), "step %llu: lr %g", (unsigned long long)t, lr);
    const double decay = (double)(float)lr * (double)(float)rc->weight_decay;
    REQUIRE(decay <= FLT_MAX, "step %llu: lr %g * weight_decay %g = %g", (unsigned long long)t, lr,
            rc->weight_decay, decay);
    double max_coeff = 10.0; /* Lamb steps by lr * trust ratio <= max_coeff */
    if (rc->optim == ZERO_OPTIM_LAMB && zero__config_double(c, "optimizer.params.max_coeff", &max_coeff) >= 0)
        REQUIRE(lr * max_coeff <= FLT_MAX, "step %llu: lr %g * max_coeff %g", (unsigned long long)t, lr, max_coeff);
    double b1, b2;
    zero__config_sched_betas(c, t, &b1, &b2);
    if (rc->optim != ZERO_OPTIM_SGD && rc->optim != ZERO_OPTIM_ADAGRAD)
        REQUIRE(is_beta(b1) && is_beta(b2), "step %llu: betas (%.17g, %.17g)", (unsigned long long)t, b1, b2);
}

/* Steps where a schedule changes branch: around every count it names. */
static void sweep_schedule(const zero__config *c, const zero_run_config *rc) {
    for (uint64_t t = 1; t <= 64; t++) check_step(c, rc, t);
    static const char *counts[] = {"warmup_num_steps", "total_num_steps", "cycle_first_step_size",
                                   "cycle_second_step_size", "decay_step_size", "lr_range_test_step_size"};
    int64_t start = -1, v, sum = 0;
    char path[96];
    (void)zero__config_int(c, "scheduler.params.last_batch_iteration", &start);
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
        snprintf(path, sizeof path, "scheduler.params.%s", counts[k]);
        if (zero__config_int(c, path, &v) != 1 || v < 0) continue;
        if (k == 2 || k == 3) sum += v; /* the cycle's end: first + second */
        for (int64_t d = -2; d <= 3; d++) {
            /* step t runs at iteration start + t - 1: t = v - start + d */
            const double t = (double)v - (double)start + (double)d;
            if (t >= 1 && t < 18446744073709551615.0) check_step(c, rc, (uint64_t)t);
            if ((double)v + (double)d >= 1) check_step(c, rc, (uint64_t)((double)v + (double)d));
        }
    }
    for (int64_t d = -2; d <= 3; d++)
        if ((double)sum + 2 * (double)d >= 1) check_step(c, rc, (uint64_t)((double)sum + 2 * (double)d));
    static const uint64_t far[] = {1000, 1000000, 4294967296ull, 9007199254740993ull, 9223372036854775808ull,
                                   UINT64_MAX};
    for (size_t k = 0; k < sizeof far / sizeof *far; k++) check_step(c, rc, far[k]);
}

/* The run view's optimizer and scaling values, which reach fp32 kernels. */
static void check_values(const zero_run_config *rc) {
    REQUIRE(in_f32(rc->lr, 0.0), "lr %g", rc->lr);
    REQUIRE(in_f32(rc->weight_decay, 0.0), "weight_decay %g", rc->weight_decay);
    if (rc->optim != ZERO_OPTIM_SGD && rc->optim != ZERO_OPTIM_LION)
        REQUIRE(in_f32(rc->eps, FLT_MIN), "eps %g", rc->eps);
    if (rc->optim != ZERO_OPTIM_SGD && rc->optim != ZERO_OPTIM_ADAGRAD)
        REQUIRE(is_beta(rc->beta1) && is_beta(rc->beta2), "betas (%.17g, %.17g)", rc->beta1, rc->beta2);
    REQUIRE(rc->momentum >= 0 && rc->momentum <= 1, "momentum %g", rc->momentum);
    const double f = rc->gradient_predivide_factor;
    REQUIRE(in_f32(f, FLT_MIN) && in_f32(1.0 / f, FLT_MIN), "gradient_predivide_factor %g", f);
    REQUIRE(isfinite(rc->gradient_clipping) && rc->gradient_clipping >= 0, "gradient_clipping %g",
            rc->gradient_clipping);
    /* the loss scale the scaler starts from (zero__scaler_init), its floor,
     * and the reciprocals the gradients are unscaled by */
    const double scale = rc->fp16_loss_scale > 0 ? rc->fp16_loss_scale : ldexp(1.0, rc->fp16_initial_scale_power);
    REQUIRE(in_f32(scale, FLT_MIN) && in_f32(1.0 / scale, 0.0), "loss scale %g", scale);
    REQUIRE(in_f32(rc->fp16_min_loss_scale, FLT_MIN) && in_f32(1.0 / rc->fp16_min_loss_scale, 0.0),
            "min_loss_scale %g", rc->fp16_min_loss_scale);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* config text: up to the first NUL; lookup path: after it */
    const uint8_t *nul = memchr(data, 0, size);
    const size_t tlen = nul ? (size_t)(nul - data) : size;
    char *text = malloc(tlen + 1);
    if (!text) return 0;
    memcpy(text, data, tlen);
    text[tlen] = 0;
    char *path = NULL;
    if (nul) {
        const size_t plen = size - tlen - 1;
        path = malloc(plen + 1);
        if (!path) return free(text), 0;
        memcpy(path, nul + 1, plen);
        path[plen] = 0;
    }
    const int world = 1 + (int)(size % 9);

    char err[512];
    memset(err, 'x', sizeof err);
    int warnings = 0;
    zero__config *c = NULL;
    zero_status s = zero__config_parse(text, NULL, world, &c, count_warning, &warnings, err, sizeof err);
    if (s == ZERO_OK) {
        REQUIRE(c != NULL, "ZERO_OK without a config");
        const zero_run_config *rc = zero__config_run(c);
        REQUIRE(rc != NULL, "no run view");
        REQUIRE(rc->grad_accum_steps >= 1 && rc->micro_batch_per_gpu >= 1, "batch sizes below 1");
        REQUIRE(rc->train_batch_size == rc->micro_batch_per_gpu * rc->grad_accum_steps * world,
                "train %lld != micro %lld * gas %lld * world %d", (long long)rc->train_batch_size,
                (long long)rc->micro_batch_per_gpu, (long long)rc->grad_accum_steps, world);
        REQUIRE(rc->stage >= 0 && rc->stage <= 3, "stage %d", (int)rc->stage);
        REQUIRE(rc->pipeline_stages >= 1, "pipeline_stages %d", (int)rc->pipeline_stages);
        const char *plugin = zero__config_plugin(c);
        REQUIRE(plugin && plugin[0], "no plugin name");
        (void)zero__config_scheduler(c);
        check_values(rc);
        sweep_schedule(c, rc);
        int peek = zero__config_peek_pipeline_stages(text, NULL);
        /* the engine sizes the data-parallel group from the peek before the
         * real parse: both must read pipeline.stages the same way */
        REQUIRE(peek == rc->pipeline_stages, "peek says %d pipeline stages, the parse %d", peek,
                (int)rc->pipeline_stages);
        static const char *fixed[] = {"optimizer.params.lr", "optimizer.params.betas[1]", "zero_optimization.stage",
                                      "a.b.c.d", "[0]", "x[4294967296]", "..", "scheduler.params.0"};
        for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++) lookups(c, fixed[k]);
        if (path) lookups(c, path);
        zero__config_free(c);
    } else {
        REQUIRE(c == NULL, "status %d with a config handle", (int)s);
        REQUIRE(s == ZERO_ERR_CONFIG || s == ZERO_ERR_IO, "unexpected status %d", (int)s);
        REQUIRE(memchr(err, 0, sizeof err) != NULL, "error message not terminated");
        REQUIRE(err[0] != 0, "status %d with an empty error message", (int)s);
        (void)zero__config_peek_pipeline_stages(text, NULL);
    }
    free(text);
    free(path);
    return 0;
}
