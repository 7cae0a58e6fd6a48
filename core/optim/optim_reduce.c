/* Reductions over fp32 arrays: sum of squares (for the gradient norm) and
 * the Inf/NaN check (for fp16 overflow).
 *
 * sumsq's order of summation depends on n only: the array is cut into
 * blocks of ZERO_SUMSQ_BLOCK elements; inside a block, lane j (of 8)
 * accumulates elements i = j mod 8 in fp64, the lanes are combined as a
 * fixed tree, and the block sums are added in block order.  Threads compute
 * block sums into a small array and one thread adds them in order, so the
 * result is bitwise identical for any OMP_NUM_THREADS. */
#include <stdint.h>

#include "optim.h"

static double block_sumsq(const float *restrict x, size_t n) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += (double)x[i + j] * (double)x[i + j];
    for (int j = 0; i < n; ++i, ++j) acc[j] += (double)x[i] * (double)x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Block sums are produced in batches so the scratch array stays on the stack. */
#define SUMSQ_BATCH 256

double zero__sumsq_f32(const float *x, size_t n) {
    if (!x || n == 0) return 0.0;
    size_t nblocks = (n + ZERO_SUMSQ_BLOCK - 1) / ZERO_SUMSQ_BLOCK;
    double total = 0.0;
    double part[SUMSQ_BATCH];
    for (size_t b0 = 0; b0 < nblocks; b0 += SUMSQ_BATCH) {
        long nb = (long)(nblocks - b0 < SUMSQ_BATCH ? nblocks - b0 : SUMSQ_BATCH);
#if defined(ZERO_HAVE_OPENMP)
#pragma omp parallel for schedule(static) if (n > 4 * ZERO_SUMSQ_BLOCK)
#endif
        for (long b = 0; b < nb; ++b) {
            size_t lo = (b0 + (size_t)b) * ZERO_SUMSQ_BLOCK;
            size_t len = n - lo < ZERO_SUMSQ_BLOCK ? n - lo : ZERO_SUMSQ_BLOCK;
            part[b] = block_sumsq(x + lo, len);
        }
        for (long b = 0; b < nb; ++b) total += part[b];
    }
    return total;
}

int zero__nonfinite_f32(const float *x, size_t n) {
    if (!x) return 0;
    const uint32_t *restrict u = (const uint32_t *)x;
    /* An exponent field of all ones is Inf or NaN.  OR-reduce per block so
     * the loop vectorizes, and stop early once one is found. */
    for (size_t lo = 0; lo < n; lo += ZERO_SUMSQ_BLOCK) {
        size_t hi = n - lo < ZERO_SUMSQ_BLOCK ? n : lo + ZERO_SUMSQ_BLOCK;
        uint32_t bad = 0;
        for (size_t i = lo; i < hi; ++i) bad |= (uint32_t)((u[i] & 0x7f800000u) == 0x7f800000u);
        if (bad) return 1;
    }
    return 0;
}
