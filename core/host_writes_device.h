/* (1.13) The host-write check of a device engine: host_writes.c decides
 * what is fingerprinted and when; this file fingerprints device memory on
 * the device (zero__dev_prints: kernels/cpu/print_math.h's fingerprint,
 * the sampled lines or every byte) into slots in device memory, one per
 * (kind, param), and reads them back in one copy when the boundary's check
 * compares them.  Nothing waits for the device before that copy, so the
 * fingerprints at zero_gather / zero_release of stage 3 add no host wait.
 *
 * Kinds: NOTED (libzero's copy when libzero last wrote it), NOW (the same
 * copy at the boundary), TENSOR (a host-owned tensor in device memory at
 * the boundary), GATHER and RELEASE (running sums of a stage-3 copy's
 * fingerprints at each gather and each release since the last boundary:
 * equal unless the host wrote a gathered copy before its release).
 *
 * Ownership: the slots (ZERO_MEM_OTHER, device tier) and the mirror are
 * the engine's, freed by zero__hwd_free.  Not thread-safe: the engine
 * thread. */
#ifndef ZERO_CORE_HOST_WRITES_DEVICE_H
#define ZERO_CORE_HOST_WRITES_DEVICE_H

#include "engine.h"

enum { ZERO__HW_NOTED, ZERO__HW_NOW, ZERO__HW_TENSOR, ZERO__HW_GATHER, ZERO__HW_RELEASE, ZERO__HW_KINDS };

/* The slot of (kind, param) in e->hwd_host after zero__hwd_read: what the
 * device computed.  A piece in host memory (pinned host-tier params, a
 * host-owned tensor on the host) is fingerprinted on the host with the
 * same function, into ZERO__HW_SIDE: a set kind's value is in the one
 * array its pointer's memory says, a sum (GATHER, RELEASE) is the two
 * added. */
#define ZERO__HW_AT(e, kind, i) ((e)->hwd_host[(size_t)(kind) * (e)->nparams + (i)])
#define ZERO__HW_SIDE(e, kind, i) ((e)->hwd_side[(size_t)(kind) * (e)->nparams + (i)])

/* 1 when this device engine's check can run: the device has the
 * fingerprint kernels and the slots exist (allocated at the first call);
 * 0 otherwise, after one warning saying why (the check is then off for
 * the engine's life, as ZERO_CHECK_HOST_WRITES=off). */
int zero__hwd_ready(struct zero_engine *e);
/* Queue the fingerprint of bytes[i] bytes at x[i] (0 bytes: nothing
 * happens) into the (kind, params[i]) slot, or add it to the slot (`add`);
 * a piece in host memory is fingerprinted at once into ZERO__HW_SIDE.  On
 * failure the check is turned off (warned). */
void zero__hwd_queue(struct zero_engine *e, int kind, struct zero_param *const *params, const void *const *x,
                     const uint64_t *bytes, size_t n, int full, int add);
/* Every slot into e->hwd_host (waits for the device's stream).  On failure
 * the check is turned off (warned) and ZERO_ERR_DEVICE returned. */
zero_status zero__hwd_read(struct zero_engine *e);
/* The GATHER and RELEASE slots from e->hwd_host back to the device (after
 * the check cleared the sums it compared). */
zero_status zero__hwd_write_sums(struct zero_engine *e);
/* The first element (of p's numel) where a and b differ, each device or
 * host memory, read through host copies; that element's bytes of each in
 * va and vb (p's dtype size).  SIZE_MAX when none differ (or the copies
 * failed: out of memory, a device error). */
size_t zero__hwd_first_difference(struct zero_engine *e, const struct zero_param *p, const void *a, const void *b,
                                  unsigned char va[4], unsigned char vb[4]);
void zero__hwd_free(struct zero_engine *e);

#endif
