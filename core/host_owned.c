/* (1.1) ZERO_PARAM_HOST_OWNED: libzero writes its values into the host's
 * tensors (host_owned.h).  Whether the host wrote them itself: host_writes.c. */
#include <stdint.h>

#include "engine_mem.h"
#include "host_owned.h"
#include "log.h"
#include "step_timing.h"

static size_t elem_size(const struct zero_param *p) { return p->info.dtype == ZERO_DTYPE_F32 ? 4 : 2; }

zero_status zero__host_owned_writeback(zero_engine *e, const char *when) {
    return e->any_host_owned ? zero__host_owned_writeback_params(e, e->params, e->nparams, when) : ZERO_OK;
}

zero_status zero__host_owned_writeback_params(zero_engine *e, zero_param *const *params, size_t n, const char *when) {
    if (!e->any_host_owned) return ZERO_OK;
    zero__span sp = zero__phase_begin(e); /* (1.3) zero_step's copy-out */
    zero_status s = ZERO_OK;
    for (size_t i = 0; i < n && s == ZERO_OK; i++) {
        struct zero_param *p = params[i];
        if (!p->host_data) continue;
        if (!p->info.data) {
            s = zero__error(e, ZERO_ERR_UNSUPPORTED,
                            "%s: param '%s' is ZERO_PARAM_HOST_OWNED but plugin '%s' keeps no full copy of it "
                            "(zero_param_info.data is NULL)",
                            when, p->name, e->plugin.table->name ? e->plugin.table->name : "?");
            break;
        }
        /* mem_copy: any direction between host and device memory, ordered
         * on the device's stream; the step's device ordering after this
         * makes the host's stream wait for it */
        zero__engine_copy(zero__core_of(e), p->host_data, p->info.data, (size_t)p->info.numel * elem_size(p));
    }
    zero__phase_end(e, sp, ZERO__PH_COPY);
    return s;
}
