/* stage0: plain data parallelism, the reference every other strategy is
 * checked against.
 *
 * Every rank keeps the full flat parameters, a full flat fp32 gradient that
 * accumulates over the micro-steps of a window, and the full optimizer
 * state.  During the boundary micro-step's backward the gradient buckets are
 * all-reduced (overlapping the host's backward when overlap_comm is on); at
 * the boundary every rank steps everything with identical inputs, so the
 * replicas stay identical without any parameter broadcast.
 *
 * fp32 models only for now: the params ARE the master weights (no extra fp32
 * copy, K = 8 bytes of Adam state per element).  Mixed precision will add a
 * master buffer and a param_out copy in step_all(); nothing else changes.
 *
 * Includes only abi/ headers, like any third-party plugin. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero_plugin.h"

typedef struct stage0 {
    const zero_services_v1 *svc;
    zero_core *c;
    const zero_layout *L;
    float *params;   /* flat_numel: every param's permanent storage */
    float *grads;    /* flat_numel: summed gradients of the window */
    float *state[4]; /* optimizer state, flat_numel each */
    uint32_t nstate;
    zero_buckets *b;
} stage0;

static zero_status s0_create(const zero_services_v1 *svc, void **state) {
    stage0 *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    s->c = svc->core;
    *state = s;
    return ZERO_OK;
}

static void *alloc_tagged(stage0 *s, zero_mem_tag tag, uint64_t numel) {
    return s->svc->mem_alloc(s->c, ZERO_TIER_DEVICE, tag, (size_t)numel * sizeof(float));
}

static zero_status s0_params_done(void *state) {
    stage0 *s = state;
    const zero_services_v1 *svc = s->svc;
    s->L = svc->layout(s->c);
    uint32_t np = svc->nparams(s->c);
    for (uint32_t i = 0; i < np; i++) {
        zero_param_info *p = svc->param(s->c, i);
        if (p->dtype != ZERO_DTYPE_F32 || p->init_device != ZERO_DEVICE_CPU)
            return svc->error(s->c, ZERO_ERR_UNSUPPORTED, "stage0: param '%s': only fp32 CPU params so far",
                              p->name);
    }
    const uint64_t flat = s->L->flat_numel;
    s->params = alloc_tagged(s, ZERO_MEM_PARAMS, flat);
    s->grads = alloc_tagged(s, ZERO_MEM_GRADS, flat);
    s->nstate = svc->optim_state_count(s->c);
    int ok = s->params && s->grads && s->nstate <= 4;
    for (uint32_t k = 0; ok && k < s->nstate; k++) ok = (s->state[k] = alloc_tagged(s, ZERO_MEM_OPTIM, flat)) != NULL;
    if (!ok) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "stage0: cannot allocate %llu-element model state",
                               (unsigned long long)flat);
    for (uint32_t i = 0; i < np; i++) {
        zero_param_info *p = svc->param(s->c, i);
        float *dst = s->params + p->flat_offset;
        if (p->init_data) svc->mem_copy(s->c, dst, p->init_data, (size_t)p->numel * sizeof(float));
        p->data = dst;
    }
    const zero_run_config *rc = svc->config(s->c);
    zero_bucket_spec spec = {0};
    spec.struct_size = sizeof spec;
    spec.mode = ZERO_BUCKETS_ALLREDUCE;
    spec.bucket_numel = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    spec.overlap = rc->overlap_comm;
    spec.contiguous = 1;
    spec.flat = s->grads;
    spec.reduce_every_micro_step = 0; /* accumulate locally, reduce once per window */
    spec.grad_dtype = ZERO_DTYPE_F32;
    return svc->buckets_create(s->c, &spec, &s->b);
}

static zero_status s0_grad_buffer(void *state, zero_param_info *p, void **buf) {
    stage0 *s = state;
    return s->svc->buckets_grad_slot(s->b, p->index, buf);
}

static zero_status s0_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    stage0 *s = state;
    (void)stream;
    const void *src = (p->host_grad && !p->grad_is_zero) ? p->host_grad : NULL;
    return s->svc->buckets_ready(s->b, p->index, src, p->dtype);
}

static zero_status s0_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    stage0 *s = state;
    const zero_services_v1 *svc = s->svc;
    zero_status st = svc->buckets_flush(s->b); /* every micro-step: resets the ready counts */
    if (st != ZERO_OK || !ctx->boundary) return st;
    const uint64_t flat = s->L->flat_numel;

    /* Every rank holds the same all-reduced sum, but agree on overflow
     * anyway: it costs one scalar and never lets replicas diverge. */
    double nonfinite = svc->nonfinite(s->c, s->grads, ZERO_DTYPE_F32, (size_t)flat) ? 1.0 : 0.0;
    if ((st = svc->allreduce(svc->comm_world(s->c), &nonfinite, 1, ZERO_DTYPE_F64, ZERO_OP_MAX)) != ZERO_OK)
        return st;
    if (nonfinite > 0) {
        rep->overflow = 1;
        rep->grad_norm = -1.0;
        memset(s->grads, 0, (size_t)flat * sizeof(float));
        return ZERO_OK;
    }
    /* Norm of the mean, unscaled gradient; DeepSpeed's clip coefficient. */
    const double unscale = ctx->grad_divisor * ctx->loss_scale;
    double norm = sqrt(svc->sumsq(s->c, s->grads, ZERO_DTYPE_F32, (size_t)flat)) / unscale;
    double coef = (ctx->grad_clip > 0 && norm > ctx->grad_clip) ? ctx->grad_clip / (norm + 1e-6) : 1.0;
    rep->grad_norm = norm;

    zero_opt_range r = {0};
    r.struct_size = sizeof r;
    r.flat_lo = 0;
    r.flat_hi = flat; /* the core splits it at group boundaries */
    r.master = s->params;
    for (uint32_t k = 0; k < s->nstate; k++) r.state[k] = s->state[k];
    r.grad = s->grads;
    r.param_out = NULL; /* fp32: the params are the master weights */
    r.param_out_dtype = ZERO_DTYPE_F32;
    r.grad_mul = (float)(coef / unscale);
    r.grad_dtype = ZERO_DTYPE_F32;
    if (flat && (st = svc->optim_step(s->c, &r)) != ZERO_OK) return st;
    memset(s->grads, 0, (size_t)flat * sizeof(float));
    return ZERO_OK;
}

/* Checkpoint: replicas are identical except for the window's local gradient
 * sum, which is saved too so that a save in the middle of an accumulation
 * window resumes exactly.  Each rank writes its own blobs (atomic). */
static zero_status s0_blobs(stage0 *s, const char *dir, int write) {
    const zero_services_v1 *svc = s->svc;
    const size_t bytes = (size_t)s->L->flat_numel * sizeof(float);
    float *bufs[6] = {s->params, s->grads, s->state[0], s->state[1], s->state[2], s->state[3]};
    const char *names[6] = {"stage0.params", "stage0.grads", "stage0.state0", "stage0.state1", "stage0.state2",
                            "stage0.state3"};
    zero_status st = ZERO_OK;
    for (uint32_t k = 0; k < 2 + s->nstate && st == ZERO_OK; k++)
        st = write ? svc->ckpt_write(s->c, dir, names[k], bufs[k], bytes)
                   : svc->ckpt_read(s->c, dir, names[k], bufs[k], bytes);
    return st;
}
static zero_status s0_save(void *state, const char *dir) { return s0_blobs(state, dir, 1); }
static zero_status s0_load(void *state, const char *dir) { return s0_blobs(state, dir, 0); }

static void s0_destroy(void *state) {
    stage0 *s = state;
    if (!s) return;
    if (s->b) s->svc->buckets_destroy(s->b);
    for (uint32_t k = 0; k < 4; k++) s->svc->mem_free(s->c, s->state[k]);
    s->svc->mem_free(s->c, s->grads);
    s->svc->mem_free(s->c, s->params);
    free(s);
}

ZERO_PLUGIN_EXPORT const zero_plugin_table_v1 zero_plugin_v1 = {
    .struct_size = sizeof(zero_plugin_table_v1),
    .abi_major = ZERO_PLUGIN_ABI_MAJOR,
    .abi_minor = ZERO_PLUGIN_ABI_MINOR,
    .caps = ZERO_PLUGIN_CAP_PIPELINE, /* reduces only at the boundary */
    .name = "stage0",
    .description = "plain data parallelism: full gradients all-reduced, every rank steps everything",
    .create = s0_create,
    .params_done = s0_params_done,
    .grad_buffer = s0_grad_buffer,
    .on_grad_ready = s0_on_grad_ready,
    .step = s0_step,
    .save = s0_save,
    .load = s0_load,
    .destroy = s0_destroy,
};
