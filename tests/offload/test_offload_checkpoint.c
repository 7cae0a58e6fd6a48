/* Checkpoints of the offload plugin (zero_save / zero_load), for stage-1 and
 * stage-2 partitioning: saving changes nothing, and a run resumed from a
 * checkpoint taken in the middle of an accumulation window or at a boundary
 * ends bitwise equal to the uninterrupted run (each rank writes its host
 * master, optimizer states and device gradient accumulator; load refreshes
 * the device params from the master and re-gathers).  A missing shard is an
 * error on every rank, never a hang.  Run with 2 and 3 ranks. */
#include <dirent.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../stages/mlp_host.h"

static int rank_ = 0, world_ = 1;

static void remove_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *de;
    char f[4096];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(f, sizeof f, "%s/%s", path, de->d_name);
        unlink(f);
    }
    closedir(d);
    rmdir(path);
}

static void same(const host_run_out *a, const host_run_out *b, const char *what) {
    CHECK(a->status == ZERO_OK && b->status == ZERO_OK, "%s: %s / %s", what, a->error, b->error);
    if (!a->params || !b->params) return;
    int eq = memcmp(a->params, b->params, a->numel * sizeof(float)) == 0;
    if (rank_ == 0) printf("N=%d  %-48s %s\n", world_, what, eq ? "bitwise identical" : "DIFFERENT");
    CHECK(eq, "%s: rel L2 %.3e", what, host_rel_l2(a->params, b->params, a->numel));
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    char base[256] = "/tmp/zero-offload-ckpt-XXXXXX";
    if (rank_ == 0 && !mkdtemp(base)) base[0] = 0;
    MPI_Bcast(base, sizeof base, MPI_CHAR, 0, MPI_COMM_WORLD);
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
            if (rank_ == 0) remove_dir(dir);
        }
        host_run_free(&full);
    }
    if (base[0]) {
        host_run_cfg c = host_default_cfg();
        c.plugin = "offload";
        c.offload = 1;
        c.stage = 2;
        c.steps = 2;
        char nowhere[300];
        snprintf(nowhere, sizeof nowhere, "%s/missing", base);
        c.ckpt_dir = nowhere;
        c.resume_from = 0;
        host_run_out o;
        host_run(&c, &o);
        CHECK(o.status != ZERO_OK, "loading a missing offload checkpoint succeeded");
        host_run_free(&o);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0 && base[0]) rmdir(base);
    int rc = check_finish(), any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
