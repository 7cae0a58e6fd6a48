/* (1.13) Bodies of the fingerprint kernels (the host-write check of a device
 * engine, core/host_writes.c), in the same two-way C11 / CUDA C++ subset as
 * zero_cuda_kernel_bodies.h, whose rules they follow.  The per-line math is
 * kernels/cpu/print_math.h, so the GPU's fingerprint of a tensor is the
 * CPU reference's (zero_print_bytes) to the bit: the terms are summed
 * modulo 2^64, in any order.  tests/cuda_shim/test_shim_print.c runs these
 * very bodies on the CPU against zero_print_bytes; tests/gpu runs them on a
 * GPU (gpu_engine_device's host-write cases).
 *
 * Thread-safety: pure kernels; each output word has one writer. */
#ifndef ZERO_CUDA_PRINT_BODIES_H
#define ZERO_CUDA_PRINT_BODIES_H
#include "print_math.h"
#include "zero_cuda_kernel_bodies.h"

/* Pieces per launch (they travel in the kernel's arguments), blocks per
 * piece (enough to spread one large tensor's lines over the SMs of a big
 * GPU; the fold adds that many partials) and threads per block. */
#define ZERO_CUDA_PRINT_PIECES 32
#define ZERO_CUDA_PRINT_BLOCKS 64
#define ZERO_CUDA_PRINT_THREADS 256

typedef struct zero_cuda_print_args {
    const unsigned char *x[ZERO_CUDA_PRINT_PIECES];
    uint64_t n[ZERO_CUDA_PRINT_PIECES]; /* bytes */
    uint32_t slot[ZERO_CUDA_PRINT_PIECES]; /* where piece i's fingerprint goes in out */
    uint64_t step;                      /* ZERO_PRINT_LINE (full) or ZERO_PRINT_STRIDE (sampled) */
    uint32_t k;                         /* pieces in this launch */
} zero_cuda_print_args;

/* Block b sums the terms of piece b / BLOCKS, lines b % BLOCKS + BLOCKS j
 * (thread t of it: every THREADS-th of those), into
 * partial[b] (one writer: thread 0, after the block's barrier).  Launch:
 * ZERO_CUDA_LAUNCH_BLOCKS, k x ZERO_CUDA_PRINT_BLOCKS blocks,
 * ZERO_CUDA_PRINT_THREADS threads. */
ZERO_CUDA_GLOBAL void zero_cuda_k_print_lines(zero_cuda_print_args a, uint64_t *partial) {
    ZERO_CUDA_SHARED(uint64_t, part, ZERO_CUDA_PRINT_THREADS);
    const uint64_t piece = (uint64_t)blockIdx.x / ZERO_CUDA_PRINT_BLOCKS;
    const uint64_t sub = (uint64_t)blockIdx.x % ZERO_CUDA_PRINT_BLOCKS;
    ZERO_CUDA_PHASE {
        uint64_t s = 0;
        if (piece < a.k) {
            const uint64_t n = a.n[piece], lines = zero_print_nlines(n, a.step);
            const uint64_t every = (uint64_t)ZERO_CUDA_PRINT_BLOCKS * blockDim.x;
            for (uint64_t j = sub + (uint64_t)ZERO_CUDA_PRINT_BLOCKS * threadIdx.x; j < lines; j += every) {
                uint64_t at, len;
                zero_print_line_at(n, a.step, j, &at, &len);
                s += zero_print_term(a.x[piece] + at, len, j);
            }
        }
        part[threadIdx.x] = s;
    }
    ZERO_CUDA_BARRIER;
    ZERO_CUDA_PHASE {
        if (threadIdx.x == 0) {
            uint64_t s = 0;
            for (uint64_t t = 0; t < blockDim.x; ++t) s += part[t];
            partial[blockIdx.x] = s;
        }
    }
}

/* Thread i < k: piece i's fingerprint from its BLOCKS partials, into
 * out[slot[i]] (added to it when `add`: a running sum of fingerprints over
 * several calls, compared as a whole; the slots of one launch differ).
 * Launch: one block of at least k threads. */
ZERO_CUDA_GLOBAL void zero_cuda_k_print_fold(zero_cuda_print_args a, const uint64_t *partial, uint64_t *out,
                                             int32_t add) {
    const uint64_t i = threadIdx.x;
    if (i >= a.k) return;
    uint64_t s = 0;
    for (uint64_t b = 0; b < ZERO_CUDA_PRINT_BLOCKS; ++b) s += partial[i * ZERO_CUDA_PRINT_BLOCKS + b];
    const uint64_t f = zero_print_finish(s, a.n[i]);
    const uint64_t o = a.slot[i];
    out[o] = add ? out[o] + f : f;
}

#endif
