/* White-box fixture for the bucket engine tests (tests/stages/test_buckets.c,
 * tests/offload/test_block_final.c; they link zero_static): an engine from
 * the public API (stage0 plugin, so the core has a layout) over
 * MPI_COMM_WORLD with params of the given sizes in two groups, a
 * deterministic per-rank gradient, and a bucket spec over the test's own
 * buffers.  Header-only (its CHECKs count in the including test).  Not
 * thread-safe; call from the main thread. */
#ifndef ZERO_TESTS_BUCKET_FIXTURE_H
#define ZERO_TESTS_BUCKET_FIXTURE_H
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "buckets.h"
#include "check.h"
#include "engine.h"

/* Engine with gradient_accumulation_steps = gas and np fp32 params
 * "p0".."p<np-1>" of sizes[i] <= 1000 elements (zeros; param 3 in group 1,
 * the others in group 0), params done.  NULL (after a failed CHECK) if the
 * engine cannot be created.  The caller destroys it. */
static inline struct zero_engine *bucket_fixture_engine(int gas, const uint64_t *sizes, int np) {
    MPI_Comm comm = MPI_COMM_WORLD;
    char json[256];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}}}",
             gas);
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = json;
    o.plugin = "stage0";
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &comm;
    zero_engine *e = NULL;
    char err[512] = "";
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "engine: %s", err);
    if (!e) return NULL;
    static float zeros[1000];
    for (int i = 0; i < np; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = zeros;
        d.numel = sizes[i];
        d.group = i == 3 ? 1 : 0; /* two groups */
        zero_param *h;
        CHECK_EQ_INT(zero_register_param(e, &d, &h), ZERO_OK);
    }
    CHECK_EQ_INT(zero_params_done(e), ZERO_OK);
    return e;
}

/* Rank r's gradient of param i, element k. */
static inline float bucket_fixture_grad(int r, int i, uint64_t k) {
    return (float)((r + 1) * (i + 1)) + 0.001f * (float)(k % 7);
}

/* A current-size spec: contiguous, fp32 gradients, reducing every
 * micro-step in SCATTER mode (as stage 2/3 do), no callback. */
static inline zero_bucket_spec bucket_fixture_spec(zero_bucket_mode mode, uint64_t bucket, int overlap, void *flat,
                                                   void *part) {
    zero_bucket_spec s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.mode = mode;
    s.bucket_numel = bucket;
    s.overlap = overlap;
    s.contiguous = 1;
    s.flat = flat;
    s.partition = part;
    s.reduce_every_micro_step = mode == ZERO_BUCKETS_SCATTER;
    s.grad_dtype = ZERO_DTYPE_F32;
    return s;
}
#endif
