/* stage1: ZeRO stage 1, optimizer states partitioned.
 *
 * Every rank keeps the full flat parameters and a full flat fp32 gradient
 * that accumulates over the window, but optimizer state only for the
 * partition it owns (the layout gives every rank an equal contiguous share
 * of each param group).  At the boundary micro-step the buckets are
 * REDUCE-SCATTERED in place instead of all-reduced: a rank only needs the
 * summed gradient of what it steps, and a reduce-scatter moves half the
 * bytes of an all-reduce (an all-reduce is a reduce-scatter plus an
 * all-gather).  That is why we deviate from the paper's "allreduce for
 * stage 1"; the all-gather happens anyway, on the updated parameters.
 *
 * After the step each rank's updated share is all-gathered in place into the
 * flat parameter buffer (equal shares per group, so an in-place allgatherv).
 *
 * fp32 models: the params ARE the master weights (K = 8 bytes of Adam state
 * per element, divided by N).  bf16/fp16 models: 2-byte params and
 * gradients, an fp32 master of the owned partition only (2+2+12/N Psi with
 * Adam), and the optimizer pass rounds the new weights into the params.
 * Norm, clip, step and the all-gather are the core's services (glue here).
 *
 * A preset of the plugin kit's flat data-parallel engine (kit/zero_kit.h,
 * zero_kit_dp_*), which includes only abi/ headers, like any third-party
 * plugin built on the installed kit. */
#include "zero_kit.h"

/* Accumulate locally in the flat buffer, reduce-scatter in place once per
 * window; the checkpoint keeps the window's local gradient sum (the full
 * flat buffer: it is reduced only at the boundary).  With
 * gradient_accumulation_steps > 1 (no pipeline, reduce_once_per_window off)
 * the kit's engine runs stage 2's SCATTER path instead ("stage1.part"): the
 * same window sums as stage 2, bit for bit. */
static const zero_kit_dp_spec s1_spec = {
    .name = "stage1", .grads_blob = "grads", .mode = ZERO_BUCKETS_SCATTER_INPLACE, .replicated = 0};

/* ABI 1.2: what this strategy would allocate, without allocating it. */
static zero_status s1_plan(const zero_plan_services *ps) { return zero_kit_dp_plan(ps, &s1_spec); }

static zero_status s1_create(const zero_services *svc, void **state) {
    return zero_kit_dp_create(svc, &s1_spec, state);
}

ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
    ZERO_PLUGIN_TABLE_HEAD,
    .caps = ZERO_PLUGIN_CAP_GRAD_DTYPES | ZERO_PLUGIN_CAP_RESHARD | ZERO_PLUGIN_CAP_EXPERT_GROUPS,
    .name = "stage1",
    .description = "ZeRO-1: optimizer states partitioned; gradients reduce-scattered at the boundary, "
                   "updated params all-gathered",
    .create = s1_create,
    ZERO_KIT_DP_ENTRIES,
    .plan = s1_plan,
};
