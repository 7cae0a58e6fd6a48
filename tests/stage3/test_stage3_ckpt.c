/* stage3 checkpoints: a fresh engine that loads a checkpoint and trains on
 * ends bitwise equal to the uninterrupted run (shards, master, optimizer
 * state and the gradient partition restored; persistent gathered params
 * refreshed from the loaded shards), both when the checkpoint was saved at
 * an accumulation boundary (gas 2, after step 6 of 12) and in the MIDDLE of
 * a window (gas 4, after micro-step 2 of step 5's window: the reduced
 * gradients of two micro-steps sit in the partition accumulator).  Saving
 * itself changes nothing.  A shard blob missing on ONE rank fails the load
 * on every rank, promptly (the ranks agree on the read status; without that
 * the others would wait in the next gather's agreement until its timeout),
 * and so does a missing core blob.
 * Usage: test_stage3_ckpt DIR   (under mpirun -np N) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "host_util.h"
#include "s3_host.h"

static void same(const s3_out *a, const s3_out *b, const char *what) {
    CHECK(a->status == ZERO_OK, "%s: %s (%s)", what, zero_status_string(a->status), a->error);
    if (!a->params || !b->params) return;
    CHECK(memcmp(a->params, b->params, b->numel * sizeof(float)) == 0,
          "%s: differs from the uninterrupted run (rel L2 %.3g)", what, s3_rel_l2(a->params, b->params, b->numel));
}

/* At a boundary: save after step 6 of 12 (gas 2), resume at step 6. */
static void boundary_case(const char *dir) {
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
    same(&resumed, &full, "resumed at a boundary");
    s3_out_free(&full);
    s3_out_free(&resumed);
}

/* The boundary case's checkpoint minus one rank's blob `blob`
 * (<blob>.rank<R>.bin of rank `victim` in the directory `latest` names):
 * zero_load must fail with ZERO_ERR_IO on every rank well before the 120 s
 * agreement timeout, and every rank's message names the missing blob (the
 * others report the victim's message).  Blobs: "stage3.grads" (the plugin's agreement), "core" (the
 * core's own blob, read before the plugin's load: the core agrees first). */
static void missing_shard_case(const char *dir, const char *blob, int victim) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char path[2400], ck[1200];
    th_ckpt_latest(dir, ck, sizeof ck);
    snprintf(path, sizeof path, "%s/%s.rank%d.bin", ck, blob, victim);
    if (rank == victim) CHECK(remove(path) == 0, "cannot remove %s to test a missing shard", path);
    MPI_Barrier(MPI_COMM_WORLD);
    s3_cfg r = s3_default_cfg();
    r.steps = 2;
    r.gas = 2;
    r.persist = 30;
    r.ckpt_dir = dir;
    r.load = 1;
    r.first_step = 6;
    s3_out o;
    double t0 = MPI_Wtime();
    s3_run(&r, &o);
    double dt = MPI_Wtime() - t0;
    CHECK(o.status == ZERO_ERR_IO, "rank %d, %s missing: load gave %s (%s)", rank, blob, zero_status_string(o.status),
          o.error);
    const char *want = blob;
    CHECK(strstr(o.error, want) != NULL, "rank %d: error '%s' does not say '%s'", rank, o.error, want);
    CHECK(dt < 30.0, "rank %d: the failed load took %.1f s (waited for a timeout?)", rank, dt);
    s3_out_free(&o);
}

/* Mid-window: gas 4, 8 steps; save after global micro-step 22 = step 5's
 * second micro-step, resume there. */
static void mid_window_case(const char *dir) {
    s3_cfg c = s3_default_cfg();
    c.steps = 8;
    c.gas = 4;
    c.prefetch = 2000;
    c.persist = 30;
    s3_out plain, saving, resumed;
    s3_run(&c, &plain);
    CHECK(plain.status == ZERO_OK, "plain run: %s (%s)", zero_status_string(plain.status), plain.error);

    s3_cfg s = c;
    s.ckpt_dir = dir;
    s.save_after_micro = 5 * 4 + 2;
    s3_run(&s, &saving);
    same(&saving, &plain, "saving mid-window");

    s3_cfg r = c;
    r.ckpt_dir = dir;
    r.load = 1;
    r.first_step = 5;
    r.steps = 3;
    r.first_micro = 5 * 4 + 2;
    s3_run(&r, &resumed);
    same(&resumed, &plain, "resumed mid-window");
    s3_out_free(&plain);
    s3_out_free(&saving);
    s3_out_free(&resumed);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const char *dir = argc > 1 ? argv[1] : "stage3_ckpt";
    char bnd[1024], mid[1024];
    snprintf(bnd, sizeof bnd, "%s-boundary", dir);
    snprintf(mid, sizeof mid, "%s-mid", dir);
    boundary_case(bnd);
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    missing_shard_case(bnd, "stage3.grads", size - 1);
    missing_shard_case(bnd, "core", 0);
    mid_window_case(mid);
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
