/* Checkpoints that outlive the run (issue 16), on the stage test host
 * (tests/stages/mlp_host.c: a 2-group MLP with awkward parameter sizes,
 * AdamW, clipping), one mpirun of 4 ranks:
 *
 *  1. every plugin (stage0/1/2/3, offload): save at step 10 of 20, load it
 *     in a fresh engine and continue to 20: bitwise the parameters of the
 *     uninterrupted run (and saving changes nothing);
 *  2. resharding: a stage2 checkpoint of N = 4 resumed by stage3 at N = 2
 *     and by stage1 at N = 3, an offload checkpoint of N = 4 by stage0 at
 *     N = 3, a stage3 checkpoint of N = 2 by stage2 at N = 4: the continued
 *     trajectory equals the uninterrupted one of the loading configuration
 *     within relative L2 1e-6 (TOL below: the global batch is the same, 12
 *     samples, so the runs differ only in fp32 summation order -- the
 *     per-rank mean over 3, 4 or 6 samples and the cross-rank reduction --
 *     which is what tests/stages/test_equivalence bounds at 1e-6 for every
 *     world size);
 *  3. damage: a flipped byte in an Adam-v shard, a truncated shard, a
 *     missing shard, a manifest of another format version, another model's
 *     checkpoint: zero_load fails on EVERY rank with a message naming the
 *     problem (never a crash or a silent load);
 *  4. a save that hits a full disk on ONE rank (the test-only fault hook
 *     ZERO_CKPT_FAULT=enospc:3@1: rank 1's third blob fails with ENOSPC after
 *     half its payload): zero_save fails on every rank, naming rank 1 and
 *     "No space left on device", promptly; `latest` still names the
 *     previous checkpoint, no new or staging directory is left, and the
 *     previous checkpoint loads.
 * Usage: test_ckpt_resume DIR   (under mpirun -np 4) */
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
enum { STEPS = 20, SAVE_AT = 10, GLOBAL_BATCH = 12 };
static int rank_, world_;

/* A run on the first n ranks (the others wait), global batch 12. */
static host_run_cfg cfg_for(const char *plugin, int n) {
    host_run_cfg c = host_default_cfg();
    c.plugin = plugin;
    c.steps = STEPS;
    c.gas = 1;
    c.mb = GLOBAL_BATCH / n;
    if (!strcmp(plugin, "offload")) {
        c.offload = 1;
        c.stage = 2;
    }
    return c;
}

static void same_plugin_resume(const char *root, const char *plugin) {
    char dir[512], what[160];
    snprintf(dir, sizeof dir, "%s/%s", root, plugin);
    host_run_cfg c = cfg_for(plugin, world_);
    host_run_out full, saving, resumed;
    host_run(&c, &full);
    host_run_cfg s = c;
    s.ckpt_dir = dir;
    s.save_after = SAVE_AT;
    host_run(&s, &saving);
    snprintf(what, sizeof what, "%s: saving at step %d changes nothing", plugin, SAVE_AT);
    host_check_same(&saving, &full, what, 48);
    host_run_cfg r = c;
    r.ckpt_dir = dir;
    r.resume_from = SAVE_AT;
    host_run(&r, &resumed);
    snprintf(what, sizeof what, "%s: resumed from step %d", plugin, SAVE_AT);
    host_check_same(&resumed, &full, what, 48);
    host_run_free(&full);
    host_run_free(&saving);
    host_run_free(&resumed);
}

/* Save with (from, n_from) at step 10; resume with (to, n_to); compare with
 * the uninterrupted run of (to, n_to). */
static void reshard_case(const char *root, const char *from, int n_from, const char *to, int n_to) {
    char dir[512], what[200];
    snprintf(dir, sizeof dir, "%s/%s-x%d", root, from, n_from);
    host_run_cfg s = cfg_for(from, n_from);
    s.ckpt_dir = dir;
    s.save_after = SAVE_AT;
    s.steps = SAVE_AT;
    host_run_out saved, full, resumed;
    if (host_run_on(n_from, &s, &saved)) {
        CHECK(saved.status == ZERO_OK, "%s x%d save run: %s", from, n_from, saved.error);
        host_run_free(&saved);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    host_run_cfg c = cfg_for(to, n_to);
    host_run_cfg r = c;
    r.ckpt_dir = dir;
    r.resume_from = SAVE_AT;
    int in = host_run_on(n_to, &c, &full);
    host_run_on(n_to, &r, &resumed);
    if (in) {
        CHECK(resumed.status == ZERO_OK, "%s x%d -> %s x%d: %s", from, n_from, to, n_to, resumed.error);
        if (resumed.params && full.params) {
            double d = host_rel_l2(resumed.params, full.params, full.numel);
            if (rank_ == 0)
                printf("%s x%d -> %s x%d: resumed vs uninterrupted %s x%d: rel L2 %.3e%s\n", from, n_from, to, n_to,
                       to, n_to, d, d == 0 ? " (bitwise)" : "");
            snprintf(what, sizeof what, "%s x%d -> %s x%d", from, n_from, to, n_to);
            CHECK(d <= TOL, "%s: rel L2 %.3e > %.0e", what, d, TOL);
        }
        host_run_free(&full);
        host_run_free(&resumed);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- damage ---- */
static void ckpt_file(const char *root, const char *blob, int r, char *out, size_t n) {
    char ck[1024];
    th_ckpt_latest(root, ck, sizeof ck);
    snprintf(out, n, "%s/%s.rank%d.bin", ck, blob, r);
}

static void copy_file(const char *a, const char *b) {
    FILE *f = fopen(a, "rb"), *g = fopen(b, "wb");
    char buf[65536];
    size_t k;
    while (f && g && (k = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, k, g);
    if (f) fclose(f);
    if (g) fclose(g);
}

/* Load `dir` with stage2 x4 (model `model`): must fail on every rank with
 * `st` and a message containing `want`. */
static void expect_load_fails(const char *dir, int model, zero_status st, const char *want, const char *what) {
    host_run_cfg r = cfg_for("stage2", world_);
    r.model = model;
    r.ckpt_dir = dir;
    r.resume_from = SAVE_AT;
    r.steps = SAVE_AT + 1;
    host_run_out o;
    double t0 = MPI_Wtime();
    host_run(&r, &o);
    CHECK(o.status == st, "%s: rank %d: load gave %s (%s), want %s", what, rank_, zero_status_string(o.status),
          o.error, zero_status_string(st));
    CHECK(strstr(o.error, want) != NULL, "%s: rank %d: message '%s' does not say '%s'", what, rank_, o.error, want);
    CHECK(MPI_Wtime() - t0 < 30, "%s: rank %d took %.1f s", what, rank_, MPI_Wtime() - t0);
    if (rank_ == 0) printf("%-34s every rank: %s\n", what, o.error);
    host_run_free(&o);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void damage_cases(const char *root) {
    char dir[512], path[2048], keep[2100];
    snprintf(dir, sizeof dir, "%s/stage2", root); /* from same_plugin_resume */
    /* a flipped exponent bit in rank 1's Adam v */
    ckpt_file(dir, "stage2.state1", 1, path, sizeof path);
    snprintf(keep, sizeof keep, "%s.keep", path);
    if (rank_ == 0) {
        copy_file(path, keep);
        FILE *f = fopen(path, "r+b");
        CHECK(f != NULL, "open %s", path);
        if (f) {
            fseek(f, 16 + 4 * 100 + 3, SEEK_SET); /* element 100's top byte: sign and exponent */
            int ch = fgetc(f);
            fseek(f, 16 + 4 * 100 + 3, SEEK_SET);
            fputc(ch ^ 0x40, f);
            fclose(f);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect_load_fails(dir, HOST_MODEL_SMALL, ZERO_ERR_IO, "is corrupted", "flipped bit in an Adam-v shard:");
    /* truncated */
    if (rank_ == 0) {
        copy_file(keep, path);
        CHECK(truncate(path, 100) == 0, "truncate %s", path);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect_load_fails(dir, HOST_MODEL_SMALL, ZERO_ERR_IO, "truncated", "truncated shard:");
    /* missing */
    if (rank_ == 0) remove(path);
    MPI_Barrier(MPI_COMM_WORLD);
    expect_load_fails(dir, HOST_MODEL_SMALL, ZERO_ERR_IO, "cannot open", "missing shard:");
    if (rank_ == 0) rename(keep, path);
    /* wrong manifest version */
    char man[1100], mkeep[1200];
    char ck[1024];
    th_ckpt_latest(dir, ck, sizeof ck);
    snprintf(man, sizeof man, "%s/manifest.json", ck);
    snprintf(mkeep, sizeof mkeep, "%s.keep", man);
    if (rank_ == 0) {
        copy_file(man, mkeep);
        FILE *f = fopen(mkeep, "rb");
        FILE *g = fopen(man, "wb");
        char line[4096];
        while (f && g && fgets(line, sizeof line, f)) {
            char *v = strstr(line, "\"version\": 2,"); /* the format this library writes */
            if (v) fputs(" \"version\": 7,\n", g);
            else fputs(line, g);
        }
        if (f) fclose(f);
        if (g) fclose(g);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    expect_load_fails(dir, HOST_MODEL_SMALL, ZERO_ERR_IO, "format version 7", "manifest of another version:");
    if (rank_ == 0) rename(mkeep, man);
    MPI_Barrier(MPI_COMM_WORLD);
    /* another model's checkpoint */
    expect_load_fails(dir, HOST_MODEL_10K, ZERO_ERR_MISMATCH, "another model", "another model's checkpoint:");
    /* restored: loads again */
    host_run_cfg r = cfg_for("stage2", world_);
    r.ckpt_dir = dir;
    r.resume_from = SAVE_AT;
    r.steps = SAVE_AT + 1;
    host_run_out o;
    host_run(&r, &o);
    CHECK(o.status == ZERO_OK, "restored checkpoint: %s", o.error);
    host_run_free(&o);
}

static void enospc_case(const char *root) {
    char dir[512], ck[1024], p[1200];
    snprintf(dir, sizeof dir, "%s/stage2", root); /* latest: step-10 */
    setenv("ZERO_CKPT_FAULT", "enospc:3@1", 1);
    host_run_cfg r = cfg_for("stage2", world_);
    r.ckpt_dir = dir;
    r.resume_from = SAVE_AT;
    r.steps = SAVE_AT + 2;
    r.save_after = SAVE_AT + 2;
    host_run_out o;
    double t0 = MPI_Wtime();
    host_run(&r, &o);
    unsetenv("ZERO_CKPT_FAULT");
    CHECK(o.status == ZERO_ERR_IO, "full disk: rank %d: save gave %s (%s)", rank_, zero_status_string(o.status),
          o.error);
    CHECK(strstr(o.error, "No space left on device") && strstr(o.error, "rank 1"),
          "full disk: rank %d: message '%s' does not name rank 1 and ENOSPC", rank_, o.error);
    CHECK(MPI_Wtime() - t0 < 30, "full disk: rank %d took %.1f s", rank_, MPI_Wtime() - t0);
    if (rank_ == 0) printf("%-34s every rank: %s\n", "save onto a full disk (rank 1):", o.error);
    host_run_free(&o);
    MPI_Barrier(MPI_COMM_WORLD);
    th_ckpt_latest(dir, ck, sizeof ck);
    snprintf(p, sizeof p, "%s/step-%d", dir, SAVE_AT);
    CHECK(!strcmp(ck, p), "full disk: latest names '%s', want '%s'", ck, p);
    snprintf(p, sizeof p, "%s/step-%d.partial", dir, SAVE_AT + 2);
    CHECK(access(p, F_OK) != 0, "full disk: staging directory %s left behind", p);
    snprintf(p, sizeof p, "%s/step-%d", dir, SAVE_AT + 2);
    CHECK(access(p, F_OK) != 0, "full disk: %s exists", p);
    host_run_cfg l = cfg_for("stage2", world_);
    l.ckpt_dir = dir;
    l.resume_from = SAVE_AT;
    l.steps = SAVE_AT + 1;
    host_run(&l, &o);
    CHECK(o.status == ZERO_OK, "full disk: the previous checkpoint does not load: %s", o.error);
    host_run_free(&o);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    char root[256] = "/tmp/zero-ckpt-resume-XXXXXX";
    if (argc > 1) snprintf(root, sizeof root, "%s", argv[1]);
    else th_mkdtemp_bcast(root, sizeof root);
    if (world_ != 4) {
        if (rank_ == 0) fprintf(stderr, "run with mpirun -np 4\n");
        return check_mpi_finish() + 1;
    }
    if (argc > 1 && rank_ == 0) th_remove_dir(root);
    MPI_Barrier(MPI_COMM_WORLD);
    const char *plugins[] = {"stage0", "stage1", "stage2", "stage3", "offload"};
    for (int i = 0; i < 5; i++) same_plugin_resume(root, plugins[i]);
    reshard_case(root, "stage2", 4, "stage3", 2);
    reshard_case(root, "stage2", 4, "stage1", 3);
    reshard_case(root, "offload", 4, "stage0", 3);
    reshard_case(root, "stage3", 2, "stage2", 4);
    reshard_case(root, "stage1", 3, "offload", 1);
    damage_cases(root);
    enospc_case(root);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) th_remove_dir(root);
    return check_mpi_finish();
}
