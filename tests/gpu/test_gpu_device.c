/* The CUDA device backend on a real GPU: pooled arenas (device and pinned
 * host), zero fill, copies, growth, event ordering between the host's
 * compute stream and libzero's comm stream; (issue 35) an allocation does
 * not wait for its zero-fill, which every later user still sees. */
#include <time.h>

#include "gpu_common.h"
#include "zero_cuda_kernels.h"

int zero_test_hold_stream(void *stream, const int *flag_dev); /* gpu_hold_stream.cu */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* (issue 35) A dirty block freed and allocated again while the comm stream
 * is held by a kernel: zero_cuda_alloc returns at once (no host wait), the
 * fill is queued behind the hold, and the zeros are what the compute
 * stream reads after zero_cuda_order_before and what the legacy stream
 * reads after zero_cuda_fill_wait (the default since 2026-11-28).  With
 * ZERO_CUDA_ALLOC_SYNC=1 every allocation waits for its fill. */
static void check_async_fill(zero_cuda_device *d, cudaStream_t compute, float *pin) {
    const size_t n = (size_t)1 << 20; /* 4 MiB */
    cudaStream_t comm = (cudaStream_t)zero_cuda_comm_stream(d);
    float *dirty = zero_cuda_alloc(d, ZERO_TIER_DEVICE, n * 4);
    CHECK(dirty != NULL, "alloc: %s", zero_cuda_device_error(d));
    if (!dirty) return;
    CUDA_OK(cudaMemsetAsync(dirty, 0xff, n * 4, comm)); /* NaN everywhere */
    CHECK_EQ_INT(zero_cuda_free(d, dirty), ZERO_OK);
    int *flag = NULL, *flag_dev = NULL;
    CUDA_OK(cudaHostAlloc((void **)&flag, sizeof *flag, cudaHostAllocMapped));
    *flag = 0;
    CUDA_OK(cudaHostGetDevicePointer((void **)&flag_dev, flag, 0));
    zero_cuda_device_stats s0, s1, s2;
    zero_cuda_device_stats_get(d, &s0);
    CHECK(zero_test_hold_stream(comm, flag_dev) == 0, "hold kernel launch");
    double t0 = now_s();
    float *blk = zero_cuda_alloc(d, ZERO_TIER_DEVICE, n * 4);
    double dt = now_s() - t0;
    zero_cuda_device_stats_get(d, &s1);
    CHECK(blk != NULL, "alloc behind a held stream: %s", zero_cuda_device_error(d));
    CHECK(cudaStreamQuery(comm) == cudaErrorNotReady, "the comm stream is not held any more: the alloc waited for it");
    (void)cudaGetLastError();
    CHECK(s1.host_waits == s0.host_waits && s1.fills_async == s0.fills_async + 1,
          "alloc counted %llu host waits and %llu async fills (expected 0 and 1)",
          (unsigned long long)(s1.host_waits - s0.host_waits), (unsigned long long)(s1.fills_async - s0.fills_async));
    fprintf(stderr, "gpu_device: allocation behind a held comm stream returned in %.1f us (%s the freed block)\n",
            dt * 1e6, blk == dirty ? "reusing" : "not reusing");
    *(volatile int *)flag = 1; /* release the stream */
    if (blk) {
        /* the compute stream, ordered after the comm stream by an event */
        CHECK_EQ_INT(zero_cuda_order_before(d, NULL), ZERO_OK);
        CUDA_OK(cudaMemcpyAsync(pin, blk, (size_t)1 << 20, cudaMemcpyDeviceToHost, compute));
        CUDA_OK(cudaStreamSynchronize(compute));
        size_t bad = 0;
        for (size_t i = 0; i < ((size_t)1 << 18); i++) bad += pin[i] != 0.0f;
        CHECK(bad == 0, "compute stream after order_before read %zu non-zero values of a fresh block", bad);
        /* any stream after fill_wait: the legacy stream's blocking copy */
        CHECK_EQ_INT(zero_cuda_fill_wait(d), ZERO_OK);
        float tail[1024];
        CUDA_OK(cudaMemcpy(tail, blk + n - 1024, sizeof tail, cudaMemcpyDeviceToHost));
        bad = 0;
        for (int i = 0; i < 1024; i++) bad += tail[i] != 0.0f;
        CHECK(bad == 0, "legacy stream after fill_wait read %zu non-zero values", bad);
        zero_cuda_device_stats_get(d, &s2);
        CHECK_EQ_INT(zero_cuda_fill_wait(d), ZERO_OK); /* nothing pending: no wait */
        zero_cuda_device_stats_get(d, &s1);
        CHECK(s1.host_waits == s2.host_waits, "fill_wait with nothing pending waited");
        CHECK_EQ_INT(zero_cuda_free(d, blk), ZERO_OK);
    }
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaFreeHost(flag));

    /* ZERO_CUDA_ALLOC_SYNC=1: a wait per allocation */
    setenv("ZERO_CUDA_ALLOC_SYNC", "1", 1);
    zero_cuda_device *old = NULL;
    zero_cuda_device_options o = ZERO_CUDA_DEVICE_OPTIONS_INIT;
    o.ordinal = zero_cuda_device_ordinal(d);
    char err[256] = "";
    CHECK_EQ_INT(zero_cuda_device_open(&o, &old, err, sizeof err), ZERO_OK);
    unsetenv("ZERO_CUDA_ALLOC_SYNC");
    if (old) {
        zero_cuda_device_stats_get(old, &s0);
        void *p = zero_cuda_alloc(old, ZERO_TIER_DEVICE, 4096);
        zero_cuda_device_stats_get(old, &s1);
        CHECK(p && s1.host_waits == s0.host_waits + 1 && s1.fills_async == 0,
              "ZERO_CUDA_ALLOC_SYNC=1: %llu host waits, %llu async fills (expected 1 and 0)",
              (unsigned long long)(s1.host_waits - s0.host_waits), (unsigned long long)s1.fills_async);
        zero_cuda_device_close(old);
    }
}

int main(void) {
    int ngpu = gpu_count_or_skip("gpu_device");
    if (ngpu == 0) return GPU_SKIP;

    char err[512] = "";
    zero_cuda_device *d = NULL;
    zero_cuda_device_options o = ZERO_CUDA_DEVICE_OPTIONS_INIT;
    o.ordinal = ngpu; /* one past the last */
    CHECK_EQ_INT(zero_cuda_device_open(&o, &d, err, sizeof err), ZERO_ERR_DEVICE);
    CHECK(d == NULL && strstr(err, "present"), "bad ordinal: %s", err);

    cudaStream_t compute;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaStreamCreate(&compute));
    o.ordinal = 0;
    o.compute_stream = compute;
    o.device_arena_bytes = (size_t)64 << 20;
    o.host_arena_bytes = (size_t)16 << 20;
    o.grow_bytes = (size_t)32 << 20;
    unsetenv("ZERO_CUDA_ALLOC_SYNC"); /* the default, queued fills, is what check_async_fill checks */
    CHECK_EQ_INT(zero_cuda_device_open(&o, &d, err, sizeof err), ZERO_OK);
    if (!d) {
        fprintf(stderr, "open failed: %s\n", err);
        return 1;
    }
    CHECK(zero_cuda_compute_stream(d) == (void *)compute, "compute stream not kept");
    CHECK(zero_cuda_comm_stream(d) != NULL, "no comm stream");

    /* Zero-filled device block; pinned host block. */
    size_t n = (size_t)8 << 20; /* 8M floats = 32 MiB */
    float *dev = zero_cuda_alloc(d, ZERO_TIER_DEVICE, n * 4);
    float *pin = zero_cuda_alloc(d, ZERO_TIER_HOST, 1 << 20);
    CHECK(dev && pin, "alloc failed: %s", zero_cuda_device_error(d));
    struct cudaPointerAttributes at;
    CUDA_OK(cudaPointerGetAttributes(&at, dev));
    CHECK(at.type == cudaMemoryTypeDevice, "device tier is not device memory (type %d)", (int)at.type);
    CUDA_OK(cudaPointerGetAttributes(&at, pin));
    CHECK(at.type == cudaMemoryTypeHost, "host tier is not pinned host memory (type %d)", (int)at.type);
    float probe[4] = {1, 1, 1, 1};
    CHECK_EQ_INT(zero_cuda_copy(d, probe, dev + n - 4, sizeof probe), ZERO_OK);
    CHECK(probe[0] == 0 && probe[3] == 0, "device block not zero-filled");

    /* Growth: more than the up-front region gives a second region. */
    float *big = zero_cuda_alloc(d, ZERO_TIER_DEVICE, (size_t)48 << 20);
    CHECK(big != NULL, "growth failed: %s", zero_cuda_device_error(d));
    zero_cuda_device_stats st;
    zero_cuda_device_stats_get(d, &st);
    CHECK(st.capacity[ZERO_TIER_DEVICE] >= ((size_t)64 << 20) + ((size_t)48 << 20), "capacity %zu", st.capacity[ZERO_TIER_DEVICE]);
    CHECK(zero_cuda_owns(d, big) && zero_cuda_owns(d, pin), "ownership");
    CHECK_EQ_INT(zero_cuda_free(d, big), ZERO_OK);
    int x;
    CHECK_EQ_INT(zero_cuda_free(d, &x), ZERO_ERR_INVALID_ARGUMENT);

    /* Ordering: a long kernel on the compute stream writes `dev`; the comm
     * stream, ordered after it by an event (host not blocked), copies the
     * result out.  Without the ordering the copy would race the kernel. */
    float *src = zero_cuda_alloc(d, ZERO_TIER_DEVICE, n * 4);
    float *h = malloc(n * 4);
    for (size_t i = 0; i < n; ++i) h[i] = (float)(i % 1000);
    CHECK_EQ_INT(zero_cuda_copy(d, src, h, n * 4), ZERO_OK);
    for (int rep = 0; rep < 3; ++rep) {
        CUDA_OK(cudaMemsetAsync(dev, 0, n * 4, compute));
        for (int k = 0; k < 20; ++k) zero_cuda_add_into(dev, src, ZERO_DTYPE_F32, n, compute); /* dev = 20 * src */
        CHECK_EQ_INT(zero_cuda_order_after(d, NULL), ZERO_OK);
        CHECK_EQ_INT(zero_cuda_copy_async(d, pin, dev + n - 256 * 1024, 1 << 20, NULL), ZERO_OK);
        CHECK_EQ_INT(zero_cuda_comm_sync(d), ZERO_OK);
        size_t base = n - 256 * 1024, wrong = 0;
        for (size_t i = 0; i < 256 * 1024; ++i) wrong += pin[i] != 20.0f * (float)((base + i) % 1000);
        CHECK(wrong == 0, "comm stream read %zu stale values: event ordering broken", wrong);
    }
    /* And back: the compute stream waits for the comm stream. */
    CHECK_EQ_INT(zero_cuda_copy_async(d, dev, src, n * 4, NULL), ZERO_OK);
    CHECK_EQ_INT(zero_cuda_order_before(d, NULL), ZERO_OK);
    CUDA_OK(cudaMemcpyAsync(h, dev, n * 4, cudaMemcpyDeviceToHost, compute));
    CUDA_OK(cudaStreamSynchronize(compute));
    CHECK(h[n - 1] == (float)((n - 1) % 1000), "compute stream did not wait for the comm stream");

    check_async_fill(d, compute, pin);

    zero_cuda_device_stats_get(d, &st);
    CHECK(st.used[ZERO_TIER_DEVICE] >= 2 * n * 4, "used %zu", st.used[ZERO_TIER_DEVICE]);
    CHECK(st.peak_used[ZERO_TIER_DEVICE] >= st.used[ZERO_TIER_DEVICE], "peak below used");
    free(h);
    zero_cuda_device_close(d);
    CUDA_OK(cudaStreamDestroy(compute));
    return check_finish();
}
