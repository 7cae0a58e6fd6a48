/* CUDA kernels of libzero (host-callable launchers).  Every launcher is
 * asynchronous on `stream` (a cudaStream_t as void*, NULL = legacy default
 * stream), touches only the device pointers it is given, and returns
 * ZERO_ERR_DEVICE with the launch error if the launch failed (errors of the
 * kernel itself surface at the next synchronisation).  Thread-safe: no
 * global state.  Built only with ZERO_HAVE_CUDA.
 *
 * The bodies live in zero_cuda_kernel_bodies.h (shared with the CPU launch
 * shim tests); the per-element math in kernels/cpu/optim_math.h (shared with
 * the CPU kernels).  Compiled with --fmad=false, so a step gives the same
 * bits as zero__optim_step on the CPU. */
#ifndef ZERO_CUDA_KERNELS_H
#define ZERO_CUDA_KERNELS_H
#include <stddef.h>
#include <stdint.h>

#include "optim_math.h"
#include "zero_cuda_types.h"
#include "zero_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif


/* Fused multi-tensor optimizer step over `nt` tensors of one param group:
 * g = grad * m (m = *grad_mul_dev if given, else grad_mul), update
 * master/state with kind k and scalars s, write the new weight to out in
 * out_dt when out is set.  AdamW, Adam, SGD (+momentum, nesterov), Lion,
 * Adagrad; LAMB is ZERO_ERR_UNSUPPORTED (needs per-tensor trust ratios).
 * `ts` is read during the call only (copied into kernel arguments). */
zero_status zero_cuda_optim_step(zero_optim_kind k, const zero_optim_scalars *s, const zero_cuda_mt_tensor *ts,
                                 size_t nt, zero_dtype grad_dt, zero_dtype out_dt, float grad_mul,
                                 const float *grad_mul_dev, void *stream);

/* Device scratch (in doubles) zero_cuda_sumsq needs for n elements. */
size_t zero_cuda_sumsq_scratch(uint64_t n);
/* *out_dev = sum of squares of x[0..n) in fp64, same summation order (and
 * so the same bits, for F32) as zero__sumsq_f32.  scratch_dev holds
 * zero_cuda_sumsq_scratch(n) doubles.  out_dev is device memory. */
zero_status zero_cuda_sumsq(const void *x, zero_dtype dt, uint64_t n, double *scratch_dev, double *out_dev,
                            void *stream);
/* *flag_dev = 1 if x[0..n) holds an Inf or NaN, else 0 (cleared first). */
zero_status zero_cuda_nonfinite(const void *x, zero_dtype dt, uint64_t n, int32_t *flag_dev, void *stream);
/* dst[i] = src[i] converted, RNE, NaN stays NaN (zero__convert semantics). */
zero_status zero_cuda_convert(void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt, uint64_t n,
                              void *stream);
/* dst[i] += (float)src[i] (zero__add_into semantics). */
zero_status zero_cuda_add_into(float *dst, const void *src, zero_dtype src_dt, uint64_t n, void *stream);
/* dst[i] = round(dst[i] + (float)src[i]) in dst_dt (sum in fp32). */
zero_status zero_cuda_add_into_dt(void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt, uint64_t n,
                                  void *stream);
/* x[i] *= a. */
zero_status zero_cuda_scale(float *x, float a, uint64_t n, void *stream);
/* Gradient multiplier from a device sum of squares: see zero_cuda_k_clip_mul
 * in zero_cuda_kernel_bodies.h.  norm_out_dev may be NULL. */
zero_status zero_cuda_clip_mul(const double *sumsq_dev, double inv, double clip, float *grad_mul_dev,
                               double *norm_out_dev, void *stream);

/* ---- block quantization (ZeRO++ qwZ / qgZ; format in core/quant.h, math
 * in kernels/cpu/quant_math.h, so the bytes and values equal the host
 * path's: zero__quantize, zero__dequantize, zero__dequantize_add).  dt is
 * F32, BF16 or F16; bits 8 or 4; block >= 1 (else ZERO_ERR_INVALID_ARGUMENT,
 * nothing launched).  All pointers are device memory; the quantized form
 * `dst`/`src` holds zero_quant_total_bytes(n, bits, block) bytes and is
 * 4-byte aligned (its fp32 scales come first). */
/* dst = quantized src[0..n): scales and data written, padding untouched. */
zero_status zero_cuda_quantize(void *dst, const void *src, zero_dtype dt, uint64_t n, int bits, uint64_t block,
                               void *stream);
/* dst[0..n) in dt = dequantized src. */
zero_status zero_cuda_dequantize(void *dst, zero_dtype dt, const void *src, uint64_t n, int bits, uint64_t block,
                                 void *stream);
/* acc[i] += dequantized value i (fp32). */
zero_status zero_cuda_dequantize_add(float *acc, const void *src, uint64_t n, int bits, uint64_t block, void *stream);
/* ef[i] = x[i] - dequantized value i (error feedback's residual; x is what
 * src quantized, in fp32). */
zero_status zero_cuda_quant_residual(float *ef, const float *x, const void *src, uint64_t n, int bits, uint64_t block,
                                     void *stream);

/* ---- (1.13) fingerprints of device tensors (the host-write check; math
 * in kernels/cpu/print_math.h, so each equals zero_print_bytes of the same
 * bytes).  x[i] (device memory, any alignment) holds bytes[i] bytes;
 * full: every byte, else the sampled lines.  out[slot[i]] (slot NULL:
 * out[i]; device memory) = the fingerprint of piece i, or += it when
 * `add`; the slots of one call differ.  scratch: device memory of
 * zero_cuda_prints_scratch() uint64 words, reused launch after launch
 * (stream order).  x, bytes and slot are read during the call only. */
size_t zero_cuda_prints_scratch(void);
zero_status zero_cuda_prints(const void *const *x, const uint64_t *bytes, const uint32_t *slot, size_t k, int full,
                             uint64_t *scratch, uint64_t *out, int add, void *stream);

#ifdef __cplusplus
}
#endif
#endif
