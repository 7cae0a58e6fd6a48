/* template-dp: a libzero strategy written on the plugin kit -- copy, rename, change.
 * (docs/plugin-kit.md walks through every call.)
 *
 * Strategy: partitioned data parallelism.  Every rank keeps the full flat parameters (model
 * dtype: fp32, bf16 or fp16), but the fp32 master, the optimizer states and the gradient only
 * for its own share of the layout.  Each bucket of gradients is reduce-scattered as soon as it
 * is complete and added into this rank's partition accumulator; at the boundary the core's
 * boundary_step takes the norm, clips and steps the share, and the updated shares are
 * all-gathered.  Bitwise the same parameters as stage0 at every world size (tests/kit).
 *
 * Rules: include only the installed headers (zero_kit.h brings zero_plugin.h); allocate
 * through the kit or svc->mem_alloc; report errors with svc->error; export only the table.
 * Threading: grad_buffer / on_grad_ready may run concurrently for distinct params (the kit
 * calls they make are safe for that); everything else runs on the engine's step thread. */
#include <stdlib.h>

#include "zero_kit.h"

#define WHO "template-dp"

typedef struct tdp {
    const zero_services *svc; /* valid from create until destroy */
    zero_kit_flat f;          /* flat params, share-sized master and states, gradient partition */
    zero_kit_bsets bs;        /* bucket sets reducing into f.grads (one per partition communicator) */
    int contiguous;           /* hand the host the bucket slot itself (else a per-param temporary) */
} tdp;

static zero_status tdp_create(const zero_services *svc, void **state) {
    zero_status st = zero_kit_create(svc, sizeof(tdp), ZERO_KIT_REFUSE_PIPELINE, WHO, state);
    if (st == ZERO_OK) ((tdp *)*state)->svc = svc;
    return st;
}

/* The layout is final: allocate and place the model state, then the buckets. */
static zero_status tdp_params_done(void *state) {
    tdp *s = state;
    const zero_services *svc = s->svc;
    zero_status st = zero_kit_flat_init(&s->f, svc, 0, svc->layout(svc->core)->part_numel, ZERO_INDEX_PART, WHO);
    if (st != ZERO_OK) return st;
    /* fp32 accumulation of a 16-bit model: the host writes model-dtype temporaries */
    s->contiguous = s->f.gdtype == s->f.dtype && svc->config(svc->core)->contiguous_gradients;
    for (uint32_t i = 0; i < svc->nparams(svc->core); i++) svc->param(svc->core, i)->plugin_data = NULL;
    zero_bucket_spec spec = zero_kit_flat_bucket_spec(&s->f, ZERO_BUCKETS_SCATTER, NULL, s->contiguous, s->f.grads);
    return zero_kit_bsets_create(&s->bs, svc, &spec);
}

static zero_status tdp_grad_buffer(void *state, zero_param_info *p, void **buf) {
    tdp *s = state;
    if (s->contiguous) return s->svc->buckets_grad_slot(zero_kit_bsets_of(&s->bs, p->index), p->index, buf);
    return zero_kit_grad_tmp(s->svc, p, s->f.esize, &p->plugin_data, buf, WHO);
}

static zero_status tdp_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    tdp *s = state;
    (void)stream;
    return zero_kit_grad_ready(s->svc, zero_kit_bsets_of(&s->bs, p->index), p, &p->plugin_data);
}

/* Every micro-step: reduce what is left; at the boundary step and all-gather. */
static zero_status tdp_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    tdp *s = state;
    zero_status st = zero_kit_bsets_flush(&s->bs);
    return st != ZERO_OK || !ctx->boundary ? st : zero_kit_flat_boundary(&s->f, ctx, rep);
}

/* Checkpoints, and zero_params_write: the param's slot of the flat params, widened into the owned master. */
static zero_status tdp_save(void *state, const char *dir) {
    return zero_kit_flat_ckpt(&((tdp *)state)->f, dir, WHO, "part", 1);
}
static zero_status tdp_load(void *state, const char *dir) {
    return zero_kit_flat_load(&((tdp *)state)->f, dir, WHO, "part", NULL);
}
static zero_status tdp_write_params(void *state, zero_param_info *const *params, size_t n, const void *const *vals) {
    return zero_kit_flat_write(&((tdp *)state)->f, params, n, vals);
}

static void tdp_destroy(void *state) {
    tdp *s = state;
    zero_kit_bsets_destroy(&s->bs);
    zero_kit_grad_tmps_free(s->svc); /* temporaries of params never reported ready */
    zero_kit_flat_free(&s->f);
    free(s);
}

/* What params_done and the buckets will allocate, recorded without allocating. */
static zero_status tdp_plan(const zero_plan_services *ps) {
    const zero_run_config *rc = ps->config(ps->core);
    zero_kit_flat_plan(ps, 0, ps->layout(ps->core)->part_numel, ZERO_BUCKETS_SCATTER);
    if (zero_kit_grad_dtype(rc) != rc->model_dtype || !rc->contiguous_gradients) zero_kit_grad_tmp_plan(ps);
    return ZERO_OK;
}

ZERO_PLUGIN_EXPORT const zero_plugin_table ZERO_PLUGIN_TABLE = {
    ZERO_PLUGIN_TABLE_HEAD, .caps = ZERO_PLUGIN_CAP_GRAD_DTYPES | ZERO_PLUGIN_CAP_RESHARD,
    .name = "template-dp", .description = "partitioned data parallelism on the libzero plugin kit (template)",
    .create = tdp_create, .params_done = tdp_params_done, .grad_buffer = tdp_grad_buffer,
    .on_grad_ready = tdp_on_grad_ready, .step = tdp_step, .save = tdp_save, .load = tdp_load,
    .write_params = tdp_write_params, .destroy = tdp_destroy, .plan = tdp_plan,
};
