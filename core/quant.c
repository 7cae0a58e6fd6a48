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
    for (size_t i = 0; i < n; i++) acc[i] += value_at(scales, data, i, bits, block);
}

/* ---- collectives --------------------------------------------------------- */

static zero_status check_args(zero_comm *m, const void *a, const void *b, const size_t *counts, zero_dtype dt,
                              const zero_quant_spec *q, int *bits, size_t *block, const char *fn) {
    struct zero_engine *e = m ? m->engine : NULL;
    if (!m || !counts) return ZERO_ERR_INVALID_ARGUMENT;
    if (dt != ZERO_DTYPE_F32 && dt != ZERO_DTYPE_BF16 && dt != ZERO_DTYPE_F16)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: dtype %d is not F32, BF16 or F16", fn, (int)dt);
    if (zero__quant_resolve(q, bits, block) != 0)
        return zero__error(e, ZERO_ERR_INVALID_ARGUMENT, "%s: quantization spec missing or bits not 8 or 4", fn);
    if (e && e->dev && (zero__dev_is_device(e->dev, a) || zero__dev_is_device(e->dev, b)))
        return zero__error(e, ZERO_ERR_UNSUPPORTED, "%s: device buffers are not supported (host kernels only)", fn);
    return ZERO_OK;
}

/* Scratch accounted as communication scratch (ZERO_MEM_OTHER, host). */
static void *scratch(zero_comm *m, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (p && m->engine) zero__engine_note_scratch(m->engine, ZERO_TIER_HOST, (int64_t)bytes);
    return p;
}
static void scratch_free(zero_comm *m, void *p, size_t bytes) {
    if (!p) return;
    free(p);
    if (m->engine) zero__engine_note_scratch(m->engine, ZERO_TIER_HOST, -(int64_t)bytes);
}

zero_status zero__allgather_quantized(zero_comm *m, void *recv, const size_t *counts, zero_dtype dt,
                                      const zero_quant_spec *q) {
    int bits;
    size_t block;
    zero_status st = check_args(m, recv, recv, counts, dt, q, &bits, &block, "allgather_quantized");
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
    uint8_t *buf = scratch(m, total);
    if (!buf) {
        free(qc);
        return zero__error(m->engine, ZERO_ERR_OUT_OF_MEMORY, "allgather_quantized: out of memory");
    }
    zero__quantize(buf + qoff_me, (const char *)recv + off_me * es, dt, counts[me], bits, block);
    zero_comm_req *req = NULL;
    st = zero__iallgatherv(m, buf + qoff_me, buf, qc, ZERO_DTYPE_U8, &req);
    if (st == ZERO_OK) st = zero__comm_wait(req);
    if (st == ZERO_OK) { /* every block, our own included: all ranks hold the same values */
        size_t at = 0, qat = 0;
        for (int r = 0; r < n; r++) {
            zero__dequantize((char *)recv + at * es, dt, buf + qat, counts[r], bits, block);
            at += counts[r];
            qat += qc[r];
        }
    }
    scratch_free(m, buf, total);
    free(qc);
    return st;
}

zero_status zero__reduce_scatter_quantized(zero_comm *m, const void *send, void *recv, const size_t *counts,
                                           zero_dtype dt, const zero_quant_spec *q) {
    int bits;
    size_t block;
    zero_status st = check_args(m, send, recv, counts, dt, q, &bits, &block, "reduce_scatter_quantized");
    if (st != ZERO_OK) return st;
    const int n = m->size, me = m->rank;
    const size_t es = zero__dtype_size(dt);
    size_t *v = calloc((size_t)4 * (size_t)n, sizeof *v);
    if (!v) return zero__error(m->engine, ZERO_ERR_OUT_OF_MEMORY, "reduce_scatter_quantized: out of memory");
    size_t *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n;
    size_t stotal = 0;
    const size_t mine = counts[me], qmine = zero__quant_bytes(mine, bits, block);
    for (int r = 0; r < n; r++) {
        sc[r] = zero__quant_bytes(counts[r], bits, block);
        sd[r] = stotal;
        stotal += sc[r];
        rc[r] = qmine;
        rd[r] = (size_t)r * qmine;
    }
    const size_t rtotal = (size_t)n * qmine, abytes = mine * sizeof(float);
    uint8_t *sbuf = scratch(m, stotal), *rbuf = scratch(m, rtotal);
    float *acc = scratch(m, abytes);
    if (!sbuf || !rbuf || !acc) {
        st = zero__error(m->engine, ZERO_ERR_OUT_OF_MEMORY, "reduce_scatter_quantized: out of memory");
        goto out;
    }
    float *ef = q->error_feedback;
    size_t at = 0;
    for (int r = 0; r < n; r++) {
        if (ef) { /* x = send + carried error; quantize x; carry x - dq(q(x)) */
            float tmpd[256];
            const char *src = (const char *)send + at * es;
            uint8_t *qd = sbuf + sd[r];
            float *xs = malloc((counts[r] ? counts[r] : 1) * sizeof *xs);
            if (!xs) {
                st = zero__error(m->engine, ZERO_ERR_OUT_OF_MEMORY, "reduce_scatter_quantized: out of memory");
                goto out;
            }
            zero__convert(xs, ZERO_DTYPE_F32, src, dt, counts[r]);
            for (size_t i = 0; i < counts[r]; i++) xs[i] += ef[at + i];
            zero__quantize(qd, xs, ZERO_DTYPE_F32, counts[r], bits, block);
            for (size_t lo = 0; lo < counts[r]; lo += 256) { /* the residual, in slices */
                size_t k = counts[r] - lo < 256 ? counts[r] - lo : 256;
                zero__dequantize_range(tmpd, qd, counts[r], lo, k, bits, block);
                for (size_t i = 0; i < k; i++) ef[at + lo + i] = xs[lo + i] - tmpd[i];
            }
            free(xs);
        } else {
            zero__quantize(sbuf + sd[r], (const char *)send + at * es, dt, counts[r], bits, block);
        }
        at += counts[r];
    }
    if ((st = zero__alltoallv_bytes(m, sbuf, sc, sd, rbuf, rc, rd)) != ZERO_OK) goto out;
    /* fp32 sum in rank order: the same order on every owner, every run */
    memset(acc, 0, abytes);
    for (int r = 0; r < n; r++) zero__dequantize_add(acc, rbuf + rd[r], mine, bits, block);
    zero__convert(recv, dt, acc, ZERO_DTYPE_F32, mine);
out:
    scratch_free(m, sbuf, stotal);
    scratch_free(m, rbuf, rtotal);
    scratch_free(m, acc, abytes);
    free(v);
    (void)es;
    return st;
}
