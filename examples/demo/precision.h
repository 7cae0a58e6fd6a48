/* Host-side conversions for a bf16/fp16 model (the config's bf16.enabled /
 * fp16.enabled): libzero keeps parameters and gradients in the model dtype;
 * the demo keeps its activations and gradient math in fp32 and converts at
 * the boundaries, as a real mixed-precision trainer does.  Round to nearest
 * even; NaN stays NaN; overflow becomes Inf (so libzero's fp16 overflow
 * check sees it).  Pure functions, thread-safe. */
#ifndef DEMO_PRECISION_H
#define DEMO_PRECISION_H
#include <stddef.h>

#include "zero.h"

/* out[i] = (float)in[i] for n elements of dtype dt. */
void demo_widen(const void *in, zero_dtype dt, float *out, size_t n);
/* dst[i] = round(dst[i] + src[i]) in dtype dt (the add in fp32): how the
 * host ADDS its fp32 gradient into libzero's model-dtype buffer. */
void demo_add_rounded(void *dst, zero_dtype dt, const float *src, size_t n);
/* dst[i] = round(src[i]) in dtype dt. */
void demo_narrow(const float *src, void *dst, zero_dtype dt, size_t n);
/* Bytes per element of dt. */
static inline size_t demo_dtype_size(zero_dtype dt) { return dt == ZERO_DTYPE_F32 ? 4 : 2; }
#endif
