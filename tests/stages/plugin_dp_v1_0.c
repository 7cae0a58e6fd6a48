/* A plugin built against the FROZEN 1.0 headers (tests/abi/v1.0): plain data
 * parallelism in the simplest form (full fp32 flat params, a full flat
 * gradient all-reduced at the boundary, the core's boundary_step).  Its
 * table is the 1.0 size (no set_phase) and it declares ABI minor 0, so the
 * host-owned test shows that ZERO_PARAM_HOST_OWNED (1.1, done by the core)
 * works with a 1.0 plugin.  fp32 models only. */
#include <string.h>

#include "zero_plugin.h"

#if ZERO_PLUGIN_ABI_MINOR != 0
#error "plugin_dp_v1_0.c must be compiled against tests/abi/v1.0"
#endif

typedef struct dp10 {
    const zero_services_v1 *svc;
    float *params, *grad, *state[4];
    uint64_t n;
    zero_owned_range *ranges;
    uint32_t nranges;
} dp10;

static zero_status dp_create(const zero_services_v1 *svc, void **state) {
    dp10 *d = svc->mem_alloc(svc->core, ZERO_TIER_HOST, ZERO_MEM_OTHER, sizeof *d);
    if (!d) return svc->error(svc->core, ZERO_ERR_OUT_OF_MEMORY, "dp-v1.0: out of memory");
    d->svc = svc;
    *state = d;
    return ZERO_OK;
}

static zero_status dp_params_done(void *state) {
    dp10 *d = state;
    const zero_services_v1 *svc = d->svc;
    zero_core *c = svc->core;
    const zero_layout *L = svc->layout(c);
    d->n = L->flat_numel;
    d->params = svc->mem_alloc(c, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, d->n * sizeof(float));
    d->grad = svc->mem_alloc(c, ZERO_TIER_DEVICE, ZERO_MEM_GRADS, d->n * sizeof(float));
    d->ranges = svc->mem_alloc(c, ZERO_TIER_HOST, ZERO_MEM_OTHER, (L->ngroups ? L->ngroups : 1) * sizeof *d->ranges);
    if (!d->params || !d->grad || !d->ranges) return svc->error(c, ZERO_ERR_OUT_OF_MEMORY, "dp-v1.0: out of memory");
    for (uint32_t k = 0; k < svc->optim_state_count(c) && k < 4; k++)
        if (!(d->state[k] = svc->mem_alloc(c, ZERO_TIER_DEVICE, ZERO_MEM_OPTIM, d->n * sizeof(float))))
            return svc->error(c, ZERO_ERR_OUT_OF_MEMORY, "dp-v1.0: out of memory");
    for (uint32_t g = 0; g < L->ngroups; g++) {
        const zero_layout_group *lg = &L->groups[g];
        d->ranges[g] = (zero_owned_range){lg->flat_begin, lg->flat_begin + lg->numel, lg->flat_begin};
    }
    d->nranges = L->ngroups;
    return svc->params_place(c, d->params, ZERO_DTYPE_F32, "dp-v1.0");
}

static zero_status dp_grad_buffer(void *state, zero_param_info *p, void **buf) {
    dp10 *d = state;
    *buf = d->grad + p->flat_offset;
    return ZERO_OK;
}

static zero_status dp_on_grad_ready(void *state, zero_param_info *p, void *stream) {
    dp10 *d = state;
    (void)stream;
    if (p->host_grad && !p->grad_is_zero) d->svc->add_into(d->svc->core, d->grad + p->flat_offset, p->host_grad,
                                                           p->dtype, p->numel);
    return ZERO_OK;
}

static zero_status dp_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    dp10 *d = state;
    const zero_services_v1 *svc = d->svc;
    zero_core *c = svc->core;
    if (!ctx->boundary) return ZERO_OK;
    zero_status s = svc->allreduce(svc->comm_world(c), d->grad, d->n, ZERO_DTYPE_F32, ZERO_OP_SUM);
    if (s != ZERO_OK) return s;
    zero_part_step ps;
    memset(&ps, 0, sizeof ps);
    ps.struct_size = sizeof ps; /* the 1.0 size: the core reads no grad_dtype */
    ps.nranges = d->nranges;
    ps.ranges = d->ranges;
    ps.replicated = 1;
    ps.dtype = ZERO_DTYPE_F32;
    ps.grad = d->grad;
    ps.grad_index = ZERO_INDEX_FLAT;
    ps.master_index = ZERO_INDEX_FLAT;
    ps.master = d->params;
    for (int k = 0; k < 4; k++) ps.state[k] = d->state[k];
    ps.param_out = NULL;
    ps.param_out_index = ZERO_INDEX_FLAT;
    s = svc->boundary_step(c, &ps, ctx, rep);
    memset(d->grad, 0, d->n * sizeof(float));
    return s;
}

static void dp_destroy(void *state) {
    dp10 *d = state;
    const zero_services_v1 *svc = d->svc;
    svc->mem_free(svc->core, d->params);
    svc->mem_free(svc->core, d->grad);
    svc->mem_free(svc->core, d->ranges);
    for (int k = 0; k < 4; k++) svc->mem_free(svc->core, d->state[k]);
    svc->mem_free(svc->core, d);
}

ZERO_PLUGIN_EXPORT const zero_plugin_table_v1 zero_plugin_v1 = {
    .struct_size = sizeof(zero_plugin_table_v1),
    .abi_major = ZERO_PLUGIN_ABI_MAJOR,
    .abi_minor = ZERO_PLUGIN_ABI_MINOR,
    .caps = 0,
    .name = "dp-v1.0",
    .description = "test: plain data parallelism built against the frozen 1.0 headers",
    .create = dp_create,
    .params_done = dp_params_done,
    .grad_buffer = dp_grad_buffer,
    .on_grad_ready = dp_on_grad_ready,
    .step = dp_step,
    .destroy = dp_destroy,
};
