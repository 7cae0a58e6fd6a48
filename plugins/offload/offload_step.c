/* offload: the boundary step (see offload.h).
 *
 *  1. grads to host: the owned partition's summed gradient (device tier,
 *     model dtype) is copied into the host landing buffer, block by block as
 *     the bucket engine reports each bucket's reduced block final
 *     (zero_bucket_spec.on_block_final) during the boundary micro-step's
 *     backward; whatever was not delivered that way (an engine without the
 *     callback) is copied here, after buckets_flush.  Then the device
 *     accumulator is cleared for the next window.  On this CPU-only build a
 *     copy is a memcpy; on a CUDA engine svc->mem_copy is a device-to-host
 *     copy into the pinned landing buffer (host tier with pin_memory).
 *  2. norm and overflow over the host copy (svc->grad_norm: the same
 *     summation order as every other plugin, so offload is bitwise equal to
 *     stage1/stage2), one fp64 all-reduce.
 *  3. the CPU optimizer (svc->part_step) steps the host fp32 master and
 *     states (host tier only: a CUDA device tier cannot be written by the
 *     CPU, so there is no fused param_out into the device params);
 *  4. the new weights go to the device in the model dtype
 *     (offload_tiers.c) and the owned shares are all-gathered in place
 *     (svc->allgather_shares). */
#include <string.h>
#include <time.h>

#include "offload.h"

double zero__of_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void zero__of_block_final(void *user, const zero_owned_range *block) {
    offload *s = user;
    /* Earlier micro-steps of the window only accumulate on the device. */
    if (!s->svc->micro_is_boundary(s->c)) return;
    double t0 = zero__of_now();
    zero__of_block_to_host(s, block);
    s->early_numel += block->flat_hi - block->flat_lo;
    if (!s->in_flush) s->backward_numel += block->flat_hi - block->flat_lo;
    s->t_d2h_early += zero__of_now() - t0;
}

/* Step 1: device gradient -> host landing buffer (what on_block_final did
 * not already deliver); clear the device side. */
static void grads_to_host(offload *s) {
    const int delivered = s->early_numel == s->L->part_numel;
    s->early_numel = 0;
    s->copied_numel += s->L->part_numel;
    if (delivered)
        s->early_steps++;
    else /* an engine without on_block_final (or a failed window): every owned range now */
        for (uint32_t i = 0; i < s->nowned; i++) zero__of_block_to_host(s, &s->owned[i]);
    s->svc->mem_set(s->c, s->dgrad, 0, zero__of_dgrad_bytes(s));
}

/* Everything the core's step services need, all on the host tier; no
 * param_out: the new weights cross to the device afterwards. */
zero_part_step zero__of_part_step(const offload *s) {
    zero_part_step ps;
    memset(&ps, 0, sizeof ps);
    ps.struct_size = sizeof ps;
    ps.nranges = s->nowned;
    ps.ranges = s->owned;
    ps.norm_comm = s->world;
    ps.dtype = s->dtype;
    ps.grad = s->hgrad;
    ps.grad_dtype = s->gdtype;
    ps.grad_index = ZERO_INDEX_PART;
    ps.master = s->master;
    ps.master_index = ZERO_INDEX_PART;
    for (uint32_t k = 0; k < s->nstate; k++) ps.state[k] = s->state[k];
    return ps;
}

zero_status zero__of_boundary(offload *s, const zero_step_ctx *ctx, zero_step_report *rep) {
    const zero_services *svc = s->svc;
    double t0 = zero__of_now();
    grads_to_host(s);
    double t1 = zero__of_now();
    s->t_d2h += t1 - t0;

    zero_part_step ps = zero__of_part_step(s);
    zero_grad_norm gn;
    zero_status st = svc->grad_norm(s->c, &ps, ctx, &gn);
    if (st != ZERO_OK) return st;
    rep->overflow = gn.overflow;
    rep->grad_norm = gn.norm;
    if (gn.overflow) return ZERO_OK; /* skipped step: the window's gradients are dropped */

    double t2 = zero__of_now();
    if ((st = svc->part_step(s->c, &ps, gn.grad_mul)) != ZERO_OK) return st;
    double t3 = zero__of_now();
    s->t_cpu_step += t3 - t2;
    zero__of_params_to_device(s);
    st = svc->allgather_shares(s->c, s->world, s->params, s->dtype);
    s->t_h2d_gather += zero__of_now() - t3;
    s->steps++;
    return st;
}
