/* (ABI 1.3, issue 21) Block quantization and the quantized collectives:
 *  - the kernels: every element within max|block| / (2 qmax) (+ fp32
 *    rounding) for int8 and int4, partial last block, an Inf block comes
 *    back NaN and leaves its neighbours alone, the wire size formula;
 *  - allgather_quantized with unequal (and one zero) counts: every rank ends
 *    with the same bytes (own block dequantized too), each element within
 *    the bound; counted at the quantized size (>= 3.9x fewer than fp32);
 *  - reduce_scatter_quantized: bitwise the fp32 rank-order sum of each
 *    rank's dequantized block (recomputed locally), within the summed
 *    bound of the exact sum; counted as a reduce-scatter;
 *  - error feedback: received sum + carried errors == the exact sum;
 *  - NaN bits: a dequantized Inf/NaN block, dequantize_add into a NaN and
 *    the residual's Inf - Inf are all 0x7fc00000, whatever payload or sign
 *    went in (the GPU makes 0x7fffffff of any NaN, x86 keeps payloads: one
 *    pattern is what keeps device and host bytes equal);
 *  - comm_split_node: ZERO_RANKS_PER_NODE=2 gives pairs of consecutive
 *    ranks; without it, one machine is one node.
 * Run under mpirun with any N (engine-less: links the core objects). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "optim.h"
#include "quant.h"
#include "quant_math.h"

static float value(int rank, size_t i) {
    /* varied magnitudes per 64 elements, both signs */
    double mag = pow(10.0, (double)((i / 64 + (size_t)rank) % 5) - 2.0);
    return (float)(mag * sin(0.37 * (double)i + 1.3 * rank));
}

static double block_bound(const float *x, size_t lo, size_t hi, int bits) {
    float m = 0;
    for (size_t i = lo; i < hi; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m / (2.0 * (bits == 8 ? 127 : 7)) * (1 + 1e-6) + 1e-30;
}

static void test_kernels(void) {
    const size_t n = 1000, block = 256;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) x[i] = value(0, i);
    for (int bits = 8; bits >= 4; bits -= 4) {
        size_t qb = zero__quant_bytes(n, bits, block);
        CHECK_EQ_INT(qb, 4 * 4 + (bits == 8 ? 1000 : 500)); /* 4 scales + data, already a multiple of 4 */
        unsigned char *q = malloc(qb);
        zero__quantize(q, x, ZERO_DTYPE_F32, n, bits, block);
        zero__dequantize(y, ZERO_DTYPE_F32, q, n, bits, block);
        int bad = 0;
        for (size_t lo = 0; lo < n; lo += block) {
            size_t hi = lo + block < n ? lo + block : n;
            double b = block_bound(x, lo, hi, bits);
            for (size_t i = lo; i < hi; i++) bad += fabs((double)x[i] - y[i]) > b;
        }
        CHECK(bad == 0, "int%d: %d elements beyond the bound", bits, bad);
        free(q);
    }
    /* an Inf in block 1: block 1 all NaN, blocks 0 and 2 untouched */
    x[300] = INFINITY;
    unsigned char *q = malloc(zero__quant_bytes(n, 8, block));
    zero__quantize(q, x, ZERO_DTYPE_F32, n, 8, block);
    zero__dequantize(y, ZERO_DTYPE_F32, q, n, 8, block);
    int nan1 = 1, fin02 = 1;
    for (size_t i = 256; i < 512; i++) nan1 &= isnan(y[i]) != 0;
    for (size_t i = 0; i < 256; i++) fin02 &= isfinite(y[i]) != 0;
    for (size_t i = 512; i < n; i++) fin02 &= isfinite(y[i]) != 0;
    CHECK(nan1 && fin02, "Inf block: nan1 %d finite elsewhere %d", nan1, fin02);
    /* bf16 in and out */
    uint16_t xb[100], yb[100];
    float xf[100];
    for (size_t i = 0; i < 100; i++) xf[i] = value(1, i);
    zero__convert(xb, ZERO_DTYPE_BF16, xf, ZERO_DTYPE_F32, 100);
    zero__convert(xf, ZERO_DTYPE_F32, xb, ZERO_DTYPE_BF16, 100);
    zero__quantize(q, xb, ZERO_DTYPE_BF16, 100, 8, 64);
    zero__dequantize(yb, ZERO_DTYPE_BF16, q, 100, 8, 64);
    int badb = 0;
    for (size_t i = 0; i < 100; i++) {
        float v;
        zero__convert(&v, ZERO_DTYPE_F32, &yb[i], ZERO_DTYPE_BF16, 1);
        size_t lo = i / 64 * 64, hi = lo + 64 < 100 ? lo + 64 : 100;
        badb += fabs((double)xf[i] - v) > block_bound(xf, lo, hi, 8) + fabs(xf[i]) / 256.0; /* + one bf16 rounding */
    }
    CHECK(badb == 0, "bf16: %d elements beyond the bound", badb);
    free(q);
    free(x);
    free(y);
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_nan_bits(void) {
    enum { N = 12, BLOCK = 4 };
    float x[N], y[N], acc[N];
    for (size_t i = 0; i < N; i++) x[i] = 0.5f + (float)i;
    x[5] = of_bits(0xffc00123u); /* block 1: a negative NaN with a payload */
    x[9] = -INFINITY;            /* block 2: an Inf */
    for (int bits = 8; bits >= 4; bits -= 4) {
        unsigned char q[64];
        zero__quantize(q, x, ZERO_DTYPE_F32, N, bits, BLOCK);
        zero__dequantize(y, ZERO_DTYPE_F32, q, N, bits, BLOCK);
        int canon = 1, finite = 1;
        for (size_t i = 4; i < N; i++) canon &= bits_of(y[i]) == 0x7fc00000u;
        for (size_t i = 0; i < 4; i++) finite &= isfinite(y[i]) != 0;
        CHECK(canon && finite, "int%d: non-finite blocks dequantize to 0x7fc00000 (%d), block 0 finite (%d)", bits,
              canon, finite);
        for (size_t i = 0; i < N; i++) acc[i] = 1.0f;
        acc[1] = of_bits(0xffc00001u); /* a NaN already in the sum, in a finite block */
        zero__dequantize_add(acc, q, N, bits, BLOCK);
        CHECK(bits_of(acc[1]) == 0x7fc00000u && bits_of(acc[6]) == 0x7fc00000u && isfinite(acc[0]),
              "int%d: dequantize_add NaN bits %08x %08x (want 7fc00000), acc[0] %g", bits, bits_of(acc[1]),
              bits_of(acc[6]), acc[0]);
    }
    /* the residual's element: Inf - Inf and a NaN operand */
    volatile float inf = INFINITY; /* not folded at compile time */
    CHECK(bits_of(zero_quant_sub(inf, inf)) == 0x7fc00000u, "Inf - Inf: %08x", bits_of(zero_quant_sub(inf, inf)));
    CHECK(bits_of(zero_quant_sub(of_bits(0xffc00123u), 1.0f)) == 0x7fc00000u, "NaN - 1: %08x",
          bits_of(zero_quant_sub(of_bits(0xffc00123u), 1.0f)));
    CHECK(zero_quant_sub(3.0f, 1.0f) == 2.0f && zero_quant_add(3.0f, 1.0f) == 4.0f, "finite arithmetic unchanged");
}

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void test_allgather(zero_comm *w, int bits) {
    const int n = w->size, me = w->rank;
    size_t *counts = malloc((size_t)n * sizeof *counts), total = 0, off_me = 0;
    for (int r = 0; r < n; r++) {
        counts[r] = r == 1 ? 0 : 300 + 37 * (size_t)r; /* unequal, one empty */
        if (r < me) off_me += counts[r];
        total += counts[r];
    }
    float *buf = calloc(total + 1, sizeof *buf), *orig = calloc(total + 1, sizeof *orig);
    size_t at = 0;
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < counts[r]; i++) orig[at++] = value(r, i);
    memcpy(buf + off_me, orig + off_me, counts[me] * sizeof *buf);
    zero__comm_counters c0, c1;
    zero__comm_counters_get(w, &c0);
    zero_quant_spec q = ZERO_QUANT_SPEC_INIT;
    q.bits = bits;
    CHECK_EQ_INT(zero__allgather_quantized(w, buf, counts, ZERO_DTYPE_F32, &q), ZERO_OK);
    zero__comm_counters_get(w, &c1);
    size_t qtotal = 0;
    for (int r = 0; r < n; r++) qtotal += zero__quant_bytes(counts[r], bits, 256);
    CHECK_EQ_INT(c1.bytes_gathered - c0.bytes_gathered, qtotal);
    /* ~3.94x (int8) / ~7.76x (int4) at full blocks; these runs of 300-400
     * elements carry two partly-filled blocks' scales each */
    CHECK(n == 1 || (double)(total * 4) / (double)qtotal >= (bits == 8 ? 3.8 : 6.5), "int%d: %zu fp32 bytes vs %zu",
          bits, total * 4, qtotal);
    int bad = 0;
    at = 0;
    for (int r = 0; r < n; r++) {
        for (size_t lo = 0; lo < counts[r]; lo += 256) {
            size_t hi = lo + 256 < counts[r] ? lo + 256 : counts[r];
            double b = block_bound(orig + at, lo, hi, bits);
            for (size_t i = lo; i < hi; i++) bad += fabs((double)orig[at + i] - buf[at + i]) > b;
        }
        at += counts[r];
    }
    CHECK(bad == 0, "allgather int%d: %d elements beyond the bound", bits, bad);
    uint64_t h = fnv(buf, total * sizeof *buf), *all = malloc((size_t)n * sizeof *all);
    CHECK_EQ_INT(zero__allgather_bytes(w, &h, all, sizeof h), ZERO_OK);
    int same = 1;
    for (int r = 0; r < n; r++) same &= all[r] == h;
    CHECK(same, "allgather int%d: ranks hold different tensors", bits);
    free(all);
    free(buf);
    free(orig);
    free(counts);
}

static void test_reduce_scatter(zero_comm *w, int bits) {
    const int n = w->size, me = w->rank;
    size_t *counts = malloc((size_t)n * sizeof *counts), total = 0, off_me = 0;
    for (int r = 0; r < n; r++) {
        counts[r] = 200 + 53 * (size_t)((r + 1) % 3);
        if (r < me) off_me += counts[r];
        total += counts[r];
    }
    float *send = malloc(total * sizeof *send), *recv = malloc(counts[me] * sizeof *recv);
    for (size_t i = 0; i < total; i++) send[i] = value(me, i);
    zero__comm_counters c0, c1;
    zero__comm_counters_get(w, &c0);
    zero_quant_spec q = ZERO_QUANT_SPEC_INIT;
    q.bits = bits;
    CHECK_EQ_INT(zero__reduce_scatter_quantized(w, send, recv, counts, ZERO_DTYPE_F32, &q), ZERO_OK);
    zero__comm_counters_get(w, &c1);
    size_t qtotal = 0;
    for (int r = 0; r < n; r++) qtotal += zero__quant_bytes(counts[r], bits, 256);
    CHECK_EQ_INT(c1.bytes_reduced - c0.bytes_reduced, qtotal);
    CHECK_EQ_INT(c1.reduce_scatter_calls - c0.reduce_scatter_calls, 1);
    /* what every rank sent for my block, quantized here the same way */
    const size_t m = counts[me];
    float *x = malloc(m * sizeof *x), *dq = malloc(m * sizeof *dq), *sum = calloc(m, sizeof *sum);
    double *exact = calloc(m, sizeof *exact), *bound = calloc(m, sizeof *bound);
    unsigned char *qb = malloc(zero__quant_bytes(m, bits, 256));
    for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < m; i++) x[i] = value(r, off_me + i);
        zero__quantize(qb, x, ZERO_DTYPE_F32, m, bits, 256);
        zero__dequantize(dq, ZERO_DTYPE_F32, qb, m, bits, 256);
        for (size_t i = 0; i < m; i++) {
            sum[i] += dq[i];
            exact[i] += x[i];
            size_t lo = i / 256 * 256, hi = lo + 256 < m ? lo + 256 : m;
            if (i == lo)
                for (size_t k = lo; k < hi; k++) bound[k] += block_bound(x, lo, hi, bits);
        }
    }
    int bitwise = memcmp(sum, recv, m * sizeof *sum) == 0, bad = 0;
    for (size_t i = 0; i < m; i++) bad += fabs(exact[i] - recv[i]) > bound[i] + 1e-6 * fabs(exact[i]);
    CHECK(bitwise, "reduce_scatter int%d: not the rank-order fp32 sum of the dequantized blocks", bits);
    CHECK(bad == 0, "reduce_scatter int%d: %d elements beyond the summed bound", bits, bad);
    free(qb);
    free(x);
    free(dq);
    free(sum);
    free(exact);
    free(bound);
    free(send);
    free(recv);
    free(counts);
}

/* error feedback: what each rank's quantization lost is carried in its
 * buffer, so (received sum) + (sum over ranks of the carried error of my
 * block) is the exact sum up to fp32 rounding; a second call consumes it. */
static void test_error_feedback(zero_comm *w) {
    const int n = w->size, me = w->rank;
    const size_t per = 300, total = per * (size_t)n;
    size_t *counts = malloc((size_t)n * sizeof *counts);
    for (int r = 0; r < n; r++) counts[r] = per;
    float *send = malloc(total * sizeof *send), *recv = malloc(per * sizeof *recv), *ef = calloc(total, sizeof *ef);
    for (size_t i = 0; i < total; i++) send[i] = value(me + 7, i);
    zero_quant_spec q = ZERO_QUANT_SPEC_INIT;
    q.bits = 4; /* coarse: a visible error to carry */
    q.error_feedback = ef;
    CHECK_EQ_INT(zero__reduce_scatter_quantized(w, send, recv, counts, ZERO_DTYPE_F32, &q), ZERO_OK);
    float *efsum = malloc(total * sizeof *efsum);
    memcpy(efsum, ef, total * sizeof *ef);
    CHECK_EQ_INT(zero__allreduce(w, efsum, total, ZERO_DTYPE_F32, ZERO_OP_SUM), ZERO_OK);
    int bad = 0, carried = 0;
    for (size_t i = 0; i < per; i++) {
        double exact = 0, scale = 0;
        for (int r = 0; r < n; r++) {
            exact += value(r + 7, (size_t)me * per + i);
            scale += fabs(value(r + 7, (size_t)me * per + i));
        }
        bad += fabs((double)recv[i] + efsum[(size_t)me * per + i] - exact) > 1e-5 * (scale + 1e-3);
        carried += efsum[(size_t)me * per + i] != 0.0f;
    }
    CHECK(bad == 0, "error feedback: %d elements where sum + carried error != exact sum", bad);
    CHECK(carried > 0, "error feedback: nothing carried at int4");
    free(efsum);
    free(ef);
    free(recv);
    free(send);
    free(counts);
}

static void test_split_node(zero_comm *w) {
    zero_comm *node = NULL;
    setenv("ZERO_RANKS_PER_NODE", "2", 1);
    CHECK_EQ_INT(zero__comm_split_node(w, &node), ZERO_OK);
    int expect = (w->rank / 2 * 2 + 2 <= w->size) ? 2 : w->size - w->rank / 2 * 2;
    CHECK(node && node->size == expect && node->rank == w->rank % 2, "ZERO_RANKS_PER_NODE=2: size %d rank %d",
          node ? node->size : -1, node ? node->rank : -1);
    zero__comm_free(node);
    unsetenv("ZERO_RANKS_PER_NODE");
    node = NULL;
    CHECK_EQ_INT(zero__comm_split_node(w, &node), ZERO_OK);
    CHECK(node && node->size == w->size && node->rank == w->rank, "one machine is one node: size %d",
          node ? node->size : -1);
    zero__comm_free(node);
    setenv("ZERO_RANKS_PER_NODE", "zero", 1);
    CHECK_EQ_INT(zero__comm_split_node(w, &node), ZERO_ERR_CONFIG);
    unsetenv("ZERO_RANKS_PER_NODE");
}

int main(void) {
    zero_comm *w = NULL;
    char err[512];
    if (zero__comm_world_create(ZERO_COMM_AUTO, NULL, NULL, &w, err, sizeof err) != ZERO_OK) {
        fprintf(stderr, "world: %s\n", err);
        return 1;
    }
    test_kernels();
    test_nan_bits();
    for (int bits = 8; bits >= 4; bits -= 4) {
        test_allgather(w, bits);
        test_reduce_scatter(w, bits);
    }
    test_error_feedback(w);
    test_split_node(w);
    zero__comm_world_free(w);
    return check_finish();
}
