/* Scalar reductions: the sumsq block and the Inf/NaN scan, and the tail
 * every variant ends in (zero__sumsq_finish, zero__nonfinite_scalar).  Apart
 * from the dispatcher (optim_reduce.c) so that the SIMD variants
 * (optim_reduce_x86.c) and the dispatcher both depend on it and it on
 * neither (tools/check-loops.py). */
#include <stdint.h>

#include "optim_kernels.h"

double zero__sumsq_finish(double *acc, const float *tail, size_t n) {
    for (size_t j = 0; j < n; ++j) acc[j] += (double)tail[j] * (double)tail[j];
    return zero_sumsq_fold(acc);
}

double zero__sumsq_block_scalar(const float *x, size_t n) {
    double acc[ZERO_SUMSQ_LANES] = {0};
    size_t i = 0;
    for (; i + ZERO_SUMSQ_LANES <= n; i += ZERO_SUMSQ_LANES)
        for (size_t j = 0; j < ZERO_SUMSQ_LANES; ++j) acc[j] += (double)x[i + j] * (double)x[i + j];
    return zero__sumsq_finish(acc, x + i, n - i);
}

int zero__nonfinite_scalar(const float *x, size_t n) {
    const uint32_t *u = (const uint32_t *)x;
    uint32_t bad = 0;
    /* an exponent field of all ones is Inf or NaN; OR-reduce, no early exit */
    for (size_t i = 0; i < n; ++i) bad |= (uint32_t)((u[i] & 0x7f800000u) == 0x7f800000u);
    return bad != 0;
}
