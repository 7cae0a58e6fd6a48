/* (1.7.4) Parameters the host wrote after zero_params_done (host_writes.c).
 *
 * Two ways a C host can write what libzero owns, both against the contract
 * in abi/zero.h and both silent before 1.7.4:
 *  1. a ZERO_PARAM_HOST_OWNED tensor: libzero steps its own copy and its
 *     writeback overwrote the host's change at the next step;
 *  2. libzero's own copy, through the pointer zero_gather (or
 *     zero_param_storage) returned with a plugin that keeps full copies
 *     (stage 0/1/2, offload): the outcome depended on the plugin and the
 *     dtype (fp32: stepped on from the written values on that rank only;
 *     bf16 or offload: overwritten from the fp32 master), so ranks that
 *     wrote differently diverged for good;
 *  3. (stage 3) a gathered parameter, through zero_gather's pointer (since
 *     1.7.7 also a slice, through zero_gather_slices'): a scratch copy,
 *     whose write was lost at the release, or (where a rank holds the whole
 *     parameter, e.g. one rank) libzero's own storage, stepped on from the
 *     written values on that rank alone.
 * At a window's boundary, before the optimizer, zero_step looks for them
 * and refuses the step on every rank (the verdict is agreed with the
 * missing gradients, grad_window.c): ZERO_ERR_STATE, no weight moved, the
 * window kept.  The refusal stands until the host restores the values (1)
 * or loads a checkpoint (zero_load; 2 and 3: libzero's old values are
 * nowhere else).
 *
 * What is looked at (ZERO_CHECK_HOST_WRITES in the environment):
 *  - unset or "sampled" (the default): each tensor's first and last 64
 *    bytes and one 64-byte line in every 4 KiB, so every write that changes
 *    a contiguous run of 4160 bytes or more is found, and one that changes a
 *    single element elsewhere in about 1 case in 64;
 *  - "full": every byte;
 *  - "off": nothing.
 * For 1, the tensor is compared with libzero's copy; for 2, libzero's copy
 * with a 64-bit fingerprint of the same bytes taken when libzero last wrote
 * it (zero__host_writes_note); for 3, the gathered copy at zero_release
 * with its fingerprint at zero_gather.  (1.13) A device engine's copies
 * are fingerprinted by the device (host_writes_device.h), the stage-3
 * gathers (whole and slices) as sums compared at the boundary.  Not
 * thread-safe: the engine thread. */
#ifndef ZERO_CORE_HOST_WRITES_H
#define ZERO_CORE_HOST_WRITES_H

#include "engine.h"

/* Fingerprint libzero's copy of every param after libzero wrote it
 * (zero_params_done, a boundary zero_step, zero_load).  Cheap when
 * sampled; nothing when off or on a device engine. */
void zero__host_writes_note(struct zero_engine *e);
/* (1.10) The same for params[0..n) alone (zero_params_write wrote them and
 * nothing else: the other params' fingerprints still hold, and a write
 * the host made to them is still found at the next boundary). */
void zero__host_writes_note_params(struct zero_engine *e, zero_param *const *params, size_t n);

/* Stage 3 (a plugin that partitions parameters): zero_gather handed out
 * ptrs[0..n) for params (fingerprinted here), zero_release takes params
 * back (compared here: a gathered copy the host wrote is a write lost at
 * the release, counted for the next boundary's check; on a device engine
 * both fingerprints are added to sums the boundary compares).  The engine
 * thread. */
void zero__host_writes_gathered(struct zero_engine *e, zero_param *const *params, size_t n, void *const *ptrs);
void zero__host_writes_released(struct zero_engine *e, zero_param *const *params, size_t n);
/* (1.7.7) The same for slices of stacked params (zero_gather_slices /
 * zero_release_slices with a plugin that gathers slices): fingerprinted at
 * a slice's first gather, compared at its last release (a slice may be
 * held several times).  params[i] is stacked and layers[i] in range
 * (checked by the caller).  On out of memory a slice goes unchecked. */
void zero__host_writes_slices_gathered(struct zero_engine *e, zero_param *const *params, const uint32_t *layers,
                                       size_t n, void *const *ptrs);
void zero__host_writes_slices_released(struct zero_engine *e, zero_param *const *params, const uint32_t *layers,
                                       size_t n);

/* This rank's verdict at a boundary, before the optimizer: ZERO_OK, or
 * ZERO_ERR_STATE with a message naming the first param written (and, for a
 * host-owned tensor, the element and both values) and how many more. */
zero_status zero__host_writes_check(struct zero_engine *e);

#endif
