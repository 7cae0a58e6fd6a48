/* AVX-512F step kernel: 16 elements per iteration, one pass per element
 * fusing unscale, update and copy-out.  Compiled with a per-function target
 * attribute (no -mavx512f on the command line), so the object links into a
 * build that runs on any x86-64; optim_dispatch.c calls it only after
 * cpuid says AVX-512F is there.  The loops are optim_step_simd.h, shared with
 * optim_step_avx2.c; this file gives them the 512-bit vocabulary.
 *
 * Bitwise equal to the scalar kernel: the same IEEE operations in the same
 * order as optim_math.h (mul, add, sqrt, div, no FMA: the source never asks
 * for one, and the project builds with -std=c11, under which GCC does not
 * contract mul+add into FMA; a -std=gnu11 build would allow it here, and
 * the bitwise variant tests would catch it), bf16 rounding by the
 * same integer steps, fp16 by vcvtps2ph with round-to-nearest-even, which
 * is what zero_f32_to_f16 implements (NaN quieting included).  The tail
 * (< 16 elements) and the kinds not vectorized here run the scalar kernel. */
#include "optim_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define ZERO_AVX512 __attribute__((target("avx512f")))
#define ZERO_AVX512_INLINE __attribute__((target("avx512f"), always_inline)) static inline

/* Copy-out kinds, as compile-time constants for the specialised loops. */
enum { OUT_NONE = 0, OUT_F32 = 1, OUT_BF16 = 2, OUT_F16 = 3 };

ZERO_AVX512_INLINE __m256i bf16x16(__m512 p) {
    const __m512i u = _mm512_castps_si512(p);
    const __m512i absu = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(absu, _mm512_set1_epi32(0x7f800000));
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    r = _mm512_srli_epi32(r, 16);
    r = _mm512_mask_blend_epi32(is_nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r); /* truncating narrow: values are <= 0xffff */
}

ZERO_AVX512_INLINE void store_out(void *out, int kind, size_t i, __m512 p) {
    if (kind == OUT_F32)
        _mm512_storeu_ps((float *)out + i, p);
    else if (kind == OUT_BF16)
        _mm256_storeu_si256((__m256i *)((uint16_t *)out + i), bf16x16(p));
    else if (kind == OUT_F16)
        _mm256_storeu_si256((__m256i *)((uint16_t *)out + i),
                            _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* The vector vocabulary of optim_step_simd.h: one intrinsic each. */
#define ZS_V __m512
#define ZS_W 16
#define ZS_FN ZERO_AVX512
#define ZS_INLINE ZERO_AVX512_INLINE
#define ZS_ENTRY zero__optim_step_avx512
#define ZS_SET1(x) _mm512_set1_ps(x)
#define ZS_LOAD(p) _mm512_loadu_ps(p)
#define ZS_STORE(p, v) _mm512_storeu_ps((p), (v))
#define ZS_ADD(x, y) _mm512_add_ps((x), (y))
#define ZS_SUB(x, y) _mm512_sub_ps((x), (y))
#define ZS_MUL(x, y) _mm512_mul_ps((x), (y))
#define ZS_DIV(x, y) _mm512_div_ps((x), (y))
#define ZS_SQRT(x) _mm512_sqrt_ps(x)
#include "optim_step_simd.h"

#else /* not x86: never selected (zero__simd_available says no) */
void zero__optim_step_avx512(const zero__step_args *a, size_t lo, size_t hi) { zero__optim_step_scalar(a, lo, hi); }
#endif
