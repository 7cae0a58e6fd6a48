/* (1.13) The fingerprint of a device tensor's bytes, for the host-write
 * check of a device engine (core/host_writes.c).  Shared verbatim by the
 * CUDA kernels (kernels/cuda/zero_cuda_print_bodies.h, compiled __host__
 * __device__ there) and the CPU reference (zero_print_bytes below, which a
 * device without a GPU -- the tests' stub -- runs), so the CPU tests check
 * the arithmetic the GPU runs.
 *
 * Why not the CPU engine's fingerprint (host_writes.c print_of): that one
 * chains its lines in order, which a GPU cannot do in parallel.  Here each
 * line contributes a term of its own, keyed by its index, and the terms are
 * summed modulo 2^64 -- an order-free sum, so any split over threads and
 * blocks gives the same 64 bits.  A change to any byte of a line changes
 * that line's term (a term is a bijective mix of the line's word sum, in
 * which every byte enters with an odd-times-power-of-two weight that no
 * other byte of the line shares), and so the sum, unless the new term
 * happens to equal the old one (about 1 in 2^64).
 *
 * Lines: `step` = ZERO_PRINT_LINE (every byte: ZERO_CHECK_HOST_WRITES=full)
 * or ZERO_PRINT_STRIDE (sampled: the first 64 bytes of every 4 KiB, as the
 * CPU check), plus, sampled, the last 64 bytes as one more line -- the
 * lines the CPU engine's check looks at, so a write is found or missed the
 * same way.  Bytes are read one at a time: a tensor inside a flat buffer
 * need not be 8-byte aligned.
 *
 * Thread-safety: pure functions of their arguments. */
#ifndef ZERO_PRINT_MATH_H
#define ZERO_PRINT_MATH_H
#include <stddef.h>
#include <stdint.h>

#include "optim_math.h" /* ZERO_HD */

#define ZERO_PRINT_LINE 64u
#define ZERO_PRINT_STRIDE 4096u

/* A bijective 64-bit mix (splitmix64's finalizer). */
ZERO_HD uint64_t zero_print_mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Byte p (0..63) of a line enters its word sum times this weight: the
 * little-endian word p / 8 of the line times an odd constant of its own,
 * as host_writes.c's line_print forms it. */
ZERO_HD uint64_t zero_print_weight(uint32_t p) {
    uint64_t k;
    switch (p / 8u) {
    case 0: k = 0x9e3779b97f4a7c15ULL; break;
    case 1: k = 0xc2b2ae3d27d4eb4fULL; break;
    case 2: k = 0x165667b19e3779f9ULL; break;
    case 3: k = 0xd6e8feb86659fd93ULL; break;
    case 4: k = 0xa0761d6478bd642fULL; break;
    case 5: k = 0xe7037ed1a0b428dbULL; break;
    case 6: k = 0x8ebc6af09c88c6e3ULL; break;
    default: k = 0x589965cc75374cc3ULL; break;
    }
    return k << (8u * (p % 8u));
}

/* Number of lines of an n-byte tensor: one per `step` bytes, plus the tail
 * line when sampled (step > ZERO_PRINT_LINE) and n > 0. */
ZERO_HD uint64_t zero_print_nlines(uint64_t n, uint64_t step) {
    const uint64_t nmain = (n + step - 1) / step;
    return nmain + (step > ZERO_PRINT_LINE && n ? 1u : 0u);
}

/* Line j of an n-byte tensor: its offset and length (<= 64). */
ZERO_HD void zero_print_line_at(uint64_t n, uint64_t step, uint64_t j, uint64_t *at, uint64_t *len) {
    const uint64_t nmain = (n + step - 1) / step;
    const uint64_t o = j < nmain ? j * step : (n > ZERO_PRINT_LINE ? n - ZERO_PRINT_LINE : 0u);
    *at = o;
    *len = n - o < ZERO_PRINT_LINE ? n - o : ZERO_PRINT_LINE;
}

/* The term of line j: len bytes at b. */
ZERO_HD uint64_t zero_print_term(const unsigned char *b, uint64_t len, uint64_t j) {
    uint64_t a = len;
    for (uint32_t p = 0; p < (uint32_t)len; ++p) a += (uint64_t)b[p] * zero_print_weight(p);
    return zero_print_mix(a ^ zero_print_mix(j + 0x632be59bd9b4e019ULL));
}

/* The fingerprint from the sum of every line's term. */
ZERO_HD uint64_t zero_print_finish(uint64_t sum, uint64_t n) {
    return zero_print_mix(sum + zero_print_mix(n ^ 0x6a09e667f3bcc909ULL));
}

/* The whole fingerprint of n bytes at b, in one loop (the CPU reference;
 * the kernels split the same sum over threads). */
static inline uint64_t zero_print_bytes(const unsigned char *b, uint64_t n, uint64_t step) {
    uint64_t sum = 0;
    for (uint64_t j = 0, m = zero_print_nlines(n, step); j < m; ++j) {
        uint64_t at, len;
        zero_print_line_at(n, step, j, &at, &len);
        sum += zero_print_term(b + at, len, j);
    }
    return zero_print_finish(sum, n);
}

#endif
