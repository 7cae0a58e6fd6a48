/* template-dp: a complete libzero strategy plugin to copy and modify.
 *
 * Strategy: plain data parallelism.  Every rank keeps the full parameters,
 * a full fp32 gradient buffer and the full optimizer state.  Gradients are
 * all-reduced by the core's bucket engine (ZERO_BUCKETS_ALLREDUCE) once per
 * accumulation window, then every rank runs the same optimizer step over
 * everything, so the replicas stay identical without broadcasting weights.
 * This is ZeRO stage 0; a partitioned strategy changes which ranges a rank
 * allocates and steps (see the layout/owned_ranges services).
 *
 * Rules a plugin follows (README.md in this folder explains each function):
 *  - include only the installed libzero headers (zero.h, zero_plugin.h);
 *  - allocate through svc->mem_alloc so memory shows in zero_memory_stats;
 *  - report errors with svc->error(...) so the host sees a clear message;
 *  - export exactly one symbol, the table `zero_plugin_v2` (everything else
 *    is static / hidden).
 * fp32 parameters only, to keep the template short. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero_plugin.h"

typedef struct tdp {
    const zero_services *svc; /* the core's services, valid until destroy */
    zero_core *c;
    uint64_t flat;               /* elements in the flat space (all groups, padded) */
    float *params;               /* flat: permanent storage of every param (they ARE the fp32 master) */
    float *grads;                /* flat: gradients summed over the window */
    float *state[4];             /* optimizer state arrays (Adam: m, v) */
    uint32_t nstate;
    zero_buckets *buckets;
} tdp;

/* create: allocate plugin state and keep `svc`.  Parameters are not known
 * yet; only the config is.  Check here what this strategy cannot do, so the
 * host fails at zero_engine_create with a clear message. */
static zero_status tdp_create(const zero_services *svc, void **state) {
    const zero_run_config *rc = svc->config(svc->core);
    if (rc->model_dtype != ZERO_DTYPE_F32)
        return svc->error(svc->core, ZERO_ERR_UNSUPPORTED,
                          "template-dp: fp32 models only (disable fp16/bf16 in the config)");
    tdp *s = calloc(1, sizeof *s);
    if (!s) return svc->error(svc->core, ZERO_ERR_OUT_OF_MEMORY, "template-dp: out of memory");
    s->svc = svc;
    s->c = svc->core;
    *state = s;
    return ZERO_OK;
}

static float *alloc_f32(tdp *s, zero_mem_tag tag, uint64_t n) {
    return s->svc->mem_alloc(s->c, ZERO_TIER_DEVICE, tag, (size_t)n * sizeof(float));
}

/* params_done: the layout is frozen.  Allocate storage, copy the host's
 * initial values (init_data is valid only during this call) and point every
 * param's `data` at its permanent storage, then set up the buckets. */
static zero_status tdp_params_done(void *state) {
    tdp *s = state;
    const zero_services *svc = s->svc;
    const uint32_t np = svc->nparams(s->c);
    for (uint32_t i = 0; i < np; ++i) {
        const zero_param_info *p = svc->param(s->c, i);
        if (p->dtype != ZERO_DTYPE_F32 || p->init_device != ZERO_DEVICE_CPU)
            return svc->error(s->c, ZERO_ERR_UNSUPPORTED, "template-dp: param '%s' is not an fp32 CPU tensor",
                              p->name);
    }
    s->flat = svc->layout(s->c)->flat_numel;
    s->params = alloc_f32(s, ZERO_MEM_PARAMS, s->flat);
    s->grads = alloc_f32(s, ZERO_MEM_GRADS, s->flat);
    s->nstate = svc->optim_state_count(s->c);
    int ok = s->params && s->grads && s->nstate <= 4;
    for (uint32_t k = 0; ok && k < s->nstate; ++k) ok = (s->state[k] = alloc_f32(s, ZERO_MEM_OPTIM, s->flat)) != NULL;
    if (!ok) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, "template-dp: cannot allocate the model state");
    for (uint32_t i = 0; i < np; ++i) {
        zero_param_info *p = svc->param(s->c, i);
        p->data = s->params + p->flat_offset;
        if (p->init_data) svc->mem_copy(s->c, p->data, p->init_data, (size_t)p->numel * sizeof(float));
    }
    /* One flat fp32 gradient; buckets are all-reduced in place.  Reducing
     * only at the boundary (not every micro-step) is what plain DP does. */
    const zero_run_config *rc = svc->config(s->c);
    zero_bucket_spec spec = {0};
    spec.struct_size = sizeof spec;
    spec.mode = ZERO_BUCKETS_ALLREDUCE;
    spec.comm = NULL; /* world */
    spec.bucket_numel = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    spec.overlap = rc->overlap_comm;
    spec.contiguous = 1;
    spec.flat = s->grads;
    spec.reduce_every_micro_step = 0;
    spec.grad_dtype = ZERO_DTYPE_F32;
    return svc->buckets_create(s->c, &spec, &s->buckets);
}

/* grad_buffer: where the host ADDS p's gradient this micro-step: its slot in
 * the flat gradient.  May run concurrently for different params. */
static zero_status tdp_grad_buffer(void *state, zero_param_info *p, void **buf) {
    tdp *s = state;
    return s->svc->buckets_grad_slot(s->buckets, p->index, buf);
}

/* on_grad_ready: p's gradient is final.  If the host keeps its own gradient
 * buffer (host_grad), the bucket engine adds it into the slot; grad_is_zero
 * means the host never produced one this micro-step. */
static zero_status tdp_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    tdp *s = state;
    (void)stream;
    const void *src = (p->host_grad && !p->grad_is_zero) ? p->host_grad : NULL;
    return s->svc->buckets_ready(s->buckets, p->index, src, p->dtype);
}

/* step: end of a micro-step.  Flush the buckets (at the boundary this
 * completes the all-reduce); at the boundary check overflow, compute the
 * global norm, clip and step the optimizer over the whole flat space. */
static zero_status tdp_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    tdp *s = state;
    const zero_services *svc = s->svc;
    zero_status st = svc->buckets_flush(s->buckets);
    if (st != ZERO_OK || !ctx->boundary) return st;

    /* After the all-reduce every rank holds the same sum, so local checks
     * agree across ranks; a partitioned plugin would all-reduce these. */
    if (svc->nonfinite(s->c, s->grads, ZERO_DTYPE_F32, (size_t)s->flat)) {
        rep->overflow = 1;
        rep->grad_norm = -1;
        memset(s->grads, 0, (size_t)s->flat * sizeof(float));
        return ZERO_OK;
    }
    const double unscale = ctx->grad_divisor * ctx->loss_scale; /* sum -> mean, remove loss scale */
    const double norm = sqrt(svc->sumsq(s->c, s->grads, ZERO_DTYPE_F32, (size_t)s->flat)) / unscale;
    const double clip = (ctx->grad_clip > 0 && norm > ctx->grad_clip) ? ctx->grad_clip / (norm + 1e-6) : 1.0;
    rep->grad_norm = norm;

    zero_opt_range r = {0};
    r.struct_size = sizeof r;
    r.flat_lo = 0;
    r.flat_hi = s->flat; /* the core applies each param group's hyper-parameters */
    r.master = s->params;
    for (uint32_t k = 0; k < s->nstate; ++k) r.state[k] = s->state[k];
    r.grad = s->grads;
    r.grad_dtype = ZERO_DTYPE_F32;
    r.param_out = NULL; /* fp32: params are the master copy */
    r.param_out_dtype = ZERO_DTYPE_F32;
    r.grad_mul = (float)(clip / unscale);
    if (s->flat && (st = svc->optim_step(s->c, &r)) != ZERO_OK) return st;
    memset(s->grads, 0, (size_t)s->flat * sizeof(float));
    return ZERO_OK;
}

/* save / load (optional): each rank writes its own blobs; the core makes
 * every write atomic.  Plain DP replicas are identical, so each rank's copy
 * is complete. */
static zero_status tdp_save(void *state, const char *dir) {
    tdp *s = state;
    const size_t bytes = (size_t)s->flat * sizeof(float);
    zero_status st = s->svc->ckpt_write(s->c, dir, "template-dp.params", s->params, bytes);
    for (uint32_t k = 0; st == ZERO_OK && k < s->nstate; ++k) {
        char name[64];
        snprintf(name, sizeof name, "template-dp.state%u", k);
        st = s->svc->ckpt_write(s->c, dir, name, s->state[k], bytes);
    }
    return st;
}

static zero_status tdp_load(void *state, const char *dir) {
    tdp *s = state;
    const size_t bytes = (size_t)s->flat * sizeof(float);
    zero_status st = s->svc->ckpt_read(s->c, dir, "template-dp.params", s->params, bytes);
    for (uint32_t k = 0; st == ZERO_OK && k < s->nstate; ++k) {
        char name[64];
        snprintf(name, sizeof name, "template-dp.state%u", k);
        st = s->svc->ckpt_read(s->c, dir, name, s->state[k], bytes);
    }
    return st;
}

/* destroy: free everything; called once, also after a failed params_done. */
static void tdp_destroy(void *state) {
    tdp *s = state;
    if (!s) return;
    if (s->buckets) s->svc->buckets_destroy(s->buckets);
    for (uint32_t k = 0; k < 4; ++k) s->svc->mem_free(s->c, s->state[k]);
    s->svc->mem_free(s->c, s->grads);
    s->svc->mem_free(s->c, s->params);
    free(s);
}

/* plan (ABI 1.2, optional): record what params_done allocates, without
 * allocating it, so that zero_plan, zero-estimate and "stage": "auto" can
 * plan this strategy like the built-in ones.  Keep it next to params_done
 * and change both together. */
static zero_status tdp_plan(const zero_plan_services *ps) {
    zero_core *c = ps->core;
    const zero_run_config *rc = ps->config(c);
    if (rc->model_dtype != ZERO_DTYPE_F32)
        return ps->error(c, ZERO_ERR_UNSUPPORTED, "template-dp: fp32 models only (disable fp16/bf16 in the config)");
    const uint64_t flat = ps->layout(c)->flat_numel;
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, flat * sizeof(float));
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, flat * sizeof(float));
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_OPTIM, (uint64_t)ps->optim_state_count(c) * flat * sizeof(float));
    zero_bucket_spec spec = {0}; /* the same spec params_done builds */
    spec.struct_size = sizeof spec;
    spec.mode = ZERO_BUCKETS_ALLREDUCE;
    spec.bucket_numel = rc->reduce_bucket_size > 0 ? (uint64_t)rc->reduce_bucket_size : 0;
    spec.overlap = rc->overlap_comm;
    spec.grad_dtype = ZERO_DTYPE_F32;
    ps->add(c, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, ps->buckets_bytes(c, &spec)); /* fp32 in place: 0 */
    return ZERO_OK;
}

/* The one exported symbol.  Functions left NULL get the core's default:
 * register_param (accept), gather/release (return p->data / nothing),
 * sync (nothing to drain). */
ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
    .struct_size = sizeof(zero_plugin_table),
    .abi_major = ZERO_PLUGIN_ABI_MAJOR,
    .abi_minor = ZERO_PLUGIN_ABI_MINOR,
    .caps = ZERO_PLUGIN_CAP_PIPELINE, /* reduces once per window: safe with pipeline parallelism */
    .name = "template-dp",
    .description = "out-of-tree template: plain data parallelism through the core's services",
    .create = tdp_create,
    .register_param = NULL,
    .params_done = tdp_params_done,
    .gather = NULL,
    .release = NULL,
    .grad_buffer = tdp_grad_buffer,
    .on_grad_ready = tdp_on_grad_ready,
    .step = tdp_step,
    .save = tdp_save,
    .load = tdp_load,
    .sync = NULL,
    .destroy = tdp_destroy,
    .set_phase = NULL, /* 1.1: phases change nothing for plain DP */
    .plan = tdp_plan,  /* 1.2 */
};
