/* The loader as a host sees it: zero_engine_create (ZERO_COMM_SELF) with
 * plugins that are missing, built for another ABI, or fail in create gives
 * the documented status and message, leaves nothing loaded, and a good
 * plugin whose optional functions are NULL still trains afterwards (the
 * core's defaults for gather/release/save are used).
 * argv[1]: directory of the test plugins. */
#define ZERO_STR_(x) #x
#define ZERO_STR(x) ZERO_STR_(x)
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loader_paths.h"
#include "zero.h"

static const char *g_dir;
static const char *CONFIG =
    "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
    " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}},"
    " \"libzero_loader_test_unknown_key\": 1}";

static const char *plugin_path(const char *variant) { return loader_plugin_path(g_dir, variant); }
static int still_loaded(const char *path) { return loader_still_loaded(path); }

typedef struct log_capture {
    int warns;
    int saw_unknown_key;
    int bad_rank;
} log_capture;

static void capture_log(void *user, zero_log_level lvl, int rank, const char *msg) {
    log_capture *c = user;
    if (lvl == ZERO_LOG_WARN) c->warns++;
    if (strstr(msg, "libzero_loader_test_unknown_key")) c->saw_unknown_key = 1;
    if (rank != 0 && rank != -1) c->bad_rank = 1;
}

static zero_status create(const char *plugin, zero_engine **e, char *err, size_t len, log_capture *cap) {
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = CONFIG;
    o.comm_kind = ZERO_COMM_SELF;
    o.plugin = plugin;
    o.log_fn = capture_log;
    o.log_user = cap;
    return zero_engine_create(&o, e, err, len);
}

static void expect_create_fails(const char *plugin, zero_status want, const char *needle) {
    zero_engine *e = (zero_engine *)1;
    char err[4096] = "";
    log_capture cap = {0};
    zero_status s = create(plugin, &e, err, sizeof err, &cap);
    CHECK(s == want, "%s: got %s, want %s; message: %s", plugin, zero_status_string(s), zero_status_string(want),
          err);
    CHECK(e == NULL, "%s: *out must be NULL on failure", plugin);
    const char *msg = err;
    CHECK_STR_CONTAINS(msg, needle);
}

static void test_refusals(void) {
    expect_create_fails(plugin_path("wrong-major"), ZERO_ERR_PLUGIN_ABI, "this library implements 1." ZERO_STR(ZERO_ABI_VERSION_MINOR));
    expect_create_fails(plugin_path("no-step"), ZERO_ERR_PLUGIN_SYMBOL, "step");
    expect_create_fails("loader-no-such-plugin", ZERO_ERR_PLUGIN_NOT_FOUND, "libzero-plugin-loader-no-such-plugin.so");
    expect_create_fails(plugin_path("fail-create"), ZERO_ERR_PLUGIN_INIT, "refuses to start (on purpose)");
    CHECK(!still_loaded(plugin_path("fail-create")), "a plugin whose create failed is unloaded");
    CHECK(!still_loaded(plugin_path("wrong-major")), "a refused plugin is unloaded");
}

/* loss = 0.5 * |w|^2, so grad = w and plain SGD gives w * (1 - lr)^t. */
static void test_good_plugin_trains(void) {
    zero_engine *e = NULL;
    char err[4096] = "";
    log_capture cap = {0};
    zero_status s = create("loader-good", &e, err, sizeof err, &cap); /* by name, via ZERO_PLUGIN_PATH */
    CHECK(s == ZERO_OK, "create with loader-good: %s", err);
    if (s != ZERO_OK) return;
    CHECK(strcmp(zero_plugin_name(e), "loader-good") == 0, "plugin name %s", zero_plugin_name(e));
    CHECK(zero_rank(e) == 0 && zero_world_size(e) == 1, "self comm");
    CHECK(cap.saw_unknown_key, "the unknown config key was reported through the host's log callback");
    CHECK(!cap.bad_rank, "log callback got the engine's rank");

    float w0a[3] = {1, -2, 3}, w0b[5] = {0.5f, 0.25f, -1, 4, 8};
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    zero_param *pa = NULL, *pb = NULL;
    d.name = "a"; d.data = w0a; d.numel = 3;
    CHECK_EQ_INT(zero_register_param(e, &d, &pa), ZERO_OK);
    d.name = "b"; d.data = w0b; d.numel = 5;
    CHECK_EQ_INT(zero_register_param(e, &d, &pb), ZERO_OK);
    s = zero_params_done(e);
    CHECK(s == ZERO_OK, "params_done: %s", zero_last_error(e));
    if (s != ZERO_OK) { zero_engine_destroy(e); return; }

    const int steps = 3;
    for (int t = 0; t < steps; ++t) {
        zero_param *ps[2] = {pa, pb};
        void *w[2] = {NULL, NULL};
        CHECK_EQ_INT(zero_gather(e, ps, 2, w), ZERO_OK); /* plugin's gather is NULL: core default */
        for (int i = 0; i < 2; ++i) {
            void *g = NULL;
            CHECK_EQ_INT(zero_grad_buffer(e, ps[i], &g), ZERO_OK);
            uint64_t n = i ? 5 : 3;
            for (uint64_t k = 0; g && w[i] && k < n; ++k) ((float *)g)[k] += ((const float *)w[i])[k];
            CHECK_EQ_INT(zero_on_grad_ready(e, ps[i], NULL), ZERO_OK);
        }
        CHECK_EQ_INT(zero_release(e, ps, 2), ZERO_OK); /* release NULL: no-op */
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        s = zero_step(e, NULL, &r);
        CHECK(s == ZERO_OK, "step: %s", zero_last_error(e));
        CHECK(r.taken == 1 && r.boundary == 1, "step %d taken", t);
    }
    zero_param *ps[2] = {pa, pb};
    void *w[2] = {NULL, NULL};
    CHECK_EQ_INT(zero_gather(e, ps, 2, w), ZERO_OK);
    double f = 0.9 * 0.9 * 0.9;
    for (int k = 0; w[0] && k < 3; ++k) CHECK_NEAR(((float *)w[0])[k], w0a[k] * f, 1e-5);
    for (int k = 0; w[1] && k < 5; ++k) CHECK_NEAR(((float *)w[1])[k], w0b[k] * f, 1e-5);

    /* save is NULL in this plugin: a clear error, not a crash. */
    s = zero_save(e, "/tmp/libzero-loader-test-ckpt-unused");
    CHECK(s == ZERO_ERR_UNSUPPORTED, "save without plugin support: %s", zero_status_string(s));
    CHECK_STR_CONTAINS(zero_last_error(e), "rank 0: ");
    CHECK_STR_CONTAINS(zero_last_error(e), "loader-good");

    zero_engine_destroy(e);
    CHECK(!still_loaded(plugin_path("good")), "destroy unloads the plugin");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <test plugin dir>\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    setenv("ZERO_PLUGIN_PATH", g_dir, 1);
    unsetenv("ZERO_PLUGIN");
    test_refusals();
    test_good_plugin_trains();
    test_refusals(); /* the process is still usable after a full engine life */
    test_good_plugin_trains();
    return check_finish();
}
