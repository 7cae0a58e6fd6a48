/* The host side of the zero_params_write tests (tests/stages/
 * test_params_write.c, tests/contrib/test_contrib_params_write.c): values
 * in the model dtype (fp32 or bf16), a param's full values through
 * zero_gather, and one micro-step's gradients that depend on the values,
 * so that a written value shows in every later step.  Header-only, like
 * bf16.h; the engine thread. */
#ifndef ZERO_TESTS_PARAMS_WRITE_HOST_H
#define ZERO_TESTS_PARAMS_WRITE_HOST_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "check.h"
#include "host_util.h"
#include "zero.h"

/* Element k of a model-dtype array, as a float, and back (bf16 rounded). */
static inline float pw_get(int bf16, const void *a, uint64_t k) {
    return bf16 ? th_from_bf16(((const uint16_t *)a)[k]) : ((const float *)a)[k];
}
static inline void pw_put(int bf16, void *a, uint64_t k, float v) {
    if (bf16)
        ((uint16_t *)a)[k] = th_to_bf16(v);
    else
        ((float *)a)[k] = v;
}

/* p's n elements of es bytes into dst (host memory): gathered and released. */
static inline zero_status pw_gather_raw(zero_engine *e, zero_param *p, uint64_t n, size_t es, void *dst) {
    void *ptr = NULL;
    zero_status s = zero_gather(e, &p, 1, &ptr);
    if (s == ZERO_OK) memcpy(dst, ptr, (size_t)n * es);
    zero_status t = zero_release(e, &p, 1);
    return s != ZERO_OK ? s : t;
}

/* One micro-step's gradients of all[0..np) (n[i] elements each), reported
 * last first as a backward does: g += 0.05 w + 0.01 u(step, i, rank, k).
 * The step itself is the caller's. */
static inline void pw_backward(zero_engine *e, zero_param *const *all, const uint64_t *n, int np, int bf16, int step,
                               int rank) {
    for (int i = np - 1; i >= 0; i--) {
        unsigned char *w = malloc((size_t)n[i] * 4 + 1);
        CHECK_EQ_INT(pw_gather_raw(e, all[i], n[i], bf16 ? 2 : 4, w), ZERO_OK);
        void *g = NULL;
        CHECK_EQ_INT(zero_grad_buffer(e, all[i], &g), ZERO_OK);
        for (uint64_t k = 0; g && w && k < n[i]; k++) {
            const float u = (float)th_u11(((uint64_t)step << 48) ^ ((uint64_t)i << 40) ^ ((uint64_t)rank << 32) ^ k);
            pw_put(bf16, g, k, pw_get(bf16, g, k) + 0.05f * pw_get(bf16, w, k) + 0.01f * u);
        }
        CHECK_EQ_INT(zero_on_grad_ready(e, all[i], NULL), ZERO_OK);
        free(w);
    }
}
#endif
