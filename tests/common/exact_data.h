/* Training data whose every reduction is exact: gradients are multiples of
 * 1/64 in [-2, 2], so a sum over ranks and micro-steps is the same in any
 * order (NCCL, MPI, ring, tree), and engines on different devices or
 * communicators must then agree BITWISE.  Used by tests/device and the GPU
 * engine tests.  Header-only, pure, thread-safe. */
#ifndef ZERO_TESTS_EXACT_DATA_H
#define ZERO_TESTS_EXACT_DATA_H
#include <stddef.h>
#include <stdint.h>

/* Rank r's gradient of param p, element i, at global micro-step gm. */
static inline float exact_grad(int r, int gm, int p, size_t i) {
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503 + gm * 977 + p * 131);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return (float)((int)(h % 257) - 128) / 64.0f;
}

/* Initial value of param p, element i (multiples of 1/100 in [-1, 1]). */
static inline float exact_init(int p, size_t i) { return (float)((int)((i * 37 + (size_t)p) % 201) - 100) / 100.0f; }
#endif
