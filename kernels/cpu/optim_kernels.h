/* Internal interface between the optimizer step driver (optim_step.c) and
 * its kernel variants (scalar here, hand-vectorized ones in optim_simd_*.c).
 * Every variant computes exactly the per-element sequence of optim_math.h,
 * so the variants agree bitwise (see the exactness note there). */
#ifndef ZERO_KERNELS_OPTIM_KERNELS_H
#define ZERO_KERNELS_OPTIM_KERNELS_H
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

/* Hand-vectorized variants (x86-64 only; compiled with per-function target
 * attributes, so one build runs on any x86-64 and picks at run time).  They
 * vectorize AdamW, Adam and SGD and hand other kinds to the scalar kernel.
 * Call only when zero__simd_available() says the CPU has the ISA. */
void zero__optim_step_avx2(const zero__step_args *a, size_t lo, size_t hi);
void zero__optim_step_avx512(const zero__step_args *a, size_t lo, size_t hi);

typedef enum zero__simd {
    ZERO__SIMD_SCALAR = 0,
    ZERO__SIMD_AVX2 = 1,   /* AVX2 + F16C */
    ZERO__SIMD_AVX512 = 2, /* AVX-512F */
    ZERO__SIMD_COUNT = 3
} zero__simd;

/* 1 if this build has the variant and this CPU can run it.  Thread-safe. */
int zero__simd_available(zero__simd v);
/* The variant zero__optim_step uses: ZERO_SIMD=scalar|avx2|avx512 if set
 * and available (an unavailable or unknown request falls back to the best,
 * with a warning), else the best available.  Decided once per process. */
zero__simd zero__simd_active(void);
const char *zero__simd_name(zero__simd v); /* static string */
zero__step_kernel zero__simd_kernel(zero__simd v); /* NULL if unavailable */

/* zero__optim_step with an explicit variant (tests, benchmarks); falls back
 * to scalar if v is unavailable.  Multi-threaded like zero__optim_step. */
void zero__optim_step_variant(zero__simd v, zero_optim_kind k, const zero_optim_scalars *s, float *master,
                              float *const *state, const float *grad, float grad_mul, void *param_out,
                              zero_dtype out_dt, size_t n);

/* Copy-out of master[lo, hi) to a->out in a->out_dt (scalar helper, also
 * used by the SIMD variants for kinds they do not vectorize). */
void zero__optim_copy_out_scalar(const zero__step_args *a, size_t lo, size_t hi);

/* Reductions.  A sumsq block (<= ZERO_SUMSQ_BLOCK elements) is summed in
 * ZERO_SUMSQ_LANES fp64 lanes folded by zero_sumsq_fold (optim_math.h).
 * Every variant, and the CUDA kernel (kernels/cuda), implements exactly this,
 * so all agree bitwise: do not change the order without changing them all.
 * Thread-safe (pure). */
double zero__sumsq_block_scalar(const float *x, size_t n);
double zero__sumsq_block_avx2(const float *x, size_t n);
double zero__sumsq_block_avx512(const float *x, size_t n);
/* Shared ending of every variant: add the tail elements tail[0, n) (n <
 * ZERO_SUMSQ_LANES, lanes 0..n-1) into acc, fold, return the sum. */
double zero__sumsq_finish(double *acc, const float *tail, size_t n);
/* 1 if any of x[0, n) is Inf or NaN. */
int zero__nonfinite_scalar(const float *x, size_t n);
int zero__nonfinite_avx2(const float *x, size_t n);
int zero__nonfinite_avx512(const float *x, size_t n);
#endif
