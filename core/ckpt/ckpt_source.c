/* See ckpt_source.h. */
#include "ckpt_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h" /* zero__convert: the same RNE rounding as the optimizer's copy-out */

static int has_exact(const zero__ck_manifest *m, int pp, int kind) {
    for (uint32_t i = 0; i < m->nfiles; i++)
        if (m->files[i].kind == kind && m->files[i].pp_stage == pp) return 1;
    return 0;
}

/* The kind actually read for `kind`, or -2 if none. */
static int source_kind(const zero__ck_manifest *m, int pp, int kind) {
    if (has_exact(m, pp, kind)) return kind;
    if (kind == ZERO__CK_MASTER && m->model_dtype == ZERO_DTYPE_F32 && has_exact(m, pp, ZERO__CK_PARAMS))
        return ZERO__CK_PARAMS;
    if (kind == ZERO__CK_PARAMS && has_exact(m, pp, ZERO__CK_MASTER)) return ZERO__CK_MASTER;
    return -2;
}

int zero__ck_has(const zero__ck_manifest *m, int pp, int kind) { return source_kind(m, pp, kind) != -2; }

/* The file of `kind` holding flat element pos: its byte offset and how many
 * elements follow contiguously.  xi >= 0: only files of ranks of `color`
 * in expert group m->experts[xi]. */
static const zero__ck_file *locate(const zero__ck_manifest *m, int pp, int kind, int xi, int32_t color, uint64_t pos,
                                   uint64_t *byte_off, uint64_t *run) {
    for (uint32_t i = 0; i < m->nfiles; i++) {
        const zero__ck_file *f = &m->files[i];
        if (f->kind != kind || f->pp_stage != pp) continue;
        if (xi >= 0 && (f->rank < 0 || f->rank >= m->world || m->experts[xi].colors[f->rank] != color)) continue;
        uint64_t before = 0;
        for (uint32_t k = 0; k < f->nranges; k++) {
            const zero__ck_range *g = &f->ranges[k];
            if (pos >= g->flat_lo && pos < g->flat_hi) {
                *byte_off = (before + pos - g->flat_lo) * zero__ck_dtype_size(f->dtype);
                *run = g->flat_hi - pos;
                return f;
            }
            before += g->flat_hi - g->flat_lo;
        }
    }
    return NULL;
}

int zero__ck_read_elems(zero__ck_reader *r, int pp, int kind, uint64_t lo, uint64_t hi, void *dst,
                        zero_dtype dst_dt, char *err, size_t errn) {
    return zero__ck_read_expert(r, pp, kind, -1, -1, lo, hi, dst, dst_dt, err, errn);
}

int zero__ck_read_expert(zero__ck_reader *r, int pp, int kind, int xi, int32_t color, uint64_t lo, uint64_t hi,
                         void *dst, zero_dtype dst_dt, char *err, size_t errn) {
    const zero__ck_manifest *m = zero__ck_reader_manifest(r);
    if (xi >= (int)m->nexperts) xi = -1;
    const int sk = source_kind(m, pp, kind);
    char kb[16];
    if (sk == -2) {
        snprintf(err, errn, "checkpoint holds no %s data for pipeline stage %d", zero__ck_kind_name(kind, kb, sizeof kb),
                 pp);
        return -1;
    }
    const size_t des = zero__ck_dtype_size(dst_dt);
    enum { PIECE = 1 << 16 }; /* elements converted at a time: bounded staging */
    char *tmp = NULL;
    for (uint64_t pos = lo; pos < hi;) {
        uint64_t off = 0, run = 0;
        const zero__ck_file *f = locate(m, pp, sk, xi, color, pos, &off, &run);
        if (!f) {
            snprintf(err, errn,
                     "checkpoint holds no %s data for flat element %llu of pipeline stage %d%s (damaged manifest?)",
                     zero__ck_kind_name(sk, kb, sizeof kb), (unsigned long long)pos, pp,
                     xi >= 0 ? " from the ranks of the expert's color" : "");
            free(tmp);
            return -1;
        }
        uint64_t n = hi - pos < run ? hi - pos : run;
        char *out = (char *)dst + (pos - lo) * des;
        const size_t ses = zero__ck_dtype_size(f->dtype);
        if (f->dtype == dst_dt) {
            if (zero__ck_read(r, f, off, out, n * ses, err, errn)) return free(tmp), -1;
        } else {
            if (!tmp && !(tmp = malloc((size_t)PIECE * 4))) {
                snprintf(err, errn, "checkpoint: out of memory");
                return -1;
            }
            if (n > PIECE) n = PIECE;
            if (zero__ck_read(r, f, off, tmp, n * ses, err, errn)) return free(tmp), -1;
            zero__convert(out, dst_dt, tmp, f->dtype, (size_t)n);
        }
        pos += n;
    }
    free(tmp);
    return 0;
}

int zero__ck_read_srcs(zero__ck_reader *r, int kind, const zero__ck_src *src, uint32_t n, uint64_t lo, uint64_t hi,
                       void *dst, zero_dtype dst_dt, char *err, size_t errn) {
    const size_t des = zero__ck_dtype_size(dst_dt);
    memset(dst, 0, (size_t)(hi - lo) * des);
    for (uint32_t j = 0; j < n; j++) {
        const zero__ck_src *p = &src[j];
        const uint64_t a = p->new_off > lo ? p->new_off : lo;
        const uint64_t b = p->new_off + p->numel < hi ? p->new_off + p->numel : hi;
        if (a >= b) continue;
        const uint64_t old = p->old_off + (a - p->new_off);
        if (zero__ck_read_expert(r, p->pp, kind, p->xi, p->color, old, old + (b - a), (char *)dst + (a - lo) * des,
                                 dst_dt, err, errn))
            return -1;
    }
    return 0;
}

int zero__ck_read_mapped(zero__ck_reader *r, int pp, int kind, const uint64_t *new_off, uint64_t lo, uint64_t hi,
                         void *dst, zero_dtype dst_dt, char *err, size_t errn) {
    const zero__ck_manifest *m = zero__ck_reader_manifest(r);
    zero__ck_src *src = calloc(m->nparams ? m->nparams : 1, sizeof *src);
    if (!src) {
        snprintf(err, errn, "checkpoint: out of memory");
        return -1;
    }
    uint32_t n = 0; /* the params of stage pp, in the same order as the loader's */
    for (uint32_t i = 0; i < m->nparams; i++)
        if (m->params[i].pp_stage == pp) {
            src[n] = (zero__ck_src){new_off[n], m->params[i].numel, m->params[i].flat_offset, pp, -1, -1};
            n++;
        }
    int rc = zero__ck_read_srcs(r, kind, src, n, lo, hi, dst, dst_dt, err, errn);
    free(src);
    return rc;
}
