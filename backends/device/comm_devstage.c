/* A comm backend that lets a host-memory communicator (MPI, self) carry
 * device buffers: every collective whose buffers are device memory is staged
 * through a host buffer (device -> host, the inner collective on the host
 * copy, host -> device at completion).  See zero__comm_devstage_create in
 * device.h for when the engine uses it.
 *
 * It is the correct-but-slow path (two PCIe copies per collective, each
 * waited for by the calling thread, no overlap of the copies with each
 * other): NCCL is what a GPU run should use.  It exists so that device_kind
 * CUDA works with the host's MPI communicator (no CUDA-aware MPI needed),
 * with ZERO_COMM_SELF, and so that the device routing of the whole engine
 * can be tested with a stub device on MPI.
 *
 * Staging buffers (issue 35).  They come from a pool that a communicator
 * shares with every communicator split from it (one pool per world: they
 * belong to the same engine and device, their collectives rarely peak at
 * the same time, and one bound then caps the cached memory of all of them
 * instead of one per split).  A buffer is taken at issue and given back at
 * completion by whichever thread completes the request (wait or test: the
 * caller, a hook thread, the bucket engine's); the next collective reuses
 * it.  Blocks of DS_PIN_MIN bytes or more are pinned host memory from the
 * device (ops->alloc_nofill / ops->alloc, tier HOST), so the copies DMA at
 * full speed instead of going through the driver's pageable bounce buffer,
 * and no step faults in fresh pages; smaller ones, and any block whose
 * pinned allocation fails, come from malloc (pooled all the same).  Bound: at
 * most DS_POOL_SLOTS free buffers are cached, and the pool (buffers held by
 * collectives in flight plus cached ones) never exceeds the most that
 * collectives have held at once; what does not fit is freed at once.  A
 * communicator's free gives the cached buffers back; the pool itself goes
 * with the last communicator that shares it.
 *
 * Accounting: staging buffers are communication scratch, zero_memory_stats
 * ZERO_MEM_OTHER, host tier (docs/memory.md), counted from allocation to
 * free, the cached free ones included (like the MPI ring scratch cache):
 * they are memory libzero holds, pinned at that.  Results are bitwise those
 * of fresh buffers: every byte of a staging buffer that is read was written
 * by the same collective first (buffers come back dirty, never cleared).
 *
 * Thread-safety: as the inner communicator for the collectives; the pool
 * has its own mutex, so requests may be issued and completed on any
 * threads.  Ownership: the communicator owns its inner communicator and a
 * reference to the pool; a request owns its staging buffer until it
 * completes (wait, or test saying done). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "memory.h"

/* ---------------------------------------------------------------- pool */

/* DS_POOL_SLOTS: free buffers cached at most (stage 3 keeps many gathers in
 * flight; the byte bound is the pool's real limit).  DS_PIN_MIN: smaller
 * blocks come from malloc: below it a copy costs about the same from
 * pageable memory, and the first pinned block makes the CUDA device reserve
 * a whole region of pinned memory (its host arena grows by 64 MiB), which a
 * small model's collectives do not need.  DS_ROUND: capacities in 4 KiB
 * steps, so that near sizes share buffers. */
#define DS_POOL_SLOTS 32
#define DS_PIN_MIN ((size_t)64 << 10)
#define DS_ROUND ((size_t)4 << 10)

typedef struct ds_buf {
    struct ds_buf *next; /* in the cache (ascending capacity) */
    char *p;
    size_t cap;
    int pinned; /* from the device (give back with ops->free), else malloc */
} ds_buf;

typedef struct ds_pool {
    pthread_mutex_t mu;
    int refs; /* communicators sharing the pool */
    zero__device *dev;
    struct zero_engine *engine; /* for zero__engine_note_scratch (may be NULL) */
    ds_buf *cache;               /* free buffers, ascending capacity */
    int ncached;
    size_t cached, held; /* bytes cached / held by collectives in flight */
    size_t high;         /* the most `held` has been: the pool's byte bound */
} ds_pool;

static void buf_destroy(ds_pool *pool, ds_buf *b) {
    if (b->pinned)
        pool->dev->ops->free(pool->dev, b->p);
    else
        free(b->p);
    zero__engine_note_scratch(pool->engine, ZERO_TIER_HOST, -(int64_t)b->cap);
    free(b);
}

static void destroy_list(ds_pool *pool, ds_buf *b) {
    while (b) {
        ds_buf *next = b->next;
        buf_destroy(pool, b);
        b = next;
    }
}

/* A buffer of at least `bytes` (dirty: the caller writes before it reads),
 * or NULL when out of memory. */
static ds_buf *pool_get(ds_pool *pool, size_t bytes) {
    if (!bytes) bytes = 1;
    const size_t cap = (bytes + DS_ROUND - 1) / DS_ROUND * DS_ROUND;
    ds_buf *evicted = NULL, *b = NULL;
    pthread_mutex_lock(&pool->mu);
    /* best fit: the smallest cached buffer that holds `bytes` */
    for (ds_buf **pp = &pool->cache; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= bytes) {
            b = *pp;
            *pp = b->next;
            pool->ncached--;
            pool->cached -= b->cap;
            break;
        }
    if (!b) {
        /* a new buffer: the pool may grow to the new most held at once, no
         * further; cached buffers (all too small for this one) beyond that
         * go, the largest first (the cache is ascending: drop its tail) */
        const size_t high = pool->held + cap > pool->high ? pool->held + cap : pool->high;
        while (pool->cache && pool->cached + pool->held + cap > high) {
            ds_buf **pp = &pool->cache;
            while ((*pp)->next) pp = &(*pp)->next;
            ds_buf *last = *pp;
            *pp = NULL;
            pool->ncached--;
            pool->cached -= last->cap;
            last->next = evicted;
            evicted = last;
        }
    }
    const size_t got = b ? b->cap : cap;
    pool->held += got;
    if (pool->held > pool->high) pool->high = pool->held;
    pthread_mutex_unlock(&pool->mu);
    destroy_list(pool, evicted); /* device and malloc calls outside the lock */
    if (b) return b;

    if (!(b = calloc(1, sizeof *b))) goto oom;
    b->cap = cap;
    zero__device *d = pool->dev;
    if (cap >= DS_PIN_MIN) {
        /* pinned host memory; no zero-fill: the bytes are written first */
        b->p = d->ops->alloc_nofill ? d->ops->alloc_nofill(d, ZERO_TIER_HOST, cap)
                                    : d->ops->alloc(d, ZERO_TIER_HOST, cap);
        b->pinned = b->p != NULL;
    }
    if (!b->p && !(b->p = malloc(cap))) goto oom; /* no pinned memory: pageable */
    zero__engine_note_scratch(pool->engine, ZERO_TIER_HOST, (int64_t)cap);
    return b;
oom:
    free(b);
    pthread_mutex_lock(&pool->mu);
    pool->held -= cap;
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

/* The collective that used b is done: cache b, or free it when the cache
 * is full (then the smallest buffer goes: the larger ones serve more). */
static void pool_put(ds_pool *pool, ds_buf *b) {
    if (!b) return;
    pthread_mutex_lock(&pool->mu);
    pool->held -= b->cap;
    ds_buf **pp = &pool->cache;
    while (*pp && (*pp)->cap < b->cap) pp = &(*pp)->next;
    b->next = *pp;
    *pp = b;
    pool->ncached++;
    pool->cached += b->cap;
    ds_buf *evicted = NULL;
    if (pool->ncached > DS_POOL_SLOTS) {
        evicted = pool->cache;
        pool->cache = evicted->next;
        evicted->next = NULL;
        pool->ncached--;
        pool->cached -= evicted->cap;
    }
    pthread_mutex_unlock(&pool->mu);
    destroy_list(pool, evicted);
}

/* Free every cached buffer (buffers in flight come back later). */
static void pool_trim(ds_pool *pool) {
    pthread_mutex_lock(&pool->mu);
    ds_buf *all = pool->cache;
    pool->cache = NULL;
    pool->ncached = 0;
    pool->cached = 0;
    pthread_mutex_unlock(&pool->mu);
    destroy_list(pool, all);
}

static ds_pool *pool_new(zero__device *dev, struct zero_engine *engine) {
    ds_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return NULL;
    }
    p->refs = 1;
    p->dev = dev;
    p->engine = engine;
    return p;
}

static void pool_ref(ds_pool *p) {
    pthread_mutex_lock(&p->mu);
    p->refs++;
    pthread_mutex_unlock(&p->mu);
}

static void pool_unref(ds_pool *p) {
    pthread_mutex_lock(&p->mu);
    const int last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (!last) return;
    pool_trim(p); /* every request completed before its communicator was freed */
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* ------------------------------------------------------ the communicator */

typedef struct devstage {
    zero_comm base;
    zero_comm *inner; /* owned */
    zero__device *dev;
    ds_pool *pool; /* shared with the communicators split from this one (a reference) */
} devstage;

typedef struct ds_req {
    zero_comm_req hdr;
    zero_comm_req *inner;
    ds_buf *host;       /* staging buffer (owned until completion) or NULL: inner ran on the caller's buffers */
    void *dst;          /* where the result goes at completion */
    const void *result; /* inside host */
    size_t bytes;
} ds_req;

#define DS(m) ((devstage *)(m))

static ds_buf *stage_get(zero_comm *m, size_t bytes) { return pool_get(DS(m)->pool, bytes); }
static void stage_put(zero_comm *m, ds_buf *b) { pool_put(DS(m)->pool, b); }

static const zero__comm_ops devstage_ops;

static int on_dev(zero_comm *m, const void *p) { return zero__dev_is_device(DS(m)->dev, p); }

static zero_status wrap(zero_comm *inner, zero__device *dev, ds_pool *pool, zero_comm **out) {
    devstage *w = calloc(1, sizeof *w);
    if (!w) return ZERO_ERR_OUT_OF_MEMORY;
    if (pool) {
        pool_ref(pool);
    } else if (!(pool = pool_new(dev, inner->engine))) {
        free(w);
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    w->base.ops = &devstage_ops;
    w->base.rank = inner->rank;
    w->base.size = inner->size;
    w->base.engine = inner->engine;
    w->inner = inner;
    w->dev = dev;
    w->pool = pool;
    *out = &w->base;
    return ZERO_OK;
}

zero_status zero__comm_devstage_create(zero_comm *inner, zero__device *dev, zero_comm **out) {
    if (!inner || !dev || !out) return ZERO_ERR_INVALID_ARGUMENT;
    return wrap(inner, dev, NULL, out);
}

static zero_status ds_split(zero_comm *m, int color, int key, zero_comm **out) {
    zero_comm *child = NULL;
    *out = NULL;
    zero_status s = zero__comm_split(DS(m)->inner, color, key, &child);
    if (s != ZERO_OK || !child) return s;
    if ((s = wrap(child, DS(m)->dev, DS(m)->pool, out)) != ZERO_OK) zero__comm_free(child);
    return s;
}

/* The node of m (zero__comm_split_node on the inner communicator: the MPI
 * backend's node split, or the inner backend's refusal), wrapped like a
 * split, so that a device engine finds the same nodes as a host engine on
 * the same communicator (ZERO_RANKS_PER_NODE is handled before the ops). */
static zero_status ds_split_node(zero_comm *m, zero_comm **out) {
    zero_comm *child = NULL;
    *out = NULL;
    zero_status s = zero__comm_split_node(DS(m)->inner, &child);
    if (s != ZERO_OK || !child) return s;
    if ((s = wrap(child, DS(m)->dev, DS(m)->pool, out)) != ZERO_OK) zero__comm_free(child);
    return s;
}

/* The inner communicator's settings: its collectives are the ones that
 * must match. */
static void ds_settings(zero_comm *m, char *buf, size_t len) {
    const zero_comm *in = DS(m)->inner;
    if (in->ops->settings)
        in->ops->settings(DS(m)->inner, buf, len);
    else if (len)
        buf[0] = '\0';
}

/* Every request of m has completed (the contract of comm free).  Its
 * cached buffers go now even while splits share the pool: they are cheap
 * to take again, and nothing is left behind the world's free. */
static void ds_free(zero_comm *m) {
    zero__comm_free(DS(m)->inner);
    pool_trim(DS(m)->pool);
    pool_unref(DS(m)->pool);
    free(m);
}

/* Blocking in-place collective on a (maybe device) buffer. */
typedef zero_status (*inplace_fn)(zero_comm *inner, void *buf, size_t count, zero_dtype dt, int arg);
static zero_status call_allreduce(zero_comm *i, void *b, size_t n, zero_dtype dt, int op) {
    return zero__allreduce(i, b, n, dt, op);
}
static zero_status call_broadcast(zero_comm *i, void *b, size_t n, zero_dtype dt, int root) {
    return zero__broadcast(i, b, n, dt, root);
}
static zero_status staged_inplace(zero_comm *m, void *buf, size_t count, zero_dtype dt, int arg, inplace_fn f) {
    if (!on_dev(m, buf)) return f(DS(m)->inner, buf, count, dt, arg);
    size_t bytes = count * zero__dtype_size(dt);
    ds_buf *b = stage_get(m, bytes);
    if (!b) return ZERO_ERR_OUT_OF_MEMORY;
    void *h = b->p;
    zero__device *d = DS(m)->dev;
    zero_status s = d->ops->copy(d, h, buf, bytes);
    if (s == ZERO_OK) s = f(DS(m)->inner, h, count, dt, arg);
    if (s == ZERO_OK) s = d->ops->copy(d, buf, h, bytes);
    stage_put(m, b);
    return s;
}

static zero_status ds_allreduce(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op) {
    return staged_inplace(m, buf, count, dt, op, call_allreduce);
}
static zero_status ds_broadcast(zero_comm *m, void *buf, size_t count, zero_dtype dt, int root) {
    return staged_inplace(m, buf, count, dt, root, call_broadcast);
}
static zero_status ds_barrier(zero_comm *m) { return zero__barrier(DS(m)->inner); }

/* The inner collective was issued with status `s`: on failure give the
 * staging buffer back and pass the error on, else wrap the inner request so
 * that its completion delivers `bytes` of `result` (inside host) to dst. */
static zero_status issued(zero_comm *m, zero_status s, zero_comm_req *inner, ds_buf *host, void *dst,
                          const void *result, size_t bytes, zero_comm_req **out) {
    if (s != ZERO_OK) {
        stage_put(m, host);
        return s;
    }
    ds_req *r = calloc(1, sizeof *r);
    if (!r) {
        if (inner) zero__comm_wait(inner);
        stage_put(m, host);
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    r->hdr.comm = m;
    r->inner = inner;
    r->host = host;
    r->dst = dst;
    r->result = result;
    r->bytes = bytes;
    *out = &r->hdr;
    return ZERO_OK;
}

static zero_status ds_iallreduce(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op,
                                 zero_comm_req **req) {
    zero_comm_req *in = NULL;
    zero_status s;
    if (!on_dev(m, buf)) {
        s = zero__iallreduce(DS(m)->inner, buf, count, dt, op, &in);
        return issued(m, s, in, NULL, NULL, NULL, 0, req);
    }
    size_t bytes = count * zero__dtype_size(dt);
    ds_buf *b = stage_get(m, bytes);
    if (!b) return ZERO_ERR_OUT_OF_MEMORY;
    void *h = b->p;
    zero__device *d = DS(m)->dev;
    s = d->ops->copy(d, h, buf, bytes);
    if (s == ZERO_OK) s = zero__iallreduce(DS(m)->inner, h, count, dt, op, &in);
    return issued(m, s, in, b, buf, h, bytes, req);
}

/* Byte sizes of a v-collective's blocks: all of them, those before this
 * rank's, and this rank's own. */
typedef struct vbytes {
    size_t total, off, own;
} vbytes;

static vbytes vbytes_of(const zero_comm *m, const size_t *counts, zero_dtype dt) {
    const size_t es = zero__dtype_size(dt);
    vbytes v = {0, 0, counts[m->rank] * es};
    for (int r = 0; r < m->size; r++) {
        if (r < m->rank) v.off += counts[r] * es;
        v.total += counts[r] * es;
    }
    return v;
}

static zero_status ds_ireduce_scatterv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                       zero_dtype dt, zero_comm_req **req) {
    zero_comm_req *in = NULL;
    zero_status s;
    if (!on_dev(m, send) && !on_dev(m, recv)) {
        s = zero__ireduce_scatterv(DS(m)->inner, send, recv, counts, dt, &in);
        return issued(m, s, in, NULL, NULL, NULL, 0, req);
    }
    const vbytes v = vbytes_of(m, counts, dt);
    ds_buf *b = stage_get(m, v.total);
    if (!b) return ZERO_ERR_OUT_OF_MEMORY;
    char *h = b->p;
    s = zero__dev_copy(DS(m)->dev, h, send, v.total);
    /* in place on the host copy: this rank's block receives the sum */
    if (s == ZERO_OK) s = zero__ireduce_scatterv(DS(m)->inner, h, h + v.off, counts, dt, &in);
    return issued(m, s, in, b, recv, h + v.off, v.own, req);
}

/* The inner backend's block-ordered allreduce, on a host copy when buf is
 * device memory (like ds_iallreduce). */
static zero_status ds_iallreducev(zero_comm *m, void *buf, const size_t *counts, zero_dtype dt,
                                  zero_comm_req **req) {
    zero_comm_req *in = NULL;
    zero_status s;
    if (!on_dev(m, buf)) {
        s = zero__iallreducev(DS(m)->inner, buf, counts, dt, &in);
        return issued(m, s, in, NULL, NULL, NULL, 0, req);
    }
    const vbytes v = vbytes_of(m, counts, dt);
    ds_buf *b = stage_get(m, v.total);
    if (!b) return ZERO_ERR_OUT_OF_MEMORY;
    void *h = b->p;
    s = zero__dev_copy(DS(m)->dev, h, buf, v.total);
    if (s == ZERO_OK) s = zero__iallreducev(DS(m)->inner, h, counts, dt, &in);
    return issued(m, s, in, b, buf, h, v.total, req);
}

static zero_status ds_iallgatherv(zero_comm *m, const void *send, void *recv, const size_t *counts, zero_dtype dt,
                                  zero_comm_req **req) {
    zero_comm_req *in = NULL;
    zero_status s;
    if (!on_dev(m, send) && !on_dev(m, recv)) {
        s = zero__iallgatherv(DS(m)->inner, send, recv, counts, dt, &in);
        return issued(m, s, in, NULL, NULL, NULL, 0, req);
    }
    const vbytes v = vbytes_of(m, counts, dt);
    ds_buf *b = stage_get(m, v.total);
    if (!b) return ZERO_ERR_OUT_OF_MEMORY;
    char *h = b->p;
    s = zero__dev_copy(DS(m)->dev, h + v.off, send, v.own);
    if (s == ZERO_OK) s = zero__iallgatherv(DS(m)->inner, h + v.off, h, counts, dt, &in);
    return issued(m, s, in, b, recv, h, v.total, req);
}

/* The inner request is done: deliver the staged result, give the staging
 * buffer back to the pool (any thread may complete a request) and free. */
static zero_status finish(ds_req *r, zero_status s) {
    if (s == ZERO_OK && r->host && r->bytes) s = zero__dev_copy(DS(r->hdr.comm)->dev, r->dst, r->result, r->bytes);
    stage_put(r->hdr.comm, r->host);
    free(r);
    return s;
}

static zero_status ds_wait(zero_comm_req *req) {
    ds_req *r = (ds_req *)req;
    return finish(r, r->inner ? zero__comm_wait(r->inner) : ZERO_OK);
}

static zero_status ds_test(zero_comm_req *req, int *done) {
    ds_req *r = (ds_req *)req;
    *done = 1;
    if (!r->inner) return finish(r, ZERO_OK);
    zero_status s = zero__comm_test(r->inner, done);
    if (!*done && s == ZERO_OK) return ZERO_OK;
    *done = 1; /* the inner request is freed (done or failed) */
    return finish(r, s);
}

static zero_status ds_allgather_bytes(zero_comm *m, const void *send, void *recv, size_t bytes_each) {
    if (!on_dev(m, send) && !on_dev(m, recv)) return zero__allgather_bytes(DS(m)->inner, send, recv, bytes_each);
    size_t total = bytes_each * (size_t)m->size;
    ds_buf *b = stage_get(m, total + bytes_each + 1); /* recv, then a separate send block (no aliasing) */
    if (!b) return ZERO_ERR_OUT_OF_MEMORY;
    char *h = b->p;
    zero_status s = zero__dev_copy(DS(m)->dev, h + total, send, bytes_each);
    if (s == ZERO_OK) s = zero__allgather_bytes(DS(m)->inner, h + total, h, bytes_each);
    if (s == ZERO_OK) s = zero__dev_copy(DS(m)->dev, recv, h, total);
    stage_put(m, b);
    return s;
}

/* (issue 33) The quantized reduce-scatter's all-to-all on device buffers:
 * the send extent (the furthest byte any rank is sent) comes to the host
 * in one copy, the inner all-to-all runs there, and the receive extent goes
 * back in one copy.  Host buffers pass straight through. */
static size_t extent(const zero_comm *m, const size_t *counts, const size_t *displs) {
    size_t e = 0;
    for (int r = 0; r < m->size; ++r)
        if (counts[r] && displs[r] + counts[r] > e) e = displs[r] + counts[r];
    return e;
}
static zero_status ds_alltoallv_bytes(zero_comm *m, const void *send, const size_t *scounts, const size_t *sdispls,
                                      void *recv, const size_t *rcounts, const size_t *rdispls) {
    if (!on_dev(m, send) && !on_dev(m, recv))
        return zero__alltoallv_bytes(DS(m)->inner, send, scounts, sdispls, recv, rcounts, rdispls);
    const size_t se = extent(m, scounts, sdispls), re = extent(m, rcounts, rdispls);
    ds_buf *b = stage_get(m, se + re + 1); /* send extent, then the receive extent (no aliasing) */
    if (!b) return ZERO_ERR_OUT_OF_MEMORY;
    char *h = b->p;
    zero_status s = ZERO_OK;
    if (se) s = on_dev(m, send) ? zero__dev_copy(DS(m)->dev, h, send, se) : (memcpy(h, send, se), ZERO_OK);
    if (s == ZERO_OK) s = zero__alltoallv_bytes(DS(m)->inner, h, scounts, sdispls, h + se, rcounts, rdispls);
    if (s == ZERO_OK && re)
        s = on_dev(m, recv) ? zero__dev_copy(DS(m)->dev, recv, h + se, re) : (memcpy(recv, h + se, re), ZERO_OK);
    stage_put(m, b);
    return s;
}

static void ds_counters_get(zero_comm *m, zero__comm_counters *out) { zero__comm_counters_get(DS(m)->inner, out); }
static void ds_set_timeout(zero_comm *m, double seconds) { zero__comm_set_timeout(DS(m)->inner, seconds); }

static const zero__comm_ops devstage_ops = {
    .name = "devstage",
    .split = ds_split,
    .split_node = ds_split_node,
    .free = ds_free,
    .allreduce = ds_allreduce,
    .broadcast = ds_broadcast,
    .barrier = ds_barrier,
    .iallreduce = ds_iallreduce,
    .ireduce_scatterv = ds_ireduce_scatterv,
    .iallgatherv = ds_iallgatherv,
    .wait = ds_wait,
    .test = ds_test,
    .allgather_bytes = ds_allgather_bytes,
    .counters_get = ds_counters_get,
    .iallreducev = ds_iallreducev,
    .set_timeout = ds_set_timeout,
    .alltoallv_bytes = ds_alltoallv_bytes,
    .settings = ds_settings,
};
