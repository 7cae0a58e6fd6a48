/* AVX2 / AVX-512 versions of the sumsq block and the Inf/NaN scan.  Same
 * per-function target attributes and run-time selection as the step
 * kernels.  The sumsq block keeps the 8 fp64 lanes of optim_kernels.h in
 * registers (AVX-512: one zmm, AVX2: two ymm; lane j holds the elements k
 * with k % 8 == j), does mul then add (never FMA) like the scalar code, and
 * ends in the shared zero__sumsq_finish, so it is bitwise equal to it.  The
 * single accumulator chain (one add per 8 elements, 4-cycle latency) still
 * outruns one core's memory bandwidth, so the fixed order costs nothing. */
#include <stdint.h>

#include "optim_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

__attribute__((target("avx512f"))) double zero__sumsq_block_avx512(const float *x, size_t n) {
    __m512d acc8 = _mm512_setzero_pd();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        acc8 = _mm512_add_pd(acc8, _mm512_mul_pd(d, d));
    }
    double acc[ZERO_SUMSQ_LANES];
    _mm512_storeu_pd(acc, acc8);
    return zero__sumsq_finish(acc, x + i, n - i);
}

__attribute__((target("avx2"))) double zero__sumsq_block_avx2(const float *x, size_t n) {
    __m256d lo4 = _mm256_setzero_pd(), hi4 = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        __m256d b = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        lo4 = _mm256_add_pd(lo4, _mm256_mul_pd(a, a));
        hi4 = _mm256_add_pd(hi4, _mm256_mul_pd(b, b));
    }
    double acc[ZERO_SUMSQ_LANES];
    _mm256_storeu_pd(acc, lo4);
    _mm256_storeu_pd(acc + 4, hi4);
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
