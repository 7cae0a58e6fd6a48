/* bf16 <-> fp32 for test data: round to nearest even, finite values only
 * (no NaN quieting: test values are finite).  Header-only, like rel_l2.h,
 * so that tests linking zero_static and hosts linking libzero.so share it.
 * Pure. */
#ifndef ZERO_TESTS_BF16_H
#define ZERO_TESTS_BF16_H
#include <stdint.h>
#include <string.h>

static inline uint16_t th_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float th_from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
#endif
