/* Reductions over fp32 arrays: sum of squares (for the gradient norm) and
 * the Inf/NaN check (for fp16 overflow).
 *
 * sumsq's order of summation depends on n only (see optim_kernels.h for
 * the per-block order).  Threads compute block sums into a small array and
 * one thread adds them in block order, so the result is bitwise identical
 * for any OMP_NUM_THREADS and any SIMD variant.  This file dispatches; the
 * variants are optim_reduce_scalar.c and optim_reduce_x86.c (which ends in
 * the scalar file's tail), as the step kernels are laid out. */
#include <stdint.h>
#include <string.h>

#include "optim_kernels.h"

typedef double (*block_fn)(const float *, size_t);
typedef int (*nonfinite_fn)(const float *, size_t);

static block_fn block_kernel(void) {
    switch (zero__simd_active()) {
    case ZERO__SIMD_AVX512: return zero__sumsq_block_avx512;
    case ZERO__SIMD_AVX2: return zero__sumsq_block_avx2;
    default: return zero__sumsq_block_scalar;
    }
}

static nonfinite_fn nonfinite_kernel(void) {
    switch (zero__simd_active()) {
    case ZERO__SIMD_AVX512: return zero__nonfinite_avx512;
    case ZERO__SIMD_AVX2: return zero__nonfinite_avx2;
    default: return zero__nonfinite_scalar;
    }
}

/* Block sums are produced in batches so the scratch array stays on the stack. */
#define SUMSQ_BATCH 1024

double zero__sumsq_f32(const float *x, size_t n) {
    if (!x || n == 0) return 0.0;
    block_fn blk = block_kernel();
    size_t nblocks = (n + ZERO_SUMSQ_BLOCK - 1) / ZERO_SUMSQ_BLOCK;
    zero__sumsq_tree tree = {{0}, {0}};
    double part[SUMSQ_BATCH];
#if defined(ZERO_HAVE_OPENMP)
    const int team = zero__optim_threads(); /* see optim_threads.c */
#endif
    for (size_t b0 = 0; b0 < nblocks; b0 += SUMSQ_BATCH) {
        long nb = (long)(nblocks - b0 < SUMSQ_BATCH ? nblocks - b0 : SUMSQ_BATCH);
#if defined(ZERO_HAVE_OPENMP)
        /* only worth a thread team for large arrays (see optim_dispatch.c) */
#pragma omp parallel for schedule(static) if (n >= ((size_t)1 << 18)) num_threads(team)
#endif
        for (long b = 0; b < nb; ++b) {
            size_t lo = (b0 + (size_t)b) * ZERO_SUMSQ_BLOCK;
            size_t len = n - lo < ZERO_SUMSQ_BLOCK ? n - lo : ZERO_SUMSQ_BLOCK;
            part[b] = blk(x + lo, len);
        }
        for (long b = 0; b < nb; ++b) zero__sumsq_tree_add(&tree, part[b]);
    }
    return zero__sumsq_tree_finish(&tree);
}

/* Level L holds the running sum of its current group; a full group moves up
 * as one value of level L+1.  12 levels of fan-in 64 cover 64^12 blocks. */
static void tree_push(zero__sumsq_tree *t, unsigned level, double v) {
    for (; level < 12; ++level) {
        t->acc[level] = t->count[level] ? t->acc[level] + v : v;
        if (++t->count[level] < ZERO_SUMSQ_FANIN) return;
        v = t->acc[level]; /* group complete: carry it up */
        t->count[level] = 0;
    }
}

void zero__sumsq_tree_add(zero__sumsq_tree *t, double block_sum) { tree_push(t, 0, block_sum); }

double zero__sumsq_tree_finish(zero__sumsq_tree *t) {
    /* Short groups end their level: each goes up as its level's last value.
     * A level's first value is taken as is (not 0.0 + v), so a level with a
     * single value passes it through unchanged. */
    unsigned top = 0;
    for (unsigned l = 0; l < 12; ++l)
        if (t->count[l]) top = l;
    for (unsigned l = 0; l < top; ++l)
        if (t->count[l]) {
            double v = t->acc[l];
            t->count[l] = 0;
            tree_push(t, l + 1, v);
        }
    /* top may have become a full group and carried once more */
    double r = 0.0;
    for (unsigned l = 0; l < 12; ++l)
        if (t->count[l]) r = t->acc[l];
    memset(t, 0, sizeof *t);
    return r;
}

int zero__nonfinite_f32(const float *x, size_t n) {
    if (!x) return 0;
    nonfinite_fn k = nonfinite_kernel();
    /* block by block so that an overflow is reported without reading the rest */
    for (size_t lo = 0; lo < n; lo += ZERO_SUMSQ_BLOCK) {
        size_t len = n - lo < ZERO_SUMSQ_BLOCK ? n - lo : ZERO_SUMSQ_BLOCK;
        if (k(x + lo, len)) return 1;
    }
    return 0;
}
