/* zero__optim_step: the best kernel variant for this CPU (see
 * optim_dispatch.c), multi-threaded over large ranges. */
#include "optim_kernels.h"

void zero__optim_step(zero_optim_kind k, const zero_optim_scalars *s, float *master, float *const *state,
                      const float *grad, float grad_mul, void *param_out, zero_dtype out_dt, size_t n) {
    zero__optim_step_variant(zero__simd_active(), k, s, master, state, grad, grad_mul, param_out, out_dt, n);
}
