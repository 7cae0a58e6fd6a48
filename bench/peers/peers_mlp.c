/* See peers_mlp.h. */
#include "peers_mlp.h"

#include <cblas.h>
#include <math.h>

void peers_layer_forward(int mb, int width, const float *w, const float *b, const float *in, float *out) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mb, width, width, 1.0f, in, width, w, width, 0.0f, out, width);
    for (int i = 0; i < mb; i++) {
        float *o = out + (size_t)i * width;
        for (int j = 0; j < width; j++) o[j] = tanhf(o[j] + b[j]);
    }
}

double peers_mse(int mb, int width, const float *out, const float *y, float *d) {
    const size_t n = (size_t)mb * (size_t)width;
    const float k = 2.0f / (float)n;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        float e = out[i] - y[i];
        sum += (double)e * e;
        d[i] = k * e;
    }
    return sum / (double)n;
}

void peers_layer_backward(int mb, int width, const float *in, const float *out, float *d, float *gw, float *gb) {
    const size_t n = (size_t)mb * (size_t)width;
    for (size_t i = 0; i < n; i++) d[i] *= 1.0f - out[i] * out[i]; /* tanh' */
    /* gW += dz^T in  (width x mb times mb x width) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, width, width, mb, 1.0f, d, width, in, width, 1.0f, gw, width);
    for (int i = 0; i < mb; i++) {
        const float *r = d + (size_t)i * width;
        for (int j = 0; j < width; j++) gb[j] += r[j];
    }
}

void peers_layer_input_grad(int mb, int width, const float *w, const float *dz, float *d_in) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mb, width, width, 1.0f, dz, width, w, width, 0.0f, d_in,
                width);
}
