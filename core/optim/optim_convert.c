/* Elementwise dtype conversion and accumulation between the model dtypes,
 * using optim_math.h's bit-exact RNE conversions. */
#include <string.h>

#include "optim.h"

static size_t dtype_size(zero_dtype dt) {
    switch (dt) {
    case ZERO_DTYPE_F32: return 4;
    case ZERO_DTYPE_BF16:
    case ZERO_DTYPE_F16: return 2;
    default: return 0;
    }
}

static float load_f32(const void *src, zero_dtype dt, size_t i) {
    switch (dt) {
    case ZERO_DTYPE_BF16: return zero_bf16_to_f32(((const uint16_t *)src)[i]);
    case ZERO_DTYPE_F16: return zero_f16_to_f32(((const uint16_t *)src)[i]);
    default: return ((const float *)src)[i];
    }
}

void zero__convert(void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt, size_t n) {
    if (!dst || !src || n == 0 || !dtype_size(dst_dt) || !dtype_size(src_dt)) return;
    if (dst_dt == src_dt) {
        if (dst != src) memmove(dst, src, n * dtype_size(dst_dt));
        return;
    }
    /* Each case is a simple loop so it vectorizes; the 16-bit <-> 16-bit
     * case goes through fp32, which is exact on the way in, so there is
     * only one rounding. */
    if (dst_dt == ZERO_DTYPE_F32) {
        float *restrict d = dst;
        if (src_dt == ZERO_DTYPE_BF16) {
            const uint16_t *restrict s = src;
            for (size_t i = 0; i < n; ++i) d[i] = zero_bf16_to_f32(s[i]);
        } else {
            const uint16_t *restrict s = src;
            for (size_t i = 0; i < n; ++i) d[i] = zero_f16_to_f32(s[i]);
        }
    } else if (dst_dt == ZERO_DTYPE_BF16) {
        uint16_t *restrict d = dst;
        for (size_t i = 0; i < n; ++i) d[i] = zero_f32_to_bf16(load_f32(src, src_dt, i));
    } else {
        uint16_t *restrict d = dst;
        for (size_t i = 0; i < n; ++i) d[i] = zero_f32_to_f16(load_f32(src, src_dt, i));
    }
}

void zero__add_into(float *dst, const void *src, zero_dtype src_dt, size_t n) {
    if (!dst || !src || n == 0) return;
    float *restrict d = dst;
    switch (src_dt) {
    case ZERO_DTYPE_F32: {
        const float *restrict s = src;
        for (size_t i = 0; i < n; ++i) d[i] += s[i];
        break;
    }
    case ZERO_DTYPE_BF16: {
        const uint16_t *restrict s = src;
        for (size_t i = 0; i < n; ++i) d[i] += zero_bf16_to_f32(s[i]);
        break;
    }
    case ZERO_DTYPE_F16: {
        const uint16_t *restrict s = src;
        for (size_t i = 0; i < n; ++i) d[i] += zero_f16_to_f32(s[i]);
        break;
    }
    default: break;
    }
}
