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

#include "stage3.h"
#include "stage3_offload.h"

/* The shard as the core's step and checkpoint services see it: everything
 * partition-indexed; fp32: the shard is the master, updated in place;
 * mixed precision: the new weights are rounded into the model-dtype shard. */
zero_part_step zero__s3_part_step(const zero__s3 *s) {
    zero_part_step ps = {0};
    ps.struct_size = sizeof ps;
    ps.nranges = s->nowned;
    ps.ranges = s->owned;
    ps.norm_comm = s->world;
    ps.dtype = s->dtype;
    ps.grad = s->grads;
    ps.grad_dtype = s->gdtype;
    ps.grad_index = ZERO_INDEX_PART;
    ps.master = s->master;
    ps.master_index = ZERO_INDEX_PART;
    for (uint32_t k = 0; k < s->nstate; k++) ps.state[k] = s->state[k];
    ps.param_out = s->dtype == ZERO_DTYPE_F32 ? NULL : s->shard;
    ps.param_out_index = ZERO_INDEX_PART;
    return ps;
}

zero_status zero__s3_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    zero__s3 *s = state;
    const zero_services *svc = s->svc;
    /* Verify the gathers no earlier agreement covered (always: the
     * collective sequence must not depend on local state), then settle. */
    zero_status ag = zero__s3_agree(s, "zero_step");
    zero_status st = zero__s3_end_micro_step(s);
    if (ag != ZERO_OK) return ag; /* every rank fails here: nobody enters the flush alone */
    zero_status fl = svc->buckets_flush(s->b); /* collective: flush even after a local gather error */
    if (st == ZERO_OK) st = fl;
    if (st != ZERO_OK) return st;
    if (!ctx->boundary) return zero__s3_prefetch_ahead(s); /* params unchanged: fetch the first layers now */
    const size_t gbytes = (size_t)s->L->part_numel * s->gesize;
    /* The core's shared step: norm over the partition (all-reduced in fp64
     * with the overflow flag), DeepSpeed's clip coefficient, and the fused
     * optimizer pass over the shard.  fp32: the shard is the master, updated
     * in place; mixed precision: the new weights are rounded into the
     * model-dtype shard. */
    zero_part_step ps = zero__s3_part_step(s);
    /* offload: the same norm, then the tiled CPU optimizer over the host tier */
    st = s->off ? zero__s3_off_step(s, ctx, rep) : svc->boundary_step(s->c, &ps, ctx, rep);
    svc->mem_set(s->c, s->grads, 0, gbytes);
    if (st != ZERO_OK) return st;
    if (!rep->overflow) zero__s3_mark_stale(s);
    /* Fetch the next micro-step's first layers while the host prepares its
     * batch (every rank has agreed and settled: identical issue decisions). */
    return zero__s3_prefetch_ahead(s);
}
