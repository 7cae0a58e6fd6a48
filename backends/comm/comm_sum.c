/* Local elementwise sums used by the ring reduce-scatter.  Plain loops the
 * compiler vectorises (restrict is not used: out may alias an input).
 * 16-bit sums (issue 14, communication_data_type): each addition widens both
 * operands to fp32, adds once and rounds to nearest even, with the
 * conversions of the shared per-element header (optim_math.h, through
 * kernels/cpu's vectorized zero__convert), so a ring hop rounds exactly once
 * and every host path that sums 16-bit values gets the same bits. */
#include <stdint.h>
#include <time.h>
#include "comm_internal.h"
#include "optim.h" /* zero__convert: the vectorized, bit-exact 16-bit conversions */

#define SUM_LOOP(T)                                         \
    do {                                                    \
        T *o = (T *)out;                                    \
        const T *x = (const T *)a, *y = (const T *)b;       \
        for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];  \
    } while (0)

int zero__comm_dtype_summable(zero_dtype dt) {
    return dt == ZERO_DTYPE_F32 || dt == ZERO_DTYPE_F64 || dt == ZERO_DTYPE_I64 || dt == ZERO_DTYPE_U64 ||
           dt == ZERO_DTYPE_U8 || dt == ZERO_DTYPE_BF16 || dt == ZERO_DTYPE_F16;
}

/* 16-bit sums in fp32 tiles: the vectorized conversions of kernels/cpu
 * (zero__convert, bit-exact RNE in every SIMD variant, F16C where present)
 * around one fp32 add per element.  Same bits as a scalar
 * round(widen(a) + widen(b)); several times faster than it for fp16. */
static void sum16(void *out, const void *a, const void *b, size_t n, zero_dtype dt) {
    enum { TILE = 1024 };
    float ta[TILE], tb[TILE];
    for (size_t i = 0; i < n; i += TILE) {
        const size_t k = n - i < TILE ? n - i : TILE;
        zero__convert(ta, ZERO_DTYPE_F32, (const uint16_t *)a + i, dt, k);
        zero__convert(tb, ZERO_DTYPE_F32, (const uint16_t *)b + i, dt, k);
        for (size_t j = 0; j < k; ++j) ta[j] += tb[j];
        zero__convert((uint16_t *)out + i, dt, ta, ZERO_DTYPE_F32, k);
    }
}

zero_status zero__comm_sum3(void *out, const void *a, const void *b, size_t n, zero_dtype dt) {
    switch (dt) {
    case ZERO_DTYPE_F32: SUM_LOOP(float); return ZERO_OK;
    case ZERO_DTYPE_F64: SUM_LOOP(double); return ZERO_OK;
    case ZERO_DTYPE_I64: SUM_LOOP(int64_t); return ZERO_OK;
    case ZERO_DTYPE_U64: SUM_LOOP(uint64_t); return ZERO_OK;
    case ZERO_DTYPE_BF16:
    case ZERO_DTYPE_F16: sum16(out, a, b, n, dt); return ZERO_OK;
    case ZERO_DTYPE_U8: {
        /* uint8 + uint8 promotes to int; wrap modulo 256 like MPI_UINT8_T sums. */
        uint8_t *o = (uint8_t *)out;
        const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
        for (size_t i = 0; i < n; ++i) o[i] = (uint8_t)(x[i] + y[i]);
        return ZERO_OK;
    }
    default: return ZERO_ERR_UNSUPPORTED;
    }
}

double zero__comm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
