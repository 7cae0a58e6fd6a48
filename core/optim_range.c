/* The optimizer over one flat range (core/optim_range.h). */
#include "optim_range.h"

#include "device.h"
#include "engine.h"
#include "log.h"
#include "optim.h"
#include "step_timing.h"

#define E(c) zero__engine_of(c)

/* Step [flat_lo, flat_hi), splitting it at group boundaries so each piece
 * gets its group's lr scale and weight decay; the step number and scheduled
 * lr are the core's (global_step + 1). */
static zero_status optim_step_impl(zero_core *c, const zero_opt_range *r) {
    struct zero_engine *e = E(c);
    const zero_run_config *rc = e->rc;
    const zero_layout *l = &e->layout.view;
    uint64_t t = e->global_step + 1;
    if (rc->optim == ZERO_OPTIM_LAMB)
        return zero__error(e, ZERO_ERR_UNSUPPORTED,
                           "optimizer.type Lamb: its trust ratio needs each parameter's whole norm, which a range "
                           "kernel cannot see; the plugin '%s' must step through the part_step / boundary_step "
                           "services (stage0/1/2/3 and stage1-pp do)",
                           e->plugin.table ? e->plugin.table->name : "?");
    for (uint32_t g = 0; g < l->ngroups; g++) {
        const zero_layout_group *lg = &l->groups[g];
        uint64_t lo = r->flat_lo > lg->flat_begin ? r->flat_lo : lg->flat_begin;
        uint64_t hi = r->flat_hi < lg->flat_begin + lg->numel ? r->flat_hi : lg->flat_begin + lg->numel;
        if (lo >= hi) continue;
        zero__hp hp; /* scheduler, zero_set_group, zero_set_hparams (OneCycle may cycle the betas) */
        zero__hp_resolve(e, lg->group_id, t, &hp);
        zero_optim_scalars s = zero__optim_scalars(rc->optim, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay,
                                                   rc->momentum,
                                                   rc->nesterov, rc->bias_correction, t);
        size_t off = (size_t)(lo - r->flat_lo), n = (size_t)(hi - lo);
        float *st_[4] = {0};
        for (int k = 0; k < 4; k++) st_[k] = r->state[k] ? r->state[k] + off : NULL;
        void *out = NULL;
        if (r->param_out) {
            size_t es = r->param_out_dtype == ZERO_DTYPE_F32 ? 4 : 2;
            out = (char *)r->param_out + off * es;
        }
        zero_dtype gdt = r->grad_dtype;
        if (gdt != ZERO_DTYPE_F32 && gdt != ZERO_DTYPE_BF16 && gdt != ZERO_DTYPE_F16)
            return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "optim_step: unknown gradient dtype %d", (int)gdt);
        /* Host arrays: the fused CPU pass (16-bit gradients widened one tile
         * at a time); device arrays: the CUDA multi-tensor kernel. */
        const void *grad = (const char *)r->grad + off * (gdt == ZERO_DTYPE_F32 ? 4 : 2);
        zero_status st = zero__dev_optim_step(e->dev, rc->optim, &s, r->master + off, st_, grad, gdt, r->grad_mul,
                                              out, r->param_out_dtype, n);
        if (st == ZERO_ERR_INVALID_ARGUMENT)
            return zero__error(e, st, "optim_step: master, optimizer states and copy-out must all be device memory "
                                      "or all host memory (a host gradient is staged)");
        if (st != ZERO_OK)
            return zero__error(e, st, "optim_step on the %s device failed: %s", e->dev ? e->dev->ops->name : "host",
                               zero__dev_error(e->dev));
    }
    return ZERO_OK;
}

/* The optimizer phase (called from a plugin's own loop, offload, or from
 * part_step). */
zero_status zero__optim_range_step(zero_core *c, const zero_opt_range *r) {
    zero__span sp = zero__phase_begin(E(c));
    zero_status st = optim_step_impl(c, r);
    zero__phase_end(E(c), sp, ZERO__PH_OPTIM);
    return st;
}

