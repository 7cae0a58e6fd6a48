/* The planner's replay of the bucket engine and of the MPI ring's scratch
 * (plan_buckets.c), called by plan.c.  Its own header, so that
 * plan_buckets.c depends on nothing of plan.c (tools/check-loops.py). */
#ifndef ZERO_CORE_PLAN_BUCKETS_H
#define ZERO_CORE_PLAN_BUCKETS_H
#include <stdint.h>

#include "layout.h"
#include "zero_plugin.h"

/* Peak staging bytes of a bucket set (plan_buckets.c): the bucket engine's
 * sizing (buckets.c: effective_bucket, build_group, staging_budget) and its
 * slot pool (acquire_slot) replayed for hooks in bucket order.  Kept in
 * step with buckets.c by tests/plan (plan == measured peak).  striped: the
 * layout has interleaved ownership (round_robin_gradients; bucket_plan.h).
 * comm_dtype: the run's communication_data_type (a 16-bit one with fp32
 * gradients adds the 16-bit wire arrays, buckets.c wire_setup).
 * (libzero 1.10) in_set: the layout groups this set reduces (buckets.c in_set:
 * with expert groups, the dense groups or one expert group's), NULL =
 * every group; set_world: its communicator's size (the layout's world, or
 * the expert group's partition size). */
uint64_t zero__plan_buckets_bytes(const zero_layout *L, const uint64_t *param_offset, const uint64_t *param_numel,
                                  const zero_bucket_spec *spec, int striped, zero_dtype comm_dtype,
                                  const uint8_t *in_set, uint32_t set_world);

/* The MPI backend's ring scratch (ZERO_MEM_OTHER, host tier) for the
 * reductions of this bucket set, the maximum over ranks: the largest single
 * bucket reduction's temporaries (comm_mpi_ring.c rs_setup), which the
 * progress engine's scratch budget makes the peak however many reductions
 * overlap (issue 14; docs/planner.md); 2-byte elements over a 16-bit wire
 * (comm_dtype with fp32 gradients).  An upper bound for a rank whose blocks
 * are smaller.  0 at world 1.  in_set and set_world as above. */
uint64_t zero__plan_ring_scratch_bytes(const zero_layout *L, const uint64_t *param_offset, const uint64_t *param_numel,
                                       uint32_t nparams, const zero_bucket_spec *spec, int striped,
                                       zero_dtype comm_dtype, const uint8_t *in_set, uint32_t set_world);
#endif
