/* A non-finite hyper-parameter on ONE rank (issue 31): that rank refuses the
 * step (zero__hp_check_step), and it must not be alone -- the others would
 * enter the plugin's collectives and wait for it until the comm timeout.
 * The refusal travels in the missing-gradient agreement's all-reduce
 * (core/grad_window.c), so every rank returns ZERO_ERR_STATE from the same
 * zero_step at once: the refusing rank naming the value, the others naming
 * "another rank".  No weight moves anywhere, no step is counted, and the
 * window is kept: once the value is sane, zero_step again (no new backward)
 * trains, to the same weights on every rank.
 * stage2 (its step reduce-scatters and all-gathers: the collectives a
 * lone rank would leave the others in), MPI, host-owned weights, the bad
 * value on the last rank (white box: e->lr, as zero_load would restore it).
 * ZERO_COMM_TIMEOUT is set low by the ctest, so a rank left waiting fails the
 * test with a timeout instead of passing late. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine.h"

enum { N = 1000 };

static float w[N];

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm comm = MPI_COMM_WORLD;
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 2, "
                    "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}";
    o.comm_kind = ZERO_COMM_MPI;
    o.comm = &comm;
    o.plugin = "stage2";
    zero_engine *e = NULL;
    char err[512] = "";
    zero_status s = zero_engine_create(&o, &e, err, sizeof err);
    CHECK(s == ZERO_OK, "rank %d: zero_engine_create: %s", rank, err);
    if (s != ZERO_OK) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int i = 0; i < N; i++) w[i] = 0.5f + 0.001f * (float)i;
    zero_param *p = NULL;
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "w";
    d.data = w;
    d.numel = N;
    d.flags = ZERO_PARAM_HOST_OWNED;
    CHECK_EQ_INT(zero_register_param(e, &d, &p), ZERO_OK);
    CHECK_EQ_INT(zero_params_done(e), ZERO_OK);

    /* two micro-steps of the window; the boundary one is refused */
    for (int m = 0; m < 2; m++) {
        void *g = NULL;
        CHECK_EQ_INT(zero_grad_buffer(e, p, &g), ZERO_OK);
        for (int i = 0; g && i < N; i++) ((float *)g)[i] += 0.01f * (float)(rank + 1) * (float)(i % 7 - 3);
        CHECK_EQ_INT(zero_on_grad_ready(e, p, NULL), ZERO_OK);
        if (m == 0) CHECK_EQ_INT(zero_step(e, NULL, NULL), ZERO_OK);
    }
    struct zero_engine *ie = zero__engine_of((zero_core *)e);
    const int bad = rank == world - 1;
    if (bad) ie->lr = NAN;
    float before[N];
    memcpy(before, w, sizeof before);
    zero_step_result res = ZERO_STEP_RESULT_INIT;
    s = zero_step(e, NULL, &res);
    CHECK(s == ZERO_ERR_STATE, "rank %d: zero_step: status %d, expected ZERO_ERR_STATE (%s)", rank, s,
          zero_last_error(e));
    CHECK_STR_CONTAINS(zero_last_error(e), bad ? "lr = nan" : "another rank refused the hyper-parameters of step 1");
    CHECK(memcmp(before, w, sizeof before) == 0, "rank %d: a refused step changed the weights", rank);
    CHECK(ie->global_step == 0, "rank %d: a refused step was counted", rank);

    /* the value fixed on the rank that had it: the kept window trains */
    if (bad) ie->lr = 0.01;
    res = (zero_step_result)ZERO_STEP_RESULT_INIT;
    s = zero_step(e, NULL, &res);
    CHECK(s == ZERO_OK && res.taken == 1, "rank %d: the retried step: status %d, taken %d (%s)", rank, s, res.taken,
          zero_last_error(e));
    CHECK(memcmp(before, w, sizeof before) != 0, "rank %d: the retried step did not train", rank);
    float first[N];
    memcpy(first, w, sizeof first);
    MPI_Bcast(first, N, MPI_FLOAT, 0, MPI_COMM_WORLD);
    CHECK(memcmp(first, w, sizeof first) == 0, "rank %d: weights differ from rank 0's after the retried step", rank);
    zero_engine_destroy(e);
    int fails = check_failures_, all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("hparams_rank: %d ranks, %d failed check(s) in all\n", world, all);
    MPI_Finalize();
    return check_finish() || all ? 1 : 0;
}
