/* (1.1) ZERO_PARAM_HOST_OWNED parameters: the host's tensor is the
 * parameter, and libzero writes its own values into it (host_owned.c).
 * Internal to the core. */
#ifndef ZERO_CORE_HOST_OWNED_H
#define ZERO_CORE_HOST_OWNED_H

#include "engine.h"

/* Write libzero's current values of every host-owned param into the host's
 * tensor (zero_params_done, each taken step, zero_load).  `when` names the
 * call in errors.  Engine thread; not thread-safe. */
zero_status zero__host_owned_writeback(struct zero_engine *e, const char *when);

/* (1.7.4) At a boundary, before the optimizer: is every host-owned param's
 * tensor still what libzero last wrote into it?  A host that wrote it after
 * zero_params_done (loaded weights, scaled it in place) would lose the write
 * at this step's writeback, silently; instead this rank returns
 * ZERO_ERR_STATE naming the param, the first differing element and both
 * values, with nothing changed.  The caller agrees the verdict over the
 * ranks (grad_window.c) before any weight moves.
 *
 * What is compared (ZERO_CHECK_HOST_WRITES in the environment):
 *  - unset or "sampled" (the default): each param's first and last 64 bytes
 *    and one 64-byte line in every 4 KiB, so every write that changes a
 *    contiguous run of 4160 bytes or more is found, and one that changes a
 *    single element in about 1 case in 64; it reads 1/32 of the params'
 *    bytes;
 *  - "full": every byte (two reads of the params per optimizer step);
 *  - "off": nothing.
 * Host-owned params of a device engine are not compared (their tensors and
 * libzero's copy are device memory).  Engine thread; not thread-safe. */
zero_status zero__host_owned_check(struct zero_engine *e);

#endif
