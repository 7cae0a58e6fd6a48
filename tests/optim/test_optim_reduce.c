/* sumsq (fp64 accuracy, determinism across thread counts) and nonfinite. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(ZERO_HAVE_OPENMP)
#include <omp.h>
#endif

#include "check.h"
#include "optim.h"

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
    test_nonfinite();
    return check_finish();
}
