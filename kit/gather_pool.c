/* Buffers of the kit's gather engine: the pool of released gather buffers,
 * its byte budget, and handing a param's buffer back.
 *
 * Buffers come from the core allocator tagged ZERO_MEM_GATHER, so
 * zero_memory_stats shows exactly what gathering costs.  The pool caches
 * released buffers (a layer's forward and backward gather the same sizes)
 * but counts cached bytes against the budget too: the limit bounds what is
 * allocated, not just what the host holds.  Engine thread only; uses
 * nothing else of the engine. */
#include <stdlib.h>
#include <string.h>

#include "gather_internal.h"

/* Fill `bytes` of a buffer of the engine's dtype with NaN, through mem_copy
 * from a host tile: the buffer may be device memory (a CUDA engine's
 * arena), which the CPU must not touch directly. */
static void poison(zero_kit_gather *g, void *buf, size_t bytes) {
    unsigned char tile[4096];
    if (g->spec.dtype == ZERO_DTYPE_F32) {
        const uint32_t nan = 0x7fc00000u;
        for (size_t i = 0; i < sizeof tile; i += 4) memcpy(tile + i, &nan, 4);
    } else {
        const uint16_t nan = g->spec.dtype == ZERO_DTYPE_BF16 ? 0x7fc0u : 0x7e00u;
        for (size_t i = 0; i < sizeof tile; i += 2) memcpy(tile + i, &nan, 2);
    }
    bytes -= bytes % g->esize;
    for (size_t off = 0; off < bytes; off += sizeof tile) {
        size_t n = bytes - off < sizeof tile ? bytes - off : sizeof tile;
        g->svc->mem_copy(g->c, (char *)buf + off, tile, n);
    }
}

static void free_cached(zero_kit_gather *g, size_t i) {
    zero_kit__pool *pl = &g->pool;
    g->svc->mem_free(g->c, pl->bufs[i]);
    pl->allocated -= pl->caps[i];
    pl->cached -= pl->caps[i];
    pl->bufs[i] = pl->bufs[pl->n - 1];
    pl->caps[i] = pl->caps[pl->n - 1];
    pl->n--;
}

/* Largest cached buffer first: frees the most bytes per call. */
static int free_largest_cached(zero_kit_gather *g) {
    zero_kit__pool *pl = &g->pool;
    if (!pl->n) return 0;
    size_t best = 0;
    for (size_t i = 1; i < pl->n; i++)
        if (pl->caps[i] > pl->caps[best]) best = i;
    free_cached(g, best);
    return 1;
}

zero_status zero_kit__finish_fetch(zero_kit_gather *g, zero_kit__gp *p) {
    zero_status st = ZERO_OK;
    if (p->req) {
        st = g->svc->wait(p->req);
        p->req = NULL;
    }
    if (p->landing) {
        p->landing = 0;
        if (g->spec.ops.landed) {
            zero_status l = g->spec.ops.landed(g->spec.ctx, p->unit, p->buf, st);
            if (st == ZERO_OK) st = l;
        }
    }
    return st;
}

void zero_kit__drop_buffer(zero_kit_gather *g, zero_kit__gp *p) {
    if (!p->buf || p->persistent) return;
    zero_kit__finish_fetch(g, p); /* never hand back memory a collective still writes */
    p->kept = 0;
    if (g->spec.ops.dropped) g->spec.ops.dropped(g->spec.ctx, p->unit, p->buf);
    zero_kit__pool_put(g, p->buf, p->buf_cap);
    g->live_hash -= zero_kit__live_term(p->unit);
    p->buf = NULL;
    p->buf_cap = 0;
    p->fresh = 0;
}

/* Trace position where a kept param is gathered next; SIZE_MAX when not
 * again this micro-step (or the future is unknown: off the recorded
 * order). */
static size_t next_use(const zero_kit_gather *g, const zero_kit__gp *p) {
    const zero_kit__trace *t = &g->trace;
    if (!g->on_track || !t->valid || p->last_pos >= t->len || t->next[p->last_pos] < 0) return SIZE_MAX;
    return (size_t)t->next[p->last_pos];
}

static int evictable(const zero_kit__gp *p) {
    return p->kept && p->buf && !p->persistent && !p->holds && !p->prefetched && !p->req;
}

int zero_kit__keep(zero_kit_gather *g, zero_kit__gp *p) {
    if (p->listed) {
        p->kept = 1;
        return 0;
    }
    if (g->n_kept == g->kept_cap) {
        size_t nc = g->kept_cap ? g->kept_cap * 2 : 16;
        uint32_t *nk = realloc(g->kept, nc * sizeof *nk);
        if (!nk) return -1;
        g->kept = nk;
        g->kept_cap = nc;
    }
    g->kept[g->n_kept++] = p->unit;
    p->kept = p->listed = 1;
    return 0;
}

/* The kept buffer to evict for a fetch at trace position `horizon` that
 * is `short_by` bytes short of the budget: among those used again after
 * horizon, the one used again the latest (Belady's choice) of those large
 * enough to make the room alone, else the largest (evicting a layer's bias
 * and then its weight where the weight alone would do loses a reuse for
 * nothing); ties by param index, so every rank picks the same.  Drops
 * stale list entries on the way.  Index, or UINT32_MAX. */
static uint32_t victim(zero_kit_gather *g, size_t horizon, uint64_t short_by) {
    uint32_t best = UINT32_MAX;
    size_t best_next = 0, best_cap = 0;
    int best_big = 0;
    for (size_t k = 0; k < g->n_kept;) {
        zero_kit__gp *p = &g->params[g->kept[k]];
        if (!evictable(p)) { /* re-gathered or dropped since it was kept */
            p->listed = 0;
            g->kept[k] = g->kept[--g->n_kept];
            continue;
        }
        const size_t nx = next_use(g, p);
        const int big = p->buf_cap >= short_by;
        const uint32_t i = g->kept[k++];
        if (nx <= horizon) continue;
        int better = best == UINT32_MAX || big > best_big;
        if (!better && big == best_big) {
            if (!big && p->buf_cap != best_cap) better = p->buf_cap > best_cap;
            else better = nx > best_next || (nx == best_next && i < best);
        }
        if (better) {
            best = i;
            best_next = nx;
            best_cap = p->buf_cap;
            best_big = big;
        }
    }
    return best;
}

/* Released-but-kept buffers (reuse distance) are evictable when a fetch
 * needs room; in-flight or held ones are not.  The evicted buffer goes to
 * the pool, where the caller's next best_fit can take it as it is (same
 * size: no free and fresh allocation, whose first touch page-faults every
 * page of a shared block again). */
static int evict_kept(zero_kit_gather *g, size_t horizon, uint64_t short_by) {
    uint32_t v = victim(g, horizon, short_by);
    if (v == UINT32_MAX) return 0;
    zero_kit__drop_buffer(g, &g->params[v]);
    return 1;
}

static int fits(const zero_kit__pool *pl, size_t bytes) {
    return pl->allocated + pl->persistent + bytes <= pl->limit;
}

/* Cached buffer to reuse for `bytes`: the smallest that fits and is at
 * most twice as large (so a small param does not pin a big buffer). */
static size_t best_fit(const zero_kit__pool *pl, size_t bytes) {
    size_t best = (size_t)-1;
    for (size_t i = 0; i < pl->n; i++)
        if (pl->caps[i] >= bytes && pl->caps[i] / 2 <= bytes && (best == (size_t)-1 || pl->caps[i] < pl->caps[best]))
            best = i;
    return best;
}

/* A demand gather goes beyond the budget.  Only a limit the user set warns,
 * in its own unit (elements), once; passing the implicit cap alone (a small
 * model, whose largest tensors are a large part of it, under default keys)
 * is expected and costs at most what holding every tensor would: a DEBUG
 * note, once. */
static void over_limit(zero_kit_gather *g, size_t bytes) {
    zero_kit__pool *pl = &g->pool;
    const uint64_t live = pl->allocated + pl->persistent, es = g->esize ? g->esize : 1;
    if (live + bytes > pl->user_limit) {
        if (pl->warned_over) return;
        pl->warned_over = 1;
        g->svc->log(g->c, ZERO_LOG_WARN,
                    "%s: the host holds more gathered parameters than stage3_max_live_parameters allows "
                    "(%llu elements live + %llu requested > %llu): exceeding the limit (warned once)",
                    g->spec.who, (unsigned long long)(live / es), (unsigned long long)(bytes / es),
                    (unsigned long long)(pl->user_limit / es));
    } else if (!pl->noted_cap) {
        pl->noted_cap = 1;
        g->svc->log(g->c, ZERO_LOG_DEBUG,
                    "%s: gathered parameters exceed the implicit gather cap (what partitioning saves over "
                    "stage 2: %llu elements; %llu live + %llu requested), so stage 3 holds more than stage 2 "
                    "while they are gathered: expected when a model's largest tensors are a large part of it "
                    "(noted once)",
                    g->spec.who, (unsigned long long)(pl->limit / es), (unsigned long long)(live / es),
                    (unsigned long long)(bytes / es));
    }
}

int zero_kit__pool_could_get(const zero_kit_gather *g, size_t bytes, size_t horizon) {
    const zero_kit__pool *pl = &g->pool;
    if (best_fit(pl, bytes) != (size_t)-1) return 1;
    uint64_t need = pl->allocated - pl->cached + pl->persistent + bytes;
    for (size_t k = 0; k < g->n_kept && need > pl->limit; k++) { /* what evicting would free */
        const zero_kit__gp *p = &g->params[g->kept[k]];
        if (evictable(p) && next_use(g, p) > horizon) {
            if (p->buf_cap >= bytes && p->buf_cap / 2 <= bytes) return 1; /* reused as it is */
            need -= p->buf_cap < need ? p->buf_cap : need;
        }
    }
    return need <= pl->limit;
}

/* Reuse before allocating: a cached buffer that fits, then room made by
 * freeing cached buffers that do not fit, then (demand only) kept buffers
 * evicted into the pool, each retried against best_fit first. */
void *zero_kit__pool_get(zero_kit_gather *g, size_t bytes, int demand, size_t horizon, size_t *cap_out) {
    zero_kit__pool *pl = &g->pool;
    /* a prefetch that cannot fit in the end evicts nothing on the way */
    if (!demand && !zero_kit__pool_could_get(g, bytes, horizon)) return NULL;
    for (;;) {
        size_t best = best_fit(pl, bytes);
        if (best != (size_t)-1) {
            void *b = pl->bufs[best];
            pl->cached -= pl->caps[best];
            *cap_out = pl->caps[best];
            pl->bufs[best] = pl->bufs[pl->n - 1];
            pl->caps[best] = pl->caps[pl->n - 1];
            pl->n--;
            return b;
        }
        if (fits(pl, bytes)) break;
        if (free_largest_cached(g)) continue;
        /* (cached buffers are all freed by now: the shortfall is what the kept ones must give) */
        if (evict_kept(g, demand ? 0 : horizon, pl->allocated + pl->persistent + bytes - pl->limit)) continue;
        if (!demand) return NULL;
        over_limit(g, bytes);
        break;
    }
    void *b = g->svc->mem_alloc(g->c, ZERO_TIER_DEVICE, ZERO_MEM_GATHER, bytes ? bytes : 1);
    if (!b) return NULL;
    pl->allocated += bytes;
    *cap_out = bytes;
    return b;
}

void zero_kit__pool_put(zero_kit_gather *g, void *buf, size_t cap) {
    zero_kit__pool *pl = &g->pool;
    if (!buf) return;
    if (g->spec.poison) poison(g, buf, cap);
    if (pl->n == pl->cap) {
        size_t nc = pl->cap ? pl->cap * 2 : 16;
        void **nb = realloc(pl->bufs, nc * sizeof *nb);
        if (nb) pl->bufs = nb;
        size_t *ncap = nb ? realloc(pl->caps, nc * sizeof *ncap) : NULL;
        if (ncap) pl->caps = ncap;
        if (!nb || !ncap) { /* cannot cache: give it back to the allocator */
            g->svc->mem_free(g->c, buf);
            pl->allocated -= cap;
            return;
        }
        pl->cap = nc;
    }
    pl->bufs[pl->n] = buf;
    pl->caps[pl->n] = cap;
    pl->n++;
    pl->cached += cap;
}

void zero_kit__pool_drain(zero_kit_gather *g) {
    while (g->pool.n) free_cached(g, g->pool.n - 1);
    free(g->pool.bufs);
    free(g->pool.caps);
    g->pool.bufs = NULL;
    g->pool.caps = NULL;
    g->pool.cap = 0;
}
