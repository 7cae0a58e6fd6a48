/* Host launchers of the quantization kernels (zero_cuda_quant_bodies.h;
 * API and contracts in zero_cuda_kernels.h).  Compiled two ways like
 * zero_cuda_launchers.h: in kernels.cu with real launches, and under the
 * CPU shim (tests/cuda_shim/test_shim_quant.c).  Thread-safe (no state). */
#ifndef ZERO_CUDA_QUANT_LAUNCHERS_H
#define ZERO_CUDA_QUANT_LAUNCHERS_H
#include "zero_cuda_launchers.h"
#include "zero_cuda_quant_bodies.h"

static int zero_cuda_quant_args_ok(zero_dtype dt, int bits, uint64_t block) {
    return (dt == ZERO_DTYPE_F32 || dt == ZERO_DTYPE_BF16 || dt == ZERO_DTYPE_F16) && (bits == 8 || bits == 4) &&
           block >= 1;
}

ZERO_CUDA_API zero_status zero_cuda_quantize(void *dst, const void *src, zero_dtype dt, uint64_t n, int bits,
                                             uint64_t block, void *stream) {
    if (!zero_cuda_quant_args_ok(dt, bits, block)) return ZERO_ERR_INVALID_ARGUMENT;
    if (n)
        ZERO_CUDA_LAUNCH_BLOCKS(zero_cuda_k_quantize, zero_cuda_quant_grid(n, bits, block), ZERO_CUDA_QUANT_THREADS,
                                stream, (uint8_t *)dst, src, (int32_t)dt, n, (int32_t)bits, block);
    return zero_cuda_launched();
}

ZERO_CUDA_API zero_status zero_cuda_dequantize(void *dst, zero_dtype dt, const void *src, uint64_t n, int bits,
                                               uint64_t block, void *stream) {
    if (!zero_cuda_quant_args_ok(dt, bits, block)) return ZERO_ERR_INVALID_ARGUMENT;
    if (n)
        ZERO_CUDA_LAUNCH(zero_cuda_k_dequantize, zero_cuda_grid_for(n), ZERO_CUDA_THREADS, stream, dst, (int32_t)dt,
                         (const uint8_t *)src, n, (int32_t)bits, block);
    return zero_cuda_launched();
}

ZERO_CUDA_API zero_status zero_cuda_dequantize_add(float *acc, const void *src, uint64_t n, int bits, uint64_t block,
                                                   void *stream) {
    if (!zero_cuda_quant_args_ok(ZERO_DTYPE_F32, bits, block)) return ZERO_ERR_INVALID_ARGUMENT;
    if (n)
        ZERO_CUDA_LAUNCH(zero_cuda_k_dequantize_add, zero_cuda_grid_for(n), ZERO_CUDA_THREADS, stream, acc,
                         (const uint8_t *)src, n, (int32_t)bits, block);
    return zero_cuda_launched();
}

ZERO_CUDA_API zero_status zero_cuda_quant_residual(float *ef, const float *x, const void *src, uint64_t n, int bits,
                                                   uint64_t block, void *stream) {
    if (!zero_cuda_quant_args_ok(ZERO_DTYPE_F32, bits, block)) return ZERO_ERR_INVALID_ARGUMENT;
    if (n)
        ZERO_CUDA_LAUNCH(zero_cuda_k_quant_residual, zero_cuda_grid_for(n), ZERO_CUDA_THREADS, stream, ef, x,
                         (const uint8_t *)src, n, (int32_t)bits, block);
    return zero_cuda_launched();
}
#endif
