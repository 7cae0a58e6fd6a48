/* Per-element optimizer math, shared verbatim by the CPU kernels and the
 * CUDA kernels (compiled as __host__ __device__ there) so that CPU tests
 * check the arithmetic the GPU runs.  No libc (sqrtf/fabsf exist on both
 * sides), no globals.
 *
 * Exactness contract: every function below is a fixed sequence of IEEE
 * single-precision operations (+, -, *, /, sqrt), each written out, no FMA
 * implied by the source.  The CPU build compiles with -std=c11, where GCC
 * does not contract a*b+c into an FMA, and the hand-vectorized CPU kernels
 * (optim_simd_*.c) replay the same sequence with the same rounding, so all
 * CPU variants agree bitwise.  nvcc contracts by default (--fmad=true);
 * compile with --fmad=false where bitwise CPU/GPU agreement is wanted.
 *
 * Thread-safety: pure functions of their arguments. */
#ifndef ZERO_OPTIM_MATH_H
#define ZERO_OPTIM_MATH_H

#include <stdint.h>

#if defined(__CUDACC__)
#define ZERO_HD __host__ __device__ __forceinline__
#else
#include <math.h>
#define ZERO_HD static inline
#endif

/* Scalars of one step for one param group, precomputed once per step
 * (zero__optim_scalars).  Read-only inside the kernels.  The derived ones
 * are computed from the configured hyper-parameters in double, as torch
 * computes them in Python floats, and rounded once to fp32 (torch rounds
 * a Python-float scalar to the tensor's dtype when it applies it): an fp32
 * 1.0f - 0.999f is 9.99987e-4, 1.3e-5 away from 1e-3, which moved AdamW
 * runs ~1e-5 (relative) away from torch's (issue 34). */
typedef struct zero_optim_scalars {
    float lr;
    float beta1, beta2, eps;
    float weight_decay;
    float one_minus_beta1; /* 1 - beta1 */
    float one_minus_beta2; /* 1 - beta2 */
    float decay;           /* 1 - lr*wd: AdamW's and Lion's decoupled decay */
    float step_size;       /* Adam/AdamW: lr / (1 - beta1^t), or lr without bias correction */
    float bc2_root;        /* Adam/AdamW: sqrt(1 - beta2^t) (divides sqrt(v)), or 1 */
    float bc1;          /* LAMB: 1 / (1 - beta1^t), or 1 without bias correction */
    float bc2_sqrt;     /* LAMB: 1 / sqrt(1 - beta2^t), or 1 without bias correction */
    float momentum;     /* SGD */
    int nesterov;
    int first_step;     /* SGD momentum buffer initialisation (t == 1) */
} zero_optim_scalars;

/* ------------------------------------------------------------------------ */
/* Optimizer updates.  `g` is the already unscaled gradient (grad * grad_mul).
 * Each updates *p and its state in place.                                   */
/* ------------------------------------------------------------------------ */

/* AdamW, decoupled weight decay (torch.optim.AdamW; DeepSpeed FusedAdam with
 * adam_w_mode=True), in torch's order of operations (torch 1.13's
 * _single_tensor_adamw on fp32 tensors, scalars as zero_optim_scalars says):
 *   p = p * decay                           decay = 1 - lr*wd
 *   m = beta1*m + (1-beta1)*g               exp_avg.mul_(beta1).add_(g, alpha=1-beta1)
 *   v = beta2*v + ((1-beta2)*g)*g           exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1-beta2)
 *   p = p - (step_size*m) / (sqrt(v)/bc2_root + eps)
 *                                           param.addcdiv_(exp_avg, denom, value=-step_size)
 * eps is added after the bias-corrected sqrt(v), as torch and DeepSpeed do.
 * torch's CPU kernels fuse the two moment updates into FMAs (vfmadd); these
 * are separate roundings (the exactness contract above), so an element can
 * differ from torch's by an ulp of m or v, never by a rounded scalar.
 * (torch >= 2.0 writes the first moment as exp_avg.lerp_(g, 1-beta1), i.e.
 * m + (1-beta1)*(g - m): the same value rounded differently; the tests
 * compare with the installed torch 1.13, bindings/python/tests/
 * test_torch_adamw.py.) */
ZERO_HD void zero_adamw_update(const zero_optim_scalars *s, float g, float *p, float *m, float *v) {
    float pp = *p * s->decay;
    float mm = s->beta1 * *m + s->one_minus_beta1 * g;
    float vv = s->beta2 * *v + (s->one_minus_beta2 * g) * g;
    float denom = sqrtf(vv) / s->bc2_root + s->eps;
    *p = pp - (s->step_size * mm) / denom;
    *m = mm;
    *v = vv;
}

/* Adam with L2 weight decay folded into the gradient (torch.optim.Adam with
 * weight_decay, DeepSpeed FusedAdam adam_w_mode=False):
 *   g = g + wd*p          (skipped when wd == 0, like torch)
 *   then the AdamW moments and update without the decoupled decay. */
ZERO_HD void zero_adam_update(const zero_optim_scalars *s, float g, float *p, float *m, float *v) {
    float pp = *p;
    if (s->weight_decay != 0.0f) g = g + s->weight_decay * pp;
    float mm = s->beta1 * *m + s->one_minus_beta1 * g;
    float vv = s->beta2 * *v + (s->one_minus_beta2 * g) * g;
    float denom = sqrtf(vv) / s->bc2_root + s->eps;
    *p = pp - (s->step_size * mm) / denom;
    *m = mm;
    *v = vv;
}

/* SGD as torch.optim.SGD (dampening 0):
 *   d = g + wd*p                      (skipped when wd == 0)
 *   momentum != 0:  buf = first_step ? d : momentum*buf + d
 *                   d   = nesterov ? d + momentum*buf : buf
 *   p = p - lr*d
 * `buf` is ignored (may be NULL) when momentum == 0. */
ZERO_HD void zero_sgd_update(const zero_optim_scalars *s, float g, float *p, float *buf) {
    float pp = *p;
    float d = g;
    if (s->weight_decay != 0.0f) d = d + s->weight_decay * pp;
    if (s->momentum != 0.0f) {
        float b = s->first_step ? d : s->momentum * *buf + d;
        *buf = b;
        d = s->nesterov ? d + s->momentum * b : b;
    }
    *p = pp - s->lr * d;
}

/* Lion (Chen et al. 2023; lion-pytorch, DeepSpeed FusedLion):
 *   p = p * decay             decay = 1 - lr*wd
 *   c = beta1*m + (1-beta1)*g
 *   p = p - lr*sign(c)        (sign(0) = 0)
 *   m = beta2*m + (1-beta2)*g */
ZERO_HD void zero_lion_update(const zero_optim_scalars *s, float g, float *p, float *m) {
    float pp = *p * s->decay;
    float c = s->beta1 * *m + s->one_minus_beta1 * g;
    float sgn = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f);
    *p = pp - s->lr * sgn;
    *m = s->beta2 * *m + s->one_minus_beta2 * g;
}

/* Adagrad as torch.optim.Adagrad (lr_decay 0, initial_accumulator_value 0):
 *   g = g + wd*p              (skipped when wd == 0)
 *   sum = sum + g*g
 *   p = p - lr * (g / (sqrt(sum) + eps)) */
ZERO_HD void zero_adagrad_update(const zero_optim_scalars *s, float g, float *p, float *sum) {
    float pp = *p;
    if (s->weight_decay != 0.0f) g = g + s->weight_decay * pp;
    float ss = *sum + g * g;
    *sum = ss;
    *p = pp - s->lr * (g / (sqrtf(ss) + s->eps));
}

/* ------------------------------------------------------------------------ */
/* dtype conversions: pure integer bit manipulation with round-to-nearest-   */
/* even, so CPU (scalar or SIMD) and CUDA produce identical bits whatever    */
/* the FPU's denormal/rounding modes.                                        */
/* ------------------------------------------------------------------------ */

ZERO_HD uint32_t zero_f32_bits(float f) {
#if defined(__CUDA_ARCH__) /* device pass only: the intrinsics do not exist on the host */
    return __float_as_uint(f);
#else
    union { float f; uint32_t u; } c;
    c.f = f;
    return c.u;
#endif
}

ZERO_HD float zero_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    union { float f; uint32_t u; } c;
    c.u = u;
    return c.f;
#endif
}

/* fp32 -> bf16, RNE.  NaN stays NaN (quiet bit set, sign and top payload
 * kept); Inf stays Inf; finite values above the bf16 range round to Inf as
 * RNE says; denormals round like any other value. */
ZERO_HD uint16_t zero_f32_to_bf16(float f) {
    uint32_t u = zero_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

ZERO_HD float zero_bf16_to_f32(uint16_t h) { return zero_bits_f32((uint32_t)h << 16); }

/* fp32 -> IEEE binary16, RNE.  NaN -> quiet NaN (sign and top payload bits
 * kept, as x86 F16C's vcvtps2ph does); |x| >= 65520 (the midpoint above the
 * largest half, 65504, which ties to even = Inf) -> Inf; results below 2^-14
 * become half subnormals, rounded to nearest even, down to signed zero. */
ZERO_HD uint16_t zero_f32_to_f16(float f) {
    uint32_t u = zero_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (u >= 0x38800000u) { /* normal half: rebias exponent 127 -> 15, round 13 bits */
        u += 0xfffu + ((u >> 13) & 1u);
        return (uint16_t)(sign | ((u - 0x38000000u) >> 13));
    }
    if (u <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25: ties to even zero */
    /* subnormal half: h = round(x * 2^24) with x = mant * 2^(e-150) */
    uint32_t e = u >> 23;
    uint32_t mant = (u & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..23 */
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) h += 1u; /* may carry into the smallest normal: right */
    return (uint16_t)(sign | h);
}

ZERO_HD float zero_f16_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t m = (uint32_t)h & 0x3ffu;
    /* Inf; NaN quieted with its payload kept, as x86 F16C's vcvtph2ps does */
    if (e == 0x1fu) return zero_bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0u));
    if (e == 0u) {
        /* zero or subnormal: m * 2^-24 is exact in fp32 and a normal fp32
         * number (no denormal, so flush-to-zero modes cannot touch it);
         * straight-line, so loops over it vectorize */
        return zero_bits_f32(sign | zero_f32_bits((float)m * 0x1p-24f));
    }
    return zero_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* ------------------------------------------------------------------------ */
/* Sum of squares: the lanes of one block (kernels/cpu/optim.h has the whole
 * order).  Element k of a block goes to fp64 lane k % ZERO_SUMSQ_LANES
 * (acc += x*x, no FMA); the lanes are folded by a fixed pairwise tree:
 * adjacent pairs, then adjacent pairs of those, down to one value.  32 lanes:
 * one warp of a GPU reads a block's lanes as 128 contiguous bytes, and a CPU
 * keeps them in four AVX-512 (eight AVX2) accumulators. */
#define ZERO_SUMSQ_LANES 32

/* Fold a[0..32) (overwritten) as above. */
ZERO_HD double zero_sumsq_fold(double *a) {
    for (int w = ZERO_SUMSQ_LANES / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; ++i) a[i] = a[2 * i] + a[2 * i + 1];
    return a[0];
}

#endif
