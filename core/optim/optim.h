/* CPU optimizer and elementwise kernels (internal).  Stateless, thread-safe;
 * large ranges are processed in tiles so fp32 temporaries stay bounded. */
#ifndef ZERO_CORE_OPTIM_H
#define ZERO_CORE_OPTIM_H
#include <stddef.h>
#include "zero_plugin.h"
#include "optim_math.h"

/* fp32 state arrays the optimizer keeps per element (Adam/AdamW/Lamb 2,
 * SGD with momentum 1, SGD without 0, Lion 1, Adagrad 1). */
uint32_t zero__optim_state_count(zero_optim_kind k, double momentum);

/* Per-step scalars for step number t (1-based) from the group's
 * hyper-parameters. */
zero_optim_scalars zero__optim_scalars(zero_optim_kind k, double lr, double beta1, double beta2,
                                       double eps, double weight_decay, double momentum, int nesterov,
                                       int bias_correction, uint64_t t);

/* One fused pass over n elements: g = grad[i] * grad_mul; update master[i]
 * and state[k][i]; if param_out, write the new weight in out_dt (RNE). */
void zero__optim_step(zero_optim_kind k, const zero_optim_scalars *s, float *master, float *const *state,
                      const float *grad, float grad_mul, void *param_out, zero_dtype out_dt, size_t n);

double zero__sumsq_f32(const float *x, size_t n);   /* fp64 accumulation, fixed order */
int zero__nonfinite_f32(const float *x, size_t n);  /* 1 if any Inf/NaN */
void zero__convert(void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt, size_t n);
void zero__add_into(float *dst, const void *src, zero_dtype src_dt, size_t n);
#endif
