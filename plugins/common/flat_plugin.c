/* See flat_plugin.h. */
#include <stdlib.h>

#include "flat_plugin.h"

typedef struct flat_plugin {
    zero__flat_state f;
    const zero_services_v1 *svc;
    const zero__flat_plugin_spec *spec;
    int contiguous; /* grad_buffer hands out the bucket slot (always, in the in-place modes) */
    zero_buckets *b;
} flat_plugin;

zero_status zero__flat_plugin_create(const zero_services_v1 *svc, const zero__flat_plugin_spec *spec, void **state) {
    flat_plugin *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    s->spec = spec;
    *state = s;
    return ZERO_OK;
}

zero_status zero__flat_plugin_params_done(void *state) {
    flat_plugin *s = state;
    const zero_services_v1 *svc = s->svc;
    const zero_layout *L = svc->layout(svc->core);
    const int staged = s->spec->mode == ZERO_BUCKETS_SCATTER;
    /* staged: the gradient is this rank's partition accumulator; in place:
     * the full flat window sum, reduced at its owned ranges (or everywhere) */
    zero_status st = zero__flat_init(&s->f, svc, s->spec->replicated, staged ? L->part_numel : L->flat_numel,
                                     staged ? ZERO_INDEX_PART : ZERO_INDEX_FLAT, s->spec->name);
    if (st != ZERO_OK) return st;
    /* Only staged buckets can do without contiguous gradients: the in-place
     * modes' slot IS the accumulation buffer.  With fp32 accumulation of a
     * 16-bit model the slots are fp32 while the host writes its model
     * dtype: every mode hands out per-param temporaries, widened into the
     * slot at on_grad_ready. */
    s->contiguous = s->f.gdtype != s->f.dtype ? 0 : staged ? svc->config(svc->core)->contiguous_gradients : 1;
    if (!s->contiguous) {
        const uint32_t np = svc->nparams(svc->core);
        for (uint32_t i = 0; i < np; i++) svc->param(svc->core, i)->plugin_data = NULL;
    }
    return zero__flat_buckets(&s->f, s->spec->mode, NULL, s->contiguous, &s->b);
}

zero_status zero__flat_plugin_grad_buffer(void *state, zero_param_info *p, void **buf) {
    flat_plugin *s = state;
    if (s->contiguous) return s->svc->buckets_grad_slot(s->b, p->index, buf);
    return zero__grad_tmp(s->svc, p, s->f.esize, &p->plugin_data, buf, s->spec->name);
}

zero_status zero__flat_plugin_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    flat_plugin *s = state;
    (void)stream;
    return zero__grad_ready(s->svc, s->b, p, s->contiguous ? NULL : &p->plugin_data);
}

zero_status zero__flat_plugin_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    flat_plugin *s = state;
    zero_status st = s->svc->buckets_flush(s->b); /* every micro-step: also resets the ready counts */
    if (st != ZERO_OK || !ctx->boundary) return st;
    return zero__flat_boundary(&s->f, ctx, rep);
}

zero_status zero__flat_plugin_save(void *state, const char *dir) {
    flat_plugin *s = state;
    return zero__flat_ckpt(&s->f, dir, s->spec->name, s->spec->grads_blob, 1);
}

zero_status zero__flat_plugin_load(void *state, const char *dir) {
    flat_plugin *s = state;
    return zero__flat_load(&s->f, dir, s->spec->name, s->spec->grads_blob);
}

void zero__flat_plugin_destroy(void *state) {
    flat_plugin *s = state;
    if (!s) return;
    if (s->b) s->svc->buckets_destroy(s->b);
    if (!s->contiguous) zero__grad_tmps_free(s->svc); /* temporaries of params never reported ready */
    zero__flat_free(&s->f);
    free(s);
}

zero_status zero__flat_plugin_plan(const zero_plan_services_v1 *ps, const zero__flat_plugin_spec *spec) {
    const zero_run_config *rc = ps->config(ps->core);
    const zero_layout *L = ps->layout(ps->core);
    const int staged = spec->mode == ZERO_BUCKETS_SCATTER;
    zero__flat_plan(ps, spec->replicated, staged ? L->part_numel : L->flat_numel, spec->mode);
    /* as params_done decides contiguous */
    const int contiguous = zero__grad_dtype_of(rc) != rc->model_dtype ? 0 : staged ? rc->contiguous_gradients : 1;
    if (!contiguous) zero__grad_tmp_plan(ps);
    return ZERO_OK;
}
