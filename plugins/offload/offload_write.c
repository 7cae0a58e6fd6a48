/* offload: write_params (plugin ABI 1.8, zero_params_write).
 *
 * A written param's values go into the device parameters (every rank
 * holds them all, and every rank was handed the same values) and, where
 * this rank owns elements of it, into the host fp32 master, widened
 * exactly, so that the next step starts from them: the device params are
 * the master rounded after every step, and a master left behind would
 * overwrite the write at the next all-gather.  The optimizer states and
 * the gradient buffers are not touched.  The values are device-tier
 * memory: the owned slice reaches the host through mem_copy first (convert
 * reads both of its pointers on the same side). */
#include <stdlib.h>

#include "offload.h"

zero_status zero__of_write_params(void *state, zero_param_info *const *params, size_t n, const void *const *values) {
    offload *s = state;
    const zero_services *svc = s->svc;
    void *tmp = NULL;
    size_t tmp_bytes = 0;
    zero_status st = ZERO_OK;
    for (size_t i = 0; i < n && st == ZERO_OK; i++) {
        const zero_param_info *p = params[i];
        const uint64_t lo = p->flat_offset, hi = lo + p->numel;
        svc->mem_copy(s->c, (char *)s->params + (size_t)lo * s->esize, values[i], (size_t)p->numel * s->esize);
        for (uint32_t r = 0; r < s->nowned && st == ZERO_OK; r++) {
            const zero_owned_range *o = &s->owned[r];
            const uint64_t a = lo > o->flat_lo ? lo : o->flat_lo, b = hi < o->flat_hi ? hi : o->flat_hi;
            if (a >= b) continue;
            const size_t bytes = (size_t)(b - a) * s->esize;
            if (bytes > tmp_bytes) {
                void *t = realloc(tmp, bytes);
                if (!t) {
                    st = svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "offload: no host memory to write param '%s'",
                                    p->name);
                    break;
                }
                tmp = t;
                tmp_bytes = bytes;
            }
            svc->mem_copy(s->c, tmp, (const char *)values[i] + (size_t)(a - lo) * s->esize, bytes);
            svc->convert(s->c, s->master + o->part_lo + (a - o->flat_lo), ZERO_DTYPE_F32, tmp, s->dtype,
                         (size_t)(b - a));
        }
    }
    free(tmp);
    return st;
}
