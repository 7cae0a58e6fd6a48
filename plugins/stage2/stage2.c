/* stage2: ZeRO stage 2, optimizer states and gradients partitioned.
 *
 * No full gradient ever exists.  Every micro-step, gradients go into the
 * bucket engine's bounded staging slots; each complete bucket is
 * reduce-scattered (during backward with overlap_comm) and this rank's block
 * is ADDED into a part_numel fp32 accumulator, which therefore holds the
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
 * fp32 models only for now: the params ARE the master weights.  Mixed
 * precision will add an fp32 master for the partition and a param_out copy.
 *
 * Includes only abi/ headers, like any third-party plugin. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero_plugin.h"

typedef struct stage2 {
    const zero_services_v1 *svc;
    zero_core *c;
    const zero_layout *L;
    zero_comm *world;
    int contiguous;
    float *params;            /* flat_numel: permanent full storage */
    float *part;              /* part_numel: summed gradient of the owned partition */
    float *state[4];          /* optimizer state, part_numel each */
    uint32_t nstate;
    zero_owned_range *owned;
    uint32_t nowned;
    size_t *counts;           /* ngroups * world all-gather block sizes */
    zero_comm_req **reqs;
    zero_buckets *b;
} stage2;

static zero_status s2_create(const zero_services_v1 *svc, void **state) {
    stage2 *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    s->c = svc->core;
    *state = s;
    return ZERO_OK;
}

static void *alloc_tagged(stage2 *s, zero_mem_tag tag, uint64_t numel) {
    return s->svc->mem_alloc(s->c, ZERO_TIER_DEVICE, tag, (size_t)numel * sizeof(float));
}

static zero_status s2_params_done(void *state) {
    stage2 *s = state;
    const zero_services_v1 *svc = s->svc;
    s->L = svc->layout(s->c);
    s->world = svc->comm_world(s->c);
    uint32_t np = svc->nparams(s->c);
    for (uint32_t i = 0; i < np; i++) {
        zero_param_info *p = svc->param(s->c, i);
        if (p->dtype != ZERO_DTYPE_F32 || p->init_device != ZERO_DEVICE_CPU)
            return svc->error(s->c, ZERO_ERR_UNSUPPORTED, "stage2: param '%s': only fp32 CPU params so far",
                              p->name);
    }
    const uint64_t flat = s->L->flat_numel, part = s->L->part_numel;
    s->params = alloc_tagged(s, ZERO_MEM_PARAMS, flat);
    s->part = alloc_tagged(s, ZERO_MEM_GRADS, part);
    s->nstate = svc->optim_state_count(s->c);
    uint32_t ng = s->L->ngroups;
    s->owned = calloc(ng ? ng : 1, sizeof *s->owned);
    s->counts = calloc((size_t)(ng ? ng : 1) * s->L->world, sizeof *s->counts);
    s->reqs = calloc(ng ? ng : 1, sizeof *s->reqs);
    int ok = s->params && s->part && s->nstate <= 4 && s->owned && s->counts && s->reqs;
    for (uint32_t k = 0; ok && k < s->nstate; k++) ok = (s->state[k] = alloc_tagged(s, ZERO_MEM_OPTIM, part)) != NULL;
    if (!ok) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage2: cannot allocate model state (%llu elements)",
                               (unsigned long long)flat);
    s->nowned = flat ? svc->owned_ranges(s->c, s->L->rank, 0, flat, s->owned, ng) : 0;
    for (uint32_t i = 0; i < np; i++) {
        zero_param_info *p = svc->param(s->c, i);
        float *dst = s->params + p->flat_offset;
        if (p->init_data) svc->mem_copy(s->c, dst, p->init_data, (size_t)p->numel * sizeof(float));
        p->data = dst;
        p->plugin_data = NULL; /* per-param temporary gradient (contiguous_gradients off) */
    }
    const zero_run_config *rc = svc->config(s->c);
    s->contiguous = rc->contiguous_gradients;
    zero_bucket_spec spec = {0};
    spec.struct_size = sizeof spec;
    spec.mode = ZERO_BUCKETS_SCATTER;
    spec.bucket_numel = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    spec.overlap = rc->overlap_comm;
    spec.contiguous = s->contiguous;
    spec.partition = s->part;
    spec.reduce_every_micro_step = 1; /* the staging cannot hold a window's sum */
    spec.grad_dtype = ZERO_DTYPE_F32;
    return svc->buckets_create(s->c, &spec, &s->b);
}

/* Thread-safe for distinct params: each touches only its own plugin_data. */
static zero_status s2_grad_buffer(void *state, zero_param_info *p, void **buf) {
    stage2 *s = state;
    if (s->contiguous) return s->svc->buckets_grad_slot(s->b, p->index, buf);
    if (!p->plugin_data) {
        p->plugin_data = alloc_tagged(s, ZERO_MEM_GRADS, p->numel);
        if (!p->plugin_data)
            return s->svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage2: no memory for the gradient of '%s'", p->name);
    }
    *buf = p->plugin_data;
    return ZERO_OK;
}

static zero_status s2_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    stage2 *s = state;
    (void)stream;
    const zero_services_v1 *svc = s->svc;
    void *tmp = p->plugin_data;
    zero_status st;
    if (tmp) {
        p->plugin_data = NULL;
        st = svc->buckets_ready(s->b, p->index, p->grad_is_zero ? NULL : tmp, ZERO_DTYPE_F32);
        svc->mem_free(s->c, tmp);
        return st;
    }
    const void *src = (p->host_grad && !p->grad_is_zero) ? p->host_grad : NULL;
    return svc->buckets_ready(s->b, p->index, src, p->dtype);
}

static zero_status gather_params(stage2 *s) {
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

static zero_status s2_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    stage2 *s = state;
    const zero_services_v1 *svc = s->svc;
    zero_status st = svc->buckets_flush(s->b); /* reduces what is left of this micro-step */
    if (st != ZERO_OK || !ctx->boundary) return st;
    const uint64_t part = s->L->part_numel;

    double agg[2];
    agg[0] = svc->sumsq(s->c, s->part, ZERO_DTYPE_F32, (size_t)part);
    agg[1] = svc->nonfinite(s->c, s->part, ZERO_DTYPE_F32, (size_t)part) ? 1.0 : 0.0;
    if ((st = svc->allreduce(s->world, agg, 2, ZERO_DTYPE_F64, ZERO_OP_SUM)) != ZERO_OK) return st;
    if (agg[1] > 0 || !isfinite(agg[0])) {
        rep->overflow = 1;
        rep->grad_norm = -1.0;
        memset(s->part, 0, (size_t)part * sizeof(float));
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
        r.grad = s->part + o->part_lo;
        r.param_out_dtype = ZERO_DTYPE_F32;
        r.grad_mul = (float)(coef / unscale);
        r.grad_dtype = ZERO_DTYPE_F32;
        if ((st = svc->optim_step(s->c, &r)) != ZERO_OK) return st;
    }
    memset(s->part, 0, (size_t)part * sizeof(float));
    return gather_params(s);
}

/* Checkpoint: each rank writes its shard (atomic blobs): its owned
 * parameters, its optimizer state and the partition's gradient
 * accumulator, so a save in the middle of an accumulation window resumes
 * exactly.  Load reads the shard
 * and all-gathers the parameters; the ranks agree on the read status first
 * so a missing shard on one rank is an error everywhere, never a hang. */
static zero_status s2_blobs(stage2 *s, const char *dir, int write) {
    const zero_services_v1 *svc = s->svc;
    const size_t part = (size_t)s->L->part_numel;
    float *own = malloc((part ? part : 1) * sizeof(float));
    if (!own) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage2: checkpoint buffer");
    zero_status st = ZERO_OK;
    if (write) {
        for (uint32_t i = 0; i < s->nowned; i++)
            memcpy(own + s->owned[i].part_lo, s->params + s->owned[i].flat_lo,
                   (size_t)(s->owned[i].flat_hi - s->owned[i].flat_lo) * sizeof(float));
        st = svc->ckpt_write(s->c, dir, "stage2.params", own, part * sizeof(float));
    } else {
        st = svc->ckpt_read(s->c, dir, "stage2.params", own, part * sizeof(float));
        if (st == ZERO_OK)
            for (uint32_t i = 0; i < s->nowned; i++)
                memcpy(s->params + s->owned[i].flat_lo, own + s->owned[i].part_lo,
                       (size_t)(s->owned[i].flat_hi - s->owned[i].flat_lo) * sizeof(float));
    }
    free(own);
    if (st == ZERO_OK)
        st = write ? svc->ckpt_write(s->c, dir, "stage2.part", s->part, (size_t)s->L->part_numel * sizeof(float))
                   : svc->ckpt_read(s->c, dir, "stage2.part", s->part, (size_t)s->L->part_numel * sizeof(float));
    for (uint32_t k = 0; k < s->nstate && st == ZERO_OK; k++) {
        char name[32];
        snprintf(name, sizeof name, "stage2.state%u", k);
        st = write ? svc->ckpt_write(s->c, dir, name, s->state[k], part * sizeof(float))
                   : svc->ckpt_read(s->c, dir, name, s->state[k], part * sizeof(float));
    }
    return st;
}

static zero_status s2_save(void *state, const char *dir) { return s2_blobs(state, dir, 1); }

static zero_status s2_load(void *state, const char *dir) {
    stage2 *s = state;
    zero_status st = s2_blobs(s, dir, 0);
    double bad = st != ZERO_OK, any = bad;
    zero_status a = s->svc->allreduce(s->world, &any, 1, ZERO_DTYPE_F64, ZERO_OP_MAX);
    if (st != ZERO_OK) return st;
    if (a != ZERO_OK) return a;
    if (any > 0)
        return s->svc->error(s->c, ZERO_ERR_IO, "stage2: checkpoint %s: another rank could not read its shard", dir);
    return gather_params(s);
}

static void s2_destroy(void *state) {
    stage2 *s = state;
    if (!s) return;
    if (s->b) s->svc->buckets_destroy(s->b);
    uint32_t np = s->L ? s->svc->nparams(s->c) : 0;
    for (uint32_t i = 0; i < np; i++) { /* temporaries of params never reported ready */
        zero_param_info *p = s->svc->param(s->c, i);
        if (p && p->plugin_data) {
            s->svc->mem_free(s->c, p->plugin_data);
            p->plugin_data = NULL;
        }
    }
    for (uint32_t k = 0; k < 4; k++) s->svc->mem_free(s->c, s->state[k]);
    s->svc->mem_free(s->c, s->part);
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
    .name = "stage2",
    .description = "ZeRO-2: optimizer states and gradients partitioned; buckets reduce-scattered during backward",
    .create = s2_create,
    .params_done = s2_params_done,
    .grad_buffer = s2_grad_buffer,
    .on_grad_ready = s2_on_grad_ready,
    .step = s2_step,
    .save = s2_save,
    .load = s2_load,
    .destroy = s2_destroy,
};
