/* AVX2 (+F16C) step kernel: 8 elements per iteration, one pass per element
 * fusing unscale, update and copy-out.  Compiled with a per-function target
 * attribute (no -mavx2 on the command line), so the object links into a
 * build that runs on any x86-64; optim_dispatch.c calls it only after
 * cpuid says AVX2 and F16C are there.  The loops are optim_step_simd.h,
 * shared with optim_step_avx512.c; this file gives them the 256-bit vocabulary.
 *
 * Bitwise equal to the scalar kernel: the same IEEE operations in the same
 * order as optim_math.h (mul, add, sqrt, div, no FMA: the target does not
 * enable "fma" so the compiler cannot contract either), bf16 rounding by the
 * same integer steps, fp16 by vcvtps2ph with round-to-nearest-even, which
 * is what zero_f32_to_f16 implements (NaN quieting included).  The tail
 * (< 8 elements) and the kinds not vectorized here run the scalar kernel. */
#include "optim_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define ZERO_AVX2 __attribute__((target("avx2,f16c")))
#define ZERO_AVX2_INLINE __attribute__((target("avx2,f16c"), always_inline)) static inline

/* Copy-out kinds, as compile-time constants for the specialised loops. */
enum { OUT_NONE = 0, OUT_F32 = 1, OUT_BF16 = 2, OUT_F16 = 3 };

ZERO_AVX2_INLINE __m128i bf16x8(__m256 p) {
    const __m256i u = _mm256_castps_si256(p);
    const __m256i absu = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i is_nan = _mm256_cmpgt_epi32(absu, _mm256_set1_epi32(0x7f800000));
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    r = _mm256_srli_epi32(r, 16);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), is_nan);
    /* values are <= 0xffff, so unsigned-saturating packing is exact */
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

ZERO_AVX2_INLINE void store_out(void *out, int kind, size_t i, __m256 p) {
    if (kind == OUT_F32)
        _mm256_storeu_ps((float *)out + i, p);
    else if (kind == OUT_BF16)
        _mm_storeu_si128((__m128i *)((uint16_t *)out + i), bf16x8(p));
    else if (kind == OUT_F16)
        _mm_storeu_si128((__m128i *)((uint16_t *)out + i),
                         _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* The vector vocabulary of optim_step_simd.h: one intrinsic each. */
#define ZS_V __m256
#define ZS_W 8
#define ZS_FN ZERO_AVX2
#define ZS_INLINE ZERO_AVX2_INLINE
#define ZS_ENTRY zero__optim_step_avx2
#define ZS_SET1(x) _mm256_set1_ps(x)
#define ZS_LOAD(p) _mm256_loadu_ps(p)
#define ZS_STORE(p, v) _mm256_storeu_ps((p), (v))
#define ZS_ADD(x, y) _mm256_add_ps((x), (y))
#define ZS_SUB(x, y) _mm256_sub_ps((x), (y))
#define ZS_MUL(x, y) _mm256_mul_ps((x), (y))
#define ZS_DIV(x, y) _mm256_div_ps((x), (y))
#define ZS_SQRT(x) _mm256_sqrt_ps(x)
#include "optim_step_simd.h"

#else /* not x86: never selected (zero__simd_available says no) */
void zero__optim_step_avx2(const zero__step_args *a, size_t lo, size_t hi) { zero__optim_step_scalar(a, lo, hi); }
#endif
