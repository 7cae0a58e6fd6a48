/* See quant.h. */
#include "quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "engine.h"
#include "log.h"
#include "memory.h"
#include "optim.h"
#include "quant_math.h"

#define ZERO_QUANT_DEFAULT_BLOCK 256

int zero__quant_resolve(const zero_quant_spec *q, int *bits, size_t *block) {
    if (!q) return -1;
    if (q->bits != 8 && q->bits != 4) return -1;
    *bits = q->bits;
    *block = q->block ? q->block : ZERO_QUANT_DEFAULT_BLOCK;
    return 0;
}

static size_t nblocks(size_t n, size_t block) { return zero_quant_nblocks(n, block); }

size_t zero__quant_bytes(size_t n, int bits, size_t block) { return zero_quant_total_bytes(n, bits, block); }

/* src[lo, lo + k) as fp32 into out (k <= 256): one conversion call per block. */
static const float *load_block(const void *src, zero_dtype dt, size_t lo, size_t k, float *out) {
    if (dt == ZERO_DTYPE_F32) return (const float *)src + lo;
    zero__convert(out, ZERO_DTYPE_F32, (const char *)src + lo * 2, dt, k);
    return out;
}

/* The per-block math is quant_math.h's, the one the CUDA kernels run. */
void zero__quantize(void *dst, const void *src, zero_dtype dt, size_t n, int bits, size_t block) {
    const size_t nb = nblocks(n, block);
    float *scales = dst;
    uint8_t *data = (uint8_t *)dst + nb * sizeof(float);
    float tmp[256];
    memset(data, 0, zero_quant_data_bytes(n, bits));
    for (size_t b = 0; b < nb; b++) {
        const size_t lo = b * block, hi = lo + block < n ? lo + block : n;
        float maxabs = 0.0f;
        int finite = 1;
        for (size_t s = lo; s < hi; s += 256) { /* pass 1: the block's max|x| */
            const size_t k = hi - s < 256 ? hi - s : 256;
            const float *x = load_block(src, dt, s, k, tmp);
            for (size_t i = 0; i < k; i++) maxabs = zero_quant_max_step(maxabs, x[i], &finite);
        }
        scales[b] = zero_quant_scale(maxabs, finite, bits);
        const float inv = zero_quant_inv(maxabs, finite, bits);
        for (size_t s = lo; s < hi && finite; s += 256) { /* pass 2: the values (all 0 for a non-finite block) */
            const size_t k = hi - s < 256 ? hi - s : 256;
            const float *x = load_block(src, dt, s, k, tmp);
            for (size_t i = 0; i < k; i++) {
                const int q = zero_quant_code(x[i], inv, bits);
                const size_t e = s + i;
                if (bits == 8) {
                    data[e] = (uint8_t)(int8_t)q;
                } else {
                    const uint8_t nib = zero_quant_nibble(q);
                    data[e / 2] |= (uint8_t)(e % 2 ? nib << 4 : nib);
                }
            }
        }
    }
}

static float value_at(const float *scales, const uint8_t *data, size_t i, int bits, size_t block) {
    return zero_quant_value_at(scales, data, i, bits, block);
}

void zero__dequantize(void *dst, zero_dtype dt, const void *src, size_t n, int bits, size_t block) {
    const float *scales = src;
    const uint8_t *data = (const uint8_t *)src + nblocks(n, block) * sizeof(float);
    if (dt == ZERO_DTYPE_F32) {
        for (size_t i = 0; i < n; i++) ((float *)dst)[i] = value_at(scales, data, i, bits, block);
        return;
    }
    float tmp[256];
    for (size_t s = 0; s < n; s += 256) {
        const size_t k = n - s < 256 ? n - s : 256;
        for (size_t i = 0; i < k; i++) tmp[i] = value_at(scales, data, s + i, bits, block);
        zero__convert((char *)dst + s * 2, dt, tmp, ZERO_DTYPE_F32, k);
    }
}

void zero__dequantize_range(float *dst, const void *src, size_t n, size_t lo, size_t k, int bits, size_t block) {
    const float *scales = src;
    const uint8_t *data = (const uint8_t *)src + nblocks(n, block) * sizeof(float);
    for (size_t i = 0; i < k; i++) dst[i] = value_at(scales, data, lo + i, bits, block);
}

void zero__dequantize_add(float *acc, const void *src, size_t n, int bits, size_t block) {
    const float *scales = src;
    const uint8_t *data = (const uint8_t *)src + nblocks(n, block) * sizeof(float);
    for (size_t i = 0; i < n; i++) acc[i] = zero_quant_add(acc[i], value_at(scales, data, i, bits, block));
}

/* ---- collectives --------------------------------------------------------- */

/* Where a collective's buffers live.  Device memory of the engine's device
 * (issue 33) runs the CUDA kernels of the device (device.h's
 * zero__dev_quantize...) and the byte collective on device buffers; host
 * memory runs the kernels above.  A call whose non-empty operands are on
 * both sides is refused. */
typedef struct qside {
    zero__device *dev; /* NULL: host path */
} qside;

static zero_status check_args(zero_comm *m, const void *const *ops, const size_t *sizes, int nops,
                              const size_t *counts, zero_dtype dt, const zero_quant_spec *q, int *bits,
                              size_t *block, qside *side, const char *fn) {
    struct zero_engine *e = m ? m->engine : NULL;
    side->dev = NULL;
    *bits = 0; /* set on every path: gcc -O3 cannot see that a failure returns before they are read */
    *block = 0;
    if (!m || !counts) return ZERO_ERR_INVALID_ARGUMENT;
    if (dt != ZERO_DTYPE_F32 && dt != ZERO_DTYPE_BF16 && dt != ZERO_DTYPE_F16)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: dtype %d is not F32, BF16 or F16", fn, (int)dt);
    if (zero__quant_resolve(q, bits, block) != 0)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: quantization spec missing or bits not 8 or 4", fn);
    if (!e || !e->dev) return ZERO_OK;
    int on_dev = 0, on_host = 0;
    for (int k = 0; k < nops; k++) {
        if (!sizes[k]) continue; /* an empty operand may be any pointer */
        if (zero__dev_is_device(e->dev, ops[k])) on_dev = 1;
        else on_host = 1;
    }
    if (on_dev && on_host)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT,
                           "%s: buffers on both the host and the device (send, recv and error_feedback must all be "
                           "device memory or all host memory)",
                           fn);
    if (on_dev && !zero__dev_has_quant(e->dev))
        return zero__error(e, ZERO_ERR_UNSUPPORTED, "%s: the %s device has no quantization kernels", fn,
                           e->dev->ops->name);
    if (on_dev) side->dev = e->dev;
    return ZERO_OK;
}

/* Scratch accounted as communication scratch (ZERO_MEM_OTHER), host or
 * device (the device's own allocator; every byte read is written first). */
static void *scratch_on(zero_comm *m, const qside *sd, size_t bytes) {
    zero__device *d = sd->dev;
    void *p;
    if (d)
        p = d->ops->alloc_nofill ? d->ops->alloc_nofill(d, ZERO_TIER_DEVICE, bytes ? bytes : 1)
                                 : d->ops->alloc(d, ZERO_TIER_DEVICE, bytes ? bytes : 1);
    else
        p = malloc(bytes ? bytes : 1);
    if (p && m->engine) zero__engine_note_scratch(m->engine, d ? ZERO_TIER_DEVICE : ZERO_TIER_HOST, (int64_t)bytes);
    return p;
}
static void scratch_free_on(zero_comm *m, const qside *sd, void *p, size_t bytes) {
    if (!p) return;
    if (sd->dev) sd->dev->ops->free(sd->dev, p);
    else free(p);
    if (m->engine) zero__engine_note_scratch(m->engine, sd->dev ? ZERO_TIER_DEVICE : ZERO_TIER_HOST, -(int64_t)bytes);
}

/* A failed device kernel: the engine's last error names the step. */
static zero_status dev_failed(zero_comm *m, const qside *sd, zero_status st, const char *fn, const char *what) {
    return zero__error(m->engine, st, "%s: %s on the %s device failed: %s", fn, what, sd->dev->ops->name,
                       zero__dev_error(sd->dev));
}

/* The kernels just queued on the device's stream must be done before the
 * collective reads their output: free when m queues its collectives on
 * that stream (NCCL on the engine's stream), else one host wait (a
 * sub-communicator's stream, the staging layer). */
static zero_status before_collective(zero_comm *m, const qside *sd, const char *fn) {
    zero__device *d = sd->dev;
    if (zero__comm_ordered_on(m, d->ops->stream ? d->ops->stream(d) : NULL)) return ZERO_OK;
    zero_status st = d->ops->sync(d);
    return st == ZERO_OK ? ZERO_OK : dev_failed(m, sd, st, fn, "stream wait");
}

/* The quantized collectives are blocking: recv is final on return. */
static zero_status device_done(zero_comm *m, const qside *sd, const char *fn) {
    zero_status st = sd->dev->ops->sync(sd->dev);
    return st == ZERO_OK ? ZERO_OK : dev_failed(m, sd, st, fn, "stream wait");
}

zero_status zero__allgather_quantized(zero_comm *m, void *recv, const size_t *counts, zero_dtype dt,
                                      const zero_quant_spec *q) {
    int bits;
    size_t block;
    qside side;
    size_t all = 0;
    if (m && counts)
        for (int r = 0; r < m->size; r++) all += counts[r];
    const void *ops[1] = {recv};
    zero_status st = check_args(m, ops, &all, 1, counts, dt, q, &bits, &block, &side, "allgather_quantized");
    if (st != ZERO_OK) return st;
    const int n = m->size, me = m->rank;
    const size_t es = zero__dtype_size(dt);
    size_t *qc = malloc((size_t)n * sizeof *qc);
    if (!qc) return zero__error(m->engine, ZERO_ERR_OUT_OF_MEMORY, "allgather_quantized: out of memory");
    size_t total = 0, qoff_me = 0, off_me = 0;
    for (int r = 0; r < n; r++) {
        qc[r] = zero__quant_bytes(counts[r], bits, block);
        if (r < me) {
            qoff_me += qc[r];
            off_me += counts[r];
        }
        total += qc[r];
    }
    uint8_t *buf = scratch_on(m, &side, total);
    if (!buf) {
        free(qc);
        return zero__error(m->engine, ZERO_ERR_OUT_OF_MEMORY, "allgather_quantized: out of %s memory",
                           side.dev ? "device" : "host");
    }
    const char *mine = (const char *)recv + off_me * es;
    if (!side.dev) {
        zero__quantize(buf + qoff_me, mine, dt, counts[me], bits, block);
    } else {
        st = zero__dev_quantize(side.dev, buf + qoff_me, mine, dt, counts[me], bits, block);
        if (st != ZERO_OK) st = dev_failed(m, &side, st, "allgather_quantized", "quantize");
        if (st == ZERO_OK) st = before_collective(m, &side, "allgather_quantized");
    }
    zero_comm_req *req = NULL;
    if (st == ZERO_OK) st = zero__iallgatherv(m, buf + qoff_me, buf, qc, ZERO_DTYPE_U8, &req);
    if (st == ZERO_OK) st = zero__comm_wait(req);
    if (st == ZERO_OK) { /* every block, our own included: all ranks hold the same values */
        size_t at = 0, qat = 0;
        for (int r = 0; r < n && st == ZERO_OK; r++) {
            if (!side.dev) {
                zero__dequantize((char *)recv + at * es, dt, buf + qat, counts[r], bits, block);
            } else if ((st = zero__dev_dequantize(side.dev, (char *)recv + at * es, dt, buf + qat, counts[r], bits,
                                                  block)) != ZERO_OK) {
                st = dev_failed(m, &side, st, "allgather_quantized", "dequantize");
            }
            at += counts[r];
            qat += qc[r];
        }
    }
    if (side.dev) { /* also after a failure: nothing may still use the scratch */
        zero_status s2 = device_done(m, &side, "allgather_quantized");
        if (st == ZERO_OK) st = s2;
    }
    scratch_free_on(m, &side, buf, total);
    free(qc);
    return st;
}

/* One rank's block r of the send buffer into its quantized form at qd, with
 * error feedback when ef is set: x = send + carried error; quantize x;
 * carry x - dq(q(x)).  Host or device (sd), the same operations. */
static zero_status quantize_block(zero_comm *m, const qside *sd, uint8_t *qd, const char *src, float *ef, float *xs,
                                  zero_dtype dt, size_t cnt, int bits, size_t block) {
    static const char *fn = "reduce_scatter_quantized";
    zero__device *d = sd->dev;
    zero_status st = ZERO_OK;
    if (!ef) {
        if (!d) zero__quantize(qd, src, dt, cnt, bits, block);
        else if ((st = zero__dev_quantize(d, qd, src, dt, cnt, bits, block)) != ZERO_OK)
            st = dev_failed(m, sd, st, fn, "quantize");
        return st;
    }
    if (!d) {
        float tmpd[256];
        zero__convert(xs, ZERO_DTYPE_F32, src, dt, cnt);
        for (size_t i = 0; i < cnt; i++) xs[i] += ef[i];
        zero__quantize(qd, xs, ZERO_DTYPE_F32, cnt, bits, block);
        for (size_t lo = 0; lo < cnt; lo += 256) { /* the residual, in slices */
            size_t k = cnt - lo < 256 ? cnt - lo : 256;
            zero__dequantize_range(tmpd, qd, cnt, lo, k, bits, block);
            for (size_t i = 0; i < k; i++) ef[lo + i] = zero_quant_sub(xs[lo + i], tmpd[i]);
        }
        return ZERO_OK;
    }
    if (!cnt) return ZERO_OK;
    /* the same sequence on the device: xs = (float)src; xs = xs + ef (the
     * add kernel's dst + src); quantize; ef = xs - dq */
    if ((st = zero__dev_convert(d, xs, ZERO_DTYPE_F32, src, dt, cnt)) != ZERO_OK) return dev_failed(m, sd, st, fn, "convert");
    if ((st = zero__dev_add_into(d, xs, ZERO_DTYPE_F32, ef, ZERO_DTYPE_F32, cnt)) != ZERO_OK)
        return dev_failed(m, sd, st, fn, "add");
    if ((st = zero__dev_quantize(d, qd, xs, ZERO_DTYPE_F32, cnt, bits, block)) != ZERO_OK)
        return dev_failed(m, sd, st, fn, "quantize");
    if ((st = zero__dev_quant_residual(d, ef, xs, qd, cnt, bits, block)) != ZERO_OK)
        return dev_failed(m, sd, st, fn, "residual");
    return ZERO_OK;
}

zero_status zero__reduce_scatter_quantized(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                           zero_dtype dt, const zero_quant_spec *q) {
    static const char *fn = "reduce_scatter_quantized";
    int bits;
    size_t block;
    qside side;
    size_t all = 0, mine0 = 0;
    if (m && counts) {
        for (int r = 0; r < m->size; r++) all += counts[r];
        mine0 = counts[m->rank];
    }
    const void *ops[3] = {send, recv, q ? q->error_feedback : NULL};
    const size_t sizes[3] = {all, mine0, q && q->error_feedback ? all : 0};
    zero_status st = check_args(m, ops, sizes, 3, counts, dt, q, &bits, &block, &side, fn);
    if (st != ZERO_OK) return st;
    const int n = m->size, me = m->rank;
    const size_t es = zero__dtype_size(dt);
    size_t *v = calloc((size_t)4 * (size_t)n, sizeof *v);
    if (!v) return zero__error(m->engine, ZERO_ERR_OUT_OF_MEMORY, "reduce_scatter_quantized: out of memory");
    size_t *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n;
    size_t stotal = 0, cmax = 0;
    const size_t mine = counts[me], qmine = zero__quant_bytes(mine, bits, block);
    for (int r = 0; r < n; r++) {
        sc[r] = zero__quant_bytes(counts[r], bits, block);
        sd[r] = stotal;
        stotal += sc[r];
        rc[r] = qmine;
        rd[r] = (size_t)r * qmine;
        if (counts[r] > cmax) cmax = counts[r];
    }
    const size_t rtotal = (size_t)n * qmine, abytes = mine * sizeof(float);
    float *ef = q->error_feedback;
    const size_t xbytes = ef ? cmax * sizeof(float) : 0;
    uint8_t *sbuf = scratch_on(m, &side, stotal), *rbuf = scratch_on(m, &side, rtotal);
    float *acc = scratch_on(m, &side, abytes);
    float *xs = ef ? scratch_on(m, &side, xbytes) : NULL;
    if (!sbuf || !rbuf || !acc || (ef && !xs)) {
        st = zero__error(m->engine, ZERO_ERR_OUT_OF_MEMORY, "reduce_scatter_quantized: out of %s memory",
                         side.dev ? "device" : "host");
        goto out;
    }
    size_t at = 0;
    for (int r = 0; r < n && st == ZERO_OK; r++) {
        st = quantize_block(m, &side, sbuf + sd[r], (const char *)send + at * es, ef ? ef + at : NULL, xs, dt,
                            counts[r], bits, block);
        at += counts[r];
    }
    if (st == ZERO_OK && side.dev) st = before_collective(m, &side, fn);
    if (st != ZERO_OK) goto out;
    if ((st = zero__alltoallv_bytes(m, sbuf, sc, sd, rbuf, rc, rd)) != ZERO_OK) goto out;
    /* fp32 sum in rank order: the same order on every owner, every run */
    if (!side.dev) {
        memset(acc, 0, abytes);
        for (int r = 0; r < n; r++) zero__dequantize_add(acc, rbuf + rd[r], mine, bits, block);
        zero__convert(recv, dt, acc, ZERO_DTYPE_F32, mine);
    } else if (mine) {
        if ((st = zero__dev_memset(side.dev, acc, 0, abytes)) != ZERO_OK) st = dev_failed(m, &side, st, fn, "clear");
        for (int r = 0; r < n && st == ZERO_OK; r++)
            if ((st = zero__dev_dequantize_add(side.dev, acc, rbuf + rd[r], mine, bits, block)) != ZERO_OK)
                st = dev_failed(m, &side, st, fn, "dequantize_add");
        if (st == ZERO_OK && (st = zero__dev_convert(side.dev, recv, dt, acc, ZERO_DTYPE_F32, mine)) != ZERO_OK)
            st = dev_failed(m, &side, st, fn, "convert");
    }
out:
    if (side.dev) { /* also after a failure: nothing may still use the scratch */
        zero_status s2 = device_done(m, &side, fn);
        if (st == ZERO_OK) st = s2;
    }
    scratch_free_on(m, &side, sbuf, stotal);
    scratch_free_on(m, &side, rbuf, rtotal);
    scratch_free_on(m, &side, acc, abytes);
    scratch_free_on(m, &side, xs, xbytes);
    free(v);
    return st;
}
