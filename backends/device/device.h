/* The engine's compute device, as the core sees it: a small vtable that the
 * CUDA backend (backends/device/cuda/device_cuda_ops.c) implements, and that
 * unit tests implement with a stub (tests/gpu/test_device_dispatch.c).
 *
 * Why a vtable and not direct zero_cuda_* calls: the core (memory
 * accounting, services, bucket engine) must route every access to a
 * device-resident buffer through the device, and that routing has to be
 * tested on machines without a GPU.  A stub device whose "device pointers"
 * the host cannot dereference makes any missed route crash the test.
 *
 * A CPU engine has no device (NULL): every zero__dev_* helper below then
 * does exactly what the CPU code did before (memset, memmove, the CPU
 * kernels), so CPU behaviour does not change.
 *
 * Ownership: a zero__device is created by zero__device_open (or a test
 * factory) and owned by the engine, which closes it last (after the memory
 * accountant has returned every block).  Thread-safety: every op may be
 * called from several threads at once except close; implementations
 * serialise internally.  All device work is issued on ONE stream of the
 * device's own (the comm stream), in call order, so the ops are ordered with
 * each other and with the NCCL collectives queued on that stream without
 * host synchronisation; the ops that return a value to the host (sumsq,
 * nonfinite) or fill host memory (copy to host) synchronise before
 * returning. */
#ifndef ZERO_BACKENDS_DEVICE_H
#define ZERO_BACKENDS_DEVICE_H
#include <stddef.h>
#include <stdint.h>

#include "optim_math.h"
#include "zero_plugin.h"

#include "device_ops.h"

/* Open the device for an engine created with device_kind CUDA.  A factory
 * installed by zero__device_set_factory (tests) wins; otherwise the CUDA
 * backend (ZERO_HAVE_CUDA builds) or ZERO_ERR_UNSUPPORTED.  Failure:
 * *out NULL, message in err (e.g. "no CUDA device: cudaGetDeviceCount: CUDA
 * driver version is insufficient for CUDA runtime version"), status
 * ZERO_ERR_DEVICE / ZERO_ERR_OUT_OF_MEMORY / ZERO_ERR_UNSUPPORTED. */
zero_status zero__device_open(int ordinal, void *compute_stream, zero__device **out, char *err, size_t err_len);
void zero__device_close(zero__device *d); /* NULL ok; not thread-safe */

typedef zero_status (*zero__device_factory)(int ordinal, void *compute_stream, zero__device **out, char *err,
                                            size_t err_len);
/* Test hook: make zero__device_open use `f` (NULL restores the default).
 * Process-global; set it before creating engines. */
void zero__device_set_factory(zero__device_factory f);

/* ---- dispatch helpers: d == NULL (CPU engine) or host operands run the CPU
 * code; device operands run on d, host operands of a mixed call are staged
 * through temporary device memory.  Thread-safe. ---- */
int zero__dev_is_device(zero__device *d, const void *p); /* 0 when d is NULL */
zero_status zero__dev_copy(zero__device *d, void *dst, const void *src, size_t bytes); /* memmove on the host */
zero_status zero__dev_memset(zero__device *d, void *p, int value, size_t bytes);
/* Clear device memory ahead of its next use without a host wait: p[0..bytes)
 * = 0 queued on the device's stream (host memory: memset now).  Pair it with
 * zero__dev_fence / zero__dev_fence_wait before handing the memory to code
 * that writes it from another stream.  Devices without the async ops clear
 * and wait here. */
zero_status zero__dev_clear_async(zero__device *d, void *p, size_t bytes);
/* A marker at the current end of the device's stream; *fence = NULL when
 * there is nothing to wait for (no device, or no async ops).  The caller
 * owns it until zero__dev_fence_wait. */
zero_status zero__dev_fence(zero__device *d, void **fence);
/* Does d queue clears and fences without a host wait?  0 for NULL. */
int zero__dev_has_fences(zero__device *d);
/* Block until the device's stream has passed `fence` and free it (NULL: no-op). */
zero_status zero__dev_fence_wait(zero__device *d, void *fence);
/* (issue 35) `consumer` (NULL = the host's compute stream) waits for the
 * fence on the device, no host wait, and the fence is freed; a device
 * without fence_order blocks the host instead (fence_wait).  NULL fence: no-op. */
zero_status zero__dev_fence_order(zero__device *d, void *fence, void *consumer);
/* (issue 35) Every zero-fill of a device allocation queued so far is done
 * (host wait only when one is pending; no-op for NULL or a device that
 * fills synchronously).  Before device memory fresh from an allocation is
 * handed to code outside libzero (zero_grad_buffer). */
zero_status zero__dev_fill_wait(zero__device *d);
/* (issue 35) Host waits counted by d so far (0: NULL or not counted). */
uint64_t zero__dev_host_waits(zero__device *d);
zero_status zero__dev_convert(zero__device *d, void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt,
                              size_t n);
/* dst (dst_dt) = round(dst + src) formed in fp32; dst_dt F32 is zero__add_into. */
zero_status zero__dev_add_into(zero__device *d, void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt,
                               size_t n);
zero_status zero__dev_scale(zero__device *d, float *x, float a, size_t n);
/* Kernels that return to the host; on the host they are the CPU kernels
 * (fp64 sum of squares in zero__sumsq_f32's order). */
zero_status zero__dev_sumsq(zero__device *d, const void *x, zero_dtype dt, size_t n, double *out);
zero_status zero__dev_nonfinite(zero__device *d, const void *x, zero_dtype dt, size_t n, int *out);
/* Both for k pieces: sums[i] and flags[i] exactly as zero__dev_sumsq /
 * zero__dev_nonfinite give them for piece i (same bits), with one host wait
 * in all when every piece is device memory and d has norm_pieces; else
 * piece by piece.  On failure the outputs are undefined. */
zero_status zero__dev_norm_pieces(zero__device *d, const zero__norm_piece *p, size_t k, double *sums, int *flags);
/* (1.13) Fingerprints of device memory (device_ops.h `prints`): 1 when d
 * has the op (0 for NULL); else zero__dev_prints is ZERO_ERR_UNSUPPORTED
 * and does nothing.  Every x[i] with bytes[i] > 0 must be device memory
 * (ZERO_ERR_INVALID_ARGUMENT, nothing queued).  Engine thread. */
int zero__dev_has_prints(zero__device *d);
zero_status zero__dev_prints(zero__device *d, const void *const *x, const uint64_t *bytes, const uint32_t *slot,
                             size_t k, int full, uint64_t *out, int add);
/* One optimizer pass over n elements (master/state/grad/out as in
 * zero__optim_step; grad in grad_dt, tiled to fp32 on the host).  Where
 * master is device memory, everything runs on d (a host grad is staged);
 * where master is host memory, the CPU kernel runs and a device `out` is
 * written through a host tile. */
zero_status zero__dev_optim_step(zero__device *d, zero_optim_kind k, const zero_optim_scalars *s, float *master,
                                 float *const state[4], const void *grad, zero_dtype grad_dt, float grad_mul,
                                 void *out, zero_dtype out_dt, size_t n);
/* (issue 33) Block quantization on d (device pointers only, queued on d's
 * stream; device_ops.h has the ops, core/quant.h the format).  has_quant:
 * d has all four kernels (0 for NULL).  Without them, or for a host
 * pointer, the helpers return ZERO_ERR_UNSUPPORTED / ZERO_ERR_INVALID_ARGUMENT
 * and do nothing: the host path is core/quant.c's own. */
int zero__dev_has_quant(zero__device *d);
zero_status zero__dev_quantize(zero__device *d, void *q, const void *src, zero_dtype dt, size_t n, int bits,
                               size_t block);
zero_status zero__dev_dequantize(zero__device *d, void *dst, zero_dtype dt, const void *q, size_t n, int bits,
                                 size_t block);
zero_status zero__dev_dequantize_add(zero__device *d, float *acc, const void *q, size_t n, int bits, size_t block);
zero_status zero__dev_quant_residual(zero__device *d, float *ef, const float *x, const void *q, size_t n, int bits,
                                     size_t block);
/* d's last error text ("" when d is NULL). */
const char *zero__dev_error(zero__device *d);

/* A communicator that carries device buffers over a host-memory one (MPI or
 * self) by staging every device buffer through host memory
 * (comm_devstage.c).  Takes ownership of `inner` (freed with the wrapper;
 * sub-communicators split from it are wrapped too).  Host buffers pass
 * straight through.  The engine uses it for device_kind CUDA when the
 * communicator is not NCCL.  dev must outlive the communicator. */
struct zero_comm;
zero_status zero__comm_devstage_create(struct zero_comm *inner, zero__device *dev, struct zero_comm **out);
#endif
