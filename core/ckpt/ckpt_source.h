/* Reading a checkpoint's model state by element, whatever the world size
 * and plugin that wrote it: the core of resharding (zero_load into another
 * world size or plugin) and of tools/zero-ckpt consolidate / convert.
 *
 * A saver's shard blobs record which flat ranges of its layout they hold
 * (ckpt_manifest.h); these functions find, for any range of elements, the
 * files and byte ranges that hold it and read only those (verified chunk by
 * chunk).  Pure apart from the reader; not thread-safe per reader. */
#ifndef ZERO_CKPT_SOURCE_H
#define ZERO_CKPT_SOURCE_H
#include "ckpt_io.h"

/* Is `kind` (ZERO__CK_PARAMS / MASTER / STATE0+k) available for pipeline
 * stage pp, directly or through the fallbacks below? */
int zero__ck_has(const zero__ck_manifest *m, int pp, int kind);

/* Elements [lo, hi) of the saver's flat space of pipeline stage pp, of
 * `kind`, converted to dst_dt (RNE when narrowing) into dst.  MASTER falls
 * back to PARAMS for an fp32 model (the parameters are the master); PARAMS
 * falls back to MASTER rounded to the model dtype (what every plugin's
 * parameters are after params_done and after every step).  Where several
 * files hold an element (stage 0 replicates) the first in the manifest is
 * used. */
int zero__ck_read_elems(zero__ck_reader *r, int pp, int kind, uint64_t lo, uint64_t hi, void *dst,
                        zero_dtype dst_dt, char *err, size_t errn);
/* (libzero 1.10) The same for elements of an expert group (m->experts[xi]):
 * only the files of the ranks of color `color` hold that group's experts
 * (every expert-data-parallel group has the same flat range of it).  xi < 0:
 * zero__ck_read_elems. */
int zero__ck_read_expert(zero__ck_reader *r, int pp, int kind, int xi, int32_t color, uint64_t lo, uint64_t hi,
                         void *dst, zero_dtype dst_dt, char *err, size_t errn);

/* The loader's view: its parameters (the manifest's params of stage pp, in
 * the same order) sit at new_off[i] in ITS flat space.  Fill dst with
 * `kind` for the loader's flat range [lo, hi) (hi - lo elements of dst_dt);
 * elements no parameter covers (alignment padding) are zero. */
int zero__ck_read_mapped(zero__ck_reader *r, int pp, int kind, const uint64_t *new_off, uint64_t lo, uint64_t hi,
                         void *dst, zero_dtype dst_dt, char *err, size_t errn);

/* (libzero 1.10) Where one of the loader's parameters comes from: the
 * saver's pipeline stage and flat offset (another pipeline split moves a
 * parameter between stages), and for an expert its group in m->experts and
 * the color whose experts it takes (xi -1: dense). */
typedef struct zero__ck_src {
    uint64_t new_off, numel; /* the loader's flat offset and element count */
    uint64_t old_off;        /* the saver's flat offset, in the flat space of its stage pp */
    int32_t pp, xi, color;
} zero__ck_src;

/* zero__ck_read_mapped for any map: src[0..n) in the loader's flat order or
 * not (each piece is placed by new_off). */
int zero__ck_read_srcs(zero__ck_reader *r, int kind, const zero__ck_src *src, uint32_t n, uint64_t lo, uint64_t hi,
                       void *dst, zero_dtype dst_dt, char *err, size_t errn);
#endif
