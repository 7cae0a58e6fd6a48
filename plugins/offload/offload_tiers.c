/* offload: moving data between the device and host tiers.
 *
 * The rule that makes the plugin correct on a CUDA engine: device-tier
 * memory is never dereferenced on the host.  Every crossing goes through
 * svc->mem_copy (any direction) and every clear through svc->mem_set;
 * conversions between fp32 and the model dtype happen on
 * the host side of the copy, in host-tier buffers. */
#include "offload.h"

/* Where a block's reduced gradient sits on the device: the flat buffer
 * (stage-1 partitioning) or the partition accumulator (stage 2). */
static const void *device_block(const offload *s, const zero_owned_range *o) {
    uint64_t at = s->part_stage == 1 ? o->flat_lo : o->part_lo;
    return (const char *)s->dgrad + at * s->gesize;
}

void zero__of_block_to_host(offload *s, const zero_owned_range *o) {
    const size_t n = (size_t)(o->flat_hi - o->flat_lo);
    s->svc->mem_copy(s->c, (char *)s->hgrad + o->part_lo * s->gesize, device_block(s, o), n * s->gesize);
}

/* fp32 models: the master IS the parameter value, so the new weights go to
 * the device as they are.  16-bit models: rounded (RNE, as the optimizer's
 * own copy-out would) into the host gradient buffer, free once the step has
 * consumed the gradient, and copied from there. */
void zero__of_params_to_device(offload *s) {
    const size_t es = s->esize;
    for (uint32_t i = 0; i < s->nowned; i++) {
        const zero_owned_range *o = &s->owned[i];
        const size_t n = (size_t)(o->flat_hi - o->flat_lo);
        const void *src = s->master + o->part_lo;
        if (s->dtype != ZERO_DTYPE_F32) {
            void *stage = (char *)s->hgrad + o->part_lo * es;
            s->svc->convert(s->c, stage, s->dtype, s->master + o->part_lo, ZERO_DTYPE_F32, n);
            src = stage;
        }
        s->svc->mem_copy(s->c, (char *)s->params + o->flat_lo * es, src, n * es);
    }
}
