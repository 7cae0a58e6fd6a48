/* Checkpoints and interleaved ownership (zero_optimization.
 * round_robin_gradients, core/layout.h), on the stage test host
 * (tests/stages/mlp_host.c), one mpirun of 3 ranks (an odd world: sums of
 * three ranks depend on the owner's ring order, so the two ownerships give
 * different bits and a mix-up cannot pass by accident):
 *
 *  1. every plugin (stage0/1/2/3, offload) with round-robin ownership: save
 *     at step 10 of 20, load in a fresh engine, continue: bitwise the
 *     uninterrupted round-robin run (the native path: same layout);
 *  2. across ownerships: stage2 round-robin x3 -> stage2 contiguous x3,
 *     stage2 contiguous x3 -> stage2 round-robin x3, stage1 contiguous x3
 *     -> offload round-robin x2, stage2 round-robin x3 -> stage3
 *     round-robin x2: the continued run equals the uninterrupted run of the
 *     loading configuration within relative L2 1e-6 (the resharding path
 *     maps flat ranges through the parameter table; the runs differ only in
 *     fp32 summation order before the save, as in test_ckpt_resume);
 *  3. a round-robin checkpoint saved inside an accumulation window loaded
 *     with contiguous ownership (same plugin, same world size): refused on
 *     every rank, naming the layout (gradients in flight are not resharded);
 *  4. zero-ckpt convert of the round-robin stage2 x3 checkpoint to x2: the
 *     converted checkpoint (manifest edited to refuse resharding) loads
 *     natively into a round-robin x2 run and equals the original resharded
 *     on load, bitwise: the tool builds the layout the engine builds.
 * Usage: test_ckpt_ownership DIR ZERO_CKPT   (under mpirun -np 3) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/host_util.h"
#include "../common/mpi_check.h"
#include "../stages/mlp_host.h"
#include "../stages/run_compare.h"

static const double TOL = 1e-6;
enum { STEPS = 20, SAVE_AT = 10, GLOBAL_BATCH = 6 };
static int rank_, world_;
static const char *tool_;

static host_run_cfg cfg_for(const char *plugin, int n, int rr) {
    host_run_cfg c = host_default_cfg();
    c.plugin = plugin;
    c.steps = STEPS;
    c.gas = 1;
    c.mb = GLOBAL_BATCH / n;
    c.round_robin = rr;
    if (!strcmp(plugin, "offload")) {
        c.offload = 1;
        c.stage = 2;
    }
    return c;
}

static void native_resume(const char *root, const char *plugin) {
    char dir[512], what[160];
    snprintf(dir, sizeof dir, "%s/rr-%s", root, plugin);
    host_run_cfg c = cfg_for(plugin, world_, 1);
    host_run_out full, saving, resumed;
    host_run(&c, &full);
    CHECK(full.status == ZERO_OK, "%s round-robin: %s", plugin, full.error);
    host_run_cfg s = c;
    s.ckpt_dir = dir;
    s.save_after = SAVE_AT;
    host_run(&s, &saving);
    host_run_cfg r = c;
    r.ckpt_dir = dir;
    r.resume_from = SAVE_AT;
    host_run(&r, &resumed);
    snprintf(what, sizeof what, "%s round-robin x%d: resumed from step %d", plugin, world_, SAVE_AT);
    host_check_same(&resumed, &full, what, 48);
    if (rank_ == 0 && resumed.params && full.params && !memcmp(resumed.params, full.params, full.numel * 4))
        printf("%-44s bitwise the uninterrupted run\n", what);
    host_run_free(&full);
    host_run_free(&saving);
    host_run_free(&resumed);
}

static const char *own(int rr) { return rr ? "round-robin" : "contiguous"; }

static void save_on(const char *dir, const char *plugin, int n, int rr, int gas, int micro) {
    host_run_cfg s = cfg_for(plugin, n, rr);
    s.gas = gas;
    s.ckpt_dir = dir;
    s.save_after = micro;
    s.steps = (micro + gas - 1) / gas;
    host_run_out saved;
    if (host_run_on(n, &s, &saved)) {
        CHECK(saved.status == ZERO_OK, "%s %s x%d save run: %s", plugin, own(rr), n, saved.error);
        host_run_free(&saved);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void cross_case(const char *root, const char *from, int n_from, int rr_from, const char *to, int n_to,
                       int rr_to) {
    char dir[512], what[200];
    snprintf(dir, sizeof dir, "%s/%s-%s-x%d", root, from, own(rr_from), n_from);
    save_on(dir, from, n_from, rr_from, 1, SAVE_AT);
    host_run_cfg c = cfg_for(to, n_to, rr_to);
    host_run_cfg r = c;
    r.ckpt_dir = dir;
    r.resume_from = SAVE_AT;
    host_run_out full, resumed;
    int in = host_run_on(n_to, &c, &full);
    host_run_on(n_to, &r, &resumed);
    snprintf(what, sizeof what, "%s %s x%d -> %s %s x%d", from, own(rr_from), n_from, to, own(rr_to), n_to);
    if (in) {
        CHECK(resumed.status == ZERO_OK, "%s: %s", what, resumed.error);
        if (resumed.params && full.params) {
            double d = host_rel_l2(resumed.params, full.params, full.numel);
            if (rank_ == 0) printf("%-56s vs uninterrupted: rel L2 %.3e\n", what, d);
            CHECK(d <= TOL, "%s: rel L2 %.3e > %.0e", what, d, TOL);
        }
        host_run_free(&full);
        host_run_free(&resumed);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A window-internal round-robin save (gas 2, 2*SAVE_AT + 1 micro-steps)
 * loaded with contiguous ownership: a named refusal on every rank. */
static void mid_window_refused(const char *root) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/stage2-rr-midwindow", root);
    save_on(dir, "stage2", world_, 1, 2, 2 * SAVE_AT + 1);
    host_run_cfg r = cfg_for("stage2", world_, 0);
    r.gas = 2;
    r.ckpt_dir = dir;
    r.resume_from = 2 * SAVE_AT + 1;
    r.steps = SAVE_AT + 2;
    host_run_out o;
    host_run(&r, &o);
    CHECK(o.status == ZERO_ERR_UNSUPPORTED, "mid-window round-robin -> contiguous: rank %d: %s (%s)", rank_,
          zero_status_string(o.status), o.error);
    CHECK(strstr(o.error, "round_robin_gradients") != NULL, "mid-window refusal does not name the layout: %s",
          o.error);
    if (rank_ == 0) printf("mid-window round-robin -> contiguous, every rank: %s\n", o.error);
    host_run_free(&o);
    /* the same checkpoint with the saver's ownership resumes */
    r.round_robin = 1;
    host_run(&r, &o);
    CHECK(o.status == ZERO_OK, "mid-window round-robin -> round-robin: %s", o.error);
    host_run_free(&o);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Rank 0 runs `zero-ckpt ARGS`; its exit status to all. */
static int tool(const char *args) {
    int rc = -1;
    if (rank_ == 0) {
        char cmd[2400];
        snprintf(cmd, sizeof cmd, "'%s' %s > /dev/null", tool_, args);
        int st = system(cmd);
        rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return rc;
}

static void convert_case(const char *root) {
    char src[512], dst[600], args[1400];
    snprintf(src, sizeof src, "%s/stage2-round-robin-x3", root); /* from cross_case */
    snprintf(dst, sizeof dst, "%s/converted-x2", root);
    snprintf(args, sizeof args, "convert '%s' '%s' --ranks 2", src, dst);
    int rc = tool(args);
    CHECK(rc == 0, "zero-ckpt %s: exit %d", args, rc);
    if (rank_ == 0) { /* the converted copy must load natively: refuse resharding */
        char ck[1024], cmd[4000];
        th_ckpt_latest(dst, ck, sizeof ck);
        snprintf(cmd, sizeof cmd,
                 "sed -i 's/\"reshardable\": 1,/\"reshardable\": 0,/' '%s/manifest.json' && "
                 "grep -q '\"reshardable\": 0,' '%s/manifest.json' && "
                 "\"$CKPT_RESEAL\" '%s/manifest.json'", /* its own checksum, after the deliberate edit */
                 ck, ck, ck);
        CHECK(system(cmd) == 0, "could not edit the converted manifest");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    host_run_cfg r = cfg_for("stage2", 2, 1);
    r.resume_from = SAVE_AT;
    host_run_out conv, orig;
    r.ckpt_dir = dst;
    int in = host_run_on(2, &r, &conv);
    r.ckpt_dir = src;
    host_run_on(2, &r, &orig);
    if (in) {
        CHECK(conv.status == ZERO_OK, "converted round-robin x2 does not load natively: %s", conv.error);
        CHECK(orig.status == ZERO_OK, "round-robin x3 -> x2 on load: %s", orig.error);
        CHECK(conv.params && orig.params && !memcmp(conv.params, orig.params, orig.numel * sizeof(float)),
              "converted round-robin x2 differs from the original resharded on load");
        if (rank_ == 0 && conv.params && orig.params)
            printf("zero-ckpt convert round-robin x3 -> x2: loads natively, bitwise the on-load reshard\n");
        host_run_free(&conv);
        host_run_free(&orig);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    if (argc != 3 || world_ != 3) {
        if (rank_ == 0) fprintf(stderr, "usage: mpirun -np 3 test_ckpt_ownership DIR ZERO_CKPT\n");
        return check_mpi_finish() + 1;
    }
    const char *root = argv[1];
    tool_ = argv[2];
    if (rank_ == 0) th_remove_dir(root);
    MPI_Barrier(MPI_COMM_WORLD);
    const char *plugins[] = {"stage0", "stage1", "stage2", "stage3", "offload"};
    for (int i = 0; i < 5; i++) native_resume(root, plugins[i]);
    cross_case(root, "stage2", 3, 1, "stage2", 3, 0);
    cross_case(root, "stage2", 3, 0, "stage2", 3, 1);
    cross_case(root, "stage1", 3, 0, "offload", 2, 1);
    cross_case(root, "stage2", 3, 1, "stage3", 2, 1);
    mid_window_refused(root);
    convert_case(root);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) th_remove_dir(root);
    return check_mpi_finish();
}
