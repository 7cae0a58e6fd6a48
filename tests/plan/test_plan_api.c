/* zero_plan's contract around the numbers: argument checks, "auto" refused
 * (it is a choice among plans, not a plugin), a plugin without a plan entry
 * (any 1.0/1.1 plugin, here the loader tests' minimal plugin) is
 * ZERO_ERR_UNSUPPORTED naming it, and a bare count is planned as tensors of
 * ZERO_PLAN_TENSOR_NUMEL elements (the same plan as that list given
 * explicitly).  Usage: test_plan_api <dir of the loader test plugins> */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "zero.h"

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: test_plan_api <loader plugin dir>\n"), 2;
    char err[2048], path[4096];
    zero_memory_plan p = ZERO_MEMORY_PLAN_INIT;
    zero_plan_request rq = ZERO_PLAN_REQUEST_INIT;
    const uint64_t n3[3] = {1000, 10, 5000};

    CHECK(zero_plan(NULL, &p, err, sizeof err) == ZERO_ERR_INVALID_ARGUMENT, "NULL request accepted");
    rq.world_size = 0;
    rq.total_params = 10;
    CHECK(zero_plan(&rq, &p, err, sizeof err) == ZERO_ERR_INVALID_ARGUMENT, "world 0 accepted");
    CHECK(strstr(err, "world_size") != NULL, "message: %s", err);
    rq.world_size = 2;
    rq.total_params = 0;
    CHECK(zero_plan(&rq, &p, err, sizeof err) == ZERO_ERR_INVALID_ARGUMENT, "no model accepted");

    rq.numels = n3;
    rq.nparams = 3;
    rq.plugin = "auto";
    CHECK(zero_plan(&rq, &p, err, sizeof err) == ZERO_ERR_INVALID_ARGUMENT, "plugin auto accepted");
    CHECK(strstr(err, "auto") != NULL, "message: %s", err);

    snprintf(path, sizeof path, "%s/libzero-plugin-loader-good.so", argv[1]);
    rq.plugin = path;
    CHECK(zero_plan(&rq, &p, err, sizeof err) == ZERO_ERR_UNSUPPORTED, "a plugin without plan: %s", err);
    CHECK(strstr(err, "loader-good") && strstr(err, "no plan function"), "message: %s", err);

    rq.plugin = "nonexistent-plugin-xyz";
    CHECK(zero_plan(&rq, &p, err, sizeof err) == ZERO_ERR_PLUGIN_NOT_FOUND, "missing plugin: %s", err);

    /* a bare count equals its documented tensor split */
    const uint64_t T = ZERO_PLAN_TENSOR_NUMEL, total = 3 * T + 5;
    const uint64_t split[4] = {T, T, T, 5};
    zero_memory_plan a = ZERO_MEMORY_PLAN_INIT, b = ZERO_MEMORY_PLAN_INIT;
    const char *plugins[] = {"stage0", "stage2", "stage3", "offload"};
    for (int i = 0; i < 4; i++) {
        zero_plan_request r1 = ZERO_PLAN_REQUEST_INIT, r2 = ZERO_PLAN_REQUEST_INIT;
        r1.plugin = r2.plugin = plugins[i];
        r1.config_json = r2.config_json = "{\"bf16\": {\"enabled\": true}}";
        r1.world_size = r2.world_size = 8;
        r1.total_params = total;
        r2.numels = split;
        r2.nparams = 4;
        CHECK(zero_plan(&r1, &a, err, sizeof err) == ZERO_OK, "%s bare: %s", plugins[i], err);
        CHECK(zero_plan(&r2, &b, err, sizeof err) == ZERO_OK, "%s list: %s", plugins[i], err);
        CHECK(memcmp(a.bytes, b.bytes, sizeof a.bytes) == 0, "%s: bare count and its split differ", plugins[i]);
        CHECK(strcmp(a.plugin, plugins[i]) == 0, "plan names '%s'", a.plugin);
        /* bf16, 8 ranks: stage 0 holds the full 2-byte params; the model states are all in the
         * device tier, the host tier holds only the MPI ring scratch (`other`, docs/planner.md) */
        if (i == 0) CHECK(a.bytes[ZERO_TIER_DEVICE][ZERO_MEM_PARAMS] >= 2 * total, "params %llu",
                          (unsigned long long)a.bytes[ZERO_TIER_DEVICE][ZERO_MEM_PARAMS]);
        if (i < 3)
            CHECK(a.total[ZERO_TIER_HOST] == a.bytes[ZERO_TIER_HOST][ZERO_MEM_OTHER] &&
                      a.bytes[ZERO_TIER_HOST][ZERO_MEM_OTHER] > 0,
                  "%s plans host memory other than comm scratch", plugins[i]);
        else CHECK(a.total[ZERO_TIER_HOST] > 0, "offload plans no host memory");
    }
    return check_finish();
}
