/* Checkpoints of the offload plugin (zero_save / zero_load), for stage-1 and
 * stage-2 partitioning: saving changes nothing, and a run resumed from a
 * checkpoint taken in the middle of an accumulation window or at a boundary
 * ends bitwise equal to the uninterrupted run (each rank writes its host
 * master, optimizer states and device gradient accumulator; load refreshes
 * the device params from the master and re-gathers).  A missing shard is an
 * error on every rank, never a hang.  Run with 2 and 3 ranks. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/host_util.h"
#include "../common/mpi_check.h"
#include "../stages/mlp_host.h"
#include "../stages/run_compare.h"

static int rank_ = 0, world_ = 1;

static void same(const host_run_out *a, const host_run_out *b, const char *what) {
    host_check_same(a, b, what, 48);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    char base[256] = "/tmp/zero-offload-ckpt-XXXXXX";
    th_mkdtemp_bcast(base, sizeof base);
    CHECK(base[0] != 0, "mkdtemp failed");

    for (int stage = 1; stage <= 2 && base[0]; stage++) {
        char dir[300], what[128];
        host_run_cfg c = host_default_cfg();
        c.plugin = "offload";
        c.offload = 1;
        c.stage = stage;
        c.steps = 8;
        c.gas = 2;
        host_run_out full;
        host_run(&c, &full);
        CHECK(full.status == ZERO_OK, "offload stage-%d: %s", stage, full.error);
        const int points[2] = {7, 8}; /* mid-window (one micro-step accumulated), boundary */
        for (int k = 0; k < 2; k++) {
            snprintf(dir, sizeof dir, "%s/stage%d-%d", base, stage, points[k]);
            host_run_cfg s = c;
            s.ckpt_dir = dir;
            s.save_after = points[k];
            host_run_out saving, resumed;
            host_run(&s, &saving);
            snprintf(what, sizeof what, "offload stage-%d: saving after micro-step %d", stage, points[k]);
            same(&saving, &full, what);
            host_run_cfg r = c;
            r.ckpt_dir = dir;
            r.resume_from = points[k];
            host_run(&r, &resumed);
            snprintf(what, sizeof what, "offload stage-%d: resumed from micro-step %d", stage, points[k]);
            same(&resumed, &full, what);
            host_run_free(&saving);
            host_run_free(&resumed);
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank_ == 0) th_remove_dir(dir);
        }
        host_run_free(&full);
    }
    if (base[0]) {
        host_run_cfg c = host_default_cfg();
        c.plugin = "offload";
        c.offload = 1;
        c.stage = 2;
        host_check_missing_ckpt(c, base, "loading a missing offload checkpoint succeeded");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0 && base[0]) rmdir(base);
    return check_mpi_finish();
}
