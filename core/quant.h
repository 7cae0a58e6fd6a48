/* Block quantization and the quantized collectives of the services table
 * (ABI 1.3, issue 21: ZeRO++'s qwZ / qgZ, for every plugin).
 *
 * Format of a quantized run of n elements (what crosses the wire): the
 * ceil(n / block) fp32 scales, then the values -- int8, or int4 packed two
 * per byte (low nibble first) -- padded to a multiple of 4 bytes.
 * Symmetric round-to-nearest: scale = max|x| / qmax (qmax 127 or 7),
 * q = rint(x * qmax / max|x|), value = q * scale; so every element's error is
 * at most scale / 2 = max|block| / (2 qmax), plus one fp32 rounding
 * (plus one rounding to the 16-bit dtype when the result is bf16/fp16).  A
 * block with an Inf or NaN gets a NaN scale: every value of it dequantizes
 * to NaN, so overflow detection still sees it.
 *
 * The per-block math is kernels/cpu/quant_math.h, shared with the CUDA
 * kernels (kernels/cuda/zero_cuda_quant_bodies.h).  The functions below are
 * the host path (host memory).  The collectives also take device memory of
 * the engine's device (issue 33): quantize, dequantize and sum run there
 * (device.h's zero__dev_quantize..., the device's stream), the byte
 * collective runs on device buffers (NCCL: all-gather, and an all-to-all of
 * grouped ncclSend/ncclRecv; MPI or self: through the staging layer), and
 * the results are bitwise the host path's.  All non-empty operands must be
 * on one side (ZERO_ERR_INVALID_ARGUMENT); a device without the kernels
 * refuses device buffers with ZERO_ERR_UNSUPPORTED.  Verified without a GPU:
 * the kernel bodies under the CPU shim (tests/cuda_shim/test_shim_quant.c)
 * and the device path on a stub device over MPI (tests/device/
 * test_quant_device.c, N = 1, 3, 5, 6); on a GPU by tests/gpu/
 * test_gpu_quant.c (ctest label gpu, run by tools/gpu-check.sh).
 * Thread-safe (no shared state). */
#ifndef ZERO_CORE_QUANT_H
#define ZERO_CORE_QUANT_H
#include <stddef.h>
#include <stdint.h>

#include "zero_plugin.h"

/* Resolved spec: bits 8 or 4, block >= 1.  Returns 0, or -1 if q is invalid. */
int zero__quant_resolve(const zero_quant_spec *q, int *bits, size_t *block);
/* Bytes of the quantized form of n elements. */
size_t zero__quant_bytes(size_t n, int bits, size_t block);
/* src: n elements of dt (F32, BF16, F16) -> dst (zero__quant_bytes bytes). */
void zero__quantize(void *dst, const void *src, zero_dtype dt, size_t n, int bits, size_t block);
/* Dequantize into dst (n elements of dt; RNE for 16-bit dtypes). */
void zero__dequantize(void *dst, zero_dtype dt, const void *src, size_t n, int bits, size_t block);
/* dst[0..k) = dequantized values lo..lo+k of a run of n (fp32). */
void zero__dequantize_range(float *dst, const void *src, size_t n, size_t lo, size_t k, int bits, size_t block);
/* acc[i] += dequantized value i (fp32). */
void zero__dequantize_add(float *acc, const void *src, size_t n, int bits, size_t block);

/* The services (see abi/zero_plugin.h for the contract).  Collective over m. */
zero_status zero__allgather_quantized(zero_comm *m, void *recv, const size_t *counts, zero_dtype dt,
                                      const zero_quant_spec *q);
zero_status zero__reduce_scatter_quantized(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                           zero_dtype dt, const zero_quant_spec *q);
#endif
