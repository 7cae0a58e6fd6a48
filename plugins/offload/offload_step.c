/* offload: the boundary step (see offload.h).
 *
 *  1. grads to host: the owned partition's summed gradient (device tier) is
 *     copied into the host landing buffer and the device accumulator is
 *     cleared for the next window.  The copy happens here, after
 *     buckets_flush, because the bucket engine reports completion only at
 *     flush (no per-bucket callback in the services table); on this
 *     CPU-only build the copy is a memcpy of 4 Psi/N bytes, measured and
 *     logged at destroy ("grads to host") and in bench/offload/README.md.
 *  2. norm and overflow over the host copy, agreed in one fp64 all-reduce,
 *     summed in the same order as stage1 (per owned range) or stage2 (the
 *     whole partition), so offload is bitwise equal to that stage.
 *  3. the CPU optimizer steps the host master and states and writes the new
 *     weights into the device parameters in the model dtype in the same
 *     pass (param_out).  With a GPU backend the copy-out would land in a
 *     pinned staging buffer followed by an async host-to-device copy.
 *  4. the owned shares are all-gathered in place. */
#include <math.h>
#include <string.h>

#include "offload.h"

zero_status zero__of_gather_params(offload *s) {
    const zero_services_v1 *svc = s->svc;
    zero_status st = ZERO_OK;
    uint32_t issued = 0;
    for (uint32_t g = 0; g < s->L->ngroups && st == ZERO_OK; g++) {
        const zero_layout_group *lg = &s->L->groups[g];
        if (lg->numel == 0) continue;
        size_t *counts = s->counts + (size_t)g * s->L->world;
        for (uint32_t r = 0; r < s->L->world; r++) counts[r] = (size_t)lg->part_numel;
        float *base = s->params + lg->flat_begin;
        st = svc->iallgatherv(s->world, base + (uint64_t)s->L->rank * lg->part_numel, base, counts,
                              ZERO_DTYPE_F32, &s->reqs[issued]);
        if (st == ZERO_OK) issued++;
    }
    for (uint32_t i = 0; i < issued; i++) { /* every issued request is waited, even after an error */
        zero_status w = svc->wait(s->reqs[i]);
        if (st == ZERO_OK) st = w;
    }
    return st;
}

/* Step 1: device gradient -> host landing buffer; clear the device side. */
static void grads_to_host(offload *s) {
    const zero_services_v1 *svc = s->svc;
    const uint64_t part = s->L->part_numel;
    if (s->part_stage == 1) { /* only the owned ranges of the flat sum were reduced */
        for (uint32_t i = 0; i < s->nowned; i++) {
            const zero_owned_range *o = &s->owned[i];
            svc->mem_copy(s->c, s->hgrad + o->part_lo, s->dgrad + o->flat_lo,
                          (size_t)(o->flat_hi - o->flat_lo) * sizeof(float));
        }
        memset(s->dgrad, 0, (size_t)s->L->flat_numel * sizeof(float));
    } else {
        svc->mem_copy(s->c, s->hgrad, s->dgrad, (size_t)part * sizeof(float));
        memset(s->dgrad, 0, (size_t)part * sizeof(float));
    }
}

/* Step 2: {sum of squares, any non-finite} of this rank's share. */
static void local_norm_parts(offload *s, double agg[2]) {
    const zero_services_v1 *svc = s->svc;
    agg[0] = agg[1] = 0.0;
    if (s->part_stage == 1) {
        for (uint32_t i = 0; i < s->nowned; i++) {
            const float *g = s->hgrad + s->owned[i].part_lo;
            size_t n = (size_t)(s->owned[i].flat_hi - s->owned[i].flat_lo);
            agg[0] += svc->sumsq(s->c, g, ZERO_DTYPE_F32, n);
            if (svc->nonfinite(s->c, g, ZERO_DTYPE_F32, n)) agg[1] = 1.0;
        }
    } else {
        size_t n = (size_t)s->L->part_numel;
        agg[0] = svc->sumsq(s->c, s->hgrad, ZERO_DTYPE_F32, n);
        agg[1] = svc->nonfinite(s->c, s->hgrad, ZERO_DTYPE_F32, n) ? 1.0 : 0.0;
    }
}

zero_status zero__of_boundary(offload *s, const zero_step_ctx *ctx, zero_step_report *rep) {
    const zero_services_v1 *svc = s->svc;
    double t0 = zero__of_now();
    grads_to_host(s);
    double t1 = zero__of_now();
    s->t_d2h += t1 - t0;

    double agg[2];
    local_norm_parts(s, agg);
    zero_status st = svc->allreduce(s->world, agg, 2, ZERO_DTYPE_F64, ZERO_OP_SUM);
    if (st != ZERO_OK) return st;
    if (agg[1] > 0 || !isfinite(agg[0])) { /* skipped step: the window's gradients are dropped */
        rep->overflow = 1;
        rep->grad_norm = -1.0;
        return ZERO_OK;
    }
    const double unscale = ctx->grad_divisor * ctx->loss_scale;
    const double norm = sqrt(agg[0]) / unscale;
    const double coef = (ctx->grad_clip > 0 && norm > ctx->grad_clip) ? ctx->grad_clip / (norm + 1e-6) : 1.0;
    rep->grad_norm = norm;

    double t2 = zero__of_now();
    for (uint32_t i = 0; i < s->nowned; i++) {
        const zero_owned_range *o = &s->owned[i];
        zero_opt_range r = {0};
        r.struct_size = sizeof r;
        r.flat_lo = o->flat_lo;
        r.flat_hi = o->flat_hi;
        r.master = s->master + o->part_lo;
        for (uint32_t k = 0; k < s->nstate; k++) r.state[k] = s->state[k] + o->part_lo;
        r.grad = s->hgrad + o->part_lo;
        r.param_out = s->params + o->flat_lo; /* new weights straight into the device params */
        r.param_out_dtype = ZERO_DTYPE_F32;
        r.grad_mul = (float)(coef / unscale);
        r.grad_dtype = ZERO_DTYPE_F32;
        if ((st = svc->optim_step(s->c, &r)) != ZERO_OK) return st;
    }
    double t3 = zero__of_now();
    s->t_cpu_step += t3 - t2;
    st = zero__of_gather_params(s);
    s->t_h2d_gather += zero__of_now() - t3;
    s->steps++;
    return st;
}
