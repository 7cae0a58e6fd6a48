/* Local elementwise sums used by the ring reduce-scatter.  Plain loops the
 * compiler vectorises (restrict is not used: out may alias an input). */
#include <stdint.h>
#include <time.h>
#include "comm_internal.h"

#define SUM_LOOP(T)                                         \
    do {                                                    \
        T *o = (T *)out;                                    \
        const T *x = (const T *)a, *y = (const T *)b;       \
        for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];  \
    } while (0)

int zero__comm_dtype_summable(zero_dtype dt) {
    return dt == ZERO_DTYPE_F32 || dt == ZERO_DTYPE_F64 || dt == ZERO_DTYPE_I64 || dt == ZERO_DTYPE_U64 ||
           dt == ZERO_DTYPE_U8;
}

zero_status zero__comm_sum3(void *out, const void *a, const void *b, size_t n, zero_dtype dt) {
    switch (dt) {
    case ZERO_DTYPE_F32: SUM_LOOP(float); return ZERO_OK;
    case ZERO_DTYPE_F64: SUM_LOOP(double); return ZERO_OK;
    case ZERO_DTYPE_I64: SUM_LOOP(int64_t); return ZERO_OK;
    case ZERO_DTYPE_U64: SUM_LOOP(uint64_t); return ZERO_OK;
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
