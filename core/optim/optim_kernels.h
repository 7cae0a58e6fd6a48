/* Internal interface between the optimizer step driver (optim_step.c) and
 * its kernel variants (scalar here, hand-vectorized ones in optim_simd_*.c).
 * Every variant computes exactly the per-element sequence of optim_math.h,
 * so the variants agree bitwise (see the exactness note there). */
#ifndef ZERO_CORE_OPTIM_KERNELS_H
#define ZERO_CORE_OPTIM_KERNELS_H
#include "optim.h"

/* Everything one step needs; built once per zero__optim_step call and only
 * read by the kernels (so several threads share one). */
typedef struct zero__step_args {
    zero_optim_kind kind;
    zero_optim_scalars s;
    float *master;
    float *state0, *state1; /* NULL when the optimizer keeps fewer states */
    const float *grad;
    float grad_mul;
    void *out;              /* NULL: no copy-out */
    zero_dtype out_dt;
} zero__step_args;

/* Process elements [lo, hi) tile by tile.  Thread-safe for disjoint ranges. */
typedef void (*zero__step_kernel)(const zero__step_args *a, size_t lo, size_t hi);

void zero__optim_step_scalar(const zero__step_args *a, size_t lo, size_t hi);

/* Copy-out of master[lo, hi) to a->out in a->out_dt (scalar helper, also
 * used by the SIMD variants for kinds they do not vectorize). */
void zero__optim_copy_out_scalar(const zero__step_args *a, size_t lo, size_t hi);
#endif
