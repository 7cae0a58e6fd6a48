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
 *   - zero__config_peek_pipeline_stages agrees with a successful parse.
 * A broken contract aborts (libFuzzer saves the input as a crash). */
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
