/* Host launchers of the kernels in zero_cuda_kernel_bodies.h (API and
 * contracts in zero_cuda_kernels.h).  Like the bodies, this text compiles
 * two ways: in the .cu files with real <<<>>> launches, and in the CPU shim
 * tests (tests/cuda_shim), where ZERO_CUDA_LAUNCH runs the grid as loops and
 * the few runtime calls are host stand-ins.  So the shim tests exercise the
 * launch geometry and the multi-tensor planning exactly as shipped.
 * Thread-safe (no state; each call builds its own kernel arguments). */
#ifndef ZERO_CUDA_LAUNCHERS_H
#define ZERO_CUDA_LAUNCHERS_H
#include "zero_cuda_kernel_bodies.h"

#if defined(__CUDACC__)
#define ZERO_CUDA_API extern "C"
#define ZERO_CUDA_LAUNCH(kernel, grid, block, stream, ...) \
    kernel<<<(grid), (block), 0, (cudaStream_t)(stream)>>>(__VA_ARGS__)
/* A block-cooperative kernel (phase form) launches like any other. */
#define ZERO_CUDA_LAUNCH_BLOCKS(kernel, grid, block, stream, ...) ZERO_CUDA_LAUNCH(kernel, grid, block, stream, __VA_ARGS__)
#else
#define ZERO_CUDA_API static __attribute__((unused))
#define ZERO_CUDA_LAUNCH_BLOCKS(kernel, grid, block, stream, ...)   \
    do {                                                           \
        (void)(stream);                                            \
        ZERO_SHIM_LAUNCH_BLOCKS(kernel, grid, block, __VA_ARGS__); \
    } while (0)
#define ZERO_CUDA_LAUNCH(kernel, grid, block, stream, ...) \
    do {                                                   \
        (void)(stream);                                    \
        ZERO_SHIM_LAUNCH(kernel, grid, block, __VA_ARGS__); \
    } while (0)
#endif

static zero_status zero_cuda_launched(void) { return cudaGetLastError() == cudaSuccess ? ZERO_OK : ZERO_ERR_DEVICE; }

static void zero_cuda_launch_optim(const zero_cuda_mt_args *a, unsigned nblocks, void *stream) {
    ZERO_CUDA_LAUNCH(zero_cuda_k_optim, nblocks, ZERO_CUDA_THREADS, stream, *a);
}

ZERO_CUDA_API zero_status zero_cuda_optim_step(zero_optim_kind k, const zero_optim_scalars *s,
                                               const zero_cuda_mt_tensor *ts, size_t nt, zero_dtype grad_dt,
                                               zero_dtype out_dt, float grad_mul, const float *grad_mul_dev,
                                               void *stream) {
    if (k != ZERO_OPTIM_ADAMW && k != ZERO_OPTIM_ADAM && k != ZERO_OPTIM_SGD && k != ZERO_OPTIM_LION &&
        k != ZERO_OPTIM_ADAGRAD)
        return ZERO_ERR_UNSUPPORTED;
    if (!s || (nt && !ts)) return ZERO_ERR_INVALID_ARGUMENT;
    zero_cuda_mt_args a;
    memset(&a, 0, sizeof a);
    a.s = *s;
    a.kind = k;
    a.grad_dt = grad_dt;
    a.out_dt = out_dt;
    a.grad_mul = grad_mul;
    a.grad_mul_dev = grad_mul_dev;
    zero_cuda_mt_plan(&a, ts, nt, zero_cuda_launch_optim, stream);
    return zero_cuda_launched();
}

/* Doubles of scratch for n elements: the first tree level's values (one
 * per group of FANIN blocks) and the finish kernel's second buffer. */
ZERO_CUDA_API size_t zero_cuda_sumsq_scratch(uint64_t n) {
    const uint64_t m = (n + ZERO_CUDA_SUMSQ_BLOCK - 1) / ZERO_CUDA_SUMSQ_BLOCK;
    const uint64_t groups = (m + ZERO_CUDA_SUMSQ_FANIN - 1) / ZERO_CUDA_SUMSQ_FANIN;
    const uint64_t total = groups + (groups + ZERO_CUDA_SUMSQ_FANIN - 1) / ZERO_CUDA_SUMSQ_FANIN;
    return (size_t)(total ? total : 1);
}

/* The fused group kernel (lanes, fold and the tree's first level; one pass
 * over x), then one single-block launch for the remaining levels: two
 * launches for any size, asynchronous on `stream`. */
ZERO_CUDA_API zero_status zero_cuda_sumsq(const void *x, zero_dtype dt, uint64_t n, double *scratch, double *out,
                                          void *stream) {
    const uint64_t m = (n + ZERO_CUDA_SUMSQ_BLOCK - 1) / ZERO_CUDA_SUMSQ_BLOCK;
    if (m == 0) {
        if (cudaMemsetAsync(out, 0, sizeof *out, (cudaStream_t)stream) != cudaSuccess) return ZERO_ERR_DEVICE;
        return zero_cuda_launched();
    }
    const uint64_t groups = (m + ZERO_CUDA_SUMSQ_FANIN - 1) / ZERO_CUDA_SUMSQ_FANIN;
    ZERO_CUDA_LAUNCH_BLOCKS(zero_cuda_k_sumsq_group, (unsigned)groups, ZERO_CUDA_SUMSQ_GROUP_THREADS, stream, x, dt, n,
                            groups == 1 ? out : scratch);
    if (groups > 1)
        ZERO_CUDA_LAUNCH_BLOCKS(zero_cuda_k_sumsq_finish, 1, ZERO_CUDA_THREADS, stream, scratch, scratch + groups,
                                groups, out);
    return zero_cuda_launched();
}

/* The 16-byte-aligned middle with the vector kernel, the ragged ends (and
 * misaligned arrays) element by element. */
ZERO_CUDA_API zero_status zero_cuda_nonfinite(const void *x, zero_dtype dt, uint64_t n, int32_t *flag,
                                              void *stream) {
    if (cudaMemsetAsync(flag, 0, sizeof *flag, (cudaStream_t)stream) != cudaSuccess) return zero_cuda_launched();
    if (!n) return zero_cuda_launched();
    const uint64_t es = dt == ZERO_DTYPE_F32 ? 4 : 2, per16 = 16 / es;
    const uint64_t head = (uint64_t)((16 - (uintptr_t)x % 16) % 16);
    if (head % es == 0 && head / es < n) {
        const uint64_t h = head / es, n16 = (n - h) / per16, tail_lo = h + n16 * per16;
        if (h) ZERO_CUDA_LAUNCH(zero_cuda_k_nonfinite, 1, ZERO_CUDA_THREADS, stream, x, dt, h, flag);
        if (n16) {
            uint64_t g = (n16 + ZERO_CUDA_THREADS - 1) / ZERO_CUDA_THREADS;
            ZERO_CUDA_LAUNCH(zero_cuda_k_nonfinite16, (unsigned)(g > ZERO_CUDA_MAX_GRID ? ZERO_CUDA_MAX_GRID : g),
                             ZERO_CUDA_THREADS, stream, (const zero_cuda_u4 *)((const char *)x + head), dt, n16, flag);
        }
        if (tail_lo < n)
            ZERO_CUDA_LAUNCH(zero_cuda_k_nonfinite, 1, ZERO_CUDA_THREADS, stream, (const char *)x + tail_lo * es, dt,
                             n - tail_lo, flag);
        return zero_cuda_launched();
    }
    ZERO_CUDA_LAUNCH(zero_cuda_k_nonfinite, zero_cuda_grid_for(n), ZERO_CUDA_THREADS, stream, x, dt, n, flag);
    return zero_cuda_launched();
}

ZERO_CUDA_API zero_status zero_cuda_convert(void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt,
                                            uint64_t n, void *stream) {
    if (n) ZERO_CUDA_LAUNCH(zero_cuda_k_convert, zero_cuda_grid_for(n), ZERO_CUDA_THREADS, stream, dst, dst_dt, src, src_dt, n);
    return zero_cuda_launched();
}

ZERO_CUDA_API zero_status zero_cuda_add_into(float *dst, const void *src, zero_dtype src_dt, uint64_t n,
                                             void *stream) {
    if (n) ZERO_CUDA_LAUNCH(zero_cuda_k_add_into, zero_cuda_grid_for(n), ZERO_CUDA_THREADS, stream, dst, src, src_dt, n);
    return zero_cuda_launched();
}

ZERO_CUDA_API zero_status zero_cuda_add_into_dt(void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt,
                                                uint64_t n, void *stream) {
    if (n)
        ZERO_CUDA_LAUNCH(zero_cuda_k_add_into_dt, zero_cuda_grid_for(n), ZERO_CUDA_THREADS, stream, dst, dst_dt, src,
                         src_dt, n);
    return zero_cuda_launched();
}

ZERO_CUDA_API zero_status zero_cuda_scale(float *x, float a, uint64_t n, void *stream) {
    if (n) ZERO_CUDA_LAUNCH(zero_cuda_k_scale, zero_cuda_grid_for(n), ZERO_CUDA_THREADS, stream, x, a, n);
    return zero_cuda_launched();
}

ZERO_CUDA_API zero_status zero_cuda_clip_mul(const double *sumsq, double inv, double clip, float *grad_mul,
                                             double *norm_out, void *stream) {
    ZERO_CUDA_LAUNCH(zero_cuda_k_clip_mul, 1, 1, stream, sumsq, inv, clip, grad_mul, norm_out);
    return zero_cuda_launched();
}
#endif
