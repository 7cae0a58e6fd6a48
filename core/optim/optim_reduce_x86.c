/* AVX2 / AVX-512 versions of the sumsq block and the Inf/NaN scan.  Same
 * per-function target attributes and run-time selection as the step
 * kernels.  The sumsq block keeps the 32 fp64 lanes of optim_kernels.h in
 * registers (AVX-512: 4 x 8, AVX2: 8 x 4; lane j holds the elements k with
 * k % 32 == j), does mul then add (never FMA) like the scalar code, and
 * ends in the shared zero__sumsq_finish, so it is bitwise equal to it. */
#include <stdint.h>

#include "optim_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

__attribute__((target("avx512f"))) double zero__sumsq_block_avx512(const float *x, size_t n) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512d d0 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        __m512d d1 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
        __m512d d2 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 16));
        __m512d d3 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 24));
        a0 = _mm512_add_pd(a0, _mm512_mul_pd(d0, d0));
        a1 = _mm512_add_pd(a1, _mm512_mul_pd(d1, d1));
        a2 = _mm512_add_pd(a2, _mm512_mul_pd(d2, d2));
        a3 = _mm512_add_pd(a3, _mm512_mul_pd(d3, d3));
    }
    double acc[ZERO_SUMSQ_LANES];
    _mm512_storeu_pd(acc, a0);
    _mm512_storeu_pd(acc + 8, a1);
    _mm512_storeu_pd(acc + 16, a2);
    _mm512_storeu_pd(acc + 24, a3);
    return zero__sumsq_finish(acc, x + i, n - i);
}

__attribute__((target("avx2"))) double zero__sumsq_block_avx2(const float *x, size_t n) {
    __m256d a[8];
    for (int k = 0; k < 8; ++k) a[k] = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 8; ++k) {
            __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * k));
            a[k] = _mm256_add_pd(a[k], _mm256_mul_pd(d, d));
        }
    double acc[ZERO_SUMSQ_LANES];
    for (int k = 0; k < 8; ++k) _mm256_storeu_pd(acc + 4 * k, a[k]);
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
