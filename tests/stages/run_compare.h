/* CHECKs shared by the tests that compare two host_run results (stage and
 * offload equivalence and checkpoints).  Header-only (check.h's counters
 * are the test's own).  Rank 0 prints one line per comparison, the label
 * padded to `width`.  Read the rank of MPI_COMM_WORLD; main thread only. */
#ifndef STAGES_RUN_COMPARE_H
#define STAGES_RUN_COMPARE_H
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "mlp_host.h"

/* Final parameters within relative L2 `tol` (nothing when either run has
 * none: its failure is reported where it ran). */
static inline void host_expect_close(const host_run_out *a, const host_run_out *b, const char *what, double tol,
                                     int width) {
    if (!a->params || !b->params) return;
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    double d = host_rel_l2(a->params, b->params, a->numel);
    if (rank == 0) printf("N=%d  %-*s rel L2 %.3e\n", world, width, what, d);
    CHECK(d <= tol, "N=%d %s: relative L2 %.3e > %.1e", world, what, d, tol);
}

/* Final parameters bitwise identical (nothing when either has none). */
static inline void host_expect_bitwise(const host_run_out *a, const host_run_out *b, const char *what, int width) {
    if (!a->params || !b->params) return;
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int same = memcmp(a->params, b->params, a->numel * sizeof(float)) == 0;
    if (rank == 0) printf("N=%d  %-*s %s\n", world, width, what, same ? "bitwise identical" : "DIFFERENT");
    CHECK(same, "N=%d %s: not bitwise identical (rel L2 %.3e)", world, what,
          host_rel_l2(a->params, b->params, a->numel));
}

/* Both runs succeeded and their final parameters are bitwise identical. */
static inline void host_check_same(const host_run_out *a, const host_run_out *b, const char *what, int width) {
    CHECK(a->status == ZERO_OK && b->status == ZERO_OK, "%s: %s / %s", what, a->error, b->error);
    host_expect_bitwise(a, b, what, width);
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
