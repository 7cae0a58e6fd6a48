/* zero__optim_step: validates the call, packs the arguments and runs the
 * step kernel over the range. */
#include "optim_kernels.h"

void zero__optim_step(zero_optim_kind k, const zero_optim_scalars *s, float *master, float *const *state,
                      const float *grad, float grad_mul, void *param_out, zero_dtype out_dt, size_t n) {
    if (n == 0 || !s || !master || !grad || !zero__optim_supported(k)) return;
    uint32_t ns = zero__optim_state_count(k, s->momentum);
    if (ns > 0 && (!state || !state[0] || (ns > 1 && !state[1]))) return;
    zero__step_args a;
    a.kind = k;
    a.s = *s;
    a.master = master;
    a.state0 = ns > 0 ? state[0] : NULL;
    a.state1 = ns > 1 ? state[1] : NULL;
    a.grad = grad;
    a.grad_mul = grad_mul;
    a.out = param_out;
    a.out_dt = out_dt;
    zero__optim_step_scalar(&a, 0, n);
}
