/* mics: the end of a micro-step and the boundary step.  Engine step thread. */
#include <string.h>

#include "mics.h"

zero_part_step mics_part_step(const mics *s) {
    return zero_kit_shard_part_step(s->ranges, s->nranges, NULL, s->dtype, s->grad, s->gdtype, s->master, s->state,
                                    s->nstate, (void *)s->master != s->pshard ? s->pshard : NULL);
}

/* The norm exactly as stage 2 computes it: each rank's own world share of
 * the reduced gradient, summed over the world in one fp64 all-reduce (the
 * shard is replicated R times, so summing the shards would count it R
 * times; and the same partial sums give stage0's bits). */
static zero_status norm_of_shares(mics *s, const zero_step_ctx *ctx, zero_grad_norm *gn) {
    zero_part_step ps = mics_part_step(s);
    ps.nranges = s->nmine;
    ps.ranges = s->mine;
    ps.grad = s->acc;
    return s->svc->grad_norm(s->c, &ps, ctx, gn);
}

/* The shard's gradient: the world shares of this replication group,
 * all-gathered in rank order (block k = rank shard_index + k*S). */
static zero_status gather_grad(mics *s) {
    const zero_services *svc = s->svc;
    if (s->R == 1) {
        svc->mem_copy(s->c, s->grad, s->acc, (size_t)s->part * s->gesize);
        return ZERO_OK;
    }
    size_t counts[1024];
    if (s->R > 1024) return svc->error(s->c, ZERO_ERR_UNSUPPORTED, "mics: more than 1024 replica groups");
    for (int k = 0; k < s->R; k++) counts[k] = (size_t)s->part;
    const int me = s->rank / s->S; /* my rank in the replication group */
    char *mine = (char *)s->grad + (size_t)me * s->part * s->gesize;
    svc->mem_copy(s->c, mine, s->acc, (size_t)s->part * s->gesize);
    zero_comm_req *req = NULL;
    zero_status st = svc->iallgatherv(s->repl_comm, mine, s->grad, counts, s->gdtype, &req);
    return st == ZERO_OK ? svc->wait(req) : st;
}

static zero_status flush(void *state) {
    mics *s = state;
    return s->svc->buckets_flush(s->b);
}

zero_status mics_step(void *state, const zero_step_ctx *ctx, zero_step_report *rep) {
    mics *s = state;
    const zero_services *svc = s->svc;
    /* the gather engine: verify the micro-step's gathers (collective, on
     * every rank), drop what was gathered (valid until zero_step), flush */
    int go_on;
    zero_status st = zero_kit_gather_step_begin(s->gather, ctx->boundary, flush, s, &go_on);
    if (!go_on) return st;
    zero_grad_norm gn;
    st = norm_of_shares(s, ctx, &gn);
    if (st == ZERO_OK) {
        rep->overflow = gn.overflow;
        rep->grad_norm = gn.norm;
        if (!gn.overflow && (st = gather_grad(s)) == ZERO_OK) {
            zero_part_step ps = mics_part_step(s);
            st = svc->part_step(s->c, &ps, gn.grad_mul);
        }
    }
    /* the next window starts from zero, overflow or not */
    zero_status z = svc->mem_set(s->c, s->acc, 0, (size_t)s->part * s->gesize);
    if (st == ZERO_OK) st = z;
    if (st != ZERO_OK) return st;
    if (!rep->overflow) zero_kit_gather_mark_stale(s->gather); /* persistent params: refetched at their next use */
    return zero_kit_gather_prefetch_ahead(s->gather);
}
