// Launchers of the reduction and elementwise kernels (bodies in
// zero_cuda_kernel_bodies.h).
#include "zero_cuda_kernel_bodies.h"
#include "zero_cuda_kernels.h"

#include <cuda_runtime.h>

static zero_status launched(void) { return cudaGetLastError() == cudaSuccess ? ZERO_OK : ZERO_ERR_DEVICE; }

extern "C" size_t zero_cuda_sumsq_scratch(uint64_t n) {
    uint64_t nb = (n + ZERO_CUDA_SUMSQ_BLOCK - 1) / ZERO_CUDA_SUMSQ_BLOCK;
    return (size_t)(nb ? nb : 1);
}

extern "C" zero_status zero_cuda_sumsq(const void *x, zero_dtype dt, uint64_t n, double *scratch, double *out,
                                       void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    uint64_t nb = (n + ZERO_CUDA_SUMSQ_BLOCK - 1) / ZERO_CUDA_SUMSQ_BLOCK;
    if (nb) {
        unsigned grid = (unsigned)((nb + ZERO_CUDA_THREADS - 1) / ZERO_CUDA_THREADS);
        zero_cuda_k_sumsq_blocks<<<grid, ZERO_CUDA_THREADS, 0, st>>>(x, dt, n, scratch);
    }
    zero_cuda_k_sum_in_order<<<1, 1, 0, st>>>(scratch, nb, out);
    return launched();
}

extern "C" zero_status zero_cuda_nonfinite(const void *x, zero_dtype dt, uint64_t n, int32_t *flag, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    if (cudaMemsetAsync(flag, 0, sizeof *flag, st) != cudaSuccess) return launched();
    if (n) zero_cuda_k_nonfinite<<<zero_cuda_grid_for(n), ZERO_CUDA_THREADS, 0, st>>>(x, dt, n, flag);
    return launched();
}

extern "C" zero_status zero_cuda_convert(void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt,
                                         uint64_t n, void *stream) {
    if (n)
        zero_cuda_k_convert<<<zero_cuda_grid_for(n), ZERO_CUDA_THREADS, 0, (cudaStream_t)stream>>>(dst, dst_dt, src,
                                                                                                   src_dt, n);
    return launched();
}

extern "C" zero_status zero_cuda_add_into(float *dst, const void *src, zero_dtype src_dt, uint64_t n, void *stream) {
    if (n) zero_cuda_k_add_into<<<zero_cuda_grid_for(n), ZERO_CUDA_THREADS, 0, (cudaStream_t)stream>>>(dst, src, src_dt, n);
    return launched();
}

extern "C" zero_status zero_cuda_clip_mul(const double *sumsq, double inv, double clip, float *grad_mul,
                                          double *norm_out, void *stream) {
    zero_cuda_k_clip_mul<<<1, 1, 0, (cudaStream_t)stream>>>(sumsq, inv, clip, grad_mul, norm_out);
    return launched();
}
