/* Every hand-vectorized step kernel against the scalar reference kernel.
 *
 * Tolerance: none, the results must be bitwise identical.  The variants
 * execute the same IEEE-754 single-precision operations in the same order
 * (no FMA, exact sqrt and division rather than rsqrt/rcp approximations),
 * and IEEE makes each of those correctly rounded, so there is nothing to
 * tolerate; bf16/fp16 copy-out is integer arithmetic or vcvtps2ph with RNE,
 * both exact by construction.  The one exception is NaN payloads, which
 * depend on operand order: a NaN must match a NaN, any NaN.
 *
 * Inputs cover denormals, zeros in v (and zero gradients: sqrt(0)+eps),
 * huge gradients (g*g overflows to Inf), tiny ones (g*g underflows), Inf
 * and NaN gradients, every optimizer kind and copy-out dtype, lengths that
 * leave every possible vector tail, and unaligned starts.
 *
 * Usage: test_optim_simd [scalar|avx2|avx512] -- with an argument, also
 * checks that ZERO_SIMD=<arg> selects that variant (or falls back when the
 * CPU lacks it). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(ZERO_HAVE_OPENMP)
#include <omp.h>
#endif

#include "check.h"
#include "optim_kernels.h"

static uint64_t rng = 0xD1B54A32D192ED03ull;
static uint32_t rnd32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float urand(void) { return (float)(rnd32() >> 8) / 16777216.0f; } /* [0,1) */

static float special_grad(void) {
    switch (rnd32() % 16) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return zero_bits_f32(rnd32() & 0x807fffffu);         /* denormal */
    case 3: return (urand() - 0.5f) * 1e30f;                      /* g*g overflows */
    case 4: return (urand() - 0.5f) * 1e-30f;                     /* g*g underflows */
    case 5: return (urand() - 0.5f) * 3e38f;                      /* near FLT_MAX */
    case 6: return rnd32() % 64 == 0 ? INFINITY : 1.0f;
    case 7: return rnd32() % 64 == 0 ? NAN : -1.0f;
    default: return (urand() - 0.5f) * 4.0f;
    }
}

static float special_state(int nonneg) {
    float x;
    switch (rnd32() % 8) {
    case 0: x = 0.0f; break;
    case 1: x = zero_bits_f32(rnd32() & 0x007fffffu); break;      /* denormal */
    case 2: x = urand() * 1e-20f; break;
    default: x = urand() * 0.1f; break;
    }
    return nonneg || (rnd32() & 1) ? x : -x;
}

/* Bitwise compare, NaN matching any NaN. */
static size_t mismatches_f32(const float *a, const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i)
        if (isnan(a[i]) ? !isnan(b[i]) : zero_f32_bits(a[i]) != zero_f32_bits(b[i])) ++bad;
    return bad;
}
static size_t mismatches_16(const uint16_t *a, const uint16_t *b, size_t n, zero_dtype dt) {
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
        int nan_a = dt == ZERO_DTYPE_BF16 ? ((a[i] & 0x7f80) == 0x7f80 && (a[i] & 0x7f))
                                          : ((a[i] & 0x7c00) == 0x7c00 && (a[i] & 0x3ff));
        int nan_b = dt == ZERO_DTYPE_BF16 ? ((b[i] & 0x7f80) == 0x7f80 && (b[i] & 0x7f))
                                          : ((b[i] & 0x7c00) == 0x7c00 && (b[i] & 0x3ff));
        if (nan_a ? !nan_b : a[i] != b[i]) ++bad;
    }
    return bad;
}

/* Weights that sit on the rounding edges of the copy-out: exact bf16 and
 * fp16 ties (both parities), the fp16 overflow midpoint, fp16 subnormal
 * ties, NaN (signalling and quiet), Inf, denormals. */
static float edge_weight(void) {
    uint32_t r = rnd32();
    uint32_t hi = (r & 0x80000000u) | ((0x70u + (r >> 8) % 0x1e) << 23) | (r & 0x007f0000u);
    switch (r % 12) {
    case 0: return zero_bits_f32(hi | 0x8000u);                     /* bf16 tie */
    case 1: return zero_bits_f32(hi | 0x7fffu);                     /* just below a bf16 tie */
    case 2: return zero_bits_f32((hi & 0xffffe000u) | 0x1000u);     /* fp16 tie (normal range) */
    case 3: return zero_bits_f32(0x33000000u + (r % 5) * 0x00800000u); /* fp16 subnormal ties */
    case 4: return (r & 1) ? 65520.0f : -65519.996f;               /* fp16 overflow midpoint */
    case 5: return zero_bits_f32(0x7f800001u | (r & 0x80000000u));  /* signalling NaN */
    case 6: return (r & 1) ? INFINITY : -INFINITY;
    case 7: return zero_bits_f32(r & 0x807fffffu);                  /* denormal */
    case 8: return zero_bits_f32(0x7f7f8000u | (r & 0x80000000u));  /* bf16 tie below FLT_MAX */
    default: return (urand() - 0.5f) * 2.0f;
    }
}

/* Copy-out alone: SGD with lr 0 keeps every weight, so the outputs are the
 * conversions of exactly these edge values. */
static void test_copy_out_edges(zero__simd v) {
    enum { N = 4096 + 13 };
    static float p[2][N], g[N], o32[2][N];
    static uint16_t o16[2][N];
    for (size_t i = 0; i < N; ++i) {
        p[0][i] = p[1][i] = edge_weight();
        g[i] = 0.0f;
    }
    zero_optim_scalars s = zero__optim_scalars(ZERO_OPTIM_SGD, 0.0, 0, 0, 0, 0, 0, 0, 0, 1);
    const zero_dtype dts[3] = {ZERO_DTYPE_F32, ZERO_DTYPE_BF16, ZERO_DTYPE_F16};
    for (int d = 0; d < 3; ++d) {
        for (int k = 0; k < 2; ++k) {
            void *out = dts[d] == ZERO_DTYPE_F32 ? (void *)o32[k] : (void *)o16[k];
            zero__optim_step_variant(k ? v : ZERO__SIMD_SCALAR, ZERO_OPTIM_SGD, &s, p[k], NULL, g, 1.0f, out, dts[d], N);
        }
        size_t bad = dts[d] == ZERO_DTYPE_F32 ? mismatches_f32(o32[0], o32[1], N) : 0;
        if (dts[d] != ZERO_DTYPE_F32)
            for (size_t i = 0; i < N; ++i) bad += o16[0][i] != o16[1][i]; /* same NaN bits too */
        CHECK(bad == 0, "%s copy-out edges, dtype %d: %zu mismatches", zero__simd_name(v), (int)dts[d], bad);
    }
}

typedef struct opt_case {
    const char *name;
    zero_optim_kind kind;
    double lr, b1, b2, eps, wd, mom;
    int nesterov, bias_correction;
} opt_case;

static const opt_case cases[] = {
    {"adamw", ZERO_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0, 0, 1},
    {"adamw-nobc-nowd", ZERO_OPTIM_ADAMW, 1e-2, 0.8, 0.95, 1e-6, 0.0, 0, 0, 0},
    {"adam-l2", ZERO_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0.05, 0, 0, 1},
    {"adam", ZERO_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0.0, 0, 0, 1},
    {"sgd", ZERO_OPTIM_SGD, 0.1, 0, 0, 0, 0.0, 0.0, 0, 0},
    {"sgd-mom-wd", ZERO_OPTIM_SGD, 0.1, 0, 0, 0, 1e-4, 0.9, 0, 0},
    {"sgd-nesterov", ZERO_OPTIM_SGD, 0.1, 0, 0, 0, 0.0, 0.9, 1, 0},
    {"lion", ZERO_OPTIM_LION, 1e-4, 0.9, 0.99, 0, 0.1, 0, 0, 0},
    {"adagrad", ZERO_OPTIM_ADAGRAD, 1e-2, 0, 0, 1e-10, 0.01, 0, 0, 0},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* One variant vs scalar on n elements starting at offset `off` into the
 * buffers (unaligned starts), over two steps (SGD's first and later step). */
static void compare_variant(zero__simd v, const opt_case *c, zero_dtype out_dt, int with_out, size_t n, size_t off) {
    size_t tot = n + off;
    float *p[2], *m[2], *w[2], *g = malloc(tot * sizeof(float));
    uint16_t *o16[2];
    float *o32[2];
    for (int k = 0; k < 2; ++k) {
        p[k] = malloc(tot * sizeof(float));
        m[k] = malloc(tot * sizeof(float));
        w[k] = malloc(tot * sizeof(float));
        o16[k] = calloc(tot, sizeof(uint16_t));
        o32[k] = calloc(tot, sizeof(float));
    }
    for (size_t i = 0; i < tot; ++i) {
        float pv = rnd32() % 8 == 0 ? edge_weight() : (urand() - 0.5f) * 2.0f;
        float mv = special_state(0), vv = special_state(1);
        p[0][i] = p[1][i] = pv;
        m[0][i] = m[1][i] = mv;
        w[0][i] = w[1][i] = vv;
    }
    const zero__simd which[2] = {ZERO__SIMD_SCALAR, v};
    for (uint64_t t = 1; t <= 2; ++t) {
        for (size_t i = 0; i < tot; ++i) g[i] = special_grad();
        float gm = t == 1 ? 1.0f / 1024.0f : 3.0f;
        zero_optim_scalars s = zero__optim_scalars(c->kind, c->lr, c->b1, c->b2, c->eps, c->wd, c->mom,
                                                   c->nesterov, c->bias_correction, t);
        for (int k = 0; k < 2; ++k) {
            float *st[2] = {m[k] + off, w[k] + off};
            void *out = !with_out ? NULL : out_dt == ZERO_DTYPE_F32 ? (void *)(o32[k] + off) : (void *)(o16[k] + off);
            zero__optim_step_variant(which[k], c->kind, &s, p[k] + off, st, g + off, gm, out, out_dt, n);
        }
    }
    size_t bad = mismatches_f32(p[0], p[1], tot) + mismatches_f32(m[0], m[1], tot) + mismatches_f32(w[0], w[1], tot);
    if (with_out)
        bad += out_dt == ZERO_DTYPE_F32 ? mismatches_f32(o32[0], o32[1], tot) : mismatches_16(o16[0], o16[1], tot, out_dt);
    CHECK(bad == 0, "%s vs scalar, %s, out %d/%d, n=%zu off=%zu: %zu mismatches", zero__simd_name(v), c->name,
          with_out, (int)out_dt, n, off, bad);
    for (int k = 0; k < 2; ++k) free(p[k]), free(m[k]), free(w[k]), free(o16[k]), free(o32[k]);
    free(g);
}

static void test_variants(void) {
    const size_t sizes[] = {1, 15, 16, 17, 33, 1000, 4099};
    int tested = 0;
    for (int vi = 1; vi < ZERO__SIMD_COUNT; ++vi) {
        zero__simd v = (zero__simd)vi;
        if (!zero__simd_available(v)) {
            printf("SKIP variant %s: not supported by this CPU\n", zero__simd_name(v));
            continue;
        }
        ++tested;
        test_copy_out_edges(v);
        for (size_t ci = 0; ci < NCASES; ++ci)
            for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); ++si) {
                size_t off = si % 3; /* 0, 1, 2 elements: unaligned starts */
                compare_variant(v, &cases[ci], ZERO_DTYPE_F32, 0, sizes[si], off);
                compare_variant(v, &cases[ci], ZERO_DTYPE_F32, 1, sizes[si], off);
                compare_variant(v, &cases[ci], ZERO_DTYPE_BF16, 1, sizes[si], off);
                compare_variant(v, &cases[ci], ZERO_DTYPE_F16, 1, sizes[si], off);
            }
    }
    printf("%d SIMD variant(s) checked against scalar\n", tested);
    CHECK(zero__simd_available(ZERO__SIMD_SCALAR), "scalar always available");
}

/* Reductions: every variant's sumsq block equals the scalar one bitwise
 * (same 32-lane order), and the Inf/NaN scans agree, at every tail length. */
static void test_reductions(void) {
    static float x[ZERO_SUMSQ_BLOCK];
    for (size_t i = 0; i < ZERO_SUMSQ_BLOCK; ++i)
        x[i] = rnd32() % 8 == 0 ? zero_bits_f32(rnd32() & 0x807fffffu) : (urand() - 0.5f) * (float)(1 + i % 1000);
    typedef double (*blk)(const float *, size_t);
    typedef int (*nf)(const float *, size_t);
    const blk blks[ZERO__SIMD_COUNT] = {zero__sumsq_block_scalar, zero__sumsq_block_avx2, zero__sumsq_block_avx512};
    const nf nfs[ZERO__SIMD_COUNT] = {zero__nonfinite_scalar, zero__nonfinite_avx2, zero__nonfinite_avx512};
    for (int v = 1; v < ZERO__SIMD_COUNT; ++v) {
        if (!zero__simd_available((zero__simd)v)) continue;
        size_t bad = 0;
        for (size_t n = 0; n <= 100; ++n) bad += blks[0](x, n) != blks[v](x, n);
        bad += blks[0](x, ZERO_SUMSQ_BLOCK) != blks[v](x, ZERO_SUMSQ_BLOCK);
        bad += blks[0](x + 3, ZERO_SUMSQ_BLOCK - 7) != blks[v](x + 3, ZERO_SUMSQ_BLOCK - 7);
        CHECK(bad == 0, "%s sumsq block: %zu mismatches", zero__simd_name((zero__simd)v), bad);
        bad = 0;
        for (size_t pos = 0; pos < 70; ++pos) {
            float keep = x[pos];
            x[pos] = pos % 2 ? INFINITY : -NAN;
            for (size_t n = 0; n <= 70; ++n) {
                int want = n > pos;
                bad += nfs[0](x, n) != want;
                bad += nfs[v](x, n) != want;
            }
            x[pos] = keep;
        }
        CHECK(bad == 0, "%s nonfinite: %zu mismatches", zero__simd_name((zero__simd)v), bad);
    }
}

/* The multi-threaded driver gives the same bits for any thread count. */
static void test_threads(void) {
#if defined(ZERO_HAVE_OPENMP)
    size_t n = 600001; /* above the per-thread threshold for 2+ threads */
    float *p[2], *m[2], *w[2], *g = malloc(n * sizeof(float));
    uint16_t *o[2];
    for (int k = 0; k < 2; ++k) {
        p[k] = malloc(n * 4), m[k] = malloc(n * 4), w[k] = malloc(n * 4), o[k] = malloc(n * 2);
    }
    for (size_t i = 0; i < n; ++i) {
        p[0][i] = p[1][i] = urand();
        m[0][i] = m[1][i] = special_state(0);
        w[0][i] = w[1][i] = special_state(1);
        g[i] = special_grad();
    }
    zero_optim_scalars s = zero__optim_scalars(ZERO_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0, 0, 1, 5);
    int saved = omp_get_max_threads();
    for (int k = 0; k < 2; ++k) {
        omp_set_num_threads(k == 0 ? 1 : 3);
        float *st[2] = {m[k], w[k]};
        zero__optim_step(ZERO_OPTIM_ADAMW, &s, p[k], st, g, 0.5f, o[k], ZERO_DTYPE_BF16, n);
    }
    omp_set_num_threads(saved);
    size_t bad = mismatches_f32(p[0], p[1], n) + mismatches_f32(m[0], m[1], n) + mismatches_f32(w[0], w[1], n) +
                 mismatches_16(o[0], o[1], n, ZERO_DTYPE_BF16);
    CHECK(bad == 0, "1 vs 3 threads: %zu mismatches", bad);
    for (int k = 0; k < 2; ++k) free(p[k]), free(m[k]), free(w[k]), free(o[k]);
    free(g);
#else
    CHECK(1, "built without OpenMP");
#endif
}

int main(int argc, char **argv) {
    if (argc > 1) {
        setenv("ZERO_SIMD", argv[1], 1);
        zero__simd want = ZERO__SIMD_COUNT;
        for (int v = 0; v < ZERO__SIMD_COUNT; ++v)
            if (strcmp(argv[1], zero__simd_name((zero__simd)v)) == 0) want = (zero__simd)v;
        zero__simd got = zero__simd_active();
        printf("ZERO_SIMD=%s -> %s\n", argv[1], zero__simd_name(got));
        if (want < ZERO__SIMD_COUNT && zero__simd_available(want))
            CHECK(got == want, "ZERO_SIMD=%s selected %s", argv[1], zero__simd_name(got));
        else
            CHECK(zero__simd_available(got), "fallback %s must be available", zero__simd_name(got));
    } else {
        printf("active variant: %s\n", zero__simd_name(zero__simd_active()));
    }
    test_variants();
    test_reductions();
    test_threads();
    return check_finish();
}
