/* Elementwise dtype conversion and accumulation between the model dtypes,
 * using optim_math.h's bit-exact RNE conversions.
 *
 * The loops are written once (CONVERT_LOOPS) and compiled three times:
 * baseline x86-64 / any CPU, AVX2 and AVX-512F (per-function target
 * attributes), and the variant is picked like the step kernels'
 * (zero__simd_active).  `omp simd` asks for vectorization regardless of
 * GCC's -O2 cost model, which otherwise leaves these loops scalar.  The
 * operations are integer bit manipulation and single fp32 adds, exact in
 * any vector width, so every variant gives the same bits. */
#include <string.h>

#include "optim_kernels.h"

#if defined(_OPENMP)
#define SIMD_LOOP _Pragma("omp simd")
#else
#define SIMD_LOOP
#endif

typedef struct convert_fns {
    void (*bf16_to_f32)(float *restrict d, const uint16_t *restrict s, size_t n);
    void (*f16_to_f32)(float *restrict d, const uint16_t *restrict s, size_t n);
    void (*f32_to_bf16)(uint16_t *restrict d, const float *restrict s, size_t n);
    void (*f32_to_f16)(uint16_t *restrict d, const float *restrict s, size_t n);
    void (*add_f32)(float *restrict d, const float *restrict s, size_t n);
    void (*add_bf16)(float *restrict d, const uint16_t *restrict s, size_t n);
    void (*add_f16)(float *restrict d, const uint16_t *restrict s, size_t n);
} convert_fns;

/* bf16 and fp32 loops, compiled for every variant. */
#define CONVERT_LOOPS(sfx, attr)                                                                      \
    attr static void bf16_to_f32_##sfx(float *restrict d, const uint16_t *restrict s, size_t n) {   \
        SIMD_LOOP for (size_t i = 0; i < n; ++i) d[i] = zero_bf16_to_f32(s[i]);                      \
    }                                                                                                 \
    attr static void f32_to_bf16_##sfx(uint16_t *restrict d, const float *restrict s, size_t n) {   \
        SIMD_LOOP for (size_t i = 0; i < n; ++i) d[i] = zero_f32_to_bf16(s[i]);                      \
    }                                                                                                 \
    attr static void add_f32_##sfx(float *restrict d, const float *restrict s, size_t n) {          \
        SIMD_LOOP for (size_t i = 0; i < n; ++i) d[i] += s[i];                                       \
    }                                                                                                 \
    attr static void add_bf16_##sfx(float *restrict d, const uint16_t *restrict s, size_t n) {      \
        SIMD_LOOP for (size_t i = 0; i < n; ++i) d[i] += zero_bf16_to_f32(s[i]);                     \
    }

/* fp16 in portable integer arithmetic (the SIMD variants use F16C below).
 * No SIMD_LOOP hint here: the conversion branches on subnormals, clang cannot
 * vectorize it and -Wpass-failed turns the ignored hint into an error. */
static void f16_to_f32_scalar(float *restrict d, const uint16_t *restrict s, size_t n) {
    for (size_t i = 0; i < n; ++i) d[i] = zero_f16_to_f32(s[i]);
}
static void f32_to_f16_scalar(uint16_t *restrict d, const float *restrict s, size_t n) {
    for (size_t i = 0; i < n; ++i) d[i] = zero_f32_to_f16(s[i]);
}
static void add_f16_scalar(float *restrict d, const uint16_t *restrict s, size_t n) {
    for (size_t i = 0; i < n; ++i) d[i] += zero_f16_to_f32(s[i]);
}

CONVERT_LOOPS(scalar, )
static const convert_fns fns_scalar = {bf16_to_f32_scalar, f16_to_f32_scalar, f32_to_bf16_scalar, f32_to_f16_scalar,
                                       add_f32_scalar,     add_bf16_scalar,   add_f16_scalar};
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
CONVERT_LOOPS(avx2, __attribute__((target("avx2"))))
CONVERT_LOOPS(avx512, __attribute__((target("avx512f"))))

/* fp16 has hardware conversions (F16C, and AVX-512F's 512-bit forms):
 * vcvtps2ph with round-to-nearest-even and vcvtph2ps are exactly what
 * zero_f32_to_f16 / zero_f16_to_f32 compute, NaN quieting included (the
 * step tests check this bit for bit), and far faster than the branchy
 * integer version, which GCC does not vectorize. */
#define F16_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define F16_LOOPS(sfx, attr, W, VF, VH, LOADH, STOREH, TOPS, TOPH, LOADF, STOREF, ADDF)       \
    attr static void f32_to_f16_hw_##sfx(uint16_t *restrict d, const float *restrict s, size_t n) { \
        size_t i = 0;                                                                         \
        for (; i + W <= n; i += W) STOREH((VH *)(d + i), TOPH(LOADF(s + i), F16_RNE));        \
        for (; i < n; ++i) d[i] = zero_f32_to_f16(s[i]);                                      \
    }                                                                                         \
    attr static void f16_to_f32_hw_##sfx(float *restrict d, const uint16_t *restrict s, size_t n) { \
        size_t i = 0;                                                                         \
        for (; i + W <= n; i += W) STOREF(d + i, TOPS(LOADH((const VH *)(s + i))));          \
        for (; i < n; ++i) d[i] = zero_f16_to_f32(s[i]);                                      \
    }                                                                                         \
    attr static void add_f16_hw_##sfx(float *restrict d, const uint16_t *restrict s, size_t n) {  \
        size_t i = 0;                                                                         \
        for (; i + W <= n; i += W)                                                            \
            STOREF(d + i, ADDF(LOADF(d + i), TOPS(LOADH((const VH *)(s + i)))));             \
        for (; i < n; ++i) d[i] += zero_f16_to_f32(s[i]);                                     \
    }
F16_LOOPS(avx2, __attribute__((target("avx2,f16c"))), 8, __m256, __m128i, _mm_loadu_si128, _mm_storeu_si128,
          _mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_add_ps)
F16_LOOPS(avx512, __attribute__((target("avx512f"))), 16, __m512, __m256i, _mm256_loadu_si256, _mm256_storeu_si256,
          _mm512_cvtph_ps, _mm512_cvtps_ph, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_add_ps)

static const convert_fns fns_avx2_f16c = {bf16_to_f32_avx2, f16_to_f32_hw_avx2, f32_to_bf16_avx2, f32_to_f16_hw_avx2,
                                          add_f32_avx2,     add_bf16_avx2,      add_f16_hw_avx2};
static const convert_fns fns_avx512_f16 = {bf16_to_f32_avx512, f16_to_f32_hw_avx512, f32_to_bf16_avx512,
                                           f32_to_f16_hw_avx512, add_f32_avx512, add_bf16_avx512,
                                           add_f16_hw_avx512};
#endif

static const convert_fns *fns(void) {
#if defined(__x86_64__) || defined(__i386__)
    switch (zero__simd_active()) {
    case ZERO__SIMD_AVX512: return &fns_avx512_f16;
    case ZERO__SIMD_AVX2: return &fns_avx2_f16c;
    default: break;
    }
#endif
    return &fns_scalar;
}

static size_t dtype_size(zero_dtype dt) {
    switch (dt) {
    case ZERO_DTYPE_F32: return 4;
    case ZERO_DTYPE_BF16:
    case ZERO_DTYPE_F16: return 2;
    default: return 0;
    }
}

/* 16-bit -> 16-bit goes through fp32 in bounded chunks: exact on the way
 * in, so there is only one rounding. */
#define CHUNK 1024

void zero__convert(void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt, size_t n) {
    if (!dst || !src || n == 0 || !dtype_size(dst_dt) || !dtype_size(src_dt)) return;
    if (dst_dt == src_dt) {
        if (dst != src) memmove(dst, src, n * dtype_size(dst_dt));
        return;
    }
    const convert_fns *f = fns();
    if (dst_dt == ZERO_DTYPE_F32) {
        (src_dt == ZERO_DTYPE_BF16 ? f->bf16_to_f32 : f->f16_to_f32)(dst, src, n);
        return;
    }
    void (*narrow)(uint16_t *restrict, const float *restrict, size_t) =
        dst_dt == ZERO_DTYPE_BF16 ? f->f32_to_bf16 : f->f32_to_f16;
    if (src_dt == ZERO_DTYPE_F32) {
        narrow(dst, src, n);
        return;
    }
    void (*widen)(float *restrict, const uint16_t *restrict, size_t) =
        src_dt == ZERO_DTYPE_BF16 ? f->bf16_to_f32 : f->f16_to_f32;
    float tmp[CHUNK];
    for (size_t lo = 0; lo < n; lo += CHUNK) {
        size_t len = n - lo < CHUNK ? n - lo : CHUNK;
        widen(tmp, (const uint16_t *)src + lo, len);
        narrow((uint16_t *)dst + lo, tmp, len);
    }
}

void zero__add_into(float *dst, const void *src, zero_dtype src_dt, size_t n) {
    if (!dst || !src || n == 0) return;
    const convert_fns *f = fns();
    switch (src_dt) {
    case ZERO_DTYPE_F32: f->add_f32(dst, src, n); break;
    case ZERO_DTYPE_BF16: f->add_bf16(dst, src, n); break;
    case ZERO_DTYPE_F16: f->add_f16(dst, src, n); break;
    default: break;
    }
}
