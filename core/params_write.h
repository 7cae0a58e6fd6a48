/* zero_params_write (1.10): the host sets parameter values after
 * zero_params_done (params_write.c; the contract is in abi/zero.h).
 * Internal to the core. */
#ifndef ZERO_CORE_PARAMS_WRITE_H
#define ZERO_CORE_PARAMS_WRITE_H

#include "engine.h"

/* Check the call on every rank, agree the verdict, broadcast each param
 * from `root` of its data-parallel group and hand the values to the
 * plugin's write_params; *wrote = 1 once the checks passed (the plugin
 * may have written some params even when an error follows).  Does not write host-owned tensors back or take
 * new fingerprints: the caller (api.c) does, as after a load.  Collective
 * over e->global; engine thread. */
zero_status zero__params_write(struct zero_engine *e, zero_param *const *params, const void *const *values, size_t n,
                               int root, int *wrote);

/* Free the broadcast scratch zero_params_write keeps between the calls of
 * a burst (accounted as ZERO_MEM_OTHER until then): zero_step and
 * zero_engine_destroy call it.  Engine thread. */
void zero__params_write_release(struct zero_engine *e);

#endif
