/* zeropp: parameter gathers -- world (exact or qwZ-quantized) for the first
 * use of a parameter after a step, the hpZ group for every later one.
 * Engine step thread only. */
#include <stdlib.h>
#include <string.h>

#include "zeropp.h"

#define WHO "zeropp"

static void drop_one(zpp *s, zpp_param *mp) {
    s->svc->mem_free(s->c, mp->buf);
    mp->buf = NULL;
    mp->holds = 0;
}

void zpp_drop_gathered(zpp *s) {
    for (uint32_t i = 0; i < s->nparams; i++)
        if (s->params[i].buf) drop_one(s, &s->params[i]);
}

void zpp_invalidate_secondary(zpp *s) {
    for (uint32_t i = 0; i < s->nparams; i++) s->params[i].sec_valid = 0;
}

/* The ranks of comm must ask for the same params in the same order: one
 * small all-reduce proves it (ZERO_ERR_MISMATCH rather than a hang). */
static zero_status agree(zpp *s, zero_comm *comm, zero_param_info *const *params, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= params[i]->index + 1u;
        h *= 1099511628211ull;
    }
    uint64_t v[2] = {h, ~h};
    zero_status st = s->svc->allreduce(comm, v, 2, ZERO_DTYPE_U64, ZERO_OP_MAX);
    if (st != ZERO_OK) return st;
    if (v[0] != h || v[1] != ~h)
        return s->svc->error(s->c, ZERO_ERR_MISMATCH,
                             WHO ": ranks asked zero_gather for different params (first here: '%s', %zu in the call)",
                             n ? params[0]->name : "(none)", n);
    return ZERO_OK;
}

/* World gather from the primary shares: world share j's piece of the param
 * is its j-th block, so the all-gather lands in flat order. */
static zero_status gather_world(zpp *s, zpp_param *mp) {
    const zero_services *svc = s->svc;
    const size_t es = s->esize, mine = mp->counts[s->rank];
    if (mine)
        svc->mem_copy(s->c, (char *)mp->buf + mp->off_me * es,
                      (const char *)s->pshard + mp->part_lo[s->rank] * es, mine * es);
    if (s->qw) {
        zero_quant_spec q = ZERO_QUANT_SPEC_INIT;
        q.block = s->qw_block;
        return svc->allgather_quantized(s->gcomm, mp->buf, mp->counts, s->dtype, &q);
    }
    zero_comm_req *req = NULL;
    zero_status st = svc->iallgatherv(s->gcomm, (char *)mp->buf + mp->off_me * es, mp->buf, mp->counts, s->dtype, &req);
    return st == ZERO_OK ? svc->wait(req) : st;
}

/* hpZ group gather from the secondary chunks (the values the world gather
 * produced, so every gather of a window sees the same tensor). */
static zero_status gather_group(zpp *s, zpp_param *mp) {
    const zero_services *svc = s->svc;
    const size_t es = s->esize;
    char *mine = (char *)mp->buf + mp->hoff_me * es;
    if (mp->hcounts[s->hrank]) svc->mem_copy(s->c, mine, mp->sec, mp->hcounts[s->hrank] * es);
    zero_comm_req *req = NULL;
    zero_status st = svc->iallgatherv(s->hcomm, mine, mp->buf, mp->hcounts, s->dtype, &req);
    return st == ZERO_OK ? svc->wait(req) : st;
}

static zero_status gather_one(zpp *s, zpp_param *mp, int from_group) {
    const size_t bytes = (size_t)mp->info->numel * s->esize;
    mp->buf = s->svc->mem_alloc(s->c, ZERO_TIER_DEVICE, ZERO_MEM_GATHER, bytes ? bytes : 1);
    if (!mp->buf) return s->svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": no memory to gather '%s'", mp->info->name);
    zero_status st = from_group ? gather_group(s, mp) : gather_world(s, mp);
    if (st != ZERO_OK) {
        drop_one(s, mp);
        return st;
    }
    if (s->P > 1 && !from_group) { /* keep this rank's secondary chunk */
        if (mp->hcounts[s->hrank])
            s->svc->mem_copy(s->c, mp->sec, (char *)mp->buf + mp->hoff_me * s->esize, mp->hcounts[s->hrank] * s->esize);
        mp->sec_valid = 1;
    }
    return ZERO_OK;
}

zero_status zpp_gather(void *state, zero_param_info *const *params, size_t n, void **ptrs) {
    zpp *s = state;
    /* all from the hpZ group when every param has its secondary chunk;
     * that state follows the agreed gather history, so it is the same on
     * every rank */
    int group = s->P > 1;
    for (size_t i = 0; i < n && group; i++) group = ((zpp_param *)params[i]->plugin_data)->sec_valid;
    zero_status st = agree(s, group ? s->hcomm : s->gcomm, params, n);
    if (st != ZERO_OK) return st;
    for (size_t i = 0; i < n; i++) {
        zpp_param *mp = params[i]->plugin_data;
        if (!mp->buf && (st = gather_one(s, mp, group)) != ZERO_OK) return st;
        mp->holds++;
        ptrs[i] = mp->buf;
    }
    return ZERO_OK;
}

zero_status zpp_release(void *state, zero_param_info *const *params, size_t n) {
    zpp *s = state;
    for (size_t i = 0; i < n; i++) {
        zpp_param *mp = params[i]->plugin_data;
        if (mp->holds > 0 && --mp->holds == 0) drop_one(s, mp);
    }
    return ZERO_OK;
}
