/* Bodies of the block-quantization kernels (ZeRO++'s qwZ / qgZ on device
 * memory), in the same two-way C11 / CUDA C++ subset as
 * zero_cuda_kernel_bodies.h, whose rules they follow (the quantize kernel
 * is block-cooperative, in phase form).  The per-block math is
 * kernels/cpu/quant_math.h, the header core/quant.c's host path runs, so a
 * quantization on the GPU writes the bytes the CPU writes (scales and data;
 * the padding to 4 bytes is not written by either), and a dequantization
 * gives the same values.  tests/cuda_shim/test_shim_quant.c runs these very
 * bodies on the CPU against the host path; tests/gpu/test_gpu_quant.c runs
 * them on a GPU.
 *
 * Thread-safety: pure kernels; each output byte/element has one writer. */
#ifndef ZERO_CUDA_QUANT_BODIES_H
#define ZERO_CUDA_QUANT_BODIES_H
#include "quant_math.h"
#include "zero_cuda_kernel_bodies.h"

/* Threads of the quantize kernel (one CUDA block per group of quant blocks). */
#define ZERO_CUDA_QUANT_THREADS 256
/* Quant blocks per group: 2 when an int4 byte can straddle two blocks (odd
 * block size), so that every data byte belongs to exactly one group. */
#define ZERO_CUDA_QUANT_MAX_GROUP 2
#define ZERO_CUDA_QUANT_MAX_GRID 65535

ZERO_HD uint64_t zero_cuda_quant_group(int bits, uint64_t block) { return bits == 4 && block % 2 ? 2 : 1; }

/* dst (zero_quant_total_bytes(n) bytes: nb fp32 scales, then the data) =
 * the quantization of src[0..n) (dt F32/BF16/F16).  Group g = quant blocks
 * [G g, G g + G): phase 1, each thread's max|x| and finiteness over a
 * stride of each block; phase 2, thread j < G folds block j's partials
 * (a max: any order gives the same value) and writes its scale; phase 3,
 * every data byte of the group is written whole (int4: both nibbles),
 * codes 0 for a non-finite block, as the host path's memset + skip.
 * Launch: ZERO_CUDA_LAUNCH_BLOCKS, ZERO_CUDA_QUANT_THREADS threads. */
ZERO_CUDA_GLOBAL void zero_cuda_k_quantize(uint8_t *dst, const void *ZERO_RESTRICT src, int32_t dt, uint64_t n,
                                           int32_t bits, uint64_t block) {
    ZERO_CUDA_SHARED(float, pmax, ZERO_CUDA_QUANT_MAX_GROUP * ZERO_CUDA_QUANT_THREADS);
    ZERO_CUDA_SHARED(int32_t, pfin, ZERO_CUDA_QUANT_MAX_GROUP * ZERO_CUDA_QUANT_THREADS);
    ZERO_CUDA_SHARED(float, sinv, ZERO_CUDA_QUANT_MAX_GROUP);
    ZERO_CUDA_SHARED(int32_t, sfin, ZERO_CUDA_QUANT_MAX_GROUP);
    const uint64_t nb = (uint64_t)zero_quant_nblocks((size_t)n, (size_t)block);
    const uint64_t G = zero_cuda_quant_group(bits, block);
    const uint64_t groups = (nb + G - 1) / G;
    float *scales = (float *)dst;
    uint8_t *data = dst + nb * sizeof(float);
    for (uint64_t g = blockIdx.x; g < groups; g += gridDim.x) {
        const uint64_t b0 = g * G;
        const uint64_t lo = b0 * block;
        const uint64_t hi = n - lo < G * block ? n : lo + G * block;
        ZERO_CUDA_PHASE {
            for (uint64_t j = 0; j < G; ++j) {
                const uint64_t jlo = lo + j * block, jhi = jlo + block < hi ? jlo + block : hi;
                float m = 0.0f;
                int fin = 1;
                for (uint64_t e = jlo + threadIdx.x; e < jhi; e += blockDim.x)
                    m = zero_quant_max_step(m, zero_cuda_ld(src, dt, e), &fin);
                pmax[j * ZERO_CUDA_QUANT_THREADS + threadIdx.x] = m;
                pfin[j * ZERO_CUDA_QUANT_THREADS + threadIdx.x] = fin;
            }
        }
        ZERO_CUDA_BARRIER;
        ZERO_CUDA_PHASE {
            if (threadIdx.x < G && b0 + threadIdx.x < nb) {
                const uint64_t j = threadIdx.x;
                float m = 0.0f;
                int fin = 1;
                for (unsigned t = 0; t < blockDim.x; ++t) {
                    const float v = pmax[j * ZERO_CUDA_QUANT_THREADS + t];
                    m = v > m ? v : m;
                    fin &= pfin[j * ZERO_CUDA_QUANT_THREADS + t];
                }
                scales[b0 + j] = zero_quant_scale(m, fin, bits);
                sinv[j] = zero_quant_inv(m, fin, bits);
                sfin[j] = fin;
            }
        }
        ZERO_CUDA_BARRIER;
        ZERO_CUDA_PHASE {
            if (bits == 8) {
                for (uint64_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
                    const uint64_t j = (e - lo) / block;
                    const int q = sfin[j] ? zero_quant_code(zero_cuda_ld(src, dt, e), sinv[j], 8) : 0;
                    data[e] = (uint8_t)(int8_t)q;
                }
            } else { /* lo is even (G * block is), so the group's bytes are [lo/2, ceil(hi/2)) */
                for (uint64_t k = lo / 2 + threadIdx.x; k < (hi + 1) / 2; k += blockDim.x) {
                    uint8_t byte = 0;
                    for (uint64_t h = 0; h < 2; ++h) {
                        const uint64_t e = 2 * k + h;
                        if (e >= hi) break;
                        const uint64_t j = (e - lo) / block;
                        const int q = sfin[j] ? zero_quant_code(zero_cuda_ld(src, dt, e), sinv[j], 4) : 0;
                        byte = (uint8_t)(byte | (h ? zero_quant_nibble(q) << 4 : zero_quant_nibble(q)));
                    }
                    data[k] = byte;
                }
            }
        }
        ZERO_CUDA_BARRIER; /* the shared partials are reused by the next group */
    }
}

/* dst[i] (dt) = the dequantized value i (fp32, then RNE to a 16-bit dt). */
ZERO_CUDA_GLOBAL void zero_cuda_k_dequantize(void *dst, int32_t dt, const uint8_t *src, uint64_t n, int32_t bits,
                                             uint64_t block) {
    const uint64_t nb = (uint64_t)zero_quant_nblocks((size_t)n, (size_t)block);
    const float *scales = (const float *)src;
    const uint8_t *data = src + nb * sizeof(float);
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        zero_cuda_st(dst, dt, i, zero_quant_value_at(scales, data, (size_t)i, bits, (size_t)block));
}

/* acc[i] = acc[i] + dequantized value i (fp32), as zero__dequantize_add. */
ZERO_CUDA_GLOBAL void zero_cuda_k_dequantize_add(float *acc, const uint8_t *src, uint64_t n, int32_t bits,
                                                 uint64_t block) {
    const uint64_t nb = (uint64_t)zero_quant_nblocks((size_t)n, (size_t)block);
    const float *scales = (const float *)src;
    const uint8_t *data = src + nb * sizeof(float);
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        acc[i] = zero_quant_add(acc[i], zero_quant_value_at(scales, data, (size_t)i, bits, (size_t)block));
}

/* Error feedback's residual: ef[i] = x[i] - dequantized value i (fp32), as
 * core/quant.c's host loop (x = the value that was quantized). */
ZERO_CUDA_GLOBAL void zero_cuda_k_quant_residual(float *ef, const float *x, const uint8_t *src, uint64_t n,
                                                 int32_t bits, uint64_t block) {
    const uint64_t nb = (uint64_t)zero_quant_nblocks((size_t)n, (size_t)block);
    const float *scales = (const float *)src;
    const uint8_t *data = src + nb * sizeof(float);
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        ef[i] = zero_quant_sub(x[i], zero_quant_value_at(scales, data, (size_t)i, bits, (size_t)block));
}

/* Grid of the quantize kernel: one CUDA block per group, capped (the
 * kernel strides over groups). */
static inline unsigned zero_cuda_quant_grid(uint64_t n, int bits, uint64_t block) {
    const uint64_t nb = (n + block - 1) / block, G = zero_cuda_quant_group(bits, block);
    uint64_t g = (nb + G - 1) / G;
    if (g == 0) g = 1;
    return (unsigned)(g > ZERO_CUDA_QUANT_MAX_GRID ? ZERO_CUDA_QUANT_MAX_GRID : g);
}
#endif
