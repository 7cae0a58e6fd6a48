/* Types shared by the CUDA kernel launchers' API (zero_cuda_kernels.h) and
 * the kernel bodies (zero_cuda_kernel_bodies.h).  Plain data, no ownership. */
#ifndef ZERO_CUDA_TYPES_H
#define ZERO_CUDA_TYPES_H
#include <stdint.h>

/* One tensor (or partition range) of a multi-tensor optimizer step.  All
 * pointers are device memory; the arrays must not overlap, except that out
 * may equal master when out_dt is F32 (as for the CPU kernel). */
typedef struct zero_cuda_mt_tensor {
    float *master;      /* fp32 weights, updated in place */
    float *state0;      /* first optimizer state (m / momentum / sum), or NULL */
    float *state1;      /* second (Adam v), or NULL */
    const void *grad;   /* summed gradient in grad_dt */
    void *out;          /* copy-out of the new weights in out_dt, or NULL */
    uint64_t n;
} zero_cuda_mt_tensor;
#endif
