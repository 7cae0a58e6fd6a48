/* AVX2 (+F16C) step kernel: 8 elements per iteration, one pass per element
 * fusing unscale, update and copy-out.  Compiled with a per-function target
 * attribute (no -mavx2 on the command line), so the object links into a
 * build that runs on any x86-64; optim_dispatch.c calls it only after
 * cpuid says AVX2 and F16C are there.
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

/* AdamW (decoupled) and Adam (L2) in one body; `adamw` and `l2` are
 * compile-time constants at each call site. */
ZERO_AVX2_INLINE size_t adam_loop(const zero__step_args *a, size_t lo, size_t hi, int adamw, int l2, int out_kind) {
    const zero_optim_scalars *s = &a->s;
    const __m256 gm = _mm256_set1_ps(a->grad_mul);
    const __m256 decay = _mm256_set1_ps(1.0f - s->lr * s->weight_decay);
    const __m256 wd = _mm256_set1_ps(s->weight_decay);
    const __m256 b1 = _mm256_set1_ps(s->beta1), omb1 = _mm256_set1_ps(1.0f - s->beta1);
    const __m256 b2 = _mm256_set1_ps(s->beta2), omb2 = _mm256_set1_ps(1.0f - s->beta2);
    const __m256 eps = _mm256_set1_ps(s->eps), lr = _mm256_set1_ps(s->lr);
    const __m256 bc1 = _mm256_set1_ps(s->bc1), bc2s = _mm256_set1_ps(s->bc2_sqrt);
    float *restrict pp = a->master, *restrict mp = a->state0, *restrict vp = a->state1;
    const float *restrict gp = a->grad;
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 g = _mm256_mul_ps(_mm256_loadu_ps(gp + i), gm);
        __m256 p = _mm256_loadu_ps(pp + i);
        if (l2) g = _mm256_add_ps(g, _mm256_mul_ps(wd, p));
        if (adamw) p = _mm256_mul_ps(p, decay);
        __m256 m = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(mp + i)), _mm256_mul_ps(omb1, g));
        __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(vp + i)), _mm256_mul_ps(omb2, _mm256_mul_ps(g, g)));
        __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), bc2s), eps);
        p = _mm256_sub_ps(p, _mm256_div_ps(_mm256_mul_ps(lr, _mm256_mul_ps(m, bc1)), denom));
        _mm256_storeu_ps(pp + i, p);
        _mm256_storeu_ps(mp + i, m);
        _mm256_storeu_ps(vp + i, v);
        store_out(a->out, out_kind, i, p);
    }
    return i;
}

/* SGD; momentum / nesterov / first_step / decay are uniform per call. */
ZERO_AVX2_INLINE size_t sgd_loop(const zero__step_args *a, size_t lo, size_t hi, int out_kind) {
    const zero_optim_scalars *s = &a->s;
    const __m256 gm = _mm256_set1_ps(a->grad_mul), wd = _mm256_set1_ps(s->weight_decay);
    const __m256 mom = _mm256_set1_ps(s->momentum), lr = _mm256_set1_ps(s->lr);
    const int use_wd = s->weight_decay != 0.0f, use_mom = s->momentum != 0.0f;
    float *restrict pp = a->master, *restrict bp = a->state0;
    const float *restrict gp = a->grad;
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 p = _mm256_loadu_ps(pp + i);
        __m256 d = _mm256_mul_ps(_mm256_loadu_ps(gp + i), gm);
        if (use_wd) d = _mm256_add_ps(d, _mm256_mul_ps(wd, p));
        if (use_mom) {
            __m256 b = s->first_step ? d : _mm256_add_ps(_mm256_mul_ps(mom, _mm256_loadu_ps(bp + i)), d);
            _mm256_storeu_ps(bp + i, b);
            d = s->nesterov ? _mm256_add_ps(d, _mm256_mul_ps(mom, b)) : b;
        }
        p = _mm256_sub_ps(p, _mm256_mul_ps(lr, d));
        _mm256_storeu_ps(pp + i, p);
        store_out(a->out, out_kind, i, p);
    }
    return i;
}

static int out_kind_of(const zero__step_args *a) {
    if (!a->out) return OUT_NONE;
    switch (a->out_dt) {
    case ZERO_DTYPE_F32: return a->out == (void *)a->master ? OUT_NONE : OUT_F32;
    case ZERO_DTYPE_BF16: return OUT_BF16;
    case ZERO_DTYPE_F16: return OUT_F16;
    default: return OUT_NONE;
    }
}

/* Expand a loop for each copy-out kind so each gets its own tight code. */
#define BY_OUT(call_with_kind)                                      \
    switch (ok) {                                                   \
    case OUT_F32: done = call_with_kind(OUT_F32); break;            \
    case OUT_BF16: done = call_with_kind(OUT_BF16); break;          \
    case OUT_F16: done = call_with_kind(OUT_F16); break;            \
    default: done = call_with_kind(OUT_NONE); break;                \
    }

ZERO_AVX2 void zero__optim_step_avx2(const zero__step_args *a, size_t lo, size_t hi) {
    const int ok = out_kind_of(a);
    const int l2 = a->s.weight_decay != 0.0f;
    size_t done = lo;
    switch (a->kind) {
    case ZERO_OPTIM_ADAMW:
#define ADAMW(k) adam_loop(a, lo, hi, 1, 0, k)
        BY_OUT(ADAMW)
        break;
    case ZERO_OPTIM_ADAM:
        if (l2) {
#define ADAM_L2(k) adam_loop(a, lo, hi, 0, 1, k)
            BY_OUT(ADAM_L2)
        } else {
#define ADAM_NOWD(k) adam_loop(a, lo, hi, 0, 0, k)
            BY_OUT(ADAM_NOWD)
        }
        break;
    case ZERO_OPTIM_SGD:
#define SGD(k) sgd_loop(a, lo, hi, k)
        BY_OUT(SGD)
        break;
    default: break; /* Lion, Adagrad: scalar below */
    }
    if (done < hi) zero__optim_step_scalar(a, done, hi);
}

#else /* not x86: never selected (zero__simd_available says no) */
void zero__optim_step_avx2(const zero__step_args *a, size_t lo, size_t hi) { zero__optim_step_scalar(a, lo, hi); }
#endif
