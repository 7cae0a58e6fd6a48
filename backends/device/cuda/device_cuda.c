/* CUDA device backend; see device_cuda.h. */
#include "device_cuda.h"
#include "env.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_arena.h"
#include "local_rank.h"

/* cudaMalloc guarantees 256-byte alignment; keep it for sub-blocks so that
 * vectorised kernels and NCCL see the same alignment as with cudaMalloc. */
#define ARENA_ALIGN 256
#define DEFAULT_GROW ((size_t)64 << 20)

struct zero_cuda_device {
    int ordinal;
    cudaStream_t compute; /* borrowed */
    cudaStream_t comm;    /* ours */
    cudaEvent_t order_ev; /* reused: cudaStreamWaitEvent captures the record current at the call */
    /* (issue 35) Zero-fills are queued on the comm stream without a host
     * wait; fill_ev is recorded (under lock) right after each, so it always
     * marks the latest one, and `fills` counts them.  fills_done: the
     * highest count zero_cuda_fill_wait has seen completed. */
    cudaEvent_t fill_ev;
    uint64_t fills, fills_done;
    int sync_alloc; /* ZERO_CUDA_ALLOC_SYNC=1: wait for every fill (the behaviour before issue 35) */
    atomic_ullong host_waits;
    size_t grow;
    pthread_mutex_t lock;
    zero_cuda_arena *arena[ZERO_NTIERS];
    char err[512];
};

static void set_err(zero_cuda_device *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(zero_cuda_device *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->err, sizeof d->err, fmt, ap);
    va_end(ap);
}

static void copy_msg(char *dst, size_t len, const char *what, cudaError_t e) {
    if (dst && len) snprintf(dst, len, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int zero_cuda_device_count(char *why, size_t why_len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        copy_msg(why, why_len, "cudaGetDeviceCount", e);
        (void)cudaGetLastError(); /* clear the sticky-free error so later calls report their own */
        return 0;
    }
    if (n == 0 && why && why_len) snprintf(why, why_len, "cudaGetDeviceCount: no CUDA device");
    return n;
}

/* Reserve a region of at least `bytes` for `tier` and hand it to its arena. */
static int add_region(zero_cuda_device *d, zero_mem_tier tier, size_t bytes) {
    void *p = NULL;
    cudaError_t e = tier == ZERO_TIER_DEVICE ? cudaMalloc(&p, bytes)
                                             : cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        set_err(d, "%s(%zu bytes) on device %d: %s", tier == ZERO_TIER_DEVICE ? "cudaMalloc" : "cudaHostAlloc",
                bytes, d->ordinal, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return -1;
    }
    if (zero_cuda_arena_add_region(d->arena[tier], p, bytes) != 0) {
        if (tier == ZERO_TIER_DEVICE) cudaFree(p);
        else cudaFreeHost(p);
        set_err(d, "out of host memory for arena bookkeeping");
        return -1;
    }
    return 0;
}

zero_status zero_cuda_device_open(const zero_cuda_device_options *o, zero_cuda_device **out, char *err,
                                  size_t err_len) {
    if (out) *out = NULL;
    if (!o || !out || o->struct_size < sizeof(zero_cuda_device_options)) {
        if (err && err_len) snprintf(err, err_len, "zero_cuda_device_open: bad arguments");
        return ZERO_ERR_INVALID_ARGUMENT;
    }
    char why[256];
    int n = zero_cuda_device_count(why, sizeof why);
    if (n == 0) {
        if (err && err_len) snprintf(err, err_len, "no CUDA device: %s", why);
        return ZERO_ERR_DEVICE;
    }
    int ordinal = o->ordinal;
    if (ordinal < 0) {
        /* ZERO_DEVICE_INDEX_AUTO: one GPU per local rank, round robin, as
         * docs/gpu.md promises (device_index 0 for every rank put eight ranks
         * of a node on GPU 0, and NCCL refused the duplicate GPU). */
        char src[64];
        ordinal = zero__local_rank(src, sizeof src) % n;
    } else if (ordinal >= n) {
        if (err && err_len) snprintf(err, err_len, "CUDA device %d requested, %d present", o->ordinal, n);
        return ZERO_ERR_DEVICE;
    }
    cudaError_t e = cudaSetDevice(ordinal);
    if (e != cudaSuccess) {
        copy_msg(err, err_len, "cudaSetDevice", e);
        return ZERO_ERR_DEVICE;
    }
    zero_cuda_device *d = calloc(1, sizeof *d);
    if (!d) {
        if (err && err_len) snprintf(err, err_len, "out of host memory");
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    d->ordinal = ordinal;
    d->compute = (cudaStream_t)o->compute_stream;
    d->grow = o->grow_bytes ? o->grow_bytes : DEFAULT_GROW;
    pthread_mutex_init(&d->lock, NULL);
    zero_status st = ZERO_ERR_DEVICE;
    /* Non-blocking: the comm stream must not serialise with the legacy
     * default stream, or a host computing on stream 0 would lose overlap. */
    if ((e = cudaStreamCreateWithFlags(&d->comm, cudaStreamNonBlocking)) != cudaSuccess) {
        copy_msg(err, err_len, "cudaStreamCreateWithFlags", e);
        goto fail;
    }
    if ((e = cudaEventCreateWithFlags(&d->order_ev, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&d->fill_ev, cudaEventDisableTiming)) != cudaSuccess) {
        copy_msg(err, err_len, "cudaEventCreateWithFlags", e);
        goto fail;
    }
    {
        /* Queued fills are the default (issue 35).  They were opt-in after
         * one H200 run (2026-11-27) ended stage 3 + offload_param +
         * offload_optimizer at N = 1 (NCCL) away from the CPU engine; the
         * unordered user was the NCCL backend's host-operand gather on a
         * split (fixed, device_nccl_order), and the next H200 run
         * (2026-11-28) had all 63 device demo cases bitwise with queued
         * fills, that one included.  ZERO_CUDA_ALLOC_SYNC=1 waits for every
         * fill again (the behaviour before issue 35). */
        int sync = 0;
        d->sync_alloc = zero__env_flag("ZERO_CUDA_ALLOC_SYNC", &sync) == 1 && sync;
    }
    for (int t = 0; t < ZERO_NTIERS; ++t) {
        if (!(d->arena[t] = zero_cuda_arena_create(ARENA_ALIGN))) {
            st = ZERO_ERR_OUT_OF_MEMORY;
            if (err && err_len) snprintf(err, err_len, "out of host memory");
            goto fail;
        }
    }
    if ((o->device_arena_bytes && add_region(d, ZERO_TIER_DEVICE, o->device_arena_bytes) != 0) ||
        (o->host_arena_bytes && add_region(d, ZERO_TIER_HOST, o->host_arena_bytes) != 0)) {
        st = ZERO_ERR_OUT_OF_MEMORY;
        if (err && err_len) snprintf(err, err_len, "%s", d->err);
        goto fail;
    }
    *out = d;
    return ZERO_OK;
fail:
    zero_cuda_device_close(d);
    return st;
}

void zero_cuda_device_close(zero_cuda_device *d) {
    if (!d) return;
    cudaSetDevice(d->ordinal);
    if (d->comm) cudaStreamSynchronize(d->comm);
    for (int t = 0; t < ZERO_NTIERS; ++t) {
        if (!d->arena[t]) continue;
        zero_cuda_arena_stats s;
        zero_cuda_arena_stats_get(d->arena[t], &s);
        for (size_t i = 0; i < s.regions; ++i) {
            void *p = zero_cuda_arena_region(d->arena[t], i);
            if (t == ZERO_TIER_DEVICE) cudaFree(p);
            else cudaFreeHost(p);
        }
        zero_cuda_arena_destroy(d->arena[t]);
    }
    if (d->order_ev) cudaEventDestroy(d->order_ev);
    if (d->fill_ev) cudaEventDestroy(d->fill_ev);
    if (d->comm) cudaStreamDestroy(d->comm);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

void zero_cuda_note_host_wait(zero_cuda_device *d) {
    if (d) atomic_fetch_add_explicit(&d->host_waits, 1, memory_order_relaxed);
}

void *zero_cuda_alloc(zero_cuda_device *d, zero_mem_tier tier, size_t bytes) {
    return zero_cuda_alloc_ex(d, tier, bytes, 0);
}

void *zero_cuda_alloc_ex(zero_cuda_device *d, zero_mem_tier tier, size_t bytes, unsigned flags) {
    if (!d || tier < 0 || tier >= ZERO_NTIERS) return NULL;
    cudaSetDevice(d->ordinal);
    pthread_mutex_lock(&d->lock);
    void *p = zero_cuda_arena_alloc(d->arena[tier], bytes);
    if (!p) {
        /* Grow by one region big enough for this block (rounded up). */
        size_t want = bytes + ARENA_ALIGN > d->grow ? bytes + ARENA_ALIGN : d->grow;
        if (add_region(d, tier, want) == 0) p = zero_cuda_arena_alloc(d->arena[tier], bytes);
    }
    size_t n = p ? zero_cuda_arena_block_size(d->arena[tier], p) : 0;
    pthread_mutex_unlock(&d->lock);
    if (!p) return NULL;
    if (flags & ZERO_CUDA_ALLOC_NOFILL) return p;
    if (tier == ZERO_TIER_HOST) {
        memset(p, 0, n);
        return p;
    }
    /* Zero on the comm stream, in stream order behind whatever used this
     * arena block before (its earlier users queued there too), and do not
     * wait (issue 35): a synchronisation here also waited for every
     * collective queued on the stream, once per allocation.  fill_ev marks
     * the latest fill for zero_cuda_fill_wait; memset and record happen
     * under the lock so that the event's record is always the newest
     * fill's.  With ZERO_CUDA_ALLOC_SYNC=1 the fill is waited for (see
     * zero_cuda_device_open). */
    pthread_mutex_lock(&d->lock);
    cudaError_t e = cudaMemsetAsync(p, 0, n, d->comm);
    if (e == cudaSuccess && !d->sync_alloc) e = cudaEventRecord(d->fill_ev, d->comm);
    if (e == cudaSuccess && !d->sync_alloc) d->fills++;
    pthread_mutex_unlock(&d->lock);
    if (e == cudaSuccess && d->sync_alloc) {
        e = cudaStreamSynchronize(d->comm);
        zero_cuda_note_host_wait(d);
    }
    if (e != cudaSuccess) {
        set_err(d, "cudaMemsetAsync: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        zero_cuda_free(d, p);
        return NULL;
    }
    return p;
}

zero_status zero_cuda_fill_wait(zero_cuda_device *d) {
    if (!d) return ZERO_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&d->lock);
    const uint64_t want = d->fills;
    const int pending = want > d->fills_done;
    pthread_mutex_unlock(&d->lock);
    if (!pending) return ZERO_OK;
    cudaSetDevice(d->ordinal);
    /* The event holds the record of fill `want` or of a later one (another
     * thread may have allocated since): either way every fill up to `want`
     * is done when it completes. */
    cudaError_t e = cudaEventSynchronize(d->fill_ev);
    zero_cuda_note_host_wait(d);
    if (e != cudaSuccess) {
        set_err(d, "cudaEventSynchronize (zero-fill) on device %d: %s", d->ordinal, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return ZERO_ERR_DEVICE;
    }
    pthread_mutex_lock(&d->lock);
    if (d->fills_done < want) d->fills_done = want;
    pthread_mutex_unlock(&d->lock);
    return ZERO_OK;
}

zero_status zero_cuda_free(zero_cuda_device *d, void *p) {
    if (!d || !p) return ZERO_OK;
    pthread_mutex_lock(&d->lock);
    int rc = -1;
    for (int t = 0; t < ZERO_NTIERS && rc != 0; ++t) rc = zero_cuda_arena_free(d->arena[t], p);
    pthread_mutex_unlock(&d->lock);
    return rc == 0 ? ZERO_OK : ZERO_ERR_INVALID_ARGUMENT;
}

int zero_cuda_owns(zero_cuda_device *d, const void *p) {
    if (!d) return 0;
    pthread_mutex_lock(&d->lock);
    int r = zero_cuda_arena_owns(d->arena[ZERO_TIER_DEVICE], p) || zero_cuda_arena_owns(d->arena[ZERO_TIER_HOST], p);
    pthread_mutex_unlock(&d->lock);
    return r;
}

static zero_status cuda_status(zero_cuda_device *d, const char *what, cudaError_t e) {
    if (e == cudaSuccess) return ZERO_OK;
    set_err(d, "%s on device %d: %s", what, d->ordinal, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return ZERO_ERR_DEVICE;
}

zero_status zero_cuda_copy(zero_cuda_device *d, void *dst, const void *src, size_t bytes) {
    if (!d) return ZERO_ERR_INVALID_ARGUMENT;
    if (bytes == 0) return ZERO_OK;
    cudaSetDevice(d->ordinal);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, d->comm);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->comm);
    zero_cuda_note_host_wait(d);
    return cuda_status(d, "cudaMemcpyAsync", e);
}

zero_status zero_cuda_copy_async(zero_cuda_device *d, void *dst, const void *src, size_t bytes, void *stream) {
    if (!d) return ZERO_ERR_INVALID_ARGUMENT;
    if (bytes == 0) return ZERO_OK;
    cudaSetDevice(d->ordinal);
    cudaStream_t s = stream ? (cudaStream_t)stream : d->comm;
    return cuda_status(d, "cudaMemcpyAsync", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
}

void *zero_cuda_compute_stream(zero_cuda_device *d) { return d ? (void *)d->compute : NULL; }
void *zero_cuda_comm_stream(zero_cuda_device *d) { return d ? (void *)d->comm : NULL; }

/* waiter waits for the work queued on producer so far.  The event is
 * shared, so record+wait must not interleave with another thread's pair. */
static zero_status order(zero_cuda_device *d, cudaStream_t producer, cudaStream_t waiter) {
    cudaSetDevice(d->ordinal);
    pthread_mutex_lock(&d->lock);
    cudaError_t e = cudaEventRecord(d->order_ev, producer);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(waiter, d->order_ev, 0);
    pthread_mutex_unlock(&d->lock);
    return cuda_status(d, "event ordering", e);
}

zero_status zero_cuda_order_after(zero_cuda_device *d, void *producer) {
    if (!d) return ZERO_ERR_INVALID_ARGUMENT;
    return order(d, producer ? (cudaStream_t)producer : d->compute, d->comm);
}

zero_status zero_cuda_order_before(zero_cuda_device *d, void *consumer) {
    if (!d) return ZERO_ERR_INVALID_ARGUMENT;
    return order(d, d->comm, consumer ? (cudaStream_t)consumer : d->compute);
}

zero_status zero_cuda_comm_sync(zero_cuda_device *d) {
    if (!d) return ZERO_ERR_INVALID_ARGUMENT;
    cudaSetDevice(d->ordinal);
    zero_cuda_note_host_wait(d);
    return cuda_status(d, "cudaStreamSynchronize", cudaStreamSynchronize(d->comm));
}

void zero_cuda_device_stats_get(zero_cuda_device *d, zero_cuda_device_stats *out) {
    memset(out, 0, sizeof *out);
    if (!d) return;
    pthread_mutex_lock(&d->lock);
    for (int t = 0; t < ZERO_NTIERS; ++t) {
        zero_cuda_arena_stats s;
        zero_cuda_arena_stats_get(d->arena[t], &s);
        out->capacity[t] = s.capacity;
        out->used[t] = s.used;
        out->peak_used[t] = s.peak_used;
        out->largest_free[t] = s.largest_free;
    }
    out->fills_async = d->fills;
    pthread_mutex_unlock(&d->lock);
    out->host_waits = atomic_load_explicit(&d->host_waits, memory_order_relaxed);
}

int zero_cuda_device_ordinal(const zero_cuda_device *d) { return d ? d->ordinal : -1; }

const char *zero_cuda_device_error(const zero_cuda_device *d) { return d ? d->err : ""; }
