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
 * Includes only abi/ headers, like any third-party plugin. */
#include <stdio.h>
#include <stdlib.h>

#include "zero_plugin.h"

typedef struct stage1 {
    const zero_services_v1 *svc;
    zero_core *c;
    const zero_layout *L;
    zero_comm *world;
    zero_dtype dtype;         /* model dtype of params and grads */
    size_t esize;
    void *params;             /* flat_numel: permanent full storage */
    void *grads;              /* flat_numel: window sum; owned ranges reduced at the boundary */
    float *master;            /* fp32: == params (flat-indexed); 16-bit: part_numel (partition-indexed) */
    float *state[4];          /* optimizer state, part_numel each */
    uint32_t nstate;
    zero_owned_range *owned;  /* this rank's share of each group */
    uint32_t nowned;
    zero_buckets *b;
} stage1;

static zero_status s1_create(const zero_services_v1 *svc, void **state) {
    stage1 *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    s->c = svc->core;
    *state = s;
    return ZERO_OK;
}

static void *alloc_tagged(stage1 *s, zero_mem_tag tag, uint64_t numel, size_t esize) {
    return s->svc->mem_alloc(s->c, ZERO_TIER_DEVICE, tag, (size_t)numel * esize);
}

static int mixed(const stage1 *s) { return (void *)s->master != s->params; }

/* The step: the reduced gradient sits at the owned ranges of the flat
 * buffer (flat-indexed); master and states are partition-indexed (fp32: the
 * master is the flat params themselves). */
static zero_part_step part_step_of(stage1 *s) {
    zero_part_step ps = {0};
    ps.struct_size = sizeof ps;
    ps.nranges = s->nowned;
    ps.ranges = s->owned;
    ps.norm_comm = s->world;
    ps.dtype = s->dtype;
    ps.grad = s->grads;
    ps.grad_index = ZERO_INDEX_FLAT;
    ps.master = s->master;
    ps.master_index = mixed(s) ? ZERO_INDEX_PART : ZERO_INDEX_FLAT;
    for (uint32_t k = 0; k < s->nstate; k++) ps.state[k] = s->state[k];
    ps.param_out = mixed(s) ? s->params : NULL;
    ps.param_out_index = ZERO_INDEX_FLAT;
    return ps;
}

static zero_status s1_params_done(void *state) {
    stage1 *s = state;
    const zero_services_v1 *svc = s->svc;
    if (!ZERO_SERVICES_HAS(svc, ckpt_agree))
        return svc->error(s->c, ZERO_ERR_UNSUPPORTED, "stage1: the core lacks the partition step services");
    const zero_run_config *rc = svc->config(s->c);
    s->L = svc->layout(s->c);
    s->world = svc->comm_world(s->c);
    s->dtype = rc->model_dtype;
    s->esize = s->dtype == ZERO_DTYPE_F32 ? 4 : 2;
    const uint64_t flat = s->L->flat_numel, part = s->L->part_numel;
    s->params = alloc_tagged(s, ZERO_MEM_PARAMS, flat, s->esize);
    s->grads = alloc_tagged(s, ZERO_MEM_GRADS, flat, s->esize);
    s->master = s->dtype == ZERO_DTYPE_F32 ? s->params : alloc_tagged(s, ZERO_MEM_MASTER, part, sizeof(float));
    s->nstate = svc->optim_state_count(s->c);
    uint32_t ng = s->L->ngroups;
    s->owned = calloc(ng ? ng : 1, sizeof *s->owned);
    int ok = s->params && s->grads && s->master && s->nstate <= 4 && s->owned;
    for (uint32_t k = 0; ok && k < s->nstate; k++)
        ok = (s->state[k] = alloc_tagged(s, ZERO_MEM_OPTIM, part, sizeof(float))) != NULL;
    if (!ok) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage1: cannot allocate model state (%llu elements)",
                               (unsigned long long)flat);
    s->nowned = flat ? svc->owned_ranges(s->c, s->L->rank, 0, flat, s->owned, ng) : 0;
    /* initial values (host or device memory) into the flat params; the
     * master of the owned share (16-bit model) widened from them */
    zero_status st = svc->params_place(s->c, s->params, s->dtype, "stage1");
    zero_part_step ps = part_step_of(s);
    if (st == ZERO_OK) st = svc->master_init(s->c, &ps, s->params);
    if (st != ZERO_OK) return st;
    zero_bucket_spec spec = {0};
    spec.struct_size = sizeof spec;
    spec.mode = ZERO_BUCKETS_SCATTER_INPLACE;
    spec.bucket_numel = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    spec.overlap = rc->overlap_comm;
    spec.contiguous = 1;
    spec.flat = s->grads;
    spec.reduce_every_micro_step = 0; /* accumulate locally, reduce once per window */
    spec.grad_dtype = s->dtype;
    return svc->buckets_create(s->c, &spec, &s->b);
}

static zero_status s1_grad_buffer(void *state, zero_param_info *p, void **buf) {
    stage1 *s = state;
    return s->svc->buckets_grad_slot(s->b, p->index, buf);
}

static zero_status s1_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    stage1 *s = state;
    (void)stream;
    const void *src = (p->host_grad && !p->grad_is_zero) ? p->host_grad : NULL;
    return s->svc->buckets_ready(s->b, p->index, src, p->dtype);
}

static zero_status s1_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    stage1 *s = state;
    const zero_services_v1 *svc = s->svc;
    zero_status st = svc->buckets_flush(s->b);
    if (st != ZERO_OK || !ctx->boundary) return st;
    zero_part_step ps = part_step_of(s);
    st = svc->boundary_step(s->c, &ps, ctx, rep);
    svc->mem_set(s->c, s->grads, 0, (size_t)s->L->flat_numel * s->esize);
    if (st != ZERO_OK || rep->overflow) return st;
    return svc->allgather_shares(s->c, s->world, s->params, s->dtype);
}

/* Checkpoint: each rank writes its shard (atomic blobs): its owned
 * parameters, its optimizer state and the window's local gradient sum
 * (the full flat buffer: it is reduced only at the boundary), so a save in
 * the middle of an accumulation window resumes exactly.  Load reads the shard
 * and all-gathers the parameters; the ranks agree on the read status first
 * so a missing shard on one rank is an error everywhere, never a hang. */
static zero_status s1_blobs(stage1 *s, const char *dir, int write) {
    const zero_services_v1 *svc = s->svc;
    const size_t bytes = (size_t)s->L->flat_numel * s->esize;
    zero_part_step ps = part_step_of(s);
    zero_status st = svc->ckpt_shard(s->c, dir, "stage1", &ps, s->params, write);
    if (st == ZERO_OK)
        st = write ? svc->ckpt_write(s->c, dir, "stage1.grads", s->grads, bytes)
                   : svc->ckpt_read(s->c, dir, "stage1.grads", s->grads, bytes);
    return st;
}

static zero_status s1_save(void *state, const char *dir) { return s1_blobs(state, dir, 1); }

static zero_status s1_load(void *state, const char *dir) {
    stage1 *s = state;
    zero_status st = s->svc->ckpt_agree(s->c, s->world, s1_blobs(s, dir, 0), dir, "stage1");
    if (st != ZERO_OK) return st;
    return s->svc->allgather_shares(s->c, s->world, s->params, s->dtype);
}

static void s1_destroy(void *state) {
    stage1 *s = state;
    if (!s) return;
    if (s->b) s->svc->buckets_destroy(s->b);
    for (uint32_t k = 0; k < 4; k++) s->svc->mem_free(s->c, s->state[k]);
    s->svc->mem_free(s->c, s->grads);
    if (mixed(s)) s->svc->mem_free(s->c, s->master);
    s->svc->mem_free(s->c, s->params);
    free(s->owned);
    free(s);
}

ZERO_PLUGIN_EXPORT const zero_plugin_table_v1 zero_plugin_v1 = {
    .struct_size = sizeof(zero_plugin_table_v1),
    .abi_major = ZERO_PLUGIN_ABI_MAJOR,
    .abi_minor = ZERO_PLUGIN_ABI_MINOR,
    .caps = 0,
    .name = "stage1",
    .description = "ZeRO-1: optimizer states partitioned; gradients reduce-scattered at the boundary, "
                   "updated params all-gathered",
    .create = s1_create,
    .params_done = s1_params_done,
    .grad_buffer = s1_grad_buffer,
    .on_grad_ready = s1_on_grad_ready,
    .step = s1_step,
    .save = s1_save,
    .load = s1_load,
    .destroy = s1_destroy,
};
