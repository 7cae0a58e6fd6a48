/* Memory accountant: per tag/tier current and peak, peak of the total,
 * alignment and zero-fill, table integrity under churn, and concurrent
 * alloc/free from several threads. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "memory.h"

static zero_memory_stats stats_of(zero__mem *m) {
    /* (not ZERO_MEMORY_STATS_INIT: it trips -Wmissing-field-initializers) */
    zero_memory_stats s;
    memset(&s, 0, sizeof(s));
    s.struct_size = sizeof(s);
    zero__mem_stats(m, &s);
    return s;
}

static void test_basic_accounting(void) {
    zero__mem *m = zero__mem_create();
    CHECK(m != NULL, "create");
    unsigned char *a = zero__mem_alloc(m, ZERO_TIER_DEVICE, ZERO_MEM_PARAMS, 1000);
    unsigned char *b = zero__mem_alloc(m, ZERO_TIER_DEVICE, ZERO_MEM_OPTIM, 3000);
    unsigned char *c = zero__mem_alloc(m, ZERO_TIER_HOST, ZERO_MEM_MASTER, 77);
    CHECK(a && b && c, "alloc");
    CHECK(((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0 && ((uintptr_t)c % 64) == 0, "64-byte aligned");
    int nonzero = 0;
    for (int i = 0; i < 1000; ++i) nonzero += a[i] != 0;
    for (int i = 0; i < 3000; ++i) nonzero += b[i] != 0;
    CHECK_EQ_INT(nonzero, 0);
    zero_memory_stats s = stats_of(m);
    CHECK_EQ_INT(s.current[ZERO_TIER_DEVICE][ZERO_MEM_PARAMS], 1000);
    CHECK_EQ_INT(s.current[ZERO_TIER_DEVICE][ZERO_MEM_OPTIM], 3000);
    CHECK_EQ_INT(s.current[ZERO_TIER_HOST][ZERO_MEM_MASTER], 77);
    CHECK_EQ_INT(s.current[ZERO_TIER_HOST][ZERO_MEM_PARAMS], 0);
    CHECK_EQ_INT(s.current_total[ZERO_TIER_DEVICE], 4000);
    CHECK_EQ_INT(s.current_total[ZERO_TIER_HOST], 77);

    /* peak of the total is not the sum of per-tag peaks */
    zero__mem_free(m, b);                                                  /* device: 1000 */
    void *d = zero__mem_alloc(m, ZERO_TIER_DEVICE, ZERO_MEM_BUCKETS, 2500); /* device: 3500 */
    s = stats_of(m);
    CHECK_EQ_INT(s.current[ZERO_TIER_DEVICE][ZERO_MEM_OPTIM], 0);
    CHECK_EQ_INT(s.peak[ZERO_TIER_DEVICE][ZERO_MEM_OPTIM], 3000);
    CHECK_EQ_INT(s.peak[ZERO_TIER_DEVICE][ZERO_MEM_BUCKETS], 2500);
    CHECK_EQ_INT(s.current_total[ZERO_TIER_DEVICE], 3500);
    CHECK_EQ_INT(s.peak_total[ZERO_TIER_DEVICE], 4000);

    /* zero bytes: unique, freeable, counted as 0 */
    void *z1 = zero__mem_alloc(m, ZERO_TIER_HOST, ZERO_MEM_OTHER, 0);
    void *z2 = zero__mem_alloc(m, ZERO_TIER_HOST, ZERO_MEM_OTHER, 0);
    CHECK(z1 && z2 && z1 != z2, "zero-byte blocks are unique");
    CHECK_EQ_INT(stats_of(m).current[ZERO_TIER_HOST][ZERO_MEM_OTHER], 0);
    zero__mem_free(m, z1);
    zero__mem_free(m, z2);

    /* bad tier/tag, unknown pointer, NULL, double free: no crash, no change */
    CHECK(zero__mem_alloc(m, ZERO_NTIERS, ZERO_MEM_OTHER, 8) == NULL, "bad tier");
    CHECK(zero__mem_alloc(m, ZERO_TIER_HOST, ZERO_MEM_NTAGS, 8) == NULL, "bad tag");
    int local;
    zero__mem_free(m, &local);
    zero__mem_free(m, NULL);
    zero__mem_free(m, d);
    zero__mem_free(m, d);
    s = stats_of(m);
    CHECK_EQ_INT(s.current_total[ZERO_TIER_DEVICE], 1000);
    CHECK_EQ_INT(s.current_total[ZERO_TIER_HOST], 77);

    /* an older caller with a shorter struct gets only its own fields */
    struct {
        zero_memory_stats s;
        uint64_t canary;
    } box;
    memset(&box, 0xAB, sizeof(box));
    box.s.struct_size = (uint32_t)offsetof(zero_memory_stats, current_total);
    zero__mem_stats(m, &box.s);
    CHECK_EQ_INT(box.s.current[ZERO_TIER_DEVICE][ZERO_MEM_PARAMS], 1000);
    CHECK(box.s.current_total[ZERO_TIER_DEVICE] == 0xABABABABABABABABull, "field past struct_size untouched");

    /* destroy frees what is left (a and c): checked by ASan/valgrind runs */
    zero__mem_destroy(m);
}

/* Many blocks, freed in a scrambled order, exercise table growth and the
 * backward-shift deletion. */
static void test_churn(void) {
    enum { N = 5000 };
    zero__mem *m = zero__mem_create();
    static void *p[N];
    static size_t sz[N];
    uint64_t want = 0;
    for (int i = 0; i < N; ++i) {
        sz[i] = (size_t)(i % 97) * 8 + 1;
        p[i] = zero__mem_alloc(m, ZERO_TIER_HOST, (zero_mem_tag)(i % ZERO_MEM_NTAGS), sz[i]);
        want += sz[i];
    }
    CHECK_EQ_INT(stats_of(m).current_total[ZERO_TIER_HOST], want);
    for (int k = 0; k < N; ++k) {
        int i = (int)(((uint64_t)k * 7919u) % N); /* 7919 is prime, coprime with N: a permutation */
        if (k % 3 == 0) continue;
        zero__mem_free(m, p[i]);
        want -= sz[i];
        p[i] = NULL;
    }
    zero_memory_stats s = stats_of(m);
    CHECK_EQ_INT(s.current_total[ZERO_TIER_HOST], want);
    uint64_t per_tag = 0;
    for (int t = 0; t < ZERO_MEM_NTAGS; ++t) per_tag += s.current[ZERO_TIER_HOST][t];
    CHECK_EQ_INT(per_tag, want);
    /* every surviving block is still found (free reduces the count exactly) */
    for (int i = 0; i < N; ++i)
        if (p[i]) {
            zero__mem_free(m, p[i]);
            want -= sz[i];
        }
    CHECK_EQ_INT(want, 0);
    CHECK_EQ_INT(stats_of(m).current_total[ZERO_TIER_HOST], 0);
    zero__mem_destroy(m);
}

typedef struct thread_arg {
    zero__mem *m;
    int id;
} thread_arg;

static void *churn_thread(void *vp) {
    thread_arg *a = vp;
    void *held[64] = {0};
    for (int it = 0; it < 20000; ++it) {
        int slot = (it * 13 + a->id) % 64;
        if (held[slot]) zero__mem_free(a->m, held[slot]);
        held[slot] = zero__mem_alloc(a->m, (zero_mem_tier)(a->id % ZERO_NTIERS), ZERO_MEM_BUCKETS,
                                     (size_t)(1 + (it % 5)) * 16);
        if (held[slot]) ((unsigned char *)held[slot])[0] = 1;
    }
    for (int s = 0; s < 64; ++s) zero__mem_free(a->m, held[s]);
    return NULL;
}

static void test_threads(void) {
    enum { T = 4 };
    zero__mem *m = zero__mem_create();
    pthread_t th[T];
    thread_arg args[T];
    for (int i = 0; i < T; ++i) {
        args[i] = (thread_arg){m, i};
        CHECK_EQ_INT(pthread_create(&th[i], NULL, churn_thread, &args[i]), 0);
    }
    for (int i = 0; i < T; ++i) pthread_join(th[i], NULL);
    zero_memory_stats s = stats_of(m);
    CHECK_EQ_INT(s.current_total[ZERO_TIER_DEVICE], 0);
    CHECK_EQ_INT(s.current_total[ZERO_TIER_HOST], 0);
    /* 2 threads per tier, each holding at most 64 blocks of <= 80 bytes */
    CHECK(s.peak_total[ZERO_TIER_DEVICE] > 0 && s.peak_total[ZERO_TIER_DEVICE] <= 2 * 64 * 80, "peak %llu",
          (unsigned long long)s.peak_total[ZERO_TIER_DEVICE]);
    zero__mem_destroy(m);
}

int main(void) {
    test_basic_accounting();
    test_churn();
    test_threads();
    return check_finish();
}
