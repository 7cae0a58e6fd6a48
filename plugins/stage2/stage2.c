/* stage2: ZeRO stage 2, optimizer states and gradients partitioned.
 *
 * No full gradient ever exists.  Every micro-step, gradients go into the
 * bucket engine's bounded staging slots; each complete bucket is
 * reduce-scattered (during backward with overlap_comm) and this rank's block
 * is ADDED into a part_numel accumulator (model dtype; each addition formed
 * in fp32 and rounded once), which therefore holds the
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
 * fp32 models: the params ARE the master weights.  bf16/fp16 models: 2-byte
 * params, a 2-byte gradient partition and an fp32 master of the partition
 * (2 + (2+12)/N Psi with Adam); the optimizer rounds the new weights into the
 * params.  Norm, clip, step and all-gather are the core's services.
 *
 * Includes only abi/ headers (and plugins/common/plugin_glue.h, which
 * includes only abi/ too), like any third-party plugin. */
#include <stdlib.h>

#include "../common/plugin_glue.h"

typedef struct stage2 {
    zero__flat_state f; /* params (flat), master (fp32: == params), states (part_numel each), and the
                           gradient: part_numel, the owned partition's accumulator */
    const zero_services_v1 *svc;
    int contiguous;
    zero_buckets *b;
} stage2;

static zero_status s2_create(const zero_services_v1 *svc, void **state) {
    stage2 *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    *state = s;
    return ZERO_OK;
}

static zero_status s2_params_done(void *state) {
    stage2 *s = state;
    const zero_services_v1 *svc = s->svc;
    zero_status st = zero__flat_init(&s->f, svc, 0, svc->layout(svc->core)->part_numel, ZERO_INDEX_PART, "stage2");
    if (st != ZERO_OK) return st;
    const uint32_t np = svc->nparams(svc->core);
    for (uint32_t i = 0; i < np; i++) svc->param(svc->core, i)->plugin_data = NULL; /* contiguous_gradients off */
    s->contiguous = svc->config(svc->core)->contiguous_gradients;
    /* reduce-scattered every micro-step into the partition accumulator */
    return zero__flat_buckets(&s->f, ZERO_BUCKETS_SCATTER, NULL, s->contiguous, &s->b);
}

/* Thread-safe for distinct params: each touches only its own plugin_data. */
static zero_status s2_grad_buffer(void *state, zero_param_info *p, void **buf) {
    stage2 *s = state;
    if (s->contiguous) return s->svc->buckets_grad_slot(s->b, p->index, buf);
    return zero__grad_tmp(s->svc, p, s->f.esize, &p->plugin_data, buf, "stage2");
}

static zero_status s2_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    stage2 *s = state;
    (void)stream;
    return zero__grad_ready(s->svc, s->b, p, &p->plugin_data);
}

/* Reduces what is left of this micro-step; at the boundary norm, clip,
 * step of the partition, accumulator cleared, shares all-gathered. */
static zero_status s2_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    stage2 *s = state;
    zero_status st = s->svc->buckets_flush(s->b);
    if (st != ZERO_OK || !ctx->boundary) return st;
    return zero__flat_boundary(&s->f, ctx, rep);
}

/* Checkpoint: each rank writes its shard (atomic blobs): its owned
 * parameters, its optimizer state and the partition's gradient
 * accumulator ("stage2.part"), so a save in the middle of an accumulation
 * window resumes exactly.  Load reads the shard and all-gathers the
 * parameters; the ranks agree on the read status first so a missing shard
 * on one rank is an error everywhere, never a hang. */
static zero_status s2_save(void *state, const char *dir) {
    return zero__flat_ckpt(&((stage2 *)state)->f, dir, "stage2", "part", 1);
}

static zero_status s2_load(void *state, const char *dir) {
    return zero__flat_load(&((stage2 *)state)->f, dir, "stage2", "part");
}

static void s2_destroy(void *state) {
    stage2 *s = state;
    if (!s) return;
    if (s->b) s->svc->buckets_destroy(s->b);
    zero__grad_tmps_free(s->svc); /* temporaries of params never reported ready */
    zero__flat_free(&s->f);
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
