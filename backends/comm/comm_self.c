/* "self" backend: world size 1, no MPI calls.  Every collective is a copy or
 * a no-op; async requests are complete when returned (a request object is
 * still handed out so that callers treat every backend the same way). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "comm_backend.h"
#include "comm_internal.h"
#include "log.h"

typedef struct self_comm {
    zero_comm base;
    pthread_mutex_t lock; /* counters */
} self_comm;

typedef struct self_req {
    zero_comm_req base;
    zero_status status;
} self_req;

static self_comm *S(zero_comm *m) { return (self_comm *)m; }

static void count(zero_comm *m, uint64_t *calls, uint64_t *bytes, uint64_t nbytes) {
    pthread_mutex_lock(&S(m)->lock);
    ++*calls;
    if (bytes) *bytes += nbytes;
    pthread_mutex_unlock(&S(m)->lock);
}

static zero_status check_dtype(zero_comm *m, zero_dtype dt, int needs_sum) {
    if (!zero__dtype_size(dt)) return zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm: unknown dtype %d", dt);
    if (needs_sum && !zero__comm_dtype_summable(dt))
        return zero__error(m->engine, ZERO_ERR_UNSUPPORTED, "comm: sums of dtype %d (bf16/fp16) are not supported", dt);
    return ZERO_OK;
}

static zero_status make_req(zero_comm *m, zero_status st, zero_comm_req **req) {
    self_req *r = calloc(1, sizeof *r);
    if (!r) return ZERO_ERR_OUT_OF_MEMORY;
    r->base.comm = m;
    r->status = st;
    *req = &r->base;
    return ZERO_OK;
}

static zero_status self_split(zero_comm *m, int color, int key, zero_comm **out) {
    (void)key;
    if (color < 0) {
        *out = NULL;
        return ZERO_OK;
    }
    *out = zero__comm_self_create(m->engine);
    return *out ? ZERO_OK : ZERO_ERR_OUT_OF_MEMORY;
}

static void self_free(zero_comm *m) {
    pthread_mutex_destroy(&S(m)->lock);
    free(m);
}

static zero_status self_allreduce(zero_comm *m, void *buf, size_t count_, zero_dtype dt, zero_reduce_op op) {
    (void)buf;
    zero_status st = check_dtype(m, dt, op == ZERO_OP_SUM);
    if (st) return st;
    if (op != ZERO_OP_SUM && op != ZERO_OP_MAX && op != ZERO_OP_MIN)
        return zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm: unknown reduce op %d", op);
    count(m, &m->counters.allreduce_calls, &m->counters.bytes_reduced, count_ * zero__dtype_size(dt));
    return ZERO_OK;
}

static zero_status self_broadcast(zero_comm *m, void *buf, size_t count_, zero_dtype dt, int root) {
    (void)buf; (void)count_; (void)root;
    zero_status st = check_dtype(m, dt, 0);
    if (st) return st;
    count(m, &m->counters.broadcast_calls, NULL, 0);
    return ZERO_OK;
}

static zero_status self_barrier(zero_comm *m) {
    count(m, &m->counters.other_calls, NULL, 0);
    return ZERO_OK;
}

static zero_status self_iallreduce(zero_comm *m, void *buf, size_t n, zero_dtype dt, zero_reduce_op op,
                                   zero_comm_req **req) {
    zero_status st = self_allreduce(m, buf, n, dt, op);
    return st ? st : make_req(m, ZERO_OK, req);
}

static zero_status self_ireduce_scatterv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                         zero_dtype dt, zero_comm_req **req) {
    zero_status st = check_dtype(m, dt, 1);
    if (st) return st;
    size_t bytes = counts[0] * zero__dtype_size(dt);
    if (bytes && (!send || !recv)) return ZERO_ERR_INVALID_ARGUMENT;
    if (bytes && send != recv) memmove(recv, send, bytes);
    count(m, &m->counters.reduce_scatter_calls, &m->counters.bytes_reduced, bytes);
    return make_req(m, ZERO_OK, req);
}

static zero_status self_iallgatherv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                    zero_dtype dt, zero_comm_req **req) {
    zero_status st = check_dtype(m, dt, 0);
    if (st) return st;
    size_t bytes = counts[0] * zero__dtype_size(dt);
    if (bytes && (!send || !recv)) return ZERO_ERR_INVALID_ARGUMENT;
    if (bytes && send != recv) memmove(recv, send, bytes);
    count(m, &m->counters.allgather_calls, &m->counters.bytes_gathered, bytes);
    return make_req(m, ZERO_OK, req);
}

static zero_status self_wait(zero_comm_req *req) {
    zero_status st = ((self_req *)req)->status;
    free(req);
    return st;
}

static zero_status self_test(zero_comm_req *req, int *done) {
    *done = 1;
    return self_wait(req);
}

static zero_status self_allgather_bytes(zero_comm *m, const void *send, void *recv, size_t bytes_each) {
    if (bytes_each && send != recv) memmove(recv, send, bytes_each);
    count(m, &m->counters.other_calls, NULL, 0);
    return ZERO_OK;
}

static void self_counters_get(zero_comm *m, zero__comm_counters *out) {
    pthread_mutex_lock(&S(m)->lock);
    *out = m->counters;
    pthread_mutex_unlock(&S(m)->lock);
}

static zero_status self_alltoallv_bytes(zero_comm *m, const void *send, const size_t *scounts, const size_t *sdispls,
                                        void *recv, const size_t *rcounts, const size_t *rdispls) {
    if (scounts[0] != rcounts[0])
        return zero__error(m->engine, ZERO_ERR_INVALID_ARGUMENT, "comm: alltoallv send/recv sizes differ");
    count(m, &m->counters.reduce_scatter_calls, &m->counters.bytes_reduced, scounts[0]);
    if (scounts[0]) memmove((char *)recv + rdispls[0], (const char *)send + sdispls[0], scounts[0]);
    return ZERO_OK;
}

static const zero__comm_ops self_ops = {
    .name = "self",
    .split = self_split,
    .free = self_free,
    .allreduce = self_allreduce,
    .broadcast = self_broadcast,
    .barrier = self_barrier,
    .iallreduce = self_iallreduce,
    .ireduce_scatterv = self_ireduce_scatterv,
    .iallgatherv = self_iallgatherv,
    .wait = self_wait,
    .test = self_test,
    .allgather_bytes = self_allgather_bytes,
    .counters_get = self_counters_get,
    .alltoallv_bytes = self_alltoallv_bytes,
};

zero_comm *zero__comm_self_create(struct zero_engine *engine) {
    self_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->base.ops = &self_ops;
    c->base.rank = 0;
    c->base.size = 1;
    c->base.engine = engine;
    pthread_mutex_init(&c->lock, NULL);
    return &c->base;
}
