/* CPU launch shim: compiles CUDA kernel bodies (kernels/cuda/
 * zero_cuda_kernel_bodies.h) as plain C11 host functions and runs a grid as
 * nested loops, so CPU-only CI executes the very kernel text the GPU runs.
 *
 * What it models: __global__/__device__/__host__ qualifiers, the built-in
 * index variables (x dimension; y and z are 1) and a launch.  Threads run
 * one after another in (block, thread) order; that is a valid CUDA schedule
 * for kernels whose threads do not communicate.  Block-cooperative kernels
 * (shared memory, barriers) are modelled only in the phase form of the
 * bodies header (ZERO_CUDA_SHARED / ZERO_CUDA_PHASE / ZERO_CUDA_BARRIER):
 * ZERO_SHIM_LAUNCH_BLOCKS calls such a kernel once per block and each phase
 * loops over the block's threads, so a barrier is the end of a phase.  Warp
 * intrinsics and atomics are not modelled.
 *
 * Include this first, then the kernel bodies.  One translation unit per test
 * program (the index variables are file-static).  Not thread-safe. */
#ifndef ZERO_CUDA_SHIM_H
#define ZERO_CUDA_SHIM_H
#if defined(__CUDACC__)
#error "cuda_shim.h is for host compilers only"
#endif

#define ZERO_CUDA_SHIM 1
#define __global__ static
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ restrict

typedef struct zero_shim_dim3 {
    unsigned int x, y, z;
} zero_shim_dim3;

/* The built-in variables a kernel body reads. */
static zero_shim_dim3 threadIdx __attribute__((unused));
static zero_shim_dim3 blockIdx __attribute__((unused));
static zero_shim_dim3 blockDim __attribute__((unused));
static zero_shim_dim3 gridDim __attribute__((unused));

/* Statistics of the last launches, for tests that check the geometry. */
static unsigned long long zero_shim_launches __attribute__((unused));
static unsigned long long zero_shim_threads_run __attribute__((unused));

/* The runtime calls the launchers make, as host stand-ins. */
#include <stddef.h>
#include <string.h>
typedef void *cudaStream_t;
typedef int cudaError_t;
#define cudaSuccess 0
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    (void)s;
    memset(p, v, n);
    return cudaSuccess;
}

/* kernel<<<grid, block>>>(args...) as loops. */
#define ZERO_SHIM_LAUNCH(kernel, grid, block, ...)                                       \
    do {                                                                                 \
        gridDim.x = (unsigned)(grid), gridDim.y = gridDim.z = 1;                         \
        blockDim.x = (unsigned)(block), blockDim.y = blockDim.z = 1;                     \
        blockIdx.y = blockIdx.z = threadIdx.y = threadIdx.z = 0;                         \
        ++zero_shim_launches;                                                            \
        for (unsigned zero_shim_b = 0; zero_shim_b < gridDim.x; ++zero_shim_b)           \
            for (unsigned zero_shim_t = 0; zero_shim_t < blockDim.x; ++zero_shim_t) {    \
                blockIdx.x = zero_shim_b;                                                \
                threadIdx.x = zero_shim_t;                                               \
                ++zero_shim_threads_run;                                                 \
                kernel(__VA_ARGS__);                                                     \
            }                                                                            \
    } while (0)

/* A block-cooperative kernel (phase form): called once per block; its
 * ZERO_CUDA_PHASE loops set threadIdx.x themselves. */
#define ZERO_SHIM_LAUNCH_BLOCKS(kernel, grid, block, ...)                                \
    do {                                                                                 \
        gridDim.x = (unsigned)(grid), gridDim.y = gridDim.z = 1;                         \
        blockDim.x = (unsigned)(block), blockDim.y = blockDim.z = 1;                     \
        blockIdx.y = blockIdx.z = threadIdx.y = threadIdx.z = 0;                         \
        ++zero_shim_launches;                                                            \
        for (unsigned zero_shim_b = 0; zero_shim_b < gridDim.x; ++zero_shim_b) {         \
            blockIdx.x = zero_shim_b;                                                    \
            zero_shim_threads_run += blockDim.x;                                         \
            kernel(__VA_ARGS__);                                                         \
        }                                                                                \
    } while (0)
#define ZERO_SHIM_PHASE for (threadIdx.x = 0; threadIdx.x < blockDim.x; ++threadIdx.x)
#endif
