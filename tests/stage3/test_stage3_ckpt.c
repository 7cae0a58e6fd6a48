/* stage3 checkpoints: train 12 steps saving after 6; a fresh engine that
 * loads the checkpoint and trains steps 6..11 ends bitwise equal (shards,
 * master and optimizer state restored; persistent gathered params
 * refreshed from the loaded shards).
 * Usage: test_stage3_ckpt DIR   (under mpirun -np N) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "s3_host.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const char *dir = argc > 1 ? argv[1] : "stage3_ckpt";
    s3_cfg c = s3_default_cfg();
    c.steps = 12;
    c.gas = 2;
    c.prefetch = 2000;
    c.persist = 30; /* biases persistent: they must be refreshed after the load */
    c.ckpt_dir = dir;
    c.save_after = 6;
    s3_out full, resumed;
    s3_run(&c, &full);
    CHECK(full.status == ZERO_OK, "full run: %s (%s)", zero_status_string(full.status), full.error);

    s3_cfg r = c;
    r.save_after = 0;
    r.load = 1;
    r.first_step = 6;
    r.steps = 6;
    s3_run(&r, &resumed);
    CHECK(resumed.status == ZERO_OK, "resumed run: %s (%s)", zero_status_string(resumed.status), resumed.error);
    if (full.params && resumed.params)
        CHECK(memcmp(full.params, resumed.params, full.numel * sizeof(float)) == 0,
              "resumed run differs from the uninterrupted one (rel L2 %.3g)",
              s3_rel_l2(resumed.params, full.params, full.numel));
    s3_out_free(&full);
    s3_out_free(&resumed);
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
