/* Optimizer step kernels against independent double-precision reference
 * implementations written here from the torch/DeepSpeed formulas (not from
 * optim_math.h), over several steps, with and without bias correction,
 * weight decay, momentum and Nesterov; plus tiling independence and the
 * fused copy-out to bf16/fp16/fp32. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "optim.h"

/* ---------------- reference (double) ---------------- */
typedef struct ref_cfg {
    zero_optim_kind kind;
    double lr, b1, b2, eps, wd, mom;
    int nesterov, bias_correction;
} ref_cfg;

/* One step of element i; st0/st1 are the states. t is 1-based.  The
 * scalars are torch.optim's: a hyper-parameter multiplies an fp32 tensor as
 * an fp32 value, and the derived ones (1 - beta, 1 - lr*wd, lr / (1 - beta1^t),
 * sqrt(1 - beta2^t)) are computed in double from the configured values and
 * rounded once to fp32 (issue 34), so the reference uses the same values:
 * the tolerance then measures arithmetic error, not the rounding of 0.999. */
static void ref_step(const ref_cfg *cfg, uint64_t t, double g, double *p, double *st0, double *st1) {
    ref_cfg rc = *cfg;
    const ref_cfg *c = &rc;
    rc.lr = (float)rc.lr, rc.b1 = (float)rc.b1, rc.b2 = (float)rc.b2, rc.eps = (float)rc.eps;
    rc.wd = (float)rc.wd, rc.mom = (float)rc.mom;
    const double omb1 = (float)(1 - cfg->b1), omb2 = (float)(1 - cfg->b2);
    const double decay = (float)(1 - cfg->lr * cfg->wd);
    switch (c->kind) {
    case ZERO_OPTIM_ADAMW:
    case ZERO_OPTIM_ADAM: {
        if (c->kind == ZERO_OPTIM_ADAMW)
            *p *= decay; /* torch.optim.AdamW: decoupled */
        else
            g += c->wd * *p; /* torch.optim.Adam: L2 */
        *st0 = c->b1 * *st0 + omb1 * g;
        *st1 = c->b2 * *st1 + omb2 * g * g;
        double bc1 = cfg->bias_correction ? 1 - pow(cfg->b1, (double)t) : 1;
        double bc2 = cfg->bias_correction ? 1 - pow(cfg->b2, (double)t) : 1;
        double step_size = (float)(cfg->lr / bc1), bc2_root = (float)sqrt(bc2);
        *p -= step_size * *st0 / (sqrt(*st1) / bc2_root + c->eps);
        break;
    }
    case ZERO_OPTIM_SGD: {
        double d = g + c->wd * *p;
        if (c->mom != 0) {
            *st0 = t == 1 ? d : c->mom * *st0 + d;
            d = c->nesterov ? d + c->mom * *st0 : *st0;
        }
        *p -= c->lr * d;
        break;
    }
    case ZERO_OPTIM_LION: {
        *p *= decay;
        double u = c->b1 * *st0 + omb1 * g;
        *p -= c->lr * (u > 0 ? 1.0 : u < 0 ? -1.0 : 0.0);
        *st0 = c->b2 * *st0 + omb2 * g;
        break;
    }
    case ZERO_OPTIM_ADAGRAD: {
        g += c->wd * *p;
        *st0 += g * g;
        *p -= c->lr * g / (sqrt(*st0) + c->eps);
        break;
    }
    default: break;
    }
}

static uint64_t rng = 88172645463325252ull;
static double urand(void) { /* [0, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* Run `steps` kernel steps on n elements and the same in double; return the
 * worst error relative to tol = abs_tol + rel_tol*|ref|. */
static double run_case(const ref_cfg *c, size_t n, int steps, float grad_mul, zero_dtype out_dt) {
    float *p = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    float *s0 = calloc(n, sizeof(float)), *s1 = calloc(n, sizeof(float));
    uint16_t *out16 = calloc(n, sizeof(uint16_t));
    float *out32 = calloc(n, sizeof(float));
    double *rp = malloc(n * sizeof(double)), *r0 = calloc(n, sizeof(double)), *r1 = calloc(n, sizeof(double));
    for (size_t i = 0; i < n; ++i) {
        p[i] = (float)(urand() * 2 - 1);
        rp[i] = p[i];
    }
    float *state[2] = {s0, s1};
    uint32_t ns = zero__optim_state_count(c->kind, c->mom);
    double worst = 0;
    for (int t = 1; t <= steps; ++t) {
        for (size_t i = 0; i < n; ++i) g[i] = (float)((urand() * 2 - 1) * (1 + (i % 7)));
        zero_optim_scalars s = zero__optim_scalars(c->kind, c->lr, c->b1, c->b2, c->eps, c->wd, c->mom,
                                                   c->nesterov, c->bias_correction, (uint64_t)t);
        void *out = out_dt == ZERO_DTYPE_F32 ? (void *)out32 : (void *)out16;
        zero__optim_step(c->kind, &s, p, state, g, grad_mul, out, out_dt, n);
        for (size_t i = 0; i < n; ++i)
            ref_step(c, (uint64_t)t, (double)g[i] * grad_mul, &rp[i], &r0[i], &r1[i]);
    }
    for (size_t i = 0; i < n; ++i) {
        /* fp32 rounding of a few ops per step on values of order 1, plus the
         * update's own relative error (lr-sized) accumulated over steps. */
        double tol = 2e-6 * steps + 1e-5 * fabs(rp[i]);
        double e = fabs(p[i] - rp[i]) / tol;
        if (e > worst) worst = e;
        if (ns > 0) {
            double e0 = fabs(s0[i] - r0[i]) / (1e-6 + 1e-5 * fabs(r0[i]));
            if (e0 > worst) worst = e0;
        }
        if (ns > 1) {
            double e1 = fabs(s1[i] - r1[i]) / (1e-9 + 1e-5 * fabs(r1[i]));
            if (e1 > worst) worst = e1;
        }
    }
    /* copy-out holds exactly the converted new master */
    size_t bad_out = 0;
    for (size_t i = 0; i < n; ++i) {
        if (out_dt == ZERO_DTYPE_F32 && zero_f32_bits(out32[i]) != zero_f32_bits(p[i])) ++bad_out;
        if (out_dt == ZERO_DTYPE_BF16 && out16[i] != zero_f32_to_bf16(p[i])) ++bad_out;
        if (out_dt == ZERO_DTYPE_F16 && out16[i] != zero_f32_to_f16(p[i])) ++bad_out;
    }
    CHECK_EQ_INT(bad_out, 0);
    /* and the 16-bit copy is within half an ulp of the master */
    if (out_dt != ZERO_DTYPE_F32) {
        double worst16 = 0;
        for (size_t i = 0; i < n; ++i) {
            double o = out_dt == ZERO_DTYPE_BF16 ? zero_bf16_to_f32(out16[i]) : zero_f16_to_f32(out16[i]);
            /* an fp16 subnormal (below 2^-14) has a fixed ulp, 2^-24: half
             * of it, taken relative to the smallest normal */
            double rel = out_dt == ZERO_DTYPE_F16 && fabs(p[i]) < 0x1p-14 ? fabs(o - p[i]) / 0x1p-14
                                                                          : fabs(o - p[i]) / fabs(p[i]);
            if (p[i] != 0 && rel > worst16) worst16 = rel;
        }
        /* half an ulp: 2^-8 relative for bf16 (8-bit significand), 2^-11
         * for fp16 (11 bits) */
        CHECK(worst16 <= (out_dt == ZERO_DTYPE_BF16 ? 0x1p-8 : 0x1p-11), "copy-out error %g", worst16);
    }
    free(p), free(g), free(s0), free(s1), free(out16), free(out32), free(rp), free(r0), free(r1);
    return worst;
}

static void test_against_reference(void) {
    const ref_cfg cfgs[] = {
        {ZERO_OPTIM_ADAMW, 1e-2, 0.9, 0.999, 1e-8, 0.01, 0, 0, 1},
        {ZERO_OPTIM_ADAMW, 1e-3, 0.8, 0.99, 1e-6, 0.1, 0, 0, 0},
        {ZERO_OPTIM_ADAMW, 1e-2, 0.9, 0.999, 1e-8, 0.0, 0, 0, 1},
        {ZERO_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0.05, 0, 0, 1},
        {ZERO_OPTIM_ADAM, 1e-2, 0.9, 0.95, 1e-8, 0.0, 0, 0, 0},
        {ZERO_OPTIM_SGD, 1e-2, 0, 0, 0, 0.0, 0.0, 0, 0},
        {ZERO_OPTIM_SGD, 1e-2, 0, 0, 0, 1e-3, 0.9, 0, 0},
        {ZERO_OPTIM_SGD, 1e-2, 0, 0, 0, 1e-3, 0.9, 1, 0},
        {ZERO_OPTIM_LION, 1e-3, 0.9, 0.99, 0, 0.1, 0, 0, 0},
        {ZERO_OPTIM_ADAGRAD, 1e-2, 0, 0, 1e-10, 0.01, 0, 0, 0},
    };
    const zero_dtype dts[3] = {ZERO_DTYPE_F32, ZERO_DTYPE_BF16, ZERO_DTYPE_F16};
    for (size_t k = 0; k < sizeof(cfgs) / sizeof(cfgs[0]); ++k) {
        /* 5000: not a multiple of the tile; grad_mul exercises the fused unscale */
        double w = run_case(&cfgs[k], 5000, 6, 0.5f, dts[k % 3]);
        if (getenv("ZERO_TEST_VERBOSE")) printf("config %zu: worst %.3g x tol\n", k, w);
        CHECK(w <= 1.0, "config %zu (kind %d): worst error %.3g x tolerance", k, (int)cfgs[k].kind, w);
    }
}

/* The kernel is elementwise: whole-range and element-at-a-time runs agree
 * bitwise for sizes around the tile boundary. */
static void test_tiling_independent(void) {
    const size_t sizes[] = {1, 7, ZERO_OPTIM_TILE - 1, ZERO_OPTIM_TILE, ZERO_OPTIM_TILE + 1, 3 * ZERO_OPTIM_TILE + 5};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); ++si) {
        size_t n = sizes[si];
        float *p[2], *m[2], *v[2], *g = malloc(n * sizeof(float));
        uint16_t *o[2];
        for (int c = 0; c < 2; ++c) {
            p[c] = malloc(n * sizeof(float));
            m[c] = malloc(n * sizeof(float));
            v[c] = malloc(n * sizeof(float));
            o[c] = calloc(n, sizeof(uint16_t));
        }
        for (size_t i = 0; i < n; ++i) {
            p[0][i] = p[1][i] = (float)urand();
            m[0][i] = m[1][i] = (float)(urand() - 0.5) * 0.1f;
            v[0][i] = v[1][i] = (float)urand() * 0.01f;
            g[i] = (float)(urand() - 0.5);
        }
        zero_optim_scalars s = zero__optim_scalars(ZERO_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0, 0, 1, 3);
        float *st0[2] = {m[0], v[0]};
        zero__optim_step(ZERO_OPTIM_ADAMW, &s, p[0], st0, g, 0.25f, o[0], ZERO_DTYPE_BF16, n);
        for (size_t i = 0; i < n; ++i) {
            float *st1[2] = {m[1] + i, v[1] + i};
            zero__optim_step(ZERO_OPTIM_ADAMW, &s, p[1] + i, st1, g + i, 0.25f, o[1] + i, ZERO_DTYPE_BF16, 1);
        }
        CHECK(memcmp(p[0], p[1], n * 4) == 0 && memcmp(m[0], m[1], n * 4) == 0 &&
                  memcmp(v[0], v[1], n * 4) == 0 && memcmp(o[0], o[1], n * 2) == 0,
              "n=%zu: tiled and per-element results differ", n);
        for (int c = 0; c < 2; ++c) free(p[c]), free(m[c]), free(v[c]), free(o[c]);
        free(g);
    }
}

static void test_scalars_and_counts(void) {
    zero_optim_scalars s = zero__optim_scalars(ZERO_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0, 0, 1, 10);
    CHECK_NEAR(s.bc1, 1.0 / (1.0 - pow(0.9, 10)), 1e-6);
    CHECK_NEAR(s.bc2_sqrt, 1.0 / sqrt(1.0 - pow(0.999, 10)), 1e-5 * s.bc2_sqrt);
    CHECK_EQ_INT(s.first_step, 0);
    /* torch's scalars: computed in double, rounded once to fp32 (issue 34):
     * 1 - 0.999 is 1e-3f, not the fp32 difference 1.0f - 0.999f */
    CHECK(s.one_minus_beta2 == 1e-3f && s.one_minus_beta2 != 1.0f - 0.999f, "1 - beta2 = %.9g", s.one_minus_beta2);
    CHECK(s.one_minus_beta1 == (float)(1.0 - 0.9), "1 - beta1 = %.9g", s.one_minus_beta1);
    CHECK(s.decay == (float)(1.0 - 1e-3 * 0.01), "1 - lr*wd = %.9g", s.decay);
    CHECK(s.step_size == (float)(1e-3 / (1.0 - pow(0.9, 10))), "step size %.9g", s.step_size);
    CHECK(s.bc2_root == (float)sqrt(1.0 - pow(0.999, 10)), "sqrt(1 - beta2^t) %.9g", s.bc2_root);
    s = zero__optim_scalars(ZERO_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0, 0, 0, 10);
    CHECK(s.bc1 == 1.0f && s.bc2_sqrt == 1.0f, "no bias correction");
    CHECK(s.step_size == s.lr && s.bc2_root == 1.0f, "no bias correction: step size lr, divisor 1");
    /* a step size beyond fp32 rounds to Inf */
    s = zero__optim_scalars(ZERO_OPTIM_ADAMW, 3e38, 0.9999999, 0.999, 1e-8, 0, 0, 0, 1, 1);
    CHECK(isinf(s.step_size) && s.step_size > 0, "huge step size %g", s.step_size);
    s = zero__optim_scalars(ZERO_OPTIM_SGD, 0.1, 0, 0, 0, 0, 0.9, 1, 0, 1);
    CHECK(s.first_step == 1 && s.nesterov == 1, "sgd first step");
    CHECK_EQ_INT(zero__optim_state_count(ZERO_OPTIM_ADAMW, 0), 2);
    CHECK_EQ_INT(zero__optim_state_count(ZERO_OPTIM_ADAM, 0), 2);
    CHECK_EQ_INT(zero__optim_state_count(ZERO_OPTIM_SGD, 0), 0);
    CHECK_EQ_INT(zero__optim_state_count(ZERO_OPTIM_SGD, 0.9), 1);
    CHECK_EQ_INT(zero__optim_state_count(ZERO_OPTIM_LION, 0), 1);
    CHECK_EQ_INT(zero__optim_state_count(ZERO_OPTIM_ADAGRAD, 0), 1);
    CHECK(!zero__optim_supported(ZERO_OPTIM_LAMB), "lamb unsupported");
    /* an unsupported kind leaves the range untouched */
    float p = 1.0f, m = 0.5f, v = 0.25f, g = 1.0f;
    float *st[2] = {&m, &v};
    zero__optim_step(ZERO_OPTIM_LAMB, &s, &p, st, &g, 1.0f, NULL, ZERO_DTYPE_F32, 1);
    CHECK(p == 1.0f && m == 0.5f && v == 0.25f, "lamb left untouched");
}

/* Edge inputs: zero gradients with zero v must not divide 0/0 (eps > 0);
 * SGD without momentum needs no state arrays; param_out aliasing master. */
static void test_edges(void) {
    float p[4] = {1, -2, 3, 0}, m[4] = {0}, v[4] = {0}, g[4] = {0, 0, 0, 0};
    float *st[2] = {m, v};
    zero_optim_scalars s = zero__optim_scalars(ZERO_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8, 0.0, 0, 0, 1, 1);
    zero__optim_step(ZERO_OPTIM_ADAMW, &s, p, st, g, 1.0f, p, ZERO_DTYPE_F32, 4);
    CHECK(p[0] == 1 && p[1] == -2 && p[2] == 3 && p[3] == 0, "zero grad, zero v: unchanged");
    s = zero__optim_scalars(ZERO_OPTIM_SGD, 0.5, 0, 0, 0, 0, 0, 0, 0, 1);
    float g2[4] = {1, 2, 3, 4};
    zero__optim_step(ZERO_OPTIM_SGD, &s, p, NULL, g2, 2.0f, NULL, ZERO_DTYPE_F32, 4);
    CHECK(p[0] == 0 && p[1] == -4 && p[2] == 0 && p[3] == -4, "plain sgd %g %g %g %g", p[0], p[1], p[2], p[3]);
}

int main(void) {
    test_scalars_and_counts();
    test_against_reference();
    test_tiling_independent();
    test_edges();
    return check_finish();
}
