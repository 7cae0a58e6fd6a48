/* The MPI ring reduce-scatter's summation order, for every block pattern
 * the bucket engine can produce (issue 13).
 *
 * A bucket's reduce-scatter blocks are the layout's rank shares clipped to
 * the bucket, so most of them are empty once partitions are smaller than a
 * bucket, and the non-empty ones need not be adjacent in ring order.  The
 * ring skips empty steps; a receive into a forwarding buffer once waited
 * only for send (k-1, j), which an empty step k-1 makes vacuous, and then
 * overwrote a buffer an older send was still reading: wrong, timing-
 * dependent sums.
 *
 * For random (non-integer) floats and many count patterns this checks,
 * BITWISE, that every rank's block equals the sum formed in the documented
 * order (block b: ranks b+1, b+2, ..., b, each partial sum first), computed
 * locally from every rank's known data; that the same holds in place and
 * with the result written elsewhere; and that iallreducev over the same
 * counts gives every rank every block with exactly those bits (stage 0's
 * all-reduce must agree with stage 1-3's reduce-scatter).  Several
 * collectives are kept in flight at once, like the bucket engine does.
 * Run with ZERO_DEBUG_JITTER and small chunks to shake the timing.
 * Usage: test_comm_ring_order [rounds] [VAR=value ...] */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../common/check.h"
#include "comm.h"
#include "jitter.h"

static int R, N;

/* rank r's value at global index i: a pseudo-random float in [-1, 1) that
 * every rank can recompute */
static float val(int r, size_t i, uint32_t salt) {
    uint64_t z = ((uint64_t)(uint32_t)r << 40) ^ ((uint64_t)i << 1) ^ ((uint64_t)salt << 20);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

/* The ring's order for an element of block b (comm_mpi_ring.c). */
static float expected(int b, size_t i, uint32_t salt) {
    float s = val((b + 1) % N, i, salt);
    for (int k = 2; k <= N; ++k) s = s + val((b + k) % N, i, salt);
    return s;
}

static uint32_t rng_state = 1;
static uint32_t rnd(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}

/* Patterns: 0 all equal, 1 a contiguous run of owners (a bucket over a few
 * partitions) starting anywhere, 2 a random subset, 3 one block, 4 every
 * other block, 5 a run that wraps past the last rank, 6 all empty but the
 * first and the last (the widest gap), 7 random sizes 0..3 (N > elements). */
static void make_counts(size_t *c, int pattern, size_t base) {
    for (int b = 0; b < N; ++b) c[b] = 0;
    int lo = (int)(rnd() % (uint32_t)N), len = 1 + (int)(rnd() % (uint32_t)N);
    switch (pattern) {
    case 0: for (int b = 0; b < N; ++b) c[b] = base; break;
    case 1:
        for (int k = 0; k < len && lo + k < N; ++k) c[lo + k] = base + (size_t)k;
        break;
    case 2: for (int b = 0; b < N; ++b) c[b] = rnd() % 3 ? 0 : base + rnd() % 7; break;
    case 3: c[lo] = base; break;
    case 4: for (int b = 0; b < N; b += 2) c[b] = base; break;
    case 5: for (int k = 0; k < len; ++k) c[(lo + k) % N] = base; break;
    case 6: c[0] = base; c[N - 1] = base + 1; break;
    default: for (int b = 0; b < N; ++b) c[b] = rnd() % 4; break;
    }
}

typedef struct job {
    size_t counts[256];
    size_t total, off;
    uint32_t salt;
    int inplace, allreduce;
    float *buf, *out;
    zero_comm_req *req;
} job;

static void job_start(zero_comm *w, job *j) {
    j->total = j->off = 0;
    for (int b = 0; b < N; ++b) {
        if (b < R) j->off += j->counts[b];
        j->total += j->counts[b];
    }
    j->buf = malloc((j->total + 1) * sizeof(float));
    for (size_t i = 0; i < j->total; ++i) j->buf[i] = val(R, i, j->salt);
    j->out = j->inplace || j->allreduce ? NULL : malloc((j->counts[R] + 1) * sizeof(float));
    zero_status st;
    if (j->allreduce)
        st = zero__iallreducev(w, j->buf, j->counts, ZERO_DTYPE_F32, &j->req);
    else
        st = zero__ireduce_scatterv(w, j->buf, j->inplace ? j->buf + j->off : j->out, j->counts, ZERO_DTYPE_F32,
                                    &j->req);
    CHECK_EQ_INT(st, ZERO_OK);
}

static int job_finish(job *j) {
    CHECK_EQ_INT(zero__comm_wait(j->req), ZERO_OK);
    int ok = 1;
    if (j->allreduce) {
        size_t o = 0;
        for (int b = 0; b < N; ++b)
            for (size_t i = 0; i < j->counts[b]; ++i, ++o) {
                float e = expected(b, o, j->salt);
                if (memcmp(&j->buf[o], &e, sizeof e) != 0) ok = 0;
            }
    } else {
        const float *got = j->inplace ? j->buf + j->off : j->out;
        for (size_t i = 0; i < j->counts[R]; ++i) {
            float e = expected(R, j->off + i, j->salt);
            if (memcmp(&got[i], &e, sizeof e) != 0) ok = 0;
        }
    }
    free(j->buf);
    free(j->out);
    return ok;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    for (int i = 2; i < argc; ++i) {
        char *eq = strchr(argv[i], '=');
        if (eq) {
            *eq = '\0';
            setenv(argv[i], eq + 1, 1);
        }
    }
    zero_comm *w = NULL;
    char err[512];
    if (zero__comm_world_create(ZERO_COMM_AUTO, NULL, NULL, &w, err, sizeof err) != ZERO_OK) {
        fprintf(stderr, "world: %s\n", err);
        return 1;
    }
    R = zero__comm_rank(w);
    N = zero__comm_size(w);
    CHECK(N <= 256, "at most 256 ranks");
    enum { INFLIGHT = 3, NPATTERNS = 8 };
    int bad = 0;
    for (int round = 0; round < rounds && N <= 256; ++round) {
        rng_state = 977u * (uint32_t)round + 1u; /* same on every rank: same counts */
        for (int p = 0; p < NPATTERNS; ++p) {
            job jobs[INFLIGHT];
            /* sizes from below one chunk to several (ZERO_COMM_CHUNK_KB) */
            size_t base = 1 + rnd() % (round % 3 == 0 ? 40000u : 3000u);
            for (int q = 0; q < INFLIGHT; ++q) {
                make_counts(jobs[q].counts, p, base);
                jobs[q].salt = (uint32_t)(round * 131 + p * 7 + q);
                jobs[q].inplace = q == 1;
                jobs[q].allreduce = q == 2;
                job_start(w, &jobs[q]);
            }
            for (int q = 0; q < INFLIGHT; ++q)
                if (!job_finish(&jobs[q])) {
                    ++bad;
                    CHECK(0, "rank %d: round %d pattern %d job %d (%s): sums not bitwise in ring order", R, round,
                          p, q, jobs[q].allreduce ? "iallreducev" : jobs[q].inplace ? "in place" : "out of place");
                }
        }
    }
    if (R == 0)
        printf("ring order: %d ranks, %d rounds x %d patterns x %d collectives, %d wrong; jitter %s "
               "(%llu ring posts perturbed on rank 0)\n",
               N, rounds, NPATTERNS, INFLIGHT, bad, zero__jitter_enabled() ? "on" : "off",
               zero__jitter_count(ZERO_JITTER_RING_POST));
    zero__comm_world_free(w);
    return check_finish();
}
