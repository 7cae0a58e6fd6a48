/* The bench/peers model in C: `layers` x (Linear(width, width) + tanh),
 * mean-squared-error loss, exactly PyTorch's nn.Sequential of the same
 * layers (weights [out][in], y = tanh(x W^T + b)).  The matrix products go
 * to CBLAS (OpenBLAS from Debian), as PyTorch's go to its BLAS.  Pure
 * functions over caller-owned buffers (row-major, mb rows of width);
 * thread-safe on disjoint outputs. */
#ifndef BENCH_PEERS_MLP_H
#define BENCH_PEERS_MLP_H

/* out = tanh(in W^T + b). */
void peers_layer_forward(int mb, int width, const float *w, const float *b, const float *in, float *out);
/* The loss (mean over mb*width elements of (out - y)^2) and its gradient
 * d = 2 (out - y) / (mb * width). */
double peers_mse(int mb, int width, const float *out, const float *y, float *d);
/* One layer backward.  On entry d is dL/d(out); on return it is dL/dz
 * (z = in W^T + b).  The weight and bias gradients are ADDED into gw, gb
 * (libzero's buffers hold what earlier micro-batches left there). */
void peers_layer_backward(int mb, int width, const float *in, const float *out, float *d, float *gw, float *gb);
/* dL/d(in) = dz W into d_in (overwritten). */
void peers_layer_input_grad(int mb, int width, const float *w, const float *dz, float *d_in);
#endif
