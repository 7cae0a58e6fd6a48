/* zero_step for stage 3.
 *
 * Every micro-step: agree on the gathers not verified yet, finish them and
 * drop the gathered buffers
 * (pointers are valid only until zero_step), settle the gather trace, and
 * flush the bucket engine, whose reduce-scatters have been ADDING this
 * rank's block into the gradient partition.  At the boundary: global norm
 * (sum of squares all-reduced in fp64, overflow agreed in the same call),
 * clip, and each rank steps its own shard.  There is no all-gather of the
 * model after the step: the next zero_gather fetches the new values, and
 * persistent params are marked stale so that their next gather refreshes
 * them. */
#include <math.h>
#include <string.h>

#include "stage3.h"

zero_status zero__s3_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    zero__s3 *s = state;
    const zero_services_v1 *svc = s->svc;
    /* Verify the gathers no earlier agreement covered (always: the
     * collective sequence must not depend on local state), then settle. */
    zero_status ag = zero__s3_agree(s, "zero_step");
    zero_status st = zero__s3_end_micro_step(s);
    if (ag != ZERO_OK) return ag; /* every rank fails here: nobody enters the flush alone */
    zero_status fl = svc->buckets_flush(s->b); /* collective: flush even after a local gather error */
    if (st == ZERO_OK) st = fl;
    if (st != ZERO_OK || !ctx->boundary) return st;
    const size_t part = (size_t)s->L->part_numel;
    const size_t gbytes = part * s->esize;

    double agg[2];
    agg[0] = part ? svc->sumsq(s->c, s->grads, s->dtype, part) : 0.0;
    agg[1] = part && svc->nonfinite(s->c, s->grads, s->dtype, part) ? 1.0 : 0.0;
    if ((st = svc->allreduce(s->world, agg, 2, ZERO_DTYPE_F64, ZERO_OP_SUM)) != ZERO_OK) return st;
    if (agg[1] > 0 || !isfinite(agg[0])) {
        rep->overflow = 1;
        rep->grad_norm = -1.0;
        memset(s->grads, 0, gbytes);
        return ZERO_OK;
    }
    /* Same norm and clip coefficient as stage0/stage2 (DeepSpeed's). */
    const double unscale = ctx->grad_divisor * ctx->loss_scale;
    double norm = sqrt(agg[0]) / unscale;
    double coef = (ctx->grad_clip > 0 && norm > ctx->grad_clip) ? ctx->grad_clip / (norm + 1e-6) : 1.0;
    rep->grad_norm = norm;

    for (uint32_t i = 0; i < s->nowned; i++) {
        const zero_owned_range *o = &s->owned[i];
        zero_opt_range r = {0};
        r.struct_size = sizeof r;
        r.flat_lo = o->flat_lo;
        r.flat_hi = o->flat_hi;
        r.master = s->master + o->part_lo;
        for (uint32_t k = 0; k < s->nstate; k++) r.state[k] = s->state[k] + o->part_lo;
        r.grad = (const char *)s->grads + (size_t)o->part_lo * s->esize;
        /* fp32: the shard is the master, updated in place.  Mixed
         * precision: the new weights are rounded into the model-dtype shard. */
        r.param_out = s->dtype == ZERO_DTYPE_F32 ? NULL : (char *)s->shard + (size_t)o->part_lo * s->esize;
        r.param_out_dtype = s->dtype;
        r.grad_mul = (float)(coef / unscale);
        r.grad_dtype = s->dtype;
        if ((st = svc->optim_step(s->c, &r)) != ZERO_OK) return st;
    }
    memset(s->grads, 0, gbytes);
    zero__s3_mark_stale(s);
    return ZERO_OK;
}
