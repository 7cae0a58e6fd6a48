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
 * fp32 models only for now: the params ARE the master weights (K = 8 bytes
 * of Adam state per element, divided by N).  Mixed precision will add an
 * fp32 master for the owned partition and a param_out copy.
 *
 * Includes only abi/ headers, like any third-party plugin. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero_plugin.h"

typedef struct stage1 {
    const zero_services_v1 *svc;
    zero_core *c;
    const zero_layout *L;
    zero_comm *world;
    float *params;            /* flat_numel: permanent full storage */
    float *grads;             /* flat_numel: window sum; owned ranges reduced at the boundary */
    float *state[4];          /* optimizer state, part_numel each */
    uint32_t nstate;
    zero_owned_range *owned;  /* this rank's share of each group */
    uint32_t nowned;
    size_t *counts;           /* ngroups * world all-gather block sizes (live while in flight) */
    zero_comm_req **reqs;     /* one per group */
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

static void *alloc_tagged(stage1 *s, zero_mem_tag tag, uint64_t numel) {
    return s->svc->mem_alloc(s->c, ZERO_TIER_DEVICE, tag, (size_t)numel * sizeof(float));
}

static zero_status s1_params_done(void *state) {
    stage1 *s = state;
    const zero_services_v1 *svc = s->svc;
    s->L = svc->layout(s->c);
    s->world = svc->comm_world(s->c);
    uint32_t np = svc->nparams(s->c);
    for (uint32_t i = 0; i < np; i++) {
        zero_param_info *p = svc->param(s->c, i);
        if (p->dtype != ZERO_DTYPE_F32 || p->init_device != ZERO_DEVICE_CPU)
            return svc->error(s->c, ZERO_ERR_UNSUPPORTED, "stage1: param '%s': only fp32 CPU params so far",
                              p->name);
    }
    const uint64_t flat = s->L->flat_numel, part = s->L->part_numel;
    s->params = alloc_tagged(s, ZERO_MEM_PARAMS, flat);
    s->grads = alloc_tagged(s, ZERO_MEM_GRADS, flat);
    s->nstate = svc->optim_state_count(s->c);
    uint32_t ng = s->L->ngroups;
    s->owned = calloc(ng ? ng : 1, sizeof *s->owned);
    s->counts = calloc((size_t)(ng ? ng : 1) * s->L->world, sizeof *s->counts);
    s->reqs = calloc(ng ? ng : 1, sizeof *s->reqs);
    int ok = s->params && s->grads && s->nstate <= 4 && s->owned && s->counts && s->reqs;
    for (uint32_t k = 0; ok && k < s->nstate; k++) ok = (s->state[k] = alloc_tagged(s, ZERO_MEM_OPTIM, part)) != NULL;
    if (!ok) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage1: cannot allocate model state (%llu elements)",
                               (unsigned long long)flat);
    s->nowned = flat ? svc->owned_ranges(s->c, s->L->rank, 0, flat, s->owned, ng) : 0;
    for (uint32_t i = 0; i < np; i++) {
        zero_param_info *p = svc->param(s->c, i);
        float *dst = s->params + p->flat_offset;
        if (p->init_data) svc->mem_copy(s->c, dst, p->init_data, (size_t)p->numel * sizeof(float));
        p->data = dst;
    }
    const zero_run_config *rc = svc->config(s->c);
    zero_bucket_spec spec = {0};
    spec.struct_size = sizeof spec;
    spec.mode = ZERO_BUCKETS_SCATTER_INPLACE;
    spec.bucket_numel = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    spec.overlap = rc->overlap_comm;
    spec.contiguous = 1;
    spec.flat = s->grads;
    spec.reduce_every_micro_step = 0; /* accumulate locally, reduce once per window */
    spec.grad_dtype = ZERO_DTYPE_F32;
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

/* All-gather every group's updated shares into the flat params, in place.
 * All groups are issued before any wait, in group order on every rank. */
static zero_status gather_params(stage1 *s) {
    const zero_services_v1 *svc = s->svc;
    zero_status st = ZERO_OK;
    uint32_t issued = 0;
    for (uint32_t g = 0; g < s->L->ngroups && st == ZERO_OK; g++) {
        const zero_layout_group *lg = &s->L->groups[g];
        if (lg->numel == 0) continue;
        size_t *counts = s->counts + (size_t)g * s->L->world;
        for (uint32_t r = 0; r < s->L->world; r++) counts[r] = (size_t)lg->part_numel;
        float *base = s->params + lg->flat_begin;
        st = svc->iallgatherv(s->world, base + (uint64_t)s->L->rank * lg->part_numel, base, counts,
                              ZERO_DTYPE_F32, &s->reqs[issued]);
        if (st == ZERO_OK) issued++;
    }
    for (uint32_t i = 0; i < issued; i++) {
        zero_status w = svc->wait(s->reqs[i]);
        if (st == ZERO_OK) st = w;
    }
    return st;
}

static zero_status s1_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    stage1 *s = state;
    const zero_services_v1 *svc = s->svc;
    zero_status st = svc->buckets_flush(s->b);
    if (st != ZERO_OK || !ctx->boundary) return st;
    const uint64_t flat = s->L->flat_numel;

    /* Only the owned ranges hold reduced sums: partial norm and overflow
     * flag, agreed in one fp64 all-reduce. */
    double agg[2] = {0.0, 0.0};
    for (uint32_t i = 0; i < s->nowned; i++) {
        const float *g = s->grads + s->owned[i].flat_lo;
        size_t n = (size_t)(s->owned[i].flat_hi - s->owned[i].flat_lo);
        agg[0] += svc->sumsq(s->c, g, ZERO_DTYPE_F32, n);
        if (svc->nonfinite(s->c, g, ZERO_DTYPE_F32, n)) agg[1] = 1.0;
    }
    if ((st = svc->allreduce(s->world, agg, 2, ZERO_DTYPE_F64, ZERO_OP_SUM)) != ZERO_OK) return st;
    if (agg[1] > 0 || !isfinite(agg[0])) {
        rep->overflow = 1;
        rep->grad_norm = -1.0;
        memset(s->grads, 0, (size_t)flat * sizeof(float));
        return ZERO_OK;
    }
    const double unscale = ctx->grad_divisor * ctx->loss_scale;
    double norm = sqrt(agg[0]) / unscale;
    double coef = (ctx->grad_clip > 0 && norm > ctx->grad_clip) ? ctx->grad_clip / (norm + 1e-6) : 1.0;
    rep->grad_norm = norm;

    for (uint32_t i = 0; i < s->nowned; i++) {
        const zero_owned_range *o = &s->owned[i];
        zero_opt_range r = {0};
        r.struct_size = sizeof r;
        r.flat_lo = o->flat_lo;
        r.flat_hi = o->flat_hi;
        r.master = s->params + o->flat_lo; /* fp32: params are the master weights */
        for (uint32_t k = 0; k < s->nstate; k++) r.state[k] = s->state[k] + o->part_lo;
        r.grad = s->grads + o->flat_lo;
        r.param_out_dtype = ZERO_DTYPE_F32;
        r.grad_mul = (float)(coef / unscale);
        r.grad_dtype = ZERO_DTYPE_F32;
        if ((st = svc->optim_step(s->c, &r)) != ZERO_OK) return st;
    }
    memset(s->grads, 0, (size_t)flat * sizeof(float));
    return gather_params(s);
}

/* Checkpoint: each rank writes its shard (atomic blobs): its owned
 * parameters, its optimizer state and the window's local gradient sum
 * (the full flat buffer: it is reduced only at the boundary), so a save in
 * the middle of an accumulation window resumes exactly.  Load reads the shard
 * and all-gathers the parameters; the ranks agree on the read status first
 * so a missing shard on one rank is an error everywhere, never a hang. */
static zero_status s1_blobs(stage1 *s, const char *dir, int write) {
    const zero_services_v1 *svc = s->svc;
    const size_t part = (size_t)s->L->part_numel;
    float *own = malloc((part ? part : 1) * sizeof(float));
    if (!own) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage1: checkpoint buffer");
    zero_status st = ZERO_OK;
    if (write) {
        for (uint32_t i = 0; i < s->nowned; i++)
            memcpy(own + s->owned[i].part_lo, s->params + s->owned[i].flat_lo,
                   (size_t)(s->owned[i].flat_hi - s->owned[i].flat_lo) * sizeof(float));
        st = svc->ckpt_write(s->c, dir, "stage1.params", own, part * sizeof(float));
    } else {
        st = svc->ckpt_read(s->c, dir, "stage1.params", own, part * sizeof(float));
        if (st == ZERO_OK)
            for (uint32_t i = 0; i < s->nowned; i++)
                memcpy(s->params + s->owned[i].flat_lo, own + s->owned[i].part_lo,
                       (size_t)(s->owned[i].flat_hi - s->owned[i].flat_lo) * sizeof(float));
    }
    free(own);
    if (st == ZERO_OK)
        st = write ? svc->ckpt_write(s->c, dir, "stage1.grads", s->grads, (size_t)s->L->flat_numel * sizeof(float))
                   : svc->ckpt_read(s->c, dir, "stage1.grads", s->grads, (size_t)s->L->flat_numel * sizeof(float));
    for (uint32_t k = 0; k < s->nstate && st == ZERO_OK; k++) {
        char name[32];
        snprintf(name, sizeof name, "stage1.state%u", k);
        st = write ? svc->ckpt_write(s->c, dir, name, s->state[k], part * sizeof(float))
                   : svc->ckpt_read(s->c, dir, name, s->state[k], part * sizeof(float));
    }
    return st;
}

static zero_status s1_save(void *state, const char *dir) { return s1_blobs(state, dir, 1); }

static zero_status s1_load(void *state, const char *dir) {
    stage1 *s = state;
    zero_status st = s1_blobs(s, dir, 0);
    double bad = st != ZERO_OK, any = bad;
    zero_status a = s->svc->allreduce(s->world, &any, 1, ZERO_DTYPE_F64, ZERO_OP_MAX);
    if (st != ZERO_OK) return st;
    if (a != ZERO_OK) return a;
    if (any > 0)
        return s->svc->error(s->c, ZERO_ERR_IO, "stage1: checkpoint %s: another rank could not read its shard", dir);
    return gather_params(s);
}

static void s1_destroy(void *state) {
    stage1 *s = state;
    if (!s) return;
    if (s->b) s->svc->buckets_destroy(s->b);
    for (uint32_t k = 0; k < 4; k++) s->svc->mem_free(s->c, s->state[k]);
    s->svc->mem_free(s->c, s->grads);
    s->svc->mem_free(s->c, s->params);
    free(s->owned);
    free(s->counts);
    free(s->reqs);
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
