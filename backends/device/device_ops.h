/* The device vtable (issue 32): what a device backend implements and the
 * factory (device.c) calls through.  Split from device.h so that a backend
 * (backends/device/cuda/device_cuda_ops.c, the test stubs) includes the
 * contract without the factory's header: the factory calls the CUDA
 * backend's open, and the backend never depends on the factory.  A
 * contract header: no .c of its own.  device.h has the ownership and
 * threading rules. */
#ifndef ZERO_BACKENDS_DEVICE_OPS_H
#define ZERO_BACKENDS_DEVICE_OPS_H
#include <stddef.h>
#include <stdint.h>

#include "optim_math.h"
#include "zero_plugin.h"

typedef struct zero__device zero__device;

/* One piece of a gradient norm (zero__dev_norm_pieces): n elements of dt at x. */
typedef struct zero__norm_piece {
    const void *x;
    zero_dtype dt;
    size_t n;
} zero__norm_piece;

typedef struct zero__device_ops {
    const char *name; /* "cuda", "stub" */
    /* Zero-filled block; tier DEVICE is device memory, HOST is pinned host
     * memory (CPU-dereferenceable).  NULL when out of memory.  A device
     * with fill_wait (below) may leave the zero-fill of a device block
     * queued on its stream: every later op of this device sees the zeros
     * (stream order), and so does a stream ordered after the device's
     * (order_before); code that hands the block to the host's own kernels
     * on any stream calls zero__dev_fill_wait first. */
    void *(*alloc)(zero__device *d, zero_mem_tier tier, size_t bytes);
    void (*free)(zero__device *d, void *p);
    /* Is p device memory the host cannot dereference?  (Pinned host memory
     * is not; memory the host cudaMalloc'd itself is.) */
    int (*is_device)(zero__device *d, const void *p);
    /* Copy between any two of host / pinned / device; returns when done. */
    zero_status (*copy)(zero__device *d, void *dst, const void *src, size_t bytes);
    /* Device memory only: p[0..bytes) = value (byte), stream-ordered. */
    zero_status (*memset)(zero__device *d, void *p, int value, size_t bytes);
    /* Device pointers only (the zero__dev_* helpers stage host operands). */
    zero_status (*optim_step)(zero__device *d, zero_optim_kind k, const zero_optim_scalars *s, float *master,
                              float *const state[4], const void *grad, zero_dtype grad_dt, float grad_mul, void *out,
                              zero_dtype out_dt, size_t n);
    zero_status (*sumsq)(zero__device *d, const void *x, zero_dtype dt, size_t n, double *out);
    zero_status (*nonfinite)(zero__device *d, const void *x, zero_dtype dt, size_t n, int *out);
    zero_status (*convert)(zero__device *d, void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt,
                           size_t n);
    /* dst (dst_dt) = round(dst + src), the sum formed in fp32. */
    zero_status (*add_into)(zero__device *d, void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt,
                            size_t n);
    zero_status (*scale)(zero__device *d, float *x, float a, size_t n);
    /* The device's stream waits for `producer` (NULL = host compute stream). */
    zero_status (*order_after)(zero__device *d, void *producer);
    /* `consumer` (NULL = host compute stream) waits for the device's stream. */
    zero_status (*order_before)(zero__device *d, void *consumer);
    /* Block until the device's stream is idle. */
    zero_status (*sync)(zero__device *d);
    /* The device's stream as a cudaStream_t (for NCCL), or NULL. */
    void *(*stream)(zero__device *d);
    /* Text of the last failure (owned by d). */
    const char *(*error)(zero__device *d);
    void (*close)(zero__device *d);
    /* Optional (NULL: the helpers below fall back to memset, which waits).
     * memset_async: device memory p[0..bytes) = value, queued on the
     * device's stream, no host wait.  fence: a marker at the current end of
     * the device's stream (*fence NULL on failure).  fence_wait: block until
     * the stream has passed the marker, then free it. */
    zero_status (*memset_async)(zero__device *d, void *p, int value, size_t bytes);
    zero_status (*fence)(zero__device *d, void **fence);
    zero_status (*fence_wait)(zero__device *d, void *fence);
    /* (planner) Free device memory in bytes right now, for "stage": "auto"
     * without a memory_budget_bytes.  Optional (NULL: unknown); returns 0
     * and sets *out, or -1. */
    int (*free_bytes)(zero__device *d, uint64_t *out);
    /* Optional (NULL: one sumsq and one nonfinite per piece, each waiting
     * for the stream).  For k pieces of device memory: sums[i] = the sum of
     * squares of piece i, flags[i] = its non-finite flag, all queued back to
     * back with ONE host wait at the end (issue 24: the gradient norm used
     * to wait twice per owned range). */
    zero_status (*norm_pieces)(zero__device *d, const struct zero__norm_piece *p, size_t k, double *sums,
                               int *flags);
    /* ---- appended (issue 35); all optional ----
     * fill_wait: block until every zero-fill alloc has queued so far is
     * done (NULL: alloc fills before it returns).  alloc_nofill: like alloc
     * for a block the caller overwrites whole before anything reads it (no
     * fill; NULL: alloc).  fence_order: `consumer` (NULL = the host's
     * compute stream) waits for `fence` without a host wait, and the fence
     * is freed (NULL: fence_wait, which blocks the host).  host_waits: how
     * often the host has blocked on this device so far (diagnostics and
     * bench/gpu; NULL: not counted). */
    zero_status (*fill_wait)(zero__device *d);
    void *(*alloc_nofill)(zero__device *d, zero_mem_tier tier, size_t bytes);
    zero_status (*fence_order)(zero__device *d, void *fence, void *consumer);
    uint64_t (*host_waits)(zero__device *d);
    /* ---- appended (issue 33: ZeRO++ qwZ / qgZ on the device); all
     * optional (NULL: the quantized collectives refuse device buffers with
     * ZERO_ERR_UNSUPPORTED).  Device pointers only, queued on the device's
     * stream (no host wait).  Format and results: core/quant.h, bitwise
     * those of the host path (kernels/cpu/quant_math.h).  `q` is the
     * quantized form of a run of n: zero_quant_total_bytes(n, bits, block)
     * bytes, 4-byte aligned.
     * quantize: q = the quantization of src[0..n) (dt F32/BF16/F16).
     * dequantize: dst[0..n) in dt = the dequantized values of q.
     * dequantize_add: acc[i] += dequantized value i (fp32).
     * quant_residual: ef[i] = x[i] - dequantized value i (error feedback). */
    zero_status (*quantize)(zero__device *d, void *q, const void *src, zero_dtype dt, size_t n, int bits,
                            size_t block);
    zero_status (*dequantize)(zero__device *d, void *dst, zero_dtype dt, const void *q, size_t n, int bits,
                              size_t block);
    zero_status (*dequantize_add)(zero__device *d, float *acc, const void *q, size_t n, int bits, size_t block);
    zero_status (*quant_residual)(zero__device *d, float *ef, const float *x, const void *q, size_t n, int bits,
                                  size_t block);
    /* ---- appended (1.13: the host-write check of a device engine);
     * optional (NULL: a device engine's copies are not checked).
     * prints: the fingerprint (kernels/cpu/print_math.h, zero_print_bytes:
     * every byte when `full`, else the sampled lines) of the k pieces
     * x[i] (device memory, bytes[i] bytes, any alignment) into
     * out[slot[i]] (slot NULL: out[i]; out device memory; the slots of one
     * call differ), or added to it when `add`; queued on the device's
     * stream, no host wait.  x, bytes and slot are read during the call
     * only. */
    zero_status (*prints)(zero__device *d, const void *const *x, const uint64_t *bytes, const uint32_t *slot, size_t k,
                          int full, uint64_t *out, int add);
} zero__device_ops;

/* Common header; implementations embed it first. */
struct zero__device {
    const zero__device_ops *ops;
    int ordinal;       /* CUDA ordinal, or -1 */
    int pin_host;      /* ZERO_TIER_HOST blocks come from ops->alloc (pinned) */
};

#ifdef ZERO_HAVE_CUDA
/* The CUDA implementation (device_cuda_ops.c). */
zero_status zero__device_cuda_open(int ordinal, void *compute_stream, zero__device **out, char *err,
                                   size_t err_len);
#endif
#endif
