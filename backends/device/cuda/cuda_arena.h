/* A pooled sub-allocator over one or more big blocks of memory the caller
 * obtained up front (cudaMalloc'd device memory, pinned host memory, or in
 * tests plain malloc).  ZeRO-R's point: allocating each tier once and
 * carving it avoids the fragmentation that many cudaMalloc/cudaFree calls of
 * varying sizes cause over a long run.
 *
 * The arena never touches the memory it manages (its bookkeeping lives in
 * host memory), so it works for device pointers the CPU cannot dereference.
 * Placement is best fit with immediate coalescing of free neighbours;
 * every block is `align`-aligned relative to its region's base.
 *
 * Thread-safety: none; the owner (device_cuda.c) serialises calls.
 * Ownership: the arena owns only its bookkeeping; regions stay the caller's
 * and must outlive the arena. */
#ifndef ZERO_CUDA_ARENA_H
#define ZERO_CUDA_ARENA_H
#include <stddef.h>
#include <stdint.h>

typedef struct zero_cuda_arena zero_cuda_arena;

typedef struct zero_cuda_arena_stats {
    size_t capacity;      /* sum of region sizes */
    size_t used;          /* bytes in live blocks (after rounding to align) */
    size_t peak_used;
    size_t largest_free;  /* biggest single block that can be allocated now */
    size_t live_blocks;
    size_t regions;
} zero_cuda_arena_stats;

/* align: power of two >= 1 (256 matches cudaMalloc's guarantee). NULL on
 * bad argument or out of host memory. */
zero_cuda_arena *zero_cuda_arena_create(size_t align);
/* Free the bookkeeping (not the regions). NULL is a no-op. */
void zero_cuda_arena_destroy(zero_cuda_arena *a);
/* Hand a region [base, base + bytes) to the arena. 0 on success, -1 on
 * bad argument / host OOM. */
int zero_cuda_arena_add_region(zero_cuda_arena *a, void *base, size_t bytes);
/* Best-fit block of at least `bytes` (rounded up to align; 0 counts as 1).
 * NULL when no free block is big enough (the caller may add a region and
 * retry). */
void *zero_cuda_arena_alloc(zero_cuda_arena *a, size_t bytes);
/* Return a block. 0 on success, -1 if p is not a live block of this arena
 * (nothing changes then). NULL is a no-op returning 0. */
int zero_cuda_arena_free(zero_cuda_arena *a, void *p);
/* Size of live block p (rounded), or 0 if p is not one. */
size_t zero_cuda_arena_block_size(const zero_cuda_arena *a, const void *p);
/* Does p lie inside one of the arena's regions? */
int zero_cuda_arena_owns(const zero_cuda_arena *a, const void *p);
void zero_cuda_arena_stats_get(const zero_cuda_arena *a, zero_cuda_arena_stats *out);
/* Base pointer of region i (i < stats.regions), for the owner to free. */
void *zero_cuda_arena_region(const zero_cuda_arena *a, size_t i);
#endif
