/* Checkpoint file-system safety (issue 31, item 2 and two of item 6;
 * docs/checkpoints.md "Symbolic links and cleanup"), one mpirun of 2 ranks,
 * stage2.  Every case hashes a tree of sentinel files OUTSIDE the save root
 * (regular files, a subdirectory, a complete checkpoint of its own) before
 * and after, without following links, and requires it unchanged:
 *
 *  1. leftover_partial_link: ROOT/step-2.partial is a symbolic link to the
 *     sentinel directory, and ROOT/latest.tmp.<rank 0's pid> a link to a
 *     sentinel file: zero_save succeeds on every rank, the links are
 *     removed as links, step-2 is a real directory, `latest` names it;
 *  2. keep_last_over_link: ROOT/step-1 is a link to a complete step-1
 *     checkpoint outside ROOT; zero_save_ex(keep_last 1) at steps 2 and 3:
 *     step-2 is pruned, the link is skipped (a WARN naming it on rank 0) and
 *     stays, its target is untouched;
 *  3. tag_is_link: ROOT/<tag> a link to the sentinel directory: zero_save_ex
 *     with that tag is ZERO_ERR_IO on every rank naming the path and "symbolic
 *     link"; no <tag>.partial, `latest` unchanged;
 *  4. enospc_manifest: ZERO_CKPT_FAULT=enospc:manifest.json (rank 0's
 *     manifest.json write fails with ENOSPC after half its bytes):
 *     ZERO_ERR_IO on every rank naming manifest.json and ENOSPC; no
 *     step-2.partial, no step-2, `latest` still "step-1", which verifies;
 *  6. host_files (1.7.5): the host's own files in a checkpoint's directory
 *     (written there before zero_save, as a data loader state beside the
 *     weights, or added to a saved checkpoint): a save publishing that tag
 *     (a directory without a manifest, then a libzero checkpoint replaced
 *     by the same tag), keep_last pruning it, and a leftover <tag>.partial
 *     holding a file of the host's: the files stay, unchanged (carried into
 *     the new checkpoint, left behind by the prune, set aside as
 *     <tag>.partial.kept with a WARN), and every save succeeds.  Before
 *     1.7.5 each of these removed them.
 *  5. tools (rank 0): zero-ckpt consolidate / convert with the output inside
 *     the checkpoint read, equal to a shard, through a link to one or into a
 *     linked directory: exit 2 naming both paths, the checkpoint (hashed)
 *     and the sentinels unchanged; the same commands with an output outside
 *     succeed (so the refusals are not just failures), and convert into a
 *     DST whose <tag>.partial is a link removes only the link.
 * Usage: test_ckpt_fs DIR ZERO_CKPT   (under mpirun -np 2) */
#include <dirent.h>
#include <errno.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host_util.h"
#include "mpi_check.h"

static int rank_, world_;
static const char *tool_;

/* ------------------------------------------------------------ tree hash */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* FNV-1a over every entry below dir, in name order: relative name, type,
 * contents (files) or target (links).  Never follows a link. */
static uint64_t tree_hash(const char *dir, uint64_t h, int *entries) {
    struct dirent **list = NULL;
    int n = scandir(dir, &list, NULL, alphasort);
    if (n < 0) return fnv(h, "missing", 7);
    for (int i = 0; i < n; i++) {
        const char *name = list[i]->d_name;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        struct stat sb;
        if (strcmp(name, ".") && strcmp(name, "..") && lstat(path, &sb) == 0) {
            h = fnv(h, name, strlen(name) + 1);
            h = fnv(h, &sb.st_mode, sizeof sb.st_mode);
            ++*entries;
            if (S_ISDIR(sb.st_mode)) {
                h = tree_hash(path, h, entries);
            } else if (S_ISLNK(sb.st_mode)) {
                char t[4096];
                ssize_t k = readlink(path, t, sizeof t);
                h = fnv(h, t, k > 0 ? (size_t)k : 0);
            } else {
                FILE *f = fopen(path, "rb");
                char buf[4096];
                size_t k;
                while (f && (k = fread(buf, 1, sizeof buf, f)) > 0) h = fnv(h, buf, k);
                if (f) fclose(f);
            }
        }
        free(list[i]);
    }
    free(list);
    return h;
}

static uint64_t hash_of(const char *dir, int *entries) {
    *entries = 0;
    return tree_hash(dir, 1469598103934665603ull, entries);
}

/* ------------------------------------------------------------ files */
static void put_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot create %s", path);
    if (f) fputs(text, f), fclose(f);
}

/* The sentinel tree: files, a subdirectory. */
static void make_sentinels(const char *dir) {
    char p[4096];
    mkdir(dir, 0777);
    snprintf(p, sizeof p, "%s/a.txt", dir);
    put_file(p, "the user's file a\n");
    snprintf(p, sizeof p, "%s/b.bin", dir);
    put_file(p, "\x01\x02 the user's file b\n");
    snprintf(p, sizeof p, "%s/sub", dir);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/sub/c.txt", dir);
    put_file(p, "the user's file c\n");
}

static int exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static void read_latest(const char *root, char *out, size_t n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/latest", root);
    FILE *f = fopen(p, "r");
    out[0] = 0;
    if (f) {
        size_t k = fread(out, 1, n - 1, f);
        out[k] = 0;
        fclose(f);
    }
}

/* ------------------------------------------------------------ engine */
typedef struct run {
    zero_engine *e;
    zero_param *h;
    float w[100], g[100];
    int warn_links; /* WARN lines naming a link that keep_last skipped */
    int warn_kept;  /* WARN lines naming host files set aside */
} run;

static void on_log(void *user, zero_log_level level, int rank, const char *msg) {
    (void)rank;
    run *r = user;
    if (level == ZERO_LOG_WARN && strstr(msg, "is a symbolic link, not pruned")) r->warn_links++;
    if (level == ZERO_LOG_WARN && strstr(msg, "that libzero did not write") && strstr(msg, "not removed"))
        r->warn_kept++;
}

static int start(run *r) {
    memset(r, 0, sizeof *r);
    char err[1024];
    zero_status s = th_engine_create("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 2}, "
                                     "\"optimizer\": {\"type\": \"AdamW\"}}",
                                     "stage2", 0, on_log, r, &r->e, err, sizeof err);
    CHECK(s == ZERO_OK, "%s", err);
    if (s != ZERO_OK) return -1;
    for (int i = 0; i < 100; i++) r->w[i] = (float)i / 100.0f;
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = "w";
    d.data = r->w;
    d.grad = r->g;
    d.numel = 100;
    CHECK_EQ_INT(zero_register_param(r->e, &d, &r->h), ZERO_OK);
    CHECK_EQ_INT(zero_params_done(r->e), ZERO_OK);
    return 0;
}

/* One optimizer step with a gradient on every rank. */
static void step(run *r) {
    for (int i = 0; i < 100; i++) r->g[i] = (float)((i + rank_) % 7) / 7.0f - 0.5f;
    CHECK_EQ_INT(zero_on_grad_ready(r->e, r->h, NULL), ZERO_OK);
    zero_step_args a = ZERO_STEP_ARGS_INIT;
    zero_step_result res;
    memset(&res, 0, sizeof res);
    res.struct_size = sizeof res;
    CHECK_EQ_INT(zero_step(r->e, &a, &res), ZERO_OK);
}

static zero_status save(run *r, const char *root, const char *tag, uint32_t keep) {
    zero_save_options o = ZERO_SAVE_OPTIONS_INIT;
    o.tag = tag;
    o.keep_last = keep;
    return zero_save_ex(r->e, root, &o);
}

/* Rank 0 prepares, everyone waits. */
#define ON_ROOT(stmt)                                                                                                  \
    do {                                                                                                               \
        if (rank_ == 0) { stmt; }                                                                                      \
        MPI_Barrier(MPI_COMM_WORLD);                                                                                   \
    } while (0)

/* ------------------------------------------------------------ cases */
static void leftover_partial_link(const char *base) {
    char root[2048], out[2048], p[4200], q[4200];
    snprintf(root, sizeof root, "%s/c1/root", base);
    snprintf(out, sizeof out, "%s/c1/outside", base);
    ON_ROOT({
        snprintf(p, sizeof p, "%s/c1", base);
        mkdir(p, 0777);
        mkdir(root, 0777);
        make_sentinels(out);
        snprintf(p, sizeof p, "%s/step-2.partial", root);
        CHECK(symlink(out, p) == 0, "symlink %s: %s", p, strerror(errno));
        snprintf(p, sizeof p, "%s/latest.tmp.%ld", root, (long)getpid()); /* rank 0 writes latest */
        snprintf(q, sizeof q, "%s/a.txt", out);
        CHECK(symlink(q, p) == 0, "symlink %s: %s", p, strerror(errno));
    });
    int n0 = 0, n1 = 0;
    uint64_t h0 = hash_of(out, &n0);
    run r;
    if (start(&r)) return;
    step(&r), step(&r);
    zero_status s = save(&r, root, NULL, 0);
    CHECK(s == ZERO_OK, "rank %d: save over a leftover .partial link: %s (%s)", rank_, zero_status_string(s),
          zero_last_error(r.e));
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t h1 = hash_of(out, &n1);
    CHECK(h0 == h1 && n0 == n1 && n0 >= 4, "rank %d: the tree outside the save root changed (%d -> %d entries)", rank_,
          n0, n1);
    snprintf(p, sizeof p, "%s/step-2", root);
    struct stat sb;
    CHECK(lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode), "%s is not a directory", p);
    snprintf(p, sizeof p, "%s/step-2.partial", root);
    CHECK(!exists(p), "%s is still there", p);
    char latest[256];
    read_latest(root, latest, sizeof latest);
    CHECK(!strcmp(latest, "step-2\n"), "latest is '%s'", latest);
    if (rank_ == 0) printf("%-34s every rank ZERO_OK; the links removed as links, %d sentinels unchanged\n",
                           "leftover .partial link:", n1);
    zero_engine_destroy(r.e);
}

static void keep_last_over_link(const char *base) {
    char root[2048], oroot[2048], p[4200], q[4200];
    snprintf(root, sizeof root, "%s/c2/root", base);
    snprintf(oroot, sizeof oroot, "%s/c2/outside", base); /* a checkpoint root of its own, with sentinels */
    ON_ROOT({
        snprintf(p, sizeof p, "%s/c2", base);
        mkdir(p, 0777);
        mkdir(root, 0777);
        make_sentinels(oroot);
    });
    run r;
    if (start(&r)) return;
    step(&r);
    CHECK_EQ_INT(save(&r, oroot, NULL, 0), ZERO_OK); /* outside/step-1: a complete checkpoint */
    ON_ROOT({
        snprintf(p, sizeof p, "%s/step-1", root);
        snprintf(q, sizeof q, "%s/step-1", oroot);
        CHECK(symlink(q, p) == 0, "symlink %s: %s", p, strerror(errno));
    });
    int n0 = 0, n1 = 0;
    uint64_t h0 = hash_of(oroot, &n0);
    step(&r);
    zero_status s = save(&r, root, NULL, 1);
    CHECK(s == ZERO_OK, "rank %d: save step-2: %s (%s)", rank_, zero_status_string(s), zero_last_error(r.e));
    step(&r);
    s = save(&r, root, NULL, 1);
    CHECK(s == ZERO_OK, "rank %d: save step-3: %s (%s)", rank_, zero_status_string(s), zero_last_error(r.e));
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t h1 = hash_of(oroot, &n1);
    CHECK(h0 == h1 && n0 == n1 && n0 >= 8, "rank %d: the tree outside the save root changed (%d -> %d entries)", rank_,
          n0, n1);
    snprintf(p, sizeof p, "%s/step-1", root);
    CHECK(exists(p), "rank %d: the link %s was removed", rank_, p);
    snprintf(p, sizeof p, "%s/step-2", root);
    CHECK(!exists(p), "rank %d: %s was not pruned (keep_last 1)", rank_, p);
    snprintf(p, sizeof p, "%s/step-3/manifest.json", root);
    CHECK(exists(p), "rank %d: %s missing", rank_, p);
    if (rank_ == 0) {
        CHECK(r.warn_links == 2, "rank 0: %d WARN lines naming the skipped link, want 2 (one per prune)", r.warn_links);
        printf("%-34s every rank ZERO_OK; step-2 pruned, the link skipped (WARN), %d sentinels unchanged\n",
               "keep_last over a linked checkpoint:", n1);
    }
    zero_engine_destroy(r.e);
}

/* The sentinels' three files under dir, as make_sentinels wrote them. */
static int sentinels_intact(const char *dir) {
    static const char *const names[] = {"a.txt", "b.bin", "sub/c.txt"};
    static const char *const texts[] = {"the user's file a\n", "\x01\x02 the user's file b\n", "the user's file c\n"};
    for (int i = 0; i < 3; i++) {
        char p[4200], buf[128] = "";
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        FILE *f = fopen(p, "rb");
        if (!f) return 0;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = 0;
        if (strcmp(buf, texts[i])) return 0;
    }
    return 1;
}

static void host_files(const char *base) {
    char root[2048], p[4200];
    snprintf(root, sizeof root, "%s/c6/root", base);
    ON_ROOT({
        snprintf(p, sizeof p, "%s/c6", base);
        mkdir(p, 0777);
        mkdir(root, 0777);
        snprintf(p, sizeof p, "%s/step-1", root); /* the host's files first, then zero_save of that step */
        make_sentinels(p);
    });
    run r;
    if (start(&r)) return;
    step(&r);
    zero_status s = save(&r, root, NULL, 0);
    CHECK(s == ZERO_OK, "rank %d: save into a directory of the host's: %s (%s)", rank_, zero_status_string(s),
          zero_last_error(r.e));
    snprintf(p, sizeof p, "%s/step-1", root);
    CHECK(sentinels_intact(p), "rank %d: the host's files in %s are gone or changed after the save", rank_, p);
    snprintf(p, sizeof p, "%s/step-1/manifest.json", root);
    CHECK(exists(p), "rank %d: %s missing", rank_, p);
    CHECK(zero_load(r.e, root) == ZERO_OK, "rank %d: load beside the host's files: %s", rank_, zero_last_error(r.e));
    s = save(&r, root, "step-1", 0); /* the libzero checkpoint, with the host's files, replaced by the same tag */
    CHECK(s == ZERO_OK, "rank %d: save over step-1: %s (%s)", rank_, zero_status_string(s), zero_last_error(r.e));
    snprintf(p, sizeof p, "%s/step-1", root);
    CHECK(sentinels_intact(p), "rank %d: the host's files in %s are gone after the tag was saved again", rank_, p);
    step(&r);
    s = save(&r, root, NULL, 1); /* keep_last 1: step-1 pruned */
    CHECK(s == ZERO_OK, "rank %d: save step-2: %s (%s)", rank_, zero_status_string(s), zero_last_error(r.e));
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(p, sizeof p, "%s/step-1/manifest.json", root);
    CHECK(!exists(p), "rank %d: step-1 was not pruned (keep_last 1)", rank_);
    snprintf(p, sizeof p, "%s/step-1/core.rank0.bin", root);
    CHECK(!exists(p), "rank %d: the prune left libzero's %s", rank_, p);
    snprintf(p, sizeof p, "%s/step-1", root);
    CHECK(sentinels_intact(p), "rank %d: keep_last removed the host's files in %s", rank_, p);
    ON_ROOT({ /* a save killed after its exchange: the old directory, with a host file, at the staging name */
        snprintf(p, sizeof p, "%s/step-3.partial", root);
        mkdir(p, 0777);
        snprintf(p, sizeof p, "%s/step-3.partial/notes.txt", root);
        put_file(p, "the user's notes\n");
        snprintf(p, sizeof p, "%s/step-3.partial/core.rank0.bin", root);
        put_file(p, "a blob of libzero's\n");
    });
    step(&r);
    s = save(&r, root, NULL, 0);
    CHECK(s == ZERO_OK, "rank %d: save over a leftover staging directory: %s (%s)", rank_, zero_status_string(s),
          zero_last_error(r.e));
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(p, sizeof p, "%s/step-3.partial.kept/notes.txt", root);
    CHECK(exists(p), "rank %d: the host's file in the leftover staging directory is gone (%s)", rank_, p);
    snprintf(p, sizeof p, "%s/step-3.partial.kept/core.rank0.bin", root);
    CHECK(!exists(p), "rank %d: libzero's leftover blob was kept (%s)", rank_, p);
    snprintf(p, sizeof p, "%s/step-3/manifest.json", root);
    CHECK(exists(p), "rank %d: %s missing", rank_, p);
    char latest[256];
    read_latest(root, latest, sizeof latest);
    CHECK(!strcmp(latest, "step-3\n"), "latest is '%s'", latest);
    if (rank_ == 0) {
        CHECK(r.warn_kept == 1, "rank 0: %d WARN lines naming the files set aside, want 1", r.warn_kept);
        printf("%-34s every rank ZERO_OK; the host's files kept through a save, a re-save, keep_last and a "
               "leftover .partial (set aside, WARN)\n", "host files in a checkpoint:");
    }
    zero_engine_destroy(r.e);
}

static void tag_is_link(const char *base) {
    char root[2048], out[2048], p[4200];
    snprintf(root, sizeof root, "%s/c3/root", base);
    snprintf(out, sizeof out, "%s/c3/outside", base);
    ON_ROOT({
        snprintf(p, sizeof p, "%s/c3", base);
        mkdir(p, 0777);
        mkdir(root, 0777);
        make_sentinels(out);
    });
    run r;
    if (start(&r)) return;
    step(&r);
    CHECK_EQ_INT(save(&r, root, "mine", 0), ZERO_OK);
    ON_ROOT({
        snprintf(p, sizeof p, "%s/linked", root);
        CHECK(symlink(out, p) == 0, "symlink %s: %s", p, strerror(errno));
    });
    int n0 = 0, n1 = 0;
    uint64_t h0 = hash_of(out, &n0);
    step(&r);
    double t0 = MPI_Wtime();
    zero_status s = save(&r, root, "linked", 0);
    const char *msg = zero_last_error(r.e);
    CHECK(s == ZERO_ERR_IO, "rank %d: save into a linked tag gave %s (%s)", rank_, zero_status_string(s), msg);
    snprintf(p, sizeof p, "%s/linked", root);
    CHECK(strstr(msg, p) && strstr(msg, "symbolic link") && strstr(msg, "nothing written"), "rank %d: message '%s'",
          rank_, msg);
    CHECK(MPI_Wtime() - t0 < 30, "rank %d took %.1f s", rank_, MPI_Wtime() - t0);
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t h1 = hash_of(out, &n1);
    CHECK(h0 == h1 && n0 == n1, "rank %d: the tree outside the save root changed", rank_);
    snprintf(p, sizeof p, "%s/linked.partial", root);
    CHECK(!exists(p), "rank %d: %s left behind", rank_, p);
    char latest[256];
    read_latest(root, latest, sizeof latest);
    CHECK(!strcmp(latest, "mine\n"), "latest is '%s'", latest);
    if (rank_ == 0) printf("%-34s every rank: %s\n", "tag that is a link:", msg);
    zero_engine_destroy(r.e);
}

static void enospc_manifest(const char *base, char *root, size_t rn) {
    char p[4200];
    snprintf(root, rn, "%s/c4/root", base);
    ON_ROOT({
        snprintf(p, sizeof p, "%s/c4", base);
        mkdir(p, 0777);
    });
    run r;
    if (start(&r)) return;
    step(&r);
    CHECK_EQ_INT(save(&r, root, NULL, 0), ZERO_OK);
    step(&r);
    setenv("ZERO_CKPT_FAULT", "enospc:manifest.json", 1);
    double t0 = MPI_Wtime();
    zero_status s = save(&r, root, NULL, 0);
    unsetenv("ZERO_CKPT_FAULT");
    const char *msg = zero_last_error(r.e);
    CHECK(s == ZERO_ERR_IO, "rank %d: ENOSPC on the manifest gave %s (%s)", rank_, zero_status_string(s), msg);
    CHECK(strstr(msg, "manifest.json") && strstr(msg, "No space left on device"), "rank %d: message '%s'", rank_, msg);
    CHECK(MPI_Wtime() - t0 < 30, "rank %d took %.1f s", rank_, MPI_Wtime() - t0);
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(p, sizeof p, "%s/step-2.partial", root);
    CHECK(!exists(p), "rank %d: %s left behind by the failed save", rank_, p);
    snprintf(p, sizeof p, "%s/step-2", root);
    CHECK(!exists(p), "rank %d: %s published by the failed save", rank_, p);
    char latest[256];
    read_latest(root, latest, sizeof latest);
    CHECK(!strcmp(latest, "step-1\n"), "latest is '%s'", latest);
    if (rank_ == 0) {
        char cmd[4600];
        snprintf(cmd, sizeof cmd, "'%s' verify '%s' > /dev/null", tool_, root);
        CHECK(system(cmd) == 0, "zero-ckpt verify fails on the previous checkpoint");
        printf("%-34s every rank: %s\n", "ENOSPC writing manifest.json:", msg);
    }
    zero_engine_destroy(r.e);
}

/* zero-ckpt with stderr captured: exit status, stderr text into err. */
static int tool(const char *args, char *err, size_t n) {
    char cmd[8192], ef[] = "/tmp/ckfs-err-XXXXXX";
    int fd = mkstemp(ef);
    if (fd >= 0) close(fd);
    snprintf(cmd, sizeof cmd, "'%s' %s > /dev/null 2> '%s'", tool_, args, ef);
    int rc = system(cmd);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    FILE *f = fopen(ef, "r");
    size_t k = f ? fread(err, 1, n - 1, f) : 0;
    err[k] = 0;
    if (f) fclose(f);
    unlink(ef);
    return rc;
}

/* A refused tool command: exit 2, stderr naming `a`, `b` and `why`. */
static void refused(const char *what, const char *args, const char *a, const char *b, const char *why) {
    char err[8192];
    int rc = tool(args, err, sizeof err);
    CHECK(rc == 2 && strstr(err, a) && strstr(err, b) && strstr(err, why), "%s: exit %d, '%s' (want 2 naming %s, %s: %s)",
          what, rc, err, a, b, why);
    printf("%-34s exit %d: %s", what, rc, err);
}

static void tools(const char *base, const char *root) { /* root, base: under 2000 bytes (main) */
    if (rank_ != 0) return;
    char ck[2100], out[2100], p[4300], q[4300], args[8192], err[8192];
    snprintf(ck, sizeof ck, "%s/step-1", root);
    snprintf(out, sizeof out, "%s/c5", base);
    make_sentinels(out);
    int nc0 = 0, nc1 = 0, ns0 = 0, ns1 = 0;
    uint64_t hc0 = hash_of(root, &nc0), hs0 = hash_of(out, &ns0);
    /* consolidate */
    snprintf(p, sizeof p, "%s/model.safetensors", ck);
    snprintf(args, sizeof args, "consolidate '%s' '%s'", root, p);
    refused("consolidate into the checkpoint:", args, p, ck, "inside the checkpoint being read");
    snprintf(p, sizeof p, "%s/stage2.params.rank0.bin", ck);
    snprintf(args, sizeof args, "consolidate '%s' '%s'", ck, p);
    refused("consolidate over a shard:", args, p, ck, "inside the checkpoint being read");
    snprintf(p, sizeof p, "%s/shard-link", out);
    snprintf(q, sizeof q, "%s/stage2.state0.rank1.bin", ck);
    CHECK(symlink(q, p) == 0, "symlink %s", p);
    snprintf(args, sizeof args, "consolidate '%s' '%s'", root, p);
    refused("consolidate to a link to a shard:", args, p, q, "same file");
    snprintf(p, sizeof p, "%s/shard-hard", out);
    snprintf(q, sizeof q, "%s/core.rank0.bin", ck);
    CHECK(link(q, p) == 0, "link %s", p);
    snprintf(args, sizeof args, "consolidate '%s' '%s'", root, p);
    refused("consolidate to a hard link:", args, p, q, "same file");
    snprintf(p, sizeof p, "%s/ck-link", out);
    CHECK(symlink(ck, p) == 0, "symlink %s", p);
    snprintf(q, sizeof q, "%s/ck-link/m.safetensors", out);
    snprintf(args, sizeof args, "consolidate '%s' '%s'", root, q);
    refused("consolidate into a linked dir:", args, q, ck, "inside the checkpoint being read");
    /* convert */
    snprintf(p, sizeof p, "%s/sub/dst", ck);
    snprintf(args, sizeof args, "convert '%s' '%s' --ranks 1", root, p);
    refused("convert into the checkpoint:", args, p, ck, "inside the checkpoint being read");
    snprintf(args, sizeof args, "convert '%s' '%s' --ranks 1", ck, ck);
    refused("convert onto the checkpoint:", args, ck, ck, "inside the checkpoint being read");
    snprintf(p, sizeof p, "%s/ck-link/dst", out);
    snprintf(args, sizeof args, "convert '%s' '%s' --ranks 1", root, p);
    refused("convert into a linked dir:", args, p, ck, "inside the checkpoint being read");
    uint64_t hc1 = hash_of(root, &nc1);
    CHECK(hc0 == hc1 && nc0 == nc1, "the checkpoint read by the refused commands changed");
    snprintf(args, sizeof args, "verify '%s'", root);
    CHECK(tool(args, err, sizeof err) == 0, "verify after the refusals: %s", err);
    /* the same commands with outputs outside succeed; a .partial link in
     * DST goes as a link */
    snprintf(p, sizeof p, "%s/c5-ok.safetensors", base);
    snprintf(args, sizeof args, "consolidate '%s' '%s'", root, p);
    CHECK(tool(args, err, sizeof err) == 0 && exists(p), "consolidate outside: %s", err);
    snprintf(p, sizeof p, "%s/c5-dst", base);
    mkdir(p, 0777);
    snprintf(q, sizeof q, "%s/c5-dst/step-1.partial", base);
    CHECK(symlink(out, q) == 0, "symlink %s", q);
    snprintf(args, sizeof args, "convert '%s' '%s' --ranks 1", root, p);
    CHECK(tool(args, err, sizeof err) == 0, "convert outside: %s", err);
    snprintf(q, sizeof q, "%s/c5-dst/step-1/manifest.json", base);
    CHECK(exists(q), "convert wrote no %s", q);
    snprintf(q, sizeof q, "%s/c5-dst/step-1.partial", base);
    CHECK(!exists(q), "%s left behind", q);
    hc1 = hash_of(root, &nc1);
    uint64_t hs1 = hash_of(out, &ns1);
    CHECK(hc0 == hc1 && nc0 == nc1, "the checkpoint read changed");
    CHECK(ns1 == ns0 + 3, "sentinels: %d entries, want %d (+ the three links made here)", ns1, ns0 + 3);
    /* the sentinel files themselves: unchanged apart from the three links */
    snprintf(p, sizeof p, "%s/shard-link", out), unlink(p);
    snprintf(p, sizeof p, "%s/shard-hard", out), unlink(p);
    snprintf(p, sizeof p, "%s/ck-link", out), unlink(p);
    hs1 = hash_of(out, &ns1);
    CHECK(hs0 == hs1 && ns0 == ns1, "the sentinel tree changed");
    printf("%-34s consolidate and convert succeed; %d sentinels and the %d entries read unchanged\n",
           "outputs outside:", ns1, nc1);
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    if (argc != 3 || world_ != 2) {
        if (rank_ == 0) fprintf(stderr, "usage: mpirun -np 2 test_ckpt_fs DIR ZERO_CKPT\n");
        return check_mpi_finish() + 1;
    }
    tool_ = argv[2];
    const char *base = argv[1];
    if (rank_ == 0) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", base, base); /* links inside: rm -rf never follows */
        CHECK(system(cmd) == 0, "cannot prepare %s", base);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    leftover_partial_link(base);
    MPI_Barrier(MPI_COMM_WORLD);
    keep_last_over_link(base);
    MPI_Barrier(MPI_COMM_WORLD);
    tag_is_link(base);
    MPI_Barrier(MPI_COMM_WORLD);
    host_files(base);
    MPI_Barrier(MPI_COMM_WORLD);
    char root[2048];
    enospc_manifest(base, root, sizeof root);
    MPI_Barrier(MPI_COMM_WORLD);
    tools(base, root);
    MPI_Barrier(MPI_COMM_WORLD);
    return check_mpi_finish();
}
