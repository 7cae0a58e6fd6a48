/* One source, many broken plugins: the loader tests build this file several
 * times with a VARIANT_* define each, so that every defect is the only
 * difference from a working plugin.
 *
 * The working variant is a tiny but real strategy (no communication, world
 * size 1 only): it owns each param's storage, hands out a gradient buffer and
 * applies plain SGD (lr from the config) at each boundary.  Its optional
 * functions (register_param, gather, release, save, load, sync) are NULL so
 * that the core's defaults for them are exercised. */
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "zero_plugin.h"

typedef struct state {
    const zero_services_v1 *svc;
    float **grads; /* per param, numel fp32 */
    uint32_t n;
} state;

static zero_status p_create(const zero_services_v1 *svc, void **out) {
#ifdef VARIANT_FAIL_CREATE
    (void)out;
    return svc->error(svc->core, ZERO_ERR_PLUGIN_INIT, "loader-fail-create refuses to start (on purpose)");
#else
    state *s = calloc(1, sizeof *s);
    if (!s) return ZERO_ERR_OUT_OF_MEMORY;
    s->svc = svc;
    *out = s;
    return ZERO_OK;
#endif
}

static zero_status p_params_done(void *st) {
    state *s = st;
    const zero_services_v1 *svc = s->svc;
    s->n = svc->nparams(svc->core);
    s->grads = calloc(s->n ? s->n : 1, sizeof *s->grads);
    if (!s->grads) return ZERO_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < s->n; ++i) {
        zero_param_info *p = svc->param(svc->core, i);
        if (p->dtype != ZERO_DTYPE_F32)
            return svc->error(svc->core, ZERO_ERR_UNSUPPORTED, "loader-good handles fp32 only");
        s->grads[i] = svc->mem_alloc(svc->core, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, p->numel * sizeof(float));
        if (!s->grads[i]) return ZERO_ERR_OUT_OF_MEMORY;
#if defined(VARIANT_NULL_DATA) || defined(VARIANT_NULL_GATHER)
        /* NULL_DATA: the contract broken (no storage, no partitioning);
         * NULL_GATHER: a "stage 3" plugin may leave data NULL, but then its
         * gather must return real pointers, which it does not */
        if (i + 1 == s->n) continue; /* the last param only: the core must name it */
#endif
        p->data = svc->mem_alloc(svc->core, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, p->numel * sizeof(float));
        if (!p->data) return ZERO_ERR_OUT_OF_MEMORY;
        memcpy(p->data, p->init_data, p->numel * sizeof(float));
    }
    return ZERO_OK;
}

#ifdef VARIANT_NULL_GATHER
/* Hands out each param's data pointer: NULL for the last one. */
static zero_status p_gather(void *st, zero_param_info *const *params, size_t n, void **ptrs) {
    (void)st;
    for (size_t i = 0; i < n; ++i) ptrs[i] = params[i]->data;
    return ZERO_OK;
}
#define GATHER_FN p_gather
#define VARIANT_CAPS ZERO_PLUGIN_CAP_PARTITIONS_PARAMS
#else
#define GATHER_FN NULL
#define VARIANT_CAPS 0
#endif

static zero_status p_grad_buffer(void *st, zero_param_info *p, void **buf) {
    state *s = st;
    *buf = s->grads[p->index];
    return ZERO_OK;
}

static zero_status p_on_grad_ready(void *st, zero_param_info *p, void *stream) {
    (void)stream;
    state *s = st;
    if (p->host_grad && !p->grad_is_zero)
        s->svc->add_into(s->svc->core, s->grads[p->index], p->host_grad, p->dtype, p->numel);
    return ZERO_OK;
}

__attribute__((unused)) static zero_status p_step(void *st, const zero_step_ctx *ctx, zero_step_report *rep) {
    state *s = st;
    if (!ctx->boundary) return ZERO_OK;
    double lr = s->svc->config(s->svc->core)->lr, sq = 0;
    for (uint32_t i = 0; i < s->n; ++i) {
        zero_param_info *p = s->svc->param(s->svc->core, i);
        float *w = p->data, *g = s->grads[i];
        for (uint64_t k = 0; k < p->numel; ++k) {
            double gk = g[k] / ctx->grad_divisor / ctx->loss_scale;
            sq += gk * gk;
            w[k] -= (float)(lr * gk);
            g[k] = 0;
        }
    }
    rep->overflow = 0;
    rep->grad_norm = sqrt(sq);
    return ZERO_OK;
}

__attribute__((unused)) static void p_destroy(void *st) {
    state *s = st;
    if (!s) return;
    for (uint32_t i = 0; s->grads && i < s->n; ++i) {
        s->svc->mem_free(s->svc->core, s->grads[i]);
        s->svc->mem_free(s->svc->core, s->svc->param(s->svc->core, i)->data);
    }
    free(s->grads);
    free(s);
}

#ifndef VARIANT_NAME
#define VARIANT_NAME "loader-good"
#endif
#ifndef VARIANT_MAJOR
#define VARIANT_MAJOR ZERO_PLUGIN_ABI_MAJOR
#endif
#ifndef VARIANT_MINOR
#define VARIANT_MINOR ZERO_PLUGIN_ABI_MINOR
#endif
#ifndef VARIANT_SIZE
#define VARIANT_SIZE sizeof(zero_plugin_table_v1)
#endif
#ifdef VARIANT_NO_STEP
#define STEP_FN NULL
#define DESTROY_FN NULL
#else
#define STEP_FN p_step
#define DESTROY_FN p_destroy
#endif

#if defined(VARIANT_NO_SYMBOL)
/* A complete table under the wrong (and unexported) name: e.g. a plugin
 * built without ZERO_PLUGIN_EXPORT or with a typo in the symbol name. */
__attribute__((used)) static const zero_plugin_table_v1 zero_plugin_v1_typo = {
    sizeof(zero_plugin_table_v1), 1, 0, 0, VARIANT_NAME, "typo", p_create, NULL, p_params_done,
    NULL, NULL, p_grad_buffer, p_on_grad_ready, p_step, NULL, NULL, NULL, p_destroy, NULL, NULL};
#elif defined(VARIANT_V5_ONLY)
/* What a plugin built for a later table revision looks like to this core. */
ZERO_PLUGIN_EXPORT const zero_plugin_table_v1 zero_plugin_v5 = {
    sizeof(zero_plugin_table_v1), 2, 0, 0, VARIANT_NAME, "future plugin", p_create, NULL, p_params_done,
    NULL, NULL, p_grad_buffer, p_on_grad_ready, p_step, NULL, NULL, NULL, p_destroy, NULL, NULL};
#else
#ifdef VARIANT_UNDEFINED_REF
/* Resolved by nobody: RTLD_NOW must fail at load time, not at first call. */
extern int zero_test_symbol_that_does_not_exist(void);
ZERO_PLUGIN_EXPORT int (*zero_test_force_ref)(void) = zero_test_symbol_that_does_not_exist;
#endif
ZERO_PLUGIN_EXPORT const zero_plugin_table_v1 zero_plugin_v1 = {
    .struct_size = VARIANT_SIZE,
    .abi_major = VARIANT_MAJOR,
    .abi_minor = VARIANT_MINOR,
    .caps = VARIANT_CAPS,
    .name = VARIANT_NAME,
    .description = "loader test plugin: plain SGD on one rank, optional functions left NULL",
    .create = p_create,
    .register_param = NULL,
    .params_done = p_params_done,
    .gather = GATHER_FN,
    .release = NULL,
    .grad_buffer = p_grad_buffer,
    .on_grad_ready = p_on_grad_ready,
    .step = STEP_FN,
    .save = NULL,
    .load = NULL,
    .sync = NULL,
    .destroy = DESTROY_FN,
    .set_phase = NULL,
    .plan = NULL,
};
#endif
