/* The gather engine's plan (zero_kit_gather_plan_peak, zero_kit_gather.h):
 * the peak of its ZERO_MEM_GATHER bytes -- persistent buffers, the pool,
 * and (for a strategy whose fetch stages its pieces) the fetch staging --
 * found by replaying the engine's decisions for the canonical host.
 *
 * Why a replay: the pool's high-water mark follows from which buffer each
 * gather reuses (best fit within 2x), what prefetch fetches ahead
 * (stage3_prefetch_bucket_size, refilled below half), what a release keeps
 * for reuse (stage3_max_reuse_distance) and the budget; no closed formula
 * gives it.  The replay below mirrors gather_engine.c and gather_pool.c
 * decision for decision (without memory or communication); tests/plan
 * checks it against the accountant's measured peak for stage 3, MiCS and
 * ZeRO++.  (Moved here from plugins/stage3/stage3_plan.c so that every
 * strategy on the engine plans it the same way; stage 3's figures are
 * unchanged.)
 *
 * Canonical host (docs/planner.md): every micro-step gathers each param
 * alone in registration order and releases it (forward), then the same in
 * reverse order (backward), then zero_step; boundaries every
 * gradient_accumulation_steps micro-steps.  A host that holds several
 * params at once needs more, up to stage3_max_live_parameters.
 * Pure; thread-safe. */
#include <stdlib.h>
#include <string.h>

#include "gather_internal.h"

#define PLAN_MICRO_STEPS 8 /* the pool only grows; a few windows reach its steady state */

typedef struct sp_param {
    uint64_t numel;
    size_t cap;      /* buffer bytes, 0 = none */
    int has_buf, fresh, holds, prefetched, persistent, landing;
    int alias;       /* its own full tensor (ops.alias): no buffer, never stale */
    size_t last_pos;
} sp_param;

typedef struct sp {
    sp_param *p;
    uint32_t n;
    size_t esize;
    int staging;     /* each fetch holds numel * esize more bytes until it lands */
    size_t *cache;   /* cached buffer capacities */
    size_t ncache, cache_cap;
    uint64_t allocated, cached, persistent, limit, acct_persistent, staged, peak;
    uint32_t *trace; /* fwd + bwd order */
    size_t len;
    int64_t *next;
    uint64_t *prefix;
    int on_track;
    size_t pos;
    uint64_t outstanding, prefetch_numel, max_reuse;
} sp;

/* what the accountant records for one allocation of numel elements */
static uint64_t staged_bytes(const sp *s, const sp_param *p) {
    const uint64_t b = p->numel * s->esize;
    return b ? b : 1;
}

static void note_peak(sp *s) {
    const uint64_t live = s->acct_persistent + s->allocated + s->staged;
    if (live > s->peak) s->peak = live;
}

static void put(sp *s, size_t cap) { /* zero_kit__pool_put */
    if (s->ncache == s->cache_cap) {
        size_t nc = s->cache_cap ? s->cache_cap * 2 : 16;
        size_t *v = realloc(s->cache, nc * sizeof *v);
        if (!v) { /* cannot cache: freed, as the pool does */
            s->allocated -= cap;
            return;
        }
        s->cache = v;
        s->cache_cap = nc;
    }
    s->cache[s->ncache++] = cap;
    s->cached += cap;
}

static void free_cached(sp *s, size_t i) {
    s->allocated -= s->cache[i];
    s->cached -= s->cache[i];
    s->cache[i] = s->cache[--s->ncache];
}

static int free_largest(sp *s) {
    if (!s->ncache) return 0;
    size_t best = 0;
    for (size_t i = 1; i < s->ncache; i++)
        if (s->cache[i] > s->cache[best]) best = i;
    free_cached(s, best);
    return 1;
}

/* zero_kit__finish_fetch: the fetch landed, its staging is freed */
static void finish(sp *s, sp_param *p) {
    if (!p->landing) return;
    p->landing = 0;
    if (s->staging) s->staged -= staged_bytes(s, p);
}

static void drop(sp *s, sp_param *p) { /* zero_kit__drop_buffer */
    if (!p->has_buf || p->persistent) return;
    finish(s, p);
    put(s, p->cap);
    p->has_buf = 0;
    p->cap = 0;
    p->fresh = 0;
}

/* gather_pool.c next_use / victim / evict_kept: of the released (kept)
 * buffers used again after `horizon`, the one used again the latest among
 * those large enough to make the room (short_by bytes) alone, else the
 * largest; ties by index.  The evicted buffer goes to the cache, where the
 * caller's next best fit may take it. */
static size_t next_use(const sp *s, const sp_param *p) {
    if (!s->on_track || p->last_pos >= s->len || s->next[p->last_pos] < 0) return SIZE_MAX;
    return (size_t)s->next[p->last_pos];
}

static int evictable(const sp_param *p) {
    return p->has_buf && !p->persistent && !p->holds && !p->prefetched && !p->landing;
}

static int evict_kept(sp *s, size_t horizon, uint64_t short_by) {
    uint32_t best = UINT32_MAX;
    size_t best_next = 0, best_cap = 0;
    int best_big = 0;
    for (uint32_t i = 0; i < s->n; i++) { /* index order: ties go to the lower index */
        const sp_param *p = &s->p[i];
        if (!evictable(p)) continue;
        const size_t nx = next_use(s, p);
        const int big = p->cap >= short_by;
        if (nx <= horizon) continue;
        int better = best == UINT32_MAX || big > best_big;
        if (!better && big == best_big)
            better = (!big && p->cap != best_cap) ? p->cap > best_cap : nx > best_next;
        if (better) {
            best = i;
            best_next = nx;
            best_cap = p->cap;
            best_big = big;
        }
    }
    if (best == UINT32_MAX) return 0;
    drop(s, &s->p[best]);
    return 1;
}

static int fits(const sp *s, size_t b) { return s->allocated + s->persistent + b <= s->limit; }

static size_t best_fit(const sp *s, size_t b) {
    size_t best = (size_t)-1;
    for (size_t i = 0; i < s->ncache; i++)
        if (s->cache[i] >= b && s->cache[i] / 2 <= b && (best == (size_t)-1 || s->cache[i] < s->cache[best]))
            best = i;
    return best;
}

static int could_get(const sp *s, size_t b, size_t horizon) {
    if (best_fit(s, b) != (size_t)-1) return 1;
    uint64_t need = s->allocated - s->cached + s->persistent + b;
    for (uint32_t i = 0; i < s->n && need > s->limit; i++) {
        const sp_param *p = &s->p[i];
        if (evictable(p) && next_use(s, p) > horizon) {
            if (p->cap >= b && p->cap / 2 <= b) return 1;
            need -= p->cap < need ? p->cap : need;
        }
    }
    return need <= s->limit;
}

/* zero_kit__pool_get, step for step: a prefetch that cannot fit takes
 * nothing; reuse a cached buffer that fits, else free cached ones until
 * the new one fits, else evict kept buffers (a prefetch: only those used
 * after `horizon`) into the cache and retry.  0 when a prefetch must stop. */
static int get(sp *s, size_t b, int demand, size_t horizon, size_t *cap) {
    if (!demand && !could_get(s, b, horizon)) return 0;
    for (;;) {
        size_t best = best_fit(s, b);
        if (best != (size_t)-1) {
            *cap = s->cache[best];
            s->cached -= *cap;
            s->cache[best] = s->cache[--s->ncache];
            return 1;
        }
        if (fits(s, b)) break;
        if (free_largest(s)) continue;
        if (evict_kept(s, demand ? 0 : horizon, s->allocated + s->persistent + b - s->limit)) continue;
        if (!demand) return 0;
        break;
    }
    s->allocated += b;
    note_peak(s);
    *cap = b;
    return 1;
}

static int issue(sp *s, sp_param *p, int demand, size_t horizon) {
    if (p->has_buf && p->fresh) return 1;
    if (!p->has_buf) {
        size_t cap = 0;
        if (!get(s, (size_t)p->numel * s->esize, demand, horizon, &cap)) return 0;
        p->cap = cap;
        p->has_buf = 1;
    }
    p->fresh = 1;
    p->landing = 1;
    if (s->staging) { /* the fetch's own allocation, after the buffer's */
        s->staged += staged_bytes(s, p);
        note_peak(s);
    }
    return 1;
}

static void unmark(sp *s, sp_param *p) {
    if (!p->prefetched) return;
    p->prefetched = 0;
    s->outstanding -= p->numel;
}

static int prefetch_wanted(const sp *s) {
    if (!s->on_track || !s->prefetch_numel || s->outstanding * 2 > s->prefetch_numel) return 0;
    for (size_t k = s->pos, w = 0; k < s->len && w < ZERO_KIT__PREFETCH_WALK; k++, w++) {
        const sp_param *p = &s->p[s->trace[k]];
        if (p->has_buf && p->fresh) continue;
        if (s->outstanding + p->numel > s->prefetch_numel) return 0;
        return p->has_buf || could_get(s, (size_t)p->numel * s->esize, k);
    }
    return 0;
}

static void prefetch(sp *s) {
    if (!s->on_track || !s->prefetch_numel || !prefetch_wanted(s)) return;
    for (size_t k = s->pos, w = 0; k < s->len && w < ZERO_KIT__PREFETCH_WALK; k++, w++) {
        sp_param *p = &s->p[s->trace[k]];
        if (p->has_buf && p->fresh) continue;
        if (s->outstanding + p->numel > s->prefetch_numel) break;
        if (!issue(s, p, 0, k)) break;
        p->prefetched = 1;
        s->outstanding += p->numel;
    }
}

static void gather(sp *s, uint32_t i) {
    sp_param *p = &s->p[i];
    p->last_pos = s->pos++;
    unmark(s, p);
    p->holds++;
    issue(s, p, 1, 0);
    prefetch(s);
    finish(s, p); /* the host waits for its param */
}

static void release(sp *s, uint32_t i) {
    sp_param *p = &s->p[i];
    if (--p->holds > 0 || p->persistent) return;
    if (s->on_track && p->last_pos < s->len && s->next[p->last_pos] >= 0 &&
        s->prefix[s->next[p->last_pos]] - s->prefix[p->last_pos + 1] <= s->max_reuse)
        return; /* kept for reuse */
    drop(s, p);
}

static void settle(sp *s) { /* the engine's settle: every micro-step follows the trace once it exists */
    for (uint32_t i = 0; i < s->n; i++) {
        finish(s, &s->p[i]);
        s->p[i].holds = 0;
        s->p[i].prefetched = 0;
        drop(s, &s->p[i]);
    }
    s->outstanding = 0;
    s->pos = 0;
    s->on_track = 1;
}

uint64_t zero_kit_gather_plan_peak(const zero_plan_services *ps, size_t esize, uint64_t cap_bytes, int staging) {
    return zero_kit_gather_plan_peak_aliased(ps, esize, cap_bytes, staging, NULL);
}

uint64_t zero_kit_gather_plan_peak_aliased(const zero_plan_services *ps, size_t esize, uint64_t cap_bytes, int staging,
                                           const uint8_t *alias) {
    zero_core *c = ps->core;
    const zero_run_config *rc = ps->config(c);
    sp s;
    memset(&s, 0, sizeof s);
    s.n = ps->nparams(c);
    s.esize = esize;
    s.staging = staging;
    s.limit = (uint64_t)(rc->stage3_max_live_parameters > 0 ? rc->stage3_max_live_parameters : 0) * esize;
    s.prefetch_numel = rc->stage3_prefetch_bucket_size > 0 ? (uint64_t)rc->stage3_prefetch_bucket_size : 0;
    s.max_reuse = rc->stage3_max_reuse_distance > 0 ? (uint64_t)rc->stage3_max_reuse_distance : 0;
    const uint64_t persist_below =
        rc->stage3_param_persistence_threshold > 0 ? (uint64_t)rc->stage3_param_persistence_threshold : 0;
    uint64_t peak = 0;
    /* zero_kit_gather_create: the budget is capped, prefetch clamped to
     * it, persistence leaves room for two of the largest params */
    if (s.limit > cap_bytes) s.limit = cap_bytes;
    if (s.prefetch_numel * esize > s.limit) s.prefetch_numel = esize ? s.limit / esize : 0;
    uint64_t largest_bytes = 0;
    for (uint32_t i = 0; i < s.n; i++)
        if ((uint64_t)ps->param(c, i)->numel * esize > largest_bytes)
            largest_bytes = (uint64_t)ps->param(c, i)->numel * esize;
    s.p = calloc(s.n ? s.n : 1, sizeof *s.p);
    s.len = (size_t)s.n * 2;
    s.trace = calloc(s.len ? s.len : 1, sizeof *s.trace);
    s.next = calloc(s.len ? s.len : 1, sizeof *s.next);
    s.prefix = calloc(s.len + 1, sizeof *s.prefix);
    if (!s.p || !s.trace || !s.next || !s.prefix) goto out;
    for (uint32_t i = 0; i < s.n; i++) {
        sp_param *p = &s.p[i];
        p->numel = ps->param(c, i)->numel;
        size_t b = (size_t)p->numel * esize;
        if (alias && alias[i]) { /* gather_engine.c setup_param: resident for good, outside the pool */
            p->alias = p->persistent = p->has_buf = p->fresh = 1;
        } else if (p->numel < persist_below && s.persistent + b + 2 * largest_bytes <= s.limit) {
            p->persistent = p->has_buf = p->fresh = 1;
            p->cap = b;
            s.persistent += b;
            s.acct_persistent += b ? b : 1;
        }
        s.trace[i] = i;
        s.trace[s.len - 1 - i] = i;
    }
    /* gather_order.c trace_finish: each position's next use of its param
     * (the backward half mirrors the forward one) */
    for (size_t k = 0; k < s.len; k++) {
        s.next[k] = k < s.n ? (int64_t)(s.len - 1 - k) : -1;
        s.prefix[k + 1] = s.prefix[k] + s.p[s.trace[k]].numel;
    }
    s.peak = s.acct_persistent;
    const int64_t gas = rc->grad_accum_steps > 0 ? rc->grad_accum_steps : 1;
    /* micro-step 0 records the order (no prefetch, nothing kept) */
    for (int m = 0; m < PLAN_MICRO_STEPS; m++) {
        for (size_t k = 0; k < s.len; k++) {
            gather(&s, s.trace[k]);
            release(&s, s.trace[k]);
        }
        settle(&s);
        if ((m + 1) % gas == 0) /* boundary step: persistent buffers go stale */
            for (uint32_t i = 0; i < s.n; i++)
                if (s.p[i].persistent && !s.p[i].alias) s.p[i].fresh = 0;
        prefetch(&s); /* zero_kit_gather_prefetch_ahead */
    }
    peak = s.peak;
out:
    free(s.p);
    free(s.trace);
    free(s.next);
    free(s.prefix);
    free(s.cache);
    return peak;
}
