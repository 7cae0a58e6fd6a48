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
 * Includes only abi/ headers (and plugins/common/plugin_glue.h, which
 * includes only abi/ too), like any third-party plugin. */
#include <stdlib.h>

#include "../common/plugin_glue.h"

typedef struct stage1 {
    zero__flat_state f; /* params (flat), master (fp32: == params), states (part_numel each), and the
                           gradient: flat_numel, the window's sum, owned ranges reduced at the boundary */
    const zero_services_v1 *svc;
    zero_buckets *b;
} stage1;

static zero_status s1_create(const zero_services_v1 *svc, void **state) {
    stage1 *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    *state = s;
    return ZERO_OK;
}

static zero_status s1_params_done(void *state) {
    stage1 *s = state;
    const zero_services_v1 *svc = s->svc;
    /* the reduced gradient sits at the owned ranges of the flat buffer */
    zero_status st = zero__flat_init(&s->f, svc, 0, svc->layout(svc->core)->flat_numel, ZERO_INDEX_FLAT, "stage1");
    if (st != ZERO_OK) return st;
    /* accumulate locally, reduce-scatter in place once per window */
    return zero__flat_buckets(&s->f, ZERO_BUCKETS_SCATTER_INPLACE, NULL, 1, &s->b);
}

static zero_status s1_grad_buffer(void *state, zero_param_info *p, void **buf) {
    stage1 *s = state;
    return s->svc->buckets_grad_slot(s->b, p->index, buf);
}

static zero_status s1_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    stage1 *s = state;
    (void)stream;
    return zero__grad_ready(s->svc, s->b, p, NULL);
}

/* Norm, clip, step of the owned partition, gradients cleared, updated
 * shares all-gathered in place (zero__flat_boundary). */
static zero_status s1_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    stage1 *s = state;
    zero_status st = s->svc->buckets_flush(s->b);
    if (st != ZERO_OK || !ctx->boundary) return st;
    return zero__flat_boundary(&s->f, ctx, rep);
}

/* Checkpoint: each rank writes its shard (atomic blobs): its owned
 * parameters, its optimizer state and the window's local gradient sum
 * (the full flat buffer: it is reduced only at the boundary), so a save in
 * the middle of an accumulation window resumes exactly.  Load reads the shard
 * and all-gathers the parameters; the ranks agree on the read status first
 * so a missing shard on one rank is an error everywhere, never a hang. */
static zero_status s1_save(void *state, const char *dir) {
    return zero__flat_ckpt(&((stage1 *)state)->f, dir, "stage1", "grads", 1);
}

static zero_status s1_load(void *state, const char *dir) {
    return zero__flat_load(&((stage1 *)state)->f, dir, "stage1", "grads");
}

static void s1_destroy(void *state) {
    stage1 *s = state;
    if (!s) return;
    if (s->b) s->svc->buckets_destroy(s->b);
    zero__flat_free(&s->f);
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
