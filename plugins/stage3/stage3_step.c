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
 * them.  The gather side is the kit's engine (s->gather); this file
 * uses stage3_offload.c's tiled step and nothing uses this file but the
 * table. */

#include "stage3.h"
#include "stage3_tiers.h"

static zero_status flush(void *state) {
    zero__s3 *s = state;
    return zero_kit_bsets_flush(&s->bs); /* every partition communicator's set (expert groups: one each) */
}

zero_status zero__s3_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    zero__s3 *s = state;
    const zero_services *svc = s->svc;
    /* Verify the gathers no earlier agreement covered (always: the
     * collective sequence must not depend on local state), settle, flush;
     * between boundaries prefetch the first layers. */
    int go_on;
    zero_status st = zero_kit_gather_step_begin(s->gather, ctx->boundary, flush, s, &go_on);
    if (!go_on) return st;
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
    if (!rep->overflow) zero_kit_gather_mark_stale(s->gather);
    /* Fetch the next micro-step's first layers while the host prepares its
     * batch (every rank has agreed and settled: identical issue decisions). */
    return zero_kit_gather_prefetch_ahead(s->gather);
}
