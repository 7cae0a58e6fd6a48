/* A plugin exactly as the 1.6 headers made it: it names the revision-2
 * table (zero_plugin_table_v2, exported as zero_plugin_v2) and receives
 * zero_services_v2.  Plain SGD on one rank, like test_plugin.c's good
 * variant.  The core adapts its table to the current revision at load (no
 * slice gathers: zero_gather_slices is served from the whole param's
 * storage; no write_params: zero_params_write is refused naming it).
 * VARIANT_REV3: the same plugin as the 1.7 headers made it, a revision-3
 * table (zero_plugin_v3). */
#include <stdlib.h>
#include <string.h>

#include "zero_plugin.h"

typedef struct state {
    const zero_services_v2 *svc;
    float **grads;
    uint32_t n;
} state;

static zero_status p_create(const zero_services_v2 *svc, void **out) {
    state *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    *out = s;
    return ZERO_OK;
}

static zero_status p_params_done(void *st) {
    state *s = st;
    const zero_services_v2 *svc = s->svc;
    s->n = svc->nparams(svc->core);
    s->grads = calloc(s->n ? s->n : 1, sizeof *s->grads);
    if (!s->grads) return ZERO_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < s->n; ++i) {
        zero_param_info *p = svc->param(svc->core, i);
        s->grads[i] = svc->mem_alloc(svc->core, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, p->numel * sizeof(float));
        p->data = svc->mem_alloc(svc->core, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, p->numel * sizeof(float));
        if (!s->grads[i] || !p->data) return ZERO_ERR_OUT_OF_MEMORY;
        memcpy(p->data, p->init_data, p->numel * sizeof(float));
    }
    return ZERO_OK;
}

static zero_status p_grad_buffer(void *st, zero_param_info *p, void **buf) {
    *buf = ((state *)st)->grads[p->index];
    return ZERO_OK;
}

static zero_status p_on_grad_ready(void *st, zero_param_info *p, void *stream) {
    (void)stream;
    state *s = st;
    if (p->host_grad && !p->grad_is_zero)
        s->svc->add_into(s->svc->core, s->grads[p->index], p->host_grad, p->dtype, p->numel);
    return ZERO_OK;
}

static zero_status p_step(void *st, const zero_step_ctx *ctx, zero_step_report *rep) {
    state *s = st;
    rep->overflow = 0;
    rep->grad_norm = 0;
    if (!ctx->boundary) return ZERO_OK;
    double lr = s->svc->config(s->svc->core)->lr;
    for (uint32_t i = 0; i < s->n; ++i) {
        zero_param_info *p = s->svc->param(s->svc->core, i);
        float *w = p->data, *g = s->grads[i];
        for (uint64_t k = 0; k < p->numel; ++k) {
            w[k] -= (float)(lr * g[k] / ctx->grad_divisor / ctx->loss_scale);
            g[k] = 0;
        }
    }
    return ZERO_OK;
}

static void p_destroy(void *st) {
    state *s = st;
    for (uint32_t i = 0; s->grads && i < s->n; ++i) {
        s->svc->mem_free(s->svc->core, s->grads[i]);
        s->svc->mem_free(s->svc->core, s->svc->param(s->svc->core, i)->data);
    }
    free(s->grads);
    free(s);
}

#ifdef VARIANT_REV3
ZERO_PLUGIN_EXPORT const zero_plugin_table_v3 zero_plugin_v3 = {
    .struct_size = sizeof(zero_plugin_table_v3),
    .abi_major = 1,
    .abi_minor = 7,
    .caps = 0,
    .name = VARIANT_NAME,
    .description = "loader test plugin: a revision-3 (1.7) table",
#else
ZERO_PLUGIN_EXPORT const zero_plugin_table_v2 zero_plugin_v2 = {
    .struct_size = sizeof(zero_plugin_table_v2),
    .abi_major = 1,
    .abi_minor = 6,
    .caps = 0,
    .name = VARIANT_NAME,
    .description = "loader test plugin: a revision-2 (1.6) table",
#endif
    .create = p_create,
    .destroy = p_destroy,
    .params_done = p_params_done,
    .grad_buffer = p_grad_buffer,
    .on_grad_ready = p_on_grad_ready,
    .step = p_step,
};
