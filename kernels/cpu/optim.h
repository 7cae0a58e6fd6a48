/* CPU optimizer and elementwise kernels (internal).  Stateless, thread-safe;
 * large ranges are processed in tiles so fp32 temporaries stay bounded. */
#ifndef ZERO_KERNELS_OPTIM_H
#define ZERO_KERNELS_OPTIM_H
#include <stddef.h>
#include "zero_plugin.h"
#include "optim_math.h"

/* fp32 state arrays the optimizer keeps per element (Adam/AdamW/Lamb 2,
 * SGD with momentum 1, SGD without 0, Lion 1, Adagrad 1). */
uint32_t zero__optim_state_count(zero_optim_kind k, double momentum);

/* 1 if zero__optim_step implements kind k.  LAMB needs per-tensor trust
 * ratios (norms over whole params), which a per-element range kernel cannot
 * compute: callers must refuse it (zero__optim_step leaves the range
 * untouched for unsupported kinds). */
int zero__optim_supported(zero_optim_kind k);

/* Per-step scalars for step number t (1-based) from the group's
 * hyper-parameters. */
zero_optim_scalars zero__optim_scalars(zero_optim_kind k, double lr, double beta1, double beta2,
                                       double eps, double weight_decay, double momentum, int nesterov,
                                       int bias_correction, uint64_t t);

/* One fused pass over n elements: g = grad[i] * grad_mul; update master[i]
 * and state[k][i]; if param_out, write the new weight in out_dt (RNE).
 * state[] must hold zero__optim_state_count() arrays.  The arrays must not
 * overlap, except that param_out may equal master when out_dt is F32.
 * Elementwise, so the result does not depend on tiling or threads. */
void zero__optim_step(zero_optim_kind k, const zero_optim_scalars *s, float *master, float *const *state,
                      const float *grad, float grad_mul, void *param_out, zero_dtype out_dt, size_t n);

/* Sum of squares in fp64.  The summation order is fixed by n alone, so the
 * result is bitwise the same for any thread count and SIMD variant, and on
 * the GPU (kernels/cuda):
 *   - blocks of ZERO_SUMSQ_BLOCK elements, each summed in ZERO_SUMSQ_LANES
 *     (32) fp64 lanes folded by a fixed pairwise tree (optim_math.h);
 *   - the block sums combined by a fixed tree of fan-in ZERO_SUMSQ_FANIN:
 *     consecutive groups of FANIN values are summed left to right (the last
 *     group may be short), level after level, until one value is left.
 * The second level is a tree rather than one running sum so that a GPU can
 * combine block sums in parallel (a running sum over 16k blocks was a serial
 * tail longer than reading the data).  Up to FANIN blocks (64k elements)
 * this is the plain running sum.  Blocks are 1024 elements so that a GPU
 * runs a lane (32 elements) per thread step group with enough threads in
 * flight (4096-element blocks left it latency-bound: 0.7 of a copy). */
double zero__sumsq_f32(const float *x, size_t n);
#define ZERO_SUMSQ_FANIN 64
/* The block-sum tree, fed one block sum at a time (in block order): callers
 * that make their own blocks (16-bit tiles converted to fp32) combine them
 * exactly as zero__sumsq_f32 does.  Initialise with {0}.  Not thread-safe
 * (one combiner per sum). */
typedef struct zero__sumsq_tree {
    double acc[12];     /* running sum of the current group at each level */
    uint32_t count[12]; /* values added to it so far */
} zero__sumsq_tree;
void zero__sumsq_tree_add(zero__sumsq_tree *t, double block_sum);
double zero__sumsq_tree_finish(zero__sumsq_tree *t);
int zero__nonfinite_f32(const float *x, size_t n);  /* 1 if any Inf/NaN */
/* dst[i] = src[i] converted (F32/BF16/F16, RNE, NaN stays NaN).  Same dtype:
 * a copy (the buffers may overlap).  Different dtypes: they must not
 * overlap.  Unknown dtypes: nothing is written. */
void zero__convert(void *dst, zero_dtype dst_dt, const void *src, zero_dtype src_dt, size_t n);
/* dst[i] += (float)src[i].  Unknown dtype: nothing is written. */
void zero__add_into(float *dst, const void *src, zero_dtype src_dt, size_t n);

/* Threads the CPU kernels use (optim_threads.c): OMP_NUM_THREADS when the
 * user set it, else the CPUs this process may use divided by the ranks on
 * its node (zero__optim_set_node_ranks; one per CPU until a communicator
 * says).  Thread-safe; process-wide (the last communicator made sets it). */
int zero__optim_threads(void);
void zero__optim_set_node_ranks(int ranks);

/* Elements per tile of the step kernels (bounds per-thread temporaries). */
#define ZERO_OPTIM_TILE 2048
#define ZERO_SUMSQ_BLOCK 1024
#endif
