/* (1.1) ZERO_PARAM_HOST_OWNED parameters: the host's tensor is the
 * parameter, and libzero writes its own values into it (host_owned.c;
 * whether the host wrote it itself: host_writes.h).  Internal to the core. */
#ifndef ZERO_CORE_HOST_OWNED_H
#define ZERO_CORE_HOST_OWNED_H

#include "engine.h"

/* Write libzero's current values of every host-owned param into the host's
 * tensor (zero_params_done, each taken step, zero_load).  `when` names the
 * call in errors.  Engine thread; not thread-safe. */
zero_status zero__host_owned_writeback(struct zero_engine *e, const char *when);
/* (1.10) The same for params[0..n) alone (zero_params_write). */
zero_status zero__host_owned_writeback_params(struct zero_engine *e, zero_param *const *params, size_t n,
                                              const char *when);

#endif
