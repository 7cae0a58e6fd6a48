/* CPU AdamW step vs the memory-bandwidth bound (issue 5).  Not a test.
 *
 * For N fp32 parameters (default 64M) it times
 *   adam   zero__optim_step_variant(best SIMD, AdamW) over p, g, m, v
 *   bound  a kernel that reads the same four streams and writes the same
 *          three (p, m, v) with trivial arithmetic (p+g, m+g, v+g*g: v stays
 *          >= 0 so the interleaved Adam steps never see NaN)
 * and the same pair with a bf16 copy-out fused into the step, against a
 * bound that also writes the 2-byte stream.  Each measurement is the median
 * of R repetitions, adam and bound interleaved so that drift (other
 * processes, thermal) hits both alike; it prints params/s and the ratio
 * adam/bound (params/s) at each thread count, both as the ratio of the
 * medians and as the median of the ratios of back-to-back pairs (the more
 * robust of the two on a shared machine).
 *
 * Usage: bench_adam [N_millions=64] [reps=7] [threads=1,2]
 * The variant is the one zero__optim_step would use (ZERO_SIMD overrides). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(ZERO_HAVE_OPENMP)
#include <omp.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench_timing.h"
#include "optim_kernels.h"


typedef struct bufs {
    float *p, *g, *m, *v;
    uint16_t *out;
    size_t n;
} bufs;

/* ---- the bound: same streams, one add per written stream ---- */
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void bound_avx512(const bufs *b, size_t lo, size_t hi, int with_out) {
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m512 g = _mm512_loadu_ps(b->g + i);
        __m512 p = _mm512_add_ps(_mm512_loadu_ps(b->p + i), g);
        _mm512_storeu_ps(b->p + i, p);
        _mm512_storeu_ps(b->m + i, _mm512_add_ps(_mm512_loadu_ps(b->m + i), g));
        _mm512_storeu_ps(b->v + i, _mm512_add_ps(_mm512_loadu_ps(b->v + i), _mm512_mul_ps(g, g)));
        if (with_out)
            _mm256_storeu_si256((__m256i *)(b->out + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(p), 16)));
    }
    for (; i < hi; ++i) {
        b->p[i] += b->g[i], b->m[i] += b->g[i], b->v[i] += b->g[i] * b->g[i];
        if (with_out) b->out[i] = (uint16_t)(zero_f32_bits(b->p[i]) >> 16);
    }
}
__attribute__((target("avx2"))) static void bound_avx2(const bufs *b, size_t lo, size_t hi, int with_out) {
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 g = _mm256_loadu_ps(b->g + i);
        __m256 p = _mm256_add_ps(_mm256_loadu_ps(b->p + i), g);
        _mm256_storeu_ps(b->p + i, p);
        _mm256_storeu_ps(b->m + i, _mm256_add_ps(_mm256_loadu_ps(b->m + i), g));
        _mm256_storeu_ps(b->v + i, _mm256_add_ps(_mm256_loadu_ps(b->v + i), _mm256_mul_ps(g, g)));
        if (with_out) {
            __m256i r = _mm256_srli_epi32(_mm256_castps_si256(p), 16);
            _mm_storeu_si128((__m128i *)(b->out + i),
                             _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
        }
    }
    for (; i < hi; ++i) {
        b->p[i] += b->g[i], b->m[i] += b->g[i], b->v[i] += b->g[i] * b->g[i];
        if (with_out) b->out[i] = (uint16_t)(zero_f32_bits(b->p[i]) >> 16);
    }
}
#endif
static void bound_scalar(const bufs *b, size_t lo, size_t hi, int with_out) {
    for (size_t i = lo; i < hi; ++i) {
        b->p[i] += b->g[i], b->m[i] += b->g[i], b->v[i] += b->g[i] * b->g[i];
        if (with_out) b->out[i] = (uint16_t)(zero_f32_bits(b->p[i]) >> 16);
    }
}

/* Same partitioning as the library's driver: contiguous 64-aligned chunks.
 * The bound always uses the widest ISA the CPU has: it stands for the
 * machine's limit, whichever Adam variant is being measured. */
static void run_bound(zero__simd v, const bufs *b, int with_out) {
    void (*k)(const bufs *, size_t, size_t, int) = bound_scalar;
#if defined(__x86_64__)
    if (v == ZERO__SIMD_AVX512) k = bound_avx512;
    if (v == ZERO__SIMD_AVX2) k = bound_avx2;
#endif
    size_t n = b->n;
#if defined(ZERO_HAVE_OPENMP)
#pragma omp parallel
    {
        size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
        size_t chunk = ((n + nt - 1) / nt + 63) & ~(size_t)63;
        size_t lo = t * chunk, hi = lo + chunk < n ? lo + chunk : n;
        if (lo < hi) k(b, lo, hi, with_out);
    }
#else
    k(b, 0, n, with_out);
#endif
}

static double median(double *x, int n) {
    bench_sort(x, (size_t)n);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

int main(int argc, char **argv) {
    size_t n = (size_t)(argc > 1 ? atof(argv[1]) : 64.0) * (1u << 20);
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    const char *threads_arg = argc > 3 ? argv[3] : "1,2";
    if (reps < 1 || reps > 101 || n == 0) {
        fprintf(stderr, "usage: bench_adam [N_millions=64] [reps=7] [threads=1,2]\n");
        return 2;
    }
    bufs b = {aligned_alloc(64, n * 4), aligned_alloc(64, n * 4), aligned_alloc(64, n * 4), aligned_alloc(64, n * 4),
              aligned_alloc(64, n * 2), n};
    if (!b.p || !b.g || !b.m || !b.v || !b.out) {
        fprintf(stderr, "out of memory for %zu params\n", n);
        return 1;
    }
    for (size_t i = 0; i < n; ++i) { /* touch every page before timing */
        b.p[i] = 0.5f + (float)(i % 1000) * 1e-4f;
        b.g[i] = (float)((int)(i % 97) - 48) * 1e-3f;
        b.m[i] = 0.0f;
        b.v[i] = 0.0f;
        b.out[i] = 0;
    }
    zero__simd v = zero__simd_active();
    zero__simd best = ZERO__SIMD_SCALAR;
    for (int k = ZERO__SIMD_COUNT - 1; k > 0 && best == ZERO__SIMD_SCALAR; --k)
        if (zero__simd_available((zero__simd)k)) best = (zero__simd)k;
    zero_optim_scalars s = zero__optim_scalars(ZERO_OPTIM_ADAMW, 1e-4, 0.9, 0.999, 1e-8, 0.01, 0, 0, 1, 10);
    float *st[2] = {b.m, b.v};
    printf("bench_adam: %zu params (%.0fM) fp32 AdamW, variant %s (bound: %s), median of %d\n", n,
           (double)n / (1 << 20), zero__simd_name(v), zero__simd_name(best), reps);
    /* ratio: median bound time / median adam time; paired: median over
     * repetitions of (bound time / adam time) of back-to-back runs */
    printf("%-8s %-6s %14s %14s %8s %8s\n", "threads", "out", "adam Mparam/s", "bound Mparam/s", "ratio", "paired");

    char targ[64];
    snprintf(targ, sizeof targ, "%s", threads_arg);
    for (char *tok = strtok(targ, ","); tok; tok = strtok(NULL, ",")) {
        int nt = atoi(tok);
        if (nt < 1) continue;
#if defined(ZERO_HAVE_OPENMP)
        omp_set_num_threads(nt);
#else
        if (nt > 1) continue;
#endif
        for (int with_out = 0; with_out <= 1; ++with_out) {
            double ta[101], tb[101], tr[101];
            /* one untimed round of each to settle the thread team and caches */
            zero__optim_step_variant(v, ZERO_OPTIM_ADAMW, &s, b.p, st, b.g, 1.0f, with_out ? b.out : NULL,
                                     ZERO_DTYPE_BF16, n);
            run_bound(best, &b, with_out);
            for (int r = 0; r < reps; ++r) {
                double t0 = bench_now_s();
                zero__optim_step_variant(v, ZERO_OPTIM_ADAMW, &s, b.p, st, b.g, 1.0f, with_out ? b.out : NULL,
                                         ZERO_DTYPE_BF16, n);
                double t1 = bench_now_s();
                run_bound(best, &b, with_out);
                double t2 = bench_now_s();
                ta[r] = t1 - t0;
                tb[r] = t2 - t1;
                tr[r] = tb[r] / ta[r]; /* back-to-back pair: shares the machine's state */
            }
            double ma = median(ta, reps), mb = median(tb, reps), mr = median(tr, reps);
            printf("%-8d %-6s %14.1f %14.1f %8.3f %8.3f\n", nt, with_out ? "bf16" : "none", (double)n / ma * 1e-6,
                   (double)n / mb * 1e-6, mb / ma, mr);
            fflush(stdout);
        }
    }
    free(b.p), free(b.g), free(b.m), free(b.v), free(b.out);
    return 0;
}
