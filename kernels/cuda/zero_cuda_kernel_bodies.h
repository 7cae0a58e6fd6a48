/* Bodies of libzero's CUDA kernels, written in the common subset of C11 and
 * CUDA C++ so that the same text compiles two ways:
 *   - by nvcc, from the kernels/cuda .cu launchers (real __global__ kernels);
 *   - by a C compiler under tests/cuda_shim/cuda_shim.h, which defines
 *     __global__, threadIdx, blockIdx, blockDim and gridDim and runs a grid
 *     as nested loops, so the CPU tests check these exact bodies against the
 *     CPU kernels (kernels/cpu) on random inputs.
 *
 * Rules that keep the shim valid: a kernel may use only the grid/block
 * indices, no warp intrinsics, no atomics whose result is read back, and
 * threads of a grid must not depend on each other's writes (every kernel
 * here is elementwise or has one thread own each output) -- except through
 * block-shared memory in the phase form: ZERO_CUDA_SHARED arrays, code in
 * ZERO_CUDA_PHASE { ... } blocks separated by ZERO_CUDA_BARRIER; such a
 * kernel is launched with ZERO_CUDA_LAUNCH_BLOCKS and its statements outside
 * phases must be the same for every thread of a block (the shim runs them
 * once per block).  No return/break/continue at a phase's top level.  Per-element math comes from kernels/cpu/optim_math.h,
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
#include <cuda_fp16.h>
#define ZERO_CUDA_GLOBAL __global__
#define ZERO_CUDA_DEV __device__ __forceinline__ /* device-only helper (may use device pragmas and intrinsics) */
#define ZERO_CUDA_SQRT(x) sqrt(x)
#elif defined(ZERO_CUDA_SHIM)
#define ZERO_CUDA_GLOBAL __global__ /* the shim defines it as a host function */
#define ZERO_CUDA_DEV static inline
#define ZERO_CUDA_SQRT(x) sqrt(x)
#else
#error "include through a .cu file or tests/cuda_shim/cuda_shim.h"
#endif

/* Block-cooperative kernels in phase form (see the rules above). */
#if defined(__CUDACC__)
#define ZERO_CUDA_SHARED(type, name, n) __shared__ type name[n]
#define ZERO_CUDA_PHASE
#define ZERO_CUDA_BARRIER __syncthreads()
#else
#define ZERO_CUDA_SHARED(type, name, n) type name[n]
#define ZERO_CUDA_PHASE ZERO_SHIM_PHASE
#define ZERO_CUDA_BARRIER ((void)0)
#endif

/* Launch geometry. */
#define ZERO_CUDA_THREADS 256          /* threads per block, every kernel but the sum of squares' */
/* Tensors per multi-tensor launch.  CUDA 12.1+ passes up to 32,764 bytes of
 * kernel arguments (Volta and later, driver r530+): 256 tensors make a
 * 512-tensor step two launches instead of eight (each launch ends in a
 * partly idle wave).  Older toolkits keep the classic 4 KiB limit.  The CPU
 * shim plans like a current toolkit. */
#if !defined(__CUDACC__) || (__CUDACC_VER_MAJOR__ > 12) || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 1)
#define ZERO_CUDA_MT_MAX_TENSORS 256
#define ZERO_CUDA_MAX_ARG_BYTES 32764
#else
#define ZERO_CUDA_MT_MAX_TENSORS 64
#define ZERO_CUDA_MAX_ARG_BYTES 4096
#endif
#define ZERO_CUDA_MT_CHUNK 8192        /* elements one block of the optimizer kernel covers */
/* Must equal ZERO_SUMSQ_BLOCK and ZERO_SUMSQ_FANIN (kernels/cpu/optim.h): the
 * GPU sum of squares reproduces the CPU summation order (checked by the shim
 * test). */
#define ZERO_CUDA_SUMSQ_BLOCK 1024
#define ZERO_CUDA_SUMSQ_LANES ZERO_SUMSQ_LANES /* optim_math.h: one warp per block */
#define ZERO_CUDA_SUMSQ_FANIN 64
/* The fused sum of squares: one CUDA block per tree group of FANIN sum
 * blocks, four lanes per thread (512 threads); lane rows padded by one
 * double so the fold's shared-memory reads do not collide in one bank. */
#define ZERO_CUDA_SUMSQ_GROUP_THREADS (ZERO_CUDA_SUMSQ_FANIN * ZERO_CUDA_SUMSQ_LANES / 4)
#define ZERO_CUDA_SUMSQ_ROW (ZERO_CUDA_SUMSQ_LANES + 1)
#define ZERO_CUDA_MAX_GRID 8192        /* grid-stride kernels: enough blocks to fill an H100/H200 */

#if defined(__CUDACC__)
#define ZERO_RESTRICT __restrict__
#define ZERO_CUDA_PRAGMA(x) _Pragma(#x)
#define ZERO_CUDA_UNROLL(n) ZERO_CUDA_PRAGMA(unroll n)
typedef float4 zero_cuda_f4; /* 16-byte loads and stores: what reaches HBM bandwidth */
typedef uint2 zero_cuda_u2;  /* four 16-bit values */
typedef uint4 zero_cuda_u4;
#else
#define ZERO_RESTRICT restrict
#define ZERO_CUDA_UNROLL(n)
/* Same field names as CUDA's vector types, so the bodies read the same. */
typedef struct { float x, y, z, w; } zero_cuda_f4;
typedef struct { uint32_t x, y; } zero_cuda_u2;
typedef struct { uint32_t x, y, z, w; } zero_cuda_u4;
#endif

/* Kernel argument, passed by value (< 4 KiB, the classic parameter limit):
 * up to ZERO_CUDA_MT_MAX_TENSORS tensors cut into chunks of
 * ZERO_CUDA_MT_CHUNK elements; block c of the grid works on chunk c, which
 * belongs to the tensor k with chunk_start[k] <= c < chunk_start[k + 1].
 * vec[k]: every array of tensor k is aligned for 16-byte fp32 and 8-byte
 * 16-bit accesses, so the kernel moves four elements per access. */
typedef struct zero_cuda_mt_args {
    zero_optim_scalars s;
    int32_t kind;            /* zero_optim_kind */
    int32_t grad_dt, out_dt; /* zero_dtype */
    float grad_mul;          /* used when grad_mul_dev is NULL */
    const float *grad_mul_dev; /* device scalar computed on the GPU (zero_cuda_k_clip_mul), or NULL */
    uint32_t ntensors;
    uint8_t vec[ZERO_CUDA_MT_MAX_TENSORS];
    uint32_t chunk_start[ZERO_CUDA_MT_MAX_TENSORS + 1];
    zero_cuda_mt_tensor t[ZERO_CUDA_MT_MAX_TENSORS];
} zero_cuda_mt_args;
/* The kernel-parameter limit of the toolkit (4 KiB before CUDA 12.1). */
#if defined(__cplusplus)
static_assert(sizeof(zero_cuda_mt_args) <= ZERO_CUDA_MAX_ARG_BYTES, "zero_cuda_mt_args exceeds the kernel-parameter limit");
#else
_Static_assert(sizeof(zero_cuda_mt_args) <= ZERO_CUDA_MAX_ARG_BYTES, "zero_cuda_mt_args exceeds the kernel-parameter limit");
#endif

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

/* One element of one optimizer step: exactly what kernels/cpu's scalar
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

/* Four consecutive gradient elements of quad q (elements 4q..4q+3) as fp32:
 * one 16-byte load (fp32) or one 8-byte load (16-bit). */
ZERO_HD void zero_cuda_ld4(const void *ZERO_RESTRICT p, int32_t dt, uint64_t q, float g[4]) {
    if (dt == ZERO_DTYPE_F32) {
        const zero_cuda_f4 v = ((const zero_cuda_f4 *)p)[q];
        g[0] = v.x, g[1] = v.y, g[2] = v.z, g[3] = v.w;
        return;
    }
    const zero_cuda_u2 v = ((const zero_cuda_u2 *)p)[q];
    const uint16_t h[4] = {(uint16_t)(v.x & 0xffffu), (uint16_t)(v.x >> 16), (uint16_t)(v.y & 0xffffu),
                           (uint16_t)(v.y >> 16)};
    for (int e = 0; e < 4; ++e) g[e] = dt == ZERO_DTYPE_BF16 ? zero_bf16_to_f32(h[e]) : zero_f16_to_f32(h[e]);
}

ZERO_HD void zero_cuda_st4(void *ZERO_RESTRICT p, int32_t dt, uint64_t q, const float w[4]) {
    if (dt == ZERO_DTYPE_F32) {
        zero_cuda_f4 v;
        v.x = w[0], v.y = w[1], v.z = w[2], v.w = w[3];
        ((zero_cuda_f4 *)p)[q] = v;
        return;
    }
    uint16_t h[4];
    for (int e = 0; e < 4; ++e) h[e] = dt == ZERO_DTYPE_BF16 ? zero_f32_to_bf16(w[e]) : zero_f32_to_f16(w[e]);
    zero_cuda_u2 v;
    v.x = (uint32_t)h[0] | (uint32_t)h[1] << 16;
    v.y = (uint32_t)h[2] | (uint32_t)h[3] << 16;
    ((zero_cuda_u2 *)p)[q] = v;
}

ZERO_HD zero_cuda_f4 zero_cuda_f4_of(const float a[4]) {
    zero_cuda_f4 v;
    v.x = a[0], v.y = a[1], v.z = a[2], v.w = a[3];
    return v;
}

/* Fused multi-tensor step: unscale/clip multiplier, update, copy-out.
 * Block c works on chunk c of the launch (see zero_cuda_mt_args); a chunk's
 * elements are read and written four at a time with 16-byte fp32 and 8-byte
 * 16-bit accesses when the tensor is aligned for it (always, for libzero's
 * own 256-byte aligned buffers), else one at a time.  The per-element math
 * is zero_cuda_optim_elem either way, so the bits do not depend on the path. */
ZERO_CUDA_GLOBAL void zero_cuda_k_optim(zero_cuda_mt_args a) {
    const uint32_t c = blockIdx.x;
    /* the tensor of chunk c: the last ti with chunk_start[ti] <= c (binary
     * search, uniform per block: <= 8 steps for 256 tensors) */
    uint32_t ti = 0, hi_t = a.ntensors;
    while (hi_t - ti > 1) {
        const uint32_t mid = (ti + hi_t) / 2;
        if (a.chunk_start[mid] <= c) ti = mid;
        else hi_t = mid;
    }
    const uint64_t n = a.t[ti].n;
    const uint64_t lo = (uint64_t)(c - a.chunk_start[ti]) * ZERO_CUDA_MT_CHUNK;
    const uint64_t hi = n - lo < ZERO_CUDA_MT_CHUNK ? n : lo + ZERO_CUDA_MT_CHUNK;
    float *ZERO_RESTRICT master = a.t[ti].master;
    float *ZERO_RESTRICT s0 = a.t[ti].state0;
    float *ZERO_RESTRICT s1 = a.t[ti].state1;
    const void *ZERO_RESTRICT grad = a.t[ti].grad;
    void *out = a.t[ti].out; /* may alias master (fp32 copy-out) */
    const zero_optim_scalars s = a.s;
    const int32_t kind = a.kind, gdt = a.grad_dt, odt = a.out_dt;
    const float gm = a.grad_mul_dev ? *a.grad_mul_dev : a.grad_mul;
    uint64_t i0 = lo; /* first element of the scalar part */
    if (a.vec[ti]) {
        const uint64_t q_hi = hi / 4; /* lo is a multiple of 4 (of the chunk) */
        for (uint64_t q = lo / 4 + threadIdx.x; q < q_hi; q += blockDim.x) {
            float g[4], m[4], v0[4] = {0, 0, 0, 0}, v1[4] = {0, 0, 0, 0};
            zero_cuda_ld4(grad, gdt, q, g);
            zero_cuda_ld4(master, ZERO_DTYPE_F32, q, m);
            if (s0) zero_cuda_ld4(s0, ZERO_DTYPE_F32, q, v0);
            if (s1) zero_cuda_ld4(s1, ZERO_DTYPE_F32, q, v1);
            ZERO_CUDA_UNROLL(4)
            for (int e = 0; e < 4; ++e) zero_cuda_optim_elem(&s, kind, g[e] * gm, m, v0, v1, (uint64_t)e);
            ((zero_cuda_f4 *)master)[q] = zero_cuda_f4_of(m);
            if (s0) ((zero_cuda_f4 *)s0)[q] = zero_cuda_f4_of(v0);
            if (s1) ((zero_cuda_f4 *)s1)[q] = zero_cuda_f4_of(v1);
            if (out) zero_cuda_st4(out, odt, q, m);
        }
        i0 = q_hi * 4;
    }
    for (uint64_t i = i0 + threadIdx.x; i < hi; i += blockDim.x) {
        zero_cuda_optim_elem(&s, kind, zero_cuda_ld(grad, gdt, i) * gm, master, s0, s1, i);
        if (out) zero_cuda_st(out, odt, i, master[i]);
    }
}

/* ---- sum of squares (order: kernels/cpu/optim.h, zero__sumsq_f32) ------ */

/* fp16 -> fp32 for the sum of squares: the hardware conversion on the GPU
 * (one instruction; exact, like zero_f16_to_f32, for every non-NaN input; a
 * NaN's payload does not matter to a sum that is NaN either way), the
 * shared software one under the shim. */
#if defined(__CUDACC__)
ZERO_CUDA_DEV float zero_cuda_sq_f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }
#else
ZERO_CUDA_DEV float zero_cuda_sq_f16(uint16_t h) { return zero_f16_to_f32(h); }
#endif

/* Lanes k0..k0+3 (k0 % 4 == 0) of sum block b: acc[e] = the in-order fp64
 * sum of squares of the block's elements k with k % 32 == k0 + e (exactly
 * lanes of the CPU's block kernel), read with one 16-byte (fp32) or 8-byte
 * (16-bit) load per step when x is aligned for it (libzero's own buffers
 * always are), else one element at a time in the same order. */
ZERO_CUDA_DEV void zero_cuda_sumsq_lanes4_of(const void *ZERO_RESTRICT x, int32_t dt, uint64_t n, uint64_t b, uint64_t k0,
                                      double acc[4]) {
    const uint64_t lo = b * ZERO_CUDA_SUMSQ_BLOCK;
    const uint64_t len = n - lo < ZERO_CUDA_SUMSQ_BLOCK ? n - lo : ZERO_CUDA_SUMSQ_BLOCK;
    uint64_t k = k0;
    if ((uintptr_t)x % (dt == ZERO_DTYPE_F32 ? 16u : 8u) != 0) { /* misaligned (uniform over the grid) */
        for (; k + 4 <= len; k += ZERO_CUDA_SUMSQ_LANES)
            for (int e = 0; e < 4; ++e) {
                const double d = (double)zero_cuda_ld(x, dt, lo + k + (uint64_t)e);
                acc[e] += d * d;
            }
    } else if (dt == ZERO_DTYPE_F32) {
        const float *ZERO_RESTRICT p = (const float *)x + lo;
        ZERO_CUDA_UNROLL(8)
        for (; k + 4 <= len; k += ZERO_CUDA_SUMSQ_LANES) {
            const zero_cuda_f4 v = *(const zero_cuda_f4 *)(p + k);
            const double d0 = (double)v.x, d1 = (double)v.y, d2 = (double)v.z, d3 = (double)v.w;
            acc[0] += d0 * d0, acc[1] += d1 * d1, acc[2] += d2 * d2, acc[3] += d3 * d3;
        }
    } else {
        const uint16_t *ZERO_RESTRICT p = (const uint16_t *)x + lo;
        const int bf = dt == ZERO_DTYPE_BF16;
        ZERO_CUDA_UNROLL(8)
        for (; k + 4 <= len; k += ZERO_CUDA_SUMSQ_LANES) {
            const zero_cuda_u2 v = *(const zero_cuda_u2 *)(p + k);
            const uint16_t h[4] = {(uint16_t)(v.x & 0xffffu), (uint16_t)(v.x >> 16), (uint16_t)(v.y & 0xffffu),
                                   (uint16_t)(v.y >> 16)};
            for (int e = 0; e < 4; ++e) {
                const double d = (double)(bf ? zero_bf16_to_f32(h[e]) : zero_cuda_sq_f16(h[e]));
                acc[e] += d * d;
            }
        }
    }
    /* the block's last, partial step: lanes whose element exists */
    for (int e = 0; e < 4 && k + (uint64_t)e < len; ++e) {
        const double d = (double)zero_cuda_ld(x, dt, lo + k + (uint64_t)e);
        acc[e] += d * d;
    }
}

/* The fused sum of squares, first tree level in one kernel: CUDA block g
 * owns tree group g, i.e. sum blocks [64g, 64g + 64).  Its 512 threads
 * compute the group's lanes (four each, as above) into shared memory; 64
 * threads fold one block's 32 lanes each (zero_sumsq_fold); thread 0 adds
 * the group's block sums left to right (the tree's first level) and writes
 * out[g].  The same operations in the same order as lanes -> fold ->
 * combine, so the same bits, with one pass over x and no lane traffic to
 * memory.  Launch: ZERO_CUDA_LAUNCH_BLOCKS, ZERO_CUDA_SUMSQ_GROUP_THREADS
 * threads. */
ZERO_CUDA_GLOBAL void zero_cuda_k_sumsq_group(const void *ZERO_RESTRICT x, int32_t dt, uint64_t n,
                                              double *ZERO_RESTRICT out) {
    ZERO_CUDA_SHARED(double, lane, ZERO_CUDA_SUMSQ_FANIN * ZERO_CUDA_SUMSQ_ROW);
    ZERO_CUDA_SHARED(double, bsum, ZERO_CUDA_SUMSQ_FANIN);
    const uint64_t nblocks = (n + ZERO_CUDA_SUMSQ_BLOCK - 1) / ZERO_CUDA_SUMSQ_BLOCK;
    const uint64_t first = (uint64_t)blockIdx.x * ZERO_CUDA_SUMSQ_FANIN;
    const uint64_t count = nblocks - first < ZERO_CUDA_SUMSQ_FANIN ? nblocks - first : ZERO_CUDA_SUMSQ_FANIN;
    ZERO_CUDA_PHASE {
        const uint64_t j = threadIdx.x / (ZERO_CUDA_SUMSQ_LANES / 4), k0 = (threadIdx.x % (ZERO_CUDA_SUMSQ_LANES / 4)) * 4;
        double acc[4] = {0.0, 0.0, 0.0, 0.0};
        if (j < count) zero_cuda_sumsq_lanes4_of(x, dt, n, first + j, k0, acc);
        for (int e = 0; e < 4; ++e) lane[j * ZERO_CUDA_SUMSQ_ROW + k0 + (uint64_t)e] = acc[e];
    }
    ZERO_CUDA_BARRIER;
    ZERO_CUDA_PHASE {
        if (threadIdx.x < count) {
            double a[ZERO_CUDA_SUMSQ_LANES];
            ZERO_CUDA_UNROLL(32)
            for (int l = 0; l < ZERO_CUDA_SUMSQ_LANES; ++l) a[l] = lane[threadIdx.x * ZERO_CUDA_SUMSQ_ROW + (unsigned)l];
            bsum[threadIdx.x] = zero_sumsq_fold(a);
        }
    }
    ZERO_CUDA_BARRIER;
    ZERO_CUDA_PHASE {
        if (threadIdx.x == 0) {
            double acc = bsum[0];
            for (uint64_t k = 1; k < count; ++k) acc += bsum[k];
            out[blockIdx.x] = acc;
        }
    }
}

/* Part 2, every tree level in one block: level values in `a` (m of them);
 * thread g sums group g's (up to) 64 values left to right, their loads
 * issued together (a level costs about one memory round trip), into the
 * other buffer `b` (at least ceil(m / 64) doubles), the last level into
 * `out`.  Launch: ZERO_CUDA_LAUNCH_BLOCKS with one block; m >= 2. */
ZERO_CUDA_GLOBAL void zero_cuda_k_sumsq_finish(double *a, double *b, uint64_t m, double *out) {
    while (m > 1) {
        const uint64_t groups = (m + ZERO_CUDA_SUMSQ_FANIN - 1) / ZERO_CUDA_SUMSQ_FANIN;
        double *dst = groups == 1 ? out : b;
        ZERO_CUDA_PHASE {
            for (uint64_t g = threadIdx.x; g < groups; g += blockDim.x) {
                const uint64_t k0 = g * ZERO_CUDA_SUMSQ_FANIN;
                const uint64_t len = m - k0 < ZERO_CUDA_SUMSQ_FANIN ? m - k0 : ZERO_CUDA_SUMSQ_FANIN;
                double v[ZERO_CUDA_SUMSQ_FANIN];
                ZERO_CUDA_UNROLL(64)
                for (int k = 0; k < ZERO_CUDA_SUMSQ_FANIN; ++k) v[k] = (uint64_t)k < len ? a[k0 + (uint64_t)k] : 0.0;
                double acc = v[0];
                ZERO_CUDA_UNROLL(64)
                for (int k = 1; k < ZERO_CUDA_SUMSQ_FANIN; ++k)
                    if ((uint64_t)k < len) acc += v[k];
                dst[g] = acc;
            }
        }
        ZERO_CUDA_BARRIER; /* the level is complete (and visible to the block) before the next reads it */
        b = a, a = dst, m = groups;
    }
}

/* Any Inf/NaN: every thread that sees one writes 1 (benign identical
 * writes; nobody reads the flag inside the grid).  The caller zeroes it.
 * Reads 16 bytes per thread and step (4 fp32 or 8 16-bit values) over the
 * aligned middle x16[0, n16); the launcher checks the ragged ends with the
 * element kernel below. */
ZERO_CUDA_GLOBAL void zero_cuda_k_nonfinite16(const zero_cuda_u4 *ZERO_RESTRICT x16, int32_t dt, uint64_t n16,
                                              int32_t *flag) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    uint32_t bad = 0;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        const zero_cuda_u4 v = x16[i];
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        for (int k = 0; k < 4; ++k) {
            if (dt == ZERO_DTYPE_F32) bad |= (w[k] & 0x7f800000u) == 0x7f800000u;
            else {
                const uint32_t e = dt == ZERO_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
                bad |= ((w[k] & e) == e) | (((w[k] >> 16) & e) == e);
            }
        }
    }
    if (bad) *flag = 1;
}

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

/* May tensor t take the four-wide path?  fp32 arrays 16-byte aligned,
 * 16-bit arrays 8-byte aligned (the kernel's vector accesses). */
static inline int zero_cuda_mt_vec_ok(const zero_cuda_mt_tensor *t, int32_t grad_dt, int32_t out_dt) {
    const uintptr_t g_al = grad_dt == ZERO_DTYPE_F32 ? 16 : 8, o_al = out_dt == ZERO_DTYPE_F32 ? 16 : 8;
    return (uintptr_t)t->master % 16 == 0 && (uintptr_t)t->state0 % 16 == 0 && (uintptr_t)t->state1 % 16 == 0 &&
           (uintptr_t)t->grad % g_al == 0 && (uintptr_t)t->out % o_al == 0;
}

/* Cut `nt` tensors into launches of at most ZERO_CUDA_MT_MAX_TENSORS tensors
 * each (any number of chunks: the grid is the launch's chunk count); call
 * `launch` for each with `a` (whose scalar fields the caller filled)
 * completed.  Empty tensors are skipped.  Returns the number of launches. */
static inline unsigned zero_cuda_mt_plan(zero_cuda_mt_args *a, const zero_cuda_mt_tensor *ts, size_t nt,
                                         zero_cuda_mt_launch_fn launch, void *user) {
    unsigned launches = 0;
    uint32_t slot = 0, chunks = 0;
    for (size_t k = 0; k <= nt; ++k) {
        if (k < nt && ts[k].n == 0) continue;
        if (slot && (k == nt || slot == ZERO_CUDA_MT_MAX_TENSORS)) {
            a->ntensors = slot;
            a->chunk_start[slot] = chunks;
            launch(a, chunks, user);
            ++launches;
            slot = 0, chunks = 0;
        }
        if (k == nt) break;
        a->t[slot] = ts[k];
        a->vec[slot] = (uint8_t)zero_cuda_mt_vec_ok(&ts[k], a->grad_dt, a->out_dt);
        a->chunk_start[slot] = chunks;
        chunks += (uint32_t)((ts[k].n + ZERO_CUDA_MT_CHUNK - 1) / ZERO_CUDA_MT_CHUNK);
        ++slot;
    }
    return launches;
}
#endif
