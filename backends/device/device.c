/* Device dispatch (contract in device.h): the CPU code when there is no
 * device or the operands are host memory, the device's ops when they are
 * device memory, staging through temporary device memory for mixed calls.
 * The CPU branches are the exact code the core ran before devices existed
 * (same kernels, same tile sizes), so CPU results are unchanged. */
#include "device.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"

/* Static storage starts as a null pointer; an explicit `= NULL` (a void *)
 * is not a constant initializer of an atomic function pointer for clang. */
static _Atomic(zero__device_factory) g_factory;

void zero__device_set_factory(zero__device_factory f) { atomic_store(&g_factory, f); }

zero_status zero__device_open(int ordinal, void *compute_stream, zero__device **out, char *err, size_t err_len) {
    *out = NULL;
    zero__device_factory f = atomic_load(&g_factory);
    if (f) return f(ordinal, compute_stream, out, err, err_len);
#ifdef ZERO_HAVE_CUDA
    return zero__device_cuda_open(ordinal, compute_stream, out, err, err_len);
#else
    if (err && err_len)
        snprintf(err, err_len, "device_kind CUDA: this libzero was built without CUDA (ZERO_WITH_CUDA=OFF or no "
                               "toolkit found at configure time)");
    return ZERO_ERR_UNSUPPORTED;
#endif
}

void zero__device_close(zero__device *d) {
    if (d) d->ops->close(d);
}

int zero__dev_is_device(zero__device *d, const void *p) { return d && p && d->ops->is_device(d, p); }

const char *zero__dev_error(zero__device *d) { return d ? d->ops->error(d) : ""; }

static size_t es_of(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4u : 2u; }

/* A device copy of n bytes of host memory `src` (NULL on failure). */
static void *stage_in(zero__device *d, const void *src, size_t bytes) {
    /* the copy overwrites the whole block at once: no zero-fill (issue 35) */
    void *t = d->ops->alloc_nofill ? d->ops->alloc_nofill(d, ZERO_TIER_DEVICE, bytes ? bytes : 1)
                                   : d->ops->alloc(d, ZERO_TIER_DEVICE, bytes ? bytes : 1);
    if (t && bytes && d->ops->copy(d, t, src, bytes) != ZERO_OK) {
        d->ops->free(d, t);
        t = NULL;
    }
    return t;
}

zero_status zero__dev_copy(zero__device *d, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return ZERO_OK;
    if (zero__dev_is_device(d, dst) || zero__dev_is_device(d, src)) return d->ops->copy(d, dst, src, bytes);
    memmove(dst, src, bytes);
    return ZERO_OK;
}

zero_status zero__dev_memset(zero__device *d, void *p, int value, size_t bytes) {
    if (!bytes) return ZERO_OK;
    if (zero__dev_is_device(d, p)) return d->ops->memset(d, p, value, bytes);
    memset(p, value, bytes);
    return ZERO_OK;
}

zero_status zero__dev_clear_async(zero__device *d, void *p, size_t bytes) {
    if (!bytes) return ZERO_OK;
    if (!zero__dev_is_device(d, p)) {
        memset(p, 0, bytes);
        return ZERO_OK;
    }
    return d->ops->memset_async ? d->ops->memset_async(d, p, 0, bytes) : d->ops->memset(d, p, 0, bytes);
}

int zero__dev_has_fences(zero__device *d) {
    return d && d->ops->memset_async && d->ops->fence && d->ops->fence_wait;
}

zero_status zero__dev_fence(zero__device *d, void **fence) {
    *fence = NULL;
    return zero__dev_has_fences(d) ? d->ops->fence(d, fence) : ZERO_OK;
}

zero_status zero__dev_fence_wait(zero__device *d, void *fence) {
    return fence && d ? d->ops->fence_wait(d, fence) : ZERO_OK;
}

zero_status zero__dev_fence_order(zero__device *d, void *fence, void *consumer) {
    if (!fence || !d) return ZERO_OK;
    return d->ops->fence_order ? d->ops->fence_order(d, fence, consumer) : d->ops->fence_wait(d, fence);
}

zero_status zero__dev_fill_wait(zero__device *d) {
    return d && d->ops->fill_wait ? d->ops->fill_wait(d) : ZERO_OK;
}

uint64_t zero__dev_host_waits(zero__device *d) { return d && d->ops->host_waits ? d->ops->host_waits(d) : 0; }

zero_status zero__dev_convert(zero__device *d, void *dst, zero_dtype ddt, const void *src, zero_dtype sdt,
                              size_t n) {
    if (!n) return ZERO_OK;
    int dd = zero__dev_is_device(d, dst), sd = zero__dev_is_device(d, src);
    if (!dd && !sd) {
        zero__convert(dst, ddt, src, sdt, n);
        return ZERO_OK;
    }
    if (dd && sd) return d->ops->convert(d, dst, ddt, src, sdt, n);
    if (dd) { /* host source: bring it over, convert on the device */
        void *t = stage_in(d, src, n * es_of(sdt));
        if (!t) return ZERO_ERR_DEVICE;
        zero_status s = d->ops->convert(d, dst, ddt, t, sdt, n);
        d->ops->free(d, t);
        return s;
    }
    /* device source, host destination: convert on the host after one copy */
    void *h = malloc(n * es_of(sdt));
    if (!h) return ZERO_ERR_OUT_OF_MEMORY;
    zero_status s = d->ops->copy(d, h, src, n * es_of(sdt));
    if (s == ZERO_OK) zero__convert(dst, ddt, h, sdt, n);
    free(h);
    return s;
}

/* The CPU form of add_into: dst (any dtype) += src in fp32, one rounding. */
static void host_add_into(void *dst, zero_dtype ddt, const void *src, zero_dtype sdt, size_t n) {
    if (ddt == ZERO_DTYPE_F32) {
        zero__add_into(dst, src, sdt, n);
        return;
    }
    float tile[1024];
    size_t ses = es_of(sdt);
    for (size_t i = 0; i < n; i += 1024) {
        size_t k = n - i < 1024 ? n - i : 1024;
        zero__convert(tile, ZERO_DTYPE_F32, (uint16_t *)dst + i, ddt, k);
        zero__add_into(tile, (const char *)src + i * ses, sdt, k);
        zero__convert((uint16_t *)dst + i, ddt, tile, ZERO_DTYPE_F32, k);
    }
}

zero_status zero__dev_add_into(zero__device *d, void *dst, zero_dtype ddt, const void *src, zero_dtype sdt,
                               size_t n) {
    if (!n) return ZERO_OK;
    int dd = zero__dev_is_device(d, dst), sd = zero__dev_is_device(d, src);
    if (!dd && !sd) {
        host_add_into(dst, ddt, src, sdt, n);
        return ZERO_OK;
    }
    if (dd && sd) return d->ops->add_into(d, dst, ddt, src, sdt, n);
    if (dd) { /* host gradient into a device buffer */
        void *t = stage_in(d, src, n * es_of(sdt));
        if (!t) return ZERO_ERR_DEVICE;
        zero_status s = d->ops->add_into(d, dst, ddt, t, sdt, n);
        d->ops->free(d, t);
        return s;
    }
    void *h = malloc(n * es_of(sdt));
    if (!h) return ZERO_ERR_OUT_OF_MEMORY;
    zero_status s = d->ops->copy(d, h, src, n * es_of(sdt));
    if (s == ZERO_OK) host_add_into(dst, ddt, h, sdt, n);
    free(h);
    return s;
}

zero_status zero__dev_scale(zero__device *d, float *x, float a, size_t n) {
    if (!n || a == 1.0f) return ZERO_OK;
    if (zero__dev_is_device(d, x)) return d->ops->scale(d, x, a, n);
    for (size_t i = 0; i < n; i++) x[i] *= a;
    return ZERO_OK;
}

#define SUMSQ_TILE ZERO_SUMSQ_BLOCK /* 16-bit tiles are the f32 kernel's blocks, combined by its tree */

zero_status zero__dev_sumsq(zero__device *d, const void *x, zero_dtype dt, size_t n, double *out) {
    if (zero__dev_is_device(d, x)) return d->ops->sumsq(d, x, dt, n, out);
    if (dt == ZERO_DTYPE_F32) {
        *out = zero__sumsq_f32(x, n);
        return ZERO_OK;
    }
    float tile[SUMSQ_TILE];
    zero__sumsq_tree tree = {{0}, {0}};
    for (size_t i = 0; i < n; i += SUMSQ_TILE) {
        size_t k = n - i < SUMSQ_TILE ? n - i : SUMSQ_TILE;
        zero__convert(tile, ZERO_DTYPE_F32, (const uint16_t *)x + i, dt, k);
        zero__sumsq_tree_add(&tree, zero__sumsq_f32(tile, k)); /* one block: its block sum */
    }
    *out = zero__sumsq_tree_finish(&tree);
    return ZERO_OK;
}

zero_status zero__dev_nonfinite(zero__device *d, const void *x, zero_dtype dt, size_t n, int *out) {
    if (zero__dev_is_device(d, x)) return d->ops->nonfinite(d, x, dt, n, out);
    *out = 0;
    if (dt == ZERO_DTYPE_F32) {
        *out = zero__nonfinite_f32(x, n);
        return ZERO_OK;
    }
    float tile[SUMSQ_TILE];
    for (size_t i = 0; i < n; i += SUMSQ_TILE) {
        size_t k = n - i < SUMSQ_TILE ? n - i : SUMSQ_TILE;
        zero__convert(tile, ZERO_DTYPE_F32, (const uint16_t *)x + i, dt, k);
        if (zero__nonfinite_f32(tile, k)) {
            *out = 1;
            break;
        }
    }
    return ZERO_OK;
}

/* The CPU pass, fused and tiled: a 16-bit gradient is widened one tile at a
 * time (only a tile of fp32 temporaries exists); the kernel is elementwise,
 * so the result equals one call over the whole range. */
static void host_optim_step(zero_optim_kind k, const zero_optim_scalars *s, float *master, float *const state[4],
                            const void *grad, zero_dtype gdt, float grad_mul, void *out, zero_dtype odt, size_t n) {
    if (gdt == ZERO_DTYPE_F32) {
        zero__optim_step(k, s, master, state, grad, grad_mul, out, odt, n);
        return;
    }
    const uint16_t *g16 = grad;
    size_t oes = es_of(odt);
    float tile[ZERO_OPTIM_TILE];
    for (size_t i = 0; i < n; i += ZERO_OPTIM_TILE) {
        size_t m = n - i < ZERO_OPTIM_TILE ? n - i : ZERO_OPTIM_TILE;
        zero__convert(tile, ZERO_DTYPE_F32, g16 + i, gdt, m);
        float *sti[4] = {0};
        for (int j = 0; j < 4; j++) sti[j] = state[j] ? state[j] + i : NULL;
        zero__optim_step(k, s, master + i, sti, tile, grad_mul, out ? (char *)out + i * oes : NULL, odt, m);
    }
}

zero_status zero__dev_optim_step(zero__device *d, zero_optim_kind k, const zero_optim_scalars *s, float *master,
                                 float *const state[4], const void *grad, zero_dtype gdt, float grad_mul,
                                 void *out, zero_dtype odt, size_t n) {
    if (!n) return ZERO_OK;
    if (zero__dev_is_device(d, master)) {
        for (int j = 0; j < 4; j++)
            if (state[j] && !zero__dev_is_device(d, state[j])) return ZERO_ERR_INVALID_ARGUMENT;
        if (out && !zero__dev_is_device(d, out)) return ZERO_ERR_INVALID_ARGUMENT;
        if (zero__dev_is_device(d, grad))
            return d->ops->optim_step(d, k, s, master, state, grad, gdt, grad_mul, out, odt, n);
        void *t = stage_in(d, grad, n * es_of(gdt));
        if (!t) return ZERO_ERR_DEVICE;
        zero_status st = d->ops->optim_step(d, k, s, master, state, t, gdt, grad_mul, out, odt, n);
        d->ops->free(d, t);
        return st;
    }
    /* Host master and states (offload).  A device gradient comes over once;
     * a device copy-out goes through a host buffer (one copy back). */
    for (int j = 0; j < 4; j++)
        if (state[j] && zero__dev_is_device(d, state[j])) return ZERO_ERR_INVALID_ARGUMENT;
    void *hgrad = NULL, *hout = NULL;
    zero_status st = ZERO_OK;
    if (zero__dev_is_device(d, grad)) {
        if (!(hgrad = malloc(n * es_of(gdt)))) return ZERO_ERR_OUT_OF_MEMORY;
        if ((st = d->ops->copy(d, hgrad, grad, n * es_of(gdt))) != ZERO_OK) goto out;
        grad = hgrad;
    }
    void *dout = out;
    if (out && zero__dev_is_device(d, out)) {
        if (!(hout = malloc(n * es_of(odt)))) {
            st = ZERO_ERR_OUT_OF_MEMORY;
            goto out;
        }
        out = hout;
    }
    host_optim_step(k, s, master, state, grad, gdt, grad_mul, out, odt, n);
    if (hout) st = d->ops->copy(d, dout, hout, n * es_of(odt));
out:
    free(hgrad);
    free(hout);
    return st;
}

zero_status zero__dev_norm_pieces(zero__device *d, const zero__norm_piece *p, size_t k, double *sums, int *flags) {
    int batch = d && d->ops->norm_pieces && k > 0;
    for (size_t i = 0; i < k && batch; i++) batch = p[i].n == 0 || zero__dev_is_device(d, p[i].x);
    if (batch) return d->ops->norm_pieces(d, p, k, sums, flags);
    for (size_t i = 0; i < k; i++) {
        zero_status st = zero__dev_sumsq(d, p[i].x, p[i].dt, p[i].n, &sums[i]);
        if (st == ZERO_OK) st = zero__dev_nonfinite(d, p[i].x, p[i].dt, p[i].n, &flags[i]);
        if (st != ZERO_OK) return st;
    }
    return ZERO_OK;
}

int zero__dev_has_prints(zero__device *d) { return d && d->ops->prints; }

zero_status zero__dev_prints(zero__device *d, const void *const *x, const uint64_t *bytes, const uint32_t *slot,
                             size_t k, int full, uint64_t *out, int add) {
    if (!zero__dev_has_prints(d)) return ZERO_ERR_UNSUPPORTED;
    for (size_t i = 0; i < k; i++)
        if (bytes[i] && !zero__dev_is_device(d, x[i])) return ZERO_ERR_INVALID_ARGUMENT;
    if (!zero__dev_is_device(d, out)) return ZERO_ERR_INVALID_ARGUMENT;
    return k ? d->ops->prints(d, x, bytes, slot, k, full, out, add) : ZERO_OK;
}

/* ---- block quantization (issue 33) ---- */

int zero__dev_has_quant(zero__device *d) {
    return d && d->ops->quantize && d->ops->dequantize && d->ops->dequantize_add && d->ops->quant_residual;
}

/* Both operands device memory of d (an empty run may pass anything). */
static zero_status quant_operands(zero__device *d, size_t n, const void *a, const void *b) {
    if (!zero__dev_has_quant(d)) return ZERO_ERR_UNSUPPORTED;
    if (n && (!zero__dev_is_device(d, a) || !zero__dev_is_device(d, b))) return ZERO_ERR_INVALID_ARGUMENT;
    return ZERO_OK;
}

zero_status zero__dev_quantize(zero__device *d, void *q, const void *src, zero_dtype dt, size_t n, int bits,
                               size_t block) {
    zero_status st = quant_operands(d, n, q, src);
    return st != ZERO_OK || !n ? st : d->ops->quantize(d, q, src, dt, n, bits, block);
}
zero_status zero__dev_dequantize(zero__device *d, void *dst, zero_dtype dt, const void *q, size_t n, int bits,
                                 size_t block) {
    zero_status st = quant_operands(d, n, dst, q);
    return st != ZERO_OK || !n ? st : d->ops->dequantize(d, dst, dt, q, n, bits, block);
}
zero_status zero__dev_dequantize_add(zero__device *d, float *acc, const void *q, size_t n, int bits, size_t block) {
    zero_status st = quant_operands(d, n, acc, q);
    return st != ZERO_OK || !n ? st : d->ops->dequantize_add(d, acc, q, n, bits, block);
}
zero_status zero__dev_quant_residual(zero__device *d, float *ef, const float *x, const void *q, size_t n, int bits,
                                     size_t block) {
    zero_status st = quant_operands(d, n, ef, q);
    if (st == ZERO_OK && n && !zero__dev_is_device(d, x)) st = ZERO_ERR_INVALID_ARGUMENT;
    return st != ZERO_OK || !n ? st : d->ops->quant_residual(d, ef, x, q, n, bits, block);
}
