/* Multi-rank tests of the MPI comm backend (engine-less: engine = NULL).
 * Every rank's data is a known function of (rank, index), so each rank can
 * compute the expected result locally.  Values are small integers stored in
 * floating types, so sums are exact and can be compared with ==. */
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../common/check.h"
#include "comm.h"
#include "comm_mpi_internal.h" /* test_overlap peeks at an op's completion flag */
#include "optim_math.h"        /* the 16-bit conversions the ring's 16-bit sums use */
#include "shared_blocks.h"     /* BUFFERS=shared: the buffers peers read in place (issue 18) */

static int R, N;

/* ZERO_TEST_BUFFERS (an argument BUFFERS=...): "private" (default, malloc:
 * the ring/direct transport path), "shared" (every buffer a shared block:
 * the shared-memory collectives, comm_mpi_shm.c), "mixed" (rank 1 private,
 * the others shared: every rank must agree on the transport path). */
static int g_buffers;
static int g_shm_on; /* not turned off by ZERO_COMM_SHM=0 */

static atomic_int g_tbuf_failures; /* tbuf runs on test_threads' threads too: CHECK is not thread-safe */

static void *tbuf(size_t bytes) {
    if (g_buffers == 1 || (g_buffers == 2 && R != 1)) {
        size_t len = (bytes + 4095) / 4096 * 4096;
        void *p = zero__shared_block_alloc(len ? len : 4096);
        if (p) return p;
        if (g_shm_on) atomic_fetch_add(&g_tbuf_failures, 1);
    }
    return malloc(bytes);
}
static void tfree(void *p) {
    if (!zero__shared_block_free(p)) free(p);
}

/* rank r's contribution at global index i */
static double val(int r, size_t i) { return (double)((r + 1) * 3 + (int)(i % 97)) - 40.0; }

static void fill(void *p, zero_dtype dt, int r, size_t off, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        double v = val(r, off + i);
        switch (dt) {
        case ZERO_DTYPE_F32: ((float *)p)[i] = (float)v; break;
        case ZERO_DTYPE_F64: ((double *)p)[i] = v; break;
        case ZERO_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)v; break;
        case ZERO_DTYPE_U64: ((uint64_t *)p)[i] = (uint64_t)(int64_t)v; break;
        case ZERO_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)(int64_t)v; break;
        case ZERO_DTYPE_BF16:
        case ZERO_DTYPE_F16: ((uint16_t *)p)[i] = (uint16_t)(r * 1000 + (off + i) % 1000); break;
        }
    }
}

/* expected sum over ranks at index i, as the dtype would store it */
static int sum_matches(const void *p, zero_dtype dt, size_t off, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        double s = 0;
        int64_t si = 0;
        for (int r = 0; r < N; ++r) {
            s += val(r, off + i);
            si += (int64_t)val(r, off + i);
        }
        int ok = 1;
        switch (dt) {
        case ZERO_DTYPE_F32: ok = ((const float *)p)[i] == (float)s; break;
        case ZERO_DTYPE_F64: ok = ((const double *)p)[i] == s; break;
        case ZERO_DTYPE_I64: ok = ((const int64_t *)p)[i] == si; break;
        case ZERO_DTYPE_U64: ok = ((const uint64_t *)p)[i] == (uint64_t)si; break;
        case ZERO_DTYPE_U8: {
            uint8_t e = 0;
            for (int r = 0; r < N; ++r) e = (uint8_t)(e + (uint8_t)(int64_t)val(r, off + i));
            ok = ((const uint8_t *)p)[i] == e;
            break;
        }
        }
        if (!ok) {
            fprintf(stderr, "rank %d: dtype %d mismatch at %zu\n", R, dt, off + i);
            return 0;
        }
    }
    return 1;
}

static size_t *make_counts(int n, size_t base, int pattern) {
    size_t *c = calloc((size_t)n, sizeof *c);
    for (int b = 0; b < n; ++b) {
        switch (pattern) {
        case 0: c[b] = base; break;                                /* equal */
        case 1: c[b] = base + (size_t)b * 7; break;                /* uneven */
        case 2: c[b] = (b % 2) ? 0 : base; break;                  /* zeros */
        case 3: c[b] = (size_t)b < base ? 1 : 0; break;            /* N > elements */
        case 4: c[b] = 0; break;                                   /* all empty */
        case 5: c[b] = b == n - 1 ? base * 3 : base / 2; break;    /* one big block */
        }
    }
    return c;
}

static void test_reduce_scatter(zero_comm *w, zero_dtype dt, size_t base, int pattern, int inplace) {
    int n = zero__comm_size(w), r = zero__comm_rank(w);
    size_t esz = zero__dtype_size(dt);
    size_t *counts = make_counts(n, base, pattern), total = 0, off = 0;
    for (int b = 0; b < n; ++b) {
        if (b < r) off += counts[b];
        total += counts[b];
    }
    char *send = tbuf(total * esz + 1);
    fill(send, dt, r, 0, total);
    char *recv = inplace ? send + off * esz : tbuf(counts[r] * esz + 1);
    zero_comm_req *req = NULL;
    zero_status st = zero__ireduce_scatterv(w, send, recv, counts, dt, &req);
    CHECK(st == ZERO_OK, "ireduce_scatterv status %d", st);
    if (st == ZERO_OK) CHECK_EQ_INT(zero__comm_wait(req), ZERO_OK);
    CHECK(sum_matches(recv, dt, off, counts[r]), "reduce_scatter dt=%d base=%zu pattern=%d inplace=%d", dt, base,
          pattern, inplace);
    if (!inplace) {
        /* the send buffer is untouched */
        char *ref = tbuf(total * esz + 1);
        fill(ref, dt, r, 0, total);
        CHECK(memcmp(ref, send, total * esz) == 0, "send buffer modified");
        tfree(ref);
        tfree(recv);
    }
    tfree(send);
    tfree(counts);
}

static void test_allgather(zero_comm *w, zero_dtype dt, size_t base, int pattern, int inplace) {
    int n = zero__comm_size(w), r = zero__comm_rank(w);
    size_t esz = zero__dtype_size(dt);
    size_t *counts = make_counts(n, base, pattern), total = 0, off = 0;
    for (int b = 0; b < n; ++b) {
        if (b < r) off += counts[b];
        total += counts[b];
    }
    char *recv = tbuf(total * esz + 1);
    memset(recv, 0xab, total * esz);
    char *send = inplace ? recv + off * esz : tbuf(counts[r] * esz + 1);
    fill(send, dt, r, off, counts[r]);
    zero_comm_req *req = NULL;
    zero_status st = zero__iallgatherv(w, send, recv, counts, dt, &req);
    CHECK(st == ZERO_OK, "iallgatherv status %d", st);
    if (st == ZERO_OK) CHECK_EQ_INT(zero__comm_wait(req), ZERO_OK);
    char *ref = tbuf(total * esz + 1);
    size_t o = 0;
    for (int b = 0; b < n; ++b) {
        fill(ref + o * esz, dt, b, o, counts[b]);
        o += counts[b];
    }
    CHECK(memcmp(ref, recv, total * esz) == 0, "allgather dt=%d base=%zu pattern=%d inplace=%d", dt, base, pattern,
          inplace);
    tfree(ref);
    if (!inplace) tfree(send);
    tfree(recv);
    tfree(counts);
}

/* (issue 24) Groups on MPI batch nothing: collectives issued inside one
 * give the same results, nesting counts, and an unmatched end is refused
 * with the engine-style error (as on NCCL, where groups batch). */
static void test_groups(zero_comm *w) {
    CHECK_EQ_INT(zero__comm_group_start(w), ZERO_OK);
    CHECK_EQ_INT(zero__comm_group_start(w), ZERO_OK);
    test_allgather(w, ZERO_DTYPE_F32, 513, 1, 0); /* issue + wait inside the group */
    CHECK_EQ_INT(zero__comm_group_end(w), ZERO_OK);
    test_reduce_scatter(w, ZERO_DTYPE_F32, 257, 2, 1);
    CHECK_EQ_INT(zero__comm_group_end(w), ZERO_OK);
    CHECK_EQ_INT(zero__comm_group_end(w), ZERO_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(w->group_depth, 0);
}

/* (issue 14) 16-bit sums on the wire: block b is summed by the ring in
 * the order b+1, b+2, ..., b (incoming partial sum first, own value
 * second), each addition widened to fp32 and rounded once to the dtype.
 * Every rank recomputes each block's expected bits from the known inputs;
 * the reduce-scatter (in place and not) and the all-reduce over the same
 * counts must give exactly those bits, and the wire carries 2 bytes per
 * element.  Values have fractions and mixed signs so that every hop
 * rounds. */
static uint16_t to16(zero_dtype dt, float f) { return dt == ZERO_DTYPE_BF16 ? zero_f32_to_bf16(f) : zero_f32_to_f16(f); }
static float from16(zero_dtype dt, uint16_t h) { return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_f32(h) : zero_f16_to_f32(h); }
static uint16_t in16(zero_dtype dt, int r, size_t i) {
    return to16(dt, (float)(((int)((i * 7919u + (size_t)r * 104729u) % 2001u) - 1000) * 0.0371 + 0.013 * r));
}

static void test_sum16(zero_comm *w, zero_dtype dt, size_t base, int pattern) {
    size_t *counts = make_counts(N, base, pattern), total = 0, *displ = calloc((size_t)N, sizeof *displ);
    for (int b = 0; b < N; ++b) {
        displ[b] = total;
        total += counts[b];
    }
    uint16_t *x = tbuf((total ? total : 1) * 2), *y = tbuf((total ? total : 1) * 2),
             *want = tbuf((total ? total : 1) * 2), *out = tbuf((counts[R] ? counts[R] : 1) * 2);
    for (size_t i = 0; i < total; ++i) x[i] = in16(dt, R, i);
    for (int b = 0; b < N; ++b)
        for (size_t i = displ[b]; i < displ[b] + counts[b]; ++i) {
            uint16_t acc = in16(dt, (b + 1) % N, i);
            for (int k = 2; k <= N; ++k) acc = to16(dt, from16(dt, acc) + from16(dt, in16(dt, (b + k) % N, i)));
            want[i] = acc;
        }
    zero__comm_counters c0, c1;
    zero__comm_counters_get(w, &c0);
    zero_comm_req *q = NULL;
    /* out of place, then in place, then the all-reduce */
    CHECK_EQ_INT(zero__ireduce_scatterv(w, x, out, counts, dt, &q), ZERO_OK);
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK(memcmp(out, want + displ[R], counts[R] * 2) == 0, "16-bit reduce-scatter dt %d pattern %d: wrong bits", dt,
          pattern);
    memcpy(y, x, total * 2);
    CHECK_EQ_INT(zero__ireduce_scatterv(w, y, y + displ[R], counts, dt, &q), ZERO_OK);
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK(memcmp(y + displ[R], want + displ[R], counts[R] * 2) == 0, "16-bit in-place reduce-scatter dt %d", dt);
    memcpy(y, x, total * 2);
    CHECK_EQ_INT(zero__iallreducev(w, y, counts, dt, &q), ZERO_OK);
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK(memcmp(y, want, total * 2) == 0, "16-bit all-reduce dt %d pattern %d: wrong bits", dt, pattern);
    zero__comm_counters_get(w, &c1);
    CHECK(c1.bytes_reduced - c0.bytes_reduced == 3 * total * 2, "16-bit bytes on the wire: %llu for %zu elements",
          (unsigned long long)(c1.bytes_reduced - c0.bytes_reduced), total);
    tfree(x);
    tfree(y);
    tfree(want);
    tfree(out);
    tfree(counts);
    tfree(displ);
}

static void test_blocking(zero_comm *w) {
    int n = zero__comm_size(w), r = zero__comm_rank(w);
    double d[5];
    fill(d, ZERO_DTYPE_F64, r, 0, 5);
    CHECK_EQ_INT(zero__allreduce(w, d, 5, ZERO_DTYPE_F64, ZERO_OP_SUM), ZERO_OK);
    CHECK(sum_matches(d, ZERO_DTYPE_F64, 0, 5), "allreduce sum");
    int64_t mx = r * 10, mn = r * 10;
    CHECK_EQ_INT(zero__allreduce(w, &mx, 1, ZERO_DTYPE_I64, ZERO_OP_MAX), ZERO_OK);
    CHECK_EQ_INT(zero__allreduce(w, &mn, 1, ZERO_DTYPE_I64, ZERO_OP_MIN), ZERO_OK);
    CHECK_EQ_INT(mx, (n - 1) * 10);
    CHECK_EQ_INT(mn, 0);
    uint16_t h[3] = {(uint16_t)r, (uint16_t)r, (uint16_t)r};
    CHECK_EQ_INT(zero__allreduce(w, h, 3, ZERO_DTYPE_BF16, ZERO_OP_SUM), ZERO_ERR_UNSUPPORTED);
    CHECK_EQ_INT(zero__broadcast(w, h, 3, ZERO_DTYPE_BF16, n - 1), ZERO_OK);
    CHECK_EQ_INT(h[2], n - 1);
    float f[4] = {(float)r, 1, 2, 3};
    CHECK_EQ_INT(zero__broadcast(w, f, 4, ZERO_DTYPE_F32, 0), ZERO_OK);
    CHECK(f[0] == 0.0f && f[3] == 3.0f, "broadcast f32");
    CHECK_EQ_INT(zero__barrier(w), ZERO_OK);
    int32_t mine[2] = {r, r * r}, all[2 * 16];
    CHECK_EQ_INT(zero__allgather_bytes(w, mine, all, sizeof mine), ZERO_OK);
    for (int b = 0; b < n && b < 16; ++b) CHECK(all[2 * b] == b && all[2 * b + 1] == b * b, "allgather_bytes %d", b);
    /* async allreduce, incl. in-flight with a blocking call */
    float a[1000];
    fill(a, ZERO_DTYPE_F32, r, 0, 1000);
    zero_comm_req *q = NULL;
    CHECK_EQ_INT(zero__iallreduce(w, a, 1000, ZERO_DTYPE_F32, ZERO_OP_SUM, &q), ZERO_OK);
    CHECK_EQ_INT(zero__barrier(w), ZERO_OK);
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK(sum_matches(a, ZERO_DTYPE_F32, 0, 1000), "iallreduce");
    CHECK(zero__comm_wait(NULL) == ZERO_ERR_INVALID_ARGUMENT, "wait(NULL)");
}

/* Many async ops in flight at once, completed in reverse / scrambled order,
 * on the world and (concurrently) on an even/odd split. */
#define NOPS 12
static void test_concurrent(zero_comm *w) {
    int n = zero__comm_size(w), r = zero__comm_rank(w);
    zero_comm *sub = NULL;
    CHECK_EQ_INT(zero__comm_split(w, r % 2, -r, &sub), ZERO_OK); /* key -r: reversed order */
    CHECK(sub != NULL, "split gave NULL");
    if (!sub) return;
    int sn = zero__comm_size(sub), sr = zero__comm_rank(sub);
    CHECK_EQ_INT(sn, (n + 1 - r % 2) / 2);
    /* ranks in the sub: same parity, ordered by descending world rank */
    int members[16], m = 0;
    for (int q = n - 1; q >= 0; --q)
        if (q % 2 == r % 2) members[m++] = q;
    CHECK_EQ_INT(members[sr], r);

    zero_comm_req *req[NOPS];
    void *bufs[NOPS], *outs[NOPS];
    size_t *cnts[NOPS];
    int on_sub[NOPS], kind[NOPS];
    for (int i = 0; i < NOPS; ++i) {
        zero_comm *c = (i % 3 == 1) ? sub : w;
        on_sub[i] = c == sub;
        kind[i] = i % 4; /* 0,2: reduce-scatter 1: allgather 3: allreduce */
        int cn = zero__comm_size(c), cr = zero__comm_rank(c);
        size_t base = 1000 + 3000 * (size_t)i;
        cnts[i] = make_counts(cn, base, i % 3);
        size_t total = 0, off = 0;
        for (int b = 0; b < cn; ++b) {
            if (b < cr) off += cnts[i][b];
            total += cnts[i][b];
        }
        /* contributions are functions of the WORLD rank, so expectations are
         * computed over the members */
        if (kind[i] == 1) {
            bufs[i] = tbuf(cnts[i][cr] * 4 + 4);
            outs[i] = tbuf(total * 4 + 4);
            fill(bufs[i], ZERO_DTYPE_F32, r, off, cnts[i][cr]);
            CHECK_EQ_INT(zero__iallgatherv(c, bufs[i], outs[i], cnts[i], ZERO_DTYPE_F32, &req[i]), ZERO_OK);
        } else if (kind[i] == 3) {
            bufs[i] = tbuf(total * 4 + 4);
            outs[i] = NULL;
            fill(bufs[i], ZERO_DTYPE_F32, r, 0, total);
            CHECK_EQ_INT(zero__iallreduce(c, bufs[i], total, ZERO_DTYPE_F32, ZERO_OP_SUM, &req[i]), ZERO_OK);
        } else {
            bufs[i] = tbuf(total * 4 + 4);
            outs[i] = tbuf(cnts[i][cr] * 4 + 4);
            fill(bufs[i], ZERO_DTYPE_F32, r, 0, total);
            CHECK_EQ_INT(zero__ireduce_scatterv(c, bufs[i], outs[i], cnts[i], ZERO_DTYPE_F32, &req[i]), ZERO_OK);
        }
    }
    /* a blocking world op while everything is in flight */
    CHECK_EQ_INT(zero__barrier(w), ZERO_OK);
    /* complete in a scrambled order: test-poll odd ones, wait even ones backwards */
    int done[NOPS] = {0}, left = NOPS;
    for (int i = NOPS - 1; i >= 0; i -= 2) {
        CHECK_EQ_INT(zero__comm_wait(req[i]), ZERO_OK);
        done[i] = 1;
        --left;
    }
    while (left > 0) {
        for (int i = 0; i < NOPS; ++i) {
            if (done[i]) continue;
            int d = 0;
            CHECK_EQ_INT(zero__comm_test(req[i], &d), ZERO_OK);
            if (d) {
                done[i] = 1;
                --left;
            }
        }
    }
    for (int i = 0; i < NOPS; ++i) {
        zero_comm *c = on_sub[i] ? sub : w;
        int cn = zero__comm_size(c), cr = zero__comm_rank(c);
        size_t total = 0, off = 0;
        for (int b = 0; b < cn; ++b) {
            if (b < cr) off += cnts[i][b];
            total += cnts[i][b];
        }
        int ok = 1;
        if (kind[i] == 1) {
            size_t o = 0;
            float *ref = tbuf(total * 4 + 4);
            for (int b = 0; b < cn; ++b) {
                fill(ref + o, ZERO_DTYPE_F32, on_sub[i] ? members[b] : b, o, cnts[i][b]);
                o += cnts[i][b];
            }
            ok = memcmp(ref, outs[i], total * 4) == 0;
            tfree(ref);
        } else {
            const float *got = kind[i] == 3 ? (const float *)bufs[i] + 0 : outs[i];
            size_t lo = kind[i] == 3 ? 0 : off, len = kind[i] == 3 ? total : cnts[i][cr];
            for (size_t e = 0; e < len && ok; ++e) {
                double s = 0;
                for (int b = 0; b < cn; ++b) s += val(on_sub[i] ? members[b] : b, lo + e);
                ok = got[e] == (float)s;
            }
        }
        CHECK(ok, "concurrent op %d (kind %d, sub %d) wrong", i, kind[i], on_sub[i]);
        tfree(bufs[i]);
        tfree(outs[i]);
        tfree(cnts[i]);
    }
    zero__comm_counters ct;
    zero__comm_counters_get(sub, &ct);
    CHECK(ct.reduce_scatter_calls >= 1 && ct.busy_seconds > 0, "sub counters rs=%llu busy=%g",
          (unsigned long long)ct.reduce_scatter_calls, ct.busy_seconds);
    /* a color < 0 rank gets no communicator */
    zero_comm *none = (zero_comm *)1;
    CHECK_EQ_INT(zero__comm_split(w, r == 0 ? -1 : 0, 0, &none), ZERO_OK);
    CHECK((r == 0) == (none == NULL), "color<0 split");
    if (none) {
        CHECK_EQ_INT(zero__comm_size(none), n - 1);
        zero__comm_free(none);
    }
    zero__comm_free(sub);
}

/* Random floats (non-integer): results must be identical bit for bit when
 * the same reduce-scatter runs twice, and equal on every rank for the
 * allgathered result. */
static void test_repeatable(zero_comm *w) {
    int n = zero__comm_size(w), r = zero__comm_rank(w);
    size_t per = 50000, total = per * (size_t)n;
    float *send = tbuf(total * 4), *a = tbuf(per * 4), *b = tbuf(per * 4);
    uint32_t s = 12345u + 7919u * (uint32_t)r;
    for (size_t i = 0; i < total; ++i) {
        s = s * 1664525u + 1013904223u;
        send[i] = (float)(s >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
    }
    size_t *counts = make_counts(n, per, 0);
    zero_comm_req *q;
    CHECK_EQ_INT(zero__ireduce_scatterv(w, send, a, counts, ZERO_DTYPE_F32, &q), ZERO_OK);
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK_EQ_INT(zero__ireduce_scatterv(w, send, b, counts, ZERO_DTYPE_F32, &q), ZERO_OK);
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK(memcmp(a, b, per * 4) == 0, "reduce-scatter not bitwise repeatable");
    /* close to the fp64 reference (ring order differs from a naive sum) */
    double maxerr = 0;
    double *ref = calloc(per, sizeof *ref);
    for (int q2 = 0; q2 < n; ++q2) {
        uint32_t t = 12345u + 7919u * (uint32_t)q2;
        for (size_t i = 0; i < total; ++i) {
            t = t * 1664525u + 1013904223u;
            if (i >= (size_t)r * per && i < (size_t)(r + 1) * per)
                ref[i - (size_t)r * per] += (double)((float)(t >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f);
        }
    }
    for (size_t i = 0; i < per; ++i) {
        double e = a[i] - ref[i];
        if (e < 0) e = -e;
        if (e > maxerr) maxerr = e;
    }
    CHECK(maxerr < 1e-5 * n, "reduce-scatter off the fp64 reference by %g", maxerr);
    tfree(ref);
    tfree(send);
    tfree(a);
    tfree(b);
    tfree(counts);
}

/* Sum allreduce: exact on integers, bitwise identical on every rank for
 * random floats (each block is summed once, by its owner), counts < N. */
static void test_allreduce_identical(zero_comm *w) {
    int n = zero__comm_size(w), r = zero__comm_rank(w);
    size_t sizes[] = {0, 1, 3, 1000, 300001};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; ++si) {
        size_t cnt = sizes[si];
        double *d = tbuf(cnt * 8 + 8);
        fill(d, ZERO_DTYPE_F64, r, 0, cnt);
        zero_comm_req *q;
        CHECK_EQ_INT(zero__iallreduce(w, d, cnt, ZERO_DTYPE_F64, ZERO_OP_SUM, &q), ZERO_OK);
        CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
        CHECK(sum_matches(d, ZERO_DTYPE_F64, 0, cnt), "iallreduce f64 count %zu", cnt);
        float *f = tbuf(cnt * 4 + 4);
        uint32_t s = 777u + 31u * (uint32_t)r;
        for (size_t i = 0; i < cnt; ++i) {
            s = s * 1664525u + 1013904223u;
            f[i] = (float)(s >> 8) * (1.0f / 16777216.0f) - 0.5f;
        }
        CHECK_EQ_INT(zero__iallreduce(w, f, cnt, ZERO_DTYPE_F32, ZERO_OP_SUM, &q), ZERO_OK);
        CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
        uint64_t h = 1469598103934665603ull, all[64];
        for (size_t i = 0; i < cnt * 4; ++i) h = (h ^ ((const uint8_t *)f)[i]) * 1099511628211ull;
        CHECK_EQ_INT(zero__allgather_bytes(w, &h, all, sizeof h), ZERO_OK);
        for (int b = 0; b < n && b < 64; ++b) CHECK(all[b] == h, "iallreduce result differs on rank %d (count %zu)", b, cnt);
        tfree(f);
        tfree(d);
    }
    int64_t mx = r;
    zero_comm_req *q;
    CHECK_EQ_INT(zero__iallreduce(w, &mx, 1, ZERO_DTYPE_I64, ZERO_OP_MAX, &q), ZERO_OK);
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK_EQ_INT(mx, n - 1);
}

/* Real overlap: with the progress thread, a reduce-scatter completes while
 * the host sleeps without calling into libzero or MPI, so the first test()
 * afterwards already reports it done. */
static void test_overlap(zero_comm *w) {
    int n = zero__comm_size(w), r = zero__comm_rank(w);
    size_t per = 1u << 18, total = per * (size_t)n; /* 1 MB per rank: many chunks and steps */
    float *send = tbuf(total * 4), *out = tbuf(per * 4);
    fill(send, ZERO_DTYPE_F32, r, 0, total);
    size_t *counts = make_counts(n, per, 0);
    CHECK_EQ_INT(zero__barrier(w), ZERO_OK);
    zero_comm_req *q;
    CHECK_EQ_INT(zero__ireduce_scatterv(w, send, out, counts, ZERO_DTYPE_F32, &q), ZERO_OK);
    /* The host "computes" (sleeps) without calling libzero or MPI; we peek
     * at the op's completion flag (white-box, no progress driven by the
     * peek) for up to 5 s, so a loaded machine does not make this flaky. */
    const zm_op *op = (const zm_op *)q;
    zm_engine *pe = ZM(w)->pe;
    int seen = 0;
    for (int tries = 0; tries < 50 && !seen; ++tries) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        /* op->done is written under the world lock (a plain int): read it
         * under that lock too (an atomic load next to a plain write is a
         * data race, ThreadSanitizer says so).  Taking the lock drives no
         * progress. */
        pthread_mutex_lock(&pe->lock);
        seen = op->done;
        pthread_mutex_unlock(&pe->lock);
    }
    CHECK(seen, "reduce-scatter did not progress while the host computed (no overlap)");
    int done = 0;
    CHECK_EQ_INT(zero__comm_test(q, &done), ZERO_OK);
    CHECK(done, "test() after completion");
    if (!done) CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK(sum_matches(out, ZERO_DTYPE_F32, per * (size_t)r, per), "overlap result");
    tfree(send);
    tfree(out);
    tfree(counts);
}

/* Two host threads issue and wait collectives at the same time, each on its
 * own communicator (the world and a full-size split), as a trainer's
 * backward thread and its optimizer thread would. */
typedef struct thread_arg {
    zero_comm *c;
    int kind; /* 0: reduce-scatter, 1: allgather */
    int ok;
} thread_arg;

static void *thread_body(void *p) {
    thread_arg *a = p;
    int n = zero__comm_size(a->c), r = zero__comm_rank(a->c);
    size_t per = 20000 + 17 * (size_t)a->kind, total = per * (size_t)n;
    size_t *counts = make_counts(n, per, 0);
    float *send = tbuf(total * 4), *out = tbuf(total * 4);
    a->ok = 1;
    for (int it = 0; it < 15 && a->ok; ++it) {
        zero_comm_req *q = NULL;
        if (a->kind == 0) {
            fill(send, ZERO_DTYPE_F32, r, 0, total);
            a->ok &= zero__ireduce_scatterv(a->c, send, out, counts, ZERO_DTYPE_F32, &q) == ZERO_OK;
            a->ok &= q && zero__comm_wait(q) == ZERO_OK;
            a->ok &= sum_matches(out, ZERO_DTYPE_F32, per * (size_t)r, per);
        } else {
            fill(send, ZERO_DTYPE_F32, r, per * (size_t)r, per);
            a->ok &= zero__iallgatherv(a->c, send, out, counts, ZERO_DTYPE_F32, &q) == ZERO_OK;
            a->ok &= q && zero__comm_wait(q) == ZERO_OK;
            for (int b = 0; b < n && a->ok; ++b) {
                float ref[64];
                for (size_t o = 0; o < per && a->ok; o += 64) {
                    size_t len = per - o < 64 ? per - o : 64;
                    fill(ref, ZERO_DTYPE_F32, b, per * (size_t)b + o, len);
                    a->ok &= memcmp(ref, out + per * (size_t)b + o, len * 4) == 0;
                }
            }
        }
    }
    tfree(send);
    tfree(out);
    tfree(counts);
    return NULL;
}

static void test_threads(zero_comm *w) {
    zero_comm *dup = NULL;
    CHECK_EQ_INT(zero__comm_split(w, 0, zero__comm_rank(w), &dup), ZERO_OK);
    if (!dup) return;
    thread_arg a = {w, 0, 0}, b = {dup, 1, 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, thread_body, &a);
    pthread_create(&tb, NULL, thread_body, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(a.ok, "reduce-scatter thread failed");
    CHECK(b.ok, "allgather thread failed");
    zero__comm_free(dup);
}

/* Orders that differ across communicators are legal: rank 0 issues a
 * reduce-scatter on a sub-communicator before a world barrier, the others
 * after it.  Rank 0's barrier must not wait for that reduce-scatter (with or
 * without the progress thread). */
static void test_cross_order(zero_comm *w) {
    int n = zero__comm_size(w), r = zero__comm_rank(w);
    zero_comm *sub = NULL;
    CHECK_EQ_INT(zero__comm_split(w, 0, r, &sub), ZERO_OK);
    if (!sub) return;
    size_t per = 100000, total = per * (size_t)n;
    float *send = tbuf(total * 4), *out = tbuf(per * 4);
    fill(send, ZERO_DTYPE_F32, r, 0, total);
    size_t *counts = make_counts(n, per, 0);
    zero_comm_req *q = NULL;
    if (r == 0) CHECK_EQ_INT(zero__ireduce_scatterv(sub, send, out, counts, ZERO_DTYPE_F32, &q), ZERO_OK);
    CHECK_EQ_INT(zero__barrier(w), ZERO_OK);
    double x = 1;
    CHECK_EQ_INT(zero__allreduce(w, &x, 1, ZERO_DTYPE_F64, ZERO_OP_SUM), ZERO_OK);
    CHECK(x == n, "allreduce %g", x);
    if (r != 0) CHECK_EQ_INT(zero__ireduce_scatterv(sub, send, out, counts, ZERO_DTYPE_F32, &q), ZERO_OK);
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_OK);
    CHECK(sum_matches(out, ZERO_DTYPE_F32, per * (size_t)r, per), "cross-order reduce-scatter");
    tfree(send);
    tfree(out);
    tfree(counts);
    zero__comm_free(sub);
}

/* A caller bug that MPI detects (ranks disagree on the counts, so rank 0's
 * receive is too small) comes back as ZERO_ERR_COMM, never an abort, and
 * the communicator stays usable. */
static void test_error_path(zero_comm *w) {
    int r = zero__comm_rank(w);
    size_t counts[2] = {r == 0 ? 10u : 12u, r == 0 ? 10u : 12u};
    float send[24] = {0}, out[12];
    zero_comm_req *q = NULL;
    CHECK_EQ_INT(zero__ireduce_scatterv(w, send, out, counts, ZERO_DTYPE_F32, &q), ZERO_OK);
    zero_status st = zero__comm_wait(q);
    if (r == 0) CHECK(st == ZERO_ERR_COMM, "truncated receive gave status %d, expected ZERO_ERR_COMM", st);
    CHECK_EQ_INT(zero__barrier(w), ZERO_OK);
    float x = 1.0f;
    CHECK_EQ_INT(zero__allreduce(w, &x, 1, ZERO_DTYPE_F32, ZERO_OP_SUM), ZERO_OK);
    CHECK(x == 2.0f, "allreduce after an error: %g", x);
}

/* (BUFFERS=mixed) Ranks that disagree on a collective's size, with shared
 * buffers on every rank: each sees the mismatch in the others' posts and
 * fails the op with ZERO_ERR_COMM (no rank reads a wrong-sized block), and
 * the communicator goes on working. */
static void test_mismatch(zero_comm *w) {
    const int saved = g_buffers;
    g_buffers = 1;
    size_t per = (size_t)(R == 0 ? 1000 : 1200), total = per * (size_t)N;
    size_t *counts = make_counts(N, per, 0);
    float *send = tbuf(total * 4), *out = tbuf(per * 4);
    fill(send, ZERO_DTYPE_F32, R, 0, total);
    zero_comm_req *q = NULL;
    CHECK_EQ_INT(zero__ireduce_scatterv(w, send, out, counts, ZERO_DTYPE_F32, &q), ZERO_OK);
    CHECK_EQ_INT(zero__comm_wait(q), ZERO_ERR_COMM);
    tfree(send);
    tfree(out);
    tfree(counts);
    g_buffers = saved;
    float x = 1.0f;
    CHECK_EQ_INT(zero__allreduce(w, &x, 1, ZERO_DTYPE_F32, ZERO_OP_SUM), ZERO_OK);
    CHECK(x == (float)N, "allreduce after a mismatch: %g", x);
}

/* ZERO_TEST_PROGRESS_STRESS=n: the all-gather pair that hung
 * comm_mpi_small_chunks_np4, n times.  The last rank owns the big block
 * (pattern 5), so it sends hundreds of chunk-sized pieces to every peer;
 * a peer that has completed its side goes straight on to the next op,
 * whose shared-memory agreement waits for the last rank.  That used to
 * make no MPI call, so what Open MPI still owed the last rank from
 * this peer (an RGET's FIN, a queued fragment; no asynchronous progress)
 * never left, the last rank never finished, and both waited for each other
 * (a ZERO_COMM_TIMEOUT names a direct all-gather on the last rank and
 * "waiting for rank N-1 to post its buffer" on the others). */
static void stress_progress(zero_comm *w, int iters) {
    for (int i = 0; i < iters && check_failures_ == 0; ++i) {
        test_allgather(w, ZERO_DTYPE_F64, 70013, 5, 0);
        test_allgather(w, ZERO_DTYPE_F64, 70013, 5, 1);
    }
    float x = 1.0f; /* everyone is still in step */
    CHECK_EQ_INT(zero__allreduce(w, &x, 1, ZERO_DTYPE_F32, ZERO_OP_SUM), ZERO_OK);
}

int main(int argc, char **argv) {
    /* argv[1] == "host-multiple" / "host-single": the host initialises MPI
     * itself and passes its communicator; otherwise libzero initialises MPI
     * (ZERO_COMM_AUTO) and must finalise it. */
    const char *mode = argc > 1 ? argv[1] : "auto";
    /* further arguments NAME=VALUE set libzero's comm knobs for this run
     * (ZERO_COMM_CHUNK_KB, ZERO_COMM_WINDOW, ZERO_COMM_ALLGATHER, ...) */
    for (int i = 2; i < argc; ++i) {
        char *eq = strchr(argv[i], '=');
        if (eq) {
            *eq = '\0';
            setenv(argv[i], eq + 1, 1);
        }
    }
    /* ZERO_TEST_SHM_OFF_RANK=k: only world rank k turns the shared-memory
     * collectives off (ZERO_COMM_SHM=0), before the world exists, so the
     * ranks disagree at every communicator's setup: they must decide
     * together (the transport everywhere) instead of some entering the
     * setup's exchange alone and hanging (comm_mpi_shm.c, shm_wanted) */
    const char *off_rank = getenv("ZERO_TEST_SHM_OFF_RANK");
    const char *launcher_rank = getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : getenv("PMI_RANK");
    if (off_rank && launcher_rank && atoi(off_rank) == atoi(launcher_rank)) setenv("ZERO_COMM_SHM", "0", 1);
    int expect_thread = strcmp(mode, "host-single") != 0 && !(getenv("ZERO_COMM_PROGRESS_THREAD") &&
                                                               strcmp(getenv("ZERO_COMM_PROGRESS_THREAD"), "0") == 0);
    int host_inits = strcmp(mode, "auto") != 0;
    int provided = -1;
    if (host_inits) {
        int want = strcmp(mode, "host-single") == 0 ? MPI_THREAD_SINGLE : MPI_THREAD_MULTIPLE;
        MPI_Init_thread(&argc, &argv, want, &provided);
    }
    zero_comm *w = NULL;
    char err[256];
    MPI_Comm host = MPI_COMM_WORLD;
    zero_status st = host_inits ? zero__comm_world_create(ZERO_COMM_MPI, &host, NULL, &w, err, sizeof err)
                                : zero__comm_world_create(ZERO_COMM_AUTO, NULL, NULL, &w, err, sizeof err);
    CHECK(st == ZERO_OK && w, "world create: %d %s", st, err);
    if (!w) return check_finish();
    CHECK(strcmp(w->ops->name, "mpi") == 0, "backend %s", w->ops->name);
    R = zero__comm_rank(w);
    N = zero__comm_size(w);
    const char *bufs = getenv("ZERO_TEST_BUFFERS");
    g_shm_on = !(getenv("ZERO_COMM_SHM") && strcmp(getenv("ZERO_COMM_SHM"), "0") == 0) && !off_rank;
    CHECK(!off_rank || launcher_rank, "ZERO_TEST_SHM_OFF_RANK needs the launcher's rank (OMPI_COMM_WORLD_RANK / PMI_RANK)");
    g_buffers = bufs && strcmp(bufs, "shared") == 0 ? 1 : bufs && strcmp(bufs, "mixed") == 0 ? 2 : 0;
    const char *stress = getenv("ZERO_TEST_PROGRESS_STRESS");
    if (stress && atoi(stress) > 0) {
        stress_progress(w, atoi(stress));
        zero__comm_world_free(w);
        if (host_inits) MPI_Finalize();
        return check_finish();
    }
    if (strcmp(mode, "host-finalize-first") == 0) {
        /* a host that finalises MPI before destroying libzero: the free must
         * neither crash nor call MPI */
        float x = 1.0f;
        CHECK_EQ_INT(zero__allreduce(w, &x, 1, ZERO_DTYPE_F32, ZERO_OP_SUM), ZERO_OK);
        CHECK(x == (float)N, "allreduce %g", x);
        MPI_Finalize();
        zero__comm_world_free(w);
        return check_finish();
    }

    static const zero_dtype dts[] = {ZERO_DTYPE_F32, ZERO_DTYPE_F64, ZERO_DTYPE_I64, ZERO_DTYPE_U64, ZERO_DTYPE_U8};
    for (int p = 0; p < 6; ++p) {
        size_t base = p == 3 ? 2 : (p == 2 ? 1500 : 70000 + 13); /* pattern 3: N > elements */
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; ++d) {
            if (d > 1 && p != 1 && p != 3) continue; /* keep the run short: all dtypes on two patterns */
            test_reduce_scatter(w, dts[d], base, p, 0);
            test_reduce_scatter(w, dts[d], base, p, 1);
            test_allgather(w, dts[d], base, p, 0);
            test_allgather(w, dts[d], base, p, 1);
        }
    }
    for (int p = 0; p < 6; p += (p == 1 ? 2 : 1)) { /* equal, uneven, N > elements, empty, one big block */
        test_sum16(w, ZERO_DTYPE_BF16, p == 3 ? 2 : 70013, p);
        test_sum16(w, ZERO_DTYPE_F16, p == 3 ? 2 : 1501, p);
    }
    test_allgather(w, ZERO_DTYPE_BF16, 3001, 1, 0);
    test_allgather(w, ZERO_DTYPE_F16, 3001, 2, 1);
    test_blocking(w);
    test_concurrent(w);
    test_repeatable(w);
    test_allreduce_identical(w);
    if (expect_thread) test_overlap(w);
    if (strcmp(mode, "host-single") != 0) test_threads(w);
    test_cross_order(w);
    test_groups(w);
    if (N == 2 && strcmp(mode, "auto") == 0) test_error_path(w);

    if (g_buffers == 2 && N > 1 && g_shm_on) test_mismatch(w);
    /* which path the collectives took: shared buffers on one node run in
     * shared memory, a private buffer on any rank sends everyone to the
     * transport path */
    CHECK(atomic_load(&g_tbuf_failures) == 0, "%d shared block(s) could not be made", atomic_load(&g_tbuf_failures));
    uint64_t in_shm = 0, on_transport = 0;
    zero__zm_shm_counts(w, &in_shm, &on_transport);
    if (N > 1 && g_buffers == 1 && g_shm_on)
        CHECK(in_shm > 40 && on_transport < in_shm, "shared buffers: %llu collectives in shared memory, %llu not",
              (unsigned long long)in_shm, (unsigned long long)on_transport);
    else if (N > 1)
        CHECK(in_shm == 0 && (!g_shm_on || on_transport > 40),
              "private buffers: %llu collectives in shared memory, %llu on the transport", (unsigned long long)in_shm,
              (unsigned long long)on_transport);

    zero__comm_counters ct;
    zero__comm_counters_get(w, &ct);
    CHECK(ct.reduce_scatter_calls > 10 && ct.allgather_calls > 10 && ct.bytes_reduced > 0, "world counters");
    zero__comm_world_free(w);

    int finalized = 0;
    MPI_Finalized(&finalized);
    if (host_inits) {
        CHECK(!finalized, "libzero finalized the host's MPI");
        int q = -1;
        MPI_Query_thread(&q);
        CHECK_EQ_INT(q, provided); /* not re-initialised with another level */
        int one = 1, sum = 0;      /* the host's MPI still works */
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK_EQ_INT(sum, N);
        MPI_Finalize();
    } else {
        CHECK(finalized, "libzero initialised MPI and should have finalized it");
        /* MPI cannot come back in this process: a new world says so clearly */
        zero_comm *again = NULL;
        err[0] = '\0';
        CHECK_EQ_INT(zero__comm_world_create(ZERO_COMM_AUTO, NULL, NULL, &again, err, sizeof err), ZERO_ERR_COMM);
        CHECK(strstr(err, "finalized") != NULL, "error text: %s", err);
    }
    return check_finish();
}
