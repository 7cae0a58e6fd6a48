/* sumsq (fp64 accuracy, determinism across thread counts) and nonfinite. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(ZERO_HAVE_OPENMP)
#include <omp.h>
#endif

#include "check.h"
#include "optim.h"
#include "optim_kernels.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* Kahan-Babuska (Neumaier) sum in long double as the accuracy reference. */
static long double ref_sumsq(const float *x, size_t n) {
    long double s = 0, c = 0;
    for (size_t i = 0; i < n; ++i) {
        long double v = (long double)x[i] * x[i];
        long double t = s + v;
        c += fabsl(s) >= fabsl(v) ? (s - t) + v : (v - t) + s;
        s = t;
    }
    return s + c;
}

static void test_sumsq(void) {
    const size_t sizes[] = {0, 1, 7, 8, 9, ZERO_SUMSQ_BLOCK - 1, ZERO_SUMSQ_BLOCK + 3, 1000003};
    float *x = malloc(1000003 * sizeof(float));
    for (size_t i = 0; i < 1000003; ++i)
        x[i] = (float)((urand() - 0.5) * pow(10.0, (double)(i % 9) - 4)); /* spread of magnitudes */
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
        size_t n = sizes[k];
        double got = zero__sumsq_f32(x, n);
        long double want = ref_sumsq(x, n);
        double rel = want == 0 ? fabs(got) : fabs((double)((got - want) / want));
        CHECK(rel <= 1e-13, "n=%zu: sumsq %.17g vs %.17Lg (rel %g)", n, got, want, rel);
    }
    /* exact small case: 3^2 + 4^2 */
    float t[2] = {3, -4};
    CHECK(zero__sumsq_f32(t, 2) == 25.0, "3-4-5");
    /* values whose squares overflow fp32 are fine in fp64 */
    float big[2] = {FLT_MAX, FLT_MAX};
    CHECK(isfinite(zero__sumsq_f32(big, 2)), "no fp32 overflow");
#if defined(ZERO_HAVE_OPENMP)
    /* bitwise identical for any thread count */
    omp_set_num_threads(1);
    double one = zero__sumsq_f32(x, 1000003);
    omp_set_num_threads(2);
    double two = zero__sumsq_f32(x, 1000003);
    omp_set_num_threads(3);
    double three = zero__sumsq_f32(x, 1000003);
    CHECK(one == two && two == three, "thread-count dependent: %.17g %.17g %.17g", one, two, three);
#endif
    free(x);
}

/* The definition of the block-sum tree, written the obvious way: level by
 * level, groups of ZERO_SUMSQ_FANIN summed left to right, until one value. */
static double ref_tree(const double *v, size_t m) {
    if (m == 0) return 0.0;
    double *cur = malloc(m * sizeof *cur);
    memcpy(cur, v, m * sizeof *cur);
    while (m > 1) {
        size_t up = (m + ZERO_SUMSQ_FANIN - 1) / ZERO_SUMSQ_FANIN;
        for (size_t g = 0; g < up; ++g) {
            double a = cur[g * ZERO_SUMSQ_FANIN];
            for (size_t k = g * ZERO_SUMSQ_FANIN + 1; k < m && k < (g + 1) * ZERO_SUMSQ_FANIN; ++k) a += cur[k];
            cur[g] = a;
        }
        m = up;
    }
    double r = cur[0];
    free(cur);
    return r;
}

static void test_sumsq_tree(void) {
    /* The streaming combiner against the definition, for block counts
     * around every group edge of three levels; values spread over 30
     * binades so that any change of order changes the bits. */
    const size_t counts[] = {1, 2, 63, 64, 65, 127, 128, 129, 4095, 4096, 4097, 64 * 64 * 2 + 5, 262144, 262145};
    double *v = malloc(262145 * sizeof *v);
    for (size_t i = 0; i < 262145; ++i) v[i] = urand() * pow(2.0, (double)(i % 31) - 15);
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k) {
        zero__sumsq_tree t = {{0}, {0}};
        for (size_t i = 0; i < counts[k]; ++i) zero__sumsq_tree_add(&t, v[i]);
        double got = zero__sumsq_tree_finish(&t), want = ref_tree(v, counts[k]);
        CHECK(memcmp(&got, &want, sizeof got) == 0, "%zu block sums: tree %.17g, definition %.17g", counts[k], got, want);
    }
    free(v);
    /* zero__sumsq_f32 = the definition over its own block sums */
    enum { NB = 200 };
    float *x = malloc((size_t)NB * ZERO_SUMSQ_BLOCK * sizeof *x);
    for (size_t i = 0; i < (size_t)NB * ZERO_SUMSQ_BLOCK; ++i) x[i] = (float)((urand() - 0.5) * pow(10.0, (double)(i % 7) - 3));
    const size_t ns[] = {ZERO_SUMSQ_BLOCK * 64, ZERO_SUMSQ_BLOCK * 64 + 1, ZERO_SUMSQ_BLOCK * 130 - 5, (size_t)NB * ZERO_SUMSQ_BLOCK};
    double blk[NB];
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; ++k) {
        size_t n = ns[k], nb = (n + ZERO_SUMSQ_BLOCK - 1) / ZERO_SUMSQ_BLOCK;
        for (size_t b = 0; b < nb; ++b) {
            size_t lo = b * ZERO_SUMSQ_BLOCK, len = n - lo < ZERO_SUMSQ_BLOCK ? n - lo : ZERO_SUMSQ_BLOCK;
            blk[b] = zero__sumsq_block_scalar(x + lo, len);
        }
        double got = zero__sumsq_f32(x, n), want = ref_tree(blk, nb);
        CHECK(memcmp(&got, &want, sizeof got) == 0, "n=%zu: sumsq %.17g, definition %.17g", n, got, want);
    }
    free(x);
}

static void test_nonfinite(void) {
    enum { N = 10007 };
    float *x = malloc(N * sizeof(float));
    for (int i = 0; i < N; ++i) x[i] = (i % 2 ? -FLT_MAX : FLT_MAX) / (float)(1 + i % 3); /* huge but finite */
    CHECK_EQ_INT(zero__nonfinite_f32(x, N), 0);
    x[N - 1] = INFINITY;
    CHECK_EQ_INT(zero__nonfinite_f32(x, N), 1);
    CHECK_EQ_INT(zero__nonfinite_f32(x, N - 1), 0);
    x[N - 1] = 0;
    x[5000] = -NAN;
    CHECK_EQ_INT(zero__nonfinite_f32(x, N), 1);
    x[5000] = -INFINITY;
    CHECK_EQ_INT(zero__nonfinite_f32(x, N), 1);
    CHECK_EQ_INT(zero__nonfinite_f32(x, 0), 0);
    free(x);
}

int main(void) {
    test_sumsq();
    test_sumsq_tree();
    test_nonfinite();
    return check_finish();
}
