/* Checkpoints of the stage plugins (zero_save / zero_load), per plugin:
 * a run that saves in the middle of an accumulation window and at a
 * boundary is bitwise the same as one that does not, and runs resumed from
 * either checkpoint end bitwise equal to the uninterrupted run (each rank
 * writes only its shard; stage 1/2 re-gather the parameters on load).
 * Run with 2 and 3 ranks (3: uneven shards). */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/host_util.h"
#include "../common/mpi_check.h"
#include "mlp_host.h"
#include "run_compare.h"

static int rank_ = 0, world_ = 1;

static void same(const host_run_out *a, const host_run_out *b, const char *what) {
    host_check_same(a, b, what, 44);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    char base[256] = "/tmp/zero-stages-ckpt-XXXXXX";
    th_mkdtemp_bcast(base, sizeof base);
    CHECK(base[0] != 0, "mkdtemp failed");

    const char *plugins[3] = {"stage0", "stage1", "stage2"};
    for (int p = 0; p < 3 && base[0]; p++) {
        char mid[300], bnd[300], what[128];
        snprintf(mid, sizeof mid, "%s/%s-mid", base, plugins[p]);
        snprintf(bnd, sizeof bnd, "%s/%s-boundary", base, plugins[p]);
        host_run_cfg c = host_default_cfg();
        c.plugin = plugins[p];
        c.steps = 8;
        c.gas = 2;
        host_run_out full, saving, saving_b, resumed, resumed_b;
        host_run(&c, &full);

        host_run_cfg s = c;
        s.ckpt_dir = mid;
        s.save_after = 7; /* mid-window: one micro-step of gradients accumulated */
        host_run(&s, &saving);
        snprintf(what, sizeof what, "%s: saving mid-window changes nothing", plugins[p]);
        same(&saving, &full, what);
        s.ckpt_dir = bnd;
        s.save_after = 8; /* at a boundary */
        host_run(&s, &saving_b);

        host_run_cfg r = c;
        r.ckpt_dir = mid;
        r.resume_from = 7;
        host_run(&r, &resumed);
        snprintf(what, sizeof what, "%s: resumed mid-window", plugins[p]);
        same(&resumed, &full, what);
        r.ckpt_dir = bnd;
        r.resume_from = 8;
        host_run(&r, &resumed_b);
        snprintf(what, sizeof what, "%s: resumed at a boundary", plugins[p]);
        same(&resumed_b, &full, what);

        host_run_free(&full);
        host_run_free(&saving);
        host_run_free(&saving_b);
        host_run_free(&resumed);
        host_run_free(&resumed_b);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank_ == 0) {
            th_remove_dir(mid);
            th_remove_dir(bnd);
        }
    }
    /* a missing checkpoint is an error on every rank, not a hang */
    if (base[0]) {
        host_run_cfg c = host_default_cfg();
        c.plugin = "stage2";
        host_check_missing_ckpt(c, base, "loading a missing checkpoint succeeded");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0 && base[0]) rmdir(base);
    return check_mpi_finish();
}
