/* CHECKs shared by the tests that compare two host_run results (stage and
 * offload checkpoints).  Header-only (check.h's counters are the test's
 * own).  Collective only in that it reads the rank of MPI_COMM_WORLD. */
#ifndef STAGES_RUN_COMPARE_H
#define STAGES_RUN_COMPARE_H
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "mlp_host.h"

/* Both runs succeeded and their final parameters are bitwise identical;
 * rank 0 prints "N=<world>  <what, padded to width>  bitwise identical". */
static inline void host_check_same(const host_run_out *a, const host_run_out *b, const char *what, int width) {
    CHECK(a->status == ZERO_OK && b->status == ZERO_OK, "%s: %s / %s", what, a->error, b->error);
    if (!a->params || !b->params) return;
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int eq = memcmp(a->params, b->params, a->numel * sizeof(float)) == 0;
    if (rank == 0) printf("N=%d  %-*s %s\n", world, width, what, eq ? "bitwise identical" : "DIFFERENT");
    CHECK(eq, "%s: rel L2 %.3e", what, host_rel_l2(a->params, b->params, a->numel));
}

/* Loading a checkpoint from a directory that does not exist (`base`/missing)
 * fails on every rank instead of hanging: a short run of `c` resumed from
 * there must not succeed. */
static inline void host_check_missing_ckpt(host_run_cfg c, const char *base, const char *what) {
    char nowhere[300];
    snprintf(nowhere, sizeof nowhere, "%s/missing", base);
    c.steps = 2;
    c.ckpt_dir = nowhere;
    c.resume_from = 0;
    host_run_out o;
    host_run(&c, &o);
    CHECK(o.status != ZERO_OK, "%s", what);
    host_run_free(&o);
}
#endif
