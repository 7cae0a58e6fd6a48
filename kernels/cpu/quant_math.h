/* Block quantization math of ZeRO++'s qwZ / qgZ (core/quant.h has the wire
 * format), shared verbatim by the CPU path (core/quant.c) and the CUDA
 * kernels (kernels/cuda/zero_cuda_quant_bodies.h, compiled __host__
 * __device__ there), so a device quantization gives the bytes of the host
 * one and the CPU tests check the arithmetic the GPU runs.
 *
 * Exactness contract (as optim_math.h's): every value below is one IEEE
 * single-precision operation written out -- max|x| (order-free: a max of
 * non-NaN values does not depend on the order it is taken in), one division
 * for the scale and one for its inverse, one product x * inv, rintf
 * (round to nearest even, the default mode on the host; cvt.rni on the
 * GPU), one product q * scale, and in the users' loops one sum or
 * difference (zero_quant_add, zero_quant_sub).  No FMA can form (no a*b+c anywhere), and
 * nvcc's default IEEE division is kept (no --use_fast_math; cmake/
 * ZeroCuda.cmake also passes --fmad=false).  Non-finite inputs are judged
 * on the bits, so no libm classification enters.  A NaN result is given one
 * bit pattern (zero_quant_canon): hardware disagrees on NaN payloads.
 *
 * Thread-safety: pure functions of their arguments. */
#ifndef ZERO_QUANT_MATH_H
#define ZERO_QUANT_MATH_H
#include <stddef.h>
#include <stdint.h>

#include "optim_math.h" /* ZERO_HD, zero_f32_bits, the dtype conversions */

/* The largest code: 127 for int8, 7 for int4 (symmetric: -qmax..qmax). */
ZERO_HD float zero_quant_qmax(int bits) { return bits == 8 ? 127.0f : 7.0f; }

/* Number of blocks (and so of fp32 scales) of a run of n. */
ZERO_HD size_t zero_quant_nblocks(size_t n, size_t block) { return (n + block - 1) / block; }

/* Bytes of the data part of a run of n: int8 one per element, int4 two per
 * byte (low nibble first). */
ZERO_HD size_t zero_quant_data_bytes(size_t n, int bits) { return bits == 8 ? n : (n + 1) / 2; }

/* Bytes of the quantized form: scales, data, padded to a multiple of 4. */
ZERO_HD size_t zero_quant_total_bytes(size_t n, int bits, size_t block) {
    const size_t b = zero_quant_nblocks(n, block) * sizeof(float) + zero_quant_data_bytes(n, bits);
    return (b + 3) & ~(size_t)3;
}

/* Is x Inf or NaN (exponent all ones)? */
ZERO_HD int zero_quant_nonfinite(float x) { return (zero_f32_bits(x) & 0x7f800000u) == 0x7f800000u; }

/* |x| of a finite x (clears the sign bit: the bits fabsf gives). */
ZERO_HD float zero_quant_abs(float x) { return zero_bits_f32(zero_f32_bits(x) & 0x7fffffffu); }

/* One step of the block's max|x| (from 0.0f): the running max of |x| over
 * finite x; *finite drops to 0 at the first Inf/NaN. */
ZERO_HD float zero_quant_max_step(float maxabs, float x, int *finite) {
    if (zero_quant_nonfinite(x)) {
        *finite = 0;
        return maxabs;
    }
    const float a = zero_quant_abs(x);
    return a > maxabs ? a : maxabs;
}

/* A block's scale from its max|x|: max / qmax, or NaN for a block holding
 * an Inf or NaN (every value of it dequantizes to NaN). */
ZERO_HD float zero_quant_scale(float maxabs, int finite, int bits) {
    return finite ? maxabs / zero_quant_qmax(bits) : zero_bits_f32(0x7fc00000u);
}

/* The multiplier of the values: qmax / max, 0 for an all-zero or
 * non-finite block (whose codes are all 0). */
ZERO_HD float zero_quant_inv(float maxabs, int finite, int bits) {
    return finite && maxabs > 0.0f ? zero_quant_qmax(bits) / maxabs : 0.0f;
}

/* The code of x: rint(x * inv), clamped to [-qmax, qmax].  x * inv can only
 * leave the range when inv overflowed to Inf (max|x| < qmax / FLT_MAX, about
 * 3.7e-37): 0 * Inf (NaN) is code 0 and +-Inf clamps to +-qmax, so the
 * result never depends on how a platform converts an out-of-range float
 * (x86's lrintf gave LONG_MIN there, i.e. -qmax, even for 0 and +max). */
ZERO_HD int zero_quant_code(float x, float inv, int bits) {
    const float qmax = zero_quant_qmax(bits);
    const float r = rintf(x * inv);
    if (r > qmax) return (int)qmax;
    if (r < -qmax) return -(int)qmax;
    if (r != r) return 0;
    return (int)r; /* exact: an integer-valued float in [-127, 127] */
}

/* The low 4 bits of a code (int4's two's complement nibble). */
ZERO_HD uint8_t zero_quant_nibble(int q) { return (uint8_t)((unsigned)q & 0xFu); }

/* The code of element i from the data part. */
ZERO_HD int zero_quant_code_at(const uint8_t *data, size_t i, int bits) {
    if (bits == 8) return (int)(int8_t)data[i];
    const int nib = (data[i / 2] >> (i % 2 ? 4 : 0)) & 0xF;
    return nib >= 8 ? nib - 16 : nib;
}

/* Every NaN this math returns is 0x7fc00000 (positive quiet NaN, no
 * payload), whatever the hardware makes of NaN arithmetic: x86 propagates
 * an operand's payload and sign (and makes 0xffc00000 of Inf - Inf), NVIDIA
 * GPUs return 0x7fffffff for any NaN result.  Without it a block holding an
 * Inf or NaN dequantized to other bits on the device than on the host (an
 * H200, 2026-11-28: gpu_quant); with it the bytes agree, and NaN stays NaN. */
ZERO_HD float zero_quant_canon(float r) { return r != r ? zero_bits_f32(0x7fc00000u) : r; }

/* The dequantized value of element i: code * scale of its block (NaN for a
 * block that held an Inf or NaN). */
ZERO_HD float zero_quant_value_at(const float *scales, const uint8_t *data, size_t i, int bits, size_t block) {
    return zero_quant_canon((float)zero_quant_code_at(data, i, bits) * scales[i / block]);
}

/* dequantize_add's element: acc + v. */
ZERO_HD float zero_quant_add(float acc, float v) { return zero_quant_canon(acc + v); }

/* Error feedback's residual element: x - v (x the value that was quantized,
 * v its dequantized value). */
ZERO_HD float zero_quant_sub(float x, float v) { return zero_quant_canon(x - v); }
#endif
