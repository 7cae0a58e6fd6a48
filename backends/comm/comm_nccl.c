/* NCCL comm backend; see comm_nccl.h.  Compiles to nothing without
 * ZERO_HAVE_NCCL (core/CMakeLists.txt globs backends/comm/ *.c). */
#ifdef ZERO_HAVE_NCCL
#include "memory.h"
#include "comm_nccl.h"
#include "comm_wait.h"
#include "log.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#ifdef ZERO_HAVE_MPI
#include <mpi.h>
#include "comm_internal.h" /* zero__node_record: the rank on this machine */
#endif

/* A request: the common header comm.c dispatches on, then a CUDA event
 * recorded after the collective (NULL when it completed synchronously). */
typedef struct nccl_req {
    struct zero_comm_req base;
    cudaEvent_t done;
    /* Issued inside an open group (group_start): NCCL queues the collective
     * only at ncclGroupEnd, so `done` is recorded then (group_launch), not
     * at issue: an event recorded earlier would complete before the
     * collective ran. */
    int deferred;
} nccl_req;

typedef struct nccl_comm {
    zero_comm base;
    ncclComm_t nc;
    int owns_nc;
    int device;
    cudaStream_t own_stream; /* created by us */
    cudaStream_t stream;     /* where collectives run: own_stream or the host's */
    /* A sub-communicator (n_split) runs on a stream of its own, so that its
     * collectives can overlap the parent's; its data is produced on the
     * parent's stream (the engine's device stream: optimizer kernels,
     * copies).  Each collective first makes `stream` wait for the work
     * queued on `after` so far (an event, no host wait).  NULL: none. */
    cudaStream_t after;
    cudaEvent_t after_ev;
    /* Set (under lock) once ncclCommAbort ran after an asynchronous NCCL
     * error or a timeout: every later call fails at once instead of queuing
     * on a dead communicator. */
    int aborted;
    char abort_why[256];
    /* issue 17: no-progress limit of every wait, seconds (0 = none):
     * ZERO_COMM_TIMEOUT (ZERO_NCCL_TIMEOUT_S is an alias), then the config's
     * comm_timeout through set_timeout; a split inherits its parent's. */
    double timeout_s;
    cudaEvent_t sync_ev; /* sync_stream's, reused under the lock */
    pthread_mutex_t lock;
    void *scratch;           /* device staging for host buffers, grown on demand */
    size_t scratch_bytes;
    /* An open group (n_group_start; under the lock).  NCCL's group state
     * belongs to the thread that called ncclGroupStart, so only `group_owner`
     * defers; requests it issued wait in `pending` for their events. */
    int group_depth;
    pthread_t group_owner;
    nccl_req **pending;
    size_t npending, pending_cap;
    /* Completion events of finished requests, kept for the next ones
     * (under the lock): creating and destroying one per collective cost
     * ~3 us each, the size of a small bucket's whole reduce-scatter. */
    cudaEvent_t *ev_pool;
    size_t ev_n, ev_cap;
} nccl_comm;

static const zero__comm_ops nccl_ops;

int zero__comm_is_nccl(const zero_comm *m) { return m && m->ops == &nccl_ops; }
void *zero__comm_nccl_stream(const zero_comm *m) {
    return zero__comm_is_nccl(m) ? (void *)((const nccl_comm *)m)->stream : NULL;
}
int zero__comm_nccl_device(const zero_comm *m) { return zero__comm_is_nccl(m) ? ((const nccl_comm *)m)->device : -1; }

static int nccl_dtype(zero_dtype dt, ncclDataType_t *out) {
    switch (dt) {
    case ZERO_DTYPE_F32: *out = ncclFloat32; return 1;
    case ZERO_DTYPE_F16: *out = ncclFloat16; return 1;
    case ZERO_DTYPE_BF16: *out = ncclBfloat16; return 1;
    case ZERO_DTYPE_F64: *out = ncclFloat64; return 1;
    case ZERO_DTYPE_I64: *out = ncclInt64; return 1;
    case ZERO_DTYPE_U64: *out = ncclUint64; return 1;
    case ZERO_DTYPE_U8: *out = ncclUint8; return 1;
    default: return 0;
    }
}

static int nccl_op(zero_reduce_op op, ncclRedOp_t *out) {
    switch (op) {
    case ZERO_OP_SUM: *out = ncclSum; return 1;
    case ZERO_OP_MAX: *out = ncclMax; return 1;
    case ZERO_OP_MIN: *out = ncclMin; return 1;
    default: return 0;
    }
}

static void fmt_err(char *err, size_t len, const char *fmt, const char *a, const char *b) {
    if (err && len) snprintf(err, len, fmt, a, b);
}

/* Failures become the engine's last error ("rank R: ...") and a log line,
 * as for the MPI backend. */
static zero_status nccl_fail(nccl_comm *c, const char *what, ncclResult_t r) {
    const char *last = ncclGetLastError(c->nc);
    return zero__error(c->base.engine, ZERO_ERR_COMM, "%s: %s%s%s", what, ncclGetErrorString(r),
                       last && last[0] ? ": " : "", last ? last : "");
}

static zero_status cuda_fail(nccl_comm *c, const char *what, cudaError_t e) {
    (void)cudaGetLastError();
    return zero__error(c->base.engine, ZERO_ERR_DEVICE, "%s: %s", what, cudaGetErrorString(e));
}

/* Device memory (or managed) that NCCL can use directly?  Host memory,
 * registered or not, is staged. */
static int is_device_ptr(const void *p) {
    struct cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static zero_status sync_stream(nccl_comm *c);

/* Device staging of at least `bytes` for host buffers (lock held, the
 * calling thread's group paused: every caller is about to queue work on
 * c->stream and wait for it).  Grown on demand; ZERO_MEM_OTHER, device tier.
 *
 * The old buffer is freed only once c->stream is known to be past its last
 * use (issue 35): every use is queued on c->stream (copies in and out, the
 * collective), and a user that failed between queuing and its own final
 * wait may have left work there that still reads or writes it.  cudaFree
 * happens to synchronise the device today, but that is an implementation
 * property (and would not hold for a stream-ordered pool), not an ordering
 * this code owns; so wait for the stream first, through sync_stream, which
 * polls like every other wait here (a dead peer aborts the communicator
 * instead of hanging in the CUDA runtime).  Growing is rare (the largest
 * host-buffer collective so far), and on the success path every user has
 * already waited for the stream, so this wait finds it idle.  If the wait
 * fails the old buffer is kept (freed at n_free, after the stream is
 * synchronised) and the call fails with the wait's error. */
static zero_status scratch(nccl_comm *c, size_t bytes, void **out) {
    *out = NULL;
    if (bytes <= c->scratch_bytes) {
        *out = c->scratch;
        return ZERO_OK;
    }
    if (c->scratch) {
        zero_status st = sync_stream(c);
        if (st != ZERO_OK) return st;
        cudaFree(c->scratch);
        zero__engine_note_scratch(c->base.engine, ZERO_TIER_DEVICE, -(int64_t)c->scratch_bytes);
    }
    c->scratch = NULL;
    c->scratch_bytes = 0;
    cudaError_t e = cudaMalloc(&c->scratch, bytes);
    if (e != cudaSuccess) {
        c->scratch = NULL;
        return cuda_fail(c, "cudaMalloc (NCCL staging)", e);
    }
    c->scratch_bytes = bytes;
    zero__engine_note_scratch(c->base.engine, ZERO_TIER_DEVICE, (int64_t)bytes);
    *out = c->scratch;
    return ZERO_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void lock(nccl_comm *c) {
    pthread_mutex_lock(&c->lock);
    cudaSetDevice(c->device);
}
static void unlock(nccl_comm *c) { pthread_mutex_unlock(&c->lock); }

/* Every call after ncclCommAbort fails at once, naming why it was aborted. */
static zero_status aborted_error(nccl_comm *c) {
    return zero__error(c->base.engine, ZERO_ERR_COMM, "NCCL communicator aborted earlier: %s", c->abort_why);
}

/* Order this communicator's stream after `after` (see nccl_comm); called
 * with the lock held, before a device-side collective is queued. */
static zero_status wait_after(nccl_comm *c) {
    if (c->aborted) return aborted_error(c);
    if (!c->after || c->after == c->stream) return ZERO_OK;
    cudaError_t e = cudaEventRecord(c->after_ev, c->after);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(c->stream, c->after_ev, 0);
    return e == cudaSuccess ? ZERO_OK : cuda_fail(c, "ordering after the parent stream", e);
}

static zero_status poll_event(nccl_comm *c, cudaEvent_t ev, int locked);

/* Wait for the stream (lock held): through an event and poll_event, so a
 * blocking collective with a dead peer is aborted like an asynchronous one. */
static zero_status sync_stream(nccl_comm *c) {
    cudaError_t e = cudaEventRecord(c->sync_ev, c->stream);
    if (e != cudaSuccess) return cuda_fail(c, "cudaEventRecord", e);
    c->base.counters.host_waits++;
    return poll_event(c, c->sync_ev, 1);
}

/* ---- request events ------------------------------------------------------ */

/* An event for a request (lock held): a pooled one, else a new one. */
static cudaError_t event_get(nccl_comm *c, cudaEvent_t *ev) {
    if (c->ev_n) {
        *ev = c->ev_pool[--c->ev_n];
        return cudaSuccess;
    }
    return cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
}

/* A finished request's event back to the pool (takes the lock); destroyed
 * when the pool cannot grow.  A recorded event that has completed can be
 * recorded again. */
static void event_put(nccl_comm *c, cudaEvent_t ev) {
    if (!ev) return;
    pthread_mutex_lock(&c->lock);
    if (c->ev_n == c->ev_cap) {
        size_t cap = c->ev_cap ? 2 * c->ev_cap : 16;
        cudaEvent_t *np = cap <= 4096 ? realloc(c->ev_pool, cap * sizeof *np) : NULL;
        if (np) c->ev_pool = np, c->ev_cap = cap;
    }
    if (c->ev_n < c->ev_cap)
        c->ev_pool[c->ev_n++] = ev;
    else
        cudaEventDestroy(ev);
    pthread_mutex_unlock(&c->lock);
}

/* ---- groups (issue 24) --------------------------------------------------- */

/* Does the calling thread hold c's open group?  (lock held) */
static int in_own_group(const nccl_comm *c) {
    return c->group_depth > 0 && pthread_equal(c->group_owner, pthread_self());
}

/* The group's collectives were just queued (ncclGroupEnd): record the
 * events of the requests issued inside it, in issue order. */
static zero_status record_pending(nccl_comm *c) {
    zero_status st = ZERO_OK;
    for (size_t i = 0; i < c->npending; ++i) {
        cudaError_t e = cudaEventRecord(c->pending[i]->done, c->stream);
        if (e != cudaSuccess && st == ZERO_OK) st = cuda_fail(c, "cudaEventRecord (end of NCCL group)", e);
        c->pending[i]->deferred = 0;
    }
    c->npending = 0;
    return st;
}

/* Before a call that queues stream work behind a collective or waits for
 * the stream (staging copies, blocking collectives, waits): launch what the
 * calling thread's open group holds, so that work runs after it.  Returns
 * whether the group was paused; group_resume reopens it.  Another thread's
 * group is not ours to close: NCCL's group state is per thread, so this
 * thread's collectives are not deferred by it.  (lock held) */
static zero_status group_pause(nccl_comm *c, int *paused) {
    *paused = 0;
    if (!in_own_group(c)) return ZERO_OK;
    ncclResult_t r = ncclGroupEnd();
    *paused = 1;
    zero_status st = record_pending(c);
    if (r != ncclSuccess) return nccl_fail(c, "ncclGroupEnd", r);
    return st;
}
static void group_resume(int paused) {
    if (paused) (void)ncclGroupStart(); /* only fails on misuse, which group_pause's End already reported */
}

/* ---- construction ------------------------------------------------------ */

static zero_status wrap(ncclComm_t nc, int owns, struct zero_engine *engine, zero_comm **out, char *err,
                        size_t err_len) {
    nccl_comm *c = calloc(1, sizeof *c);
    if (!c) return ZERO_ERR_OUT_OF_MEMORY;
    c->timeout_s = zero__comm_timeout_resolve(0, 0, NULL);
    int rank = 0, size = 0, dev = 0;
    ncclResult_t r = ncclCommUserRank(nc, &rank);
    if (r == ncclSuccess) r = ncclCommCount(nc, &size);
    if (r == ncclSuccess) r = ncclCommCuDevice(nc, &dev);
    if (r != ncclSuccess) {
        fmt_err(err, err_len, "NCCL communicator query: %s%s", ncclGetErrorString(r), "");
        free(c);
        return ZERO_ERR_COMM;
    }
    cudaSetDevice(dev);
    cudaError_t e = cudaStreamCreateWithFlags(&c->own_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        fmt_err(err, err_len, "cudaStreamCreateWithFlags: %s%s", cudaGetErrorString(e), "");
        free(c);
        return ZERO_ERR_DEVICE;
    }
    c->base.ops = &nccl_ops;
    c->base.rank = rank;
    c->base.size = size;
    c->base.engine = engine;
    c->nc = nc;
    c->owns_nc = owns;
    c->device = dev;
    c->stream = c->own_stream;
    if ((e = cudaEventCreateWithFlags(&c->sync_ev, cudaEventDisableTiming)) != cudaSuccess) {
        fmt_err(err, err_len, "cudaEventCreateWithFlags: %s%s", cudaGetErrorString(e), "");
        cudaStreamDestroy(c->own_stream);
        free(c);
        return ZERO_ERR_DEVICE;
    }
    pthread_mutex_init(&c->lock, NULL);
    *out = &c->base;
    return ZERO_OK;
}

zero_status zero__comm_nccl_create(void *handle, struct zero_engine *engine, zero_comm **out, char *err,
                                   size_t err_len) {
    if (!out) return ZERO_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!handle) {
        fmt_err(err, err_len, "%s%s", "comm_kind ZERO_COMM_NCCL needs comm = &your_ncclComm_t, got NULL", "");
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    return wrap(*(ncclComm_t *)handle, 0, engine, out, err, err_len);
}

#ifdef ZERO_HAVE_MPI
zero_status zero__comm_nccl_create_mpi(void *mpi_comm_handle, int device, struct zero_engine *engine,
                                       zero_comm **out, char *err, size_t err_len) {
    if (!out) return ZERO_ERR_INVALID_ARGUMENT;
    *out = NULL;
    MPI_Comm mc = mpi_comm_handle ? *(MPI_Comm *)mpi_comm_handle : MPI_COMM_WORLD;
    int rank = 0, size = 0, ndev = 0;
    MPI_Comm_rank(mc, &rank);
    MPI_Comm_size(mc, &size);
    cudaError_t e = cudaGetDeviceCount(&ndev);
    /* Every rank must reach the broadcast below even if it has no GPU, or the
     * others hang: agree on failure first. */
    int ok = (e == cudaSuccess && ndev > 0), all_ok = 0;
    if (!ok) {
        fmt_err(err, err_len, "no CUDA device for NCCL: %s%s",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0", "");
        (void)cudaGetLastError();
    }
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, mc);
    if (!all_ok) {
        if (ok) fmt_err(err, err_len, "%s%s", "another rank has no CUDA device; NCCL not created", "");
        return ZERO_ERR_DEVICE;
    }
    if (device < 0) {
        /* the rank on this machine, from every rank's machine record
         * (comm_node.c), not MPI_Comm_split_type, whose nodes may differ
         * between ranks */
        int local = 0;
        char mine[ZERO__NODE_RECORD];
        zero__node_record(mine);
        char *tbl = malloc((size_t)size * ZERO__NODE_RECORD);
        if (tbl && MPI_Allgather(mine, ZERO__NODE_RECORD, MPI_BYTE, tbl, ZERO__NODE_RECORD, MPI_BYTE, mc) == MPI_SUCCESS)
            (void)zero__node_leader(tbl, size, rank, NULL, &local);
        else
            local = rank; /* out of memory (this rank then joined nothing) or MPI failed: still a device */
        free(tbl);
        device = local % ndev;
    }
    ok = cudaSetDevice(device) == cudaSuccess;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r = ncclSuccess;
    if (rank == 0 && ok) r = ncclGetUniqueId(&id);
    int ok0 = ok && r == ncclSuccess;
    MPI_Allreduce(MPI_IN_PLACE, &ok0, 1, MPI_INT, MPI_MIN, mc);
    if (!ok0) {
        fmt_err(err, err_len, "NCCL setup failed (cudaSetDevice or ncclGetUniqueId on some rank)%s%s", "", "");
        (void)cudaGetLastError();
        return ZERO_ERR_COMM;
    }
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, mc);
    ncclComm_t nc;
    r = ncclCommInitRank(&nc, size, id, rank);
    if (r != ncclSuccess) {
        fmt_err(err, err_len, "ncclCommInitRank: %s%s", ncclGetErrorString(r), "");
        return ZERO_ERR_COMM;
    }
    zero_status st = wrap(nc, 1, engine, out, err, err_len);
    if (st != ZERO_OK) ncclCommDestroy(nc);
    return st;
}
#endif

zero_status zero__comm_nccl_set_stream(zero_comm *m, void *stream) {
    if (!zero__comm_is_nccl(m)) return ZERO_ERR_INVALID_ARGUMENT;
    nccl_comm *c = (nccl_comm *)m;
    lock(c);
    c->stream = stream ? (cudaStream_t)stream : c->own_stream;
    unlock(c);
    return ZERO_OK;
}

static void n_free(zero_comm *m);

static zero_status n_split(zero_comm *m, int color, int key, zero_comm **out) {
    nccl_comm *c = (nccl_comm *)m;
    *out = NULL;
    ncclComm_t nc = NULL;
    lock(c);
    ncclResult_t r = ncclCommSplit(c->nc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, NULL);
    unlock(c);
    if (r != ncclSuccess) return nccl_fail(c, "ncclCommSplit", r);
    if (color < 0 || !nc) return ZERO_OK; /* this rank is in no group (MPI_UNDEFINED) */
    zero_status st = wrap(nc, 1, m->engine, out, NULL, 0);
    if (st != ZERO_OK) {
        ncclCommDestroy(nc);
        return st;
    }
    nccl_comm *child = (nccl_comm *)*out;
    child->timeout_s = ((nccl_comm *)m)->timeout_s;
    cudaError_t e = cudaEventCreateWithFlags(&child->after_ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        n_free(*out);
        *out = NULL;
        return cuda_fail(c, "cudaEventCreateWithFlags", e);
    }
    child->after = c->stream;
    return ZERO_OK;
}

static void n_free(zero_comm *m) {
    nccl_comm *c = (nccl_comm *)m;
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    if (c->after_ev) cudaEventDestroy(c->after_ev);
    if (c->sync_ev) cudaEventDestroy(c->sync_ev);
    if (c->owns_nc && !c->aborted) ncclCommDestroy(c->nc); /* an aborted one is already freed */
    if (c->scratch) {
        cudaFree(c->scratch);
        zero__engine_note_scratch(c->base.engine, ZERO_TIER_DEVICE, -(int64_t)c->scratch_bytes);
    }
    for (size_t i = 0; i < c->ev_n; i++) cudaEventDestroy(c->ev_pool[i]);
    free(c->ev_pool);
    cudaStreamDestroy(c->own_stream);
    pthread_mutex_destroy(&c->lock);
    free(c->pending);
    free(c);
}

/* ---- blocking collectives ---------------------------------------------- */

/* Run `issue` on a device view of buf (staged through scratch when buf is
 * host memory), then wait.  in/out say which directions to copy. */
typedef ncclResult_t (*issue_fn)(nccl_comm *c, void *dbuf, size_t count, ncclDataType_t t, const void *arg);

static zero_status staged_body(nccl_comm *c, void *buf, void *d, int host, size_t bytes, size_t count,
                               ncclDataType_t t, issue_fn fn, const void *arg, const char *what);

static zero_status staged(nccl_comm *c, void *buf, size_t bytes, size_t count, ncclDataType_t t, issue_fn fn,
                          const void *arg, const char *what) {
    void *d = buf;
    int host = !is_device_ptr(buf), paused = 0;
    zero_status wa = wait_after(c);
    if (wa == ZERO_OK) wa = group_pause(c, &paused);
    if (wa != ZERO_OK) {
        group_resume(paused);
        return wa;
    }
    zero_status st = staged_body(c, buf, d, host, bytes, count, t, fn, arg, what);
    group_resume(paused);
    return st;
}

static zero_status staged_body(nccl_comm *c, void *buf, void *d, int host, size_t bytes, size_t count,
                               ncclDataType_t t, issue_fn fn, const void *arg, const char *what) {
    if (host) {
        zero_status st = scratch(c, bytes ? bytes : 1, &d);
        if (st != ZERO_OK) return st;
        cudaError_t e = cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, c->stream);
        if (e != cudaSuccess) return cuda_fail(c, "cudaMemcpyAsync", e);
    }
    ncclResult_t r = fn(c, d, count, t, arg);
    if (r != ncclSuccess) return nccl_fail(c, what, r);
    if (host) {
        cudaError_t e = cudaMemcpyAsync(buf, d, bytes, cudaMemcpyDeviceToHost, c->stream);
        if (e != cudaSuccess) return cuda_fail(c, "cudaMemcpyAsync", e);
    }
    return sync_stream(c);
}

static ncclResult_t issue_allreduce(nccl_comm *c, void *d, size_t count, ncclDataType_t t, const void *arg) {
    return ncclAllReduce(d, d, count, t, *(const ncclRedOp_t *)arg, c->nc, c->stream);
}
static ncclResult_t issue_bcast(nccl_comm *c, void *d, size_t count, ncclDataType_t t, const void *arg) {
    return ncclBroadcast(d, d, count, t, *(const int *)arg, c->nc, c->stream);
}

static zero_status n_allreduce(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op) {
    nccl_comm *c = (nccl_comm *)m;
    ncclDataType_t t;
    ncclRedOp_t o;
    if (!nccl_dtype(dt, &t) || !nccl_op(op, &o)) return ZERO_ERR_INVALID_ARGUMENT;
    size_t bytes = count * zero__dtype_size(dt);
    lock(c);
    double t0 = now_s();
    zero_status st = staged(c, buf, bytes, count, t, issue_allreduce, &o, "ncclAllReduce");
    c->base.counters.allreduce_calls++;
    c->base.counters.bytes_reduced += bytes;
    c->base.counters.busy_seconds += now_s() - t0;
    unlock(c);
    return st;
}

static zero_status n_broadcast(zero_comm *m, void *buf, size_t count, zero_dtype dt, int root) {
    nccl_comm *c = (nccl_comm *)m;
    ncclDataType_t t;
    if (!nccl_dtype(dt, &t)) return ZERO_ERR_INVALID_ARGUMENT;
    size_t bytes = count * zero__dtype_size(dt);
    lock(c);
    double t0 = now_s();
    zero_status st = staged(c, buf, bytes, count, t, issue_bcast, &root, "ncclBroadcast");
    c->base.counters.broadcast_calls++;
    c->base.counters.busy_seconds += now_s() - t0;
    unlock(c);
    return st;
}

static zero_status n_barrier(zero_comm *m) {
    unsigned char one = 1;
    nccl_comm *c = (nccl_comm *)m;
    zero_status st = n_allreduce(m, &one, 1, ZERO_DTYPE_U8, ZERO_OP_SUM);
    lock(c);
    c->base.counters.allreduce_calls--; /* a barrier is not a reduction of user data */
    c->base.counters.bytes_reduced -= 1;
    c->base.counters.other_calls++;
    unlock(c);
    return st;
}

static zero_status n_allgather_bytes(zero_comm *m, const void *send, void *recv, size_t bytes_each) {
    nccl_comm *c = (nccl_comm *)m;
    size_t total = bytes_each * (size_t)m->size;
    lock(c);
    double t0 = now_s();
    int paused = 0;
    zero_status st = wait_after(c);
    if (st == ZERO_OK) st = group_pause(c, &paused);
    int dev = is_device_ptr(send) && is_device_ptr(recv);
    unsigned char *d = recv;
    if (st == ZERO_OK && !dev) {
        void *sp = NULL;
        st = scratch(c, total ? total : 1, &sp);
        d = sp;
    }
    cudaError_t e = cudaSuccess;
    if (st == ZERO_OK)
        e = cudaMemcpyAsync(d + (size_t)m->rank * bytes_each, send, bytes_each, cudaMemcpyDefault, c->stream);
    if (st == ZERO_OK && e != cudaSuccess) st = cuda_fail(c, "cudaMemcpyAsync", e);
    if (st == ZERO_OK) {
        ncclResult_t r = ncclAllGather(d + (size_t)m->rank * bytes_each, d, bytes_each, ncclUint8, c->nc, c->stream);
        if (r != ncclSuccess) st = nccl_fail(c, "ncclAllGather", r);
    }
    if (st == ZERO_OK && !dev && (e = cudaMemcpyAsync(recv, d, total, cudaMemcpyDeviceToHost, c->stream)) != cudaSuccess)
        st = cuda_fail(c, "cudaMemcpyAsync", e);
    if (st == ZERO_OK) st = sync_stream(c);
    group_resume(paused);
    c->base.counters.other_calls++;
    c->base.counters.busy_seconds += now_s() - t0;
    unlock(c);
    return st;
}

/* ---- async collectives ------------------------------------------------- */

/* A request for the collective just queued (lock held).  record: the
 * collective runs on the stream, so `done` is an event behind it -- at
 * ncclGroupEnd when the calling thread has a group open (see nccl_req). */
static zero_status make_req(nccl_comm *c, int record, zero_comm_req **out) {
    nccl_req *q = calloc(1, sizeof *q);
    if (!q) return ZERO_ERR_OUT_OF_MEMORY;
    q->base.comm = &c->base;
    if (record && in_own_group(c)) {
        if (c->npending == c->pending_cap) {
            size_t cap = c->pending_cap ? 2 * c->pending_cap : 16;
            nccl_req **np = realloc(c->pending, cap * sizeof *np);
            if (!np) {
                free(q);
                return zero__error(c->base.engine, ZERO_ERR_OUT_OF_MEMORY, "NCCL group: no memory for its requests");
            }
            c->pending = np;
            c->pending_cap = cap;
        }
        cudaError_t e = event_get(c, &q->done);
        if (e != cudaSuccess) {
            free(q);
            return cuda_fail(c, "cudaEventCreateWithFlags", e);
        }
        q->deferred = 1;
        c->pending[c->npending++] = q;
    } else if (record) {
        cudaError_t e = event_get(c, &q->done);
        if (e == cudaSuccess) e = cudaEventRecord(q->done, c->stream);
        if (e != cudaSuccess) {
            if (q->done) cudaEventDestroy(q->done);
            free(q);
            return cuda_fail(c, "cudaEventRecord", e);
        }
    }
    *out = &q->base;
    return ZERO_OK;
}

static zero_status n_iallreduce(zero_comm *m, void *buf, size_t count, zero_dtype dt, zero_reduce_op op,
                                zero_comm_req **req) {
    nccl_comm *c = (nccl_comm *)m;
    if (!is_device_ptr(buf)) { /* host buffer: do it now, hand back a finished request */
        zero_status st = n_allreduce(m, buf, count, dt, op);
        return st == ZERO_OK ? make_req(c, 0, req) : st;
    }
    ncclDataType_t t;
    ncclRedOp_t o;
    if (!nccl_dtype(dt, &t) || !nccl_op(op, &o)) return ZERO_ERR_INVALID_ARGUMENT;
    lock(c);
    zero_status st = wait_after(c);
    ncclResult_t r = st == ZERO_OK ? ncclAllReduce(buf, buf, count, t, o, c->nc, c->stream) : ncclSuccess;
    if (st == ZERO_OK) st = r == ncclSuccess ? make_req(c, 1, req) : nccl_fail(c, "ncclAllReduce", r);
    c->base.counters.allreduce_calls++;
    c->base.counters.bytes_reduced += count * zero__dtype_size(dt);
    unlock(c);
    return st;
}

static int all_equal(const size_t *counts, int n) {
    for (int r = 1; r < n; ++r)
        if (counts[r] != counts[0]) return 0;
    return 1;
}

/* Device-side bodies of the v-collectives (stream-ordered, no sync). */
static ncclResult_t issue_rs(nccl_comm *c, const char *send, char *recv, const size_t *counts, ncclDataType_t t,
                             size_t es) {
    const int W = c->base.size;
    if (all_equal(counts, W)) return ncclReduceScatter(send, recv, counts[0], t, ncclSum, c->nc, c->stream);
    /* One ncclReduce per owner inside a group: NCCL fuses them into one
     * launch, and no rank pads its block.  recvbuff matters only at the root. */
    ncclResult_t res = ncclGroupStart();
    size_t off = 0;
    for (int r = 0; r < W && res == ncclSuccess; ++r) {
        if (counts[r])
            res = ncclReduce(send + off * es, r == c->base.rank ? (void *)recv : (void *)(send + off * es), counts[r], t,
                             ncclSum, r, c->nc, c->stream);
        off += counts[r];
    }
    ncclResult_t e2 = ncclGroupEnd();
    return res == ncclSuccess ? e2 : res;
}

static ncclResult_t issue_ag(nccl_comm *c, const char *send, char *recv, const size_t *counts, ncclDataType_t t,
                             size_t es) {
    const int W = c->base.size;
    if (all_equal(counts, W)) return ncclAllGather(send, recv, counts[0], t, c->nc, c->stream);
    ncclResult_t res = ncclGroupStart();
    size_t off = 0;
    for (int r = 0; r < W && res == ncclSuccess; ++r) {
        char *dst = recv + off * es;
        if (counts[r]) res = ncclBroadcast(r == c->base.rank ? send : dst, dst, counts[r], t, r, c->nc, c->stream);
        off += counts[r];
    }
    ncclResult_t e2 = ncclGroupEnd();
    return res == ncclSuccess ? e2 : res;
}

/* Host buffers: copy into device scratch, run, copy back, wait; the request
 * handed back is already complete.  (The normal GPU path never gets here;
 * this keeps host-memory callers, e.g. CPU-resident plugins on an NCCL
 * communicator, correct.) */
static zero_status staged_v(nccl_comm *c, int gather, const void *send, void *recv, const size_t *counts,
                            ncclDataType_t t, size_t es, size_t total) {
    const int r = c->base.rank;
    size_t off_r = 0;
    for (int b = 0; b < r; ++b) off_r += counts[b];
    size_t own = counts[r] * es;
    void *sp = NULL;
    zero_status sst = scratch(c, total * es + own + 1, &sp);
    if (sst != ZERO_OK) return sst;
    char *d = sp;
    cudaError_t e;
    ncclResult_t res;
    if (!gather) {
        e = cudaMemcpyAsync(d, send, total * es, cudaMemcpyDefault, c->stream);
        if (e != cudaSuccess) return cuda_fail(c, "cudaMemcpyAsync", e);
        if ((res = issue_rs(c, d, d + total * es, counts, t, es)) != ncclSuccess) return nccl_fail(c, "reduce-scatter", res);
        e = cudaMemcpyAsync(recv, d + total * es, own, cudaMemcpyDefault, c->stream);
    } else {
        e = cudaMemcpyAsync(d + off_r * es, send, own, cudaMemcpyDefault, c->stream);
        if (e != cudaSuccess) return cuda_fail(c, "cudaMemcpyAsync", e);
        if ((res = issue_ag(c, d + off_r * es, d, counts, t, es)) != ncclSuccess) return nccl_fail(c, "all-gather", res);
        e = cudaMemcpyAsync(recv, d, total * es, cudaMemcpyDefault, c->stream);
    }
    if (e != cudaSuccess) return cuda_fail(c, "cudaMemcpyAsync", e);
    return sync_stream(c);
}

static zero_status v_collective(zero_comm *m, int gather, const void *send, void *recv, const size_t *counts,
                                zero_dtype dt, zero_comm_req **req) {
    nccl_comm *c = (nccl_comm *)m;
    ncclDataType_t t;
    if (!nccl_dtype(dt, &t)) return ZERO_ERR_INVALID_ARGUMENT;
    size_t es = zero__dtype_size(dt), total = 0;
    for (int r = 0; r < m->size; ++r) total += counts[r];
    int on_device = is_device_ptr(send) && is_device_ptr(recv);
    lock(c);
    double t0 = now_s();
    zero_status st;
    if (on_device) {
        st = wait_after(c);
        ncclResult_t res = ncclSuccess;
        if (st == ZERO_OK)
            res = gather ? issue_ag(c, send, recv, counts, t, es) : issue_rs(c, send, recv, counts, t, es);
        if (st == ZERO_OK)
            st = res == ncclSuccess ? make_req(c, 1, req) : nccl_fail(c, gather ? "all-gather" : "reduce-scatter", res);
    } else {
        /* Staged operands are ordered after the parent's stream too (issue
         * 35): the device side of a staged collective (stage 3's gather
         * buffer when offload_param keeps the shard in pinned host memory)
         * was allocated, zero-filled and released on the parent's stream,
         * and without this wait a sub-communicator's copy into it could run
         * before the queued fill (which then zeroed the gathered weights) or
         * before the host's kernels still reading its previous contents. */
        int paused = 0;
        st = wait_after(c);
        if (st == ZERO_OK) st = group_pause(c, &paused);
        if (st == ZERO_OK) st = staged_v(c, gather, send, recv, counts, t, es, total);
        group_resume(paused);
        if (st == ZERO_OK) st = make_req(c, 0, req);
        c->base.counters.busy_seconds += now_s() - t0;
    }
    if (gather) {
        c->base.counters.allgather_calls++;
        c->base.counters.bytes_gathered += total * es;
    } else {
        c->base.counters.reduce_scatter_calls++;
        c->base.counters.bytes_reduced += total * es;
    }
    unlock(c);
    return st;
}

static zero_status n_ireduce_scatterv(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                      zero_dtype dt, zero_comm_req **req) {
    return v_collective(m, 0, send, recv, counts, dt, req);
}

static zero_status n_iallgatherv(zero_comm *m, const void *send, void *recv, const size_t *counts, zero_dtype dt,
                                 zero_comm_req **req) {
    return v_collective(m, 1, send, recv, counts, dt, req);
}

/* (issue 33) Blocking all-to-all of bytes (comm_backend.h), for the
 * quantized reduce-scatter on device memory: one ncclSend and one ncclRecv
 * per peer with a block, in one NCCL group, on c->stream after the parent's
 * work (wait_after), then a wait for the stream.  Host buffers are staged
 * through the device scratch: the send extent in, the receive extent out. */
static size_t a2a_extent(int W, const size_t *counts, const size_t *displs) {
    size_t e = 0;
    for (int r = 0; r < W; ++r)
        if (counts[r] && displs[r] + counts[r] > e) e = displs[r] + counts[r];
    return e;
}
static zero_status n_alltoallv_bytes(zero_comm *m, const void *send, const size_t *sc, const size_t *sd, void *recv,
                                     const size_t *rc, const size_t *rd) {
    nccl_comm *c = (nccl_comm *)m;
    const int W = m->size;
    const size_t se = a2a_extent(W, sc, sd), re = a2a_extent(W, rc, rd);
    const int dev = is_device_ptr(send) && is_device_ptr(recv);
    size_t sent = 0;
    for (int r = 0; r < W; ++r) sent += sc[r];
    lock(c);
    const double t0 = now_s();
    int paused = 0;
    zero_status st = wait_after(c);
    if (st == ZERO_OK) st = group_pause(c, &paused);
    const char *ds = send;
    char *dr = recv;
    cudaError_t e = cudaSuccess;
    if (st == ZERO_OK && !dev) {
        void *sp = NULL;
        st = scratch(c, se + re + 1, &sp);
        ds = sp;
        dr = (char *)sp + se;
        if (st == ZERO_OK && se && (e = cudaMemcpyAsync((void *)ds, send, se, cudaMemcpyDefault, c->stream)) != cudaSuccess)
            st = cuda_fail(c, "cudaMemcpyAsync", e);
    }
    if (st == ZERO_OK) {
        ncclResult_t r = ncclGroupStart();
        for (int p = 0; p < W && r == ncclSuccess; ++p) {
            if (sc[p]) r = ncclSend(ds + sd[p], sc[p], ncclUint8, p, c->nc, c->stream);
            if (r == ncclSuccess && rc[p]) r = ncclRecv(dr + rd[p], rc[p], ncclUint8, p, c->nc, c->stream);
        }
        ncclResult_t r2 = ncclGroupEnd();
        if (r == ncclSuccess) r = r2;
        if (r != ncclSuccess) st = nccl_fail(c, "all-to-all (ncclSend/ncclRecv)", r);
    }
    if (st == ZERO_OK && !dev && re && (e = cudaMemcpyAsync(recv, dr, re, cudaMemcpyDefault, c->stream)) != cudaSuccess)
        st = cuda_fail(c, "cudaMemcpyAsync", e);
    if (st == ZERO_OK) st = sync_stream(c);
    group_resume(paused);
    c->base.counters.reduce_scatter_calls++;
    c->base.counters.bytes_reduced += sent;
    c->base.counters.busy_seconds += now_s() - t0;
    unlock(c);
    return st;
}

static void n_set_timeout(zero_comm *m, double seconds) {
    nccl_comm *c = (nccl_comm *)m;
    pthread_mutex_lock(&c->lock);
    c->timeout_s = seconds > 0 ? seconds : 0;
    pthread_mutex_unlock(&c->lock);
}

/* Abort the communicator (NCCL's way out of a collective that will never
 * finish: a peer died or hangs); later calls fail at once.  Called without
 * the lock. */
static zero_status abort_comm(nccl_comm *c, int locked, zero_status st, const char *why) {
    if (!locked) pthread_mutex_lock(&c->lock);
    if (!c->aborted) {
        c->aborted = 1;
        snprintf(c->abort_why, sizeof c->abort_why, "%s", why);
        ncclCommAbort(c->nc);
    }
    if (!locked) pthread_mutex_unlock(&c->lock);
    return zero__error(c->base.engine, st, "NCCL communicator aborted: %s", why);
}

/* Is the NCCL communicator broken?  Returns ZERO_OK, or aborts it. */
static zero_status async_check(nccl_comm *c, int locked) {
    ncclResult_t ar = ncclSuccess;
    if (ncclCommGetAsyncError(c->nc, &ar) != ncclSuccess || ar == ncclSuccess || ar == ncclInProgress) return ZERO_OK;
    char why[200];
    snprintf(why, sizeof why, "asynchronous error %s (a peer died or the network failed)", ncclGetErrorString(ar));
    return abort_comm(c, locked, ZERO_ERR_COMM, why);
}

static zero_status undefer(nccl_comm *c, nccl_req *q);

static zero_status n_test(zero_comm_req *r, int *done) {
    nccl_req *q = (nccl_req *)r;
    nccl_comm *c = (nccl_comm *)r->comm;
    *done = 0;
    pthread_mutex_lock(&c->lock);
    int others = q->deferred && !in_own_group(c);
    pthread_mutex_unlock(&c->lock);
    if (others) return ZERO_OK; /* still in another thread's open group: not done yet */
    zero_status ust = undefer(c, q);
    if (ust != ZERO_OK) return ust;
    *done = 1;
    if (q->done) {
        cudaSetDevice(c->device);
        cudaError_t e = cudaEventQuery(q->done);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError();
            zero_status st = c->aborted ? aborted_error(c) : async_check(c, 0);
            if (st == ZERO_OK) {
                *done = 0;
                return ZERO_OK;
            }
            cudaEventDestroy(q->done);
            free(q);
            return st;
        }
        if (e == cudaSuccess)
            event_put(c, q->done); /* complete: reusable */
        else
            cudaEventDestroy(q->done);
        free(q);
        return e == cudaSuccess ? ZERO_OK : cuda_fail(c, "cudaEventQuery", e);
    }
    free(q);
    return ZERO_OK;
}

/* Poll rather than cudaEventSynchronize: a collective whose peer died never
 * completes, and only a poller can notice NCCL's asynchronous error (or the
 * ZERO_COMM_TIMEOUT limit) and abort the communicator, which makes the
 * stuck kernel return.  The polling follows comm_wait.h: yields first (a
 * collective that is about to finish costs no sleep), then sleeps that
 * grow to 1 ms, so a rank whose peer is stalled does not spin a core. */
static zero_status poll_event(nccl_comm *c, cudaEvent_t ev, int locked) {
    if (!locked) pthread_mutex_lock(&c->lock);
    const double limit = c->timeout_s;
    if (!locked) pthread_mutex_unlock(&c->lock);
    zero__waiter w;
    zero__waiter_start(&w, limit);
    for (unsigned long polls = 0;; ++polls) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return ZERO_OK;
        if (e != cudaErrorNotReady) return cuda_fail(c, "cudaEventQuery", e);
        (void)cudaGetLastError();
        if (c->aborted) return aborted_error(c);
        zero_status st;
        if (polls % 64 == 0 && (st = async_check(c, locked)) != ZERO_OK) return st;
        /* A held lock is c's own (the caller's blocking collective), not one
         * an NCCL peer needs: sleeping with it is safe. */
        if (zero__waiter_pause(&w)) {
            char why[200];
            snprintf(why, sizeof why,
                     "a collective on %d ranks did not finish within ZERO_COMM_TIMEOUT / comm_timeout = %g s (NCCL "
                     "does not say which rank is missing)",
                     c->base.size, limit);
            return abort_comm(c, locked, ZERO_ERR_TIMEOUT, why);
        }
    }
}

/* A wait or test on a request still inside an open group (lock not held):
 * the opening thread launches the group first (group_pause/resume); any
 * other thread cannot close it and is told so.  The request stays valid
 * (and owned by the caller) when this fails. */
static zero_status undefer(nccl_comm *c, nccl_req *q) {
    pthread_mutex_lock(&c->lock);
    zero_status st = ZERO_OK;
    if (q->deferred) {
        if (!in_own_group(c)) {
            st = zero__error(c->base.engine, ZERO_ERR_INVALID_ARGUMENT,
                             "NCCL: waiting for a request inside another thread's open group (that thread must "
                             "end the group first)");
        } else {
            int paused = 0;
            cudaSetDevice(c->device);
            st = group_pause(c, &paused);
            group_resume(paused);
        }
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

static zero_status n_wait(zero_comm_req *r) {
    nccl_req *q = (nccl_req *)r;
    nccl_comm *c = (nccl_comm *)r->comm;
    zero_status st = undefer(c, q);
    if (st != ZERO_OK) return st;
    if (q->done) {
        cudaSetDevice(c->device);
        const double t0 = now_s();
        st = poll_event(c, q->done, 0);
        pthread_mutex_lock(&c->lock);
        c->base.counters.busy_seconds += now_s() - t0;
        c->base.counters.host_waits++;
        pthread_mutex_unlock(&c->lock);
        if (st == ZERO_OK)
            event_put(c, q->done); /* complete: reusable (a failed wait's may still be pending) */
        else
            cudaEventDestroy(q->done);
    }
    free(q);
    return st;
}

/* ---- stream-ordered completion (issue 35) ------------------------------- */

/* Collectives on a device buffer are queued on c->stream in issue order,
 * and each request's event is recorded behind its collective there: later
 * work on that stream runs after it, and a later request's event completes
 * after every earlier one.  Host-buffer collectives complete before they
 * return (their requests have no event).  An aborted communicator answers 0
 * so that its callers wait and see the error. */
static int n_ordered_on(zero_comm *m, void *stream) {
    nccl_comm *c = (nccl_comm *)m;
    pthread_mutex_lock(&c->lock);
    int r = stream && (cudaStream_t)stream == c->stream && !c->aborted;
    pthread_mutex_unlock(&c->lock);
    return r;
}

/* End a request without waiting (see comm_backend.h's drop): launch it if it
 * is still inside the calling thread's open group (as a wait would), then
 * return its event to the pool.  Recording a pooled event again while its
 * previous record is still pending is allowed (the new record replaces the
 * old one) and nobody else waits for this request. */
static zero_status n_drop(zero_comm_req *r) {
    nccl_req *q = (nccl_req *)r;
    nccl_comm *c = (nccl_comm *)r->comm;
    zero_status st = undefer(c, q);
    if (st != ZERO_OK) return st;
    if (q->done) event_put(c, q->done);
    free(q);
    return ZERO_OK;
}

/* ---- group_start / group_end (services comm_group_start/end, 1.5) -------- */

static zero_status n_group_start(zero_comm *m) {
    nccl_comm *c = (nccl_comm *)m;
    lock(c);
    zero_status st = ZERO_OK;
    if (c->aborted) {
        st = aborted_error(c);
    } else if (c->group_depth > 0 && !in_own_group(c)) {
        st = zero__error(c->base.engine, ZERO_ERR_INVALID_ARGUMENT,
                         "NCCL: comm_group_start while another thread has a group open on this communicator");
    } else if (c->group_depth++ == 0) {
        c->group_owner = pthread_self();
        ncclResult_t r = ncclGroupStart();
        if (r != ncclSuccess) {
            c->group_depth = 0;
            st = nccl_fail(c, "ncclGroupStart", r);
        }
    }
    unlock(c);
    return st;
}

static zero_status n_group_end(zero_comm *m) {
    nccl_comm *c = (nccl_comm *)m;
    lock(c);
    zero_status st = ZERO_OK;
    if (!in_own_group(c)) {
        st = zero__error(c->base.engine, ZERO_ERR_INVALID_ARGUMENT,
                         "NCCL: comm_group_end without a comm_group_start from this thread");
    } else if (--c->group_depth == 0) {
        ncclResult_t r = ncclGroupEnd();
        st = record_pending(c); /* also after a failed launch: the requests must not hang */
        if (r != ncclSuccess) st = nccl_fail(c, "ncclGroupEnd", r);
    }
    unlock(c);
    return st;
}

static const zero__comm_ops nccl_ops = {
    .name = "nccl",
    .split = n_split,
    .free = n_free,
    .allreduce = n_allreduce,
    .broadcast = n_broadcast,
    .barrier = n_barrier,
    .iallreduce = n_iallreduce,
    .ireduce_scatterv = n_ireduce_scatterv,
    .iallgatherv = n_iallgatherv,
    .wait = n_wait,
    .test = n_test,
    .allgather_bytes = n_allgather_bytes,
    .set_timeout = n_set_timeout,
    .alltoallv_bytes = n_alltoallv_bytes,
    .group_start = n_group_start,
    .group_end = n_group_end,
    .ordered_on = n_ordered_on,
    .drop = n_drop,
};
#endif /* ZERO_HAVE_NCCL */
