/* stage0: plain data parallelism, the reference every other strategy is
 * checked against.
 *
 * Every rank keeps the full flat parameters, a full flat gradient (model
 * dtype) that accumulates over the micro-steps of a window, and the full
 * optimizer state.  During the boundary micro-step's backward the gradient
 * buckets are all-reduced (sums formed in fp32 by the bucket engine,
 * overlapping the host's backward when overlap_comm is on); at the boundary
 * every rank steps everything with identical inputs, so the replicas stay
 * identical without any parameter broadcast.
 *
 * fp32 models: the params ARE the master weights (K = 8 bytes of Adam state
 * per element).  bf16/fp16 models: 2-byte params and gradients plus a full
 * fp32 master (16 Psi with Adam); the optimizer pass rounds the new weights
 * into the params.  The norm, clip and step are the core's boundary_step
 * service; this file is glue.
 *
 * Includes only abi/ headers (and plugins/common/plugin_glue.h, which
 * includes only abi/ too), like any third-party plugin. */
#include <stdlib.h>

#include "../common/plugin_glue.h"

typedef struct stage0 {
    zero__flat_state f; /* replicated: params, master (fp32: == params), states and the gradient (the
                           window's sum, all-reduced at the boundary) all flat_numel */
    const zero_services_v1 *svc;
    zero_buckets *b;
} stage0;

static zero_status s0_create(const zero_services_v1 *svc, void **state) {
    stage0 *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    *state = s;
    return ZERO_OK;
}

/* Replicated: every rank holds the same all-reduced sum and steps
 * everything, so one rank per DP group contributes to the (pipeline-wide)
 * norm, the overflow verdict is agreed anyway so replicas can never
 * diverge, and there is nothing to all-gather. */
static zero_status s0_params_done(void *state) {
    stage0 *s = state;
    const zero_services_v1 *svc = s->svc;
    zero_status st = zero__flat_init(&s->f, svc, 1, svc->layout(svc->core)->flat_numel, ZERO_INDEX_FLAT, "stage0");
    if (st != ZERO_OK) return st;
    /* all-reduced during the boundary micro-step's backward */
    return zero__flat_buckets(&s->f, ZERO_BUCKETS_ALLREDUCE, NULL, 1, &s->b);
}

static zero_status s0_grad_buffer(void *state, zero_param_info *p, void **buf) {
    stage0 *s = state;
    return s->svc->buckets_grad_slot(s->b, p->index, buf);
}

static zero_status s0_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    stage0 *s = state;
    (void)stream;
    return zero__grad_ready(s->svc, s->b, p, NULL);
}

static zero_status s0_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    stage0 *s = state;
    zero_status st = s->svc->buckets_flush(s->b); /* every micro-step: resets the ready counts */
    if (st != ZERO_OK || !ctx->boundary) return st;
    return zero__flat_boundary(&s->f, ctx, rep);
}

/* Checkpoint: replicas are identical except for the window's local gradient
 * sum, which is saved too so that a save in the middle of an accumulation
 * window resumes exactly.  Each rank writes its own blobs (atomic). */
static zero_status s0_save(void *state, const char *dir) {
    return zero__flat_ckpt(&((stage0 *)state)->f, dir, "stage0", "grads", 1);
}

static zero_status s0_load(void *state, const char *dir) {
    return zero__flat_load(&((stage0 *)state)->f, dir, "stage0", "grads");
}

static void s0_destroy(void *state) {
    stage0 *s = state;
    if (!s) return;
    if (s->b) s->svc->buckets_destroy(s->b);
    zero__flat_free(&s->f);
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
