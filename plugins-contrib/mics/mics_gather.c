/* mics: initial placement of the shard, and the fetch the kit's gather
 * engine calls: one param's all-gather inside the shard group.  The engine
 * (zero_kit_gather.h) does the rest -- agreement, recorded order, prefetch,
 * reuse distance, persistence, pool and budget.  Engine step thread only
 * (see mics.h). */
#include <stdlib.h>
#include <string.h>

#include "mics.h"

#define WHO "mics"

zero_status mics_place_params(mics *s) {
    const zero_services *svc = s->svc;
    for (uint32_t i = 0; i < s->nparams; i++) {
        const mics_param *mp = &s->params[i];
        const char *init = mp->info->init_data;
        if (!init) continue;
        for (int k = 0; k < s->R; k++) {
            const int j = s->shard_index + k * s->S;
            if (!mp->len[j]) continue;
            svc->mem_copy(s->c, (char *)s->pshard + ((uint64_t)k * s->part + mp->part_lo[j]) * s->esize,
                          init + mp->off[j] * s->esize, (size_t)mp->len[j] * s->esize);
        }
    }
    return ZERO_OK;
}

/* Fetch one param inside the shard group: member m contributes the pieces
 * of the world shares it holds (ranks m, m+S, ...), in that order, into a
 * staging buffer; the all-gather is left in flight (the engine waits for
 * it when the host needs the param, or earlier), and landed() puts the
 * pieces in flat order into the full tensor. */
static zero_status fetch(void *ctx, uint32_t idx, void *buf, zero_comm_req **req) {
    mics *s = ctx;
    const zero_services *svc = s->svc;
    mics_param *mp = &s->params[idx];
    const size_t es = s->esize, bytes = (size_t)mp->info->numel * es;
    (void)buf;
    mp->recv = svc->mem_alloc(s->c, ZERO_TIER_DEVICE, ZERO_MEM_GATHER, bytes ? bytes : 1);
    if (!mp->recv) return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": no memory to gather '%s'", mp->info->name);
    size_t mine_at = 0;
    for (int m = 0; m < s->shard_index; m++) mine_at += mp->counts[m];
    size_t at = mine_at; /* our own block, in place */
    for (int k = 0; k < s->R; k++) {
        const int j = s->shard_index + k * s->S;
        if (!mp->len[j]) continue;
        svc->mem_copy(s->c, (char *)mp->recv + at * es,
                      (const char *)s->pshard + ((uint64_t)k * s->part + mp->part_lo[j]) * es, (size_t)mp->len[j] * es);
        at += (size_t)mp->len[j];
    }
    zero_status st = svc->iallgatherv(s->shard_comm, (char *)mp->recv + mine_at * es, mp->recv, mp->counts, s->dtype,
                                      req);
    if (st != ZERO_OK) {
        *req = NULL;
        svc->mem_free(s->c, mp->recv);
        mp->recv = NULL;
    }
    return st;
}

/* The all-gather of idx has completed: member-major pieces to flat order. */
static zero_status landed(void *ctx, uint32_t idx, void *buf, zero_status wait_st) {
    mics *s = ctx;
    mics_param *mp = &s->params[idx];
    const size_t es = s->esize;
    size_t at = 0;
    for (int m = 0; m < s->S && wait_st == ZERO_OK; m++)
        for (int k = 0; k < s->R; k++) {
            const int j = m + k * s->S;
            if (!mp->len[j]) continue;
            s->svc->mem_copy(s->c, (char *)buf + mp->off[j] * es, (const char *)mp->recv + at * es,
                             (size_t)mp->len[j] * es);
            at += (size_t)mp->len[j];
        }
    s->svc->mem_free(s->c, mp->recv);
    mp->recv = NULL;
    return ZERO_OK;
}

zero_status mics_gather_setup(mics *s) {
    const zero_layout *L = s->svc->layout(s->c);
    zero_kit_gather_spec spec;
    zero_kit_gather_spec_from_config(s->svc, s->dtype, 0, &spec);
    spec.who = WHO;
    spec.comm = s->shard_comm; /* the ranks that gather together agree */
    spec.group_comm = s->shard_comm;
    spec.gathers_world = s->S > 1;
    /* budget: stage 3's at this world size (what partitioning over every
     * rank saves), so MiCS gathers as stage 3 would; its larger shard is
     * the memory it trades for the shorter all-gathers */
    spec.cap_bytes = (L->flat_numel - L->part_numel) * (uint64_t)s->esize;
    spec.ops.fetch = fetch;
    spec.ops.landed = landed;
    spec.ctx = s;
    return zero_kit_gather_create(s->svc, &spec, &s->gather);
}

zero_status mics_gather(void *state, zero_param_info *const *params, size_t n, void **ptrs) {
    mics *s = state;
    return zero_kit_gather_get(s->gather, params, n, ptrs);
}

zero_status mics_release(void *state, zero_param_info *const *params, size_t n) {
    mics *s = state;
    return zero_kit_gather_release(s->gather, params, n);
}

zero_status mics_set_phase(void *state, const char *phase) {
    mics *s = state;
    return zero_kit_gather_set_phase(s->gather, phase);
}
