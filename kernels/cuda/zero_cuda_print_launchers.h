/* (1.13) Host launcher of the fingerprint kernels (zero_cuda_print_bodies.h;
 * API and contract in zero_cuda_kernels.h).  Compiled two ways like
 * zero_cuda_launchers.h: in kernels.cu with real launches, and under the
 * CPU shim (tests/cuda_shim/test_shim_print.c).  Thread-safe (no state). */
#ifndef ZERO_CUDA_PRINT_LAUNCHERS_H
#define ZERO_CUDA_PRINT_LAUNCHERS_H
#include "zero_cuda_launchers.h"
#include "zero_cuda_print_bodies.h"

/* uint64 words of device scratch zero_cuda_prints needs (any k). */
ZERO_CUDA_API size_t zero_cuda_prints_scratch(void) {
    return (size_t)ZERO_CUDA_PRINT_PIECES * ZERO_CUDA_PRINT_BLOCKS;
}

/* Launches of up to ZERO_CUDA_PRINT_PIECES pieces each, back to back on
 * the stream (the scratch is reused: stream order keeps them apart). */
ZERO_CUDA_API zero_status zero_cuda_prints(const void *const *x, const uint64_t *bytes, const uint32_t *slot, size_t k,
                                           int full, uint64_t *scratch, uint64_t *out, int add, void *stream) {
    for (size_t i0 = 0; i0 < k; i0 += ZERO_CUDA_PRINT_PIECES) {
        zero_cuda_print_args a;
        memset(&a, 0, sizeof a);
        a.k = (uint32_t)(k - i0 < ZERO_CUDA_PRINT_PIECES ? k - i0 : ZERO_CUDA_PRINT_PIECES);
        a.step = full ? ZERO_PRINT_LINE : ZERO_PRINT_STRIDE;
        for (uint32_t i = 0; i < a.k; i++) {
            a.x[i] = (const unsigned char *)x[i0 + i];
            a.n[i] = bytes[i0 + i];
            a.slot[i] = slot ? slot[i0 + i] : (uint32_t)(i0 + i);
        }
        ZERO_CUDA_LAUNCH_BLOCKS(zero_cuda_k_print_lines, a.k * ZERO_CUDA_PRINT_BLOCKS, ZERO_CUDA_PRINT_THREADS,
                                stream, a, scratch);
        ZERO_CUDA_LAUNCH(zero_cuda_k_print_fold, 1, ZERO_CUDA_PRINT_PIECES, stream, a, scratch, out, (int32_t)add);
        if (zero_cuda_launched() != ZERO_OK) return ZERO_ERR_DEVICE;
    }
    return ZERO_OK;
}

#endif
