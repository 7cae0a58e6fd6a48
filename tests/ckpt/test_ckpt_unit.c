/* White-box checks of the checkpoint primitives (core/ckpt):
 *  - CRC-32C: the standard check value ("123456789" -> 0xe3069283) from the
 *    dispatched (SSE4.2) and the table implementation, which also agree on
 *    every length 0..300 at every alignment, and chaining;
 *  - the manifest parser refuses, by name, what would make a reader
 *    over-read or misplace data: ranges outside the flat space, range
 *    lengths that disagree with the byte count, a wrong number of chunk
 *    checksums, a file name with a '/', another format version;
 *  - the streamed blob writer (zero-ckpt convert) writes the same file and
 *    chunk checksums as the one-buffer writer when its pieces straddle
 *    chunk boundaries at odd offsets, and refuses a short or long payload. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ckpt_io.h"
#include "ckpt_manifest.h"
#include "ckpt_validate.h"
#include "crc32c.h"

static const char *GOOD =
    "{\"format\": \"libzero-checkpoint\", \"version\": 1, \"tag\": \"t\", \"plugin\": \"stage1\","
    " \"library_version\": \"x\", \"abi_version\": 10002, \"stage\": 1, \"world_size\": 2, \"pp_stages\": 1,"
    " \"reshardable\": 1, \"model_dtype\": \"fp32\", \"optimizer\": 0, \"optimizer_states\": 2,"
    " \"chunk_bytes\": 1048576,"
    " \"state\": {\"global_step\": 3, \"skipped_steps\": 0, \"micro_step\": 0, \"lr\": 0.1,"
    "   \"loss_scaler\": {\"dynamic\": 0, \"scale\": 1.0, \"min_scale\": 1.0, \"window\": 1000, \"hysteresis\": 2,"
    "   \"cur_hysteresis\": 2, \"consecutive_hysteresis\": 0, \"cur_iter\": 0, \"last_overflow_iter\": -1}},"
    " \"layouts\": [{\"pp_stage\": 0, \"align\": 16, \"flat_numel\": 64, \"part_numel\": 32}],"
    " \"params\": [{\"name\": \"w\", \"numel\": 40, \"dtype\": \"fp32\", \"group\": 0, \"pp_stage\": 0,"
    "   \"flat_offset\": 0}],"
    " \"files\": [{\"file\": \"FILE\", \"blob\": \"stage1.params\", \"rank\": 1, \"pp_stage\": 0,"
    "   \"bytes\": BYTES, \"crc32c\": \"CRC\", \"kind\": \"params\", \"dtype\": \"fp32\", \"ranges\": [[32, HI]]}]}";

/* GOOD with FILE, BYTES, CRC, HI replaced; parse; expect failure naming `want` (NULL: success). */
static void try_parse(const char *file, const char *bytes, const char *crc, const char *hi, const char *version,
                      const char *want) {
    char text[4096], *o = text;
    for (const char *p = GOOD; *p;) {
        const char *rep = NULL;
        size_t skip = 0;
        if (!strncmp(p, "FILE", 4)) rep = file, skip = 4;
        else if (!strncmp(p, "BYTES", 5)) rep = bytes, skip = 5;
        else if (!strncmp(p, "CRC", 3)) rep = crc, skip = 3;
        else if (!strncmp(p, "HI", 2)) rep = hi, skip = 2;
        else if (!strncmp(p, "\"version\": 1", 12)) rep = version, skip = 12;
        if (rep) {
            o += sprintf(o, "%s", rep);
            p += skip;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    char err[512] = "";
    zero__ck_manifest *m = zero__ck_manifest_parse(text, strlen(text), err, sizeof err);
    if (!want) {
        CHECK(m != NULL, "good manifest refused: %s", err);
        if (m) CHECK(m->nfiles == 1 && m->files[0].bytes == 128 && m->files[0].ranges[0].flat_hi == 64, "fields");
    } else {
        CHECK(m == NULL, "accepted a manifest with %s", want);
        CHECK(strstr(err, want) != NULL, "error '%s' does not say '%s'", err, want);
        printf("refused: %s\n", err);
    }
    zero__ck_manifest_free(m);
}

static long slurp_file(const char *path, unsigned char *out, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    long k = (long)fread(out, 1, n, f);
    fclose(f);
    return k;
}

/* 10000 bytes, chunk 1000: pieces of 1, 333, 999, 1000, 2667, rest. */
static void streamed_writer(void) {
    char dir[] = "/tmp/zero-ckpt-unit-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    enum { N = 10000, CH = 1000 };
    static unsigned char data[N], a[N + 64], b[N + 64];
    for (int i = 0; i < N; i++) data[i] = (unsigned char)(i * 131 + 7);
    char err[512] = "";
    uint32_t *c1 = NULL, *c2 = NULL, n1 = 0, n2 = 0;
    CHECK(zero__ck_write_blob(dir, "one.bin", data, N, CH, 0, &c1, &n1, err, sizeof err) == 0, "%s", err);
    zero__ck_blob_writer *w = zero__ck_blob_begin(dir, "streamed.bin", N, CH, err, sizeof err);
    CHECK(w != NULL, "%s", err);
    const size_t pieces[] = {1, 333, 999, 1000, 2667};
    size_t off = 0;
    for (size_t k = 0; w && k < 5; k++) {
        CHECK(zero__ck_blob_put(w, data + off, pieces[k], err, sizeof err) == 0, "%s", err);
        off += pieces[k];
    }
    if (w) CHECK(zero__ck_blob_put(w, data + off, N - off, err, sizeof err) == 0, "%s", err);
    if (w) CHECK(zero__ck_blob_end(w, &c2, &n2, err, sizeof err) == 0, "%s", err);
    CHECK(n1 == 10 && n2 == n1 && c1 && c2 && !memcmp(c1, c2, n1 * sizeof *c1),
          "streamed chunk checksums differ from the one-buffer writer's");
    char p1[128], p2[128];
    snprintf(p1, sizeof p1, "%s/one.bin", dir);
    snprintf(p2, sizeof p2, "%s/streamed.bin", dir);
    long l1 = slurp_file(p1, a, sizeof a), l2 = slurp_file(p2, b, sizeof b);
    CHECK(l1 == N + 16 && l2 == l1 && !memcmp(a, b, (size_t)l1), "streamed file differs (%ld / %ld bytes)", l1, l2);
    free(c1);
    free(c2);
    /* a payload shorter or longer than declared is refused, nothing left */
    w = zero__ck_blob_begin(dir, "short.bin", 100, CH, err, sizeof err);
    if (w) CHECK(zero__ck_blob_put(w, data, 60, err, sizeof err) == 0, "%s", err);
    if (w) CHECK(zero__ck_blob_end(w, &c1, &n1, err, sizeof err) != 0 && strstr(err, "60 of 100 bytes"),
                 "short payload: '%s'", err);
    w = zero__ck_blob_begin(dir, "long.bin", 100, CH, err, sizeof err);
    if (w) {
        int bad = zero__ck_blob_put(w, data, 101, err, sizeof err);
        CHECK(bad && strstr(err, "more than the 100 declared"), "long payload: '%s'", err);
        zero__ck_blob_abort(w);
    }
    int files = 0;
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) files += de->d_name[0] != '.';
    if (d) closedir(d);
    CHECK(files == 2, "%d files in %s, want one.bin and streamed.bin only (refused blobs left temp files?)", files,
          dir);
    zero__ck_remove_dir(dir);
}

/* (issue 31) A format-2 manifest with its checksum parses; one changed
 * number after sealing is refused naming the checksum; a format-1
 * manifest that carries a checksum (its version changed) is refused. */
static void sealed_manifest(void) {
    char text[4096], err[512] = "";
    snprintf(text, sizeof text, "%s", GOOD);
    static const char *const subst[][2] = {{"\"version\": 1", "\"version\": 2"}, {"FILE", "p.rank1.bin"},
                                           {"BYTES", "128"}, {"CRC", "00000000"}, {"HI", "64"}};
    for (size_t k = 0; k < sizeof subst / sizeof *subst; k++) {
        char *at = strstr(text, subst[k][0]);
        const size_t from = strlen(subst[k][0]), to = strlen(subst[k][1]);
        memmove(at + to, at + from, strlen(at + from) + 1);
        memcpy(at, subst[k][1], to);
    }
    json_t *root = json_loads(text, 0, NULL);
    CHECK(root && zero__ck_manifest_seal(root) == 0, "seal");
    char *sealed = json_dumps(root, JSON_INDENT(2)); /* another key order and layout: the same canonical form */
    zero__ck_manifest *m = zero__ck_manifest_parse(sealed, strlen(sealed), err, sizeof err);
    CHECK(m != NULL && m->version == 2, "a sealed manifest refused: %s", err);
    /* not a whole checkpoint: one shard holds [32, 64) of w's [0, 40), nobody has a core blob */
    CHECK(m && zero__ck_manifest_validate(m, err, sizeof err) != 0 && strstr(err, "manifest: files: no params shard"),
          "an incomplete manifest validated: '%s'", err);
    zero__ck_manifest_free(m);
    char *lr = strstr(sealed, "0.10000");
    CHECK(lr != NULL, "lr in %s", sealed);
    if (lr) lr[2] = '2'; /* 0.1 -> 0.2 */
    m = zero__ck_manifest_parse(sealed, strlen(sealed), err, sizeof err);
    CHECK(m == NULL && strstr(err, "manifest_crc32c: recorded"), "a changed lr accepted: '%s'", err);
    zero__ck_manifest_free(m);
    json_object_set_new(root, "version", json_integer(1));
    free(sealed);
    sealed = json_dumps(root, 0);
    m = zero__ck_manifest_parse(sealed, strlen(sealed), err, sizeof err);
    CHECK(m == NULL && strstr(err, "version-1 manifest"), "format 1 with a checksum accepted: '%s'", err);
    zero__ck_manifest_free(m);
    free(sealed);
    json_decref(root);
}

int main(void) {
    streamed_writer();
    const char *s = "123456789";
    CHECK(zero__crc32c(0, s, 9) == 0xe3069283u, "crc32c check value: %08x", zero__crc32c(0, s, 9));
    CHECK(zero__crc32c_portable(0, s, 9) == 0xe3069283u, "table crc32c check value");
    CHECK(zero__crc32c(zero__crc32c(0, s, 4), s + 4, 5) == 0xe3069283u, "chained crc32c");
    unsigned char buf[512];
    for (int i = 0; i < 512; i++) buf[i] = (unsigned char)(i * 37 + 11);
    for (int a = 0; a < 8; a++)
        for (int n = 0; n <= 300; n++)
            CHECK(zero__crc32c(0, buf + a, (size_t)n) == zero__crc32c_portable(0, buf + a, (size_t)n),
                  "hw and table differ at offset %d length %d", a, n);
    try_parse("p.rank1.bin", "128", "00000000", "64", "\"version\": 1", NULL);
    try_parse("p.rank1.bin", "128", "00000000", "65", "\"version\": 1", "outside the flat space");
    try_parse("p.rank1.bin", "132", "00000000", "64", "\"version\": 1", "are not 132 bytes");
    try_parse("p.rank1.bin", "128", "0000000000000000", "64", "\"version\": 1", "expected 1 checksums");
    try_parse("../p.rank1.bin", "128", "00000000", "64", "\"version\": 1", "not a plain file name");
    try_parse("p.rank1.bin", "128", "00000000", "64", "\"version\": 3", "format version 3");
    /* (issue 31) format 2 carries its own checksum: without it, refused */
    try_parse("p.rank1.bin", "128", "00000000", "64", "\"version\": 2", "manifest_crc32c: missing");
    sealed_manifest();
    try_parse("p.rank1.bin", "-5", "00000000", "64", "\"version\": 1", "bytes");
    /* chunk_bytes is the size of the reader's one-chunk buffer: bounded
     * (tests/fuzz found a manifest making the reader allocate 1 TiB) */
    {
        static const char *const subst[][2] = {{"1048576", "1099511627776"}, /* 2^40 */
                                               {"FILE", "p.rank1.bin"}, {"BYTES", "128"},
                                               {"CRC", "00000000"}, {"HI", "64"}};
        char text[4096], err[512] = "";
        snprintf(text, sizeof text, "%s", GOOD);
        for (size_t k = 0; k < sizeof subst / sizeof *subst; k++) {
            char *at = strstr(text, subst[k][0]);
            const size_t from = strlen(subst[k][0]), to = strlen(subst[k][1]);
            memmove(at + to, at + from, strlen(at + from) + 1);
            memcpy(at, subst[k][1], to);
        }
        zero__ck_manifest *m = zero__ck_manifest_parse(text, strlen(text), err, sizeof err);
        CHECK(m == NULL && strstr(err, "chunk_bytes") != NULL, "chunk_bytes 2^40 accepted or unnamed: '%s'", err);
        zero__ck_manifest_free(m);
    }
    return check_finish();
}
