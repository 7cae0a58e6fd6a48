/* Finite-difference check of the demo model's hand-written backward.
 *
 * model.c is built twice: in double (suffix _f64), where central differences
 * are accurate to ~1e-9 and the analytic gradient must match them tightly,
 * and in float (no suffix, the trainer's build), whose gradient must match
 * the double one to float accuracy.  Also checked: gradients are ADDED into
 * the buffers (libzero's accumulation contract), the loss of uniform logits
 * is ln(vocab), and the grad scale multiplies dL/dlogits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define DEMO_REAL double
#define DEMO_SUFFIX _f64
#include "model.h"
#undef DEMO_REAL
#undef DEMO_SUFFIX
#include "model.h" /* float, no suffix */

static const demo_dims D = {.ctx = 3, .embed = 4, .hidden1 = 5, .hidden2 = 6, .vocab = 16};
enum { B = 4 };

/* Whole-model loss and (optionally) gradients, in one element type. */
#define DEFINE_RUN(T, SUF)                                                                                  \
    static double run##SUF(T *const *p, T *const *g, const uint8_t *tok, const uint8_t *tgt, double scale) { \
        const int in1 = D.ctx * D.embed;                                                                    \
        T x0[B * 3 * 4], h1[B * 5], h2[B * 6], z[B * 16], dx0[B * 3 * 4], dh1[B * 5], dh2[B * 6], scr[16];   \
        demo_embed_forward##SUF(&D, B, tok, p[DEMO_P_EMB], x0);                                             \
        demo_dense_forward##SUF(B, in1, D.hidden1, x0, p[DEMO_P_W1], p[DEMO_P_B1], h1, 1);                  \
        demo_dense_forward##SUF(B, D.hidden1, D.hidden2, h1, p[DEMO_P_W2], p[DEMO_P_B2], h2, 1);            \
        demo_dense_forward##SUF(B, D.hidden2, D.vocab, h2, p[DEMO_P_W3], p[DEMO_P_B3], z, 0);               \
        double loss = demo_softmax_xent##SUF(B, D.vocab, z, tgt, g ? z : NULL, scale);                      \
        if (!g) return loss;                                                                                \
        demo_dense_backward_params##SUF(B, D.hidden2, D.vocab, h2, NULL, z, g[DEMO_P_W3], g[DEMO_P_B3], 0, scr); \
        demo_dense_backward_input##SUF(B, D.hidden2, D.vocab, z, p[DEMO_P_W3], dh2);                        \
        demo_dense_backward_params##SUF(B, D.hidden1, D.hidden2, h1, h2, dh2, g[DEMO_P_W2], g[DEMO_P_B2], 1, scr); \
        demo_dense_backward_input##SUF(B, D.hidden1, D.hidden2, dh2, p[DEMO_P_W2], dh1);                    \
        demo_dense_backward_params##SUF(B, in1, D.hidden1, x0, h1, dh1, g[DEMO_P_W1], g[DEMO_P_B1], 1, scr); \
        demo_dense_backward_input##SUF(B, in1, D.hidden1, dh1, p[DEMO_P_W1], dx0);                          \
        demo_embed_backward##SUF(&D, B, tok, dx0, g[DEMO_P_EMB]);                                           \
        return loss;                                                                                        \
    }
DEFINE_RUN(double, _f64)
DEFINE_RUN(float, )

int main(void) {
    uint8_t tok[B * 3], tgt[B];
    /* Repeat a token inside one sample so the embedding gradient must sum
     * two contributions into one row. */
    for (int i = 0; i < B * D.ctx; ++i) tok[i] = (uint8_t)((i * 7 + 3) % D.vocab);
    tok[1] = tok[0];
    for (int b = 0; b < B; ++b) tgt[b] = (uint8_t)((b * 5 + 1) % D.vocab);

    double *pd[DEMO_NPARAMS], *gd[DEMO_NPARAMS];
    float *pf[DEMO_NPARAMS], *gf[DEMO_NPARAMS];
    for (int k = 0; k < DEMO_NPARAMS; ++k) {
        size_t n = demo_param_numel(&D, k);
        pd[k] = calloc(n, sizeof(double));
        gd[k] = calloc(n, sizeof(double));
        pf[k] = calloc(n, sizeof(float));
        gf[k] = calloc(n, sizeof(float));
        demo_init_param_f64(&D, k, 42, pd[k]);
        /* Non-zero biases and a larger output layer than the trainer's
         * init, so every term of the backward is exercised. */
        for (size_t j = 0; j < n; ++j) {
            if (k == DEMO_P_B1 || k == DEMO_P_B2 || k == DEMO_P_B3) pd[k][j] = 0.1 * sin(1.0 + (double)j);
            if (k == DEMO_P_W3) pd[k][j] *= 10.0;
            pf[k][j] = (float)pd[k][j];
        }
    }
    /* The init must be what demo_init_param gives in float too. */
    {
        float w1[3 * 4 * 5];
        demo_init_param(&D, DEMO_P_W1, 42, w1);
        double dw1[3 * 4 * 5];
        demo_init_param_f64(&D, DEMO_P_W1, 42, dw1);
        int same = 1, nonzero = 0;
        for (int j = 0; j < 60; ++j) {
            same &= w1[j] == (float)dw1[j];
            nonzero += w1[j] != 0.0f;
        }
        CHECK(same, "float and double init differ");
        CHECK(nonzero == 60, "init has %d non-zero of 60", nonzero);
    }

    /* 1. analytic (double) vs central differences (double). */
    double loss = run_f64(pd, gd, tok, tgt, 1.0);
    CHECK(isfinite(loss) && loss > 0, "loss %g", loss);
    const double eps = 1e-6;
    double worst = 0.0;
    int checked = 0, nonzero_grads = 0;
    for (int k = 0; k < DEMO_NPARAMS; ++k) {
        size_t n = demo_param_numel(&D, k);
        for (size_t j = 0; j < n; ++j) {
            double keep = pd[k][j];
            pd[k][j] = keep + eps;
            double lp = run_f64(pd, NULL, tok, tgt, 1.0);
            pd[k][j] = keep - eps;
            double lm = run_f64(pd, NULL, tok, tgt, 1.0);
            pd[k][j] = keep;
            double fd = (lp - lm) / (2 * eps), an = gd[k][j];
            double err = fabs(fd - an) / (1e-6 + fabs(fd) + fabs(an));
            if (err > worst) worst = err;
            CHECK(fabs(fd - an) <= 1e-8 + 1e-5 * fabs(fd), "%s[%zu]: analytic %.10g vs finite difference %.10g",
                  demo_param_name(k), j, an, fd);
            nonzero_grads += an != 0.0;
            ++checked;
        }
    }
    /* Embedding rows of unused tokens have zero gradient; most others not. */
    CHECK(nonzero_grads > checked / 3, "only %d of %d gradients non-zero", nonzero_grads, checked);
    printf("double: %d gradients checked against finite differences, worst relative error %.3g\n", checked,
           worst);

    /* 2. the float build agrees with the double gradient to float accuracy. */
    double lf = run(pf, gf, tok, tgt, 1.0);
    CHECK_NEAR(lf, loss, 1e-5 * loss);
    for (int k = 0; k < DEMO_NPARAMS; ++k) {
        size_t n = demo_param_numel(&D, k);
        double gmax = 0.0;
        for (size_t j = 0; j < n; ++j) gmax = fmax(gmax, fabs(gd[k][j]));
        for (size_t j = 0; j < n; ++j)
            CHECK(fabs((double)gf[k][j] - gd[k][j]) <= 1e-4 * gmax + 1e-7, "float %s[%zu] %.8g vs double %.8g",
                  demo_param_name(k), j, (double)gf[k][j], gd[k][j]);
    }

    /* 3. gradients are added, never overwritten; grad_scale scales them. */
    double *before[DEMO_NPARAMS];
    for (int k = 0; k < DEMO_NPARAMS; ++k) {
        size_t n = demo_param_numel(&D, k);
        before[k] = malloc(n * sizeof(double));
        memcpy(before[k], gd[k], n * sizeof(double));
    }
    run_f64(pd, gd, tok, tgt, 4.0); /* adds 4 * gradient on top of 1 * gradient */
    for (int k = 0; k < DEMO_NPARAMS; ++k) {
        size_t n = demo_param_numel(&D, k);
        for (size_t j = 0; j < n; ++j)
            CHECK(fabs(gd[k][j] - 5.0 * before[k][j]) <= 1e-12 + 1e-9 * fabs(before[k][j]),
                  "%s[%zu]: accumulated %.12g, expected 5 x %.12g", demo_param_name(k), j, gd[k][j],
                  before[k][j]);
        free(before[k]);
    }

    /* 4. uniform logits: loss ln(vocab), gradient (1/V - onehot)/B. */
    {
        double z[2 * 16] = {0}, dz[2 * 16];
        uint8_t t2[2] = {3, 9};
        double l = demo_softmax_xent_f64(2, 16, z, t2, dz, 1.0);
        CHECK_NEAR(l, log(16.0), 1e-12);
        CHECK_NEAR(dz[3], (1.0 / 16 - 1) / 2, 1e-12);
        CHECK_NEAR(dz[4], (1.0 / 16) / 2, 1e-12);
        CHECK_NEAR(dz[16 + 9], (1.0 / 16 - 1) / 2, 1e-12);
    }

    for (int k = 0; k < DEMO_NPARAMS; ++k) {
        free(pd[k]);
        free(gd[k]);
        free(pf[k]);
        free(gf[k]);
    }
    return check_finish();
}
