/* The loader as a host sees it: zero_engine_create (ZERO_COMM_SELF) with
 * plugins that are missing, built for another ABI, or fail in create gives
 * the documented status and message, leaves nothing loaded, and a good
 * plugin whose optional functions are NULL still trains afterwards (the
 * core's defaults for gather/release/save are used); a plugin path that is
 * not a regular file (FIFO, directory, device) is refused at once by name;
 * a plugin that breaks the data-pointer contract gets a named error.
 * argv[1]: directory of the test plugins. */
#define ZERO_STR_(x) #x
#define ZERO_STR(x) ZERO_STR_(x)
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "loader_paths.h"
#include "zero_plugin.h" /* ZERO_PLUGIN_ABI_MINOR */

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
    int saw_plugin_ignored;
} log_capture;

static void capture_log(void *user, zero_log_level lvl, int rank, const char *msg) {
    log_capture *c = user;
    if (lvl == ZERO_LOG_WARN) c->warns++;
    if (strstr(msg, "libzero_loader_test_unknown_key")) c->saw_unknown_key = 1;
    if (rank != 0 && rank != -1) c->bad_rank = 1;
    if (lvl == ZERO_LOG_WARN &&
        strstr(msg, "ZERO_PLUGIN=loader-other is ignored: the host named plugin 'loader-good'"))
        c->saw_plugin_ignored = 1;
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
    expect_create_fails(plugin_path("wrong-major"), ZERO_ERR_PLUGIN_ABI, "this library implements 1." ZERO_STR(ZERO_PLUGIN_ABI_MINOR));
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

/* (1.7) A revision-2 plugin (built as the 1.6 headers made it) loads,
 * trains, and serves zero_gather_slices through the core's fallback: a
 * pointer to the slice inside the param's storage.  (1.10) So does a
 * revision-3 one (1.7); both refuse zero_params_write by name. */
static void test_old_plugin_slices(const char *name, const char *abi) {
    zero_engine *e = NULL;
    char err[4096] = "";
    log_capture cap = {0};
    zero_status s = create(name, &e, err, sizeof err, &cap);
    CHECK(s == ZERO_OK, "create with %s: %s", name, err);
    if (s != ZERO_OK) return;
    float w0[6] = {1, 2, 3, 4, 5, 6};
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    zero_param *p = NULL;
    d.name = "stack"; d.data = w0; d.numel = 6;
    CHECK_EQ_INT(zero_register_stacked(e, &d, 3, &p), ZERO_OK);
    CHECK_EQ_INT(zero_params_done(e), ZERO_OK);
    for (uint32_t l = 0; l < 3; ++l) {
        void *w = NULL, *g = NULL;
        CHECK_EQ_INT(zero_gather_slices(e, &p, &l, 1, &w), ZERO_OK);
        CHECK(w && ((float *)w)[0] == w0[2 * l] && ((float *)w)[1] == w0[2 * l + 1], "slice %u values", l);
        CHECK_EQ_INT(zero_slice_grad_buffer(e, p, l, &g), ZERO_OK);
        for (int k = 0; g && w && k < 2; ++k) ((float *)g)[k] += ((const float *)w)[k];
        CHECK_EQ_INT(zero_release_slices(e, &p, &l, 1), ZERO_OK);
        CHECK_EQ_INT(zero_on_slice_ready(e, p, l, NULL), ZERO_OK);
    }
    zero_step_result r = ZERO_STEP_RESULT_INIT;
    CHECK_EQ_INT(zero_step(e, NULL, &r), ZERO_OK);
    void *w = NULL;
    uint32_t l2 = 2, l3 = 3;
    CHECK_EQ_INT(zero_gather_slices(e, &p, &l2, 1, &w), ZERO_OK);
    CHECK(w && ((float *)w)[1] == (float)(w0[5] * 0.9), "after a step: %g", w ? ((float *)w)[1] : -1.0);
    CHECK_EQ_INT(zero_release_slices(e, &p, &l2, 1), ZERO_OK);
    CHECK_EQ_INT(zero_gather_slices(e, &p, &l3, 1, &w), ZERO_ERR_INVALID_ARGUMENT);
    /* (1.10) no write_params before plugin ABI 1.8: refused by name, nothing written */
    const float w1[6] = {9, 9, 9, 9, 9, 9};
    const void *vals[1] = {w1};
    CHECK_EQ_INT(zero_params_write(e, &p, vals, 1, 0), ZERO_ERR_UNSUPPORTED);
    CHECK_STR_CONTAINS(zero_last_error(e), name);
    CHECK_STR_CONTAINS(zero_last_error(e), abi);
    CHECK_STR_CONTAINS(zero_last_error(e), "which has no write_params");
    CHECK_EQ_INT(zero_gather_slices(e, &p, &l2, 1, &w), ZERO_OK);
    CHECK(w && ((float *)w)[1] == (float)(w0[5] * 0.9), "not written: %g", w ? ((float *)w)[1] : -1.0);
    CHECK_EQ_INT(zero_release_slices(e, &p, &l2, 1), ZERO_OK);
    zero_engine_destroy(e);
}

/* Seconds since an arbitrary start (CLOCK_MONOTONIC). */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A plugin path that is not a regular file is refused by name, at once:
 * dlopen of a FIFO would block until a writer comes (forever).  The ctest
 * TIMEOUT turns a block into a failure; the elapsed time is checked too. */
static void test_not_regular_files(void) {
    char dir[] = "/tmp/zero-loader-fifo-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char fifo[256], sub[256];
    snprintf(fifo, sizeof fifo, "%s/libzero-plugin-fifo.so", dir);
    snprintf(sub, sizeof sub, "%s/libzero-plugin-dir.so", dir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    CHECK(mkdir(sub, 0700) == 0, "mkdir %s", sub);
    const double t0 = now_s();
    expect_create_fails(fifo, ZERO_ERR_PLUGIN_NOT_FOUND, "is a FIFO, not a regular file");
    expect_create_fails(fifo, ZERO_ERR_PLUGIN_NOT_FOUND, fifo);
    expect_create_fails(sub, ZERO_ERR_PLUGIN_NOT_FOUND, "is a directory, not a regular file");
    expect_create_fails("/dev/null", ZERO_ERR_PLUGIN_NOT_FOUND, "/dev/null is a character device");
    /* found by name on the search path: refused, not skipped for a later copy */
    char env[4096];
    snprintf(env, sizeof env, "%s:%s", dir, g_dir);
    setenv("ZERO_PLUGIN_PATH", env, 1);
    expect_create_fails("fifo", ZERO_ERR_PLUGIN_NOT_FOUND, fifo);
    setenv("ZERO_PLUGIN_PATH", g_dir, 1);
    const double dt = now_s() - t0;
    CHECK(dt < 5.0, "refusing non-regular plugin files took %.2f s", dt);
    unlink(fifo);
    rmdir(sub);
    rmdir(dir);
}

/* The plugin contract, checked by the core: a plugin that leaves a param
 * without storage (params_done) or hands out NULL from gather gets a named
 * error; the host never receives a NULL parameter pointer. */
static void contract_run(const char *variant, int fail_at_params_done) {
    zero_engine *e = NULL;
    char err[4096] = "";
    log_capture cap = {0};
    zero_status s = create(plugin_path(variant), &e, err, sizeof err, &cap);
    CHECK(s == ZERO_OK, "create %s: %s", variant, err);
    if (s != ZERO_OK) return;
    float a[3] = {1, 2, 3}, b[5] = {1, 2, 3, 4, 5};
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    zero_param *pa = NULL, *pb = NULL;
    d.name = "contract.a";
    d.data = a;
    d.numel = 3;
    CHECK_EQ_INT(zero_register_param(e, &d, &pa), ZERO_OK);
    d.name = "contract.b";
    d.data = b;
    d.numel = 5;
    CHECK_EQ_INT(zero_register_param(e, &d, &pb), ZERO_OK);
    s = zero_params_done(e);
    if (fail_at_params_done) {
        CHECK(s == ZERO_ERR_PLUGIN_SYMBOL, "%s: params_done gave %s: %s", variant, zero_status_string(s),
              zero_last_error(e));
        CHECK_STR_CONTAINS(zero_last_error(e), "plugin 'loader-null-data' broke its contract");
        CHECK_STR_CONTAINS(zero_last_error(e), "param 'contract.b'");
        void *w = (void *)1;
        zero_param_storage(e, pb, &w);
        CHECK(w == NULL || w == (void *)1, "no NULL storage handed out as valid");
    } else {
        CHECK(s == ZERO_OK, "%s: params_done (data NULL is allowed with a gather): %s", variant, zero_last_error(e));
        zero_param *ps[2] = {pa, pb};
        void *w[2] = {NULL, NULL};
        s = zero_gather(e, ps, 2, w);
        CHECK(s == ZERO_ERR_PLUGIN_SYMBOL, "%s: gather gave %s: %s", variant, zero_status_string(s),
              zero_last_error(e));
        CHECK_STR_CONTAINS(zero_last_error(e), "plugin 'loader-null-gather' broke its contract");
        CHECK_STR_CONTAINS(zero_last_error(e), "param 'contract.b'");
        CHECK(s != ZERO_OK || w[1] != NULL, "a NULL pointer with ZERO_OK");
    }
    zero_engine_destroy(e);
}

/* (1.7.5) An operator's ZERO_PLUGIN that the host's own choice overrides is
 * warned about; the same name is not. */
static void test_env_plugin_overridden(void) {
    for (int same = 0; same <= 1; same++) {
        setenv("ZERO_PLUGIN", same ? "loader-good" : "loader-other", 1);
        zero_engine *e = NULL;
        char err[4096] = "";
        log_capture cap = {0};
        zero_status s = create("loader-good", &e, err, sizeof err, &cap);
        CHECK(s == ZERO_OK, "create with ZERO_PLUGIN set: %s", err);
        CHECK(cap.saw_plugin_ignored == !same, "ZERO_PLUGIN=%s and the host's loader-good: warned %d",
              same ? "loader-good" : "loader-other", cap.saw_plugin_ignored);
        if (e) CHECK(strcmp(zero_plugin_name(e), "loader-good") == 0, "plugin %s", zero_plugin_name(e));
        zero_engine_destroy(e);
    }
    unsetenv("ZERO_PLUGIN");
}

static void test_contract(void) {
    contract_run("null-data", 1);
    contract_run("null-gather", 0);
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
    test_old_plugin_slices("loader-rev2", "plugin ABI 1.6");
    test_old_plugin_slices("loader-rev3", "plugin ABI 1.7");
    test_not_regular_files();
    test_contract();
    test_env_plugin_overridden();
    return check_finish();
}
