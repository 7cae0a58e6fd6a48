/* zeropp: the fetch the kit's gather engine calls -- a world all-gather
 * (exact, or qwZ-quantized) for the first use of a parameter after a step,
 * the hpZ group for every later one -- and the table's gather entries on
 * the engine (zero_kit_gather.h), which does the agreement, recorded
 * order, prefetch, reuse distance, persistence, pool and budget.
 * Engine step thread only. */
#include <stdlib.h>
#include <string.h>

#include "zeropp.h"

#define WHO "zeropp"

void zpp_params_changed(zpp *s) {
    zero_kit_gather_mark_stale(s->gather);
    for (uint32_t i = 0; i < s->nparams; i++) s->params[i].sec_valid = 0;
}

/* World fetch from the primary shares: world share j's piece of the param
 * is its j-th block, so the all-gather lands in flat order.  qwZ's
 * quantized all-gather completes before it returns (*req stays NULL). */
static zero_status fetch_world(zpp *s, zpp_param *mp, void *buf, zero_comm_req **req) {
    const zero_services *svc = s->svc;
    const size_t es = s->esize, mine = mp->counts[s->rank];
    if (mine)
        svc->mem_copy(s->c, (char *)buf + mp->off_me * es, (const char *)s->pshard + mp->part_lo[s->rank] * es,
                      mine * es);
    if (s->qw) {
        zero_quant_spec q = ZERO_QUANT_SPEC_INIT;
        q.block = s->qw_block;
        return svc->allgather_quantized(s->gcomm, buf, mp->counts, s->dtype, &q);
    }
    return svc->iallgatherv(s->gcomm, (char *)buf + mp->off_me * es, buf, mp->counts, s->dtype, req);
}

/* hpZ group fetch from the secondary chunks (the values the world fetch
 * produced, so every gather of a window sees the same tensor). */
static zero_status fetch_group(zpp *s, zpp_param *mp, void *buf, zero_comm_req **req) {
    const size_t es = s->esize;
    char *mine = (char *)buf + mp->hoff_me * es;
    if (mp->hcounts[s->hrank]) s->svc->mem_copy(s->c, mine, mp->sec, mp->hcounts[s->hrank] * es);
    return s->svc->iallgatherv(s->hcomm, mine, buf, mp->hcounts, s->dtype, req);
}

/* From the hpZ group when the param's secondary chunk is current; that
 * state follows the agreed gather history, so the choice is the same on
 * every rank.  A world fetch makes the chunk current: later fetches of the
 * param (until the next step) may be issued before it lands, but none
 * reads the chunk before, since a param has one fetch in flight at most
 * and its buffer is dropped (the fetch landed) before it is fetched again. */
static zero_status fetch(void *ctx, uint32_t idx, void *buf, zero_comm_req **req) {
    zpp *s = ctx;
    zpp_param *mp = &s->params[idx];
    if (s->P > 1 && mp->sec_valid) return fetch_group(s, mp, buf, req);
    zero_status st = fetch_world(s, mp, buf, req);
    if (st == ZERO_OK && s->P > 1) mp->sec_valid = mp->keep_sec = 1;
    return st;
}

/* A world fetch landed: keep this rank's secondary chunk. */
static zero_status landed(void *ctx, uint32_t idx, void *buf, zero_status wait_st) {
    zpp *s = ctx;
    zpp_param *mp = &s->params[idx];
    if (mp->keep_sec && wait_st == ZERO_OK && mp->hcounts[s->hrank])
        s->svc->mem_copy(s->c, mp->sec, (char *)buf + mp->hoff_me * s->esize, mp->hcounts[s->hrank] * s->esize);
    mp->keep_sec = 0;
    return ZERO_OK;
}

zero_status zpp_gather_setup(zpp *s) {
    const zero_layout *L = s->svc->layout(s->c);
    zero_kit_gather_spec spec;
    zero_kit_gather_spec_from_config(s->svc, s->dtype, 0, &spec);
    spec.who = WHO;
    spec.comm = s->gcomm; /* every rank gathers in lockstep: agree over the world (our duplicate) */
    spec.gathers_world = s->nranks > 1;
    /* (no batching: the quantized and hpZ fetches run on other communicators too) */
    spec.cap_bytes = (L->flat_numel - L->part_numel) * (uint64_t)s->esize; /* what partitioning saves */
    spec.ops.fetch = fetch;
    spec.ops.landed = landed;
    spec.ctx = s;
    return zero_kit_gather_create(s->svc, &spec, &s->gather);
}

zero_status zpp_gather(void *state, zero_param_info *const *params, size_t n, void **ptrs) {
    zpp *s = state;
    return zero_kit_gather_get(s->gather, params, n, ptrs);
}

zero_status zpp_release(void *state, zero_param_info *const *params, size_t n) {
    zpp *s = state;
    return zero_kit_gather_release(s->gather, params, n);
}

zero_status zpp_set_phase(void *state, const char *phase) {
    zpp *s = state;
    return zero_kit_gather_set_phase(s->gather, phase);
}
