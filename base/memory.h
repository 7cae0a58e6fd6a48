/* Accounted memory: every allocation is tagged (zero_mem_tag) and tiered
 * (zero_mem_tier); current and peak bytes are tracked per tag and tier.
 * Thread-safe (one mutex per accountant). */
#ifndef ZERO_BASE_MEMORY_H
#define ZERO_BASE_MEMORY_H
#include <stddef.h>
#include <stdint.h>
#include "zero.h"

typedef struct zero__mem zero__mem;

/* Create/destroy an accountant.  destroy frees any block still allocated
 * (and logs a leak count at debug level). */
zero__mem *zero__mem_create(void);
void zero__mem_destroy(zero__mem *m);

/* 64-byte aligned, zero-filled; NULL on failure (bytes == 0 gives a valid
 * unique pointer of size 0).  The HOST and DEVICE tiers are both host memory
 * on a CPU build; on CUDA the device tier is cudaMalloc'd by the device
 * backend (later). */
void *zero__mem_alloc(zero__mem *m, zero_mem_tier tier, zero_mem_tag tag, size_t bytes);
void zero__mem_free(zero__mem *m, void *p); /* NULL ok; unknown pointer ignored with a debug log */

void zero__mem_stats(const zero__mem *m, zero_memory_stats *out); /* honours out->struct_size */

/* Account memory the accountant did not allocate itself (communication
 * scratch that backends malloc/cudaMalloc: the MPI ring temporaries, the
 * device-staging host copies, NCCL's device staging).  delta > 0 when such
 * a block is allocated, < 0 when freed; current and peak follow exactly as
 * for zero__mem_alloc.  NULL m is a no-op.  Thread-safe. */
void zero__mem_note(zero__mem *m, zero_mem_tier tier, zero_mem_tag tag, int64_t delta);

/* (gpu-wiring) Route allocations through a device backend from now on:
 * ZERO_TIER_DEVICE blocks come from b->alloc (device memory), and
 * ZERO_TIER_HOST blocks too when *b->pin_host (pinned host memory).  The
 * core passes its device's allocator here (base/ never sees the device
 * backend: issue 32).  Set once, before the first allocation; b->ctx must
 * outlive the accountant (zero__mem_destroy frees leftover device blocks
 * through b->free).  NULL or b->alloc NULL = plain host memory. */
typedef struct zero__mem_backing {
    void *ctx;
    void *(*alloc)(void *ctx, zero_mem_tier tier, size_t bytes); /* zero-filled, >= 64-byte aligned */
    void (*free)(void *ctx, void *p);
    const int *pin_host; /* the device's flag, read at each allocation (NULL: 0) */
} zero__mem_backing;
void zero__mem_set_backing(zero__mem *m, const zero__mem_backing *b);
/* Communication scratch of the engine's backends (ring temporaries, device
 * staging): zero__mem_note(<e's accountant>, tier, ZERO_MEM_OTHER, delta),
 * read from the engine's head (base/owner.h).  NULL engine (a communicator
 * made without one) or no accountant: no-op. */
struct zero_engine;
void zero__engine_note_scratch(struct zero_engine *e, zero_mem_tier tier, int64_t delta);
#endif
