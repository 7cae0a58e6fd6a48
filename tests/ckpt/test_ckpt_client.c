/* The host's client state in a checkpoint (ABI 1.7,
 * zero_save_options.client_state / zero_client_state;
 * docs/checkpoints.md "Client state"), one mpirun of W ranks:
 *
 *  1. none_yet: before any zero_load, zero_client_state is NULL / 0;
 *  2. saved: stage2 at W ranks, three steps, then zero_save_ex with
 *     2.5 MiB + 3 bytes of client state (several checksummed chunks, an
 *     odd size): the checkpoint holds client_state.rank0.bin, zero-ckpt
 *     verify passes, info --json reports its size, and zero-ckpt
 *     client-state writes the same bytes to a file and to stdout (exit 3
 *     on a checkpoint without one, 2 for an output inside the checkpoint,
 *     1 with nothing written for a damaged one);
 *  3. loaded: a stage3 engine at W ranks (a resharding load) and a stage1
 *     engine on the first ceil(W/2) ranks (another world size) get the
 *     same bytes on every rank, and their parameters are the saver's;
 *  4. converted: zero-ckpt convert to 2 ranks of stage1 carries the client
 *     state (verify passes, a 2-rank load gets the bytes);
 *  5. cleared: loading a checkpoint saved without client state (and one
 *     saved with a 1.6-sized zero_save_options, whose client fields are
 *     past its struct_size and so never read) gives NULL / 0 again;
 *  6. differing: every rank passes its own bytes: the save succeeds, rank
 *     0 logs a WARN saying the ranks' client states differ, and a load
 *     hands rank 0's bytes to every rank;
 *  7. refused: one rank passes client_state NULL with bytes > 0: every
 *     rank returns ZERO_ERR_INVALID_ARGUMENT at once (well inside the
 *     communication timeout), that rank's message says why, the others'
 *     name it, and nothing is written;
 *  9. (1.8) shapes: p0 registered 25 x 40 and p2 3 x 111 reach the
 *     manifest and zero-ckpt consolidate's header (p1 without one: [7]);
 *     a shape of another element count, 9 dimensions, ndim without a
 *     shape array and reserved3 set are each refused;
 *  8. damaged: one byte of client_state.rank0.bin flipped: zero-ckpt
 *     verify exits 1 and zero_load is ZERO_ERR_IO on every rank naming
 *     the client state; the engine keeps the client state of its last
 *     good load.
 * Usage: test_ckpt_client DIR ZERO_CKPT   (under mpirun -np W) */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/host_util.h"
#include "../common/mpi_check.h"

static int rank_, world_;
static const char *tool_;

enum { NP = 4 };
static const size_t numel_[NP] = {1000, 7, 333, 1};
#define CONFIG(stage)                                                                                               \
    "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": " #stage "}, "                      \
    "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}"

typedef struct model {
    zero_engine *e;
    zero_param *h[NP];
    float *w[NP];
} model;

static int warned_;
static void on_log(void *user, zero_log_level level, int rank, const char *msg) {
    (void)user, (void)rank;
    if (level == ZERO_LOG_WARN && strstr(msg, "different client states") && strstr(msg, "rank 0's")) warned_++;
}

/* An engine over comm (MPI_COMM_WORLD or a split of it) with the NP params. */
static int model_open(model *m, const char *plugin, const char *json, MPI_Comm comm) {
    memset(m, 0, sizeof *m);
    char err[1024];
    th_set_comm(comm);
    zero_status s = th_engine_create(json, plugin, 0, on_log, NULL, &m->e, err, sizeof err);
    th_set_comm(MPI_COMM_WORLD);
    CHECK(s == ZERO_OK, "%s", err);
    if (s != ZERO_OK) return 0;
    /* (1.8) shapes: p0 25 x 40, p2 3 x 111, p1 and p3 without (flat) */
    static const uint64_t shape0[2] = {25, 40}, shape2[2] = {3, 111}, bad[2] = {25, 41}, nine[9] = {1, 1, 1, 1, 1,
                                                                                                   1, 1, 1, 1000};
    for (int i = 0; i < NP; i++) {
        m->w[i] = malloc(numel_[i] * sizeof(float));
        for (size_t k = 0; k < numel_[i]; k++) m->w[i][k] = (float)th_u11((uint64_t)i * 100000 + k);
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        zero_param_desc d = ZERO_PARAM_DESC_INIT;
        d.name = name;
        d.data = m->w[i];
        d.numel = numel_[i];
        if (i == 0) { /* a shape is checked against numel: refused, nothing registered */
            zero_param *x;
            d.shape = bad, d.ndim = 2;
            CHECK(zero_register_param(m->e, &d, &x) == ZERO_ERR_INVALID_ARGUMENT &&
                      strstr(zero_last_error(m->e), "shape 25 x 41"),
                  "a shape of 1025 elements for 1000: %s", zero_last_error(m->e));
            d.shape = nine, d.ndim = 9;
            CHECK_EQ_INT(zero_register_param(m->e, &d, &x), ZERO_ERR_INVALID_ARGUMENT);
            d.shape = NULL, d.ndim = 1;
            CHECK_EQ_INT(zero_register_param(m->e, &d, &x), ZERO_ERR_INVALID_ARGUMENT);
            d.shape = shape0, d.ndim = 2, d.reserved3 = 1;
            CHECK_EQ_INT(zero_register_param(m->e, &d, &x), ZERO_ERR_INVALID_ARGUMENT);
            d.reserved3 = 0;
        }
        if (i == 2) d.shape = shape2, d.ndim = 2;
        CHECK_EQ_INT(zero_register_param(m->e, &d, &m->h[i]), ZERO_OK);
    }
    CHECK_EQ_INT(zero_params_done(m->e), ZERO_OK);
    return 1;
}

static void model_close(model *m) {
    zero_engine_destroy(m->e);
    for (int i = 0; i < NP; i++) free(m->w[i]);
}

/* `steps` optimizer steps; the gradient depends on the step, not the rank */
static void model_train(model *m, int steps) {
    for (int t = 0; t < steps; t++) {
        for (int i = 0; i < NP; i++) {
            void *g = NULL;
            CHECK_EQ_INT(zero_grad_buffer(m->e, m->h[i], &g), ZERO_OK);
            for (size_t k = 0; g && k < numel_[i]; k++) ((float *)g)[k] = (float)th_u11((uint64_t)t * 7919 + i * 131 + k);
            CHECK_EQ_INT(zero_on_grad_ready(m->e, m->h[i], NULL), ZERO_OK);
        }
        zero_step_args a = ZERO_STEP_ARGS_INIT;
        CHECK(zero_step(m->e, &a, NULL) == ZERO_OK, "step: %s", zero_last_error(m->e));
    }
}

static float *model_values(model *m) {
    size_t n = 0;
    for (int i = 0; i < NP; i++) n += numel_[i];
    float *v = calloc(n, sizeof *v);
    CHECK_EQ_INT(th_gather_all_f32(m->e, m->h, NP, numel_, v), ZERO_OK);
    return v;
}

static size_t total_numel(void) {
    size_t n = 0;
    for (int i = 0; i < NP; i++) n += numel_[i];
    return n;
}

static zero_status save(model *m, const char *root, const char *tag, const void *cs, uint64_t bytes) {
    zero_save_options o = ZERO_SAVE_OPTIONS_INIT;
    o.tag = tag;
    o.client_state = cs;
    o.client_state_bytes = bytes;
    return zero_save_ex(m->e, root, &o);
}

/* The client state the engine holds equals (want, bytes). */
static void expect_client(model *m, const unsigned char *want, uint64_t bytes, const char *what) {
    const void *data = (const void *)1;
    uint64_t n = 7;
    CHECK_EQ_INT(zero_client_state(m->e, &data, &n), ZERO_OK);
    CHECK(n == bytes, "%s: rank %d: client state of %llu bytes, expected %llu", what, rank_, (unsigned long long)n,
          (unsigned long long)bytes);
    if (!bytes) CHECK(data == NULL, "%s: rank %d: no client state, but data is not NULL", what, rank_);
    else CHECK(data && n == bytes && !memcmp(data, want, bytes), "%s: rank %d: client state bytes differ", what, rank_);
}

/* Run a shell command on rank 0; its exit status everywhere. */
static int run0(const char *cmd) {
    int rc = 0;
    if (rank_ == 0) {
        int st = system(cmd);
        rc = WIFEXITED(st) ? WEXITSTATUS(st) : 99;
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return rc;
}

static int same_file(const char *path, const unsigned char *want, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char *got = malloc(n + 1);
    const size_t k = fread(got, 1, n + 1, f);
    fclose(f);
    const int same = k == n && !memcmp(got, want, n);
    free(got);
    return same;
}

/* Rank 0 flips one bit of a file (flipping it again restores it). */
static void flip_bit(const char *path, long off) {
    if (rank_ == 0) {
        FILE *fp = fopen(path, "r+b");
        CHECK(fp != NULL, "open %s", path);
        int c = fp && fseek(fp, off, SEEK_SET) == 0 ? fgetc(fp) : EOF;
        CHECK(c != EOF, "%s: byte %ld", path, off);
        if (c != EOF) fseek(fp, off, SEEK_SET), fputc(c ^ 0x10, fp);
        if (fp) fclose(fp);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A stage1 engine on the first k ranks loads dir: the client state is
 * (cs, bytes) on each, and the parameters are `saved` (unless NULL). */
static void load_on_first(int k, const char *dir, const unsigned char *cs, uint64_t bytes, const float *saved,
                          const char *what) {
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank_ < k ? 0 : MPI_UNDEFINED, rank_, &sub);
    if (sub == MPI_COMM_NULL) return;
    model c;
    if (model_open(&c, "stage1", CONFIG(1), sub)) {
        CHECK(zero_load(c.e, dir) == ZERO_OK, "%s: stage1 x%d load: %s", what, k, zero_last_error(c.e));
        expect_client(&c, cs, bytes, what);
        if (saved) {
            float *v = model_values(&c);
            CHECK(!memcmp(v, saved, total_numel() * sizeof *v), "%s: rank %d: the parameters are not the saver's",
                  what, rank_);
            free(v);
        }
        model_close(&c);
    }
    MPI_Comm_free(&sub);
}

static unsigned char *pattern(size_t n, unsigned seed) {
    unsigned char *p = malloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 2654435761u + seed) >> 7);
    return p;
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    if (argc < 3) {
        if (rank_ == 0) fprintf(stderr, "usage: test_ckpt_client DIR ZERO_CKPT\n");
        MPI_Finalize();
        return 2;
    }
    const char *dir = argv[1];
    tool_ = argv[2];
    char root[2048], conv[2048], cmd[12000], path[4400];
    snprintf(root, sizeof root, "%s/root", dir);
    snprintf(conv, sizeof conv, "%s/converted", dir);
    if (rank_ == 0) {
        th_remove_dir(dir);
        mkdir(dir, 0777);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const size_t big = (5u << 19) + 3; /* 2.5 MiB + 3: three 1 MiB chunks, the last partial */
    const long DAMAGE_AT = 16 + (long)(3u << 19); /* past the 16-byte header, inside the second chunk */
    char client_file[4400];
    snprintf(client_file, sizeof client_file, "%s/with/client_state.rank0.bin", root);
    unsigned char *cs = pattern(big, 17);
    const size_t n = total_numel();

    /* 1-2. a stage2 run saves with client state */
    model a;
    if (!model_open(&a, "stage2", CONFIG(2), MPI_COMM_WORLD)) return check_mpi_finish();
    expect_client(&a, NULL, 0, "none_yet");
    model_train(&a, 3);
    CHECK(save(&a, root, "with", cs, big) == ZERO_OK, "save with client state: %s", zero_last_error(a.e));
    float *saved = model_values(&a);
    snprintf(path, sizeof path, "%s/with/client_state.rank0.bin", root);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (size_t)sb.st_size == big + 16, "%s: missing or %lld bytes", path,
          (long long)sb.st_size);
    snprintf(cmd, sizeof cmd, "'%s' verify '%s/with' >/dev/null", tool_, root);
    CHECK_EQ_INT(run0(cmd), 0);
    /* (1.8) the registered shapes reach the manifest and consolidate's safetensors header */
    snprintf(cmd, sizeof cmd,
             "'%s' consolidate '%s/with' '%s/model.safetensors' >/dev/null && head -c 600 '%s/model.safetensors' | "
             "grep -q '\"p0\":{\"dtype\":\"F32\",\"shape\":\\[25,40\\]' && head -c 600 '%s/model.safetensors' | "
             "grep -q '\"p1\":{\"dtype\":\"F32\",\"shape\":\\[7\\]' && head -c 600 '%s/model.safetensors' | "
             "grep -q '\"p2\":{\"dtype\":\"F32\",\"shape\":\\[3,111\\]'",
             tool_, root, dir, dir, dir, dir);
    CHECK(run0(cmd) == 0, "consolidate does not write the registered shapes (25 x 40, 7, 3 x 111)");
    snprintf(cmd, sizeof cmd, "'%s' info '%s/with' --json | grep -q '\"client_state_bytes\": %zu'", tool_, root, big);
    CHECK(run0(cmd) == 0, "zero-ckpt info --json does not report client_state_bytes %zu", big);
    /* zero-ckpt client-state: the bytes, verified, to a file or stdout; refused inside the checkpoint */
    char out[4400];
    snprintf(out, sizeof out, "%s/client.bin", dir);
    snprintf(cmd, sizeof cmd, "'%s' client-state '%s' '%s' >/dev/null", tool_, root, out);
    CHECK_EQ_INT(run0(cmd), 0);
    if (rank_ == 0) CHECK(same_file(out, cs, big), "zero-ckpt client-state wrote other bytes to %s", out);
    snprintf(cmd, sizeof cmd, "'%s' client-state '%s/with' - | cmp -s - '%s'", tool_, root, out);
    CHECK_EQ_INT(run0(cmd), 0);
    snprintf(cmd, sizeof cmd, "'%s' client-state '%s/with' '%s/with/copy.bin' 2>/dev/null", tool_, root, root);
    CHECK_EQ_INT(run0(cmd), 2);
    snprintf(path, sizeof path, "%s/with/copy.bin", root);
    CHECK(stat(path, &sb) != 0, "client-state wrote %s inside the checkpoint", path);
    /* 5. without client state, and with 1.6-sized options (fields past struct_size are never read) */
    CHECK(save(&a, root, "without", NULL, 0) == ZERO_OK, "save without: %s", zero_last_error(a.e));
    zero_save_options old = ZERO_SAVE_OPTIONS_INIT;
    old.struct_size = (uint32_t)offsetof(zero_save_options, client_state);
    old.tag = "old-options";
    old.client_state = cs;
    old.client_state_bytes = 99;
    CHECK(zero_save_ex(a.e, root, &old) == ZERO_OK, "save with 1.6 options: %s", zero_last_error(a.e));
    snprintf(path, sizeof path, "%s/old-options/client_state.rank0.bin", root);
    CHECK(stat(path, &sb) != 0, "a 1.6-sized zero_save_options wrote %s", path);
    snprintf(cmd, sizeof cmd, "'%s' client-state '%s/without' - 2>/dev/null >/dev/null", tool_, root);
    CHECK_EQ_INT(run0(cmd), 3);

    /* 6. every rank its own bytes: rank 0's kept, said at WARN */
    unsigned char *mine = pattern(1000 + (size_t)rank_, 1000u + (unsigned)rank_);
    unsigned char *rank0 = pattern(1000, 1000u);
    warned_ = 0;
    CHECK(save(&a, root, "differing", mine, 1000 + (uint64_t)rank_) == ZERO_OK, "save differing: %s",
          zero_last_error(a.e));
    if (world_ > 1) CHECK(warned_ == (rank_ == 0), "rank %d: %d WARN lines about differing client states", rank_, warned_);

    /* 7. one rank's client_state NULL with bytes > 0: refused everywhere at once */
    const int bad = world_ - 1;
    double t0 = MPI_Wtime();
    zero_status s = save(&a, root, "refused", rank_ == bad ? NULL : cs, 5);
    const char *msg = zero_last_error(a.e);
    CHECK(s == ZERO_ERR_INVALID_ARGUMENT, "refused: rank %d: %s (%s)", rank_, zero_status_string(s), msg);
    if (rank_ == bad) CHECK(strstr(msg, "client_state is NULL") != NULL, "rank %d: message '%s'", rank_, msg);
    else {
        char want[64];
        snprintf(want, sizeof want, "rank %d refused its arguments", bad);
        CHECK(strstr(msg, want) != NULL, "rank %d: message '%s' does not name rank %d", rank_, msg, bad);
    }
    CHECK(MPI_Wtime() - t0 < 20, "rank %d: the refusal took %.1f s", rank_, MPI_Wtime() - t0);
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(path, sizeof path, "%s/refused", root);
    CHECK(stat(path, &sb) != 0, "a refused save wrote %s", path);
    model_close(&a);

    /* 3. a resharding load (stage3, same world) and another world size */
    snprintf(path, sizeof path, "%s/with", root);
    model b;
    if (model_open(&b, "stage3", CONFIG(3), MPI_COMM_WORLD)) {
        CHECK(zero_load(b.e, path) == ZERO_OK, "stage3 load: %s", zero_last_error(b.e));
        expect_client(&b, cs, big, "loaded (stage3)");
        float *v = model_values(&b);
        CHECK(!memcmp(v, saved, n * sizeof *v), "rank %d: stage3's parameters are not the saver's", rank_);
        free(v);
        /* 8. damaged: the last good load's client state stays */
        flip_bit(client_file, DAMAGE_AT);
        snprintf(cmd, sizeof cmd, "'%s' verify '%s/with' >/dev/null", tool_, root);
        CHECK_EQ_INT(run0(cmd), 1);
        snprintf(cmd, sizeof cmd, "'%s' client-state '%s/with' '%s/damaged.bin' 2>/dev/null", tool_, root, dir);
        CHECK_EQ_INT(run0(cmd), 1);
        snprintf(cmd, sizeof cmd, "%s/damaged.bin", dir);
        CHECK(stat(cmd, &sb) != 0, "client-state left %s from a damaged checkpoint", cmd);
        s = zero_load(b.e, path);
        CHECK(s == ZERO_ERR_IO && strstr(zero_last_error(b.e), "client state"), "damaged: rank %d: %s (%s)", rank_,
              zero_status_string(s), zero_last_error(b.e));
        expect_client(&b, cs, big, "after the damaged load");
        /* 5. a checkpoint without client state clears it */
        snprintf(path, sizeof path, "%s/old-options", root);
        CHECK(zero_load(b.e, path) == ZERO_OK, "load old-options: %s", zero_last_error(b.e));
        expect_client(&b, NULL, 0, "1.6 options");
        snprintf(path, sizeof path, "%s/differing", root);
        CHECK(zero_load(b.e, path) == ZERO_OK, "load differing: %s", zero_last_error(b.e));
        expect_client(&b, rank0, 1000, "differing: rank 0's");
        snprintf(path, sizeof path, "%s/without", root);
        CHECK(zero_load(b.e, path) == ZERO_OK, "load without: %s", zero_last_error(b.e));
        expect_client(&b, NULL, 0, "without");
        model_close(&b);
    }
    flip_bit(client_file, DAMAGE_AT); /* the same bit again: repaired for the next loads */
    snprintf(cmd, sizeof cmd, "'%s' verify '%s/with' >/dev/null", tool_, root);
    CHECK_EQ_INT(run0(cmd), 0);

    snprintf(path, sizeof path, "%s/with", root);
    load_on_first((world_ + 1) / 2, path, cs, big, NULL, "loaded (another world size)");
    MPI_Barrier(MPI_COMM_WORLD);

    /* 4. zero-ckpt convert carries it */
    snprintf(cmd, sizeof cmd, "'%s' convert '%s/with' '%s' --ranks 2 --plugin stage1 >/dev/null && '%s' verify '%s' >/dev/null",
             tool_, root, conv, tool_, conv);
    CHECK_EQ_INT(run0(cmd), 0);
    load_on_first(2, conv, cs, big, saved, "converted");
    free(saved);
    free(cs);
    free(mine);
    free(rank0);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0 && !check_failures_) th_remove_dir(dir);
    return check_mpi_finish();
}
