/* The CUDA kernels, compiled for the host under the launch shim, against
 * the CPU kernels of kernels/cpu on random inputs.  The comparison is
 * bitwise: both sides run optim_math.h's per-element sequence without FMA
 * contraction, and the GPU sum of squares reproduces the CPU's order.
 * Covers the launchers too (multi-tensor planning across launches, grid
 * sizes), since zero_cuda_launchers.h is compiled here as shipped. */
#include "cuda_shim.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zero_cuda_launchers.h"
#include "optim.h"
#include "check.h"
#include "device.h"

_Static_assert(ZERO_CUDA_SUMSQ_BLOCK == ZERO_SUMSQ_BLOCK, "GPU sumsq must use the CPU block size");
_Static_assert(ZERO_CUDA_SUMSQ_FANIN == ZERO_SUMSQ_FANIN, "GPU sumsq must use the CPU tree's fan-in");

/* check_optim: offset of every gradient array, in elements (1 makes the
 * arrays misaligned for the kernel's vector path: the element path runs). */
static size_t g_grad_offset = 0;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd32() & 0xffffff) / 16777216.0f; }

static size_t dt_size(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4 : 2; }

static void *rand_array(zero_dtype dt, size_t n, float lo, float hi) {
    float *f = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; ++i) f[i] = rndf(lo, hi);
    if (dt == ZERO_DTYPE_F32) return f;
    void *o = malloc((n ? n : 1) * 2);
    zero__convert(o, dt, f, ZERO_DTYPE_F32, n);
    free(f);
    return o;
}

static float *dup_f(const float *x, size_t n) {
    float *y = malloc((n ? n : 1) * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

static const char *dt_name(int dt) {
    return dt == ZERO_DTYPE_F32 ? "f32" : dt == ZERO_DTYPE_BF16 ? "bf16" : dt == ZERO_DTYPE_F16 ? "f16" : "none";
}

/* One multi-tensor step on the shim vs zero__optim_step per tensor. */
static void check_optim(zero_optim_kind kind, double momentum, int nesterov, zero_dtype gdt, int out_dt,
                        const size_t *sizes, size_t nt, int use_dev_mul) {
    uint32_t nstate = zero__optim_state_count(kind, momentum);
    zero_optim_scalars s = zero__optim_scalars(kind, 1e-3, 0.9, 0.999, 1e-8, 0.01, momentum, nesterov, 1, 3);
    zero_cuda_mt_tensor *ts = calloc(nt, sizeof *ts);
    float **cm = calloc(nt, sizeof *cm), **cs0 = calloc(nt, sizeof *cs0), **cs1 = calloc(nt, sizeof *cs1);
    void **cout = calloc(nt, sizeof *cout);
    float **cgrad = calloc(nt, sizeof *cgrad);
    void **gbase = calloc(nt, sizeof *gbase);
    const float grad_mul = 0.37f;
    for (size_t k = 0; k < nt; ++k) {
        size_t n = sizes[k];
        ts[k].n = n;
        ts[k].master = rand_array(ZERO_DTYPE_F32, n, -1.f, 1.f);
        ts[k].state0 = nstate >= 1 ? rand_array(ZERO_DTYPE_F32, n, -0.1f, 0.1f) : NULL;
        ts[k].state1 = nstate >= 2 ? rand_array(ZERO_DTYPE_F32, n, 0.f, 0.01f) : NULL; /* v >= 0 */
        if (kind == ZERO_OPTIM_ADAGRAD) for (size_t i = 0; i < n; ++i) ts[k].state0[i] = fabsf(ts[k].state0[i]);
        gbase[k] = rand_array(gdt, n + g_grad_offset, -2.f, 2.f);
        ts[k].grad = (char *)gbase[k] + g_grad_offset * dt_size(gdt);
        ts[k].out = out_dt >= 0 ? calloc(n ? n : 1, dt_size(out_dt)) : NULL;
        cm[k] = dup_f(ts[k].master, n);
        cs0[k] = ts[k].state0 ? dup_f(ts[k].state0, n) : NULL;
        cs1[k] = ts[k].state1 ? dup_f(ts[k].state1, n) : NULL;
        cout[k] = out_dt >= 0 ? calloc(n ? n : 1, dt_size(out_dt)) : NULL;
        cgrad[k] = malloc((n ? n : 1) * sizeof(float));
        zero__convert(cgrad[k], ZERO_DTYPE_F32, ts[k].grad, gdt, n); /* exact widening */
    }
    float dev_mul = grad_mul;
    zero_status st = zero_cuda_optim_step(kind, &s, ts, nt, gdt, out_dt >= 0 ? out_dt : ZERO_DTYPE_F32,
                                          use_dev_mul ? 99.0f : grad_mul, use_dev_mul ? &dev_mul : NULL, NULL);
    CHECK_EQ_INT(st, ZERO_OK);
    size_t bad = 0, total = 0;
    for (size_t k = 0; k < nt; ++k) {
        size_t n = sizes[k];
        float *state[2] = {cs0[k], cs1[k]};
        zero__optim_step(kind, &s, cm[k], state, cgrad[k], grad_mul, cout[k], out_dt >= 0 ? out_dt : ZERO_DTYPE_F32, n);
        total += n;
        if (memcmp(cm[k], ts[k].master, n * 4)) ++bad;
        if (cs0[k] && memcmp(cs0[k], ts[k].state0, n * 4)) ++bad;
        if (cs1[k] && memcmp(cs1[k], ts[k].state1, n * 4)) ++bad;
        if (cout[k] && memcmp(cout[k], ts[k].out, n * dt_size(out_dt))) ++bad;
        free(ts[k].master), free(ts[k].state0), free(ts[k].state1), free(gbase[k]), free(ts[k].out);
        free(cm[k]), free(cs0[k]), free(cs1[k]), free(cout[k]), free(cgrad[k]);
    }
    CHECK(bad == 0, "optim kind %d momentum %g nesterov %d grad %s out %s devmul %d: %zu arrays differ from the CPU (%zu elements)",
          (int)kind, momentum, nesterov, dt_name(gdt), dt_name(out_dt), use_dev_mul, bad, total);
    free(ts), free(cm), free(cs0), free(cs1), free(cout), free(cgrad), free(gbase);
}

static void test_optim(void) {
    /* 22 tensors: more than ZERO_CUDA_MT_MAX_TENSORS, with empty ones, one
     * element, chunk boundaries and a tensor spanning several chunks. */
    size_t sizes[22] = {0, 1, 300, ZERO_CUDA_MT_CHUNK, ZERO_CUDA_MT_CHUNK + 1, 40000, 0, 7};
    for (int k = 8; k < 22; ++k) sizes[k] = 1 + rnd32() % 3000;
    const zero_optim_kind kinds[] = {ZERO_OPTIM_ADAMW, ZERO_OPTIM_ADAM, ZERO_OPTIM_LION, ZERO_OPTIM_ADAGRAD};
    const int dts[] = {ZERO_DTYPE_F32, ZERO_DTYPE_BF16, ZERO_DTYPE_F16};
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ++ki)
        for (int g = 0; g < 3; ++g)
            for (int o = -1; o < 3; ++o) check_optim(kinds[ki], 0.0, 0, dts[g], o < 0 ? -1 : dts[o], sizes, 22, 0);
    for (int g = 0; g < 3; ++g) {
        check_optim(ZERO_OPTIM_SGD, 0.0, 0, dts[g], ZERO_DTYPE_BF16, sizes, 22, 0);
        check_optim(ZERO_OPTIM_SGD, 0.9, 0, dts[g], ZERO_DTYPE_F16, sizes, 22, 0);
        check_optim(ZERO_OPTIM_SGD, 0.9, 1, dts[g], ZERO_DTYPE_F32, sizes, 22, 0);
    }
    /* The multiplier read from device memory (fused clip path). */
    check_optim(ZERO_OPTIM_ADAMW, 0.0, 0, ZERO_DTYPE_F32, ZERO_DTYPE_BF16, sizes, 22, 1);
    /* The element path: gradients misaligned for the vector accesses. */
    g_grad_offset = 1;
    for (int g = 0; g < 3; ++g) check_optim(ZERO_OPTIM_ADAMW, 0.0, 0, dts[g], dts[g], sizes, 22, 0);
    g_grad_offset = 0;
    /* The odd sizes, 10M + 3 included: one launch for all of them
     * (the grid is the chunk count, not capped). */
    size_t odd[5] = {0, 1, 4095, 4097, 10000003};
    unsigned long long before = zero_shim_launches;
    check_optim(ZERO_OPTIM_ADAMW, 0.0, 0, ZERO_DTYPE_BF16, ZERO_DTYPE_BF16, odd, 5, 0);
    CHECK(zero_shim_launches - before == 1, "odd sizes took %llu launches, expected 1", zero_shim_launches - before);
    check_optim(ZERO_OPTIM_ADAMW, 0.0, 0, ZERO_DTYPE_F32, -1, odd, 5, 0);
    check_optim(ZERO_OPTIM_ADAMW, 0.0, 0, ZERO_DTYPE_F16, ZERO_DTYPE_F16, odd, 5, 0);
    /* LAMB is refused, not silently skipped. */
    zero_optim_scalars s = zero__optim_scalars(ZERO_OPTIM_LAMB, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 1, 1);
    CHECK_EQ_INT(zero_cuda_optim_step(ZERO_OPTIM_LAMB, &s, NULL, 0, ZERO_DTYPE_F32, ZERO_DTYPE_F32, 1.f, NULL, NULL),
                 ZERO_ERR_UNSUPPORTED);
}

static void test_plan(void) {
    /* 2 * ZERO_CUDA_MT_MAX_TENSORS + 16 one-chunk tensors -> 3 launches. */
    enum { NT = 2 * ZERO_CUDA_MT_MAX_TENSORS + 16 };
    static zero_cuda_mt_tensor ts[NT];
    memset(ts, 0, sizeof ts);
    float m[10] = {0}, g[10] = {0};
    for (int k = 0; k < NT; ++k) ts[k].n = 10, ts[k].master = m, ts[k].grad = g; /* SGD without momentum: no state */
    unsigned long long before = zero_shim_launches;
    zero_optim_scalars s = zero__optim_scalars(ZERO_OPTIM_SGD, 0.1, 0, 0, 0, 0, 0, 0, 1, 1);
    CHECK_EQ_INT(zero_cuda_optim_step(ZERO_OPTIM_SGD, &s, ts, NT, ZERO_DTYPE_F32, ZERO_DTYPE_F32, 1.f, NULL, NULL), ZERO_OK);
    CHECK(zero_shim_launches - before == 3, "%d tensors: %llu launches, expected 3", NT, zero_shim_launches - before);
}

static void test_sumsq(void) {
    /* up to more than ZERO_CUDA_THREADS blocks: a grid of several CUDA blocks */
    /* around the block and tree-group edges, and the 10M + 3 (three
     * tree levels) */
    enum { B = ZERO_CUDA_SUMSQ_BLOCK };
    const size_t ns[] = {0, 1, 7, 8, 9, B - 1, B, B + 1, 4095, 4096, 4097, 3 * B + 5, 300001, 64 * B, 64 * B + 1,
                         (size_t)ZERO_CUDA_THREADS * B + B + 5, 10000003};
    /* offset 0: the fused group kernel's vector loads (aligned); 1: its
     * element-by-element loads (misaligned) */
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; ++t)
        for (size_t off = 0; off < 2; ++off) {
            size_t n = ns[t];
            for (int dt = 0; dt < 3; ++dt) {
                char *base = rand_array(dt, n + off, -3.f, 3.f);
                void *x = base + off * dt_size(dt);
                float *xf = malloc((n ? n : 1) * 4);
                zero__convert(xf, ZERO_DTYPE_F32, x, dt, n);
                double *scratch = calloc(zero_cuda_sumsq_scratch(n), sizeof(double));
                double out = -1.0;
                CHECK_EQ_INT(zero_cuda_sumsq(x, dt, n, scratch, &out, NULL), ZERO_OK);
                double ref = zero__sumsq_f32(xf, n);
                CHECK(memcmp(&out, &ref, sizeof out) == 0, "sumsq n=%zu %s offset %zu: %.17g vs CPU %.17g", n,
                      dt_name(dt), off, out, ref);
                free(base), free(xf), free(scratch);
            }
        }
    /* More than 64 groups of 64 blocks: the single-block finish kernel runs
     * two tree levels (aligned path). */
    const size_t big = (size_t)64 * 64 * B + B + 1;
    char *x = rand_array(ZERO_DTYPE_BF16, big, -3.f, 3.f);
    float *xf = malloc(big * 4);
    zero__convert(xf, ZERO_DTYPE_F32, x, ZERO_DTYPE_BF16, big);
    double *scratch = calloc(zero_cuda_sumsq_scratch(big), sizeof(double));
    double out = -1.0, ref = zero__sumsq_f32(xf, big);
    unsigned long long before = zero_shim_launches;
    CHECK_EQ_INT(zero_cuda_sumsq(x, ZERO_DTYPE_BF16, big, scratch, &out, NULL), ZERO_OK);
    CHECK(zero_shim_launches - before == 2, "sumsq of %zu took %llu launches, expected 2 (group + finish)", big,
          zero_shim_launches - before);
    CHECK(memcmp(&out, &ref, sizeof out) == 0, "sumsq n=%zu bf16: %.17g vs CPU %.17g", big, out, ref);
    free(x), free(xf), free(scratch);
}

static void test_nonfinite(void) {
    /* Start offsets 0..8 elements: the vector kernel's 16-byte middle with
     * ragged ends on either side (and no middle at all for tiny arrays);
     * bad values at the first and last element and at random places. */
    for (int dt = 0; dt < 3; ++dt)
        for (size_t off = 0; off < 9; ++off) {
            const size_t sizes[] = {50000, 3, 9};
            for (size_t si = 0; si < 3; ++si) {
                size_t n = sizes[si];
                char *base = rand_array(dt, n + off, -60000.f, 60000.f); /* near the f16 limit, still finite */
                char *x = base + off * dt_size(dt);
                int32_t flag = 7;
                CHECK_EQ_INT(zero_cuda_nonfinite(x, dt, n, &flag, NULL), ZERO_OK);
                CHECK(flag == 0, "%s off %zu n %zu: clean array flagged", dt_name(dt), off, n);
                const float bads[3] = {INFINITY, -INFINITY, NAN};
                for (int b = 0; b < 5; ++b) {
                    size_t at = b == 3 ? 0 : b == 4 ? n - 1 : rnd32() % n;
                    unsigned char saved[4];
                    memcpy(saved, x + at * dt_size(dt), dt_size(dt));
                    zero__convert(x + at * dt_size(dt), dt, &bads[b % 3], ZERO_DTYPE_F32, 1);
                    CHECK_EQ_INT(zero_cuda_nonfinite(x, dt, n, &flag, NULL), ZERO_OK);
                    CHECK(flag == 1, "%s off %zu n %zu: %g at %zu not found", dt_name(dt), off, n, (double)bads[b % 3],
                          at);
                    CHECK_EQ_INT(zero__nonfinite_f32(&bads[b % 3], 1), 1);
                    memcpy(x + at * dt_size(dt), saved, dt_size(dt));
                }
                CHECK_EQ_INT(zero_cuda_nonfinite(x, dt, 0, &flag, NULL), ZERO_OK);
                CHECK(flag == 0, "%s: empty array flagged", dt_name(dt));
                free(base);
            }
        }
}

static void test_convert(void) {
    size_t n = 70000;
    float *f = rand_array(ZERO_DTYPE_F32, n, -70000.f, 70000.f);
    /* Specials: zeros, Inf, NaN with payload, tiny (f16 subnormal) values, bf16 ties. */
    const float sp[] = {0.f, -0.f, INFINITY, -INFINITY, NAN, 65504.f, 65520.f, 6e-8f, -3e-6f, 1.00390625f, 1e-40f};
    memcpy(f, sp, sizeof sp);
    for (size_t i = 100; i < 20000; ++i) f[i] *= 1e-9f; /* small magnitudes for f16 subnormals */
    for (int src = 0; src < 3; ++src) {
        void *x = malloc(n * 4);
        zero__convert(x, src, f, ZERO_DTYPE_F32, n);
        for (int dst = 0; dst < 3; ++dst) {
            void *a = malloc(n * 4), *b = malloc(n * 4);
            CHECK_EQ_INT(zero_cuda_convert(a, dst, x, src, n, NULL), ZERO_OK);
            zero__convert(b, dst, x, src, n);
            CHECK(memcmp(a, b, n * dt_size(dst)) == 0, "convert %s -> %s differs from the CPU", dt_name(src), dt_name(dst));
            free(a), free(b);
        }
        float *a = dup_f(f, n), *b = dup_f(f, n);
        CHECK_EQ_INT(zero_cuda_add_into(a, x, src, n, NULL), ZERO_OK);
        zero__add_into(b, x, src, n);
        CHECK(memcmp(a, b, n * 4) == 0, "add_into from %s differs from the CPU", dt_name(src));
        free(a), free(b), free(x);
    }
    free(f);
}

/* The bucket engine's element-wise kernels (gpu-wiring) against the CPU
 * form the core runs without a device (backends/device/device.c):
 * add into a buffer of any dtype with one rounding, and scaling. */
static void test_add_dt_scale(void) {
    size_t n = 5000;
    float *f = rand_array(ZERO_DTYPE_F32, n, -3.f, 3.f), *g = rand_array(ZERO_DTYPE_F32, n, -3.f, 3.f);
    for (int dst = 0; dst < 3; ++dst)
        for (int src = 0; src < 3; ++src) {
            void *a = malloc(n * 4), *b = malloc(n * 4), *x = malloc(n * 4);
            zero__convert(a, dst, f, ZERO_DTYPE_F32, n);
            zero__convert(b, dst, f, ZERO_DTYPE_F32, n);
            zero__convert(x, src, g, ZERO_DTYPE_F32, n);
            CHECK_EQ_INT(zero_cuda_add_into_dt(a, dst, x, src, n, NULL), ZERO_OK);
            CHECK_EQ_INT(zero__dev_add_into(NULL, b, dst, x, src, n), ZERO_OK);
            CHECK(memcmp(a, b, n * dt_size(dst)) == 0, "add_into_dt %s += %s differs from the CPU", dt_name(dst),
                  dt_name(src));
            free(a), free(b), free(x);
        }
    float *a = dup_f(f, n), *b = dup_f(f, n);
    CHECK_EQ_INT(zero_cuda_scale(a, 0.37f, n, NULL), ZERO_OK);
    CHECK_EQ_INT(zero__dev_scale(NULL, b, 0.37f, n), ZERO_OK);
    CHECK(memcmp(a, b, n * 4) == 0, "scale differs from the CPU");
    CHECK(a[1] != f[1] || f[1] == 0.f, "scale did nothing");
    free(a), free(b), free(f), free(g);
}

/* zero_cuda_k_clip_mul against the documented rule (DeepSpeed's
 * clip_grad_norm: coef = clip / (norm + 1e-6) when norm > clip). */
static void test_clip_mul(void) {
    const double inv = 1.0 / (1024.0 * 4 * 2); /* loss scale 1024, world 4, gas 2 */
    const double cases[][2] = {{0.0, 1.0}, {4.0e6, 0.0}, {4.0e6, 1.0}, {1e3, 1.0}, {1e3, 10.0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        double sumsq = cases[c][0], clip = cases[c][1], norm = -1;
        float mul = -1;
        CHECK_EQ_INT(zero_cuda_clip_mul(&sumsq, inv, clip, &mul, &norm, NULL), ZERO_OK);
        double ref_norm = sqrt(sumsq) * inv;
        double ref_coef = (clip > 0 && ref_norm > clip) ? clip / (ref_norm + 1e-6) : 1.0;
        CHECK(norm == ref_norm, "norm %.17g vs %.17g", norm, ref_norm);
        CHECK(mul == (float)(inv * ref_coef), "grad_mul %.9g vs %.9g", (double)mul, (double)(float)(inv * ref_coef));
        if (clip > 0 && ref_norm > clip) CHECK(norm * (mul / inv) <= clip * (1 + 1e-6), "clipped norm above clip");
    }
    double inf = INFINITY, norm = 0;
    float mul = 0;
    zero_cuda_clip_mul(&inf, inv, 1.0, &mul, &norm, NULL);
    CHECK(!isfinite(norm), "Inf sumsq must give a non-finite norm (overflow), got %g", norm);
}

int main(void) {
    test_plan();
    test_optim();
    test_sumsq();
    test_nonfinite();
    test_convert();
    test_clip_mul();
    test_add_dt_scale();
    printf("shim: %llu launches, %llu threads run\n", zero_shim_launches, zero_shim_threads_run);
    return check_finish();
}
