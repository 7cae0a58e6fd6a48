/* AVX-512F step kernel: 16 elements per iteration, one pass per element
 * fusing unscale, update and copy-out.  Compiled with a per-function target
 * attribute (no -mavx512f on the command line), so the object links into a
 * build that runs on any x86-64; optim_dispatch.c calls it only after
 * cpuid says AVX-512F is there.  Same structure as optim_step_avx2.c.
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

/* AdamW (decoupled) and Adam (L2) in one body; `adamw` and `l2` are
 * compile-time constants at each call site. */
ZERO_AVX512_INLINE size_t adam_loop(const zero__step_args *a, size_t lo, size_t hi, int adamw, int l2, int out_kind) {
    const zero_optim_scalars *s = &a->s;
    const __m512 gm = _mm512_set1_ps(a->grad_mul);
    const __m512 decay = _mm512_set1_ps(1.0f - s->lr * s->weight_decay);
    const __m512 wd = _mm512_set1_ps(s->weight_decay);
    const __m512 b1 = _mm512_set1_ps(s->beta1), omb1 = _mm512_set1_ps(1.0f - s->beta1);
    const __m512 b2 = _mm512_set1_ps(s->beta2), omb2 = _mm512_set1_ps(1.0f - s->beta2);
    const __m512 eps = _mm512_set1_ps(s->eps), lr = _mm512_set1_ps(s->lr);
    const __m512 bc1 = _mm512_set1_ps(s->bc1), bc2s = _mm512_set1_ps(s->bc2_sqrt);
    float *restrict pp = a->master, *restrict mp = a->state0, *restrict vp = a->state1;
    const float *restrict gp = a->grad;
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m512 g = _mm512_mul_ps(_mm512_loadu_ps(gp + i), gm);
        __m512 p = _mm512_loadu_ps(pp + i);
        if (l2) g = _mm512_add_ps(g, _mm512_mul_ps(wd, p));
        if (adamw) p = _mm512_mul_ps(p, decay);
        __m512 m = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(mp + i)), _mm512_mul_ps(omb1, g));
        __m512 v = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(vp + i)), _mm512_mul_ps(omb2, _mm512_mul_ps(g, g)));
        __m512 denom = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(v), bc2s), eps);
        p = _mm512_sub_ps(p, _mm512_div_ps(_mm512_mul_ps(lr, _mm512_mul_ps(m, bc1)), denom));
        _mm512_storeu_ps(pp + i, p);
        _mm512_storeu_ps(mp + i, m);
        _mm512_storeu_ps(vp + i, v);
        store_out(a->out, out_kind, i, p);
    }
    return i;
}

/* SGD; momentum / nesterov / first_step / decay are uniform per call. */
ZERO_AVX512_INLINE size_t sgd_loop(const zero__step_args *a, size_t lo, size_t hi, int out_kind) {
    const zero_optim_scalars *s = &a->s;
    const __m512 gm = _mm512_set1_ps(a->grad_mul), wd = _mm512_set1_ps(s->weight_decay);
    const __m512 mom = _mm512_set1_ps(s->momentum), lr = _mm512_set1_ps(s->lr);
    const int use_wd = s->weight_decay != 0.0f, use_mom = s->momentum != 0.0f;
    float *restrict pp = a->master, *restrict bp = a->state0;
    const float *restrict gp = a->grad;
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m512 p = _mm512_loadu_ps(pp + i);
        __m512 d = _mm512_mul_ps(_mm512_loadu_ps(gp + i), gm);
        if (use_wd) d = _mm512_add_ps(d, _mm512_mul_ps(wd, p));
        if (use_mom) {
            __m512 b = s->first_step ? d : _mm512_add_ps(_mm512_mul_ps(mom, _mm512_loadu_ps(bp + i)), d);
            _mm512_storeu_ps(bp + i, b);
            d = s->nesterov ? _mm512_add_ps(d, _mm512_mul_ps(mom, b)) : b;
        }
        p = _mm512_sub_ps(p, _mm512_mul_ps(lr, d));
        _mm512_storeu_ps(pp + i, p);
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

ZERO_AVX512 void zero__optim_step_avx512(const zero__step_args *a, size_t lo, size_t hi) {
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
void zero__optim_step_avx512(const zero__step_args *a, size_t lo, size_t hi) { zero__optim_step_scalar(a, lo, hi); }
#endif
