/* See precision.h. */
#include "precision.h"

#include <stdint.h>
#include <string.h>

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t to_bf16(float f) {
    uint32_t u = bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static uint16_t to_f16(float f) {
    uint32_t u = bits(f), sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504: Inf */
    if (u >= 0x38800000u) {                                  /* normal */
        u += 0xfffu + ((u >> 13) & 1u);
        return (uint16_t)(sign | ((u - 0x38000000u) >> 13));
    }
    /* subnormal or zero: scale into the subnormal grid, fp32 rounds to nearest even */
    float a = from_bits(u) * 16777216.0f; /* * 2^24: units of the smallest subnormal */
    float r = a + 8388608.0f - 8388608.0f; /* RNE to an integer (|a| < 2^23) */
    return (uint16_t)(sign | (uint16_t)r);
}

static float from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) return (sign ? -1.0f : 1.0f) * (float)m * (1.0f / 16777216.0f);
    if (e == 31) return from_bits(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
    return from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

static float widen1(const void *in, zero_dtype dt, size_t i) {
    if (dt == ZERO_DTYPE_F32) return ((const float *)in)[i];
    uint16_t h = ((const uint16_t *)in)[i];
    return dt == ZERO_DTYPE_BF16 ? from_bits((uint32_t)h << 16) : from_f16(h);
}

static void narrow1(void *out, zero_dtype dt, size_t i, float v) {
    if (dt == ZERO_DTYPE_F32)
        ((float *)out)[i] = v;
    else
        ((uint16_t *)out)[i] = dt == ZERO_DTYPE_BF16 ? to_bf16(v) : to_f16(v);
}

void demo_widen(const void *in, zero_dtype dt, float *out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = widen1(in, dt, i);
}

void demo_add_rounded(void *dst, zero_dtype dt, const float *src, size_t n) {
    for (size_t i = 0; i < n; ++i) narrow1(dst, dt, i, widen1(dst, dt, i) + src[i]);
}

void demo_narrow(const float *src, void *dst, zero_dtype dt, size_t n) {
    for (size_t i = 0; i < n; ++i) narrow1(dst, dt, i, src[i]);
}
