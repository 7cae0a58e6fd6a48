/* Forward compatibility: this host is compiled against the FROZEN 1.0
 * headers in tests/abi/v1.0/ (never against abi/) and runs against the
 * current libzero.so.  It must keep working for every 1.x library:
 *  - the runtime ABI major is 1 and the minor is >= the one compiled in;
 *  - a full engine life (create, register, params_done, grad hooks, step,
 *    stats, destroy) works with the 1.0 struct sizes;
 *  - the library never writes past the struct_size a host declares (a host
 *    built against an older minor has smaller structs).
 * argv[1]: plugin name or path to train with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "zero.h" /* tests/abi/v1.0/zero.h */

#if ZERO_ABI_VERSION_MAJOR != 1 || ZERO_ABI_VERSION_MINOR != 0
#error "compat_host_v1_0 must be compiled against the frozen 1.0 headers"
#endif

static const char *CONFIG = "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 2,"
                            " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.05}}}";

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <plugin name or path>\n", argv[0]);
        return 2;
    }
    uint32_t v = zero_abi_version();
    CHECK(v / 10000 == ZERO_ABI_VERSION_MAJOR, "runtime ABI major %u", v / 10000);
    CHECK((long)(v % 10000) >= (long)ZERO_ABI_VERSION_MINOR, "runtime ABI minor %u older than compiled 1.0", v % 10000);
    CHECK(strncmp(zero_status_string(ZERO_ERR_CONFIG), "ZERO_ERR_CONFIG", 15) == 0, "status text");
    CHECK(zero_status_string(12345) != NULL, "unknown status has text");
    CHECK(strcmp(zero_mem_tag_name(ZERO_MEM_OPTIM), "optim") == 0, "tag name");
    CHECK(zero_version_string()[0] == '1', "version %s", zero_version_string());

    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = CONFIG;
    o.comm_kind = ZERO_COMM_SELF;
    o.plugin = argv[1];
    zero_engine *e = NULL;
    char err[2048] = "";
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "create: %s", err);
    if (s != ZERO_OK) return check_finish();

    /* loss = 0.5 * |w|^2 summed over 2 micro-batches: mean grad = w. */
    enum { N = 37 };
    float w0[N];
    for (int i = 0; i < N; ++i) w0[i] = (float)(i - 18) / 8.0f;
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "w";
    d.data = w0;
    d.numel = N;
    zero_param *p = NULL;
    CHECK_EQ_INT(zero_register_param(e, &d, &p), ZERO_OK);
    s = zero_params_done(e);
    CHECK(s == ZERO_OK, "params_done: %s", zero_last_error(e));
    int taken = 0;
    for (int micro = 0; s == ZERO_OK && micro < 6; ++micro) {
        void *w = NULL, *g = NULL;
        CHECK_EQ_INT(zero_gather(e, &p, 1, &w), ZERO_OK);
        CHECK_EQ_INT(zero_grad_buffer(e, p, &g), ZERO_OK);
        for (int i = 0; w && g && i < N; ++i) ((float *)g)[i] += ((const float *)w)[i];
        CHECK_EQ_INT(zero_release(e, &p, 1), ZERO_OK);
        CHECK_EQ_INT(zero_on_grad_ready(e, p, NULL), ZERO_OK);
        zero_step_result r = ZERO_STEP_RESULT_INIT;
        s = zero_step(e, NULL, &r);
        CHECK(s == ZERO_OK, "step: %s", zero_last_error(e));
        CHECK_EQ_INT(r.boundary, micro % 2 == 1);
        taken += r.taken;
    }
    CHECK_EQ_INT(taken, 3);
    void *w = NULL;
    CHECK_EQ_INT(zero_gather(e, &p, 1, &w), ZERO_OK);
    double f = 0.95 * 0.95 * 0.95;
    for (int i = 0; w && i < N; ++i) CHECK_NEAR(((float *)w)[i], w0[i] * f, 1e-5);
    CHECK_EQ_INT(zero_release(e, &p, 1), ZERO_OK);

    /* A host from an older minor declares a smaller struct: the library
     * must fill only what the size covers.  Canary bytes after the cut. */
    union {
        zero_memory_stats st;
        unsigned char raw[sizeof(zero_memory_stats)];
    } ms;
    memset(&ms, 0xA5, sizeof ms);
    const size_t cut = offsetof(zero_memory_stats, current_total);
    ms.st.struct_size = (uint32_t)cut;
    CHECK_EQ_INT(zero_memory_stats_get(e, &ms.st), ZERO_OK);
    int canary_ok = 1;
    for (size_t i = cut; i < sizeof ms; ++i) canary_ok &= ms.raw[i] == 0xA5;
    CHECK(canary_ok, "zero_memory_stats_get wrote past struct_size %zu", cut);
    uint64_t bytes = 0; /* which tag holds the weights is the plugin's business */
    for (int t = 0; t < ZERO_NTIERS; ++t)
        for (int g = 0; g < ZERO_MEM_NTAGS; ++g) bytes += ms.st.current[t][g];
    CHECK(bytes >= N * sizeof(float), "model state accounted: %llu bytes", (unsigned long long)bytes);

    zero_comm_stats cs = ZERO_COMM_STATS_INIT;
    CHECK_EQ_INT(zero_comm_stats_get(e, &cs), ZERO_OK);

    zero_engine_destroy(e);
    return check_finish();
}
