/* The CUDA runtime and NCCL stand-ins of cuda_runtime_api.h and nccl.h:
 * streams as queues of work run lazily (see cuda_runtime_api.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_runtime_api.h"
#include "nccl.h"

/* ---- work and streams ---------------------------------------------------- */

enum { W_COPY, W_SET, W_WAIT, W_FN };
typedef struct work {
    int kind;
    void *dst;
    const void *src;
    size_t n;
    int v;
    struct fake_cuda_stream *on; /* W_WAIT: the stream waited for ... */
    size_t upto;                 /* ... up to this many of its items */
    void (*fn)(void *);
    void *arg;
} work;

struct fake_cuda_stream {
    work *q;
    size_t n, cap, done; /* items queued, items run */
    struct fake_cuda_stream *next;
};
struct fake_cuda_event {
    struct fake_cuda_stream *s; /* NULL: never recorded (complete) */
    size_t pos;
};

static struct fake_cuda_stream g_legacy; /* stream 0 */
static struct fake_cuda_stream *g_streams = &g_legacy;
static cudaError_t g_last = cudaSuccess;

static struct fake_cuda_stream *S(cudaStream_t s) { return s ? s : &g_legacy; }

static cudaError_t push(struct fake_cuda_stream *s, work w) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        work *q = realloc(s->q, cap * sizeof *q);
        if (!q) return g_last = cudaErrorMemoryAllocation;
        s->q = q, s->cap = cap;
    }
    s->q[s->n++] = w;
    return cudaSuccess;
}

/* Run stream s until `upto` of its items are done, and first what each
 * depends on. */
static void run_to(struct fake_cuda_stream *s, size_t upto) {
    while (s->done < upto) {
        work w = s->q[s->done];
        switch (w.kind) {
        case W_COPY: memmove(w.dst, w.src, w.n); break;
        case W_SET: memset(w.dst, w.v, w.n); break;
        case W_WAIT: run_to(w.on, w.upto); break;
        case W_FN: w.fn(w.arg); break;
        }
        s->done++;
    }
}

size_t fake_cuda_pending(void) {
    size_t k = 0;
    for (struct fake_cuda_stream *s = g_streams; s; s = s->next) k += s->n - s->done;
    return k;
}

void fake_cuda_device_sync(void) {
    for (struct fake_cuda_stream *s = g_streams; s; s = s->next) run_to(s, s->n);
}

void fake_cuda_launch(cudaStream_t s, void (*fn)(void *arg), void *arg) {
    push(S(s), (work){.kind = W_FN, .fn = fn, .arg = arg});
}

/* ---- memory --------------------------------------------------------------- */

typedef struct block {
    char *p;
    size_t n;
    struct block *next;
} block;
static block *g_blocks;

static int is_dev(const void *p) {
    for (block *b = g_blocks; b; b = b->next)
        if ((const char *)p >= b->p && (const char *)p < b->p + b->n) return 1;
    return 0;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
    block *b = malloc(sizeof *b);
    char *m = malloc(bytes ? bytes : 1);
    if (!b || !m) {
        free(b), free(m);
        return g_last = cudaErrorMemoryAllocation;
    }
    memset(m, 0xA5, bytes ? bytes : 1); /* uninitialised, as cudaMalloc's */
    *b = (block){m, bytes ? bytes : 1, g_blocks};
    g_blocks = b;
    *p = m;
    return cudaSuccess;
}

/* cudaFree synchronises the device first. */
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    fake_cuda_device_sync();
    for (block **b = &g_blocks; *b; b = &(*b)->next)
        if ((*b)->p == p) {
            block *x = *b;
            *b = x->next;
            free(x->p);
            free(x);
            return cudaSuccess;
        }
    return g_last = cudaErrorInvalidValue;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    memset(a, 0, sizeof *a);
    a->type = is_dev(p) ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    if (a->type == cudaMemoryTypeDevice) a->devicePointer = (void *)(uintptr_t)p;
    else a->hostPointer = (void *)(uintptr_t)p;
    return cudaSuccess;
}

/* ---- the runtime ------------------------------------------------------------ */

const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "fake CUDA error"; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorFake"; }
cudaError_t cudaGetLastError(void) {
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}
cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : (g_last = cudaErrorInvalidValue); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned flags) {
    (void)flags;
    struct fake_cuda_stream *s = calloc(1, sizeof *s);
    if (!s) return g_last = cudaErrorMemoryAllocation;
    s->next = g_streams->next; /* after the legacy stream, which stays first */
    g_streams->next = s;
    *out = s;
    return cudaSuccess;
}

/* Destroying a stream lets its queued work finish (as CUDA does). */
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return g_last = cudaErrorInvalidValue;
    run_to(s, s->n);
    for (struct fake_cuda_stream **p = &g_streams; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    free(s->q);
    free(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    run_to(S(s), S(s)->n);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags) {
    (void)flags;
    if (!ev) return g_last = cudaErrorInvalidValue;
    if (!ev->s) return cudaSuccess; /* never recorded: nothing to wait for */
    return push(S(s), (work){.kind = W_WAIT, .on = ev->s, .upto = ev->pos});
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags) {
    (void)flags;
    *ev = calloc(1, sizeof **ev);
    return *ev ? cudaSuccess : (g_last = cudaErrorMemoryAllocation);
}
/* A recorded event may be destroyed while its work is pending: the work
 * still runs (a W_WAIT holds the stream and position, not the event). */
cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    free(ev);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
    if (!ev) return g_last = cudaErrorInvalidValue;
    ev->s = S(s);
    ev->pos = S(s)->n;
    return cudaSuccess;
}
/* The device may finish the covered work at any time; here it does so when
 * the host asks, and nothing more. */
cudaError_t cudaEventQuery(cudaEvent_t ev) {
    if (ev->s) run_to(ev->s, ev->pos);
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t ev) { return cudaEventQuery(ev); }

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s) {
    (void)kind;
    if (!bytes) return cudaSuccess;
    return push(S(s), (work){.kind = W_COPY, .dst = dst, .src = src, .n = bytes});
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s) {
    if (!bytes) return cudaSuccess;
    return push(S(s), (work){.kind = W_SET, .dst = p, .v = v, .n = bytes});
}

/* ---- NCCL (one rank) -------------------------------------------------------- */

struct fake_nccl_comm {
    int dev;
};

static size_t nccl_es(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

/* Calls inside a group wait here until the outermost ncclGroupEnd. */
typedef struct held {
    struct fake_cuda_stream *s;
    work w;
} held;
static held *g_held;
static size_t g_nheld, g_capheld;
static int g_group;

static ncclResult_t coll(cudaStream_t s, void *dst, const void *src, size_t bytes) {
    work w = {.kind = W_COPY, .dst = dst, .src = src, .n = bytes};
    if (!g_group) return push(S(s), w) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
    if (g_nheld == g_capheld) {
        size_t cap = g_capheld ? 2 * g_capheld : 16;
        held *h = realloc(g_held, cap * sizeof *h);
        if (!h) return ncclUnhandledCudaError;
        g_held = h, g_capheld = cap;
    }
    g_held[g_nheld++] = (held){S(s), w};
    return ncclSuccess;
}

ncclComm_t fake_nccl_comm_new(void) { return calloc(1, sizeof(struct fake_nccl_comm)); }
const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "fake NCCL error"; }
const char *ncclGetLastError(ncclComm_t c) {
    (void)c;
    return "";
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t *c, int nranks, ncclUniqueId id, int rank) {
    (void)id;
    if (nranks != 1 || rank != 0) return ncclInvalidArgument;
    *c = fake_nccl_comm_new();
    return *c ? ncclSuccess : ncclUnhandledCudaError;
}
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out, ncclConfig_t *config) {
    (void)c, (void)key, (void)config;
    *out = color == NCCL_SPLIT_NOCOLOR ? NULL : fake_nccl_comm_new();
    return color == NCCL_SPLIT_NOCOLOR || *out ? ncclSuccess : ncclUnhandledCudaError;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) {
    free(c);
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) { return ncclCommDestroy(c); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r) {
    (void)c;
    *r = ncclSuccess;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(ncclComm_t c, int *rank) {
    (void)c;
    *rank = 0;
    return ncclSuccess;
}
ncclResult_t ncclCommCount(ncclComm_t c, int *count) {
    (void)c;
    *count = 1;
    return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(ncclComm_t c, int *dev) {
    *dev = c->dev;
    return ncclSuccess;
}
ncclResult_t ncclGroupStart(void) {
    g_group++;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
    if (g_group <= 0) return ncclInvalidArgument;
    if (--g_group) return ncclSuccess;
    ncclResult_t r = ncclSuccess;
    for (size_t i = 0; i < g_nheld; i++)
        if (push(g_held[i].s, g_held[i].w) != cudaSuccess) r = ncclUnhandledCudaError;
    g_nheld = 0;
    return r;
}
/* One rank: every collective leaves the rank's own data in recv. */
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s) {
    (void)op, (void)c;
    return coll(s, recv, send, count * nccl_es(t));
}
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s) {
    (void)root, (void)c;
    return coll(s, recv, send, count * nccl_es(t));
}
ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t c, cudaStream_t s) {
    (void)op, (void)root, (void)c;
    return coll(s, recv, send, count * nccl_es(t));
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    (void)c;
    return coll(s, recv, send, count * nccl_es(t));
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t s) {
    (void)op, (void)c;
    return coll(s, recv, send, count * nccl_es(t));
}

/* One rank: the only peer is itself; a send waits for the receive. */
static const void *g_send_buf;
static size_t g_send_bytes;
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    (void)c, (void)s;
    if (peer != 0) return ncclInvalidArgument;
    g_send_buf = send, g_send_bytes = count * nccl_es(t);
    return ncclSuccess;
}
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    (void)c;
    if (peer != 0 || !g_send_buf || g_send_bytes != count * nccl_es(t)) return ncclInvalidArgument;
    ncclResult_t r = coll(s, recv, g_send_buf, g_send_bytes);
    g_send_buf = NULL;
    return r;
}
