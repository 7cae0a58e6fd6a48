/* "host" backend (ABI 1.5, ZERO_COMM_HOST): libzero's collectives over the
 * callbacks of a zero_host_comm (abi/zero.h), e.g. a torch.distributed
 * group driven from Python through ctypes.
 *
 * No thread of libzero's own ever calls the host (abi/zero.h promises it):
 * an i* op runs its callbacks at issue and hands back a completed request,
 * except a reduce-scatter (and the all-reduce over blocks built on it) when
 * the host gives alltoall_start/finish: the exchange is started at issue and
 * finished -- then summed -- by the wait (or a test that finds it done), on
 * the caller's thread, in start order.  Either way the collectives reach the
 * host in exactly the order libzero issues them, which is the same on every
 * rank (the rule every backend already relies on).  One lock per family (a
 * world and the communicators split from it) keeps callbacks from running
 * two at a time when the host fires gradient hooks from several threads.
 *
 * Sums (comm_backend.h's determinism):
 *  - with the host's alltoall, a reduce-scatter sends each rank its block
 *    (padded to the largest) and the owner sums the P contributions itself
 *    in the MPI ring's order (block b: ranks b+1, b+2, ..., b; comm_mpi_ring.c),
 *    so results equal ZERO_COMM_MPI's bitwise and depend on nothing but the
 *    block index: every stage plugin trains bitwise like stage 0.  An
 *    all-reduce over blocks (iallreducev) is that reduce-scatter followed by
 *    an all-gather.
 *  - without it, the blocks padded to the largest are summed by the host's
 *    allreduce_sum (twice the traffic of a reduce-scatter; the order is the
 *    host's, identical on all ranks only if its all-reduce is).
 * MAX/MIN all-reduces (flags, agreement) are an all-gather and a local
 * reduction; the few scalar SUMs (norms) are the host's all-reduce. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "comm_backend.h"
#include "comm_internal.h"
#include "log.h"
#include "memory.h" /* zero__engine_note_scratch */
#include "struct_in.h"

/* Shared by a world and its splits: the callback lock and a reference count. */
typedef struct host_family {
    pthread_mutex_t lock; /* held around every callback of the family */
    int refs;             /* communicators alive (under lock) */
} host_family;

typedef struct host_comm {
    zero_comm base;
    zero_host_comm hc;       /* the host's struct, copied */
    host_family *fam;
    /* a communicator the parent's split callback made: handed back through
     * the parent's release at free */
    zero_host_comm *sub;
    void (*release)(void *user, zero_host_comm *sub);
    void *release_user;
    char name[64];
    pthread_mutex_t cnt_lock;   /* counters only (stats never wait for a collective) */
    unsigned char *scratch;     /* staging, under fam->lock */
    size_t scratch_cap;
    struct host_req *inflight;  /* started exchanges, oldest first (under fam->lock) */
    /* Stagings of finished exchanges, kept for the next ones (under
     * fam->lock): a bucket's exchange every step would otherwise allocate
     * and fault in twice the bucket's bytes each time. */
    struct host_spare {
        unsigned char *p;
        size_t cap;
    } spare[4];
    int nspare;
} host_comm;

typedef struct host_req {
    zero_comm_req base;
    zero_status status;
    /* A started exchange (alltoall_start), finished by complete(): the
     * host's handle; `stage` holds the padded send blocks then the received
     * ones (P * blk bytes each; its own, as several may be in flight); the
     * sum of counts_me elements of dt lands in recv; with `gather` set
     * (iallreducev) the owned block is then all-gathered into gather
     * (counts copied).  pending 0: complete, `status` is the result. */
    int pending;
    void *handle;
    unsigned char *stage;
    size_t stage_bytes, blk, counts_me;
    void *recv, *gather;
    size_t *counts;
    zero_dtype dt;
    struct host_req *next;
} host_req;

static host_comm *H(zero_comm *m) { return (host_comm *)m; }
static const zero__comm_ops host_ops;

static void count(zero_comm *m, uint64_t *calls, uint64_t *bytes, uint64_t nbytes) {
    pthread_mutex_lock(&H(m)->cnt_lock);
    ++*calls;
    if (bytes) *bytes += nbytes;
    pthread_mutex_unlock(&H(m)->cnt_lock);
}

/* A callback's status as libzero's: ZERO_ERR_COMM naming the callback. */
static zero_status cb_status(zero_comm *m, zero_status s, const char *cb) {
    if (s == ZERO_OK) return ZERO_OK;
    return zero__error(m->engine, ZERO_ERR_COMM, "comm host (%s): the %s callback returned %s (%d)", H(m)->name, cb,
                       zero_status_string(s), (int)s);
}

static unsigned char *scratch(zero_comm *m, size_t bytes) {
    host_comm *c = H(m);
    if (bytes <= c->scratch_cap) return c->scratch;
    unsigned char *p = realloc(c->scratch, bytes);
    if (!p) return NULL;
    /* staging is communication scratch: ZERO_MEM_OTHER, host tier (docs/memory.md) */
    zero__engine_note_scratch(m->engine, ZERO_TIER_HOST, (int64_t)(bytes - c->scratch_cap));
    c->scratch = p;
    c->scratch_cap = bytes;
    return p;
}

static zero_status oom(zero_comm *m, size_t bytes) {
    return zero__error(m->engine, ZERO_ERR_OUT_OF_MEMORY, "comm host (%s): out of memory for %zu bytes of staging",
                       H(m)->name, bytes);
}

static zero_status make_req(zero_comm *m, zero_status st, zero_comm_req **req) {
    if (st != ZERO_OK) return st; /* the error is the issue's: no request */
    host_req *r = calloc(1, sizeof *r);
    if (!r) return ZERO_ERR_OUT_OF_MEMORY;
    r->base.comm = m;
    r->status = st;
    *req = &r->base;
    return ZERO_OK;
}

static zero_status check_dtype(zero_comm *m, zero_dtype dt) {
    if (!zero__dtype_size(dt)) return zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm host: unknown dtype %d", dt);
    return ZERO_OK;
}

static void lock(zero_comm *m) { pthread_mutex_lock(&H(m)->fam->lock); }
static void unlock(zero_comm *m) { pthread_mutex_unlock(&H(m)->fam->lock); }

/* ---- blocking building blocks (caller holds the family lock) ---- */

static zero_status do_allgather(zero_comm *m, const void *send, void *recv, size_t bytes_each) {
    return cb_status(m, H(m)->hc.allgather(H(m)->hc.user, send, recv, bytes_each), "allgather");
}

/* MAX/MIN of n elements: everyone's values, reduced locally (order-free). */
#define MINMAX_LOOP(T)                                                         \
    do {                                                                       \
        T *o = (T *)buf;                                                       \
        for (int r = 0; r < P; r++) {                                          \
            const T *x = (const T *)(all + (size_t)r * bytes);                 \
            for (size_t i = 0; i < n; i++)                                     \
                if (r == 0 || (op == ZERO_OP_MAX ? x[i] > o[i] : x[i] < o[i])) \
                    o[i] = x[i];                                               \
        }                                                                      \
    } while (0)

static zero_status minmax(zero_comm *m, void *buf, size_t n, zero_dtype dt, zero_reduce_op op) {
    const int P = m->size;
    const size_t bytes = n * zero__dtype_size(dt);
    if (dt != ZERO_DTYPE_F32 && dt != ZERO_DTYPE_F64 && dt != ZERO_DTYPE_I64 && dt != ZERO_DTYPE_U64 &&
        dt != ZERO_DTYPE_U8)
        return zero__error(m->engine, ZERO_ERR_UNSUPPORTED, "comm host: MAX/MIN of dtype %d is not supported", dt);
    unsigned char *all = scratch(m, bytes * (size_t)P);
    if (!all && bytes) return oom(m, bytes * (size_t)P);
    zero_status s = do_allgather(m, buf, all, bytes);
    if (s != ZERO_OK || !n) return s;
    switch (dt) {
    case ZERO_DTYPE_F32: MINMAX_LOOP(float); break;
    case ZERO_DTYPE_F64: MINMAX_LOOP(double); break;
    case ZERO_DTYPE_I64: MINMAX_LOOP(int64_t); break;
    case ZERO_DTYPE_U64: MINMAX_LOOP(uint64_t); break;
    default: MINMAX_LOOP(uint8_t); break;
    }
    return ZERO_OK;
}

static size_t max_count(const zero_comm *m, const size_t *counts) {
    size_t mx = 0;
    for (int b = 0; b < m->size; b++) mx = counts[b] > mx ? counts[b] : mx;
    return mx;
}

/* Sum the P received copies of this rank's block (rv: rank r's at r * blk)
 * into recv, as the MPI ring sums block `me`: rank me+1's part, then me+2,
 * ..., me. */
static zero_status sum_received(zero_comm *m, const unsigned char *rv, size_t blk, void *recv, size_t n,
                                zero_dtype dt) {
    const int P = m->size, me = m->rank;
    if (!n) return ZERO_OK;
    const unsigned char *first = rv + (size_t)((me + 1) % P) * blk;
    zero_status s = zero__comm_sum3(recv, first, rv + (size_t)((me + 2) % P) * blk, n, dt);
    for (int k = 3; k <= P && s == ZERO_OK; k++) s = zero__comm_sum3(recv, recv, rv + (size_t)((me + k) % P) * blk, n, dt);
    if (s != ZERO_OK) return zero__error(m->engine, s, "comm host: sums of dtype %d are not supported", dt);
    return ZERO_OK;
}

/* Pad the blocks of `send` (counts[b] elements each) to blk bytes each into
 * st[0 .. P*blk): the layout the host's alltoall / allreduce_sum gets. */
static void pad_blocks(zero_comm *m, unsigned char *st, const void *send, const size_t *counts, size_t es, size_t blk) {
    const unsigned char *src = send;
    size_t o = 0;
    for (int b = 0; b < m->size; b++) {
        const size_t nb = counts[b] * es;
        if (nb) memcpy(st + (size_t)b * blk, src + o * es, nb);
        if (nb < blk) memset(st + (size_t)b * blk + nb, 0, blk - nb); /* never summed into a result; defined bytes */
        o += counts[b];
    }
}

/* Reduce-scatter of `send` (blocks of counts[b]) into recv = this rank's
 * block, the sum over ranks (see the top comment for the order). */
static zero_status do_reduce_scatter(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                     zero_dtype dt) {
    host_comm *c = H(m);
    const int P = m->size, me = m->rank;
    const size_t es = zero__dtype_size(dt), mx = max_count(m, counts), blk = mx * es;
    const size_t mine = counts[me] * es;
    if (P == 1) {
        if (mine && send != recv) memmove(recv, send, mine);
        return ZERO_OK;
    }
    if (!mx) return ZERO_OK; /* nothing anywhere: no callback (counts are equal on all ranks) */
    /* staging: the padded send blocks [P*blk], then (alltoall) the received ones [P*blk] */
    const int a2a = c->hc.alltoall != NULL;
    unsigned char *st = scratch(m, blk * (size_t)P * (a2a ? 2 : 1));
    if (!st) return oom(m, blk * (size_t)P * (a2a ? 2 : 1));
    pad_blocks(m, st, send, counts, es, blk);
    zero_status s;
    if (a2a) {
        unsigned char *rv = st + (size_t)P * blk;
        s = cb_status(m, c->hc.alltoall(c->hc.user, st, rv, blk), "alltoall");
        return s == ZERO_OK ? sum_received(m, rv, blk, recv, counts[me], dt) : s;
    }
    s = cb_status(m, c->hc.allreduce_sum(c->hc.user, st, mx * (size_t)P, dt), "allreduce_sum");
    if (s == ZERO_OK && mine) memcpy(recv, st + (size_t)me * blk, mine);
    return s;
}

/* All-gather of blocks counts[b] into recv at their offsets; send holds
 * counts[rank] elements (may alias recv's own block). */
static zero_status do_allgatherv(zero_comm *m, const void *send, void *recv, const size_t *counts, zero_dtype dt) {
    const int P = m->size, me = m->rank;
    const size_t es = zero__dtype_size(dt), mx = max_count(m, counts), blk = mx * es;
    if (P == 1) {
        if (counts[0] && send != recv) memmove(recv, send, counts[0] * es);
        return ZERO_OK;
    }
    if (!mx) return ZERO_OK;
    int equal = 1;
    for (int b = 0; b < P; b++) equal &= counts[b] == mx;
    unsigned char *out = recv;
    if (equal) /* the host's layout is ours: straight into recv */
        return do_allgather(m, send, recv, blk);
    unsigned char *st = scratch(m, blk * (size_t)(P + 1));
    if (!st) return oom(m, blk * (size_t)(P + 1));
    unsigned char *mine = st + (size_t)P * blk;
    if (counts[me]) memcpy(mine, send, counts[me] * es);
    memset(mine + counts[me] * es, 0, blk - counts[me] * es);
    zero_status s = do_allgather(m, mine, st, blk);
    if (s != ZERO_OK) return s;
    size_t off = 0;
    for (int b = 0; b < P; b++) {
        if (counts[b]) memcpy(out + off * es, st + (size_t)b * blk, counts[b] * es);
        off += counts[b];
    }
    return ZERO_OK;
}

/* ---- started exchanges (alltoall_start / alltoall_finish) ---- */

static int has_async(const host_comm *c) { return c->hc.alltoall && c->hc.alltoall_start && c->hc.alltoall_finish; }

/* A staging of at least `bytes` (its size in *cap): a kept one that fits,
 * else a new one, accounted as ZERO_MEM_OTHER while it lives.  Family lock
 * held. */
static unsigned char *stage_get(zero_comm *m, size_t bytes, size_t *cap) {
    host_comm *c = H(m);
    for (int i = 0; i < c->nspare; i++)
        if (c->spare[i].cap >= bytes) {
            unsigned char *p = c->spare[i].p;
            *cap = c->spare[i].cap;
            c->spare[i] = c->spare[--c->nspare];
            return p;
        }
    unsigned char *p = malloc(bytes);
    if (p) zero__engine_note_scratch(m->engine, ZERO_TIER_HOST, (int64_t)bytes);
    *cap = bytes;
    return p;
}

/* Keep a staging for the next exchange, or free it when enough are kept. */
static void stage_put(zero_comm *m, unsigned char *p, size_t cap) {
    host_comm *c = H(m);
    if (!p) return;
    if (c->nspare < (int)(sizeof c->spare / sizeof c->spare[0])) {
        c->spare[c->nspare++] = (struct host_spare){p, cap};
        return;
    }
    zero__engine_note_scratch(m->engine, ZERO_TIER_HOST, -(int64_t)cap);
    free(p);
}

static void release_stage(zero_comm *m, host_req *r) {
    stage_put(m, r->stage, r->stage_bytes);
    free(r->counts);
    r->stage = NULL;
    r->counts = NULL;
}

/* Start the reduce-scatter of `send` into recv (this rank's block) as one
 * host exchange; *out is the pending request, appended to the in-flight
 * list.  gather != NULL (iallreducev): completion then all-gathers the
 * owned block into gather.  Family lock held; P > 1, some count > 0. */
static zero_status start_reduce_scatter(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                        zero_dtype dt, void *gather, host_req **out) {
    host_comm *c = H(m);
    const int P = m->size;
    const size_t es = zero__dtype_size(dt), blk = max_count(m, counts) * es;
    host_req *r = calloc(1, sizeof *r);
    if (!r) return oom(m, sizeof *r);
    r->base.comm = m;
    r->pending = 1;
    r->blk = blk;
    r->counts_me = counts[m->rank];
    r->recv = recv;
    r->dt = dt;
    r->stage = stage_get(m, 2 * (size_t)P * blk, &r->stage_bytes);
    if (gather) {
        r->gather = gather;
        r->counts = malloc((size_t)P * sizeof *r->counts);
        if (r->counts) memcpy(r->counts, counts, (size_t)P * sizeof *r->counts);
    }
    if (!r->stage || (gather && !r->counts)) {
        release_stage(m, r);
        free(r);
        return oom(m, 2 * (size_t)P * blk);
    }
    pad_blocks(m, r->stage, send, counts, es, blk);
    zero_status s = cb_status(
        m, c->hc.alltoall_start(c->hc.user, r->stage, r->stage + (size_t)P * blk, blk, &r->handle), "alltoall_start");
    if (s != ZERO_OK) {
        release_stage(m, r);
        free(r);
        return s;
    }
    host_req **tail = &c->inflight;
    while (*tail) tail = &(*tail)->next;
    *tail = r;
    *out = r;
    return ZERO_OK;
}

/* Finish the oldest started exchange: the host's finish, the sums, the
 * gather; it leaves the in-flight list complete, with its status.  Family
 * lock held. */
static void finish_oldest(zero_comm *m) {
    host_comm *c = H(m);
    host_req *r = c->inflight;
    c->inflight = r->next;
    r->next = NULL;
    zero_status s = cb_status(m, c->hc.alltoall_finish(c->hc.user, r->handle), "alltoall_finish");
    if (s == ZERO_OK) s = sum_received(m, r->stage + (size_t)m->size * r->blk, r->blk, r->recv, r->counts_me, r->dt);
    if (s == ZERO_OK && r->gather) s = do_allgatherv(m, r->recv, r->gather, r->counts, r->dt);
    r->status = s;
    r->pending = 0;
    release_stage(m, r);
}

/* Complete r: every exchange started before it first (the host finishes
 * them in start order).  Family lock held. */
static void complete(zero_comm *m, host_req *r) {
    while (r->pending && H(m)->inflight) finish_oldest(m);
}

/* ---- the ops ---- */

static zero_status host_allreduce(zero_comm *m, void *buf, size_t n, zero_dtype dt, zero_reduce_op op) {
    zero_status s = check_dtype(m, dt);
    if (s) return s;
    if (op != ZERO_OP_SUM && op != ZERO_OP_MAX && op != ZERO_OP_MIN)
        return zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm host: unknown reduce op %d", op);
    if (op == ZERO_OP_SUM && !zero__comm_dtype_summable(dt))
        return zero__error(m->engine, ZERO_ERR_UNSUPPORTED, "comm host: sums of dtype %d are not supported", dt);
    count(m, &m->counters.allreduce_calls, &m->counters.bytes_reduced, n * zero__dtype_size(dt));
    if (m->size == 1 || !n) return ZERO_OK;
    lock(m);
    if (op == ZERO_OP_SUM)
        s = cb_status(m, H(m)->hc.allreduce_sum(H(m)->hc.user, buf, n, dt), "allreduce_sum");
    else
        s = minmax(m, buf, n, dt, op);
    unlock(m);
    return s;
}

static zero_status host_broadcast(zero_comm *m, void *buf, size_t n, zero_dtype dt, int root) {
    zero_status s = check_dtype(m, dt);
    if (s) return s;
    count(m, &m->counters.broadcast_calls, NULL, 0);
    if (m->size == 1 || !n) return ZERO_OK;
    lock(m);
    s = cb_status(m, H(m)->hc.broadcast(H(m)->hc.user, buf, n * zero__dtype_size(dt), root), "broadcast");
    unlock(m);
    return s;
}

static zero_status host_barrier(zero_comm *m) {
    count(m, &m->counters.other_calls, NULL, 0);
    if (m->size == 1) return ZERO_OK;
    lock(m);
    zero_status s = cb_status(m, H(m)->hc.barrier(H(m)->hc.user), "barrier");
    unlock(m);
    return s;
}

static zero_status host_iallreduce(zero_comm *m, void *buf, size_t n, zero_dtype dt, zero_reduce_op op,
                                   zero_comm_req **req) {
    return make_req(m, host_allreduce(m, buf, n, dt, op), req);
}

static zero_status host_ireduce_scatterv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                         zero_dtype dt, zero_comm_req **req) {
    zero_status s = check_dtype(m, dt);
    if (s) return s;
    if (!zero__comm_dtype_summable(dt))
        return zero__error(m->engine, ZERO_ERR_UNSUPPORTED, "comm host: sums of dtype %d are not supported", dt);
    size_t total = 0;
    for (int b = 0; b < m->size; b++) total += counts[b];
    if (total && (!send || (counts[m->rank] && !recv))) return ZERO_ERR_INVALID_ARGUMENT;
    count(m, &m->counters.reduce_scatter_calls, &m->counters.bytes_reduced, total * zero__dtype_size(dt));
    lock(m);
    if (has_async(H(m)) && m->size > 1 && total) {
        host_req *r = NULL;
        s = start_reduce_scatter(m, send, recv, counts, dt, NULL, &r);
        unlock(m);
        if (s == ZERO_OK) *req = &r->base;
        return s;
    }
    s = do_reduce_scatter(m, send, recv, counts, dt);
    unlock(m);
    return make_req(m, s, req);
}

static zero_status host_iallgatherv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                    zero_dtype dt, zero_comm_req **req) {
    zero_status s = check_dtype(m, dt);
    if (s) return s;
    size_t total = 0;
    for (int b = 0; b < m->size; b++) total += counts[b];
    if (total && (!recv || (counts[m->rank] && !send))) return ZERO_ERR_INVALID_ARGUMENT;
    count(m, &m->counters.allgather_calls, &m->counters.bytes_gathered, total * zero__dtype_size(dt));
    lock(m);
    s = do_allgatherv(m, send, recv, counts, dt);
    unlock(m);
    return make_req(m, s, req);
}

/* Block b summed exactly as host_ireduce_scatterv sums it with the same
 * counts: with alltoall the same reduce-scatter, then an all-gather; without,
 * the same padded host all-reduce, every block copied back. */
static zero_status host_iallreducev(zero_comm *m, void *buf, const size_t *counts, zero_dtype dt,
                                    zero_comm_req **req) {
    zero_status s = check_dtype(m, dt);
    if (s) return s;
    if (!zero__comm_dtype_summable(dt))
        return zero__error(m->engine, ZERO_ERR_UNSUPPORTED, "comm host: sums of dtype %d are not supported", dt);
    const int P = m->size, me = m->rank;
    const size_t es = zero__dtype_size(dt);
    size_t total = 0, off_me = 0;
    for (int b = 0; b < P; b++) {
        if (b < me) off_me += counts[b];
        total += counts[b];
    }
    count(m, &m->counters.allreduce_calls, &m->counters.bytes_reduced, total * es);
    if (P == 1 || !total) return make_req(m, ZERO_OK, req);
    unsigned char *mine = (unsigned char *)buf + off_me * es;
    lock(m);
    if (has_async(H(m))) {
        host_req *r = NULL;
        s = start_reduce_scatter(m, buf, mine, counts, dt, buf, &r);
        unlock(m);
        if (s == ZERO_OK) *req = &r->base;
        return s;
    }
    if (H(m)->hc.alltoall) {
        s = do_reduce_scatter(m, buf, mine, counts, dt);
        if (s == ZERO_OK) s = do_allgatherv(m, mine, buf, counts, dt);
    } else {
        const size_t mx = max_count(m, counts), blk = mx * es;
        unsigned char *st = scratch(m, blk * (size_t)P);
        if (!st) {
            s = oom(m, blk * (size_t)P);
        } else {
            size_t off = 0;
            for (int b = 0; b < P; b++) { /* the layout do_reduce_scatter gives the host */
                if (counts[b]) memcpy(st + (size_t)b * blk, (unsigned char *)buf + off * es, counts[b] * es);
                memset(st + (size_t)b * blk + counts[b] * es, 0, blk - counts[b] * es);
                off += counts[b];
            }
            s = cb_status(m, H(m)->hc.allreduce_sum(H(m)->hc.user, st, mx * (size_t)P, dt), "allreduce_sum");
            off = 0;
            for (int b = 0; b < P && s == ZERO_OK; b++) {
                if (counts[b]) memcpy((unsigned char *)buf + off * es, st + (size_t)b * blk, counts[b] * es);
                off += counts[b];
            }
        }
    }
    unlock(m);
    return make_req(m, s, req);
}

static zero_status host_wait(zero_comm_req *req) {
    host_req *r = (host_req *)req;
    if (r->pending) {
        lock(req->comm);
        complete(req->comm, r);
        unlock(req->comm);
    }
    zero_status st = r->status;
    free(req);
    return st;
}

/* A started exchange is done when it is the oldest and the host's test
 * says so (without alltoall_test: not before its wait). */
static zero_status host_test(zero_comm_req *req, int *done) {
    host_req *r = (host_req *)req;
    zero_comm *m = req->comm;
    *done = 1;
    if (r->pending) {
        host_comm *c = H(m);
        int d = 0;
        lock(m);
        if (c->inflight == r && c->hc.alltoall_test) {
            zero_status s = cb_status(m, c->hc.alltoall_test(c->hc.user, r->handle, &d), "alltoall_test");
            if (s != ZERO_OK) {
                complete(m, r); /* finish it (exactly once) and report the test's failure */
                r->status = s;
                d = 1;
            } else if (d) {
                complete(m, r);
            }
        }
        unlock(m);
        if (!d) {
            *done = 0;
            return ZERO_OK;
        }
    }
    return host_wait(req);
}

static zero_status host_allgather_bytes(zero_comm *m, const void *send, void *recv, size_t bytes_each) {
    count(m, &m->counters.other_calls, NULL, 0);
    if (m->size == 1) {
        if (bytes_each && send != recv) memmove(recv, send, bytes_each);
        return ZERO_OK;
    }
    if (!bytes_each) return ZERO_OK;
    lock(m);
    zero_status s = do_allgather(m, send, recv, bytes_each);
    unlock(m);
    return s;
}

/* All-to-all of variable byte counts over the host's equal-block alltoall:
 * every block padded to the largest count any rank sends (agreed by an
 * all-gather of each rank's largest). */
static zero_status host_alltoallv_bytes(zero_comm *m, const void *send, const size_t *scounts,
                                        const size_t *sdispls, void *recv, const size_t *rcounts,
                                        const size_t *rdispls) {
    host_comm *c = H(m);
    const int P = m->size;
    size_t sent = 0;
    for (int r = 0; r < P; r++) sent += scounts[r];
    count(m, &m->counters.reduce_scatter_calls, &m->counters.bytes_reduced, sent);
    if (P == 1) {
        if (scounts[0] != rcounts[0])
            return zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm host: alltoallv send/recv sizes differ");
        if (scounts[0]) memmove((char *)recv + rdispls[0], (const char *)send + sdispls[0], scounts[0]);
        return ZERO_OK;
    }
    if (!c->hc.alltoall)
        return zero__error(m->engine, ZERO_ERR_UNSUPPORTED,
                           "comm host (%s): an all-to-all (ZeRO++ quantized gradients) needs the zero_host_comm "
                           "alltoall callback, which this host communicator does not give", c->name);
    lock(m);
    uint64_t mine = 0;
    for (int r = 0; r < P; r++) mine = scounts[r] > mine ? scounts[r] : mine;
    uint64_t *all = malloc(sizeof *all * (size_t)P);
    zero_status s = all ? do_allgather(m, &mine, all, sizeof mine) : oom(m, sizeof *all * (size_t)P);
    size_t blk = 0;
    for (int r = 0; r < P && s == ZERO_OK; r++) blk = all[r] > blk ? (size_t)all[r] : blk;
    free(all);
    if (s == ZERO_OK && blk) {
        unsigned char *st = scratch(m, 2 * blk * (size_t)P);
        if (!st) {
            s = oom(m, 2 * blk * (size_t)P);
        } else {
            unsigned char *rv = st + blk * (size_t)P;
            for (int r = 0; r < P; r++) {
                if (scounts[r]) memcpy(st + (size_t)r * blk, (const char *)send + sdispls[r], scounts[r]);
                memset(st + (size_t)r * blk + scounts[r], 0, blk - scounts[r]);
            }
            s = cb_status(m, c->hc.alltoall(c->hc.user, st, rv, blk), "alltoall");
            for (int r = 0; r < P && s == ZERO_OK; r++)
                if (rcounts[r]) memcpy((char *)recv + rdispls[r], rv + (size_t)r * blk, rcounts[r]);
        }
    }
    unlock(m);
    return s;
}

static void host_counters_get(zero_comm *m, zero__comm_counters *out) {
    pthread_mutex_lock(&H(m)->cnt_lock);
    *out = m->counters;
    pthread_mutex_unlock(&H(m)->cnt_lock);
}

/* ---- creation, split, free ---- */

/* A validated copy of the host's struct (what libzero reads of it). */
static zero_status copy_host(const zero_host_comm *user, zero_host_comm *hc, char *err, size_t err_len,
                             const char *what) {
    const zero_host_comm init = ZERO_HOST_COMM_INIT;
    *hc = init;
    if (!user) {
        snprintf(err, err_len, "%s: needs comm = &your_zero_host_comm, got NULL", what);
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    if (user->struct_size < offsetof(zero_host_comm, alltoall)) {
        snprintf(err, err_len,
                 "%s: zero_host_comm.struct_size is %u, less than the %zu bytes of its required fields "
                 "(rank, size, user, name, allreduce_sum, allgather, broadcast, barrier): set it to "
                 "sizeof(zero_host_comm) (ZERO_HOST_COMM_INIT)",
                 what, (unsigned)user->struct_size, offsetof(zero_host_comm, alltoall));
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    char why[512];
    if (!zero__struct_in(hc, user, user->struct_size, sizeof *hc, "zero_host_comm", why, sizeof why)) {
        snprintf(err, err_len, "%s: %s", what, why);
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    hc->struct_size = sizeof *hc;
    if (user->reserved0 != 0) {
        snprintf(err, err_len, "%s: zero_host_comm.reserved0 must be 0", what);
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    if (hc->size < 1 || hc->rank < 0 || hc->rank >= hc->size) {
        snprintf(err, err_len, "%s: zero_host_comm rank %d / size %d: need 0 <= rank < size", what, (int)hc->rank,
                 (int)hc->size);
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    const char *missing = !hc->allreduce_sum ? "allreduce_sum"
                          : !hc->allgather   ? "allgather"
                          : !hc->broadcast   ? "broadcast"
                          : !hc->barrier     ? "barrier"
                                             : NULL;
    if (missing) {
        snprintf(err, err_len, "%s: zero_host_comm.%s is NULL (allreduce_sum, allgather, broadcast and barrier "
                               "are required)", what, missing);
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    const int starts = hc->alltoall_start != NULL, finishes = hc->alltoall_finish != NULL;
    if (starts != finishes || (starts && !hc->alltoall) || (hc->alltoall_test && !starts)) {
        snprintf(err, err_len,
                 "%s: zero_host_comm.alltoall_start and alltoall_finish come together, with alltoall (and "
                 "alltoall_test only with them)",
                 what);
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    return ZERO_OK;
}

static host_comm *new_comm(const zero_host_comm *hc, host_family *fam, struct zero_engine *engine) {
    host_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->base.ops = &host_ops;
    c->base.rank = hc->rank;
    c->base.size = hc->size;
    c->base.engine = engine;
    c->hc = *hc;
    snprintf(c->name, sizeof c->name, "%s", hc->name ? hc->name : "host");
    c->hc.name = c->name;
    c->fam = fam;
    pthread_mutex_init(&c->cnt_lock, NULL);
    return c;
}

/* Splits that need no new group: a copy of m (one color everywhere, keys
 * in rank order: stage 3's and ZeRO++'s gather communicators) shares m's
 * callbacks, which is safe because every call is made in libzero's issue
 * order under the family lock; everyone alone is the self backend.  Other
 * splits go to the host's split callback.  All ranks see the same (color,
 * key) table, so all decide alike. */
static zero_status host_split(zero_comm *m, int color, int key, zero_comm **out) {
    host_comm *c = H(m);
    const int P = m->size;
    *out = NULL;
    if (P == 1) {
        if (color < 0) return ZERO_OK;
        *out = zero__comm_self_create(m->engine);
        return *out ? ZERO_OK : ZERO_ERR_OUT_OF_MEMORY;
    }
    int32_t mine[2] = {color < 0 ? -1 : color, key}, *all = malloc(sizeof mine * (size_t)P);
    if (!all) return oom(m, sizeof mine * (size_t)P);
    lock(m);
    zero_status s = do_allgather(m, mine, all, sizeof mine);
    int same = 1, alone = 1, in_order = 1;
    for (int r = 0; r < P && s == ZERO_OK; r++) {
        same &= all[2 * r] == all[0] && all[0] >= 0;
        if (r > 0) in_order &= all[2 * r + 1] >= all[2 * r - 1];
        for (int q = 0; q < r; q++)
            if (all[2 * r] >= 0 && all[2 * r] == all[2 * q]) alone = 0;
    }
    free(all);
    if (s != ZERO_OK) {
        unlock(m);
        return s;
    }
    if (same && in_order) {
        host_comm *d = new_comm(&c->hc, c->fam, m->engine);
        if (d) {
            c->fam->refs++;
            *out = &d->base;
        }
        unlock(m);
        return d ? ZERO_OK : oom(m, sizeof *d);
    }
    if (alone) {
        unlock(m);
        if (color < 0) return ZERO_OK;
        *out = zero__comm_self_create(m->engine);
        return *out ? ZERO_OK : ZERO_ERR_OUT_OF_MEMORY;
    }
    if (!c->hc.split) {
        unlock(m);
        return zero__error(m->engine, ZERO_ERR_UNSUPPORTED,
                           "comm host (%s): a sub-group of this communicator is needed (MiCS or ZeRO++ groups, MoE "
                           "expert groups, pipeline stages), and the zero_host_comm has no split callback: give "
                           "one (e.g. over torch.distributed.new_group), or use a plugin that needs no sub-groups",
                           c->name);
    }
    zero_host_comm *sub = NULL;
    s = cb_status(m, c->hc.split(c->hc.user, color < 0 ? -1 : color, key, &sub), "split");
    if (s == ZERO_OK && color >= 0) {
        zero_host_comm hc;
        char err[512] = "";
        if ((s = copy_host(sub, &hc, err, sizeof err, "comm host: the communicator the split callback returned")))
            s = zero__error(m->engine, ZERO_ERR_COMM, "%s", err);
        host_comm *d = s == ZERO_OK ? new_comm(&hc, c->fam, m->engine) : NULL;
        if (s == ZERO_OK && !d) s = oom(m, sizeof *d);
        if (d) {
            d->sub = sub;
            d->release = c->hc.release;
            d->release_user = c->hc.user;
            c->fam->refs++;
            *out = &d->base;
        } else if (sub && c->hc.release) {
            c->hc.release(c->hc.user, sub);
        }
    } else if (s == ZERO_OK && sub) {
        s = zero__error(m->engine, ZERO_ERR_COMM,
                        "comm host (%s): the split callback returned a communicator for color < 0", c->name);
    }
    unlock(m);
    return s;
}

static void host_free(zero_comm *m) {
    host_comm *c = H(m);
    host_family *fam = c->fam;
    pthread_mutex_lock(&fam->lock);
    if (c->inflight) { /* a bug of the caller's (comm_backend.h): finish them so the host's handles end */
        zero__log(m->engine, ZERO_LOG_WARN, "comm host (%s): freed with started exchanges not waited for", c->name);
        while (c->inflight) finish_oldest(m);
    }
    if (c->sub && c->release) c->release(c->release_user, c->sub);
    const int last = --fam->refs == 0;
    pthread_mutex_unlock(&fam->lock);
    if (last) {
        pthread_mutex_destroy(&fam->lock);
        free(fam);
    }
    pthread_mutex_destroy(&c->cnt_lock);
    if (c->scratch_cap) zero__engine_note_scratch(m->engine, ZERO_TIER_HOST, -(int64_t)c->scratch_cap);
    free(c->scratch);
    for (int i = 0; i < c->nspare; i++) {
        zero__engine_note_scratch(m->engine, ZERO_TIER_HOST, -(int64_t)c->spare[i].cap);
        free(c->spare[i].p);
    }
    free(c);
}

static const zero__comm_ops host_ops = {
    .name = "host",
    .split = host_split,
    .free = host_free,
    .allreduce = host_allreduce,
    .broadcast = host_broadcast,
    .barrier = host_barrier,
    .iallreduce = host_iallreduce,
    .ireduce_scatterv = host_ireduce_scatterv,
    .iallgatherv = host_iallgatherv,
    .wait = host_wait,
    .test = host_test,
    .allgather_bytes = host_allgather_bytes,
    .counters_get = host_counters_get,
    .iallreducev = host_iallreducev,
    .alltoallv_bytes = host_alltoallv_bytes,
    /* split_node: none (ZERO_RANKS_PER_NODE, see comm.h); set_timeout: no waits of ours */
};

zero_status zero__comm_host_create(const void *handle, struct zero_engine *engine, zero_comm **out, char *err,
                                   size_t err_len) {
    zero_host_comm hc;
    char tmp[1];
    if (!err || !err_len) {
        err = tmp;
        err_len = sizeof tmp;
    }
    zero_status s = copy_host(handle, &hc, err, err_len, "comm_kind ZERO_COMM_HOST");
    if (s != ZERO_OK) return s;
    host_family *fam = calloc(1, sizeof *fam);
    host_comm *c = fam ? new_comm(&hc, fam, engine) : NULL;
    if (!c) {
        free(fam);
        snprintf(err, err_len, "comm_kind ZERO_COMM_HOST: out of memory");
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    pthread_mutex_init(&fam->lock, NULL);
    fam->refs = 1;
    *out = &c->base;
    zero__log(engine, ZERO_LOG_DEBUG, "comm: host communicator '%s', rank %d of %d, %s sums%s", c->name,
              (int)hc.rank, (int)hc.size,
              hc.alltoall_start ? "ring-order (started alltoall)" : hc.alltoall ? "ring-order (alltoall)" : "host all-reduce",
              hc.split ? ", split" : "");
    return ZERO_OK;
}
