/* stage1-pp: ZeRO stage 1 inside pipeline parallelism.
 *
 * Rank layout.  The host hands libzero ONE communicator spanning the whole
 * job (or lets it use MPI_COMM_WORLD) and sets pipeline.stages = P in the
 * config.  libzero splits it stage-major:
 *
 *     global rank g  ->  pipeline stage g / D,  data-parallel rank g % D,
 *     D = world / P (P must divide the world size).
 *
 * e.g. 2 stages x 2 replicas: ranks 0,1 hold stage 0, ranks 2,3 stage 1.
 * For this plugin svc->comm_world is the DP group of its stage (the D
 * replicas of the same layers) and the layout partitions over those D ranks;
 * svc->comm_global spans all P * D ranks.  The host registers only its
 * stage's params; zero_pipeline_stage()/zero_rank() tell it where it is.
 *
 * Why stage 1 and nothing higher.  In a pipeline, the M micro-batches of a
 * global batch flow through every stage, so each stage sees M backward
 * passes per optimizer step.  ZeRO-2/3 reduce gradients on every backward
 * (a partition accumulator replaces the full gradient), which multiplies the
 * DP traffic by M, and the full accumulation buffer is needed anyway because
 * a stage's backward produces whole-layer gradients M times.  Stage 1 fits:
 *
 *  - gradients accumulate in one full local fp32 buffer over all M
 *    micro-batches with NO communication (bucket engine in SCATTER_INPLACE
 *    mode with reduce_every_micro_step = 0: buckets are only reduced at the
 *    boundary micro-step);
 *  - at the accumulation boundary exactly one bucketed reduce-scatter pass
 *    runs in the DP group; each rank then owns the summed gradient of its
 *    partition;
 *  - the optimizer steps the owned partition (states exist only for it);
 *  - the updated partitions are all-gathered within the DP group.
 *
 * Global quantities span the WHOLE world: the gradient norm used for
 * clipping is the norm of the full model's gradient, so the partial sum of
 * squares (this rank's partition of this stage's params) is all-reduced
 * over comm_global, summing every stage and every partition; the overflow
 * flag travels in the same fp64 all-reduce, so an Inf/NaN on any rank of
 * any stage skips the step on every rank (and the loss scaler, which the
 * core runs on each rank from the same report, stays in agreement).
 *
 * fp32 models: the params ARE the master weights.  bf16/fp16 models: 2-byte
 * params and gradient accumulator, an fp32 master of the owned partition;
 * the optimizer rounds the new weights into the params.  Norm (over
 * comm_global), clip, step and all-gather are the core's services.
 * A preset of the plugin kit's flat data-parallel engine (kit/zero_kit.h):
 * stage 1's spec (in-place reduce-scatter of a flat window sum, reduced
 * only at the boundary) over this stage's data-parallel group, which is
 * what the engine already does with a pipeline -- comm_world is the DP
 * group, the norm's NULL norm_comm is comm_global, and
 * zero_kit_reduce_every_micro_step is off with pipeline.stages > 1, so
 * the M micro-batches accumulate locally with no traffic and one bucketed
 * reduce-scatter runs at the boundary.  Without a pipeline and with
 * gradient accumulation the engine reduces every micro-step into a
 * partition accumulator instead (stage 2's sums, as stage0/stage1 do),
 * unless zero_optimization.reduce_once_per_window.  What the preset adds
 * to stage 1's: params in another dtype are refused at registration, the
 * window's gradient is "stage1-pp.grads" in a checkpoint whichever buffer
 * holds it, and a load agrees on its outcome over the whole job
 * (comm_global), so a shard missing on one rank fails every stage instead
 * of leaving its DP group in the all-gather.
 *
 * Checkpoint: "stage1-pp.params" (this rank's owned ranges of the stage's
 * flat params), ".master" (16-bit models), ".state<k>", each recorded in
 * the manifest with the flat ranges it holds (the core names the files per
 * pipeline stage and DP rank), plus the window's gradient: a save inside
 * an accumulation window resumes bitwise.  A checkpoint of another
 * data-parallel size (same pipeline split) reshards.
 *
 * Threading: grad_buffer/on_grad_ready may run concurrently for different
 * params (the bucket engine is thread-safe); everything else runs on the
 * engine's calling thread, one call at a time. */
#include "zero_kit.h"

static const zero_kit_dp_spec pp_spec = {.name = "stage1-pp",
                                         .grads_blob = "grads",
                                         .mode = ZERO_BUCKETS_SCATTER_INPLACE,
                                         .replicated = 0,
                                         .micro_blob = "grads",
                                         .agree_global = 1};

static zero_status pp_create(const zero_services *svc, void **state) {
    return zero_kit_dp_create(svc, &pp_spec, state);
}

/* ABI 1.2: what this strategy would allocate, without allocating it
 * (planned over the data-parallel group: the world size planned is the
 * stage's DP size). */
static zero_status pp_plan(const zero_plan_services *ps) { return zero_kit_dp_plan(ps, &pp_spec); }

ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
    ZERO_PLUGIN_TABLE_HEAD,
    .caps = ZERO_PLUGIN_CAP_PIPELINE | ZERO_PLUGIN_CAP_GRAD_DTYPES | ZERO_PLUGIN_CAP_RESHARD | ZERO_PLUGIN_CAP_EXPERT_GROUPS,
    .name = "stage1-pp",
    .description = "ZeRO-1 inside pipeline parallelism: optimizer states partitioned over the stage's "
                   "data-parallel group; gradients accumulate locally over all micro-batches, one "
                   "reduce-scatter pass at the boundary; clip norm and overflow agreed over the whole world",
    .create = pp_create,
    .register_param = zero_kit_dp_register_param,
    ZERO_KIT_DP_ENTRIES,
    .plan = pp_plan,
};
