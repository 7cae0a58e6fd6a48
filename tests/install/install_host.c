/* A host built the way a user builds one: `cc $(pkg-config --cflags --libs
 * zero)` against an installed libzero (tests/install/run_install_test.sh).
 * Trains a small least-squares problem with Adam, gas 2, clipping, writes
 * the final parameters to a file (so two plugins can be compared bitwise)
 * and, when the plugin supports checkpoints, checks that zero_load restores
 * what zero_save wrote.
 * Usage: install_host <plugin> <out.bin> <checkpoint dir> */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero.h"

static const char *CONFIG =
    "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 2,"
    " \"gradient_clipping\": 1.0,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}}}";

enum { ROWS = 4, DIM = 8, STEPS1 = 5, STEPS2 = 3 };

static int fail(const char *what, zero_status s, zero_engine *e) {
    fprintf(stderr, "install_host: %s: %s: %s\n", what, zero_status_string(s), e ? zero_last_error(e) : "");
    return 1;
}

/* One micro-batch of backward for loss 0.5*|A w + b - y|^2. */
static int micro(zero_engine *e, zero_param *pw, zero_param *pb, int m) {
    zero_param *ps[2] = {pw, pb};
    void *val[2];
    zero_status s = zero_gather(e, ps, 2, val);
    if (s) return fail("gather", s, e);
    const float *w = val[0], *b = val[1];
    float r[ROWS];
    for (int i = 0; i < ROWS; ++i) {
        double acc = b[0] - (double)((i + m) % 3) + 0.5;
        for (int j = 0; j < DIM; ++j) acc += (double)((i * 7 + j * 3) % 5 - 2) / 4.0 * w[j];
        r[i] = (float)acc;
    }
    void *gw, *gb;
    if ((s = zero_grad_buffer(e, pb, &gb)) || (s = zero_grad_buffer(e, pw, &gw))) return fail("grad_buffer", s, e);
    for (int i = 0; i < ROWS; ++i) {
        ((float *)gb)[0] += r[i];
        for (int j = 0; j < DIM; ++j) ((float *)gw)[j] += (float)((i * 7 + j * 3) % 5 - 2) / 4.0f * r[i];
    }
    if ((s = zero_release(e, ps, 2))) return fail("release", s, e);
    /* Backward order: bias last layer first, as a real hook would. */
    if ((s = zero_on_grad_ready(e, pb, NULL)) || (s = zero_on_grad_ready(e, pw, NULL))) return fail("grad_ready", s, e);
    zero_step_result res = ZERO_STEP_RESULT_INIT;
    if ((s = zero_step(e, NULL, &res))) return fail("step", s, e);
    return 0;
}

static int snapshot(zero_engine *e, zero_param *pw, zero_param *pb, float out[DIM + 1]) {
    zero_param *ps[2] = {pw, pb};
    void *val[2];
    zero_status s = zero_gather(e, ps, 2, val);
    if (s) return fail("gather", s, e);
    memcpy(out, val[0], DIM * sizeof(float));
    memcpy(out + DIM, val[1], sizeof(float));
    return zero_release(e, ps, 2) ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s <plugin> <out.bin> <checkpoint dir>\n", argv[0]);
        return 2;
    }
    if (zero_abi_version() / 10000 != ZERO_ABI_VERSION_MAJOR) {
        fprintf(stderr, "install_host: library ABI %u, headers %d.x\n", zero_abi_version(), ZERO_ABI_VERSION_MAJOR);
        return 1;
    }
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = CONFIG;
    o.comm_kind = ZERO_COMM_SELF;
    o.plugin = argv[1];
    zero_engine *e = NULL;
    char err[4096];
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    if (s) {
        fprintf(stderr, "install_host: create with %s: %s: %s\n", argv[1], zero_status_string(s), err);
        return 1;
    }
    float w0[DIM], b0[1] = {0.25f};
    for (int j = 0; j < DIM; ++j) w0[j] = (float)(j - 4) / 10.0f;
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    zero_param *pw, *pb;
    d.name = "w"; d.data = w0; d.numel = DIM;
    if ((s = zero_register_param(e, &d, &pw))) return fail("register w", s, e);
    d.name = "b"; d.data = b0; d.numel = 1;
    if ((s = zero_register_param(e, &d, &pb))) return fail("register b", s, e);
    if ((s = zero_params_done(e))) return fail("params_done", s, e);

    int m = 0;
    for (; m < 2 * STEPS1; ++m)
        if (micro(e, pw, pb, m)) return 1;
    float at_save[DIM + 1], final[DIM + 1], restored[DIM + 1];
    if (snapshot(e, pw, pb, at_save)) return 1;
    zero_status saved = zero_save(e, argv[3]);
    if (saved != ZERO_OK && saved != ZERO_ERR_UNSUPPORTED) return fail("save", saved, e);
    for (; m < 2 * (STEPS1 + STEPS2); ++m)
        if (micro(e, pw, pb, m)) return 1;
    if (snapshot(e, pw, pb, final)) return 1;
    if (memcmp(final, at_save, sizeof final) == 0) {
        fprintf(stderr, "install_host: parameters did not change in %d steps\n", STEPS2);
        return 1;
    }
    FILE *f = fopen(argv[2], "wb");
    if (!f || fwrite(final, sizeof final, 1, f) != 1 || fclose(f) != 0) {
        fprintf(stderr, "install_host: cannot write %s\n", argv[2]);
        return 1;
    }
    if (saved == ZERO_OK) {
        if ((s = zero_load(e, argv[3]))) return fail("load", s, e);
        if (snapshot(e, pw, pb, restored)) return 1;
        if (memcmp(restored, at_save, sizeof restored) != 0) {
            fprintf(stderr, "install_host: zero_load did not restore the saved parameters\n");
            return 1;
        }
        printf("install_host: %s: checkpoint round trip ok\n", argv[1]);
    } else {
        printf("install_host: %s: no checkpoint support (%s)\n", argv[1], zero_last_error(e));
    }
    /* The plugin's plan (ABI 1.2) must equal what it allocated */
    zero_plan_request rq = ZERO_PLAN_REQUEST_INIT;
    const uint64_t numels[2] = {DIM, 1};
    rq.config_json = CONFIG;
    rq.plugin = argv[1];
    rq.world_size = 1;
    rq.nparams = 2;
    rq.numels = numels;
    zero_memory_plan plan = ZERO_MEMORY_PLAN_INIT;
    zero_memory_stats ms = ZERO_MEMORY_STATS_INIT;
    zero_memory_stats_get(e, &ms);
    if ((s = zero_plan(&rq, &plan, err, sizeof err)) != ZERO_OK) {
        fprintf(stderr, "install_host: zero_plan(%s): %s\n", argv[1], err);
        return 1;
    }
    for (int t = 0; t < ZERO_NTIERS; t++)
        for (int g = 0; g < ZERO_MEM_NTAGS; g++)
            if (plan.bytes[t][g] != ms.peak[t][g]) {
                fprintf(stderr, "install_host: %s plans %llu bytes of %s (tier %d), measured %llu\n", argv[1],
                        (unsigned long long)plan.bytes[t][g], zero_mem_tag_name(g), t,
                        (unsigned long long)ms.peak[t][g]);
                return 1;
            }
    printf("install_host: %s: plan = measured peak (%llu bytes)\n", argv[1],
           (unsigned long long)plan.total[ZERO_TIER_DEVICE]);
    printf("install_host: %s: w[0]=%.9g b=%.9g after %d steps\n", zero_plugin_name(e), final[0], final[DIM],
           STEPS1 + STEPS2);
    zero_engine_destroy(e);
    return 0;
}
