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
 * Includes only abi/ headers (and plugins/common/plugin_glue.h, which
 * includes only abi/ too), like any third-party plugin.
 *
 * Threading: grad_buffer/on_grad_ready may run concurrently for different
 * params (the bucket engine is thread-safe); everything else runs on the
 * engine's calling thread, one call at a time. */
#include <stdlib.h>

#include "../common/plugin_glue.h"

typedef struct stage1pp {
    zero__flat_state f;       /* this stage's params (flat), master (fp32: == params), states (part_numel
                                 each), gradient (flat_numel: window sum; owned ranges reduced at the
                                 boundary); norm over comm_global, all-gather over the DP group */
    const zero_services *svc;
    zero_core *c;
    zero_comm *dp;            /* this stage's data-parallel group (svc->comm_world) */
    zero_comm *global;        /* every rank of every stage (svc->comm_global) */
    zero_buckets *b;
    int tmps;                 /* fp32 accumulation of a 16-bit model: the host writes per-param model-dtype
                                 temporaries (p->plugin_data), widened into the fp32 window sum when ready */
} stage1pp;

static zero_status pp_create(const zero_services *svc, void **state) {
    *state = NULL;
    if (!ZERO_SERVICES_HAS(svc, ckpt_agree))
        return svc->error(svc->core, ZERO_ERR_UNSUPPORTED,
                          "stage1-pp: this libzero lacks the comm_global and partition step services (built for an "
                          "older 1.x): it cannot reduce the gradient norm over all pipeline stages");
    stage1pp *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    s->c = svc->core;
    s->dp = svc->comm_world(s->c);
    s->global = svc->comm_global(s->c);
    const zero_run_config *rc = svc->config(s->c);
    svc->log(s->c, ZERO_LOG_DEBUG, "stage1-pp: pipeline.stages %d, data-parallel group of %d, world %d",
             (int)rc->pipeline_stages, svc->comm_size(s->dp), svc->comm_size(s->global));
    *state = s;
    return ZERO_OK;
}

static zero_status pp_register(void *state, zero_param_info *p) {
    stage1pp *s = state;
    zero_dtype dt = s->svc->config(s->c)->model_dtype;
    /* initial values may be host or device memory: mem_copy reads either */
    if (p->dtype != dt)
        return s->svc->error(s->c, ZERO_ERR_UNSUPPORTED,
                             "stage1-pp: param '%s' has dtype %d, but the model dtype (bf16.enabled / fp16.enabled) "
                             "is %d",
                             p->name, (int)p->dtype, (int)dt);
    return ZERO_OK;
}

static zero_status pp_params_done(void *state) {
    stage1pp *s = state;
    const zero_services *svc = s->svc;
    /* the reduced gradient sits at the owned ranges of the flat buffer; the
     * norm spans the whole world (norm_comm NULL: comm_global, every stage
     * and partition), the all-gather this stage's DP group (comm_world) */
    /* Without a pipeline and with gradient accumulation, every micro-step
     * is reduced into a partition accumulator instead (stage 2's sums, as
     * stage0/stage1 do: zero__reduce_every_micro_step), unless
     * zero_optimization.reduce_once_per_window says otherwise. */
    const int micro = zero__reduce_every_micro_step(svc->config(s->c));
    const zero_layout *L = svc->layout(s->c);
    zero_status st = zero__flat_init(&s->f, svc, 0, micro ? L->part_numel : L->flat_numel,
                                     micro ? ZERO_INDEX_PART : ZERO_INDEX_FLAT, "stage1-pp");
    if (st != ZERO_OK) return st;
    s->tmps = s->f.gdtype != s->f.dtype;
    for (uint32_t i = 0, np = svc->nparams(s->c); i < np; i++) svc->param(s->c, i)->plugin_data = NULL;
    /* the whole point (with a pipeline): gradients accumulate locally, no
     * traffic before the boundary, then one reduce-scatter pass in the DP
     * group (overlap_comm: only the boundary micro-batch's backward can
     * overlap) */
    return zero__flat_buckets(&s->f, micro ? ZERO_BUCKETS_SCATTER : ZERO_BUCKETS_SCATTER_INPLACE, s->dp, !s->tmps,
                              &s->b);
}

static zero_status pp_grad_buffer(void *state, zero_param_info *p, void **buf) {
    stage1pp *s = state;
    if (s->tmps) return zero__grad_tmp(s->svc, p, s->f.esize, &p->plugin_data, buf, "stage1-pp");
    return s->svc->buckets_grad_slot(s->b, p->index, buf);
}

static zero_status pp_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    stage1pp *s = state;
    (void)stream;
    return zero__grad_ready(s->svc, s->b, p, s->tmps ? &p->plugin_data : NULL);
}

static zero_status pp_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    stage1pp *s = state;
    const zero_services *svc = s->svc;
    /* Off the boundary this only resets the buckets' bookkeeping: the
     * gradients stay in s->f.grads, summed locally. */
    zero_status st = svc->buckets_flush(s->b);
    if (st != ZERO_OK || !ctx->boundary) return st;
    /* Partial sums of squares of the owned, reduced ranges and the overflow
     * flag go in one fp64 all-reduce over the WHOLE world (every stage,
     * every partition): every rank sees the full model's norm and the same
     * overflow verdict.  grad_divisor = DP size * gas: the summed gradient
     * over the DP group and the M micro-batches, divided by it, is the mean
     * over the global batch. */
    return zero__flat_boundary(&s->f, ctx, rep);
}

/* Checkpoint: through the shared shard service (ckpt_shard), like stage
 * 0/1/2: "stage1-pp.params" (this rank's owned ranges of the stage's flat
 * params), ".master" (16-bit models), ".state<k>", each recorded in the
 * manifest with the flat ranges it holds, plus the window's gradient
 * ("stage1-pp.grads", the full flat accumulator: a save inside an
 * accumulation window resumes bitwise).  The core names the files per
 * pipeline stage and DP rank.  A checkpoint of another data-parallel size
 * (same pipeline split) reshards: the core serves ckpt_shard's reads from
 * the saver's files of this pipeline stage, and the gradient starts at zero
 * (resharding needs a boundary save). */
static zero_status pp_save(void *state, const char *dir) {
    stage1pp *s = state;
    return zero__flat_ckpt(&s->f, dir, "stage1-pp", "grads", 1);
}

static zero_status pp_load(void *state, const char *dir) {
    stage1pp *s = state;
    const zero_services *svc = s->svc;
    zero_status st = zero__flat_ckpt(&s->f, dir, "stage1-pp", "grads", 0);
    /* Agree over the whole job first: a shard missing on one rank fails the
     * load everywhere instead of leaving its DP group in the all-gather. */
    st = svc->ckpt_agree(s->c, s->global, st, dir, "stage1-pp");
    /* Every rank re-assembles the full params of its stage from the shards. */
    return st == ZERO_OK ? svc->allgather_shares(s->c, s->dp, s->f.params, s->f.dtype) : st;
}

static void pp_destroy(void *state) {
    stage1pp *s = state;
    if (!s) return;
    if (s->b) s->svc->buckets_destroy(s->b);
    if (s->tmps) zero__grad_tmps_free(s->svc); /* temporaries of params never reported ready */
    zero__flat_free(&s->f);
    free(s);
}

/* ABI 1.2: params_done's allocations (flat params, flat gradient
 * accumulator, partitioned master/states) and the in-place buckets, which
 * stage only for 16-bit gradients; per-param temporaries when the host's
 * dtype differs from the accumulation dtype.  Planned over the data-parallel
 * group: the world_size planned is the stage's DP size. */
static zero_status pp_plan(const zero_plan_services *ps) {
    const zero_run_config *rc = ps->config(ps->core);
    const zero_layout *L = ps->layout(ps->core);
    if (zero__reduce_every_micro_step(rc)) /* as pp_params_done: a partition accumulator and staging */
        zero__flat_plan(ps, 0, L->part_numel, ZERO_BUCKETS_SCATTER);
    else
        zero__flat_plan(ps, 0, L->flat_numel, ZERO_BUCKETS_SCATTER_INPLACE);
    if (zero__grad_dtype_of(rc) != rc->model_dtype) zero__grad_tmp_plan(ps);
    return ZERO_OK;
}

ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
    .struct_size = sizeof(zero_plugin_table),
    .abi_major = ZERO_PLUGIN_ABI_MAJOR,
    .abi_minor = ZERO_PLUGIN_ABI_MINOR,
    .caps = ZERO_PLUGIN_CAP_PIPELINE | ZERO_PLUGIN_CAP_GRAD_DTYPES | ZERO_PLUGIN_CAP_RESHARD,
    .name = "stage1-pp",
    .description = "ZeRO-1 inside pipeline parallelism: optimizer states partitioned over the stage's "
                   "data-parallel group; gradients accumulate locally over all micro-batches, one "
                   "reduce-scatter pass at the boundary; clip norm and overflow agreed over the whole world",
    .create = pp_create,
    .register_param = pp_register,
    .params_done = pp_params_done,
    .grad_buffer = pp_grad_buffer,
    .on_grad_ready = pp_on_grad_ready,
    .step = pp_step,
    .save = pp_save,
    .load = pp_load,
    .destroy = pp_destroy,
    .plan = pp_plan,
};
