/* Per-element optimizer math, shared verbatim by the CPU kernels and the
 * CUDA kernels (compiled as __host__ __device__ there) so that CPU tests
 * check the arithmetic the GPU runs.  No libc, no globals. */
#ifndef ZERO_OPTIM_MATH_H
#define ZERO_OPTIM_MATH_H

#if defined(__CUDACC__)
#define ZERO_HD __host__ __device__ __forceinline__
#else
#define ZERO_HD static inline
#endif

/* Scalars of one step for one param group, precomputed once per step. */
typedef struct zero_optim_scalars {
    float lr;
    float beta1, beta2, eps;
    float weight_decay;
    float bc1;          /* 1 / (1 - beta1^t), or 1 without bias correction */
    float bc2_sqrt;     /* 1 / sqrt(1 - beta2^t) */
    float momentum;     /* SGD */
    int nesterov;
    int first_step;     /* SGD momentum buffer initialisation (t == 1) */
} zero_optim_scalars;
#endif
