/* The device staging layer's buffer pool (backends/device/comm_devstage.c,
 * issue 35), white box, over a stub device whose "device pointers" the host
 * cannot dereference and whose pinned host blocks are counted:
 *
 *  A (MPI, every rank): rounds of the same collectives (allreduce,
 *    reduce-scatterv, allgatherv, allreducev in flight together, some
 *    completed on another thread than the one that issued them; blocking
 *    allreduce, broadcast, allgather_bytes) on device buffers give bitwise
 *    the results of the same collectives on host buffers, with new data
 *    every round (the staging buffers come back dirty), and no round after
 *    the first allocates a pinned block; every pinned block goes back to
 *    the device at free, through the device's free;
 *  B (self communicator of a CPU engine, so that zero_memory_stats shows
 *    the staging scratch alone): a block under 64 KiB is not pinned; the
 *    pool is counted as ZERO_MEM_OTHER (host) from allocation to free,
 *    cached buffers included, flat across repeated collectives; it reuses
 *    a larger buffer for a smaller block, never grows past the most held at
 *    once, caches at most 32 free buffers; splits share it, threads
 *    hammering their splits at once get their own bytes back; the
 *    accounting returns to where it was at free;
 *  C: the device refusing pinned memory: staging falls back to malloc,
 *    same results, same accounting. */
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "device.h"
#include "zero.h"

/* ---------------------------------------------------------------- stub */

#define TAG ((uintptr_t)1 << 62)
static void *real(const void *p) { return (void *)((uintptr_t)p & ~TAG); }
static void *fake(void *p) { return (void *)((uintptr_t)p | TAG); }
static int tagged(const void *p) { return ((uintptr_t)p & TAG) != 0; }

static atomic_long g_pinned_allocs, g_pinned_live, g_bad_free, g_copies;
static atomic_int g_fail_pinned;
/* the pinned blocks handed out, so that a free of anything else shows */
enum { MAXPIN = 4096 };
static void *g_pins[MAXPIN];
static pthread_mutex_t g_pins_mu = PTHREAD_MUTEX_INITIALIZER;

static void *st_alloc_common(zero_mem_tier tier, size_t bytes, int fill) {
    if (tier != ZERO_TIER_HOST) return NULL; /* the staging layer never asks for device memory */
    if (atomic_load(&g_fail_pinned)) return NULL;
    size_t r = (bytes + 255) & ~(size_t)255;
    void *p = aligned_alloc(256, r ? r : 256);
    if (!p) return NULL;
    memset(p, fill ? 0 : 0xA5, r ? r : 256); /* nofill: garbage, as cudaHostAlloc gives it */
    pthread_mutex_lock(&g_pins_mu);
    int i = 0;
    while (i < MAXPIN && g_pins[i]) i++;
    if (i < MAXPIN) g_pins[i] = p;
    pthread_mutex_unlock(&g_pins_mu);
    if (i == MAXPIN) {
        free(p);
        return NULL;
    }
    atomic_fetch_add(&g_pinned_allocs, 1);
    atomic_fetch_add(&g_pinned_live, 1);
    return p;
}
static void *st_alloc(zero__device *d, zero_mem_tier tier, size_t bytes) {
    (void)d;
    return st_alloc_common(tier, bytes, 1);
}
static void *st_alloc_nofill(zero__device *d, zero_mem_tier tier, size_t bytes) {
    (void)d;
    return st_alloc_common(tier, bytes, 0);
}
static void st_free(zero__device *d, void *p) {
    (void)d;
    pthread_mutex_lock(&g_pins_mu);
    int i = 0;
    while (i < MAXPIN && g_pins[i] != p) i++;
    if (i < MAXPIN) g_pins[i] = NULL;
    pthread_mutex_unlock(&g_pins_mu);
    if (i == MAXPIN) { /* not a block of ours: would be a crash on a GPU */
        atomic_fetch_add(&g_bad_free, 1);
        return;
    }
    atomic_fetch_sub(&g_pinned_live, 1);
    free(p);
}
static int st_is_device(zero__device *d, const void *p) {
    (void)d;
    return tagged(p);
}
static zero_status st_copy(zero__device *d, void *dst, const void *src, size_t n) {
    (void)d;
    atomic_fetch_add(&g_copies, 1);
    memmove(real(dst), real(src), n);
    return ZERO_OK;
}
static const char *st_error(zero__device *d) {
    (void)d;
    return "stub";
}
static void st_close(zero__device *d) { (void)d; }

static const zero__device_ops stub_ops = {
    .name = "stub",
    .alloc = st_alloc,
    .free = st_free,
    .is_device = st_is_device,
    .copy = st_copy,
    .error = st_error,
    .close = st_close,
    .alloc_nofill = st_alloc_nofill,
};
static zero__device g_dev = {&stub_ops, 0, 0};

/* ---------------------------------------------------------------- data */

static int rank_ = 0, world_ = 1;

static uint32_t mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}
/* fp32 values with full mantissas: sums round, so a changed order shows */
static void fill(float *x, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) x[i] = ldexpf((float)(mix(seed * 2654435761U + (uint32_t)i) & 0xFFFFFF), -20) - 8.f;
}
/* A "device" copy of n bytes of host memory (the caller frees real()). */
static void *dev_copy_of(const void *h, size_t n) {
    void *p = malloc(n ? n : 1);
    memcpy(p, h, n);
    return fake(p);
}
static int same(const void *dev, const void *host, size_t n) { return memcmp(real(dev), host, n) == 0; }

/* ------------------------------------------------------------- part A */

typedef struct waiter {
    zero_comm_req *req[2];
    zero_status s[2];
} waiter;
static void *wait_them(void *arg) {
    waiter *w = arg;
    for (int i = 0; i < 2; i++) w->s[i] = zero__comm_wait(w->req[i]);
    return NULL;
}

static void part_a(void) {
    MPI_Comm mc = MPI_COMM_WORLD;
    zero_comm *inner = NULL, *ds = NULL;
    char err[256] = "";
    zero_status s = zero__comm_world_create(ZERO_COMM_MPI, &mc, NULL, &inner, err, sizeof err);
    CHECK(s == ZERO_OK, "MPI comm: %s", err);
    if (s != ZERO_OK) return;
    s = zero__comm_devstage_create(inner, &g_dev, &ds);
    CHECK(s == ZERO_OK, "devstage create: %d", (int)s);
    if (s != ZERO_OK) return;

    enum { ROUNDS = 4 };
    const size_t na = 100003, nsmall = 100; /* 400 KB (pinned) and 400 B (malloc) */
    size_t cr[8], cg[8], total_r = 0, total_g = 0;
    for (int r = 0; r < world_; r++) total_r += cr[r] = 30001 + 7 * (size_t)r;
    for (int r = 0; r < world_; r++) total_g += cg[r] = 20011 + 13 * (size_t)r;
    size_t off_g = 0; /* this rank's block of the all-gather */
    for (int r = 0; r < rank_; r++) off_g += cg[r];
    const size_t bb = 70000; /* allgather_bytes block */
    long allocs_after_first = 0;
    for (int round = 0; round < ROUNDS; round++) {
        const uint32_t seed = (uint32_t)(round * 97 + rank_ * 13 + 1);
        float *ha = malloc(na * 4), *hs = malloc(nsmall * 4), *hr = malloc(total_r * 4), *hrv = malloc(total_r * 4),
              *hg = calloc(total_g, 4), *hrecv = calloc(cr[rank_], 4), *hb = malloc(na * 4), *hc = malloc(na * 4);
        char *hab = malloc(bb), *habr = calloc(bb, (size_t)world_);
        fill(ha, na, seed), fill(hs, nsmall, seed + 1), fill(hr, total_r, seed + 2), fill(hrv, total_r, seed + 3);
        fill(hg + off_g, cg[rank_], seed + 4), fill(hb, na, seed + 5), fill(hc, na, (uint32_t)round + 77);
        fill((float *)hab, bb / 4, seed + 6);
        /* device copies of every input */
        float *da = dev_copy_of(ha, na * 4), *dsm = dev_copy_of(hs, nsmall * 4), *dr = dev_copy_of(hr, total_r * 4),
              *drv = dev_copy_of(hrv, total_r * 4), *dg = dev_copy_of(hg, total_g * 4),
              *drecv = dev_copy_of(hrecv, cr[rank_] * 4), *db = dev_copy_of(hb, na * 4),
              *dc = dev_copy_of(hc, na * 4), *dab = dev_copy_of(hab, bb), *dabr = dev_copy_of(habr, bb * world_);

        /* device: five in flight at once (every round alike, so that the
         * most held at once is reached in round 1); two completed by
         * another thread while this one completes the rest */
        zero_comm_req *q[5] = {0};
        CHECK(zero__iallreduce(ds, da, na, ZERO_DTYPE_F32, ZERO_OP_SUM, &q[0]) == ZERO_OK, "iallreduce");
        CHECK(zero__ireduce_scatterv(ds, dr, drecv, cr, ZERO_DTYPE_F32, &q[1]) == ZERO_OK, "ireduce_scatterv");
        CHECK(zero__iallgatherv(ds, (char *)dg + off_g * 4, dg, cg, ZERO_DTYPE_F32, &q[2]) == ZERO_OK, "iallgatherv");
        CHECK(zero__iallreducev(ds, drv, cr, ZERO_DTYPE_F32, &q[3]) == ZERO_OK, "iallreducev");
        CHECK(zero__iallreduce(ds, dsm, nsmall, ZERO_DTYPE_F32, ZERO_OP_SUM, &q[4]) == ZERO_OK, "small");
        waiter w = {{q[0], q[2]}, {ZERO_OK, ZERO_OK}};
        pthread_t t;
        pthread_create(&t, NULL, wait_them, &w);
        int done = 0;
        while (!done) CHECK(zero__comm_test(q[1], &done) == ZERO_OK, "test");
        CHECK(zero__comm_wait(q[3]) == ZERO_OK, "wait allreducev");
        CHECK(zero__comm_wait(q[4]) == ZERO_OK, "wait small");
        pthread_join(t, NULL);
        CHECK(w.s[0] == ZERO_OK && w.s[1] == ZERO_OK, "waits on another thread: %d %d", (int)w.s[0], (int)w.s[1]);
        CHECK(zero__allreduce(ds, db, na, ZERO_DTYPE_F32, ZERO_OP_SUM) == ZERO_OK, "allreduce");
        CHECK(zero__broadcast(ds, dc, na, ZERO_DTYPE_F32, world_ - 1) == ZERO_OK, "broadcast");
        CHECK(zero__allgather_bytes(ds, dab, dabr, bb) == ZERO_OK, "allgather_bytes");
        if (round == 0) allocs_after_first = atomic_load(&g_pinned_allocs);

        /* host: the same collectives straight on the inner communicator's path */
        float *hrecv2 = malloc(cr[rank_] * 4);
        CHECK(zero__iallreduce(ds, ha, na, ZERO_DTYPE_F32, ZERO_OP_SUM, &q[0]) == ZERO_OK, "h iallreduce");
        CHECK(zero__ireduce_scatterv(ds, hr, hrecv2, cr, ZERO_DTYPE_F32, &q[1]) == ZERO_OK, "h ireduce_scatterv");
        CHECK(zero__iallgatherv(ds, hg + off_g, hg, cg, ZERO_DTYPE_F32, &q[2]) == ZERO_OK, "h iallgatherv");
        CHECK(zero__iallreducev(ds, hrv, cr, ZERO_DTYPE_F32, &q[3]) == ZERO_OK, "h iallreducev");
        CHECK(zero__iallreduce(ds, hs, nsmall, ZERO_DTYPE_F32, ZERO_OP_SUM, &q[4]) == ZERO_OK, "h small");
        for (int i = 0; i < 5; i++) CHECK(zero__comm_wait(q[i]) == ZERO_OK, "h wait %d", i);
        CHECK(zero__allreduce(ds, hb, na, ZERO_DTYPE_F32, ZERO_OP_SUM) == ZERO_OK, "h allreduce");
        CHECK(zero__broadcast(ds, hc, na, ZERO_DTYPE_F32, world_ - 1) == ZERO_OK, "h broadcast");
        CHECK(zero__allgather_bytes(ds, hab, habr, bb) == ZERO_OK, "h allgather_bytes");

        CHECK(same(da, ha, na * 4), "round %d: iallreduce differs from the host path", round);
        CHECK(same(drecv, hrecv2, cr[rank_] * 4), "round %d: ireduce_scatterv differs", round);
        CHECK(same(dg, hg, total_g * 4), "round %d: iallgatherv differs", round);
        CHECK(same(drv, hrv, total_r * 4), "round %d: iallreducev differs", round);
        CHECK(same(dsm, hs, nsmall * 4), "round %d: small iallreduce differs", round);
        CHECK(same(db, hb, na * 4), "round %d: allreduce differs", round);
        CHECK(same(dc, hc, na * 4), "round %d: broadcast differs", round);
        CHECK(same(dabr, habr, bb * (size_t)world_), "round %d: allgather_bytes differs", round);
        void *frees[] = {ha, hs, hr, hrv, hg, hrecv, hrecv2, hb, hc, hab, habr, real(da), real(dsm), real(dr),
                         real(drv), real(dg), real(drecv), real(db), real(dc), real(dab), real(dabr)};
        for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) free(frees[i]);
    }
    const long allocs = atomic_load(&g_pinned_allocs);
    CHECK(allocs_after_first > 0, "no pinned staging block for 400 KB collectives");
    CHECK(allocs == allocs_after_first, "rounds 2..%d allocated %ld new pinned staging blocks (round 1: %ld)", ROUNDS,
          allocs - allocs_after_first, allocs_after_first);
    zero__comm_free(ds);
    CHECK(atomic_load(&g_pinned_live) == 0, "%ld pinned blocks not given back at free", atomic_load(&g_pinned_live));
    CHECK(atomic_load(&g_bad_free) == 0, "the device's free got %ld blocks it never gave out",
          atomic_load(&g_bad_free));
    if (rank_ == 0)
        printf("A (np %d): %d rounds bitwise equal to the host path; %ld pinned staging blocks, all in round 1\n",
               world_, ROUNDS, allocs);
}

/* ------------------------------------------------------------- part B */

static zero_engine *g_e;
static int64_t other_now(void) {
    zero_memory_stats ms = ZERO_MEMORY_STATS_INIT;
    zero_memory_stats_get(g_e, &ms);
    return (int64_t)ms.current[ZERO_TIER_HOST][ZERO_MEM_OTHER];
}
static int64_t other_peak(void) {
    zero_memory_stats ms = ZERO_MEMORY_STATS_INIT;
    zero_memory_stats_get(g_e, &ms);
    return (int64_t)ms.peak[ZERO_TIER_HOST][ZERO_MEM_OTHER];
}

/* One staged all-reduce of n floats of pattern `seed` on a self
 * communicator (the identity): the device buffer must come back unchanged. */
static int roundtrip(zero_comm *c, size_t n, uint32_t seed) {
    float *h = malloc((n ? n : 1) * 4);
    fill(h, n, seed);
    float *d = dev_copy_of(h, n * 4);
    memset(h, 0, n * 4);
    zero_comm_req *q = NULL;
    zero_status s = zero__iallreduce(c, d, n, ZERO_DTYPE_F32, ZERO_OP_SUM, &q);
    if (s == ZERO_OK) s = zero__comm_wait(q);
    fill(h, n, seed);
    int ok = s == ZERO_OK && same(d, h, n * 4);
    free(h);
    free(real(d));
    return ok;
}

typedef struct hammer {
    zero_comm *c;
    int id, bad;
} hammer;
static void *hammer_run(void *arg) {
    hammer *h = arg;
    for (int i = 0; i < 200; i++) {
        /* 2 to 64 KiB: the 64 KiB blocks cached before serve them all */
        const size_t n = 500 + (size_t)(i * 7919 + h->id * 131) % 15885;
        if (!roundtrip(h->c, n, (uint32_t)(h->id * 100000 + i))) h->bad++;
    }
    return NULL;
}

static zero_comm *self_staged(void) {
    zero_comm *inner = NULL, *ds = NULL;
    char err[256] = "";
    zero_status s = zero__comm_world_create(ZERO_COMM_SELF, NULL, g_e, &inner, err, sizeof err);
    CHECK(s == ZERO_OK, "self comm: %s", err);
    if (s != ZERO_OK) return NULL;
    s = zero__comm_devstage_create(inner, &g_dev, &ds);
    CHECK(s == ZERO_OK, "devstage create");
    return ds;
}

static void part_b(void) {
    const int64_t base = other_now();
    const int64_t MiB = 1 << 20;
    zero_comm *ds = self_staged();
    if (!ds) return;
    long a0 = atomic_load(&g_pinned_allocs);
    CHECK(roundtrip(ds, 100, 1), "small roundtrip");
    CHECK(atomic_load(&g_pinned_allocs) == a0, "a 400-byte staging block was pinned");
    CHECK(other_now() - base == 4096, "small block: %lld bytes accounted, expected 4096 (malloc, cached)",
          (long long)(other_now() - base));
    CHECK(roundtrip(ds, 0, 2), "empty roundtrip");

    /* 1 MiB: pinned, cached, reused; the 4 KiB one goes (the pool never
     * exceeds the most held at once) */
    for (int i = 0; i < 5; i++) CHECK(roundtrip(ds, MiB / 4, 10 + (uint32_t)i), "1 MiB roundtrip %d", i);
    CHECK(atomic_load(&g_pinned_allocs) - a0 == 1, "5 x 1 MiB: %ld pinned blocks, expected 1",
          atomic_load(&g_pinned_allocs) - a0);
    CHECK(other_now() - base == MiB, "1 MiB cached: %lld bytes accounted", (long long)(other_now() - base));
    CHECK(other_peak() - base <= MiB + 4096, "peak %lld", (long long)(other_peak() - base));
    /* a smaller block reuses it */
    CHECK(roundtrip(ds, 300000 / 4, 20), "300 KB roundtrip");
    CHECK(atomic_load(&g_pinned_allocs) - a0 == 1, "300 KB after 1 MiB: a new pinned block");
    /* 2 MiB: a new block, and the 1 MiB one goes */
    CHECK(roundtrip(ds, 2 * MiB / 4, 21), "2 MiB roundtrip");
    CHECK(atomic_load(&g_pinned_allocs) - a0 == 2 && atomic_load(&g_pinned_live) == 1,
          "2 MiB: %ld pinned blocks allocated, %ld live (expected 2, 1)", atomic_load(&g_pinned_allocs) - a0,
          atomic_load(&g_pinned_live));
    CHECK(other_now() - base == 2 * MiB, "2 MiB: %lld bytes accounted", (long long)(other_now() - base));
    /* two at once (2 MiB + 1 MiB): then both stay; repeats allocate nothing */
    for (int rep = 0; rep < 3; rep++) {
        float *h1 = malloc(2 * MiB), *h2 = malloc(MiB);
        fill(h1, 2 * MiB / 4, 30), fill(h2, MiB / 4, 31);
        float *d1 = dev_copy_of(h1, 2 * MiB), *d2 = dev_copy_of(h2, MiB);
        zero_comm_req *q1 = NULL, *q2 = NULL;
        CHECK(zero__iallreduce(ds, d1, 2 * MiB / 4, ZERO_DTYPE_F32, ZERO_OP_SUM, &q1) == ZERO_OK, "2 MiB");
        CHECK(zero__iallreduce(ds, d2, MiB / 4, ZERO_DTYPE_F32, ZERO_OP_SUM, &q2) == ZERO_OK, "1 MiB");
        CHECK(zero__comm_wait(q2) == ZERO_OK && zero__comm_wait(q1) == ZERO_OK, "waits");
        CHECK(same(d1, h1, 2 * MiB) && same(d2, h2, MiB), "two in flight: wrong bytes");
        free(h1), free(h2), free(real(d1)), free(real(d2));
    }
    CHECK(atomic_load(&g_pinned_allocs) - a0 == 3, "2 + 1 MiB in flight, 3 times: %ld pinned blocks in all, expected 3",
          atomic_load(&g_pinned_allocs) - a0);
    CHECK(other_now() - base == 3 * MiB && other_peak() - base == 3 * MiB, "3 MiB: %lld bytes accounted, peak %lld",
          (long long)(other_now() - base), (long long)(other_peak() - base));

    /* 40 in flight at once: at most 32 free buffers stay cached */
    enum { K = 40 };
    for (int rep = 0; rep < 2; rep++) {
        const long before = atomic_load(&g_pinned_allocs);
        float *d[K];
        zero_comm_req *q[K];
        const size_t n = 16384; /* 64 KiB */
        for (int i = 0; i < K; i++) {
            float *h = malloc(n * 4);
            fill(h, n, 40 + (uint32_t)i);
            d[i] = dev_copy_of(h, n * 4);
            free(h);
            CHECK(zero__iallreduce(ds, d[i], n, ZERO_DTYPE_F32, ZERO_OP_SUM, &q[i]) == ZERO_OK, "40: issue");
        }
        for (int i = 0; i < K; i++) {
            CHECK(zero__comm_wait(q[i]) == ZERO_OK, "40: wait");
            float *h = malloc(n * 4);
            fill(h, n, 40 + (uint32_t)i);
            CHECK(same(d[i], h, n * 4), "40 in flight: block %d wrong", i);
            free(h), free(real(d[i]));
        }
        CHECK(atomic_load(&g_pinned_live) == 32, "40 in flight: %ld pinned blocks kept, expected 32",
              atomic_load(&g_pinned_live));
        /* the first time 38 miss (the 1 and 2 MiB blocks serve two); then
         * 32 are cached and 8 more are needed each time */
        CHECK(atomic_load(&g_pinned_allocs) - before == (rep == 0 ? 38 : 8), "40 in flight (%d): %ld new blocks",
              rep, atomic_load(&g_pinned_allocs) - before);
    }

    /* splits share the pool; threads at once on their own splits */
    enum { T = 4 };
    zero_comm *kids[T] = {0};
    hammer hm[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) CHECK(zero__comm_split(ds, 0, 0, &kids[i]) == ZERO_OK && kids[i], "split %d", i);
    const long before = atomic_load(&g_pinned_allocs);
    const int64_t held_before = other_now();
    for (int i = 0; i < T; i++) {
        hm[i] = (hammer){kids[i], i, 0};
        pthread_create(&th[i], NULL, hammer_run, &hm[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        CHECK(hm[i].bad == 0, "thread %d: %d roundtrips came back wrong", i, hm[i].bad);
    }
    CHECK(atomic_load(&g_pinned_allocs) == before && other_now() == held_before,
          "4 threads on splits (2-64 KiB blocks): %ld new pinned blocks, %lld bytes more accounted; the shared pool "
          "had 30 blocks of 64 KiB", atomic_load(&g_pinned_allocs) - before, (long long)(other_now() - held_before));
    for (int i = 0; i < T; i++) zero__comm_free(kids[i]);
    zero__comm_free(ds);
    CHECK(other_now() == base, "after free: %lld staging bytes still accounted", (long long)(other_now() - base));
    CHECK(atomic_load(&g_pinned_live) == 0, "after free: %ld pinned blocks live", atomic_load(&g_pinned_live));
    if (rank_ == 0) printf("B: pool bounded, reused, shared by splits and threads, accounted from alloc to free\n");
}

/* ------------------------------------------------------------- part C */

static void part_c(void) {
    const int64_t base = other_now();
    atomic_store(&g_fail_pinned, 1);
    zero_comm *ds = self_staged();
    if (!ds) return;
    const long a0 = atomic_load(&g_pinned_allocs);
    for (int i = 0; i < 3; i++) CHECK(roundtrip(ds, 262144, 50 + (uint32_t)i), "no pinned memory: roundtrip %d", i);
    CHECK(atomic_load(&g_pinned_allocs) == a0, "pinned allocation refused, yet counted");
    CHECK(other_now() - base == 1 << 20, "malloc fallback: %lld bytes accounted, expected 1 MiB",
          (long long)(other_now() - base));
    zero__comm_free(ds);
    CHECK(other_now() == base, "malloc fallback: %lld bytes accounted after free", (long long)(other_now() - base));
    atomic_store(&g_fail_pinned, 0);
    if (rank_ == 0) printf("C: no pinned memory: malloc'd staging, same bytes, same accounting\n");
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    if (world_ > 8) {
        if (rank_ == 0) fprintf(stderr, "at most 8 ranks\n");
        MPI_Finalize();
        return 1;
    }
    part_a();
    /* B and C: a CPU engine over the self communicator, for its memory stats */
    zero_engine_options o = ZERO_ENGINE_OPTIONS_INIT;
    o.config_json = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 0}}";
    o.plugin = "stage0";
    o.comm_kind = ZERO_COMM_SELF;
    char err[512] = "";
    zero_status s = zero_engine_create(&o, &g_e, err, sizeof err);
    CHECK(s == ZERO_OK, "engine: %s", err);
    if (s == ZERO_OK) {
        part_b();
        part_c();
        zero_engine_destroy(g_e);
    }
    int rc = check_finish();
    MPI_Finalize();
    return rc;
}
