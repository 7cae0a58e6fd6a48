/* offload: ZeRO-Offload as a libzero plugin (see offload.h for the tiers).
 *
 * Partitioning follows the config's zero_optimization.stage:
 *   stage 1: gradients accumulate in a full flat device buffer over the
 *     window and are reduce-scattered in place at the boundary (as stage1);
 *     with gradient_accumulation_steps > 1 (no pipeline,
 *     reduce_once_per_window off) the stage-2 partitioning below instead,
 *     so the sums are stage 2's bit for bit;
 *   stage 2 (and 0/3 when the plugin is chosen by name: logged): bounded
 *     staging buckets are reduce-scattered every micro-step and the owned
 *     block added into a device partition accumulator (as stage2).
 * Either way, at the boundary the owned partition's summed gradient is
 * copied to the host tier, the CPU optimizer (svc->part_step over
 * svc->optim_step, the vectorized kernels) steps the host fp32 master and
 * states, the new weights go back to the device parameters in the model
 * dtype, and the shares are all-gathered.
 *
 * The reduction machinery is the core's bucket engine and the norm / step /
 * all-gather are the core's shared step services; this plugin only places
 * the buffers in their tiers and moves the gradient between them. */
#include <stdlib.h>
#include <string.h>

#include "offload.h"

static zero_status of_create(const zero_services *svc, void **state) {
    offload *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    s->c = svc->core;
    *state = s;
    return ZERO_OK;
}

static void *alloc_n(offload *s, zero_mem_tier tier, zero_mem_tag tag, uint64_t numel, size_t esize) {
    return s->svc->mem_alloc(s->c, tier, tag, (size_t)numel * esize);
}

/* Which partitioning to run, from the config (see the file comment). */
static void choose_partitioning(offload *s, const zero_run_config *rc) {
    const zero_services *svc = s->svc;
    /* stage-1 partitioning with gradient accumulation reduces every
     * micro-step like stage 2 (bitwise stage 2's sums: zero_kit_glue.h,
     * zero_kit_reduce_every_micro_step) unless reduce_once_per_window */
    s->part_stage = rc->stage == 1 && !zero_kit_reduce_every_micro_step(rc) ? 1 : 2;
    if (rc->stage == 1 && s->part_stage == 2)
        svc->log(s->c, ZERO_LOG_DEBUG,
                 "offload: zero_optimization.stage 1 with gradient_accumulation_steps %lld: gradients are reduced "
                 "every micro-step into the partition (stage-2 partitioning; reduce_once_per_window for stage 1's)",
                 (long long)rc->grad_accum_steps);
    if (rc->stage != 1 && rc->stage != 2)
        svc->log(s->c, ZERO_LOG_WARN,
                 "offload: zero_optimization.stage is %d; offload partitions optimizer states and gradients "
                 "(stage-2 partitioning)%s",
                 (int)rc->stage,
                 rc->stage == 3 ? "; parameters are NOT partitioned by this plugin (plugin stage3 offloads with "
                                  "stage 3, the default for such a config)"
                                : "");
    if (!rc->offload_optimizer)
        svc->log(s->c, ZERO_LOG_INFO,
                 "offload: chosen by name without zero_optimization.offload_optimizer.device = \"cpu\"; "
                 "offloading anyway");
    s->pin_memory = rc->offload_pin_memory;
    /* No device backend is attached to the plugin's allocations on a CPU
     * build: the host tier is ordinary memory.  With the CUDA backend the
     * core allocates ZERO_TIER_HOST blocks with cudaHostAlloc (pinned), which
     * is what makes the gradient/parameter copies asynchronous DMA. */
    svc->log(s->c, ZERO_LOG_INFO,
             "offload: stage-%d partitioning; fp32 master and optimizer states in the host tier%s",
             s->part_stage, s->pin_memory ? " (pin_memory: pinned when a GPU backend is in use)" : "");
}

static zero_status of_params_done(void *state) {
    offload *s = state;
    const zero_services *svc = s->svc;
    s->L = svc->layout(s->c);
    s->world = svc->comm_world(s->c);
    const zero_run_config *rc = svc->config(s->c);
    zero_kit_dtypes(rc, &s->dtype, &s->esize, &s->gdtype, &s->gesize);
    const uint32_t np = svc->nparams(s->c);
    choose_partitioning(s, rc);
    const uint64_t flat = s->L->flat_numel, part = s->L->part_numel;
    const size_t es = s->esize;
    s->params = alloc_n(s, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, flat, es);
    s->dgrad = alloc_n(s, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, s->part_stage == 1 ? flat : part, s->gesize);
    s->master = alloc_n(s, ZERO_TIER_HOST, ZERO_MEM_MASTER, part, sizeof(float));
    s->hgrad = alloc_n(s, ZERO_TIER_HOST, ZERO_MEM_GRADS, part, s->gesize); /* >= es: also the copy-out staging */
    s->nstate = svc->optim_state_count(s->c);
    uint32_t ng = s->L->ngroups;
    s->owned = calloc(ng ? ng : 1, sizeof *s->owned);
    int ok = s->params && s->dgrad && s->master && s->hgrad && s->nstate <= 4 && s->owned;
    for (uint32_t k = 0; ok && k < s->nstate; k++)
        ok = (s->state[k] = alloc_n(s, ZERO_TIER_HOST, ZERO_MEM_OPTIM, part, sizeof(float))) != NULL;
    if (!ok)
        return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "offload: cannot allocate model state (%llu elements)",
                          (unsigned long long)flat);
    s->nowned = flat ? svc->owned_ranges(s->c, s->L->rank, 0, flat, s->owned, ng) : 0;
    /* initial values (host or device memory) into the device params; the
     * host master widened (exactly) from this rank's shares of them */
    zero_status st = svc->params_place(s->c, s->params, s->dtype, "offload");
    zero_part_step ps = zero__of_part_step(s);
    if (st == ZERO_OK) st = svc->master_init(s->c, &ps, s->params);
    if (st != ZERO_OK) return st;
    for (uint32_t i = 0; i < np; i++) /* per-param temporary gradient (stage 2, contiguous_gradients off) */
        svc->param(s->c, i)->plugin_data = NULL;
    /* fp32 accumulation of a 16-bit model: the slots are fp32, the host
     * writes model-dtype temporaries widened in at on_grad_ready */
    s->contiguous = s->gdtype != s->dtype ? 0 : s->part_stage == 1 ? 1 : rc->contiguous_gradients;
    /* stage 1: the flat window sum, reduced once per window; stage 2: the
     * partition accumulator, reduced every micro-step (the staging cannot
     * hold a window's sum) */
    zero_bucket_spec spec = zero_kit_bucket_spec(
        svc, s->part_stage == 1 ? ZERO_BUCKETS_SCATTER_INPLACE : ZERO_BUCKETS_SCATTER, NULL, s->contiguous, s->dgrad);
    spec.on_block_final = zero__of_block_final; /* gradient to host as buckets complete */
    spec.on_block_final_user = s;
    return zero_kit_bsets_create(&s->bs, svc, &spec); /* (1.3) one set per partition communicator */
}

/* Thread-safe for distinct params: each touches only its own plugin_data. */
static zero_status of_grad_buffer(void *state, zero_param_info *p, void **buf) {
    offload *s = state;
    if (s->contiguous) return s->svc->buckets_grad_slot(zero_kit_bsets_of(&s->bs, p->index), p->index, buf);
    return zero_kit_grad_tmp(s->svc, p, s->esize, &p->plugin_data, buf, "offload");
}

static zero_status of_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    offload *s = state;
    (void)stream;
    return zero_kit_grad_ready(s->svc, zero_kit_bsets_of(&s->bs, p->index), p, &p->plugin_data);
}

static zero_status of_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    offload *s = state;
    s->in_flush = 1; /* on_block_final calls from here on are not during backward */
    zero_status st = zero_kit_bsets_flush(&s->bs); /* reduces what is left of this micro-step */
    s->in_flush = 0;
    if (st != ZERO_OK || !ctx->boundary) return st;
    return zero__of_boundary(s, ctx, rep);
}

static void of_destroy(void *state) {
    offload *s = state;
    if (!s) return;
    const zero_services *svc = s->svc;
    if (s->steps)
        svc->log(s->c, ZERO_LOG_INFO,
                 "offload: %llu steps, %llu with the gradient copied to host bucket by bucket (%.1f%% of it "
                 "before zero_step, during backward); per step: bucket copies %.3f ms, device clear and "
                 "remaining copies at the step %.3f ms, CPU optimizer %.3f ms, params to device + all-gather %.3f ms",
                 (unsigned long long)s->steps, (unsigned long long)s->early_steps,
                 s->copied_numel ? 100.0 * (double)s->backward_numel / (double)s->copied_numel : 0.0,
                 1e3 * s->t_d2h_early / (double)s->steps, 1e3 * s->t_d2h / (double)s->steps,
                 1e3 * s->t_cpu_step / (double)s->steps, 1e3 * s->t_h2d_gather / (double)s->steps);
    zero_kit_bsets_destroy(&s->bs);
    zero_kit_grad_tmps_free(svc); /* temporaries of params never reported ready */
    for (uint32_t k = 0; k < 4; k++) svc->mem_free(s->c, s->state[k]);
    svc->mem_free(s->c, s->hgrad);
    svc->mem_free(s->c, s->master);
    svc->mem_free(s->c, s->dgrad);
    svc->mem_free(s->c, s->params);
    free(s->owned);
    free(s);
}

/* ABI 1.2: of_params_done's allocations without allocating: params and
 * the device gradient (flat for stage-1 partitioning, else the partition)
 * in the device tier; fp32 master, host gradient and optimizer states of
 * the partition in the host tier; the bucket staging; per-param gradient
 * temporaries when contiguous gradients are off. */
static zero_status of_plan(const zero_plan_services *ps) {
    zero_core *c = ps->core;
    const zero_run_config *rc = ps->config(c);
    const zero_layout *L = ps->layout(c);
    const int part_stage = rc->stage == 1 && !zero_kit_reduce_every_micro_step(rc) ? 1 : 2; /* choose_partitioning */
    const zero_dtype gdt = zero_kit_grad_dtype(rc);
    const uint64_t es = zero_kit_dtype_size(rc->model_dtype), ges = zero_kit_dtype_size(gdt);
    const uint64_t flat = L->flat_numel, part = L->part_numel;
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, flat * es);
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, (part_stage == 1 ? flat : part) * ges);
    ps->add(c, ZERO_TIER_HOST, ZERO_MEM_MASTER, part * sizeof(float));
    ps->add(c, ZERO_TIER_HOST, ZERO_MEM_GRADS, part * ges);
    ps->add(c, ZERO_TIER_HOST, ZERO_MEM_OPTIM, (uint64_t)ps->optim_state_count(c) * part * sizeof(float));
    zero_bucket_spec spec =
        zero_kit_plan_bucket_spec(ps, part_stage == 1 ? ZERO_BUCKETS_SCATTER_INPLACE : ZERO_BUCKETS_SCATTER);
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, ps->buckets_bytes(c, &spec));
    const int contiguous = gdt != rc->model_dtype ? 0 : part_stage == 1 ? 1 : rc->contiguous_gradients;
    if (!contiguous) zero_kit_grad_tmp_plan(ps);
    zero_kit_step_tile_plan(ps, 1); /* the step's fp32 tile (16-bit gradients with experts / max_group_size) */
    return ZERO_OK;
}

ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
    ZERO_PLUGIN_TABLE_HEAD,
    .caps = ZERO_PLUGIN_CAP_OFFLOAD | ZERO_PLUGIN_CAP_GRAD_DTYPES | ZERO_PLUGIN_CAP_RESHARD |
            ZERO_PLUGIN_CAP_EXPERT_GROUPS,
    .name = "offload",
    .description = "ZeRO-Offload: stage-1/2 partitioning with the fp32 master and optimizer states in host "
                   "memory, stepped by the vectorized CPU optimizer",
    .create = of_create,
    .params_done = of_params_done,
    .grad_buffer = of_grad_buffer,
    .on_grad_ready = of_on_grad_ready,
    .step = of_step,
    .save = zero__of_save,
    .load = zero__of_load,
    .write_params = zero__of_write_params,
    .destroy = of_destroy,
    .plan = of_plan,
};
