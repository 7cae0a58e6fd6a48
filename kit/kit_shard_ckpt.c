/* A partition-indexed shard's checkpoint that reshards (zero_kit_glue.h,
 * zero_kit_shard_ckpt): the model state through the core's ckpt_shard,
 * so another world size or plugin can read it range by range, plus the
 * blobs only a native load reads; and the same shard's write_params
 * (zero_kit_shard_write).  Used by MiCS and ZeRO++; stage 3 does the same
 * in plugins/stage3/stage3_plugin.c with its offload tiers. */
#include <stdlib.h>
#include <string.h>

#include "zero_kit.h"

static int by_flat_lo(const void *a, const void *b) {
    const zero_owned_range *x = a, *y = b;
    return x->flat_lo < y->flat_lo ? -1 : x->flat_lo > y->flat_lo;
}

zero_status zero_kit_shard_ckpt(const zero_services *svc, const char *dir, const char *prefix,
                                const zero_kit_shard_ckpt_spec *sc, int write, int *resharded) {
    zero_core *c = svc->core;
    *resharded = 0;
    /* The manifest wants each blob's ranges in flat order (a MiCS shard's
     * blocks follow its replication group's ranks, group by group): sort a
     * copy; the blob is the concatenation in that order either way. */
    zero_owned_range *r = malloc((sc->nranges ? sc->nranges : 1) * sizeof *r);
    if (!r) return svc->error(c, ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", prefix);
    if (sc->nranges) memcpy(r, sc->ranges, sc->nranges * sizeof *r);
    qsort(r, sc->nranges, sizeof *r, by_flat_lo);
    float *state[4] = {NULL, NULL, NULL, NULL};
    for (uint32_t k = 0; k < sc->nstate && k < 4; k++) state[k] = sc->state[k];
    /* params NULL: the shard is partition-indexed (ckpt_shard's params blob
     * is flat-indexed); an fp32 shard is the master and saved as such */
    zero_part_step ps = zero_kit_shard_part_step(r, sc->nranges, NULL, sc->dtype, NULL, ZERO_DTYPE_F32, sc->master,
                                                 state, sc->nstate, NULL);
    zero_status st = svc->ckpt_shard(c, dir, prefix, &ps, NULL, write);
    free(r);
    if (st != ZERO_OK) return st;
    const int sep = (void *)sc->master != sc->params; /* a 16-bit shard besides its fp32 master */
    if (!write && svc->ckpt_reshard(c)) {
        /* another world size / plugin / layout wrote it, at a boundary:
         * the 16-bit shard is the master rounded (as after every step) and
         * no gradient is in flight */
        *resharded = 1;
        if (sep) svc->convert(c, sc->params, sc->dtype, sc->master, ZERO_DTYPE_F32, (size_t)sc->numel);
        return sc->acc ? svc->mem_set(c, sc->acc, 0, sc->acc_bytes) : ZERO_OK;
    }
    zero_kit_blob b[2];
    uint32_t n = 0;
    if (sep) b[n++] = (zero_kit_blob){"params", sc->params, (size_t)sc->numel * zero_kit_dtype_size(sc->dtype)};
    if (sc->acc) b[n++] = (zero_kit_blob){"acc", sc->acc, sc->acc_bytes};
    return zero_kit_blobs_io(svc, dir, prefix, b, n, write);
}

/* (plugin ABI 1.8) The written values into the shard's pieces of each
 * param, and widened into the fp32 master of a 16-bit shard; the values and
 * the shard are both device tier, so convert reads them on one side. */
zero_status zero_kit_shard_write(const zero_services *svc, const zero_kit_shard_ckpt_spec *sc,
                                 zero_param_info *const *params, size_t n, const void *const *values) {
    zero_core *c = svc->core;
    const size_t es = zero_kit_dtype_size(sc->dtype);
    const int sep = (void *)sc->master != sc->params; /* a 16-bit shard besides its fp32 master */
    for (size_t i = 0; i < n; i++) /* checked first: a refusal writes nothing */
        if (params[i]->dtype != sc->dtype)
            return svc->error(c, ZERO_ERR_INVALID_ARGUMENT, "write_params: param '%s' is not in the model dtype",
                              params[i]->name);
    for (size_t i = 0; i < n; i++) {
        const zero_param_info *p = params[i];
        const uint64_t lo = p->flat_offset, hi = lo + p->numel;
        for (uint32_t r = 0; r < sc->nranges; r++) {
            const zero_owned_range *o = &sc->ranges[r];
            const uint64_t a = lo > o->flat_lo ? lo : o->flat_lo, b = hi < o->flat_hi ? hi : o->flat_hi;
            if (a >= b) continue;
            const uint64_t at = o->part_lo + (a - o->flat_lo);
            const char *src = (const char *)values[i] + (size_t)(a - lo) * es;
            svc->mem_copy(c, (char *)sc->params + (size_t)at * es, src, (size_t)(b - a) * es);
            if (sep) svc->convert(c, sc->master + at, ZERO_DTYPE_F32, src, sc->dtype, (size_t)(b - a));
        }
    }
    return ZERO_OK;
}
