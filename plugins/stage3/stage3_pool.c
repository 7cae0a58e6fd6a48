/* Gather-buffer pool of the stage3 plugin.
 *
 * Buffers come from the core allocator tagged ZERO_MEM_GATHER, so
 * zero_memory_stats shows exactly what gathering costs.  The pool caches
 * released buffers (a layer's forward and backward gather the same sizes)
 * but counts cached bytes against stage3_max_live_parameters too: the limit
 * bounds what is allocated, not just what the host holds. */
#include <stdlib.h>
#include <string.h>

#include "stage3.h"

static void free_cached(zero__s3 *s, size_t i) {
    zero__s3_pool *pl = &s->pool;
    s->svc->mem_free(s->c, pl->bufs[i]);
    pl->allocated -= pl->caps[i];
    pl->cached -= pl->caps[i];
    pl->bufs[i] = pl->bufs[pl->n - 1];
    pl->caps[i] = pl->caps[pl->n - 1];
    pl->n--;
}

/* Largest cached buffer first: frees the most bytes per call. */
static int free_largest_cached(zero__s3 *s) {
    zero__s3_pool *pl = &s->pool;
    if (!pl->n) return 0;
    size_t best = 0;
    for (size_t i = 1; i < pl->n; i++)
        if (pl->caps[i] > pl->caps[best]) best = i;
    free_cached(s, best);
    return 1;
}

/* Released-but-kept buffers (reuse distance) are evictable when the host
 * needs room; in-flight or held ones are not.  Param order keeps the choice
 * identical on every rank. */
static int evict_kept(zero__s3 *s) {
    for (uint32_t i = 0; i < s->nparams; i++) {
        zero__s3_param *p = &s->params[i];
        if (p->buf && !p->persistent && !p->holds && !p->prefetched && !p->req) {
            zero__s3_drop_buffer(s, p);
            free_largest_cached(s);
            return 1;
        }
    }
    return 0;
}

static int fits(const zero__s3_pool *pl, size_t bytes) {
    return pl->allocated + pl->persistent + bytes <= pl->limit;
}

/* Cached buffer to reuse for `bytes`: the smallest that fits and is at
 * most twice as large (so a small param does not pin a big buffer). */
static size_t best_fit(const zero__s3_pool *pl, size_t bytes) {
    size_t best = (size_t)-1;
    for (size_t i = 0; i < pl->n; i++)
        if (pl->caps[i] >= bytes && pl->caps[i] / 2 <= bytes && (best == (size_t)-1 || pl->caps[i] < pl->caps[best]))
            best = i;
    return best;
}

/* A demand gather goes beyond the budget.  The budget is the smaller of
 * stage3_max_live_parameters and what partitioning saves over stage 2
 * (stage3_plugin.c).  Only a limit the user set warns, in its own unit
 * (elements), once; passing the implicit cap alone (a small model, whose
 * largest tensors are a large part of it, under default keys) is expected
 * and costs at most what stage 2 would hold: a DEBUG note, once. */
static void over_limit(zero__s3 *s, size_t bytes) {
    zero__s3_pool *pl = &s->pool;
    const uint64_t live = pl->allocated + pl->persistent, es = s->esize ? s->esize : 1;
    if (live + bytes > pl->user_limit) {
        if (pl->warned_over) return;
        pl->warned_over = 1;
        s->svc->log(s->c, ZERO_LOG_WARN,
                    "stage3: the host holds more gathered parameters than stage3_max_live_parameters allows "
                    "(%llu elements live + %llu requested > %llu): exceeding the limit (warned once)",
                    (unsigned long long)(live / es), (unsigned long long)(bytes / es),
                    (unsigned long long)(pl->user_limit / es));
    } else if (!pl->noted_cap) {
        pl->noted_cap = 1;
        s->svc->log(s->c, ZERO_LOG_DEBUG,
                    "stage3: gathered parameters exceed the implicit gather cap (what partitioning saves over "
                    "stage 2: %llu elements; %llu live + %llu requested), so stage 3 holds more than stage 2 "
                    "while they are gathered: expected when a model's largest tensors are a large part of it "
                    "(noted once)",
                    (unsigned long long)(pl->limit / es), (unsigned long long)(live / es),
                    (unsigned long long)(bytes / es));
    }
}

int zero__s3_pool_could_get(const zero__s3 *s, size_t bytes) {
    const zero__s3_pool *pl = &s->pool;
    return best_fit(pl, bytes) != (size_t)-1 || pl->allocated - pl->cached + pl->persistent + bytes <= pl->limit;
}

void *zero__s3_pool_get(zero__s3 *s, size_t bytes, int demand, size_t *cap_out) {
    zero__s3_pool *pl = &s->pool;
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
    while (!fits(pl, bytes) && free_largest_cached(s)) {
    }
    if (!fits(pl, bytes)) {
        if (!demand) return NULL;
        while (!fits(pl, bytes) && evict_kept(s)) {
        }
        if (!fits(pl, bytes)) over_limit(s, bytes);
    }
    void *b = s->svc->mem_alloc(s->c, ZERO_TIER_DEVICE, ZERO_MEM_GATHER, bytes ? bytes : 1);
    if (!b) return NULL;
    pl->allocated += bytes;
    *cap_out = bytes;
    return b;
}

void zero__s3_pool_put(zero__s3 *s, void *buf, size_t cap) {
    zero__s3_pool *pl = &s->pool;
    if (!buf) return;
    if (s->poison) zero__s3_poison(s, buf, cap);
    if (pl->n == pl->cap) {
        size_t nc = pl->cap ? pl->cap * 2 : 16;
        void **nb = realloc(pl->bufs, nc * sizeof *nb);
        if (nb) pl->bufs = nb;
        size_t *ncap = nb ? realloc(pl->caps, nc * sizeof *ncap) : NULL;
        if (ncap) pl->caps = ncap;
        if (!nb || !ncap) { /* cannot cache: give it back to the allocator */
            s->svc->mem_free(s->c, buf);
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

void zero__s3_pool_drain(zero__s3 *s) {
    while (s->pool.n) free_cached(s, s->pool.n - 1);
}

/* The pattern is built on the host and copied in: buf may be device
 * memory (CUDA engine) that the host cannot write. */
/* Through mem_copy from a host tile: the buffer may be device memory (a
 * CUDA engine's arena), which the CPU must not touch directly. */
void zero__s3_poison(zero__s3 *s, void *buf, size_t bytes) {
    unsigned char tile[4096];
    if (s->dtype == ZERO_DTYPE_F32) {
        const uint32_t nan = 0x7fc00000u;
        for (size_t i = 0; i < sizeof tile; i += 4) memcpy(tile + i, &nan, 4);
    } else {
        const uint16_t nan = s->dtype == ZERO_DTYPE_BF16 ? 0x7fc0u : 0x7e00u;
        for (size_t i = 0; i < sizeof tile; i += 2) memcpy(tile + i, &nan, 2);
    }
    bytes -= bytes % s->esize;
    for (size_t off = 0; off < bytes; off += sizeof tile) {
        size_t n = bytes - off < sizeof tile ? bytes - off : sizeof tile;
        s->svc->mem_copy(s->c, (char *)buf + off, tile, n);
    }
}
