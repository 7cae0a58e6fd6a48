/* Bodies of libzero's CUDA kernels, written in the common subset of C11 and
 * CUDA C++ so that the same text compiles two ways:
 *   - by nvcc, from the kernels/cuda .cu launchers (real __global__ kernels);
 *   - by a C compiler under tests/cuda_shim/cuda_shim.h, which defines
 *     __global__, threadIdx, blockIdx, blockDim and gridDim and runs a grid
 *     as nested loops, so the CPU tests check these exact bodies against the
 *     CPU kernels (core/optim) on random inputs.
 *
 * Rules that keep the shim valid: a kernel may use only the grid/block
 * indices, no __shared__ memory, no __syncthreads, no warp intrinsics, no
 * atomics whose result is read back, and threads of a grid must not depend
 * on each other's writes (every kernel here is elementwise or has one thread
 * own each output).  Per-element math comes from core/optim/optim_math.h,
 * the header the CPU kernels use; with nvcc --fmad=false (set in
 * cmake/ZeroCuda.cmake) a GPU step is bitwise equal to the CPU step.
 *
 * Thread-safety: pure functions and kernels; the planner writes only the
 * args struct it is given. */
#ifndef ZERO_CUDA_KERNEL_BODIES_H
#define ZERO_CUDA_KERNEL_BODIES_H
#include <stddef.h>
#include <stdint.h>

#include "optim_math.h"
#include "zero_cuda_types.h"
#include "zero_plugin.h"

#if defined(__CUDACC__)
#define ZERO_CUDA_GLOBAL __global__
#define ZERO_CUDA_SQRT(x) sqrt(x)
#elif defined(ZERO_CUDA_SHIM)
#define ZERO_CUDA_GLOBAL __global__ /* the shim defines it as a host function */
#define ZERO_CUDA_SQRT(x) sqrt(x)
#else
#error "include through a .cu file or tests/cuda_shim/cuda_shim.h"
#endif

/* Launch geometry. */
#define ZERO_CUDA_THREADS 256          /* threads per block, every kernel */
#define ZERO_CUDA_MT_MAX_TENSORS 16    /* tensors per multi-tensor launch */
#define ZERO_CUDA_MT_MAX_BLOCKS 256    /* blocks per multi-tensor launch */
#define ZERO_CUDA_MT_CHUNK 16384       /* elements one block of the optimizer kernel covers */
/* Must equal ZERO_SUMSQ_BLOCK (core/optim/optim.h): the GPU sum of squares
 * reproduces the CPU summation order (checked by the shim test). */
#define ZERO_CUDA_SUMSQ_BLOCK 4096
#define ZERO_CUDA_MAX_GRID 4096        /* grid-stride kernels: enough blocks to fill an H100 */


/* Kernel argument, passed by value (< 4 KiB, the classic parameter limit):
 * the apex/DeepSpeed multi_tensor_apply layout, block b works on chunk
 * block_chunk[b] of tensor block_tensor[b]. */
typedef struct zero_cuda_mt_args {
    zero_optim_scalars s;
    int32_t kind;            /* zero_optim_kind */
    int32_t grad_dt, out_dt; /* zero_dtype */
    float grad_mul;          /* used when grad_mul_dev is NULL */
    const float *grad_mul_dev; /* device scalar computed on the GPU (zero_cuda_k_clip_mul), or NULL */
    zero_cuda_mt_tensor t[ZERO_CUDA_MT_MAX_TENSORS];
    uint32_t block_chunk[ZERO_CUDA_MT_MAX_BLOCKS];
    uint8_t block_tensor[ZERO_CUDA_MT_MAX_BLOCKS];
} zero_cuda_mt_args;

/* ---- element access in any model dtype --------------------------------- */

ZERO_HD float zero_cuda_ld(const void *p, int32_t dt, uint64_t i) {
    if (dt == ZERO_DTYPE_BF16) return zero_bf16_to_f32(((const uint16_t *)p)[i]);
    if (dt == ZERO_DTYPE_F16) return zero_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

ZERO_HD void zero_cuda_st(void *p, int32_t dt, uint64_t i, float v) {
    if (dt == ZERO_DTYPE_BF16) ((uint16_t *)p)[i] = zero_f32_to_bf16(v);
    else if (dt == ZERO_DTYPE_F16) ((uint16_t *)p)[i] = zero_f32_to_f16(v);
    else ((float *)p)[i] = v;
}

/* Exponent all ones: Inf or NaN, judged on the stored bits. */
ZERO_HD int zero_cuda_nonfinite_at(const void *p, int32_t dt, uint64_t i) {
    if (dt == ZERO_DTYPE_BF16) return (((const uint16_t *)p)[i] & 0x7f80u) == 0x7f80u;
    if (dt == ZERO_DTYPE_F16) return (((const uint16_t *)p)[i] & 0x7c00u) == 0x7c00u;
    return (((const uint32_t *)p)[i] & 0x7f800000u) == 0x7f800000u;
}

/* One element of one optimizer step: exactly what core/optim's scalar
 * kernel does per element (g = grad * grad_mul, update, copy-out). */
ZERO_HD void zero_cuda_optim_elem(const zero_optim_scalars *s, int32_t kind, float g, float *master,
                                  float *state0, float *state1, uint64_t i) {
    switch (kind) {
    case ZERO_OPTIM_ADAMW: zero_adamw_update(s, g, &master[i], &state0[i], &state1[i]); break;
    case ZERO_OPTIM_ADAM: zero_adam_update(s, g, &master[i], &state0[i], &state1[i]); break;
    case ZERO_OPTIM_SGD: zero_sgd_update(s, g, &master[i], s->momentum != 0.0f ? &state0[i] : (float *)0); break;
    case ZERO_OPTIM_LION: zero_lion_update(s, g, &master[i], &state0[i]); break;
    case ZERO_OPTIM_ADAGRAD: zero_adagrad_update(s, g, &master[i], &state0[i]); break;
    default: break; /* LAMB: refused by the launcher */
    }
}

/* ---- kernels ------------------------------------------------------------ */

/* Fused multi-tensor step: unscale/clip multiplier, update, copy-out. */
ZERO_CUDA_GLOBAL void zero_cuda_k_optim(zero_cuda_mt_args a) {
    const unsigned b = blockIdx.x;
    const unsigned ti = a.block_tensor[b];
    const uint64_t n = a.t[ti].n;
    const uint64_t lo = (uint64_t)a.block_chunk[b] * ZERO_CUDA_MT_CHUNK;
    const uint64_t hi = n - lo < ZERO_CUDA_MT_CHUNK ? n : lo + ZERO_CUDA_MT_CHUNK;
    float *master = a.t[ti].master, *s0 = a.t[ti].state0, *s1 = a.t[ti].state1;
    const void *grad = a.t[ti].grad;
    void *out = a.t[ti].out;
    const zero_optim_scalars s = a.s;
    const float gm = a.grad_mul_dev ? *a.grad_mul_dev : a.grad_mul;
    for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        zero_cuda_optim_elem(&s, a.kind, zero_cuda_ld(grad, a.grad_dt, i) * gm, master, s0, s1, i);
        if (out) zero_cuda_st(out, a.out_dt, i, master[i]);
    }
}

/* Sum of squares, phase 1: one thread per ZERO_CUDA_SUMSQ_BLOCK-element
 * block, eight fp64 lanes (lane j takes elements i = j mod 8), lanes
 * combined as a fixed tree: the same order as zero__sumsq_f32, so the
 * result is bitwise the CPU's.  A warp reads 32 sectors of 32 contiguous
 * bytes per step, which keeps DRAM sectors fully used without shared
 * memory. */
ZERO_CUDA_GLOBAL void zero_cuda_k_sumsq_blocks(const void *x, int32_t dt, uint64_t n, double *part) {
    const uint64_t b = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint64_t nblocks = (n + ZERO_CUDA_SUMSQ_BLOCK - 1) / ZERO_CUDA_SUMSQ_BLOCK;
    if (b >= nblocks) return;
    const uint64_t lo = b * ZERO_CUDA_SUMSQ_BLOCK;
    const uint64_t len = n - lo < ZERO_CUDA_SUMSQ_BLOCK ? n - lo : ZERO_CUDA_SUMSQ_BLOCK;
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint64_t i = 0;
    for (; i + 8 <= len; i += 8)
        for (int j = 0; j < 8; ++j) {
            const double v = (double)zero_cuda_ld(x, dt, lo + i + j);
            acc[j] += v * v;
        }
    for (int j = 0; i < len; ++i, ++j) {
        const double v = (double)zero_cuda_ld(x, dt, lo + i);
        acc[j] += v * v;
    }
    part[b] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Phase 2: one thread adds the block sums in block order (as the CPU does).
 * Sequential on purpose: determinism and CPU equality over speed; it reads
 * n/4096 doubles once per optimizer step. */
ZERO_CUDA_GLOBAL void zero_cuda_k_sum_in_order(const double *part, uint64_t nblocks, double *out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double total = 0.0;
    for (uint64_t b = 0; b < nblocks; ++b) total += part[b];
    *out = total;
}

/* Any Inf/NaN: every thread that sees one writes 1 (benign identical
 * writes; nobody reads the flag inside the grid).  The caller zeroes it. */
ZERO_CUDA_GLOBAL void zero_cuda_k_nonfinite(const void *x, int32_t dt, uint64_t n, int32_t *flag) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        if (zero_cuda_nonfinite_at(x, dt, i)) *flag = 1;
}

/* dst[i] = src[i] converted (RNE; NaN stays NaN), as zero__convert. */
ZERO_CUDA_GLOBAL void zero_cuda_k_convert(void *dst, int32_t dst_dt, const void *src, int32_t src_dt, uint64_t n) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (dst_dt == src_dt && dst_dt != ZERO_DTYPE_F32) /* 16-bit copy: keep NaN payloads bit-exact */
            ((uint16_t *)dst)[i] = ((const uint16_t *)src)[i];
        else
            zero_cuda_st(dst, dst_dt, i, zero_cuda_ld(src, src_dt, i));
    }
}

/* dst[i] += (float)src[i], as zero__add_into. */
ZERO_CUDA_GLOBAL void zero_cuda_k_add_into(float *dst, const void *src, int32_t src_dt, uint64_t n) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = dst[i] + zero_cuda_ld(src, src_dt, i);
}

/* dst[i] = round(dst[i] + src[i]) in dst_dt, the sum formed in fp32: the
 * bucket engine's accumulation into 16-bit gradient buffers (one rounding,
 * as the CPU's widen-add-narrow tile loop in backends/device/device.c). */
ZERO_CUDA_GLOBAL void zero_cuda_k_add_into_dt(void *dst, int32_t dst_dt, const void *src, int32_t src_dt,
                                              uint64_t n) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        zero_cuda_st(dst, dst_dt, i, zero_cuda_ld(dst, dst_dt, i) + zero_cuda_ld(src, src_dt, i));
}

/* x[i] *= a (the bucket engine's pre/post reduction scaling). */
ZERO_CUDA_GLOBAL void zero_cuda_k_scale(float *x, float a, uint64_t n) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) x[i] = x[i] * a;
}

/* Gradient multiplier from the global sum of squares, on the GPU so that
 * the step needs no host round trip (DeepSpeed's clip rule):
 *   norm     = sqrt(sumsq) * inv        inv = 1 / (loss_scale * world * gas)
 *   coef     = clip > 0 && norm > clip ? clip / (norm + 1e-6) : 1
 *   grad_mul = (float)(inv * coef)      norm_out (optional) = norm
 * A non-finite sumsq yields a non-finite norm; the caller skips the step. */
ZERO_CUDA_GLOBAL void zero_cuda_k_clip_mul(const double *sumsq, double inv, double clip, float *grad_mul,
                                           double *norm_out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const double norm = ZERO_CUDA_SQRT(*sumsq) * inv;
    const double coef = (clip > 0.0 && norm > clip) ? clip / (norm + 1e-6) : 1.0;
    *grad_mul = (float)(inv * coef);
    if (norm_out) *norm_out = norm;
}

/* ---- host-side planning (shared by the launchers and the shim tests) --- */

/* Grid for a grid-stride kernel over n elements. */
static inline unsigned zero_cuda_grid_for(uint64_t n) {
    uint64_t g = (n + ZERO_CUDA_THREADS - 1) / ZERO_CUDA_THREADS;
    if (g == 0) g = 1;
    return (unsigned)(g > ZERO_CUDA_MAX_GRID ? ZERO_CUDA_MAX_GRID : g);
}

typedef void (*zero_cuda_mt_launch_fn)(const zero_cuda_mt_args *a, unsigned nblocks, void *user);

/* Cut `nt` tensors into launches of at most ZERO_CUDA_MT_MAX_TENSORS
 * tensors and ZERO_CUDA_MT_MAX_BLOCKS blocks; call `launch` for each with
 * `a` (whose scalar fields the caller filled) completed.  A tensor larger
 * than one launch continues in the next (re-entered as slot 0).  Empty
 * tensors are skipped.  Returns the number of launches. */
static inline unsigned zero_cuda_mt_plan(zero_cuda_mt_args *a, const zero_cuda_mt_tensor *ts, size_t nt,
                                         zero_cuda_mt_launch_fn launch, void *user) {
    unsigned launches = 0, nb = 0, slot = 0;
    for (size_t k = 0; k < nt; ++k) {
        const uint64_t nchunks = (ts[k].n + ZERO_CUDA_MT_CHUNK - 1) / ZERO_CUDA_MT_CHUNK;
        if (nchunks == 0) continue;
        a->t[slot] = ts[k];
        for (uint64_t c = 0; c < nchunks; ++c) {
            a->block_tensor[nb] = (uint8_t)slot;
            a->block_chunk[nb] = (uint32_t)c;
            ++nb;
            const int last_chunk = c + 1 == nchunks;
            if (nb == ZERO_CUDA_MT_MAX_BLOCKS || (last_chunk && slot + 1 == ZERO_CUDA_MT_MAX_TENSORS)) {
                launch(a, nb, user);
                ++launches;
                nb = 0;
                /* The rest of this tensor (if any) restarts in slot 0. */
                slot = 0;
                if (!last_chunk) a->t[0] = ts[k];
                else slot = (unsigned)-1; /* next tensor takes slot 0 */
            }
        }
        slot = slot == (unsigned)-1 ? 0 : slot + 1;
    }
    if (nb) {
        launch(a, nb, user);
        ++launches;
    }
    return launches;
}
#endif
