/* stage2: ZeRO stage 2, optimizer states and gradients partitioned.
 *
 * No full gradient ever exists.  Every micro-step, gradients go into the
 * bucket engine's bounded staging slots; each complete bucket is
 * reduce-scattered (during backward with overlap_comm) and this rank's block
 * is ADDED into a part_numel accumulator (model dtype; each addition formed
 * in fp32 and rounded once), which therefore holds the
 * window's summed gradient for the owned partition at the boundary.  The
 * optimizer steps only that partition, then the updated shares are
 * all-gathered in place into the full flat parameters.
 *
 * contiguous_gradients (default on): zero_grad_buffer hands out the bucket's
 * staging slot itself, so the host's backward writes there directly.  Off: a
 * per-param temporary buffer is allocated (GRADS-tagged) and copied into the
 * slot at on_grad_ready, then freed; that transient is the honest memory
 * cost of turning it off.
 *
 * fp32 models: the params ARE the master weights.  bf16/fp16 models: 2-byte
 * params, a 2-byte gradient partition and an fp32 master of the partition
 * (2 + (2+12)/N Psi with Adam); the optimizer rounds the new weights into the
 * params.  Norm, clip, step and all-gather are the core's services.
 *
 * A preset of the plugin kit's flat data-parallel engine (kit/zero_kit.h,
 * zero_kit_dp_*), which includes only abi/ headers, like any third-party
 * plugin built on the installed kit. */
#include "zero_kit.h"

/* Reduce-scattered every micro-step into the partition accumulator
 * ("stage2.part" in a checkpoint); contiguous_gradients off hands the host a
 * per-param temporary instead of the staging slot. */
static const zero_kit_dp_spec s2_spec = {
    .name = "stage2", .grads_blob = "part", .mode = ZERO_BUCKETS_SCATTER, .replicated = 0};

/* ABI 1.2: what this strategy would allocate, without allocating it. */
static zero_status s2_plan(const zero_plan_services *ps) { return zero_kit_dp_plan(ps, &s2_spec); }

static zero_status s2_create(const zero_services *svc, void **state) {
    return zero_kit_dp_create(svc, &s2_spec, state);
}

ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
    ZERO_PLUGIN_TABLE_HEAD,
    .caps = ZERO_PLUGIN_CAP_GRAD_DTYPES | ZERO_PLUGIN_CAP_RESHARD | ZERO_PLUGIN_CAP_EXPERT_GROUPS,
    .name = "stage2",
    .description = "ZeRO-2: optimizer states and gradients partitioned; buckets reduce-scattered during backward",
    .create = s2_create,
    ZERO_KIT_DP_ENTRIES,
    .plan = s2_plan,
};
