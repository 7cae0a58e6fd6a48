/* mics: initial placement of the shard and the per-param all-gather inside
 * the shard group.  Engine step thread only (see mics.h). */
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

static void drop_one(mics *s, mics_param *mp) {
    s->svc->mem_free(s->c, mp->buf);
    s->svc->mem_free(s->c, mp->recv);
    mp->buf = mp->recv = NULL;
    mp->holds = 0;
}

void mics_drop_gathered(mics *s) {
    for (uint32_t i = 0; i < s->nparams; i++)
        if (s->params[i].buf) drop_one(s, &s->params[i]);
}

/* Every member of the shard group must gather the same params in the same
 * order: one small all-reduce per call proves it, so that a host bug fails
 * with ZERO_ERR_MISMATCH instead of a hang or a truncated message. */
static zero_status agree(mics *s, zero_param_info *const *params, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the indices */
    for (size_t i = 0; i < n; i++) {
        h ^= params[i]->index + 1u;
        h *= 1099511628211ull;
    }
    uint64_t v[2] = {h, ~h};
    zero_status st = s->svc->allreduce(s->shard_comm, v, 2, ZERO_DTYPE_U64, ZERO_OP_MAX);
    if (st != ZERO_OK) return st;
    if (v[0] != h || v[1] != ~h)
        return s->svc->error(s->c, ZERO_ERR_MISMATCH,
                             WHO ": the ranks of a shard group asked zero_gather for different params (first here: "
                                 "'%s', %zu in the call)",
                             n ? params[0]->name : "(none)", n);
    return ZERO_OK;
}

/* All-gather one param inside the shard group: member m contributes the
 * pieces of the world shares it holds (ranks m, m+S, ...), in that order;
 * they are then put in flat order into the full tensor. */
static zero_status gather_one(mics *s, mics_param *mp) {
    const zero_services *svc = s->svc;
    const size_t es = s->esize;
    const size_t bytes = (size_t)mp->info->numel * es;
    mp->buf = svc->mem_alloc(s->c, ZERO_TIER_DEVICE, ZERO_MEM_GATHER, bytes ? bytes : 1);
    mp->recv = svc->mem_alloc(s->c, ZERO_TIER_DEVICE, ZERO_MEM_GATHER, bytes ? bytes : 1);
    if (!mp->buf || !mp->recv) {
        drop_one(s, mp);
        return svc->error(s->c, ZERO_ERR_OUT_OF_MEMORY, WHO ": no memory to gather '%s'", mp->info->name);
    }
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
    zero_comm_req *req = NULL;
    zero_status st = svc->iallgatherv(s->shard_comm, (char *)mp->recv + mine_at * es, mp->recv, mp->counts, s->dtype,
                                      &req);
    if (st == ZERO_OK) st = svc->wait(req);
    if (st != ZERO_OK) {
        drop_one(s, mp);
        return st;
    }
    at = 0;
    for (int m = 0; m < s->S; m++)
        for (int k = 0; k < s->R; k++) {
            const int j = m + k * s->S;
            if (!mp->len[j]) continue;
            svc->mem_copy(s->c, (char *)mp->buf + mp->off[j] * es, (const char *)mp->recv + at * es,
                          (size_t)mp->len[j] * es);
            at += (size_t)mp->len[j];
        }
    return ZERO_OK;
}

zero_status mics_gather(void *state, zero_param_info *const *params, size_t n, void **ptrs) {
    mics *s = state;
    zero_status st = agree(s, params, n);
    if (st != ZERO_OK) return st;
    for (size_t i = 0; i < n; i++) {
        mics_param *mp = params[i]->plugin_data;
        if (!mp->buf && (st = gather_one(s, mp)) != ZERO_OK) return st;
        mp->holds++;
        ptrs[i] = mp->buf;
    }
    return ZERO_OK;
}

zero_status mics_release(void *state, zero_param_info *const *params, size_t n) {
    mics *s = state;
    for (size_t i = 0; i < n; i++) {
        mics_param *mp = params[i]->plugin_data;
        if (mp->holds > 0 && --mp->holds == 0) drop_one(s, mp);
    }
    return ZERO_OK;
}
