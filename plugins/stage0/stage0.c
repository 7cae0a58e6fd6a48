/* stage0: plain data parallelism, the reference every other strategy is
 * checked against.
 *
 * Every rank keeps the full flat parameters, a full flat gradient (model
 * dtype) that accumulates over the micro-steps of a window, and the full
 * optimizer state.  With gradient_accumulation_steps > 1 (no pipeline,
 * reduce_once_per_window off) every micro-step is instead reduce-scattered
 * into a partition accumulator exactly as stage 2 does, and at the boundary
 * the accumulated partitions are all-gathered into the flat gradient
 * (kit/kit_dp.c): bitwise stage 2's window sums.  During the boundary micro-step's backward the gradient
 * buckets are all-reduced (sums formed in fp32 by the bucket engine,
 * overlapping the host's backward when overlap_comm is on); at the boundary
 * every rank steps everything with identical inputs, so the replicas stay
 * identical without any parameter broadcast.
 *
 * fp32 models: the params ARE the master weights (K = 8 bytes of Adam state
 * per element).  bf16/fp16 models: 2-byte params and gradients plus a full
 * fp32 master (16 Psi with Adam); the optimizer pass rounds the new weights
 * into the params.  The norm, clip and step are the core's boundary_step
 * service; this file is glue.
 *
 * A preset of the plugin kit's flat data-parallel engine (kit/zero_kit.h,
 * zero_kit_dp_*), which includes only abi/ headers, like any third-party
 * plugin built on the installed kit. */
#include "zero_kit.h"

/* Replicated: every rank holds the same all-reduced sum (reduced during the
 * boundary micro-step's backward) and steps everything, so there is nothing
 * to all-gather; the checkpoint keeps the window's local gradient sum so a
 * save in the middle of an accumulation window resumes exactly. */
static const zero_kit_dp_spec s0_spec = {
    .name = "stage0", .grads_blob = "grads", .mode = ZERO_BUCKETS_ALLREDUCE, .replicated = 1};

/* ABI 1.2: what this strategy would allocate, without allocating it. */
static zero_status s0_plan(const zero_plan_services *ps) { return zero_kit_dp_plan(ps, &s0_spec); }

static zero_status s0_create(const zero_services *svc, void **state) {
    return zero_kit_dp_create(svc, &s0_spec, state);
}

ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
    ZERO_PLUGIN_TABLE_HEAD,
    .caps = ZERO_PLUGIN_CAP_PIPELINE | ZERO_PLUGIN_CAP_GRAD_DTYPES | ZERO_PLUGIN_CAP_RESHARD | ZERO_PLUGIN_CAP_EXPERT_GROUPS,
    .name = "stage0",
    .description = "plain data parallelism: full gradients all-reduced, every rank steps everything",
    .create = s0_create,
    ZERO_KIT_DP_ENTRIES,
    .plan = s0_plan,
};
