/* Gradient bucket engine (see zero_bucket_spec in abi/zero_plugin.h).
 *
 * Buckets are static: built once from the layout, as contiguous flat ranges
 * walking params in REVERSE flat order (backward produces the last layers
 * first), each holding whole params up to bucket_numel elements; a param
 * larger than bucket_numel is split over several buckets.  Because every rank
 * builds the same buckets, the order in which hooks fire (even different per
 * rank, even from several threads) changes only timing, never the result.
 *
 * A bucket launches its reduction when all its params are ready (overlap on)
 * or at flush (overlap off).  SCATTER mode stages gradients in a pool of
 * buffers (up to 2 = double buffering, within the staging budget below; the
 * pool grows past that only if the host's order leaves no free slot and none
 * in flight, so it never deadlocks).
 * Reductions are plain sums; scaling happens in the optimizer pass.
 * Thread-safe: grad_slot/ready may be called concurrently. */
#ifndef ZERO_CORE_BUCKETS_H
#define ZERO_CORE_BUCKETS_H
#include "zero_plugin.h"

struct zero_engine;

zero_status zero__buckets_create(zero_core *c, const zero_bucket_spec *spec, zero_buckets **out);
zero_status zero__buckets_grad_slot(zero_buckets *b, uint32_t index, void **slot);
zero_status zero__buckets_ready(zero_buckets *b, uint32_t index, const void *src, zero_dtype dt);
zero_status zero__buckets_flush(zero_buckets *b);
void zero__buckets_destroy(zero_buckets *b);
/* introspection for tests/stats */
uint32_t zero__buckets_count(const zero_buckets *b);
uint64_t zero__buckets_staging_bytes(const zero_buckets *b);
/* (appended by stages) Implementation notes for users of the engine:
 *  - Launches happen strictly in bucket order (MPI matches collectives by
 *    issue order), so a complete bucket waits for the earlier ones.
 *  - SCATTER never splits a param (grad_slot must hand out one contiguous
 *    buffer); its bucket size is max(min(bucket_numel, flat/8), largest
 *    param extent).  (appended by bucket-perf) Staging budget: each slot is
 *    sized to the largest bucket it has held, and the slots together stay
 *    within what partitioning saves, (flat_numel - part_numel) elements of
 *    grad_dtype (a slot element costs grad bytes + 4 fp32 bytes for a 16-bit
 *    model), but never below one largest bucket; (libzero 1.10) with expert
 *    groups each bucket set sizes its buckets and counts its budget from
 *    its own groups (bucket_plan.h), so the sets together keep the rule.
 *    A bucket that finds no free slot large enough takes a new or
 *    enlarged one while within budget, else waits for the oldest
 *    in-flight bucket.  So stage 2's gradient memory
 *    (partition + staging) never exceeds stage 1's full gradient, for any
 *    model and N >= 2, as long as the largest param extent fits what
 *    partitioning saves (L <= Psi(1-1/N) for fp32); a model dominated by one
 *    param keeps its saving by waiting (less overlap) rather than holding
 *    two slots of that size.  Demo model, N = 2: one 65,536-element slot plus
 *    a small one (257 KiB) instead of two (512 KiB) against 374 KiB saved;
 *    N >= 4 keeps two full slots.  (bucket-perf) fp32 SCATTER in host memory
 *    makes no pass it can avoid: the pass that opens an accumulation window
 *    (core micro-step 0 with the boundary count moved since the last pass,
 *    or the engine's first pass; every pass when gradient_accumulation_steps
 *    is 1) reduce-scatters straight into the partition, overwriting it (the
 *    own blocks tile it; bitwise the same as adding into the cleared
 *    partition, see direct_block in buckets.c); later micro-steps add each
 *    reduced block into the partition and clear it in the same pass, so the
 *    slot's next owner clears only the rest.  It
 *    reduces on every micro-step whatever reduce_every_micro_step says, and
 *    with world size 1 it stages nothing (the slot is the partition).
 *  - In-place modes (ALLREDUCE, SCATTER_INPLACE) allocate nothing; their
 *    buckets are clamped to the model only.  Without overlap they reduce at
 *    flush; SCATTER without overlap reduces each bucket synchronously as it
 *    fills, which keeps its staging bounded.
 *  - (issue 14) fp32 gradients with a 16-bit communication_data_type: each
 *    slot also holds a 16-bit wire array (2 bytes an element, within the
 *    staging budget; in-place modes borrow a slot for it, so their buckets
 *    are bounded like 16-bit models'); the bucket is scaled, rounded into
 *    it, reduced in 16 bits (stage 0: iallreducev over the same blocks),
 *    widened, scaled back and added into the fp32 destination.  Never
 *    direct_block.  docs/precision.md.
 *  - Time spent waiting for reductions (hooks and flush) is added to the
 *    engine's exposed_comm_seconds at flush; each flush at a reducing
 *    micro-step counts one reduction pass. */
/* (appended by stages) more introspection, read from the step thread only:
 * reduction passes run (flushes at a reducing micro-step), the effective
 * (clamped) bucket size in elements, and the total seconds spent waiting
 * for reductions (hooks and flush). */
uint64_t zero__buckets_passes(const zero_buckets *b);
uint64_t zero__buckets_numel(const zero_buckets *b);
double zero__buckets_exposed_seconds(const zero_buckets *b);
/* (1.3, step timing) Of the last flush, the seconds spent waiting for
 * reductions that were launched before it (during backward); and the engine
 * a bucket set belongs to.  Step thread only. */
double zero__buckets_last_flush_wait(const zero_buckets *b);
struct zero_engine *zero__buckets_engine(const zero_buckets *b);
#endif
