/* libFuzzer target: the checkpoint reader (core/ckpt/: the manifest parser,
 * the verified blob reader, the element source behind zero_load's
 * resharding and tools/zero-ckpt's verify / consolidate / convert).
 *
 * Input: manifest text up to the first NUL byte, then a byte pool.  The
 * manifest is parsed (zero__ck_manifest_parse, as zero_load and zero-ckpt
 * do); if it parses, the harness checks what the parser promises (every
 * range inside its layout's flat space, range lengths times the element
 * size equal to the payload bytes, one checksum per chunk, plain file
 * names, ranks and stages inside the world) and then writes the blob files
 * the manifest lists (up to 16 files of up to 64 KiB) into a private temp
 * directory from the pool: the first pool byte picks whether headers are
 * right or taken from the pool (foreign / truncated files), and whether
 * the manifest's checksums are replaced by the real ones (so that the
 * resharding reader runs past the checksum check on most inputs instead of
 * stopping there).  Then it reads every file whole and at an offset, and
 * reads every kind of every small layout through zero__ck_read_elems (in
 * fp32 and bf16) and zero__ck_read_mapped, as consolidate and a resharding
 * load do.  A failed read must leave an error message; a broken contract
 * aborts (libFuzzer keeps the input).
 *
 * (1.7) A manifest's "client_state" record is parsed, written and read
 * like the files.
 *
 * (issue 31) The whole-checkpoint validator too (zero__ck_manifest_validate,
 * what zero_load and zero-ckpt verify both run before restoring anything):
 * with pool bit 2 the harness recomputes the manifest's own checksum
 * before parsing (zero__ck_manifest_seal), so that mutated format-2
 * manifests reach the validator instead of stopping at the checksum.  A
 * validated manifest must keep the validator's promises (checked here
 * independently: parameters aligned, in order, disjoint and inside their
 * layout; every rank x stage with one core blob of the version's size; no
 * file name twice), and every core blob is read and compared
 * (zero__ck_core_verify): a refusal must leave a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_io.h"
#include "ckpt_source.h"
#include "ckpt_validate.h"
#include "crc32c.h"

#define REQUIRE(c, ...)                                                                  \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            fprintf(stderr, "fuzz_ckpt: contract broken: %s: ", #c);                     \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            abort();                                                                     \
        }                                                                                \
    } while (0)

enum { MAX_FILES = 16, MAX_FILE_BYTES = 1 << 16, MAX_ELEMS = 1 << 14 };

static char dir[256];

static void remove_dir(void) {
    if (dir[0]) zero__ck_remove_dir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(dir, sizeof dir, "%s/zero-fuzz-ckpt-XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("fuzz_ckpt: mkdtemp");
        exit(1);
    }
    atexit(remove_dir);
    return 0;
}

/* Parsed-manifest promises (ckpt_manifest.h: "a damaged or foreign
 * manifest is a named error, never an over-read"). */
static void check_manifest(const zero__ck_manifest *m) {
    REQUIRE(m->chunk_bytes >= 4096, "chunk_bytes %llu", (unsigned long long)m->chunk_bytes);
    REQUIRE(m->world >= 1 && m->pp_stages >= 1, "world %d, pp_stages %d", m->world, m->pp_stages);
    for (int p = 0; p < m->pp_stages; p++) REQUIRE(zero__ck_layout_of(m, p), "no layout for stage %d", p);
    for (uint32_t i = 0; i < m->nparams; i++) {
        const zero__ck_param *p = &m->params[i];
        const zero__ck_layout *L = zero__ck_layout_of(m, p->pp_stage);
        REQUIRE(L && p->flat_offset <= L->flat_numel && p->numel <= L->flat_numel - p->flat_offset,
                "param %u outside its flat space", i);
    }
    if (m->client) {
        const zero__ck_file *c = m->client;
        REQUIRE(c == &m->files[m->nfiles] && c->kind == ZERO__CK_OPAQUE && c->rank == 0 && c->pp_stage == 0 &&
                    !strcmp(c->file, ZERO__CK_CLIENT_FILE) && !strcmp(c->blob, ZERO__CK_CLIENT_BLOB) &&
                    c->nchunks == (c->bytes + m->chunk_bytes - 1) / m->chunk_bytes,
                "client_state record '%s' rank %d stage %d kind %d", c->file, c->rank, c->pp_stage, c->kind);
        for (uint32_t i = 0; i < m->nfiles; i++) REQUIRE(strcmp(m->files[i].file, c->file), "client file twice");
    }
    for (uint32_t i = 0; i < m->nfiles; i++) {
        const zero__ck_file *f = &m->files[i];
        REQUIRE(f->file[0] && !strchr(f->file, '/') && strcmp(f->file, "..") && strcmp(f->file, "."),
                "file name '%s'", f->file);
        REQUIRE(f->rank >= 0 && f->rank < m->world && f->pp_stage >= 0 && f->pp_stage < m->pp_stages,
                "file %u: rank %d stage %d", i, f->rank, f->pp_stage);
        REQUIRE(f->nchunks == (f->bytes + m->chunk_bytes - 1) / m->chunk_bytes, "file %u: %u checksums", i,
                f->nchunks);
        if (f->kind == ZERO__CK_OPAQUE) continue;
        const zero__ck_layout *L = zero__ck_layout_of(m, f->pp_stage);
        unsigned __int128 total = 0;
        for (uint32_t k = 0; k < f->nranges; k++) {
            REQUIRE(f->ranges[k].flat_lo <= f->ranges[k].flat_hi && f->ranges[k].flat_hi <= L->flat_numel,
                    "file %u range %u", i, k);
            total += f->ranges[k].flat_hi - f->ranges[k].flat_lo;
        }
        REQUIRE(total * zero__ck_dtype_size(f->dtype) == f->bytes,
                "file %u: ranges hold %llu elements (mod 2^64) of %zu bytes, the file %llu bytes", i,
                (unsigned long long)total, zero__ck_dtype_size(f->dtype), (unsigned long long)f->bytes);
    }
}

/* The validator's promises, checked the slow, obvious way. */
static void check_validated(const zero__ck_manifest *m) {
    for (uint32_t i = 0; i < m->nparams; i++) {
        const zero__ck_param *p = &m->params[i];
        const zero__ck_layout *L = zero__ck_layout_of(m, p->pp_stage);
        REQUIRE(L && L->align && p->flat_offset % L->align == 0, "param %u unaligned", i);
        for (uint32_t j = 0; j < m->nparams; j++) {
            const zero__ck_param *q = &m->params[j];
            if (j == i || q->pp_stage != p->pp_stage || !p->numel || !q->numel) continue;
            REQUIRE(p->flat_offset + p->numel <= q->flat_offset || q->flat_offset + q->numel <= p->flat_offset,
                    "params %u and %u overlap", i, j);
            if (j > i && q->group == p->group) REQUIRE(q->flat_offset > p->flat_offset, "params %u, %u out of order", i, j);
        }
    }
    const uint64_t core = m->version == ZERO__CK_VERSION ? sizeof(zero__core_blob) : ZERO__CORE_BLOB_V1_BYTES;
    for (int pp = 0; pp < m->pp_stages && pp < 64; pp++)
        for (int r = 0; r < m->world && r < 64; r++) {
            const zero__ck_file *f = zero__ck_find(m, "core", r, pp);
            REQUIRE(f && f->bytes == core, "rank %d stage %d: core blob", r, pp);
        }
    for (uint32_t i = 0; i < m->nfiles && i < 256; i++)
        for (uint32_t j = i + 1; j < m->nfiles && j < 256; j++)
            REQUIRE(strcmp(m->files[i].file, m->files[j].file), "file %s twice", m->files[i].file);
}

/* Bit 2 of the pool's first byte: the manifest's checksum recomputed. */
static char *resealed(const uint8_t *data, size_t tlen) {
    json_t *root = json_loadb((const char *)data, tlen, JSON_REJECT_DUPLICATES, NULL);
    char *text = NULL;
    if (json_is_object(root) && zero__ck_manifest_seal(root) == 0) text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

typedef struct pool {
    const uint8_t *p;
    size_t n, at;
} pool;
static uint8_t take(pool *q) { return q->n ? q->p[q->at++ % q->n] : 0; }

/* Write the files the manifest lists; returns how many were written. */
static void write_files(zero__ck_manifest *m, pool *q, int raw_headers, int fix_crc) {
    for (uint32_t i = 0; i < zero__ck_nrecords(m) && i < MAX_FILES; i++) {
        zero__ck_file *f = &m->files[i];
        if (f->bytes > MAX_FILE_BYTES || strlen(dir) + strlen(f->file) + 2 > 4000) continue;
        const size_t n = ZERO__CK_HEADER + (size_t)f->bytes;
        uint8_t *b = malloc(n);
        REQUIRE(b, "malloc");
        for (size_t k = 0; k < n; k++) b[k] = take(q);
        if (!raw_headers) {
            memcpy(b, ZERO__CK_MAGIC, 8);
            for (int k = 0; k < 8; k++) b[8 + k] = (uint8_t)(f->bytes >> (8 * k));
        }
        if (fix_crc)
            for (uint32_t k = 0; k < f->nchunks; k++) {
                const uint64_t lo = k * m->chunk_bytes;
                const uint64_t len = f->bytes - lo < m->chunk_bytes ? f->bytes - lo : m->chunk_bytes;
                f->crc[k] = zero__crc32c(0, b + ZERO__CK_HEADER + lo, (size_t)len);
            }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, f->file);
        FILE *fp = fopen(path, "wb");
        if (fp) {
            /* a truncated file now and then: the reader must name it */
            const size_t keep = (raw_headers && (b[0] & 1)) ? n / 2 : n;
            fwrite(b, 1, keep, fp);
            fclose(fp);
        }
        free(b);
    }
}

static void read_files(zero__ck_reader *r, const zero__ck_manifest *m, pool *q) {
    char err[1024];
    for (uint32_t i = 0; i < zero__ck_nrecords(m) && i < MAX_FILES; i++) {
        const zero__ck_file *f = &m->files[i];
        if (f->bytes > MAX_FILE_BYTES) continue;
        uint8_t *buf = malloc((size_t)f->bytes + 1);
        REQUIRE(buf, "malloc");
        err[0] = 0;
        if (zero__ck_read(r, f, 0, buf, f->bytes, err, sizeof err) != 0) REQUIRE(err[0], "read failed silently");
        const uint64_t off = f->bytes ? take(q) % (f->bytes + 1) : 0, n = f->bytes - off ? take(q) % (f->bytes - off + 1) : 0;
        err[0] = 0;
        if (zero__ck_read(r, f, off, buf, n, err, sizeof err) != 0) REQUIRE(err[0], "read failed silently");
        /* out of bounds must be refused, not read */
        err[0] = 0;
        REQUIRE(zero__ck_read(r, f, f->bytes, buf, 1, err, sizeof err) != 0 && err[0], "read past the end accepted");
        free(buf);
    }
}

static void read_elements(zero__ck_reader *r, const zero__ck_manifest *m) {
    char err[1024];
    uint64_t *new_off = calloc(m->nparams ? m->nparams : 1, sizeof *new_off);
    REQUIRE(new_off, "calloc");
    for (uint32_t li = 0; li < m->nlayouts; li++) {
        const zero__ck_layout *L = &m->layouts[li];
        if (L->flat_numel > MAX_ELEMS || zero__ck_layout_of(m, L->pp_stage) != L) continue;
        const int pp = L->pp_stage;
        uint32_t np = 0;
        for (uint32_t i = 0; i < m->nparams; i++)
            if (m->params[i].pp_stage == pp) new_off[np++] = m->params[i].flat_offset;
        float *dst = malloc((size_t)(L->flat_numel ? L->flat_numel : 1) * 4);
        REQUIRE(dst, "malloc");
        for (int kind = ZERO__CK_PARAMS; kind < ZERO__CK_STATE0 + (int)m->nstate; kind++) {
            if (!zero__ck_has(m, pp, kind)) continue;
            err[0] = 0;
            if (zero__ck_read_elems(r, pp, kind, 0, L->flat_numel, dst, ZERO_DTYPE_F32, err, sizeof err) != 0)
                REQUIRE(err[0], "read_elems failed silently");
            err[0] = 0;
            if (zero__ck_read_elems(r, pp, kind, L->flat_numel / 3, L->flat_numel, dst, ZERO_DTYPE_BF16, err,
                                    sizeof err) != 0)
                REQUIRE(err[0], "read_elems failed silently");
            err[0] = 0;
            if (zero__ck_read_mapped(r, pp, kind, new_off, 0, L->flat_numel, dst, ZERO_DTYPE_F32, err, sizeof err) != 0)
                REQUIRE(err[0], "read_mapped failed silently");
        }
        free(dst);
    }
    free(new_off);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t tlen = nul ? (size_t)(nul - data) : size;
    char err[1024];
    memset(err, 'x', sizeof err);
    pool q = {nul ? nul + 1 : NULL, nul ? size - tlen - 1 : 0, 0};
    const uint8_t mode = take(&q);
    char *sealed = (mode & 4) ? resealed(data, tlen) : NULL;
    zero__ck_manifest *m = sealed ? zero__ck_manifest_parse(sealed, strlen(sealed), err, sizeof err)
                                  : zero__ck_manifest_parse((const char *)data, tlen, err, sizeof err);
    free(sealed);
    if (!m) {
        REQUIRE(memchr(err, 0, sizeof err) && err[0], "refused without a message");
        return 0;
    }
    check_manifest(m);
    memset(err, 'x', sizeof err);
    const int valid = zero__ck_manifest_validate(m, err, sizeof err) == 0;
    if (valid) check_validated(m);
    else REQUIRE(memchr(err, 0, sizeof err) && err[0], "validate refused without a message");
    write_files(m, &q, mode & 1, !(mode & 2));
    zero__ck_reader *r = zero__ck_reader_open(dir, m);
    if (r) {
        for (uint32_t i = 0; valid && i < m->nfiles && i < MAX_FILES; i++)
            if (!strcmp(m->files[i].blob, "core")) {
                err[0] = 0;
                if (zero__ck_core_verify(r, m, m->files[i].rank, m->files[i].pp_stage, err, sizeof err) != 0)
                    REQUIRE(err[0], "core_verify refused without a message");
            }
        read_files(r, m, &q);
        read_elements(r, m);
        zero__ck_reader_close(r);
    }
    for (uint32_t i = 0; i < m->nfiles && i < MAX_FILES; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, m->files[i].file);
        unlink(path);
    }
    zero__ck_manifest_free(m);
    return 0;
}
