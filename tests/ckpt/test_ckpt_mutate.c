/* Checkpoint mutation test (issue 31): a checkpoint is valid only as a
 * whole.  One stage2 checkpoint of the small MLP at 2 ranks (with
 * zero_set_hparams settings, so that state.hparams is not empty, and (1.7)
 * a client state, whose record and file are changed like the rest); then,
 * one change at a time in a working copy, each undone before the next:
 *
 *  1. every leaf of manifest.json (walked as JSON: every number +1 or its
 *     next double, every string with a bit of its first byte flipped, every
 *     boolean toggled, null -> 0), the manifest's checksum left as written:
 *     `zero-ckpt verify` exits 1 naming the problem, and zero_load fails on
 *     EVERY rank with a message;
 *  2. the same changes with the checksum recomputed (tests/ckpt/ckpt_reseal,
 *     as a buggy writer would leave them), for every field the load uses:
 *     the steps, lr, every loss-scaler field, the hparams, parameter offsets
 *     and (1.8) shapes (their product must stay numel),
 *     file records, layouts, world size (verify and load both refuse); the
 *     parameters' names, sizes, dtypes, groups and the optimizer (load
 *     refuses: they are compared with the run's model);
 *  3. the issue's cases, resealed: a flat_offset + 1, the offsets of two
 *     parameters swapped, lr 0.00135 -> 0.10135-like (+0.1), a file record
 *     deleted from the manifest: both refuse; for the offsets and the
 *     record, `zero-ckpt consolidate` too (exit 1, nothing written);
 *  4. one bit flipped at the start, middle and end of every blob file's
 *     payload and in its header: both refuse;
 *  5. before and after all of it, the unmodified checkpoint verifies and
 *     loads;
 *  6. the same checkpoint as libzero 1.5.1 wrote it (manifest format 1
 *     without a checksum of its own, core blobs of version 1): it verifies
 *     and loads, each with a warning naming what could not be checked; its
 *     lr changed by 0.1 is still refused by both (the core blob cross-check).
 * Fields not used by any load (tag, library version, plugin, config,
 * scheduler, shapes, recorded group sizes) are counted in pass 2, not
 * asserted: pass 1 shows that the checksum covers them.
 *
 * Usage: test_ckpt_mutate DIR ZERO_CKPT CKPT_RESEAL   (under mpirun -np 2) */
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/host_util.h"
#include "../common/slurp.h"
#include "../common/mpi_check.h"
#include "../stages/mlp_host.h"

enum { SAVE_AT = 3 };

static int rank_, world_;
static const char *tool_, *reseal_;
static char root_[1024], ck_[1200], man_[1300], out_[1300];
static char *orig_;   /* rank 0: the manifest as saved */
static json_t *doc_;  /* rank 0: its parse */

static host_run_cfg cfg(void) {
    host_run_cfg c = host_default_cfg();
    c.plugin = "stage2";
    c.steps = SAVE_AT;
    c.gas = 1;
    c.mb = 2;
    c.hp_lr = 0.00135; /* zero_set_hparams(ALL_GROUPS, lr): state.hparams has an entry */
    /* (1.7) a client state: its record and its file are mutated too */
    c.client_state = "{\"step\": 3, \"sampler\": [17, 4, 2026], \"note\": \"the host's own state\"}";
    return c;
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(text, 1, strlen(text), f) == strlen(text), "write %s", path);
    if (f) fclose(f);
}

/* ---- rank 0: the manifest's leaves, addressed by walk order ---- */
typedef struct walk {
    long want, at;     /* the leaf to change, leaves seen */
    char path[256];    /* its path ("files[3].ranges[0][1]") */
    int done;
} walk;

static void change_leaf(json_t *parent, const char *key, size_t idx, json_t *v) {
    json_t *nv = NULL;
    if (json_is_integer(v)) nv = json_integer(json_integer_value(v) + 1);
    else if (json_is_real(v)) nv = json_real(nextafter(json_real_value(v), INFINITY));
    else if (json_is_string(v)) {
        char *s = strdup(json_string_value(v));
        if (s[0]) s[0] ^= 1; /* ASCII stays ASCII */
        nv = json_string(s[0] ? s : "x");
        free(s);
    } else if (json_is_true(v)) nv = json_false();
    else if (json_is_false(v)) nv = json_true();
    else nv = json_integer(0);
    if (key) json_object_set_new(parent, key, nv);
    else json_array_set_new(parent, idx, nv);
}

static void visit(walk *w, json_t *parent, const char *key, size_t idx, json_t *v, const char *path) {
    if (w->done) return;
    char p[256];
    if (json_is_object(v)) {
        const char *k;
        json_t *c;
        void *tmp;
        json_object_foreach_safe(v, tmp, k, c) {
            snprintf(p, sizeof p, "%s%s%s", path, path[0] ? "." : "", k);
            visit(w, v, k, 0, c, p);
        }
        return;
    }
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            snprintf(p, sizeof p, "%s[%zu]", path, i);
            visit(w, v, NULL, i, json_array_get(v, i), p);
        }
        return;
    }
    if (w->at++ != w->want) return;
    snprintf(w->path, sizeof w->path, "%s", path);
    change_leaf(parent, key, idx, v);
    w->done = 1;
}

/* Leaf `i` changed; the path into `path`; the new text (malloc) or NULL past the last leaf. */
static char *mutated(long i, char *path, size_t n) {
    json_t *d = json_deep_copy(doc_);
    walk w = {i, 0, "", 0};
    visit(&w, NULL, NULL, 0, d, "");
    char *text = w.done ? json_dumps(d, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    snprintf(path, n, "%s", w.path);
    json_decref(d);
    return text;
}

/* The path with its indices as [*] ("files[*].ranges[*][*]"). */
static void generic(const char *path, char *out, size_t n) {
    size_t o = 0;
    for (const char *p = path; *p && o + 4 < n; p++) {
        if (*p == '[') {
            memcpy(out + o, "[*]", 3), o += 3;
            while (*p && *p != ']') p++;
        } else out[o++] = *p;
    }
    out[o] = 0;
}

enum { UNUSED = 0, BOTH = 1, LOAD = 2 };
/* What must refuse a resealed change of this field. */
static int role(const char *path) {
    char g[256];
    generic(path, g, sizeof g);
    static const char *const both[] = {
        "format", "version", "world_size", "pp_stages", "chunk_bytes", "state.global_step", "state.skipped_steps",
        "state.micro_step", "state.lr", "state.loss_scaler.", "state.hparams", "params[*].flat_offset",
        "params[*].pp_stage", "files[*].", "layouts[*].pp_stage", "layouts[*].align", "layouts[*].flat_numel",
        "layouts[*].groups[*].flat_begin", "client_state.", "params[*].shape"};
    static const char *const load[] = {"params[*].name", "params[*].numel", "params[*].dtype", "params[*].group",
                                       "model_dtype", "optimizer", "optimizer_states"};
    for (size_t k = 0; k < sizeof both / sizeof *both; k++) {
        const size_t n = strlen(both[k]); /* the field, or a field under it */
        if (!strncmp(g, both[k], n) && (both[k][n - 1] == '.' || !g[n] || g[n] == '.' || g[n] == '['))
            return BOTH;
    }
    for (size_t k = 0; k < sizeof load / sizeof *load; k++)
        if (!strcmp(g, load[k])) return LOAD;
    return UNUSED;
}

static int both_refuse(const char *what, int want_verify, int *nmsg);

/* ---- rank 0: the checkpoint as libzero 1.5.1 wrote it ---- */
static uint32_t crc32c(const unsigned char *p, size_t n) { /* bitwise, independent of the library */
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

/* Core blobs cut to version 1 (104 bytes, version field 1), the manifest
 * without its checksum at format 1; lr_delta added to state.lr. */
static void downgrade(double lr_delta) {
    json_t *d = json_deep_copy(doc_), *fs = json_object_get(d, "files");
    json_object_del(d, "manifest_crc32c");
    json_object_set_new(d, "version", json_integer(1));
    json_t *st = json_object_get(d, "state");
    json_object_set_new(st, "lr", json_real(json_real_value(json_object_get(st, "lr")) + lr_delta));
    for (size_t i = 0; i < json_array_size(fs); i++) {
        json_t *f = json_array_get(fs, i);
        if (strcmp(json_string_value(json_object_get(f, "blob")), "core")) continue;
        char path[1600];
        snprintf(path, sizeof path, "%s/%s", ck_, json_string_value(json_object_get(f, "file")));
        unsigned char b[16 + 112];
        FILE *fp = fopen(path, "rb");
        size_t n = fp ? fread(b, 1, sizeof b, fp) : 0;
        if (fp) fclose(fp);
        CHECK(n == sizeof b, "%s: %zu bytes, want a version-2 core blob of 128", path, n);
        b[16 + 8] = 1; /* version (u64 LE after the magic) */
        for (int k = 0; k < 8; k++) b[8 + k] = (unsigned char)(k ? 0 : 104); /* payload bytes in the header */
        fp = fopen(path, "wb");
        CHECK(fp && fwrite(b, 1, 16 + 104, fp) == 16 + 104, "write %s", path);
        if (fp) fclose(fp);
        char hex[9];
        snprintf(hex, sizeof hex, "%08x", crc32c(b + 16, 104));
        json_object_set_new(f, "bytes", json_integer(104));
        json_object_set_new(f, "crc32c", json_string(hex));
    }
    char *t = json_dumps(d, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    put(man_, t);
    free(t);
    json_decref(d);
}

/* Collective: 6. */
static void legacy_checkpoint(void) {
    char path[2][1600];
    if (rank_ == 0) { /* keep the version-2 core blobs to restore them */
        for (int r = 0; r < 2; r++) {
            snprintf(path[r], sizeof path[r], "%s/core.rank%d.bin", ck_, r);
            char cmd[8000];
            snprintf(cmd, sizeof cmd, "cp '%s' '%s.v2'", path[r], path[r]);
            CHECK(system(cmd) == 0, "%s", cmd);
        }
        downgrade(0);
        char cmd[4000];
        snprintf(cmd, sizeof cmd, "'%s' verify '%s' > '%s' 2>&1", tool_, ck_, out_);
        int st = system(cmd);
        char *o = th_slurp(out_);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && o && strstr(o, "WARNING") && strstr(o, "1.5.1") &&
                  strstr(o, "OK"),
              "a 1.5.1 checkpoint: zero-ckpt verify exit %d: %.600s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, o ? o : "");
        if (o) printf("1.5.1 checkpoint, zero-ckpt verify: %.200s...\n", o);
        free(o);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    host_run_cfg r = cfg();
    r.ckpt_dir = root_;
    r.resume_from = SAVE_AT;
    r.steps = SAVE_AT + 1;
    host_run_out o;
    host_run(&r, &o);
    CHECK(o.status == ZERO_OK, "a 1.5.1 checkpoint: rank %d: %s", rank_, o.error);
    if (rank_ == 0) {
        CHECK(o.warnings > 0 && strstr(o.first_warning, "1.5.1"), "a 1.5.1 checkpoint loaded without a warning: '%s'",
              o.first_warning);
        printf("1.5.1 checkpoint, zero_load warns: %.200s...\n", o.first_warning);
    }
    host_run_free(&o);
    MPI_Barrier(MPI_COMM_WORLD);
    int nmsg = 0;
    if (rank_ == 0) { /* the lr changed: no checksum, but the core blobs disagree */
        for (int k = 0; k < 2; k++) {
            char cmd[8000];
            snprintf(cmd, sizeof cmd, "cp '%s.v2' '%s'", path[k], path[k]);
            CHECK(system(cmd) == 0, "%s", cmd);
        }
        downgrade(0.1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    both_refuse("1.5.1 checkpoint, state.lr + 0.1", 1, &nmsg);
    if (rank_ == 0) { /* back to the checkpoint as saved */
        for (int k = 0; k < 2; k++) {
            char cmd[8000];
            snprintf(cmd, sizeof cmd, "mv '%s.v2' '%s'", path[k], path[k]);
            CHECK(system(cmd) == 0, "%s", cmd);
        }
        put(man_, orig_);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- the two readers ---- */
static int verify_refuses(const char *what) {
    char cmd[4000];
    snprintf(cmd, sizeof cmd, "'%s' verify '%s' > '%s' 2>&1", tool_, ck_, out_);
    int st = system(cmd);
    char *o = th_slurp(out_);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 1 && o && (strstr(o, "BAD") || strstr(o, "manifest"));
    CHECK(ok, "%s: zero-ckpt verify exit %d, said: %.600s", what, WIFEXITED(st) ? WEXITSTATUS(st) : -1, o ? o : "");
    free(o);
    return ok;
}

static void verify_accepts(const char *what) {
    char cmd[4000];
    snprintf(cmd, sizeof cmd, "'%s' verify '%s' > '%s' 2>&1", tool_, ck_, out_);
    int st = system(cmd);
    char *o = th_slurp(out_);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && o && strstr(o, "OK") && !strstr(o, "WARNING"),
          "%s: zero-ckpt verify exit %d: %.600s", what, WIFEXITED(st) ? WEXITSTATUS(st) : -1, o ? o : "");
    free(o);
}

/* Collective: zero_load of the working copy; 1 when it failed, on this rank. */
static int load_fails(const char *what, char *msg, size_t n) {
    host_run_cfg r = cfg();
    r.ckpt_dir = root_;
    r.resume_from = SAVE_AT;
    r.steps = SAVE_AT; /* nothing after the load */
    host_run_out o;
    host_run(&r, &o);
    int failed = o.status != ZERO_OK;
    int named = failed && (strstr(o.error, "checkpoint") || strstr(o.error, "manifest") || strstr(o.error, ".bin"));
    CHECK(named, "%s: rank %d: zero_load gave %s (%s)", what, rank_, zero_status_string(o.status), o.error);
    if (msg) snprintf(msg, n, "%s", o.error);
    host_run_free(&o);
    return named;
}

static void load_works(const char *what) {
    host_run_cfg r = cfg();
    r.ckpt_dir = root_;
    r.resume_from = SAVE_AT;
    r.steps = SAVE_AT + 1;
    host_run_out o;
    host_run(&r, &o);
    CHECK(o.status == ZERO_OK, "%s: rank %d: %s", what, rank_, o.error);
    host_run_free(&o);
}

/* Collective: rank 0 has changed the copy; both must refuse; rank 0 undoes. */
static int both_refuse(const char *what, int want_verify, int *nmsg) {
    char msg[1024] = "";
    int ok = load_fails(what, msg, sizeof msg);
    if (rank_ == 0) {
        if (want_verify) ok &= verify_refuses(what);
        if (*nmsg < 6) printf("  %-44.44s %.150s\n", what, msg), (*nmsg)++;
    }
    return ok;
}

static void reseal(void) {
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "'%s' '%s'", reseal_, man_);
    CHECK(system(cmd) == 0, "%s", cmd);
}

/* Passes 1 and 2.  Collective: rank 0 decides, every rank loads. */
static void manifest_pass(int resealed) {
    long refused = 0, unused = 0, loadonly = 0;
    int nmsg = 0;
    for (long i = 0;; i++) {
        char path[256] = "", *text = NULL;
        int kind = 0; /* 0: past the end, 1: run it, 2: skip */
        if (rank_ == 0) {
            text = mutated(i, path, sizeof path);
            kind = !text ? 0 : (resealed && role(path) == UNUSED) ? 2 : 1;
            if (kind == 2) unused++;
            if (kind == 1) {
                put(man_, text);
                if (resealed) reseal();
            }
            free(text);
        }
        MPI_Bcast(&kind, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!kind) break;
        if (kind == 2) continue;
        MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
        char what[320];
        snprintf(what, sizeof what, "%s %s", resealed ? "resealed" : "raw", path);
        const int r = rank_ == 0 && resealed ? role(path) : BOTH;
        int want_verify = r == BOTH;
        MPI_Bcast(&want_verify, 1, MPI_INT, 0, MPI_COMM_WORLD);
        refused += both_refuse(what, want_verify, &nmsg);
        if (!want_verify) loadonly++;
        if (rank_ == 0) put(man_, orig_);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank_ == 0)
        printf("manifest, %s: %ld changes refused (%ld of them by the load alone: the run's model), %ld fields no "
               "load uses left out\n",
               resealed ? "checksum recomputed" : "checksum as written", refused, loadonly, unused);
}

/* Pass 3: the issue's cases, resealed.  edit() changes doc (rank 0). */
static void issue_case(const char *what, void (*edit)(json_t *), int layout) {
    int nmsg = 0;
    if (rank_ == 0) {
        json_t *d = json_deep_copy(doc_);
        edit(d);
        char *t = json_dumps(d, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        put(man_, t);
        free(t);
        json_decref(d);
        reseal();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    both_refuse(what, 1, &nmsg);
    if (rank_ == 0 && layout) { /* consolidate reads parameters at the manifest's offsets: refused too */
        char cmd[8000], st[1400];
        snprintf(st, sizeof st, "%s.safetensors", out_);
        remove(st);
        snprintf(cmd, sizeof cmd, "'%s' consolidate '%s' '%s' > '%s' 2>&1", tool_, ck_, st, out_);
        int rc = system(cmd);
        char *o = th_slurp(out_);
        CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 1 && access(st, F_OK) != 0 && o && strstr(o, "manifest"),
              "%s: zero-ckpt consolidate exit %d: %.300s", what, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, o ? o : "");
        free(o);
    }
    if (rank_ == 0) put(man_, orig_);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void offset_plus_one(json_t *d) {
    json_t *p = json_array_get(json_object_get(d, "params"), 2);
    json_object_set_new(p, "flat_offset", json_integer(json_integer_value(json_object_get(p, "flat_offset")) + 1));
}
/* Two same-size parameters if there are, else the first two. */
static void swap_offsets(json_t *d) {
    json_t *ps = json_object_get(d, "params");
    size_t a = 0, b = 1;
    for (size_t i = 0; i < json_array_size(ps); i++)
        for (size_t j = i + 1; j < json_array_size(ps); j++)
            if (json_integer_value(json_object_get(json_array_get(ps, i), "numel")) ==
                json_integer_value(json_object_get(json_array_get(ps, j), "numel")))
                a = i, b = j;
    json_t *pa = json_array_get(ps, a), *pb = json_array_get(ps, b);
    json_t *oa = json_incref(json_object_get(pa, "flat_offset")), *ob = json_incref(json_object_get(pb, "flat_offset"));
    json_object_set_new(pa, "flat_offset", ob);
    json_object_set_new(pb, "flat_offset", oa);
}
static void lr_plus(json_t *d) {
    json_t *st = json_object_get(d, "state");
    json_object_set_new(st, "lr", json_real(json_real_value(json_object_get(st, "lr")) + 0.1));
}
static void hparams_lr_plus(json_t *d) {
    json_t *h = json_array_get(json_object_get(json_object_get(d, "state"), "hparams"), 0);
    json_object_set_new(h, "lr", json_real(json_number_value(json_object_get(h, "lr")) + 0.1));
}
static void drop_file_entry(json_t *d) { /* rank 1's last shard record */
    json_t *fs = json_object_get(d, "files");
    for (size_t i = json_array_size(fs); i-- > 0;)
        if (json_integer_value(json_object_get(json_array_get(fs, i), "rank")) == 1) {
            json_array_remove(fs, i);
            return;
        }
}

/* Pass 4: one bit in the header and at the start, middle and end of every
 * blob's payload. */
static void blob_pass(void) {
    /* the shards, then (1.7) the client state's file */
    int nfiles = rank_ == 0 ? (int)json_array_size(json_object_get(doc_, "files")) : 0, nmsg = 0;
    long refused = 0;
    MPI_Bcast(&nfiles, 1, MPI_INT, 0, MPI_COMM_WORLD);
    for (int i = 0; i <= nfiles; i++)
        for (int where = 0; where < 4; where++) {
            char path[1600] = "", what[1800] = "";
            long off = 0;
            if (rank_ == 0) {
                json_t *f = i < nfiles ? json_array_get(json_object_get(doc_, "files"), (size_t)i)
                                       : json_object_get(doc_, "client_state");
                const long bytes = (long)json_integer_value(json_object_get(f, "bytes"));
                snprintf(path, sizeof path, "%s/%s", ck_, json_string_value(json_object_get(f, "file")));
                off = where == 0 ? 3 : where == 1 ? 16 : where == 2 ? 16 + bytes / 2 : 16 + bytes - 1;
                snprintf(what, sizeof what, "bit flipped in %s at byte %ld (%s)", json_string_value(json_object_get(f, "file")),
                         off, where == 0 ? "header" : where == 1 ? "payload start" : where == 2 ? "middle" : "end");
                FILE *fp = fopen(path, "r+b");
                CHECK(fp != NULL, "open %s", path);
                int c = fp && fseek(fp, off, SEEK_SET) == 0 ? fgetc(fp) : EOF;
                CHECK(c != EOF, "%s byte %ld", path, off);
                if (fp && c != EOF) fseek(fp, off, SEEK_SET), fputc(c ^ 0x10, fp);
                if (fp) fclose(fp);
            }
            MPI_Bcast(what, sizeof what, MPI_CHAR, 0, MPI_COMM_WORLD);
            refused += both_refuse(what, 1, &nmsg);
            if (rank_ == 0) { /* flip it back */
                FILE *fp = fopen(path, "r+b");
                int c = fp && fseek(fp, off, SEEK_SET) == 0 ? fgetc(fp) : EOF;
                if (fp && c != EOF) fseek(fp, off, SEEK_SET), fputc(c ^ 0x10, fp);
                if (fp) fclose(fp);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
    if (rank_ == 0) printf("blobs: %ld of %d bit flips refused\n", refused, 4 * (nfiles + 1));
}

int main(int argc, char **argv) {
    check_mpi_init(&argc, &argv, &rank_, &world_);
    if (argc != 4 || world_ != 2) {
        if (rank_ == 0) fprintf(stderr, "usage: mpirun -np 2 test_ckpt_mutate DIR ZERO_CKPT CKPT_RESEAL\n");
        return check_mpi_finish() + 1;
    }
    tool_ = argv[2];
    reseal_ = argv[3];
    snprintf(root_, sizeof root_, "%s/root", argv[1]);
    snprintf(out_, sizeof out_, "%s/verify.out", argv[1]);
    if (rank_ == 0) th_remove_dir(root_);
    MPI_Barrier(MPI_COMM_WORLD);
    host_run_cfg s = cfg();
    s.ckpt_dir = root_;
    s.save_after = SAVE_AT;
    host_run_out o;
    host_run(&s, &o);
    CHECK(o.status == ZERO_OK, "save: %s", o.error);
    host_run_free(&o);
    th_ckpt_latest(root_, ck_, sizeof ck_);
    snprintf(man_, sizeof man_, "%s/manifest.json", ck_);
    if (rank_ == 0) {
        orig_ = th_slurp(man_);
        json_error_t je;
        doc_ = orig_ ? json_loads(orig_, 0, &je) : NULL;
        CHECK(doc_ != NULL, "%s does not parse", man_);
        CHECK(json_array_size(json_object_get(json_object_get(doc_, "state"), "hparams")) == 1,
              "the fixture has no zero_set_hparams entry");
        CHECK(json_is_object(json_object_get(doc_, "client_state")), "the fixture has no client state");
        verify_accepts("the saved checkpoint");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    load_works("the saved checkpoint");
    double t0 = MPI_Wtime();
    if (rank_ == 0) printf("pass 1: every manifest field changed, checksum as written\n");
    manifest_pass(0);
    if (rank_ == 0) printf("pass 2: every field a load uses changed, checksum recomputed\n");
    manifest_pass(1);
    if (rank_ == 0) printf("pass 3: the issue's cases, checksum recomputed\n");
    issue_case("params[2].flat_offset + 1", offset_plus_one, 1);
    issue_case("two parameters' flat_offsets swapped", swap_offsets, 1);
    issue_case("state.lr + 0.1", lr_plus, 0);
    issue_case("state.hparams[0].lr + 0.1", hparams_lr_plus, 0);
    issue_case("a file record of rank 1 deleted", drop_file_entry, 1);
    if (rank_ == 0) printf("pass 4: bits flipped in every blob\n");
    blob_pass();
    if (rank_ == 0) printf("a checkpoint as libzero 1.5.1 wrote it\n");
    legacy_checkpoint();
    /* everything undone: the checkpoint is whole again */
    if (rank_ == 0) verify_accepts("the restored checkpoint");
    MPI_Barrier(MPI_COMM_WORLD);
    load_works("the restored checkpoint");
    if (rank_ == 0) printf("mutations took %.1f s\n", MPI_Wtime() - t0);
    if (rank_ == 0) {
        json_decref(doc_);
        free(orig_);
        th_remove_dir(argv[1]);
    }
    return check_mpi_finish();
}
