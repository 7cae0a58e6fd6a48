/* tools/zero-ckpt convert (offline resharding), on the stage test host
 * (tests/stages/mlp_host.c), one mpirun of 4 ranks:
 *
 *  1. stage2 at 4 ranks saves at step 10; rank 0 converts it to stage2 at 2
 *     and at 3 ranks and to stage1 at 3 ranks; `zero-ckpt verify` passes on
 *     every output;
 *  2. each converted checkpoint, loaded at its world size and continued to
 *     step 20, gives bitwise the parameters of loading the ORIGINAL with
 *     on-load resharding (the same reads of the same values: the converted
 *     files are what the resharding load would read);
 *  3. the converted checkpoint loads natively: a copy whose manifest says
 *     "reshardable": 0 (which refuses every resharding load: checked on the
 *     original) still loads, bitwise the same;
 *  4. bad targets are named errors (exit 2) that write nothing: 0 ranks, an
 *     unknown plugin, a plugin convert does not write, a checkpoint whose
 *     plugin lacks ZERO_PLUGIN_CAP_RESHARD.
 * Usage: test_ckpt_convert DIR ZERO_CKPT   (under mpirun -np 4) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/host_util.h"
#include "../common/mpi_check.h"
#include "../stages/mlp_host.h"

enum { STEPS = 20, SAVE_AT = 10, GLOBAL_BATCH = 12 };
static int rank_, world_;
static const char *tool_;

static host_run_cfg cfg_for(const char *plugin, int n) {
    host_run_cfg c = host_default_cfg();
    c.plugin = plugin;
    c.steps = STEPS;
    c.gas = 1;
    c.mb = GLOBAL_BATCH / n;
    return c;
}

/* Rank 0 runs `zero-ckpt ARGS`; its exit status and stderr+stdout to all. */
static int tool(const char *args, char *out, size_t n) {
    int rc = -1;
    char cmd[2048], log[600];
    if (rank_ == 0) {
        snprintf(cmd, sizeof cmd, "'%s' %s > /tmp/zero-ckpt-convert-test.%d.log 2>&1", tool_, args, (int)getpid());
        int st = system(cmd);
        rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        snprintf(log, sizeof log, "/tmp/zero-ckpt-convert-test.%d.log", (int)getpid());
        FILE *f = fopen(log, "rb");
        size_t k = f ? fread(out, 1, n - 1, f) : 0;
        out[k] = 0;
        if (f) fclose(f);
        remove(log);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(out, (int)n, MPI_CHAR, 0, MPI_COMM_WORLD);
    return rc;
}

/* Rank 0: the manifest of ROOT's latest with "reshardable": 1 -> 0. */
static void set_unreshardable(const char *root) {
    if (rank_ == 0) {
        char ck[1024], man[1100], cmd[4000];
        th_ckpt_latest(root, ck, sizeof ck);
        snprintf(man, sizeof man, "%s/manifest.json", ck);
        snprintf(cmd, sizeof cmd,
                 "sed -i 's/\"reshardable\": 1,/\"reshardable\": 0,/' '%s' && grep -q '\"reshardable\": 0,' '%s' && "
                 "\"$CKPT_RESEAL\" '%s'", /* its own checksum, after the deliberate edit */
                 man, man, man);
        CHECK(system(cmd) == 0, "could not edit %s", man);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void copy_tree(const char *a, const char *b) {
    if (rank_ == 0) {
        char cmd[2100];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", b, a, b);
        CHECK(system(cmd) == 0, "%s", cmd);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Resume `dir` with (plugin, n) to step 20; parameters on the first n ranks. */
static int resume(const char *dir, const char *plugin, int n, host_run_out *o) {
    host_run_cfg r = cfg_for(plugin, n);
    r.ckpt_dir = dir;
    r.resume_from = SAVE_AT;
    int in = host_run_on(n, &r, o);
    if (in) CHECK(o->status == ZERO_OK, "resume %s with %s x%d: %s", dir, plugin, n, o->error);
    return in;
}

static void convert_case(const char *root, const char *src, const char *plugin, int n) {
    char dst[600], args[1400], out[4096], what[200];
    snprintf(dst, sizeof dst, "%s/%s-x%d", root, plugin, n);
    snprintf(args, sizeof args, "convert '%s' '%s' --ranks %d --plugin %s", src, dst, n, plugin);
    int rc = tool(args, out, sizeof out);
    snprintf(what, sizeof what, "stage2 x4 -> %s x%d", plugin, n);
    CHECK(rc == 0, "%s: convert exit %d: %s", what, rc, out);
    if (rank_ == 0) printf("%s", out);
    snprintf(args, sizeof args, "verify '%s'", dst);
    rc = tool(args, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "OK"), "%s: verify exit %d: %s", what, rc, out);
    if (rank_ == 0) printf("%s", out);
    /* the converted checkpoint vs the original resharded on load */
    host_run_out conv, orig, native;
    int in = resume(dst, plugin, n, &conv);
    resume(src, plugin, n, &orig);
    char nat[700];
    snprintf(nat, sizeof nat, "%s-native", dst);
    copy_tree(dst, nat);
    set_unreshardable(nat);
    resume(nat, plugin, n, &native);
    if (in) {
        CHECK(conv.params && orig.params && conv.numel == orig.numel &&
                  !memcmp(conv.params, orig.params, conv.numel * sizeof(float)),
              "%s: resumed from the converted checkpoint differs from the original resharded on load", what);
        CHECK(native.params && !memcmp(native.params, orig.params, orig.numel * sizeof(float)),
              "%s: the converted checkpoint does not load natively (without resharding)", what);
        if (rank_ == 0 && conv.params && orig.params)
            printf("%-24s resumed to step %d: converted == resharded on load, bitwise (%zu parameters); loads "
                   "natively\n", what, STEPS, conv.numel);
        host_run_free(&conv);
        host_run_free(&orig);
        host_run_free(&native);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void refused(const char *args, const char *want, const char *dst, const char *what) {
    char out[4096];
    int rc = tool(args, out, sizeof out);
    CHECK(rc == 2, "%s: exit %d, want 2 (%s)", what, rc, out);
    CHECK(strstr(out, want) != NULL, "%s: message '%s' does not say '%s'", what, out, want);
    CHECK(access(dst, F_OK) != 0, "%s: %s was created", what, dst);
    if (rank_ == 0) printf("%-34s %s", what, out);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    if (argc != 3 || world_ != 4) {
        if (rank_ == 0) fprintf(stderr, "usage: mpirun -np 4 test_ckpt_convert DIR ZERO_CKPT\n");
        return check_mpi_finish() + 1;
    }
    const char *root = argv[1];
    tool_ = argv[2];
    if (rank_ == 0) th_remove_dir(root);
    MPI_Barrier(MPI_COMM_WORLD);
    char src[600];
    snprintf(src, sizeof src, "%s/stage2-x4", root);
    host_run_cfg s = cfg_for("stage2", 4);
    s.ckpt_dir = src;
    s.save_after = SAVE_AT;
    s.steps = SAVE_AT;
    host_run_out saved;
    host_run(&s, &saved);
    CHECK(saved.status == ZERO_OK, "stage2 x4 save: %s", saved.error);
    host_run_free(&saved);
    MPI_Barrier(MPI_COMM_WORLD);

    convert_case(root, src, "stage2", 2);
    convert_case(root, src, "stage2", 3);
    convert_case(root, src, "stage1", 3);

    char dst[700], args[1600], norsh[700];
    snprintf(dst, sizeof dst, "%s/refused", root);
    snprintf(args, sizeof args, "convert '%s' '%s' --ranks 0", src, dst);
    refused(args, "--ranks 0: the target world size must be 1 to 65536", dst, "0 ranks:");
    snprintf(args, sizeof args, "convert '%s' '%s' --ranks 2 --plugin stage9", src, dst);
    refused(args, "unknown plugin 'stage9'", dst, "unknown plugin:");
    snprintf(args, sizeof args, "convert '%s' '%s' --ranks 2 --plugin stage3", src, dst);
    refused(args, "plugin 'stage3' is not a target of convert", dst, "plugin convert does not write:");
    snprintf(norsh, sizeof norsh, "%s/no-reshard", root);
    copy_tree(src, norsh);
    set_unreshardable(norsh);
    snprintf(args, sizeof args, "convert '%s' '%s' --ranks 2", norsh, dst);
    refused(args, "lacks ZERO_PLUGIN_CAP_RESHARD", dst, "checkpoint without RESHARD:");
    /* what makes step 3 meaningful: such a manifest refuses a resharding load */
    host_run_cfg r = cfg_for("stage2", 2);
    r.ckpt_dir = norsh;
    r.resume_from = SAVE_AT;
    host_run_out o;
    if (host_run_on(2, &r, &o)) {
        CHECK(o.status == ZERO_ERR_UNSUPPORTED && strstr(o.error, "does not describe its shards"),
              "\"reshardable\": 0 should refuse resharding stage2 x4 -> x2: %s (%s)", zero_status_string(o.status),
              o.error);
        host_run_free(&o);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) th_remove_dir(root);
    return check_mpi_finish();
}
