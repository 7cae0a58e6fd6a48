/* A comm backend that lets a host-memory communicator (MPI, self) carry
 * device buffers: every collective whose buffers are device memory is staged
 * through a host buffer (device -> host, the inner collective on the host
 * copy, host -> device at completion).  See zero__comm_devstage_create in
 * device.h for when the engine uses it.
 *
 * It is the correct-but-slow path (two PCIe copies per collective, no
 * overlap of the copies): NCCL is what a GPU run should use.  It exists so
 * that device_kind CUDA works with the host's MPI communicator (no
 * CUDA-aware MPI needed), with ZERO_COMM_SELF, and so that the device
 * routing of the whole engine can be tested with a stub device on MPI.
 *
 * Thread-safety: as the inner communicator (this layer keeps no shared
 * state; each request owns its staging buffer). */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "memory.h"

typedef struct devstage {
    zero_comm base;
    zero_comm *inner; /* owned */
    zero__device *dev;
} devstage;

typedef struct ds_req {
    zero_comm_req hdr;
    zero_comm_req *inner;
    void *host;         /* staging buffer (owned) or NULL: inner ran on the caller's buffers */
    void *dst;          /* where the result goes at completion */
    const void *result; /* inside host */
    size_t bytes;
} ds_req;

#define DS(m) ((devstage *)(m))

/* Staging buffers are communication scratch: accounted in zero_memory_stats
 * under ZERO_MEM_OTHER, host tier (docs/memory.md).  A 16-byte header keeps
 * the size for the release (and malloc's alignment for the data). */
#define DS_HDR 16
static void *stage_alloc(zero_comm *m, size_t bytes) {
    char *p = malloc(DS_HDR + (bytes ? bytes : 1));
    if (!p) return NULL;
    memcpy(p, &bytes, sizeof bytes);
    zero__engine_note_scratch(m->engine, ZERO_TIER_HOST, (int64_t)bytes);
    return p + DS_HDR;
}
static void stage_free(zero_comm *m, void *h) {
    if (!h) return;
    char *p = (char *)h - DS_HDR;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    zero__engine_note_scratch(m->engine, ZERO_TIER_HOST, -(int64_t)bytes);
    free(p);
}

static const zero__comm_ops devstage_ops;

static int on_dev(zero_comm *m, const void *p) { return zero__dev_is_device(DS(m)->dev, p); }

static zero_status wrap(zero_comm *inner, zero__device *dev, zero_comm **out) {
    devstage *w = calloc(1, sizeof *w);
    if (!w) return ZERO_ERR_OUT_OF_MEMORY;
    w->base.ops = &devstage_ops;
    w->base.rank = inner->rank;
    w->base.size = inner->size;
    w->base.engine = inner->engine;
    w->inner = inner;
    w->dev = dev;
    *out = &w->base;
    return ZERO_OK;
}

zero_status zero__comm_devstage_create(zero_comm *inner, zero__device *dev, zero_comm **out) {
    if (!inner || !dev || !out) return ZERO_ERR_INVALID_ARGUMENT;
    return wrap(inner, dev, out);
}

static zero_status ds_split(zero_comm *m, int color, int key, zero_comm **out) {
    zero_comm *child = NULL;
    *out = NULL;
    zero_status s = zero__comm_split(DS(m)->inner, color, key, &child);
    if (s != ZERO_OK || !child) return s;
    if ((s = wrap(child, DS(m)->dev, out)) != ZERO_OK) zero__comm_free(child);
    return s;
}

static void ds_free(zero_comm *m) {
    zero__comm_free(DS(m)->inner);
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
    void *h = stage_alloc(m, bytes ? bytes : 1);
    if (!h) return ZERO_ERR_OUT_OF_MEMORY;
    zero__device *d = DS(m)->dev;
    zero_status s = d->ops->copy(d, h, buf, bytes);
    if (s == ZERO_OK) s = f(DS(m)->inner, h, count, dt, arg);
    if (s == ZERO_OK) s = d->ops->copy(d, buf, h, bytes);
    stage_free(m, h);
    return s;
}

static zero_status ds_allreduce(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op) {
    return staged_inplace(m, buf, count, dt, op, call_allreduce);
}
static zero_status ds_broadcast(zero_comm *m, void *buf, size_t count, zero_dtype dt, int root) {
    return staged_inplace(m, buf, count, dt, root, call_broadcast);
}
static zero_status ds_barrier(zero_comm *m) { return zero__barrier(DS(m)->inner); }

/* The inner collective was issued with status `s`: on failure free the
 * staging buffer and pass the error on, else wrap the inner request so
 * that its completion delivers `bytes` of `result` (inside host) to dst. */
static zero_status issued(zero_comm *m, zero_status s, zero_comm_req *inner, void *host, void *dst,
                          const void *result, size_t bytes, zero_comm_req **out) {
    if (s != ZERO_OK) {
        stage_free(m, host);
        return s;
    }
    ds_req *r = calloc(1, sizeof *r);
    if (!r) {
        if (inner) zero__comm_wait(inner);
        stage_free(m, host);
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
    void *h = stage_alloc(m, bytes ? bytes : 1);
    if (!h) return ZERO_ERR_OUT_OF_MEMORY;
    zero__device *d = DS(m)->dev;
    s = d->ops->copy(d, h, buf, bytes);
    if (s == ZERO_OK) s = zero__iallreduce(DS(m)->inner, h, count, dt, op, &in);
    return issued(m, s, in, h, buf, h, bytes, req);
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
    char *h = stage_alloc(m, v.total ? v.total : 1);
    if (!h) return ZERO_ERR_OUT_OF_MEMORY;
    s = zero__dev_copy(DS(m)->dev, h, send, v.total);
    /* in place on the host copy: this rank's block receives the sum */
    if (s == ZERO_OK) s = zero__ireduce_scatterv(DS(m)->inner, h, h + v.off, counts, dt, &in);
    return issued(m, s, in, h, recv, h + v.off, v.own, req);
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
    void *h = stage_alloc(m, v.total ? v.total : 1);
    if (!h) return ZERO_ERR_OUT_OF_MEMORY;
    s = zero__dev_copy(DS(m)->dev, h, buf, v.total);
    if (s == ZERO_OK) s = zero__iallreducev(DS(m)->inner, h, counts, dt, &in);
    return issued(m, s, in, h, buf, h, v.total, req);
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
    char *h = stage_alloc(m, v.total ? v.total : 1);
    if (!h) return ZERO_ERR_OUT_OF_MEMORY;
    s = zero__dev_copy(DS(m)->dev, h + v.off, send, v.own);
    if (s == ZERO_OK) s = zero__iallgatherv(DS(m)->inner, h + v.off, h, counts, dt, &in);
    return issued(m, s, in, h, recv, h, v.total, req);
}

/* The inner request is done: deliver the staged result and free. */
static zero_status finish(ds_req *r, zero_status s) {
    if (s == ZERO_OK && r->host && r->bytes) s = zero__dev_copy(DS(r->hdr.comm)->dev, r->dst, r->result, r->bytes);
    stage_free(r->hdr.comm, r->host);
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
    char *h = stage_alloc(m, total + bytes_each + 1); /* recv, then a separate send block (no aliasing) */
    if (!h) return ZERO_ERR_OUT_OF_MEMORY;
    zero_status s = zero__dev_copy(DS(m)->dev, h + total, send, bytes_each);
    if (s == ZERO_OK) s = zero__allgather_bytes(DS(m)->inner, h + total, h, bytes_each);
    if (s == ZERO_OK) s = zero__dev_copy(DS(m)->dev, recv, h, total);
    stage_free(m, h);
    return s;
}

static void ds_counters_get(zero_comm *m, zero__comm_counters *out) { zero__comm_counters_get(DS(m)->inner, out); }
static void ds_set_timeout(zero_comm *m, double seconds) { zero__comm_set_timeout(DS(m)->inner, seconds); }

static const zero__comm_ops devstage_ops = {
    .name = "devstage",
    .split = ds_split,
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
};
