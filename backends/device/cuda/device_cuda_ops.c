/* The engine's device (backends/device/device.h) on CUDA: memory from the
 * pooled arenas of device_cuda.c, kernels from kernels/cuda, everything
 * queued on the device's communication stream (the stream the NCCL
 * communicator is given), so libzero's kernels and collectives are ordered
 * with each other without host synchronisation.  Ops that hand a value back
 * to the host (sumsq, nonfinite, copies to host memory) synchronise.
 * Thread-safety: as device_cuda.c (every op may run on several threads);
 * each op makes the device current on the calling thread first. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_ops.h"
#include "device_cuda.h"
#include "zero_cuda_kernels.h"

typedef struct cuda_dev {
    zero__device base;
    zero_cuda_device *cd;
    char err[256]; /* kernel launch failures (memory/stream ones are in cd's text) */
    /* Scratch of the reductions (sumsq's lanes and tree, the non-finite
     * flag), kept between calls: a fresh block per call cost an allocation,
     * a memset and a stream synchronisation each time.  red_lock serialises
     * its users (each waits for its own result anyway). */
    pthread_mutex_t red_lock;
    double *red;     /* device, red_cap doubles */
    size_t red_cap;
    /* (1.13) the fingerprint kernels' scratch: fixed size, never regrown
     * (their launches stay queued after cd_prints returns, so a block a
     * regrowth freed could be handed to another stream's work meanwhile);
     * allocated at the first cd_prints, under red_lock */
    uint64_t *prints_scratch;
} cuda_dev;

/* At least `doubles` of reduction scratch; called with red_lock held. */
static double *red_scratch(cuda_dev *d, size_t doubles) {
    if (d->red_cap >= doubles) return d->red;
    if (d->red) zero_cuda_free(d->cd, d->red);
    d->red_cap = 0;
    size_t want = doubles < 1024 ? 1024 : doubles + doubles / 4; /* room for a somewhat larger range next time */
    if (!(d->red = zero_cuda_alloc(d->cd, ZERO_TIER_DEVICE, want * sizeof(double)))) return NULL;
    d->red_cap = want;
    return d->red;
}

#define CD(d) (((cuda_dev *)(d))->cd)

static void *stream_of(zero__device *d) { return zero_cuda_comm_stream(CD(d)); }
static void current(zero__device *d) { cudaSetDevice(d->ordinal); }

static zero_status launched(zero__device *d, zero_status s, const char *what) {
    if (s != ZERO_OK) snprintf(((cuda_dev *)d)->err, sizeof ((cuda_dev *)d)->err, "%s: kernel launch failed", what);
    return s;
}

static void *cd_alloc(zero__device *d, zero_mem_tier tier, size_t bytes) { return zero_cuda_alloc(CD(d), tier, bytes); }
static void *cd_alloc_nofill(zero__device *d, zero_mem_tier tier, size_t bytes) {
    return zero_cuda_alloc_ex(CD(d), tier, bytes, ZERO_CUDA_ALLOC_NOFILL);
}
static zero_status cd_fill_wait(zero__device *d) { return zero_cuda_fill_wait(CD(d)); }
static uint64_t cd_host_waits(zero__device *d) {
    zero_cuda_device_stats st;
    zero_cuda_device_stats_get(CD(d), &st);
    return st.host_waits;
}
static void cd_free(zero__device *d, void *p) { zero_cuda_free(CD(d), p); }

/* Device (or managed) memory: what a host thread cannot dereference safely.
 * Pinned host memory and pageable memory answer 0. */
static int cd_is_device(zero__device *d, const void *p) {
    (void)d;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* older runtimes: invalid value for unregistered host memory */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static zero_status cd_copy(zero__device *d, void *dst, const void *src, size_t bytes) {
    return zero_cuda_copy(CD(d), dst, src, bytes);
}

static zero_status cd_memset(zero__device *d, void *p, int v, size_t bytes) {
    current(d);
    cudaError_t e = cudaMemsetAsync(p, v, bytes, (cudaStream_t)stream_of(d));
    /* Wait: a cleared gradient slot or accumulator is handed to the host,
     * whose backward kernels write into it on a stream of its own. */
    if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)stream_of(d));
    zero_cuda_note_host_wait(CD(d));
    if (e != cudaSuccess) {
        snprintf(((cuda_dev *)d)->err, sizeof ((cuda_dev *)d)->err, "cudaMemsetAsync: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return ZERO_ERR_DEVICE;
    }
    return ZERO_OK;
}

static zero_status cd_fail(zero__device *d, const char *what, cudaError_t e) {
    snprintf(((cuda_dev *)d)->err, sizeof ((cuda_dev *)d)->err, "%s: %s", what, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return ZERO_ERR_DEVICE;
}

/* No wait: the caller fences before the memory is handed to the host. */
static zero_status cd_memset_async(zero__device *d, void *p, int v, size_t bytes) {
    current(d);
    cudaError_t e = cudaMemsetAsync(p, v, bytes, (cudaStream_t)stream_of(d));
    return e == cudaSuccess ? ZERO_OK : cd_fail(d, "cudaMemsetAsync", e);
}

static zero_status cd_fence(zero__device *d, void **fence) {
    current(d);
    cudaEvent_t ev = NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(ev, (cudaStream_t)stream_of(d));
    if (e != cudaSuccess) {
        if (ev) cudaEventDestroy(ev);
        *fence = NULL;
        return cd_fail(d, "cudaEventRecord (fence)", e);
    }
    *fence = ev;
    return ZERO_OK;
}

/* Waits only for the stream up to the marker, not for work queued after it
 * (a bucket's collective launched later keeps running). */
static zero_status cd_fence_wait(zero__device *d, void *fence) {
    current(d);
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)fence);
    zero_cuda_note_host_wait(CD(d));
    cudaEventDestroy((cudaEvent_t)fence);
    return e == cudaSuccess ? ZERO_OK : cd_fail(d, "cudaEventSynchronize (fence)", e);
}

/* (issue 35) The consumer stream waits for the marker on the GPU; the host
 * goes on.  Destroying a recorded event whose work is still pending is
 * allowed: CUDA releases it once the work completes, and the wait already
 * captured it. */
static zero_status cd_fence_order(zero__device *d, void *fence, void *consumer) {
    current(d);
    cudaStream_t s = consumer ? (cudaStream_t)consumer : (cudaStream_t)zero_cuda_compute_stream(CD(d));
    cudaError_t e = cudaStreamWaitEvent(s, (cudaEvent_t)fence, 0);
    cudaEventDestroy((cudaEvent_t)fence);
    return e == cudaSuccess ? ZERO_OK : cd_fail(d, "cudaStreamWaitEvent (fence)", e);
}

static zero_status cd_optim_step(zero__device *d, zero_optim_kind k, const zero_optim_scalars *s, float *master,
                                 float *const state[4], const void *grad, zero_dtype gdt, float grad_mul, void *out,
                                 zero_dtype odt, size_t n) {
    current(d);
    zero_cuda_mt_tensor t = {master, state[0], state[1], grad, out, (uint64_t)n};
    /* No wait here: a parameter all-gather on a sub-communicator's own NCCL
     * stream (stage 3) first waits for this stream's work (comm_nccl.c,
     * after_stream), so the new weights are ordered without the host. */
    return launched(d, zero_cuda_optim_step(k, s, &t, 1, gdt, odt, grad_mul, NULL, stream_of(d)), "optim_step");
}

static zero_status cd_sumsq(zero__device *d, const void *x, zero_dtype dt, size_t n, double *out) {
    current(d);
    cuda_dev *c = (cuda_dev *)d;
    size_t nb = zero_cuda_sumsq_scratch(n);
    pthread_mutex_lock(&c->red_lock);
    double *scratch = red_scratch(c, nb + 1);
    zero_status s = scratch ? ZERO_OK : ZERO_ERR_OUT_OF_MEMORY;
    if (s == ZERO_OK) s = launched(d, zero_cuda_sumsq(x, dt, n, scratch, scratch + nb, stream_of(d)), "sumsq");
    if (s == ZERO_OK) s = zero_cuda_copy(CD(d), out, scratch + nb, sizeof(double)); /* synchronises */
    pthread_mutex_unlock(&c->red_lock);
    return s;
}

static zero_status cd_nonfinite(zero__device *d, const void *x, zero_dtype dt, size_t n, int *out) {
    current(d);
    cuda_dev *c = (cuda_dev *)d;
    int32_t h = 0;
    pthread_mutex_lock(&c->red_lock);
    int32_t *flag = (int32_t *)red_scratch(c, 1);
    zero_status s = flag ? ZERO_OK : ZERO_ERR_OUT_OF_MEMORY;
    if (s == ZERO_OK) s = launched(d, zero_cuda_nonfinite(x, dt, n, flag, stream_of(d)), "nonfinite");
    if (s == ZERO_OK) s = zero_cuda_copy(CD(d), &h, flag, sizeof h);
    pthread_mutex_unlock(&c->red_lock);
    *out = h != 0;
    return s;
}

/* Every piece's sum and flag queued back to back on the stream, then one
 * copy of all of them to the host (the only wait).  Scratch layout, in
 * doubles: the largest piece's tree scratch (reused: the launches are
 * ordered on one stream), k sums, then k int32 flags packed two per double. */
static zero_status cd_norm_pieces(zero__device *d, const zero__norm_piece *p, size_t k, double *sums, int *flags) {
    current(d);
    cuda_dev *c = (cuda_dev *)d;
    size_t nb = 1;
    for (size_t i = 0; i < k; i++)
        if (zero_cuda_sumsq_scratch(p[i].n) > nb) nb = zero_cuda_sumsq_scratch(p[i].n);
    const size_t tail = k + (k + 1) / 2; /* sums + flags, copied back together */
    double *host = malloc(tail * sizeof *host);
    if (!host) return ZERO_ERR_OUT_OF_MEMORY;
    pthread_mutex_lock(&c->red_lock);
    double *scratch = red_scratch(c, nb + tail);
    zero_status s = scratch ? ZERO_OK : ZERO_ERR_OUT_OF_MEMORY;
    double *dsums = scratch ? scratch + nb : NULL;
    int32_t *dflags = scratch ? (int32_t *)(scratch + nb + k) : NULL;
    for (size_t i = 0; i < k && s == ZERO_OK; i++) {
        s = launched(d, zero_cuda_sumsq(p[i].x, p[i].dt, p[i].n, scratch, dsums + i, stream_of(d)), "sumsq");
        if (s == ZERO_OK)
            s = launched(d, zero_cuda_nonfinite(p[i].x, p[i].dt, p[i].n, dflags + i, stream_of(d)), "nonfinite");
    }
    if (s == ZERO_OK) s = zero_cuda_copy(CD(d), host, dsums, tail * sizeof *host); /* synchronises */
    pthread_mutex_unlock(&c->red_lock);
    if (s == ZERO_OK) {
        const int32_t *hf = (const int32_t *)(host + k);
        for (size_t i = 0; i < k; i++) sums[i] = host[i], flags[i] = hf[i] != 0;
    }
    free(host);
    return s;
}

/* (1.13) Fingerprints, queued on the stream (no host wait). */
static zero_status cd_prints(zero__device *d, const void *const *x, const uint64_t *bytes, const uint32_t *slot,
                             size_t k, int full, uint64_t *out, int add) {
    current(d);
    cuda_dev *c = (cuda_dev *)d;
    pthread_mutex_lock(&c->red_lock);
    if (!c->prints_scratch)
        c->prints_scratch = zero_cuda_alloc(CD(d), ZERO_TIER_DEVICE, zero_cuda_prints_scratch() * sizeof(uint64_t));
    zero_status s = c->prints_scratch ? ZERO_OK : ZERO_ERR_OUT_OF_MEMORY;
    if (s == ZERO_OK)
        s = launched(d, zero_cuda_prints(x, bytes, slot, k, full, c->prints_scratch, out, add, stream_of(d)), "prints");
    pthread_mutex_unlock(&c->red_lock);
    return s;
}

static zero_status cd_convert(zero__device *d, void *dst, zero_dtype ddt, const void *src, zero_dtype sdt, size_t n) {
    current(d);
    return launched(d, zero_cuda_convert(dst, ddt, src, sdt, n, stream_of(d)), "convert");
}

static zero_status cd_add_into(zero__device *d, void *dst, zero_dtype ddt, const void *src, zero_dtype sdt,
                               size_t n) {
    current(d);
    if (ddt == ZERO_DTYPE_F32) return launched(d, zero_cuda_add_into(dst, src, sdt, n, stream_of(d)), "add_into");
    return launched(d, zero_cuda_add_into_dt(dst, ddt, src, sdt, n, stream_of(d)), "add_into");
}

static zero_status cd_scale(zero__device *d, float *x, float a, size_t n) {
    current(d);
    return launched(d, zero_cuda_scale(x, a, n, stream_of(d)), "scale");
}

/* Block quantization (issue 33): the kernels of zero_cuda_quant_bodies.h. */
static zero_status cd_quantize(zero__device *d, void *q, const void *src, zero_dtype dt, size_t n, int bits,
                               size_t block) {
    current(d);
    return launched(d, zero_cuda_quantize(q, src, dt, n, bits, block, stream_of(d)), "quantize");
}
static zero_status cd_dequantize(zero__device *d, void *dst, zero_dtype dt, const void *q, size_t n, int bits,
                                 size_t block) {
    current(d);
    return launched(d, zero_cuda_dequantize(dst, dt, q, n, bits, block, stream_of(d)), "dequantize");
}
static zero_status cd_dequantize_add(zero__device *d, float *acc, const void *q, size_t n, int bits, size_t block) {
    current(d);
    return launched(d, zero_cuda_dequantize_add(acc, q, n, bits, block, stream_of(d)), "dequantize_add");
}
static zero_status cd_quant_residual(zero__device *d, float *ef, const float *x, const void *q, size_t n, int bits,
                                     size_t block) {
    current(d);
    return launched(d, zero_cuda_quant_residual(ef, x, q, n, bits, block, stream_of(d)), "quant_residual");
}

static zero_status cd_order_after(zero__device *d, void *producer) { return zero_cuda_order_after(CD(d), producer); }
static zero_status cd_order_before(zero__device *d, void *consumer) { return zero_cuda_order_before(CD(d), consumer); }
static zero_status cd_sync(zero__device *d) { return zero_cuda_comm_sync(CD(d)); }

static const char *cd_error(zero__device *d) {
    const char *own = ((cuda_dev *)d)->err;
    return own[0] ? own : zero_cuda_device_error(CD(d));
}

static void cd_close(zero__device *d) {
    zero_cuda_device_close(CD(d)); /* frees every region, the reduction scratch's too */
    pthread_mutex_destroy(&((cuda_dev *)d)->red_lock);
    free(d);
}

static int cd_free_bytes(zero__device *d, uint64_t *out) {
    size_t fr = 0, total = 0;
    current(d);
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess) return -1;
    *out = (uint64_t)fr;
    return 0;
}

static const zero__device_ops cuda_ops = {
    .name = "cuda",
    .alloc = cd_alloc,
    .free = cd_free,
    .is_device = cd_is_device,
    .copy = cd_copy,
    .memset = cd_memset,
    .memset_async = cd_memset_async,
    .fence = cd_fence,
    .fence_wait = cd_fence_wait,
    .optim_step = cd_optim_step,
    .sumsq = cd_sumsq,
    .nonfinite = cd_nonfinite,
    .norm_pieces = cd_norm_pieces,
    .prints = cd_prints,
    .convert = cd_convert,
    .add_into = cd_add_into,
    .scale = cd_scale,
    .order_after = cd_order_after,
    .order_before = cd_order_before,
    .sync = cd_sync,
    .stream = stream_of,
    .error = cd_error,
    .close = cd_close,
    .free_bytes = cd_free_bytes,
    .fill_wait = cd_fill_wait,
    .alloc_nofill = cd_alloc_nofill,
    .fence_order = cd_fence_order,
    .host_waits = cd_host_waits,
    .quantize = cd_quantize,
    .dequantize = cd_dequantize,
    .dequantize_add = cd_dequantize_add,
    .quant_residual = cd_quant_residual,
};

zero_status zero__device_cuda_open(int ordinal, void *compute_stream, zero__device **out, char *err, size_t err_len) {
    *out = NULL;
    zero_cuda_device_options o = ZERO_CUDA_DEVICE_OPTIONS_INIT;
    o.ordinal = ordinal;
    o.compute_stream = compute_stream;
    cuda_dev *d = calloc(1, sizeof *d);
    if (!d) {
        if (err && err_len) snprintf(err, err_len, "out of host memory");
        return ZERO_ERR_OUT_OF_MEMORY;
    }
    zero_status s = zero_cuda_device_open(&o, &d->cd, err, err_len);
    if (s != ZERO_OK) {
        free(d);
        return s;
    }
    pthread_mutex_init(&d->red_lock, NULL);
    d->base.ops = &cuda_ops;
    d->base.ordinal = zero_cuda_device_ordinal(d->cd); /* resolved when ordinal was ZERO_DEVICE_INDEX_AUTO */
    *out = &d->base;
    return ZERO_OK;
}
