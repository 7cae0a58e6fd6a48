/* (1.13) The fingerprint kernels' bodies (kernels/cuda/zero_cuda_print_bodies.h,
 * launched through zero_cuda_print_launchers.h as shipped) on the CPU under
 * the launch shim, against the CPU reference zero_print_bytes
 * (kernels/cpu/print_math.h) and against an independent one written out
 * here from the definition: each line's 8-byte little-endian words times
 * host_writes.c's odd constants, summed with the line's length, then the
 * line's term and the order-free sum.  Bitwise, full and sampled, for
 * sizes around every boundary (0, 1, 63..65, 4095..4097, two strides and a
 * tail, large odd ones: more lines than a piece has threads), at unaligned addresses, for more pieces than one
 * launch carries (several launches reusing the scratch), through a
 * permuted slot table, and added into existing values.  And what the
 * check relies on: a byte changed on a sampled line changes the sampled
 * fingerprint, a byte changed elsewhere changes only the full one. */
#include "cuda_shim.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zero_cuda_print_launchers.h"
#include "check.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The definition, word by word (not byte by byte as print_math.h). */
static uint64_t ref_print(const unsigned char *b, uint64_t n, uint64_t step) {
    static const uint64_t K[8] = {0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL, 0x165667b19e3779f9ULL,
                                  0xd6e8feb86659fd93ULL, 0xa0761d6478bd642fULL, 0xe7037ed1a0b428dbULL,
                                  0x8ebc6af09c88c6e3ULL, 0x589965cc75374cc3ULL};
    uint64_t sum = 0, j = 0;
    static uint64_t at[1 << 16], len[1 << 16];
    uint64_t m = 0; /* the lines: every `step` bytes, sampled: and the tail */
    for (uint64_t o = 0; o < n; o += step) at[m] = o, len[m++] = n - o < 64 ? n - o : 64;
    if (step > 64 && n) at[m] = n > 64 ? n - 64 : 0, len[m] = n - at[m], m++;
    for (j = 0; j < m; j++) {
        uint64_t w[8] = {0}, a = len[j];
        memcpy(w, b + at[j], len[j]);
        for (int k = 0; k < 8; k++) a += w[k] * K[k];
        sum += zero_print_mix(a ^ zero_print_mix(j + 0x632be59bd9b4e019ULL));
    }
    return zero_print_mix(sum + zero_print_mix(n ^ 0x6a09e667f3bcc909ULL));
}

/* 1200007 in full: more lines (18751) than one piece's threads (64 x 256),
 * so threads take several lines each */
enum { NSIZES = 15, MAXN = 1200007 };
static const uint64_t sizes[NSIZES] = {0, 1, 63, 64, 65, 127, 4095, 4096, 4097, 8192, 8257, 12345, 70001, 300007, 1200007};

int main(void) {
    unsigned char *buf = malloc(MAXN + 8);
    for (size_t i = 0; i < MAXN + 8; i++) buf[i] = (unsigned char)rnd();
    uint64_t *scratch = calloc(zero_cuda_prints_scratch(), sizeof *scratch);
    /* every size at three alignments, one piece per call, both modes */
    for (int full = 0; full <= 1; full++)
        for (int s = 0; s < NSIZES; s++)
            for (int off = 0; off < 3; off++) {
                const uint64_t n = sizes[s], step = full ? ZERO_PRINT_LINE : ZERO_PRINT_STRIDE;
                const void *x = buf + off;
                uint64_t out = 0;
                CHECK_EQ_INT(zero_cuda_prints(&x, &n, NULL, 1, full, scratch, &out, 0, NULL), ZERO_OK);
                const uint64_t cpu = zero_print_bytes(buf + off, n, step);
                CHECK(out == cpu, "n=%llu off %d full %d: kernel %016llx != zero_print_bytes %016llx",
                      (unsigned long long)n, off, full, (unsigned long long)out, (unsigned long long)cpu);
                if (n <= 64u * 65536u / (full ? 1u : 64u))
                    CHECK(cpu == ref_print(buf + off, n, step), "n=%llu off %d full %d: != the word-wise definition",
                          (unsigned long long)n, off, full);
            }
    /* 70 pieces (three launches), a permuted slot table, added to values */
    enum { K = 70 };
    const void *xs[K];
    uint64_t bytes[K], out[K], want[K];
    uint32_t slot[K];
    for (int i = 0; i < K; i++) {
        bytes[i] = rnd() % 9000;
        xs[i] = buf + rnd() % (MAXN - 9000);
        slot[i] = (uint32_t)((i * 37) % K); /* 37 is prime to 70: a permutation */
        out[slot[i]] = rnd();
        want[slot[i]] = out[slot[i]] + zero_print_bytes(xs[i], bytes[i], ZERO_PRINT_STRIDE);
    }
    CHECK_EQ_INT(zero_cuda_prints(xs, bytes, slot, K, 0, scratch, out, 1, NULL), ZERO_OK);
    for (int i = 0; i < K; i++) CHECK(out[i] == want[i], "70 pieces, slot %d: the added fingerprint differs", i);
    /* what the check relies on */
    const uint64_t n = 20000;
    const uint64_t s0 = zero_print_bytes(buf, n, ZERO_PRINT_STRIDE), f0 = zero_print_bytes(buf, n, ZERO_PRINT_LINE);
    buf[4096 + 5] ^= 1; /* on a sampled line */
    CHECK(zero_print_bytes(buf, n, ZERO_PRINT_STRIDE) != s0, "a byte on a sampled line: sampled print unchanged");
    buf[4096 + 5] ^= 1;
    buf[n - 3] ^= 0x80; /* in the tail line */
    CHECK(zero_print_bytes(buf, n, ZERO_PRINT_STRIDE) != s0, "a byte in the last 64: sampled print unchanged");
    buf[n - 3] ^= 0x80;
    buf[4096 + 100] ^= 4; /* on no sampled line */
    CHECK(zero_print_bytes(buf, n, ZERO_PRINT_STRIDE) == s0, "a byte off the sampled lines changed the sampled print");
    CHECK(zero_print_bytes(buf, n, ZERO_PRINT_LINE) != f0, "a byte changed: full print unchanged");
    buf[4096 + 100] ^= 4;
    CHECK(zero_print_bytes(buf, n, ZERO_PRINT_LINE) == f0, "restored: full print differs");
    free(buf);
    free(scratch);
    const int rc = check_finish();
    if (!rc) printf("shim print kernels: bitwise zero_print_bytes and the definition, full and sampled\n");
    return rc;
}
