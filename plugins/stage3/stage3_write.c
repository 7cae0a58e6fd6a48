/* stage3: write_params (plugin ABI 1.8, zero_params_write).
 *
 * Each rank owns one contiguous piece of a param (`count` elements at
 * part_lo of its shard, piece_off of the param).  A write puts that piece
 * of the broadcast values into the fp32 master, wherever the master lives
 * (the device, the host tier, the NVMe optimizer tiles), and into the
 * model-dtype shard (fp32 models without offload: the master is the
 * shard).  With offload the shard is derived from the master afterwards,
 * as a load does (zero__s3_off_master_to_shard: the shard is the master
 * rounded after every step, so the params not written come out bitwise as
 * they were); that pass also reaches the offload_param tiers and file.
 * Gathered copies the gather engine caches (persistent params, prefetched
 * or reused buffers) would show the old values: they are dropped first,
 * as at a load.  Optimizer states, the gradient partition and every other
 * param are not touched.  No communication: every rank was handed the
 * values.  Step thread (the engine thread, between windows). */
#include <stdlib.h>

#include "stage3.h"
#include "stage3_tiers.h"

/* The master piece [part_lo, part_lo + n) from values (device tier, model
 * dtype): the device master directly, a host-tier or NVMe master through
 * a host copy of the piece (convert reads both of its pointers on one
 * side; the NVMe tiles take fp32). */
static zero_status write_master(zero__s3 *s, uint64_t part_lo, const void *src, uint64_t n, void **tmp,
                                size_t *tmp_bytes) {
    const zero_services *svc = s->svc;
    if (!s->off) {
        svc->convert(s->c, s->master + part_lo, ZERO_DTYPE_F32, src, s->dtype, (size_t)n);
        return ZERO_OK;
    }
    /* one host block: the model-dtype piece, then (NVMe) its fp32 widening, 4-byte aligned */
    const size_t at = ((size_t)n * s->esize + sizeof(float) - 1) / sizeof(float) * sizeof(float);
    const size_t need = at + (size_t)n * sizeof(float);
    if (need > *tmp_bytes) {
        void *t = realloc(*tmp, need);
        if (!t) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage3: no host memory to write a parameter");
        *tmp = t;
        *tmp_bytes = need;
    }
    char *raw = *tmp;
    float *wide = (float *)(raw + at);
    svc->mem_copy(s->c, raw, src, (size_t)n * s->esize);
    if (s->master) { /* host tier */
        svc->convert(s->c, s->master + part_lo, ZERO_DTYPE_F32, raw, s->dtype, (size_t)n);
        return ZERO_OK;
    }
    svc->convert(s->c, wide, ZERO_DTYPE_F32, raw, s->dtype, (size_t)n);
    return zero__s3_off_write_master(s, part_lo, wide, n);
}

zero_status zero__s3_write_params(void *state, zero_param_info *const *params, size_t n, const void *const *values) {
    zero__s3 *s = state;
    const zero_services *svc = s->svc;
    zero_status st = zero_kit_gather_drop_all(s->gather);
    zero_kit_gather_mark_stale(s->gather);
    void *tmp = NULL;
    size_t tmp_bytes = 0;
    for (size_t i = 0; i < n && st == ZERO_OK; i++) {
        const zero__s3_param *p = &s->params[params[i]->index];
        const uint64_t cnt = p->count;
        if (!cnt) continue; /* none of this param is this rank's */
        const char *src = (const char *)values[i] + (size_t)p->piece_off * s->esize;
        st = write_master(s, p->part_lo, src, cnt, &tmp, &tmp_bytes);
        /* without offload a 16-bit shard beside the master takes the values as they are */
        if (st == ZERO_OK && !s->off && (void *)s->master != s->shard)
            svc->mem_copy(s->c, (char *)s->shard + (size_t)p->part_lo * s->esize, src, (size_t)cnt * s->esize);
    }
    free(tmp);
    if (st == ZERO_OK && s->off) st = zero__s3_off_master_to_shard(s);
    return st;
}
