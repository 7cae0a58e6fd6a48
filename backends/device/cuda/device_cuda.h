/* CUDA device backend: pooled device memory, pinned host memory for
 * offload, libzero's own communication stream, and event-based ordering so
 * that a reduction runs after the kernel that produced a gradient without
 * the host ever blocking.
 *
 * Memory is plain cudaMalloc (never managed memory) carved by cuda_arena:
 * one up-front region per tier when the size is known, growing by chunks
 * otherwise.  Host-tier blocks are pinned (cudaHostAlloc) so that
 * offload copies are true async DMA.
 *
 * Built only with ZERO_HAVE_CUDA.  Thread-safety: every function may be
 * called from several threads at once on one device (a mutex guards the
 * arenas and the ordering event), except open/close.  Each function makes
 * the device current on the calling thread first (cudaSetDevice), so the
 * communication thread needs no setup of its own. */
#ifndef ZERO_DEVICE_CUDA_H
#define ZERO_DEVICE_CUDA_H
#include <stddef.h>
#include "zero.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zero_cuda_device zero_cuda_device;

/* Number of usable CUDA devices.  0 when there is none, with the reason
 * copied into why (e.g. "cudaGetDeviceCount: CUDA driver version is
 * insufficient for CUDA runtime version" on a machine with the toolkit but
 * no GPU driver).  why may be NULL.  Thread-safe. */
int zero_cuda_device_count(char *why, size_t why_len);

typedef struct zero_cuda_device_options {
    uint32_t struct_size;       /* sizeof(zero_cuda_device_options) */
    int32_t ordinal;            /* CUDA device ordinal; < 0: the launcher's local rank % device count */
    void *compute_stream;       /* the host's cudaStream_t (borrowed); NULL = legacy default stream */
    size_t device_arena_bytes;  /* first device region; 0 = allocate on demand */
    size_t host_arena_bytes;    /* first pinned host region; 0 = on demand */
    size_t grow_bytes;          /* minimum size of a later region; 0 = 64 MiB */
} zero_cuda_device_options;
#define ZERO_CUDA_DEVICE_OPTIONS_INIT { sizeof(zero_cuda_device_options), 0, NULL, 0, 0, 0 }

/* Open device `o->ordinal`: create the comm stream (non-blocking) and the
 * ordering event, reserve the up-front regions.  On failure *out is NULL,
 * the message is in err, and the status is ZERO_ERR_DEVICE (no GPU, bad
 * ordinal) or ZERO_ERR_OUT_OF_MEMORY.  *out is owned by the caller
 * (zero_cuda_device_close). */
zero_status zero_cuda_device_open(const zero_cuda_device_options *o, zero_cuda_device **out, char *err,
                                  size_t err_len);
/* Wait for the comm stream, free every region (live blocks included), the
 * stream and the event.  NULL is a no-op.  Not thread-safe. */
void zero_cuda_device_close(zero_cuda_device *d);

/* Zero-filled block of `bytes` from the tier's arena: ZERO_TIER_DEVICE is
 * device memory, ZERO_TIER_HOST pinned host memory.  256-byte aligned.
 * NULL when out of memory (see zero_cuda_device_error).  The block belongs
 * to d until zero_cuda_free or close.
 *
 * The zero-fill of a device block is queued on the comm stream and the
 * call returns without waiting for it (issue 35: a stream synchronisation
 * per allocation also waited for every collective queued there); with
 * ZERO_CUDA_ALLOC_SYNC=1 set at zero_cuda_device_open the fill is waited
 * for, as before issue 35.  Work queued on the comm stream afterwards (libzero's
 * kernels, NCCL on that stream, zero_cuda_copy, the fences) sees the zeros
 * by stream order; another stream sees them after zero_cuda_order_before
 * (event, no host wait); code that may touch the block from any stream
 * calls zero_cuda_fill_wait first.  Host-tier blocks are zeroed on the host
 * before the call returns.  bench/gpu/bench_gpu_waits measures both
 * (ZERO_CUDA_ALLOC_SYNC=1 and the default, =0). */
void *zero_cuda_alloc(zero_cuda_device *d, zero_mem_tier tier, size_t bytes);
/* flags for zero_cuda_alloc_ex */
enum { ZERO_CUDA_ALLOC_NOFILL = 1 }; /* the caller overwrites the whole block before reading it: no fill */
void *zero_cuda_alloc_ex(zero_cuda_device *d, zero_mem_tier tier, size_t bytes, unsigned flags);
/* Block the host until every zero-fill queued by zero_cuda_alloc so far is
 * done (an event recorded after the latest fill: later work on the comm
 * stream is not waited for).  Returns at once when none is pending. */
zero_status zero_cuda_fill_wait(zero_cuda_device *d);
/* Return a block from either tier; NULL and foreign pointers are ignored
 * (returns ZERO_ERR_INVALID_ARGUMENT for a foreign one). */
zero_status zero_cuda_free(zero_cuda_device *d, void *p);
/* Is p a block (or inside a region) of this device's arenas? */
int zero_cuda_owns(zero_cuda_device *d, const void *p);

/* Synchronous copy between any two of host / pinned / device memory
 * (cudaMemcpyDefault), issued on the comm stream after the work already
 * queued there.  Returns when the bytes have arrived. */
zero_status zero_cuda_copy(zero_cuda_device *d, void *dst, const void *src, size_t bytes);
/* Asynchronous copy on `stream` (NULL = the comm stream).  For overlap the
 * host side should be pinned (a tier-HOST block). */
zero_status zero_cuda_copy_async(zero_cuda_device *d, void *dst, const void *src, size_t bytes, void *stream);

/* The host's compute stream (as given at open) and libzero's comm stream,
 * as cudaStream_t values cast to void*.  Valid until close. */
void *zero_cuda_compute_stream(zero_cuda_device *d);
void *zero_cuda_comm_stream(zero_cuda_device *d);

/* Make the comm stream wait for everything queued on `producer` so far
 * (NULL = the compute stream given at open), without blocking the host:
 * event record on producer + cudaStreamWaitEvent on the comm stream.  This
 * is what zero_on_grad_ready(p, stream) calls before the reduction of p's
 * bucket is queued. */
zero_status zero_cuda_order_after(zero_cuda_device *d, void *producer);
/* The reverse: `consumer` (NULL = compute stream) waits for the comm stream,
 * e.g. so that the next forward sees the parameters refreshed by step. */
zero_status zero_cuda_order_before(zero_cuda_device *d, void *consumer);
/* Block the host until the comm stream is idle. */
zero_status zero_cuda_comm_sync(zero_cuda_device *d);

typedef struct zero_cuda_device_stats {
    size_t capacity[ZERO_NTIERS]; /* bytes reserved from CUDA per tier */
    size_t used[ZERO_NTIERS];
    size_t peak_used[ZERO_NTIERS];
    size_t largest_free[ZERO_NTIERS];
    /* (issue 35) times the host blocked on the comm stream through this
     * device: stream synchronisations, synchronous copies, fence and fill
     * waits (device_cuda_ops.c counts its own through
     * zero_cuda_note_host_wait) */
    uint64_t host_waits;
    uint64_t fills_async; /* zero-fills queued without a host wait */
} zero_cuda_device_stats;
void zero_cuda_device_stats_get(zero_cuda_device *d, zero_cuda_device_stats *out);

/* Count one host wait on d's streams (for waits the caller makes itself,
 * e.g. cudaEventSynchronize of a fence).  Thread-safe. */
void zero_cuda_note_host_wait(zero_cuda_device *d);

/* Text of the last failure on d (empty if none).  Owned by d; may be
 * overwritten by a failure on another thread. */
const char *zero_cuda_device_error(const zero_cuda_device *d);
/* The ordinal in use (the resolved one when opened with a negative
 * ordinal), -1 for NULL.  Thread-safe. */
int zero_cuda_device_ordinal(const zero_cuda_device *d);

#ifdef __cplusplus
}
#endif
#endif
