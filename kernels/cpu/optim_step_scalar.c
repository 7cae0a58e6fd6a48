/* Portable step kernel: the reference every SIMD variant is checked
 * against.  Simple loops over restrict pointers, one tile at a time: the
 * update pass leaves the new weights in master (hot in L1), and the copy-out
 * pass converts that tile right away, so no fp32 temporary larger than a
 * tile ever exists and every stream is read from memory once. */
#include "optim_kernels.h"

void zero__optim_copy_out_scalar(const zero__step_args *a, size_t lo, size_t hi) {
    const float *restrict p = a->master;
    switch (a->out_dt) {
    case ZERO_DTYPE_F32: {
        float *restrict o = a->out;
        if (o == p) return; /* the fp32 model is its own master */
        for (size_t i = lo; i < hi; ++i) o[i] = p[i];
        break;
    }
    case ZERO_DTYPE_BF16: {
        uint16_t *restrict o = a->out;
        for (size_t i = lo; i < hi; ++i) o[i] = zero_f32_to_bf16(p[i]);
        break;
    }
    case ZERO_DTYPE_F16: {
        uint16_t *restrict o = a->out;
        for (size_t i = lo; i < hi; ++i) o[i] = zero_f32_to_f16(p[i]);
        break;
    }
    default: break;
    }
}

static void tile_update(const zero__step_args *a, size_t lo, size_t hi) {
    const zero_optim_scalars s = a->s; /* local copy: no aliasing with the arrays */
    float *restrict p = a->master;
    float *restrict s0 = a->state0;
    float *restrict s1 = a->state1;
    const float *restrict g = a->grad;
    const float gm = a->grad_mul;
    switch (a->kind) {
    case ZERO_OPTIM_ADAMW:
        for (size_t i = lo; i < hi; ++i) zero_adamw_update(&s, g[i] * gm, &p[i], &s0[i], &s1[i]);
        break;
    case ZERO_OPTIM_ADAM:
        for (size_t i = lo; i < hi; ++i) zero_adam_update(&s, g[i] * gm, &p[i], &s0[i], &s1[i]);
        break;
    case ZERO_OPTIM_SGD:
        if (s.momentum != 0.0f)
            for (size_t i = lo; i < hi; ++i) zero_sgd_update(&s, g[i] * gm, &p[i], &s0[i]);
        else
            for (size_t i = lo; i < hi; ++i) zero_sgd_update(&s, g[i] * gm, &p[i], NULL);
        break;
    case ZERO_OPTIM_LION:
        for (size_t i = lo; i < hi; ++i) zero_lion_update(&s, g[i] * gm, &p[i], &s0[i]);
        break;
    case ZERO_OPTIM_ADAGRAD:
        for (size_t i = lo; i < hi; ++i) zero_adagrad_update(&s, g[i] * gm, &p[i], &s0[i]);
        break;
    default: break; /* unsupported (LAMB): zero__optim_supported() says so */
    }
}

void zero__optim_step_scalar(const zero__step_args *a, size_t lo, size_t hi) {
    for (size_t t = lo; t < hi; t += ZERO_OPTIM_TILE) {
        size_t te = hi - t < ZERO_OPTIM_TILE ? hi : t + ZERO_OPTIM_TILE;
        tile_update(a, t, te);
        if (a->out) zero__optim_copy_out_scalar(a, t, te);
    }
}
