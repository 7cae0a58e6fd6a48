/* Hand-written forward/backward of the demo model (see model.h).
 * Built twice by the tests (float and double), once by the trainer (float). */
#include "model.h"

#include <math.h>
#include <string.h>

typedef DEMO_REAL real;

/* Under AddressSanitizer (tools/sanitize-check.sh) the three dense kernels
 * took ~90 % of an instrumented zero-demo run: the host's model, not
 * libzero, checked access by access in unvectorized loops.  There their
 * loops go uninstrumented, and each call first checks its operands whole
 * (__asan_region_is_poisoned, an exact check of the range): a buffer
 * shorter than the shapes say -- a gathered parameter or a gradient buffer
 * libzero sized wrong -- is still an ASan report, at the call.  Elsewhere
 * both macros are nothing and the code is as written. */
#if defined(__SANITIZE_ADDRESS__)
#define DEMO_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DEMO_ASAN 1
#endif
#endif
#ifdef DEMO_ASAN
#include <sanitizer/asan_interface.h>
#define DEMO_LOOPS_UNCHECKED __attribute__((no_sanitize("address", "undefined")))
/* An instrumented read of the first poisoned byte: ASan's own report, with
 * this call's stack (the kernel, its caller), then its halt_on_error. */
__attribute__((noinline)) static void check_range(const void *p, size_t bytes) {
    const char *bad = __asan_region_is_poisoned((void *)(uintptr_t)p, bytes);
    if (bad) {
        volatile char c = *(const volatile char *)bad;
        (void)c;
    }
}
#else
#define DEMO_LOOPS_UNCHECKED
#define check_range(p, bytes) ((void)0)
#endif

/* splitmix64: a tiny, well-mixed counter-based generator, so parameter
 * element j's initial value depends only on (seed, param, j). */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Uniform in [-1, 1) with 53 random bits. */
static double uniform_pm1(uint64_t seed, int which, uint64_t j) {
    uint64_t r = mix64(mix64(seed ^ (0x100000001b3ULL * (uint64_t)(which + 1))) + j);
    return (double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

void DEMO_FN(demo_init_param)(const demo_dims *d, int which, uint64_t seed, real *out) {
    uint64_t n = demo_param_numel(d, which);
    double a = 0.0; /* half-width of the uniform distribution */
    switch (which) {
    case DEMO_P_EMB: a = 1.0; break;
    case DEMO_P_W1: a = sqrt(3.0 / (double)(d->ctx * d->embed)); break;
    case DEMO_P_W2: a = sqrt(3.0 / (double)d->hidden1); break;
    /* Small output weights: the first predictions are near uniform, so
     * training starts at loss ~ln(256) instead of a confident wrong guess. */
    case DEMO_P_W3: a = 0.1 * sqrt(3.0 / (double)d->hidden2); break;
    default: a = 0.0; break; /* biases */
    }
    for (uint64_t j = 0; j < n; ++j) out[j] = (real)(a == 0.0 ? 0.0 : a * uniform_pm1(seed, which, j));
}

void DEMO_FN(demo_embed_forward)(const demo_dims *d, int batch, const uint8_t *tok, const real *emb,
                                 real *x0) {
    const int E = d->embed, k = d->ctx;
    for (int b = 0; b < batch; ++b)
        for (int c = 0; c < k; ++c)
            memcpy(x0 + ((size_t)b * k + c) * E, emb + (size_t)tok[(size_t)b * k + c] * E,
                   (size_t)E * sizeof(real));
}

void DEMO_FN(demo_embed_backward)(const demo_dims *d, int batch, const uint8_t *tok, const real *dx0,
                                  real *demb) {
    const int E = d->embed, k = d->ctx;
    for (int b = 0; b < batch; ++b)
        for (int c = 0; c < k; ++c) {
            real *row = demb + (size_t)tok[(size_t)b * k + c] * E;
            const real *g = dx0 + ((size_t)b * k + c) * E;
            for (int e = 0; e < E; ++e) row[e] += g[e];
        }
}

DEMO_LOOPS_UNCHECKED void DEMO_FN(demo_dense_forward)(int batch, int in, int out, const real *x, const real *w,
                                                      const real *bias, real *y, int tanh_act) {
    check_range(x, (size_t)batch * in * sizeof(real));
    check_range(w, (size_t)in * out * sizeof(real));
    check_range(bias, (size_t)out * sizeof(real));
    check_range(y, (size_t)batch * out * sizeof(real));
    for (int b = 0; b < batch; ++b) {
        real *yb = y + (size_t)b * out;
        const real *xb = x + (size_t)b * in;
        memcpy(yb, bias, (size_t)out * sizeof(real));
        /* axpy over `out` (w is [in][out]): contiguous and vectorizable. */
        for (int i = 0; i < in; ++i) {
            const real xi = xb[i];
            const real *wi = w + (size_t)i * out;
            for (int o = 0; o < out; ++o) yb[o] += xi * wi[o];
        }
        if (tanh_act)
            for (int o = 0; o < out; ++o) yb[o] = (real)tanh(yb[o]);
    }
}

DEMO_LOOPS_UNCHECKED void DEMO_FN(demo_dense_backward_params)(int batch, int in, int out, const real *x,
                                                              const real *y, real *dy, real *dw, real *db,
                                                              int tanh_act, real *scratch) {
    check_range(x, (size_t)batch * in * sizeof(real));
    if (tanh_act) check_range(y, (size_t)batch * out * sizeof(real));
    check_range(dy, (size_t)batch * out * sizeof(real));
    check_range(dw, (size_t)in * out * sizeof(real));
    check_range(db, (size_t)out * sizeof(real));
    check_range(scratch, (size_t)out * sizeof(real));
    if (tanh_act)
        for (size_t j = 0; j < (size_t)batch * out; ++j) dy[j] *= (real)1 - y[j] * y[j];
    /* Sum over the batch in scratch first, then add once into the (possibly
     * accumulating) gradient buffer. */
    memset(scratch, 0, (size_t)out * sizeof(real));
    for (int b = 0; b < batch; ++b) {
        const real *g = dy + (size_t)b * out;
        for (int o = 0; o < out; ++o) scratch[o] += g[o];
    }
    for (int o = 0; o < out; ++o) db[o] += scratch[o];
    for (int i = 0; i < in; ++i) {
        memset(scratch, 0, (size_t)out * sizeof(real));
        for (int b = 0; b < batch; ++b) {
            const real xi = x[(size_t)b * in + i];
            const real *g = dy + (size_t)b * out;
            for (int o = 0; o < out; ++o) scratch[o] += xi * g[o];
        }
        real *dwi = dw + (size_t)i * out;
        for (int o = 0; o < out; ++o) dwi[o] += scratch[o];
    }
}

DEMO_LOOPS_UNCHECKED void DEMO_FN(demo_dense_backward_input)(int batch, int in, int out, const real *dy,
                                                             const real *w, real *dx) {
    check_range(dy, (size_t)batch * out * sizeof(real));
    check_range(w, (size_t)in * out * sizeof(real));
    check_range(dx, (size_t)batch * in * sizeof(real));
    for (int b = 0; b < batch; ++b) {
        const real *g = dy + (size_t)b * out;
        real *dxb = dx + (size_t)b * in;
        for (int i = 0; i < in; ++i) {
            const real *wi = w + (size_t)i * out;
            /* Four partial sums: a plain float reduction does not vectorize
             * without -ffast-math; this keeps a fixed, repeatable order. */
            real s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int o = 0;
            for (; o + 4 <= out; o += 4) {
                s0 += g[o] * wi[o];
                s1 += g[o + 1] * wi[o + 1];
                s2 += g[o + 2] * wi[o + 2];
                s3 += g[o + 3] * wi[o + 3];
            }
            for (; o < out; ++o) s0 += g[o] * wi[o];
            dxb[i] = (s0 + s1) + (s2 + s3);
        }
    }
}

double DEMO_FN(demo_softmax_xent)(int batch, int vocab, const real *logits, const uint8_t *targets,
                                  real *dlogits, double grad_scale) {
    double total = 0.0;
    for (int b = 0; b < batch; ++b) {
        const real *z = logits + (size_t)b * vocab;
        double mx = z[0];
        for (int v = 1; v < vocab; ++v)
            if (z[v] > mx) mx = z[v];
        double sum = 0.0;
        for (int v = 0; v < vocab; ++v) sum += exp((double)z[v] - mx);
        const int t = targets[b];
        total += log(sum) - ((double)z[t] - mx);
        if (dlogits) {
            real *dz = dlogits + (size_t)b * vocab;
            const double f = grad_scale / (double)batch;
            for (int v = 0; v < vocab; ++v) {
                double p = exp((double)z[v] - mx) / sum;
                dz[v] = (real)(f * (p - (v == t ? 1.0 : 0.0)));
            }
        }
    }
    return total / (double)batch;
}
