/* AVX2 / AVX-512 versions of the sumsq block and the Inf/NaN scan.  Same
 * per-function target attributes and run-time selection as the step
 * kernels.  The sumsq block keeps the 32 fp64 lanes of optim_math.h in
 * registers (AVX-512: four zmm, AVX2: eight ymm; lane j holds the elements k
 * with k % 32 == j), does mul then add (never FMA) like the scalar code, and
 * ends in the shared zero__sumsq_finish, so it is bitwise equal to it.  Four
 * or eight independent accumulator chains outrun one core's memory
 * bandwidth, so the fixed order costs nothing. */
#include <stdint.h>

#include "optim_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

__attribute__((target("avx512f"))) double zero__sumsq_block_avx512(const float *x, size_t n) {
    __m512d a[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
    size_t i = 0;
    for (; i + ZERO_SUMSQ_LANES <= n; i += ZERO_SUMSQ_LANES)
        for (int r = 0; r < 4; ++r) {
            __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8 * r));
            a[r] = _mm512_add_pd(a[r], _mm512_mul_pd(d, d));
        }
    double acc[ZERO_SUMSQ_LANES];
    for (int r = 0; r < 4; ++r) _mm512_storeu_pd(acc + 8 * r, a[r]);
    return zero__sumsq_finish(acc, x + i, n - i);
}

__attribute__((target("avx2"))) double zero__sumsq_block_avx2(const float *x, size_t n) {
    __m256d a[8];
    for (int r = 0; r < 8; ++r) a[r] = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + ZERO_SUMSQ_LANES <= n; i += ZERO_SUMSQ_LANES)
        for (int r = 0; r < 8; ++r) {
            __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * r));
            a[r] = _mm256_add_pd(a[r], _mm256_mul_pd(d, d));
        }
    double acc[ZERO_SUMSQ_LANES];
    for (int r = 0; r < 8; ++r) _mm256_storeu_pd(acc + 4 * r, a[r]);
    return zero__sumsq_finish(acc, x + i, n - i);
}

__attribute__((target("avx512f"))) int zero__nonfinite_avx512(const float *x, size_t n) {
    const __m512i expo = _mm512_set1_epi32(0x7f800000);
    __mmask16 bad = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_loadu_si512((const void *)(x + i));
        bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, expo), expo);
    }
    return bad != 0 || zero__nonfinite_scalar(x + i, n - i);
}

__attribute__((target("avx2"))) int zero__nonfinite_avx2(const float *x, size_t n) {
    const __m256i expo = _mm256_set1_epi32(0x7f800000);
    __m256i bad = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(u, expo), expo));
    }
    return !_mm256_testz_si256(bad, bad) || zero__nonfinite_scalar(x + i, n - i);
}

#else /* not x86: never selected */
double zero__sumsq_block_avx512(const float *x, size_t n) { return zero__sumsq_block_scalar(x, n); }
double zero__sumsq_block_avx2(const float *x, size_t n) { return zero__sumsq_block_scalar(x, n); }
int zero__nonfinite_avx512(const float *x, size_t n) { return zero__nonfinite_scalar(x, n); }
int zero__nonfinite_avx2(const float *x, size_t n) { return zero__nonfinite_scalar(x, n); }
#endif
