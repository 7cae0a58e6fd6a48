/* Shared helpers of the GPU tests (ctest label `gpu`).  Every GPU test
 * starts with gpu_count_or_skip(): without a usable GPU it prints why and
 * the program exits with GPU_SKIP (77), which CMake's SKIP_RETURN_CODE turns
 * into "Skipped" in the ctest summary. */
#ifndef ZERO_TESTS_GPU_COMMON_H
#define ZERO_TESTS_GPU_COMMON_H
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_cuda.h"
#include "check.h"

#define GPU_SKIP 77

/* Number of GPUs, or 0 after printing the reason (the caller returns GPU_SKIP). */
static inline int gpu_count_or_skip(const char *test) {
    char why[256] = "";
    int n = zero_cuda_device_count(why, sizeof why);
    if (n == 0) printf("SKIPPED %s: no usable GPU (%s)\n", test, why);
    return n;
}

/* Abort the test (not the library) on a CUDA failure in test scaffolding. */
#define CUDA_OK(call)                                                                            \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static inline void *gpu_upload(const void *host, size_t bytes) {
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes) CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    /* A pageable host-to-device cudaMemcpy may return before its DMA lands,
     * and it is ordered only with the legacy default stream: libzero's and
     * NCCL's non-blocking streams could read the old bytes.  Seen on the first
     * H200 run (test_gpu_stage_equivalence, 3k-21k wrong params). */
    CUDA_OK(cudaDeviceSynchronize());
    return d;
}

static inline void gpu_download(void *host, const void *dev, size_t bytes) {
    CUDA_OK(cudaDeviceSynchronize());
    if (bytes) CUDA_OK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

static uint64_t gpu_rng_state = 0x2545f4914f6cdd1dull;
static inline uint32_t gpu_rnd(void) {
    gpu_rng_state ^= gpu_rng_state << 13;
    gpu_rng_state ^= gpu_rng_state >> 7;
    gpu_rng_state ^= gpu_rng_state << 17;
    return (uint32_t)(gpu_rng_state >> 11);
}
static inline float gpu_rndf(float lo, float hi) {
    return lo + (hi - lo) * (float)(gpu_rnd() & 0xffffff) / 16777216.0f;
}
#endif
