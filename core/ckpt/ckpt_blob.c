/* Checkpoint blobs (core/ckpt/ckpt_blob.h). */
#include "ckpt_blob.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_engine.h"
#include "device.h"
#include "engine.h"
#include "engine_mem.h"
#include "log.h"

#define E(c) zero__engine_of(c)

/* <dir>/<name>.rank<R>.bin (with a pipeline
 * <name>.pp<S>.rank<R>.bin: R is the data-parallel rank, shared by every
 * stage), written to a temp file, fsync'ed and renamed (core/ckpt/ckpt_io.c).
 * Inside zero_save each blob's size, chunk checksums and (from ckpt_shard)
 * contents are recorded for the manifest; inside zero_load each read is
 * checked against the manifest and verified. */
static zero_status ckpt_write_host(zero_core *c, const char *dir, const char *name, const void *buf,
                                   size_t bytes) {
    struct zero_engine *e = E(c);
    char file[512], err[1200];
    if (!strcmp(name, ZERO__CK_CLIENT_BLOB)) /* (1.7) its file is the host's client state */
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                           "checkpoint blob name '%s' is reserved (libzero keeps the host's client state under it); "
                           "give the blob another name", name);
    if (zero__ck_file_name(e, name, file, sizeof file))
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "checkpoint blob name too long: %s", name);
    zero__ck_save *ss = e->ck_save;
    if (!ss && zero__ck_mkdirs(dir) != 0)
        return zero__error(e, ZERO_ERR_IO, "checkpoint: cannot create %s: %s", dir, strerror(errno));
    uint32_t *crc = NULL, nc = 0;
    if (zero__ck_write_blob(dir, file, buf, bytes, ZERO__CK_CHUNK, e->global ? zero__comm_rank(e->global) : e->rank,
                            &crc, &nc, err, sizeof err))
        return zero__error(e, ZERO_ERR_IO, "%s", err);
    if (ss) {
        zero__ck_file f = {0};
        f.file = file;
        f.blob = (char *)name;
        f.rank = e->rank;
        f.pp_stage = e->pp_stage;
        f.bytes = bytes;
        f.nchunks = nc;
        f.crc = crc;
        f.kind = ss->kind;
        f.dtype = ss->dtype;
        zero__ck_range *r = NULL;
        if (ss->kind != ZERO__CK_OPAQUE) {
            r = calloc(ss->nranges ? ss->nranges : 1, sizeof *r);
            if (!r) {
                free(crc);
                return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
            }
            for (uint32_t k = 0; k < ss->nranges; k++) r[k] = (zero__ck_range){ss->ranges[k].flat_lo, ss->ranges[k].flat_hi};
            f.nranges = ss->nranges;
            f.ranges = r;
        }
        json_array_append_new(ss->files, zero__ck_file_json(&f));
        free(r);
        ss->kind = ZERO__CK_OPAQUE;
        if (++ss->nblobs == 2) zero__ck_fault_point("between_shards", zero__comm_rank(e->global));
    }
    free(crc);
    return ZERO_OK;
}

static zero_status ckpt_read_host(zero_core *c, const char *dir, const char *name, void *buf, size_t bytes) {
    struct zero_engine *e = E(c);
    (void)dir; /* the load session knows the directory (the plugin passes it back) */
    zero__ck_load *ld = e->ck_load;
    if (!ld)
        return zero__error(e, ZERO_ERR_STATE, "checkpoint: blob '%s' read outside zero_load (no manifest to check it)",
                           name);
    if (ld->reshard)
        return zero__error(e, ZERO_ERR_UNSUPPORTED,
                           "checkpoint %s: blob '%s' can only be read by plugin '%s' at %d ranks (this load reshards; "
                           "read shards through ckpt_shard)",
                           ld->dir, name, ld->m->plugin, ld->m->world);
    const zero__ck_file *f = zero__ck_find(ld->m, name, e->rank, e->pp_stage);
    if (!f)
        return zero__error(e, ZERO_ERR_IO,
                           "checkpoint %s has no blob '%s' for rank %d: it was written by plugin '%s' (this run: '%s')",
                           ld->dir, name, e->rank, ld->m->plugin, e->plugin.table->name);
    if (f->bytes != bytes)
        return zero__error(e, ZERO_ERR_MISMATCH,
                           "checkpoint %s: blob '%s' holds %llu bytes, this run expects %zu (different model or "
                           "configuration?)",
                           ld->dir, f->file, (unsigned long long)f->bytes, bytes);
    char err[1200];
    if (zero__ck_read(ld->r, f, 0, buf, bytes, err, sizeof err)) return zero__error(e, ZERO_ERR_IO, "%s", err);
    return ZERO_OK;
}

int zero__ckpt_blob_reshard(zero_core *c) { return E(c)->ck_load && E(c)->ck_load->reshard; }

/* A device buffer is written / read through one host bounce buffer: the
 * file format is the same, so a checkpoint moves between CPU and GPU runs. */
zero_status zero__ckpt_blob_write(zero_core *c, const char *dir, const char *name, const void *buf, size_t bytes) {
    struct zero_engine *e = E(c);
    if (!zero__dev_is_device(e->dev, buf)) return ckpt_write_host(c, dir, name, buf, bytes);
    void *h = malloc(bytes ? bytes : 1);
    if (!h) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "checkpoint %s: out of host memory", name);
    zero_status st = zero__dev_copy(e->dev, h, buf, bytes);
    if (st != ZERO_OK) zero__engine_dev_failed(e, st, "checkpoint download");
    else st = ckpt_write_host(c, dir, name, h, bytes);
    free(h);
    return st;
}

zero_status zero__ckpt_blob_read(zero_core *c, const char *dir, const char *name, void *buf, size_t bytes) {
    struct zero_engine *e = E(c);
    if (!zero__dev_is_device(e->dev, buf)) return ckpt_read_host(c, dir, name, buf, bytes);
    void *h = malloc(bytes ? bytes : 1);
    if (!h) return zero__error(e, ZERO_ERR_OUT_OF_MEMORY, "checkpoint %s: out of host memory", name);
    zero_status st = ckpt_read_host(c, dir, name, h, bytes);
    if (st == ZERO_OK && (st = zero__dev_copy(e->dev, buf, h, bytes)) != ZERO_OK) zero__engine_dev_failed(e, st, "checkpoint upload");
    free(h);
    return st;
}

